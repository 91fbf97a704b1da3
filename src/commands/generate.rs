//! `generate`: the flags become validated settings, the pipeline runs them.
use crate::cli::GenerateArgs;
use crate::plan::settings::{Flags, Settings};
use anyhow::Result;

/// `--os-stream all`: every OS stream of the release.
pub const ALL_STREAMS: &str = "all";
pub use crate::publish::stream::STREAMS_JSON;

pub fn run(a: GenerateArgs) -> Result<()> {
    crate::util::cancel::install()?;
    // --push: the registry reached (and the reference checked) first, so a
    // typo or a refused credential costs seconds, not a build.
    let push = match (&a.push, a.dry_run) {
        (Some(r), false) => Some(super::registry::generate_target(r, &a.input)?),
        (Some(r), true) => {
            let (_, d) =
                super::registry::push_reference(r).map_err(|e| e.context(format!("--push {r}")))?;
            crate::util::ui::status(format!("--dry-run: would push the output to {r} (tag {d})"));
            None
        }
        (None, _) => None,
    };
    let output = a.output.clone();
    // The stream a one-stream run pushes as: its OS stream key, as the
    // directories of --os-stream all are named, so cells of a matrix that
    // build other streams of one release into one REF each keep a part.
    let stream = if a.input.os_stream.as_deref() == Some(ALL_STREAMS) {
        run_all_streams(a)?;
        None
    } else {
        Some(run_one(a)?.os_stream)
    };
    if let Some(t) = push {
        t.push(&output, stream.as_deref())?;
    }
    Ok(())
}

/// One run per OS stream, into `<output>/<stream>` (OKD's one stream, which
/// has no class: `<output>/<tag>`), then `<output>/streams.json`: each
/// stream's stream.json under its ConfigMap key (`""` for a stream without
/// class, as OKD's `scos.json`), its file locations relative to
/// streams.json (`<stream>/<file>`) unless --base-url made them URLs.
fn run_all_streams(a: GenerateArgs) -> Result<()> {
    use crate::release::osimages;
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
        run_one(one)?;
        if !a.dry_run {
            // Its locations as seen from streams.json (`<dir>/<file>`).
            let sub = a.output.join(&dir);
            let s = crate::publish::stream::read_stream(&sub)?;
            let s = crate::publish::merge::located(
                &s,
                &sub.join(crate::publish::stream::STREAM_JSON),
                &a.output,
            )?;
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

fn run_one(a: GenerateArgs) -> Result<crate::pipeline::Ran> {
    // vSphere: settings checked before the build, the import after it.
    let vsphere = match &a.vsphere_template {
        Some(name) => {
            if !a.platforms.iter().any(|p| p == "vmware" || p == "all") {
                anyhow::bail!("--vsphere-template {name} needs the vmware platform: add `vmware` to the platforms");
            }
            Some(super::vsphere::settings(
                &a.vsphere,
                name,
                a.vsphere_insecure,
                Some(a.input.release.clone()),
            )?)
        }
        None => None,
    };
    let vsphere_target = a.vsphere.clone();
    let flags = Flags {
        platforms: a.platforms,
        aws: (&a.aws).into(),
        compress: a.compress,
        base_url: a.base_url,
        output: a.output,
        backend: a.backend.into(),
        vm: (&a.vm).into(),
        progress: a.progress.into(),
        dry_run: a.dry_run,
        no_ostree_archive: a.no_ostree_archive,
        debug_raw_dir: a.debug_raw_dir,
        deploy_with_os: a.deploy_ostree == crate::cli::DeployOstree::Os,
        threads: a.threads,
    };
    let settings = Settings::new(flags, || super::input_settings(&a.input))?;
    // Two runs into one output directory: the second refuses at once.
    let _out_lock = crate::util::lock::DirLock::output(&settings.output)?;
    if !settings.dry_run {
        recover(&settings.input.cache_dir, &settings.output);
    }
    let ran = crate::pipeline::run(&settings)?;
    if let Some(v) = vsphere {
        if !settings.dry_run {
            let ova = vmware_ova(&settings.output)?;
            super::vsphere::import_ova(&v, &ova, &vsphere_target)?;
        }
    }
    Ok(ran)
}

/// The vmware OVA the build wrote: meta.json `images.vmware.path`.
fn vmware_ova(out: &std::path::Path) -> Result<std::path::PathBuf> {
    use anyhow::Context;
    let meta = out.join(crate::publish::meta::META_JSON);
    let v: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&meta).with_context(|| format!("reading {}", meta.display()))?,
    )?;
    let p = v["images"]["vmware"]["path"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("{} lists no vmware image", meta.display()))?;
    Ok(out.join(p))
}

/// What killed runs left (their work dirs, VM, mounts, loop devices, and
/// `.partial` files in this output directory, which we now hold locked):
/// removed, with one line saying what. A failure here only warns: the run
/// itself does not depend on it.
fn recover(cache: &std::path::Path, out: &std::path::Path) {
    use crate::sys::stale;
    let t = std::time::Instant::now();
    let mut s = stale::sweep_output(out);
    if cache.is_dir() {
        match stale::sweep_cache(cache) {
            Ok(c) => s.add(c),
            Err(e) => tracing::warn!(
                "looking for leftovers of killed runs in {}: {e:#}",
                cache.display()
            ),
        }
    }
    tracing::info!("recovery sweep: {s} in {:.1?}", t.elapsed());
    if !s.is_empty() {
        crate::util::ui::status(format!(
            "recovered from a killed run: removed {s} (in {:.1?})",
            t.elapsed()
        ));
    }
}
