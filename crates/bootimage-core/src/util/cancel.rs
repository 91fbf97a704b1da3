//! Cooperative cancellation: SIGINT/SIGTERM set a flag that long-running
//! steps poll, so every guard unwinds (unmount, detach, remove temp files)
//! before the process exits 130 or 143.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// The run was stopped by a signal; the payload is the exit code.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by a signal; cleaned up")]
pub struct Interrupted(pub i32);

static FLAG: OnceLock<Arc<AtomicUsize>> = OnceLock::new();

fn flag() -> &'static Arc<AtomicUsize> {
    FLAG.get_or_init(|| Arc::new(AtomicUsize::new(0)))
}

/// Route SIGINT and SIGTERM to the flag (idempotent). After this the
/// signals no longer kill the process: code must poll [`check`].
pub fn install() -> anyhow::Result<()> {
    static DONE: OnceLock<()> = OnceLock::new();
    if DONE.get().is_some() {
        return Ok(());
    }
    signal_hook::flag::register_usize(signal_hook::consts::SIGINT, flag().clone(), 130)?;
    signal_hook::flag::register_usize(signal_hook::consts::SIGTERM, flag().clone(), 143)?;
    let _ = DONE.set(());
    Ok(())
}

/// The exit code of the signal received, if any.
pub fn pending() -> Option<i32> {
    match flag().load(Ordering::Relaxed) {
        0 => None,
        n => Some(n as i32),
    }
}

/// `Err(Interrupted)` once a signal has arrived.
pub fn check() -> anyhow::Result<()> {
    match pending() {
        Some(code) => Err(anyhow::Error::new(Interrupted(code))),
        None => Ok(()),
    }
}

/// For tests: raise the flag as a signal would.
#[doc(hidden)]
pub fn raise_for_test(code: i32) {
    flag().store(code as usize, Ordering::Relaxed);
}

/// Environment variable naming a point where the run waits for a signal
/// (for interrupt tests: `mkfs`, `deploy`, `encode`).
pub const PAUSE_ENV: &str = "BOOTIMAGE_GEN_PAUSE_AT";

/// If `$BOOTIMAGE_GEN_PAUSE_AT` names `point`, say so on stderr and wait
/// until a signal arrives, then return `Interrupted`. Otherwise a no-op
/// apart from [`check`]. Lets tests interrupt the run at a known step.
pub fn pause_point(point: &str) -> anyhow::Result<()> {
    if std::env::var(PAUSE_ENV).is_ok_and(|p| p == point) {
        eprintln!("bootimage-gen: paused at {point}");
        while pending().is_none() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    check()
}
