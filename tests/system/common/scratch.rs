//! Scratch directories of a test process: registered when a test first
//! uses one, removed when the process exits with every test passed, so
//! that the whole suite's disk use is that of its largest targets, not the
//! sum of all of them. scripts/suite.py runs each module of the `system`
//! binary (each target) as a process of its own; a bare `cargo test
//! --features boot` runs them all in one process, which keeps every
//! module's scratch until it ends. A failed test keeps them for a look, as
//! does `KEEP_TEST_SCRATCH=1`.
//!
//! On exit each process prints one line to stderr: what it removed (or
//! kept) and how much is free on the filesystem, so a CI log shows the
//! suite's disk use target by target.
use bootimage_gen::sys::stale;
use bootimage_gen::util::space;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

static DIRS: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
static PANICKED: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

/// `target/tmp/REL` of the checkout, registered as in [`scratch_at`].
pub fn scratch(rel: &str) -> PathBuf {
    scratch_at(super::top().join("target/tmp").join(rel))
}

/// Registers `dir` for removal when this test process exits with no test
/// failed; gives it back. It is neither created nor emptied here.
pub fn scratch_at(dir: PathBuf) -> PathBuf {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.store(true, Ordering::SeqCst);
            previous(info)
        }));
        // SAFETY: atexit(3) with a plain extern "C" function that takes
        // and returns nothing; it runs once, after main.
        let rc = unsafe { libc::atexit(at_exit) };
        assert_eq!(rc, 0, "atexit");
    });
    DIRS.lock().unwrap().insert(dir.clone());
    dir
}

extern "C" fn at_exit() {
    // A panic must not unwind out of an extern "C" function.
    let _ = std::panic::catch_unwind(clean_up);
}

fn clean_up() {
    let dirs: Vec<PathBuf> = std::mem::take(&mut *DIRS.lock().unwrap())
        .into_iter()
        .filter(|d| d.exists())
        .collect();
    let Some(first) = dirs.first() else { return };
    let names = dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let keep = if PANICKED.load(Ordering::SeqCst) {
        Some("a test failed")
    } else if std::env::var_os("KEEP_TEST_SCRATCH").is_some_and(|v| v != "0") {
        Some("KEEP_TEST_SCRATCH is set")
    } else {
        None
    };
    if let Some(why) = keep {
        eprintln!(
            "test scratch: kept {names} ({why}); {} MiB free there",
            free_mib(first.parent().unwrap_or(first))
        );
        return;
    }
    let mut removed = 0u64;
    for d in &dirs {
        if let Some(m) = space::mounts_under(d).first() {
            eprintln!(
                "test scratch: kept {}: {} is still mounted under it",
                d.display(),
                m.display()
            );
            continue;
        }
        let size = stale::du(d);
        match std::fs::remove_dir_all(d) {
            Ok(()) => removed += size,
            Err(e) => eprintln!("test scratch: removing {}: {e}", d.display()),
        }
    }
    eprintln!(
        "test scratch: removed {names} ({} MiB); {} MiB free there now",
        removed >> 20,
        free_mib(first.parent().unwrap_or(first))
    );
}

/// MiB free to an unprivileged writer on the filesystem holding `p`.
fn free_mib(p: &Path) -> u64 {
    space::free_total(p).map_or(0, |(free, _)| free >> 20)
}
