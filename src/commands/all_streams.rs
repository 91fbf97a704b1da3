//! `generate --os-stream all`: one run per OS stream of the release, each
//! into its own directory, then `streams.json` over them (the
//! coreos-bootimages ConfigMap's `data.streams`).
use crate::cli::GenerateArgs;
use crate::pipeline::load::Loaded;
use crate::publish::stream::{self, STREAMS_JSON};
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
    run_one: impl Fn(GenerateArgs, Option<Loaded>) -> Result<crate::pipeline::Ran>,
) -> Result<()> {
    let mut input = a.input.clone();
    input.os_stream = None;
    let settings = super::input_settings(&input)?;
    let _out_lock = crate::util::lock::DirLock::output(&a.output)?;
    // The release read, its signature checked, and every stream's OS
    // imported once, before any stream is built.
    let all = super::block_on(crate::pipeline::load::load_all(&settings, !a.dry_run))?;
    let mut streams = serde_json::Map::new();
    for loaded in all {
        let dir = loaded.stream_key();
        let (class, tag) = (
            loaded.resolved.os_stream_class.clone(),
            loaded.resolved.os_tag.clone(),
        );
        crate::util::ui::status(format!(
            "--os-stream all: stream {} (release tag {tag}) into {}",
            class.as_deref().unwrap_or("(none)"),
            a.output.join(&dir).display()
        ));
        let mut one = a.clone();
        one.input.os_stream = Some(tag);
        one.output = a.output.join(&dir);
        // --base-url serves <output>: this stream's files are under <dir>.
        one.base_url = a
            .base_url
            .as_deref()
            .map(|u| format!("{}/{dir}", u.trim_end_matches('/')));
        let ran = run_one(one, Some(loaded))?;
        if let Some(s) = &ran.stream {
            // Its locations as seen from streams.json (`<dir>/<file>`).
            let sub = a.output.join(&dir);
            let s = crate::publish::merge::located(s, &sub.join(stream::STREAM_JSON), &a.output)?;
            streams.insert(class.unwrap_or_default(), serde_json::to_value(s)?);
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
