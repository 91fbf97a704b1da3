//! `generate --os-stream all`: one run per OS stream of the release, each
//! into its own directory, then `streams.json` over them (the
//! coreos-bootimages ConfigMap's `data.streams`).
use crate::cli::GenerateArgs;
use crate::publish::stream::{self, STREAMS_JSON};
use crate::release::osimages;
use anyhow::Result;

/// `--os-stream all`: every OS stream of the release.
pub const ALL_STREAMS: &str = "all";

/// One run per OS stream, into `<output>/<stream>` (OKD's one stream, which
/// has no class: `<output>/<tag>`), then `<output>/streams.json`: each
/// stream's stream.json under its ConfigMap key (`""` for a stream without
/// class, as OKD's `scos.json`), its file locations relative to
/// streams.json (`<stream>/<file>`) unless --base-url made them URLs.
pub(super) fn run(
    a: GenerateArgs,
    run_one: impl Fn(GenerateArgs) -> Result<crate::pipeline::Ran>,
) -> Result<()> {
    let mut input = a.input.clone();
    input.os_stream = None;
    let settings = super::input_settings(&input)?;
    let loaded = super::block_on(crate::pipeline::load::load(&settings, false))?;
    let found = &loaded.resolved.os_images;
    let picks = osimages::all_streams(found);
    if picks.is_empty() {
        // Says why: each image found and why it does not boot.
        osimages::choose(found, &loaded.resolved.release_version, None)?;
    }
    let _out_lock = crate::util::lock::DirLock::output(&a.output)?;
    let mut streams = serde_json::Map::new();
    for i in &picks {
        let f = &found[*i];
        let dir = osimages::stream_key(f.stream_class.as_deref(), &f.tag);
        crate::util::ui::status(format!(
            "--os-stream all: stream {} (release tag {}) into {}",
            f.stream_class.as_deref().unwrap_or("(none)"),
            f.tag,
            a.output.join(&dir).display()
        ));
        let mut one = a.clone();
        one.input.os_stream = Some(f.tag.clone());
        one.output = a.output.join(&dir);
        // --base-url serves <output>: this stream's files are under <dir>.
        one.base_url = a
            .base_url
            .as_deref()
            .map(|u| format!("{}/{dir}", u.trim_end_matches('/')));
        let ran = run_one(one)?;
        if let Some(s) = &ran.stream {
            // Its locations as seen from streams.json (`<dir>/<file>`).
            let sub = a.output.join(&dir);
            let s = crate::publish::merge::located(s, &sub.join(stream::STREAM_JSON), &a.output)?;
            streams.insert(
                f.stream_class.clone().unwrap_or_default(),
                serde_json::to_value(s)?,
            );
        }
    }
    if !a.dry_run {
        let mut data = serde_json::to_vec_pretty(&streams)?;
        data.push(b'\n');
        crate::publish::meta::write_atomic(&a.output, STREAMS_JSON, &data)?;
        crate::util::ui::status(format!(
            "--os-stream all: {} stream(s) ({}); {} holds them keyed as the coreos-bootimages ConfigMap's data.streams",
            streams.len(),
            streams.keys().map(|k| if k.is_empty() { "\"\"" } else { k.as_str() }).collect::<Vec<_>>().join(", "),
            a.output.join(STREAMS_JSON).display()
        ));
    }
    Ok(())
}
