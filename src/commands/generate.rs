//! `generate`: the flags become validated settings, the pipeline runs them.
use crate::cli::GenerateArgs;
use crate::plan::preflight::Named;
use crate::plan::settings::{Flags, Settings};
use crate::platforms::Upload;
use anyhow::Result;

/// `--os-stream all`: every OS stream of the release.
pub const ALL_STREAMS: &str = "all";

pub fn run(a: GenerateArgs) -> Result<()> {
    crate::util::cancel::install()?;
    // --sign-key: read, and its password checked, before any work.
    let key = super::registry::signing_key(a.sign_key.as_deref())?;
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
        super::all_streams::run(a, run_one)?;
        None
    } else {
        Some(run_one(a)?.os_stream)
    };
    if let Some(t) = push {
        t.push(&output, stream.as_deref(), key.as_ref())?;
    }
    Ok(())
}

fn run_one(a: GenerateArgs) -> Result<crate::pipeline::Ran> {
    // vSphere: settings checked before the build, the import after it.
    let vsphere = match &a.vsphere_template {
        Some(name) => {
            if !Named::parse(&a.platforms)?.upload_to(Upload::Vsphere) {
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
    let sign_key = a.sign_key.clone();
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
    if !settings.dry_run {
        let key = super::registry::signing_key(sign_key.as_deref())?;
        crate::trust::provenance::write(&settings.output, key.as_ref())?;
    }
    if let Some(v) = vsphere {
        if !settings.dry_run {
            super::vsphere::import_ova(&v, ran.upload(Upload::Vsphere)?, &vsphere_target)?;
        }
    }
    Ok(ran)
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
