//! User-facing status lines on stderr (silenced by --quiet).
use std::sync::atomic::{AtomicBool, Ordering};

static QUIET: AtomicBool = AtomicBool::new(false);

pub fn set_quiet(q: bool) {
    QUIET.store(q, Ordering::Relaxed);
}

pub fn is_quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Print one status line to stderr.
pub fn status(msg: impl AsRef<str>) {
    if !is_quiet() {
        eprintln!("{}", msg.as_ref());
    }
}
