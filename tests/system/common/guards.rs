//! The tests' drop guards, one type per kind of thing a test must not leave
//! behind (even when it panics): a child process ([`ChildGuard`], killed
//! and reaped), a server thread ([`ServerThread`], told to stop and
//! joined), a loop device ([`Loop`], detached), a mount ([`Mnt`], unmounted,
//! then its loop device detached) and a directory ([`RmDir`], removed).
//! Commands run through [`super::must`]; nothing else flows back in.
use super::must;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A child process (a server the test started), killed and reaped when
/// dropped. Put it first in a struct whose other fields it uses (its
/// directory): fields drop in declaration order.
pub struct ChildGuard(pub Child);

impl std::ops::Deref for ChildGuard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A thread serving until dropped: the drop sets its stop flag, then joins
/// it.
pub struct ServerThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ServerThread {
    /// Run `body` on a thread of its own; it is given the stop flag and
    /// must return soon after the flag is set.
    pub fn spawn(body: impl FnOnce(Arc<AtomicBool>) + Send + 'static) -> ServerThread {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || body(s));
        ServerThread {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A loop device (its path), detached on drop.
pub struct Loop(pub String);
impl Loop {
    /// A read-only device over `file` from `offset` (`size` bytes, or to
    /// the end), with `sector`-byte logical sectors.
    pub fn new(file: &Path, offset: u64, size: Option<u64>, sector: u64) -> Loop {
        let mut c = Command::new("losetup");
        c.args([
            "--find",
            "--show",
            "--read-only",
            &format!("--offset={offset}"),
            &format!("--sector-size={sector}"),
        ]);
        if let Some(s) = size {
            c.arg(format!("--sizelimit={s}"));
        }
        Loop(must(c.arg(file)))
    }

    /// A read-write device over the whole of `file`.
    pub fn rw(file: &Path) -> Loop {
        Loop(must(
            Command::new("losetup").args(["--find", "--show"]).arg(file),
        ))
    }
}
impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

/// A mount (its mount point), unmounted on drop; then the loop device it
/// was mounted from, if any, is detached.
pub struct Mnt(
    pub PathBuf,
    /// The loop device under the mount.
    Option<Loop>,
    /// A failed unmount is retried lazily (`umount -l`).
    bool,
);
impl Mnt {
    /// A read-only mount at `at` of the `fstype` filesystem in
    /// `file[offset..offset+size)` (through a loop device), with `opts`.
    pub fn new(file: &Path, offset: u64, size: u64, fstype: &str, opts: &str, at: &Path) -> Mnt {
        let l = Loop::new(file, offset, Some(size), 512);
        let dev = l.0.clone();
        Mnt::mount(&["-t", fstype, "-o", opts], &dev, at, Some(l), false)
    }

    /// The filesystem of a loop device, mounted at `at` with the defaults
    /// (read-write).
    pub fn dev(l: Loop, at: &Path) -> Mnt {
        let dev = l.0.clone();
        Mnt::mount(&[], &dev, at, Some(l), false)
    }

    /// A tmpfs with `options` at `at`; a failed unmount is retried lazily.
    pub fn tmpfs(at: &Path, options: &str) -> Mnt {
        Mnt::mount(&["-t", "tmpfs", "-o", options], "none", at, None, true)
    }

    /// `mount ARGS SRC AT`, `at` created first. `l` is held (and, if
    /// the mount fails, detached).
    fn mount(args: &[&str], src: &str, at: &Path, l: Option<Loop>, lazy: bool) -> Mnt {
        std::fs::create_dir_all(at).unwrap();
        must(Command::new("mount").args(args).arg(src).arg(at));
        Mnt(at.to_path_buf(), l, lazy)
    }

    /// The loop device under the mount.
    pub fn loop_dev(&self) -> &str {
        &self.1.as_ref().expect("a mount of a loop device").0
    }
}
impl Drop for Mnt {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok && self.2 {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// A directory removed, with what is in it, when dropped.
pub struct RmDir(pub PathBuf);
impl Drop for RmDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
