//! Loop device and mount guards (the loopback backend's privileged
//! resources). Each is released explicitly with `close()` (errors reported)
//! in reverse order of creation, and by a best-effort `Drop` when an error or
//! a signal unwinds the run. A failed `close()` keeps the resource in the
//! guard: it is released by `Drop` (retried; lazily for a mount) instead of
//! being forgotten.
use crate::util::cmd;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// A loop device over a byte range of an image file.
#[derive(Debug)]
#[must_use = "a loop device stays attached until closed or dropped"]
pub struct LoopDevice {
    dev: Option<PathBuf>,
    /// What it was attached to (canonical file, offset): a detach acts only
    /// while the device still holds that, never on a device the kernel has
    /// since freed and handed to someone else.
    backing: (PathBuf, u64),
}

/// The backing file (" (deleted)" stripped) and offset of a loop device,
/// from sysfs; `None` when it is detached.
pub fn backing_of(dev: &Path) -> Option<(PathBuf, u64)> {
    let sys = Path::new("/sys/block").join(dev.file_name()?).join("loop");
    let b = std::fs::read_to_string(sys.join("backing_file")).ok()?;
    let b = b.trim_end_matches('\n');
    let b = b.strip_suffix(" (deleted)").unwrap_or(b);
    let off = std::fs::read_to_string(sys.join("offset"))
        .ok()
        .and_then(|o| o.trim().parse().ok())
        .unwrap_or(0);
    Some((PathBuf::from(b), off))
}

impl LoopDevice {
    /// Attach `[offset, offset+size)` of `file` with the given logical
    /// sector size. The kernel parses no partition tables here, so every
    /// partition gets its own device.
    pub fn attach(file: &Path, offset: u64, size: u64, sector_size: u64) -> Result<Self> {
        let mut c = cmd::new(
            "losetup",
            [
                "--find".to_string(),
                "--show".into(),
                format!("--offset={offset}"),
                format!("--sizelimit={size}"),
                format!("--sector-size={sector_size}"),
                file.display().to_string(),
            ],
        );
        let out = cmd::run_str(&mut c).with_context(|| {
            format!(
                "attaching a loop device to {} at offset {offset}",
                file.display()
            )
        })?;
        let dev = PathBuf::from(out.lines().last().unwrap_or_default());
        tracing::debug!("attached {} ({} +{offset})", dev.display(), file.display());
        let canonical = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
        Ok(LoopDevice {
            dev: Some(dev),
            backing: (canonical, offset),
        })
    }

    pub fn path(&self) -> &Path {
        self.dev.as_deref().expect("attached loop device")
    }

    /// Everything written through the device reaches the backing file
    /// before it is let go: fsync of the block device writes its page cache
    /// out through the loop driver. Left to the kernel, that happens at the
    /// device's last close, which another holder (a probe that has it open)
    /// can put off past our reading the file: a suite run read a metal disk
    /// twice and got two different sha256.
    fn flush(dev: &Path) -> Result<()> {
        std::fs::File::open(dev)
            .and_then(|f| f.sync_all())
            .with_context(|| format!("flushing loop device {} to its file", dev.display()))
    }

    fn detach(dev: &Path, backing: &(PathBuf, u64)) -> Result<()> {
        // A failed flush is reported once the device is detached (never
        // left attached because of it).
        let flushed = match backing_of(dev).as_ref() == Some(backing) {
            true => Self::flush(dev),
            false => Ok(()),
        };
        // Tolerate a brief EBUSY just after an unmount. Each try first
        // checks that the device is still ours: once freed, the kernel may
        // give its number to another run at once.
        let mut last = None;
        for _ in 0..50 {
            if backing_of(dev).as_ref() != Some(backing) {
                return flushed;
            }
            match std::process::Command::new("losetup")
                .arg("-d")
                .arg(dev)
                .output()
            {
                Ok(o) if o.status.success() => {
                    Self::wait_gone(dev, backing);
                    return flushed;
                }
                Ok(o) => last = Some(String::from_utf8_lossy(&o.stderr).trim().to_string()),
                Err(e) => last = Some(e.to_string()),
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        anyhow::bail!(
            "detaching loop device {}: {}",
            dev.display(),
            last.unwrap_or_default()
        )
    }

    /// `losetup -d` of a device someone still holds open (udev probing a
    /// fresh device) only marks it for autoclear: wait until the kernel has
    /// really released it, so nothing of ours outlives the run.
    fn wait_gone(dev: &Path, backing: &(PathBuf, u64)) {
        // Up to a minute: until then its filesystem's last writes may
        // still be on their way to the file.
        for _ in 0..2400 {
            if backing_of(dev).as_ref() != Some(backing) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        tracing::warn!(
            "loop device {} is still attached after detaching",
            dev.display()
        );
    }

    /// Detach, reporting errors. On error the device stays in the guard
    /// (and `Drop` tries again).
    pub fn close(mut self) -> Result<()> {
        self.release()
    }

    /// Detach; the guard lets go of the device only once it is detached.
    pub fn release(&mut self) -> Result<()> {
        if let Some(d) = &self.dev {
            Self::detach(d, &self.backing)?;
            self.dev = None;
        }
        Ok(())
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        if let Some(d) = self.dev.take() {
            // Not the cmd wrapper: it refuses to run once a signal is pending.
            if let Err(e) = Self::detach(&d, &self.backing) {
                tracing::warn!("{e:#}");
            }
        }
    }
}

/// A mounted filesystem.
#[derive(Debug)]
#[must_use = "a mount stays until closed or dropped"]
pub struct Mount {
    target: Option<PathBuf>,
}

impl Mount {
    pub fn new(dev: &Path, target: &Path, fstype: &str, options: &str) -> Result<Self> {
        // An existing target may be a file (a bind mount of a file).
        if !target.exists() {
            std::fs::create_dir_all(target)
                .with_context(|| format!("creating mount point {}", target.display()))?;
        }
        let mut c = cmd::new("mount", ["-t", fstype, "-o", options]);
        c.arg(dev).arg(target);
        cmd::run(&mut c)
            .with_context(|| format!("mounting {} on {}", dev.display(), target.display()))?;
        Ok(Mount {
            target: Some(target.to_path_buf()),
        })
    }

    pub fn path(&self) -> &Path {
        self.target.as_deref().expect("mounted")
    }

    /// Unmount, reporting errors. On error the mount stays in the guard
    /// (and `Drop` unmounts it, lazily as a last resort).
    pub fn close(mut self) -> Result<()> {
        self.release()
    }

    /// Unmount; the guard lets go of the mount only once it is unmounted.
    pub fn release(&mut self) -> Result<()> {
        if let Some(t) = &self.target {
            unmount(t)?;
            self.target = None;
        }
        Ok(())
    }

    /// Whether the guard still holds its mount.
    pub fn is_held(&self) -> bool {
        self.target.is_some()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(t) = self.target.take() {
            if unmount(&t).is_err() {
                // Last resort so the loop device can go: detach lazily.
                let _ = std::process::Command::new("umount")
                    .arg("-l")
                    .arg(&t)
                    .status();
                tracing::warn!("unmounted {} lazily", t.display());
            }
        }
    }
}

/// `umount T`; if that fails, thaw and try once more: a tool killed
/// mid-freeze (ostree's fsfreeze/thaw cycle of /boot) leaves the
/// filesystem frozen, and a frozen filesystem outlives its unmount.
fn unmount(t: &Path) -> Result<()> {
    if cmd::run(&mut cmd::new("umount", [t.as_os_str()])).is_ok() {
        return Ok(());
    }
    thaw(t);
    cmd::run(&mut cmd::new("umount", [t.as_os_str()]))
        .with_context(|| format!("unmounting {}", t.display()))?;
    Ok(())
}

/// Thaw the filesystem mounted at `m` if it is frozen (`fsfreeze -u`, the
/// FITHAW ioctl; it fails harmlessly on one that is not).
pub fn thaw(m: &Path) {
    let _ = std::process::Command::new("fsfreeze")
        .arg("-u")
        .arg(m)
        .stderr(std::process::Stdio::null())
        .status();
}

/// A loop device with its filesystem mounted: closed as mount, then device.
#[must_use = "the mount and its loop device stay until closed or dropped"]
pub struct Mounted {
    mount: Option<Mount>,
    dev: Option<LoopDevice>,
}

impl Mounted {
    pub fn new(dev: LoopDevice, target: &Path, fstype: &str, options: &str) -> Result<Self> {
        let mount = Mount::new(dev.path(), target, fstype, options)?;
        Ok(Mounted {
            mount: Some(mount),
            dev: Some(dev),
        })
    }
    pub fn path(&self) -> &Path {
        self.mount.as_ref().expect("mounted").path()
    }
    /// Unmount, then detach. On error what is left stays in the guard.
    pub fn close(mut self) -> Result<()> {
        if let Some(m) = self.mount.as_mut() {
            m.release()?;
            self.mount = None;
        }
        if let Some(d) = self.dev.as_mut() {
            d.release()?;
            self.dev = None;
        }
        Ok(())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // Fields would drop in declaration order anyway; be explicit.
        drop(self.mount.take());
        drop(self.dev.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed unmount (here: a directory nothing is mounted on, which
    /// `umount` refuses as root or not) leaves the mount in the guard.
    #[test]
    fn failed_close_keeps_the_mount() {
        let d = tempfile::tempdir().unwrap();
        let mut m = Mount {
            target: Some(d.path().to_path_buf()),
        };
        let e = m.release().unwrap_err();
        assert!(format!("{e:#}").contains("unmounting"), "{e:#}");
        assert!(m.is_held(), "a failed close must keep the guard");
        // Drop's best effort runs too (and fails quietly).
    }

    /// A device freed under us (detached by someone, then reused for another
    /// file: the kernel hands the lowest free number out at once) is not
    /// ours any more: our release must leave the new attachment alone.
    #[test]
    #[cfg_attr(
        not(feature = "privileged"),
        ignore = "needs root: a loop device (--features privileged)"
    )]
    fn release_leaves_a_reused_device_alone() {
        let (a, b) = (
            tempfile::NamedTempFile::new().unwrap(),
            tempfile::NamedTempFile::new().unwrap(),
        );
        a.as_file().set_len(1 << 20).unwrap();
        b.as_file().set_len(1 << 20).unwrap();
        let mut ours = LoopDevice::attach(a.path(), 0, 1 << 20, 512).unwrap();
        let dev = ours.path().to_path_buf();
        let losetup = |args: &[&std::ffi::OsStr]| {
            let o = std::process::Command::new("losetup")
                .args(args)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        };
        losetup(&["-d".as_ref(), dev.as_os_str()]);
        losetup(&[dev.as_os_str(), b.path().as_os_str()]);
        let theirs = backing_of(&dev).expect("the reused device");
        ours.release().unwrap();
        assert_eq!(
            backing_of(&dev),
            Some(theirs),
            "our release detached another file's device"
        );
        losetup(&["-d".as_ref(), dev.as_os_str()]);
    }
}
