//! Recovery after a run that was killed (SIGKILL, OOM, power loss) and ran
//! no cleanup: find what it left — its work directories, the VM it started,
//! mounts under its work directory, loop devices over files in it, staged
//! `.partial` files in an output directory — and remove what is provably
//! stale. A work directory's name carries its owner (`work-PID.START.BOOT-…`,
//! [`crate::util::owner`]), written by the same `mkdir` that makes it, so
//! there is no moment when a directory exists without an owner; it is stale
//! only when that process is gone (exited, PID reused, or another boot). A
//! directory of a live run, or one without an owner in its name, is left
//! alone. Nothing is removed from a directory that still has a mount under
//! it (a bind mount of the cache repo would be emptied through it).
use crate::util::owner::{self, Owner};
use crate::util::space::mounts_under;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Prefix of a run's work directory under `<cache>/tmp/`.
pub const WORK_PREFIX: &str = "work-";
/// The VM's pidfile inside a work directory (`vm/qemu.pid`).
pub const VM_PIDFILE: &str = "vm/qemu.pid";
/// Suffix of a staged file in an output directory (`publish::staged`).
pub const PARTIAL_SUFFIX: &str = ".partial";
/// How long a busy mount or loop device of a killed run is retried.
const BUSY_WAIT: Duration = Duration::from_secs(3);
/// How long a killed VM may take to disappear.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// The tempfile prefix of a work directory owned by this process.
pub fn work_prefix() -> String {
    format!("{WORK_PREFIX}{}-", Owner::me().tag())
}

/// The owner recorded in a work (or build) directory's name
/// (`<prefix>PID.START.BOOT-<random>`).
pub fn owner_of(name: &str, prefix: &str) -> Option<Owner> {
    let rest = name.strip_prefix(prefix)?;
    let (tag, _random) = rest.rsplit_once('-')?;
    Owner::parse(tag)
}

/// What a sweep removed (and what it had to leave).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    pub dirs: usize,
    pub bytes: u64,
    pub mounts: usize,
    pub loops: usize,
    pub vms: usize,
    pub partials: usize,
    /// Leftovers that could not be removed, with the reason.
    pub kept: Vec<String>,
}

impl Swept {
    pub fn is_empty(&self) -> bool {
        *self == Swept::default()
    }

    pub fn add(&mut self, o: Swept) {
        self.dirs += o.dirs;
        self.bytes += o.bytes;
        self.mounts += o.mounts;
        self.loops += o.loops;
        self.vms += o.vms;
        self.partials += o.partials;
        self.kept.extend(o.kept);
    }
}

impl std::fmt::Display for Swept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = vec![];
        let n = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        if self.dirs > 0 {
            parts.push(format!(
                "{} ({} MiB)",
                n(self.dirs, "work dir"),
                self.bytes >> 20
            ));
        }
        if self.vms > 0 {
            parts.push(n(self.vms, "VM process"));
        }
        if self.mounts > 0 {
            parts.push(n(self.mounts, "mount"));
        }
        if self.loops > 0 {
            parts.push(n(self.loops, "loop device"));
        }
        if self.partials > 0 {
            parts.push(n(self.partials, "partial file"));
        }
        if parts.is_empty() {
            f.write_str("nothing")?;
        } else {
            f.write_str(&parts.join(", "))?;
        }
        if !self.kept.is_empty() {
            write!(f, "; kept: {}", self.kept.join("; "))?;
        }
        Ok(())
    }
}

/// The work and appliance build directories of `cache` whose owner is
/// gone, with the reason.
pub fn stale_dirs(cache: &Path) -> Vec<(PathBuf, String)> {
    let mut v = vec![];
    for (dir, prefix) in [("tmp", WORK_PREFIX), ("appliance", ".build-")] {
        let Ok(rd) = std::fs::read_dir(cache.join(dir)) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(why) = owner_of(&name, prefix).and_then(|o| o.why_dead()) {
                v.push((e.path(), why));
            }
        }
    }
    v
}

/// Sweep `<cache>/tmp` (work directories) and `<cache>/appliance`
/// (`.build-*` directories). Another sweep running on the same cache makes
/// this one return at once with nothing done.
pub fn sweep_cache(cache: &Path) -> Result<Swept> {
    let mut s = Swept::default();
    let Some(_l) = crate::util::lock::Lock::try_exclusive(&cache.join("locks/sweep.lock"))? else {
        return Ok(s);
    };
    for (dir, why) in stale_dirs(cache) {
        tracing::info!("{}: stale, its owner {why}", dir.display());
        s.add(remove_stale_dir(&dir));
    }
    Ok(s)
}

/// Remove `.partial` files (staged writes, `publish::staged`) from an output
/// directory. Only call it while holding the directory's lock
/// (`DirLock::output`): then no live run writes there.
pub fn sweep_output(out: &Path) -> Swept {
    let mut s = Swept::default();
    let Ok(rd) = std::fs::read_dir(out) else {
        return s;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') && name.ends_with(PARTIAL_SUFFIX) {
            match std::fs::remove_file(e.path()) {
                Ok(()) => s.partials += 1,
                Err(err) => s.kept.push(format!("{}: {err}", e.path().display())),
            }
        }
    }
    s
}

/// Kill the VM, unmount, detach, then remove the directory — in that order,
/// and the directory only when nothing is mounted under it any more.
pub fn remove_stale_dir(dir: &Path) -> Swept {
    let mut s = Swept::default();
    // The VM first: it holds the work directory through virtfs.
    if let Some(vm) = owner::read_pidfile(&dir.join(VM_PIDFILE)) {
        if vm.alive() {
            // SAFETY: kill(2) of the process whose PID and start time the
            // pidfile recorded, checked just above.
            unsafe { libc::kill(vm.pid as i32, libc::SIGKILL) };
            let t = Instant::now();
            while vm.alive() && t.elapsed() < KILL_WAIT {
                std::thread::sleep(Duration::from_millis(20));
            }
            if vm.alive() {
                s.kept.push(format!("VM PID {} did not die", vm.pid));
            } else {
                s.vms += 1;
            }
        }
    }
    // Mounts under the directory, deepest first; then loop devices over
    // files in it; then the mounts that hold such files (the stage's
    // tmpfs, `ramstage`), which stay busy while a device is attached to a
    // file in them, and must not be detached lazily with the device still
    // there (the memory would stay taken until reboot).
    let attached = loops();
    let (holders, plain): (Vec<PathBuf>, Vec<PathBuf>) = mounts_under(dir)
        .into_iter()
        .partition(|m| attached.iter().any(|(_, b)| b.starts_with(m)));
    unmount_all(plain, &mut s);
    detach_loops(dir, &mut s);
    unmount_all(holders, &mut s);
    // Never remove through a mount point that is still there.
    if !mounts_under(dir).is_empty() {
        s.kept.push(format!(
            "{} (something is still mounted under it)",
            dir.display()
        ));
        return s;
    }
    let bytes = du(dir);
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {
            s.dirs += 1;
            s.bytes += bytes;
        }
        // Another sweep was quicker.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => s.kept.push(format!("{}: {e}", dir.display())),
    }
    s
}

/// Unmount `mounts` (deepest first), counting each in `s` or saying why it
/// was kept.
fn unmount_all(mut mounts: Vec<PathBuf>, s: &mut Swept) {
    mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    for m in &mounts {
        let ok = |a: &[&str]| {
            std::process::Command::new("umount")
                .args(a)
                .arg(m)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        // A run killed while `ostree admin deploy` had /boot frozen (its
        // fsfreeze/thaw cycle; ostree's watchdog does not thaw when ostree
        // dies) leaves the filesystem frozen, and a frozen filesystem
        // outlives its unmount, holding its loop device until reboot.
        crate::sys::loopback::thaw(m);
        // The killed run's tools may still be dying (SIGKILL waits for an
        // I/O in flight) and keep the mount busy for a moment: retry for up
        // to BUSY_WAIT before a lazy unmount, which would leave the
        // filesystem, and the loop device under it, alive until they exit.
        let t = Instant::now();
        let mut done = ok(&[]);
        while !done && t.elapsed() < BUSY_WAIT {
            std::thread::sleep(Duration::from_millis(100));
            done = ok(&[]);
        }
        if done || ok(&["-l"]) {
            s.mounts += 1;
        } else {
            s.kept
                .push(format!("mount {} (umount failed)", m.display()));
        }
    }
}

/// Detach the loop devices over files in `dir` (also over files since
/// deleted). `losetup -d` of a device still open only marks it for
/// autoclear: count it removed only once the kernel has let it go.
fn detach_loops(dir: &Path, s: &mut Swept) {
    for (dev, back) in loops() {
        if !back.starts_with(dir) {
            continue;
        }
        let t = Instant::now();
        // Still the stale run's: once freed, the device's number may go to
        // another run at once, whose device must not be detached.
        let attached =
            || crate::sys::loopback::backing_of(&dev).is_some_and(|(b, _)| b.starts_with(dir));
        while attached() && t.elapsed() < BUSY_WAIT {
            let _ = std::process::Command::new("losetup")
                .arg("-d")
                .arg(&dev)
                .output();
            std::thread::sleep(Duration::from_millis(50));
        }
        if attached() {
            s.kept.push(format!(
                "loop device {} over {} (still in use)",
                dev.display(),
                back.display()
            ));
        } else {
            s.loops += 1;
        }
    }
}

/// Loop devices and their backing files (" (deleted)" stripped), from sysfs.
pub fn loops() -> Vec<(PathBuf, PathBuf)> {
    let Ok(rd) = std::fs::read_dir("/sys/block") else {
        return vec![];
    };
    rd.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("loop") {
                return None;
            }
            let dev = Path::new("/dev").join(name);
            let (b, _) = crate::sys::loopback::backing_of(&dev)?;
            Some((dev, b))
        })
        .collect()
}

/// Bytes allocated under `p` (not following symlinks or crossing mounts),
/// each file once however many hard links it has (the OS buildroots
/// hardlink the cache repo's objects).
pub fn du(p: &Path) -> u64 {
    du_once(p, &mut std::collections::HashSet::new())
}

fn du_once(p: &Path, seen: &mut std::collections::HashSet<(u64, u64)>) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if m.nlink() > 1 && !m.is_dir() && !seen.insert((m.dev(), m.ino())) {
        return 0;
    }
    let mut n = m.blocks() * 512;
    if m.is_dir() {
        if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.flatten() {
                if e.metadata().is_ok_and(|c| c.dev() == m.dev()) {
                    n += du_once(&e.path(), seen);
                }
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn du_counts_hard_links_once() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), vec![1u8; 1 << 20]).unwrap();
        let one = du(d.path());
        std::fs::hard_link(d.path().join("a"), d.path().join("b")).unwrap();
        assert_eq!(du(d.path()), one);
        std::fs::write(d.path().join("c"), vec![1u8; 1 << 20]).unwrap();
        assert!(du(d.path()) >= one + (1 << 20));
    }

    #[test]
    fn names_carry_their_owner() {
        let p = work_prefix();
        let name = format!("{p}Ab3xYz");
        assert_eq!(owner_of(&name, WORK_PREFIX), Some(Owner::me()));
        assert_eq!(owner_of("work-Ab3xYz", WORK_PREFIX), None);
        assert_eq!(owner_of("other", WORK_PREFIX), None);
    }

    #[test]
    fn a_dead_owners_dir_goes_a_live_ones_stays() {
        let cache = tempfile::tempdir().unwrap();
        let tmp = cache.path().join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let mine = tmp.join(format!("{}aaaaaa", work_prefix()));
        std::fs::create_dir_all(mine.join("x")).unwrap();
        // A run that has exited: a child we reaped.
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let dead = Owner::of(c.id()).unwrap_or(Owner {
            pid: c.id(),
            start: 1,
            boot: Owner::me().boot,
        });
        c.wait().unwrap();
        let gone = tmp.join(format!("{WORK_PREFIX}{}-bbbbbb", dead.tag()));
        std::fs::create_dir_all(gone.join("y")).unwrap();
        std::fs::write(gone.join("y/f"), vec![0u8; 8192]).unwrap();
        // One without an owner (an older version's): not provably stale.
        let unowned = tmp.join("work-cccccc");
        std::fs::create_dir_all(&unowned).unwrap();
        let s = sweep_cache(cache.path()).unwrap();
        assert_eq!(s.dirs, 1, "{s}");
        assert!(s.bytes >= 8192, "{s}");
        assert!(mine.exists() && unowned.exists() && !gone.exists());
        assert!(s.to_string().starts_with("1 work dir"), "{s}");
    }

    #[test]
    fn partials_go_final_names_stay() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(".a.raw.XyZ.partial"), b"x").unwrap();
        std::fs::write(d.path().join("a.raw"), b"x").unwrap();
        let s = sweep_output(d.path());
        assert_eq!(s.partials, 1);
        assert!(d.path().join("a.raw").exists());
    }
}
