//! Advisory file locks (flock(2)) that let any number of runs share one
//! cache: a lock file per shared entry (an OS import, the VM appliance)
//! holding the holder's PID and what it does, so that a waiting run can say
//! for whom it waits; and an exclusive lock on an output directory itself,
//! whose holder is found in /proc/locks (nothing is written into the
//! directory). The kernel drops a lock when its holder exits, killed or not,
//! so a lock is never stale.
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a waiting run retries (and checks for Ctrl-C).
const POLL: Duration = Duration::from_millis(200);

/// An exclusive lock held until dropped (or the process exits).
#[must_use = "the lock is released when this is dropped"]
#[derive(Debug)]
pub struct Lock {
    file: File,
    path: PathBuf,
    /// Exclusive holders write `PID n what` into the file (and clear it).
    exclusive: bool,
}

/// `flock(fd, LOCK_EX | LOCK_NB)`: `Ok(false)` when another holds it.
fn try_flock(f: &File) -> std::io::Result<bool> {
    try_flock_mode(f, libc::LOCK_EX)
}

/// `flock(fd, mode | LOCK_NB)`: `Ok(false)` when another holds it.
fn try_flock_mode(f: &File, mode: i32) -> std::io::Result<bool> {
    // SAFETY: flock on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::flock(f.as_raw_fd(), mode | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(e),
    }
}

impl Lock {
    /// Take the lock file `path` (created if absent) for `what`, waiting
    /// while another process holds it; says once (and again when the
    /// holder changes) for whom it waits. Ctrl-C stops the wait.
    pub fn wait(path: &Path, what: &str) -> Result<Lock> {
        Self::wait_mode(path, what, libc::LOCK_EX)
    }

    /// A shared lock on `path` for a run that uses a cache entry (any
    /// number of users; `gc` takes it exclusively, without waiting, before
    /// it removes the entry). Waits while the entry is being made.
    pub fn shared(path: &Path, what: &str) -> Result<Lock> {
        Self::wait_mode(path, what, libc::LOCK_SH)
    }

    /// The exclusive lock if nobody holds the file (exclusively or shared).
    pub fn try_exclusive(path: &Path) -> Result<Option<Lock>> {
        let file = Self::open(path)?;
        if !try_flock(&file).with_context(|| format!("locking {}", path.display()))? {
            return Ok(None);
        }
        Ok(Some(Lock {
            file,
            path: path.to_path_buf(),
            exclusive: false,
        }))
    }

    fn open(path: &Path) -> Result<File> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("opening lock file {}", path.display()))
    }

    fn wait_mode(path: &Path, what: &str, mode: i32) -> Result<Lock> {
        let file = Self::open(path)?;
        let mut told = String::new();
        loop {
            if try_flock_mode(&file, mode).with_context(|| format!("locking {}", path.display()))? {
                break;
            }
            let holder = holder_of(&file);
            if holder != told {
                crate::util::ui::status(format!(
                    "waiting for {} ({})",
                    if holder.is_empty() {
                        "another bootimage-gen run".to_string()
                    } else {
                        holder.clone()
                    },
                    path.display()
                ));
                tracing::info!("{what}: waiting for lock {}", path.display());
                told = holder;
            }
            crate::util::cancel::check()?;
            std::thread::sleep(POLL);
        }
        let mut l = Lock {
            file,
            path: path.to_path_buf(),
            exclusive: mode == libc::LOCK_EX,
        };
        if !l.exclusive {
            return Ok(l);
        }
        l.file.set_len(0)?;
        l.file.rewind()?;
        // One write of a whole record, newline-terminated: a waiter that
        // reads while it is being written sees no holder, never half a one.
        let record = format!("PID {} {what}\n", std::process::id());
        l.file.write_all(record.as_bytes())?;
        Ok(l)
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // Leave the file (removing it would race with a run that has opened
        // it and waits); the next holder overwrites the text.
        if self.exclusive {
            let _ = self.file.set_len(0);
        }
    }
}

/// What the holder of a lock file wrote (`PID n what`), or "".
/// Who holds the lock file `f`, as its holder wrote it; empty while the
/// record is not complete (being written) or unreadable.
fn holder_of(f: &File) -> String {
    let mut s = String::new();
    let mut r = f;
    if r.rewind().is_ok() && r.read_to_string(&mut s).is_ok() && s.ends_with('\n') {
        return s.trim().to_string();
    }
    String::new()
}

/// An exclusive lock on a directory (flock on the directory itself).
#[must_use = "the lock is released when this is dropped"]
#[derive(Debug)]
pub struct DirLock {
    _dir: File,
    /// Set when [`DirLock::output`] created the directory: it is removed
    /// again on drop if the run left it empty (a failed run creates nothing).
    created: Option<PathBuf>,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        if let Some(d) = &self.created {
            // Fails, as it should, unless the directory is empty.
            let _ = std::fs::remove_dir(d);
        }
    }
}

impl DirLock {
    /// Lock a run's output directory, creating it if absent, or fail at
    /// once naming the PID of the run that holds it.
    pub fn output(dir: &Path) -> Result<Option<DirLock>> {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating output directory {}", dir.display()))?;
        }
        let created = match std::fs::create_dir(dir) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("creating output directory {}", dir.display()))
            }
        };
        let l = Self::try_lock(dir, "output directory");
        match l {
            Ok(Some(mut l)) => {
                l.created = created.then(|| dir.to_path_buf());
                Ok(Some(l))
            }
            other => {
                if created {
                    let _ = std::fs::remove_dir(dir);
                }
                other
            }
        }
    }

    /// Lock `dir` (which must exist) or fail at once naming the PID that
    /// holds it. `None` when the filesystem does not support flock (the run
    /// goes on unlocked, as before).
    pub fn try_lock(dir: &Path, what: &str) -> Result<Option<DirLock>> {
        let f = File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
        match try_flock(&f) {
            Ok(true) => Ok(Some(DirLock {
                _dir: f,
                created: None,
            })),
            Ok(false) => {
                let who = match flock_holder(&f) {
                    Some(pid) => format!("bootimage-gen PID {pid}"),
                    None => "another bootimage-gen run".to_string(),
                };
                bail!(
                    "{what} {} is in use by {who}; wait for it to finish or choose another directory",
                    dir.display()
                )
            }
            Err(e) => {
                tracing::warn!(
                    "cannot lock {}: {e}; going on without a lock",
                    dir.display()
                );
                Ok(None)
            }
        }
    }
}

/// The PID holding a flock on the file `f` is open on, from /proc/locks
/// (`1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF`).
fn flock_holder(f: &File) -> Option<u32> {
    let m = f.metadata().ok()?;
    let dev = m.dev();
    let id = format!(
        "{:02x}:{:02x}:{}",
        libc::major(dev),
        libc::minor(dev),
        m.ino()
    );
    let me = std::process::id();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        // A waiter's line carries "->" after the number.
        if w.len() < 6 || w[1] != "FLOCK" || w[5] != id {
            return None;
        }
        let pid: u32 = w[4].parse().ok()?;
        (pid != me).then_some(pid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn dir_lock_names_the_holder() {
        let d = tempfile::tempdir().unwrap();
        // Another process (flock(1)) holds the directory.
        let mut c = Command::new("flock")
            .arg("--no-fork")
            .arg(d.path())
            .args(["sleep", "30"])
            .spawn()
            .expect("flock(1) (util-linux)");
        let t = std::time::Instant::now();
        let err = loop {
            match DirLock::try_lock(d.path(), "output directory") {
                Err(e) => break e.to_string(),
                Ok(l) => {
                    drop(l);
                    assert!(
                        t.elapsed() < Duration::from_secs(10),
                        "flock(1) never locked"
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        let pid = c.id();
        c.kill().unwrap();
        c.wait().unwrap();
        assert!(
            err.ends_with(&format!(
                "is in use by bootimage-gen PID {pid}; wait for it to finish or choose another directory"
            )),
            "{err}"
        );
        // Released with its holder.
        drop(DirLock::try_lock(d.path(), "output directory").unwrap());
    }

    #[test]
    fn shared_users_keep_gc_out() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("e.lock");
        let a = Lock::shared(&p, "using E").unwrap();
        let b = Lock::shared(&p, "using E").unwrap();
        assert!(Lock::try_exclusive(&p).unwrap().is_none());
        drop(a);
        assert!(Lock::try_exclusive(&p).unwrap().is_none());
        drop(b);
        let g = Lock::try_exclusive(&p)
            .unwrap()
            .expect("free once the users left");
        // While gc holds it, a user waits (here: does not get it at once).
        let f = File::open(&p).unwrap();
        assert!(!try_flock_mode(&f, libc::LOCK_SH).unwrap());
        drop(g);
        assert!(try_flock_mode(&f, libc::LOCK_SH).unwrap());
    }

    #[test]
    fn file_lock_waits_for_the_holder() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.lock");
        let l = Lock::wait(&p, "importing X").unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            format!("PID {} importing X\n", std::process::id())
        );
        // Half a record (a holder still writing it) names no holder.
        let f = File::open(&p).unwrap();
        assert_eq!(
            holder_of(&f),
            format!("PID {} importing X", std::process::id())
        );
        std::fs::write(&p, "PID 12").unwrap();
        assert_eq!(holder_of(&f), "");
        std::fs::write(&p, format!("PID {} importing X\n", std::process::id())).unwrap();
        let p2 = p.clone();
        let t = std::time::Instant::now();
        let h = std::thread::spawn(move || {
            // A second open file description: flock excludes it even in
            // the same process.
            let l2 = Lock::wait(&p2, "importing X again").unwrap();
            (t.elapsed(), std::fs::read_to_string(l2.path()).unwrap())
        });
        std::thread::sleep(Duration::from_millis(600));
        drop(l);
        let (waited, text) = h.join().unwrap();
        assert!(waited >= Duration::from_millis(500), "{waited:?}");
        assert!(text.ends_with("importing X again\n"), "{text}");
    }
}
