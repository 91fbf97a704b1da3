//! Command handlers, named after the CLI path.
pub mod completions;
pub mod generate;
pub mod input;
pub mod inspect;
pub mod platforms;

use crate::cli::{Cli, Command};
use anyhow::Result;

/// Run a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Inspect(a) => inspect::run(a),
        Command::Generate(mut a) => {
            // In the tool's image: -o defaults to the /out volume, and the
            // output must be a writable volume (said in podman's terms).
            a.output = crate::util::container::output_dir(&a.output);
            if !a.dry_run {
                crate::util::container::check_output(&a.output)?;
            }
            generate::run(a)
        }
        Command::Platforms(a) => platforms::run(a),
        Command::VmJob(a) => crate::backend::vm::job_main(a),
        Command::Completions(a) => completions::completions(a),
        Command::Man(a) => completions::man(a),
    }
}

/// Run an async command on a runtime, ending cleanly on SIGINT/SIGTERM: the
/// command's future is dropped (its guards and temp dirs clean up) and the
/// process exits 130 or 143.
pub fn block_on<T, F: std::future::Future<Output = Result<T>>>(fut: F) -> Result<T> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let r = rt.block_on(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = fut => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::Error::new(Interrupted(130))),
            _ = term.recv() => Err(anyhow::Error::new(Interrupted(143))),
        }
    });
    // Do not wait for ever on a blocking task stuck on a stalled registry
    // connection (skopeo's proxy session): the error is already decided.
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    r
}

pub use crate::util::cancel::Interrupted;
