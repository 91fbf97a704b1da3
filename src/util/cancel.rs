//! Cooperative cancellation (the flag, `check`, pause points: the leaf
//! library's `util::cancel`), and the one async entry that ends cleanly on
//! SIGINT/SIGTERM.
pub use bootimage_core::util::cancel::*;

/// Run an async command on a runtime, ending cleanly on SIGINT/SIGTERM: the
/// command's future is dropped (its guards and temp dirs clean up) and the
/// process exits 130 or 143.
pub fn block_on<T, F: std::future::Future<Output = anyhow::Result<T>>>(
    fut: F,
) -> anyhow::Result<T> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // A panic inside the command must not leave the runtime's drop waiting
    // for ever on a blocking task (below): catch it, shut down with the
    // same bound, then let it go on.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::select! {
                r = fut => r,
                _ = tokio::signal::ctrl_c() => Err(anyhow::Error::new(Interrupted(130))),
                _ = term.recv() => Err(anyhow::Error::new(Interrupted(143))),
            }
        })
    }));
    // Do not wait for ever on a blocking task stuck on a stalled registry
    // connection (skopeo's proxy session): the error is already decided.
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    r.unwrap_or_else(|p| std::panic::resume_unwind(p))
}
