//! An allocator that enforces the fuzzing memory limit: any allocation that
//! would take the live heap over `LIMIT` aborts the process with a message
//! (libFuzzer reports the abort as a crash and saves the input).
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// 1 GiB: the bound on what one input may make a parser allocate.
pub const LIMIT: usize = 1 << 30;

pub struct Capped;

static LIVE: AtomicUsize = AtomicUsize::new(0);

fn over(size: usize) -> ! {
    // No allocation here: write(2) a fixed message, then abort.
    let msg = b"fuzz: allocation over the 1 GiB limit\n";
    // SAFETY: writing a static buffer to fd 2.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    let _ = size;
    std::process::abort()
}

// SAFETY: every call is forwarded unchanged to the system allocator, which
// upholds GlobalAlloc's contract; the counter only adds a size check.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size() > LIMIT {
            over(l.size());
        }
        // SAFETY: forwarding the caller's layout to the system allocator.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size() > LIMIT {
            over(l.size());
        }
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with this layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if new > l.size() {
            let grow = new - l.size();
            if LIVE.fetch_add(grow, Ordering::Relaxed) + grow > LIMIT {
                over(new);
            }
        } else {
            LIVE.fetch_sub(l.size() - new, Ordering::Relaxed);
        }
        // SAFETY: `p` came from `alloc` with layout `l`.
        unsafe { System.realloc(p, l, new) }
    }
}
