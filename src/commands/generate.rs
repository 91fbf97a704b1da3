//! `generate`: the flags become validated settings, the pipeline runs them,
//! the publish stage ([`super::publish`]) sends the output where asked.
use crate::cli::GenerateArgs;
use crate::plan::preflight::Named;
use crate::plan::settings::{self, Settings};
use anyhow::Result;

pub fn run(a: GenerateArgs) -> Result<()> {
    crate::util::cancel::install()?;
    // Every publish target checked (and reached) before any build.
    let targets = super::publish::Targets::check(&a)?;
    let output = a.output.clone();
    // The stream a one-stream run pushes as: its OS stream key, as the
    // directories of --os-stream all are named, so cells of a matrix that
    // build other streams of one release into one REF each keep a part.
    let one = |a: GenerateArgs, loaded| -> Result<crate::pipeline::Ran> {
        let ran = run_one(&a, loaded)?;
        targets.after_run(&ran, &a.output)?;
        Ok(ran)
    };
    let stream = if a.input.os_stream.as_deref() == Some(super::all_streams::ALL_STREAMS) {
        super::all_streams::run(a, one)?;
        None
    } else {
        Some(one(a, None)?.os_stream)
    };
    targets.after_all(&output, stream.as_deref())
}

/// One run: settings, the output directory locked and swept of what killed
/// runs left, the pipeline (from the release as `loaded`, when the caller
/// loaded it).
fn run_one(
    a: &GenerateArgs,
    loaded: Option<crate::pipeline::load::Loaded>,
) -> Result<crate::pipeline::Ran> {
    let settings = settings(a)?;
    // Two runs into one output directory: the second refuses at once.
    let _out_lock = crate::util::lock::DirLock::output(&settings.output)?;
    if !settings.dry_run {
        recover(&settings.input.cache_dir, &settings.output);
    }
    crate::pipeline::run(&settings, loaded)
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
        mkfs_tools: a.mkfs_tools.clone(),
        stage_in: a.stage_in,
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
