//! `generate`: the flags become validated settings, the pipeline runs them.
use crate::cli::GenerateArgs;
use crate::plan::settings::{Flags, Settings};
use anyhow::Result;

pub fn run(a: GenerateArgs) -> Result<()> {
    crate::util::cancel::install()?;
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
        threads: a.threads,
    };
    let settings = Settings::new(flags, || super::input_settings(&a.input))?;
    // Two runs into one output directory: the second refuses at once.
    let _out_lock = crate::util::lock::DirLock::output(&settings.output)?;
    if !settings.dry_run {
        recover(&settings.input.cache_dir, &settings.output);
    }
    crate::pipeline::run(&settings)?;
    if let Some(v) = vsphere {
        if !settings.dry_run {
            let ova = vmware_ova(&settings.output)?;
            super::vsphere::import_ova(&v, &ova, &vsphere_target)?;
        }
    }
    Ok(())
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
