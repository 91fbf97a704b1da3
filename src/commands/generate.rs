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
    crate::pipeline::run(&settings)
}
