//! `generate`: the flags become validated settings, the pipeline runs them.
use crate::cli::GenerateArgs;
use crate::plan::preflight::Named;
use crate::plan::settings::{self, Settings};
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
    let settings = settings(&a)?;
    // Two runs into one output directory: the second refuses at once.
    let _out_lock = crate::util::lock::DirLock::output(&settings.output)?;
    if !settings.dry_run {
        recover(&settings.input.cache_dir, &settings.output);
    }
    let ran = crate::pipeline::run(&settings)?;
    if !settings.dry_run {
        let key = super::registry::signing_key(a.sign_key.as_deref())?;
        crate::trust::provenance::write(&settings.output, key.as_ref())?;
    }
    if let Some(v) = vsphere {
        if !settings.dry_run {
            super::vsphere::import_ova(&v, ran.upload(Upload::Vsphere)?, &a.vsphere)?;
        }
    }
    Ok(ran)
}

/// `generate`'s flags read into [`Settings`], the one place each is read:
/// the platforms, the `--aws-*` group and what they need of each other,
/// compression, `--base-url` and `-o`, then the release input (in this
/// order, so a typo in a flag is named before the release is looked at).
fn settings(a: &GenerateArgs) -> Result<Settings> {
    let named = Named::parse(&a.platforms)?;
    let w = &a.aws;
    let aws = if w.aws_register {
        Some(crate::publish::aws::Settings::new(
            &w.aws_region,
            w.aws_endpoint_url.as_deref(),
            w.aws_ami_name.as_deref(),
        )?)
    } else {
        None
    };
    settings::check_uploads(&named, aws.as_ref())?;
    let compressor = a
        .compress
        .as_deref()
        .map(crate::io::compress::Compressor::parse)
        .transpose()?;
    settings::check_output(a.base_url.as_deref(), &a.output)?;
    Ok(Settings {
        input: super::input_settings(&a.input)?,
        named: named.specs,
        all: named.all,
        aws,
        compressor,
        base_url: a.base_url.clone(),
        output: a.output.clone(),
        backend: a.backend,
        vm: crate::backend::vm::VmSettings {
            vm_memory: a.vm.vm_memory,
            vm_cpus: a.vm.vm_cpus,
            vm_watchdog: a.vm.vm_watchdog,
        },
        progress: a.progress,
        dry_run: a.dry_run,
        ostree_archive: !a.no_ostree_archive,
        debug_raw_dir: a.debug_raw_dir.clone(),
        deploy_with_os: a.deploy_ostree == crate::cli::DeployOstree::Os,
        threads: a.threads.unwrap_or(0),
    })
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
