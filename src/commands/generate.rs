//! `generate`: the flags become validated settings, the pipeline runs them.
use crate::cli::GenerateArgs;
use crate::plan::settings::{Flags, Settings};
use anyhow::Result;

pub fn run(a: GenerateArgs) -> Result<()> {
    crate::util::cancel::install()?;
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
    crate::pipeline::run(&settings)
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
