//! The stage in memory (`--stage-in`): a tmpfs mounted inside the run's
//! work directory, holding the stage files the OS is laid down into before
//! mkfs makes the base disk's filesystems from them (docs/contract.md §9).
//! On a tmpfs the stage's data never reaches a disk: the OS's bytes are
//! written to disk once, by mkfs, as they were when the kernel wrote the
//! base disk directly (issue 45's "no slower"). It is used only where it
//! fits: the stage's data within half of the memory the kernel calls
//! available, so the rest of the run keeps its page cache. Mounted under
//! the work directory, the tmpfs of a killed run is one of the mounts the
//! stale sweep ([`crate::sys::stale`]) finds and unmounts, so no memory
//! stays taken.
use super::loopback::Mount;
use anyhow::{bail, Context, Result};
use std::path::Path;

/// Where the stage goes (`--stage-in`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StageIn {
    /// Memory when it fits (see the module), else the work directory.
    #[default]
    Auto,
    /// Memory, or an error saying why not.
    Memory,
    /// The work directory.
    Disk,
}

/// The directory of the work directory the tmpfs is mounted on.
pub const STAGE_DIR: &str = "stage";

/// A tmpfs holding the stage: unmounted (its memory freed) when closed or
/// dropped.
#[must_use]
pub struct RamStage {
    mount: Mount,
}

impl RamStage {
    /// The tmpfs's directory.
    pub fn path(&self) -> &Path {
        self.mount.path()
    }

    /// Unmount, reporting errors.
    pub fn close(self) -> Result<()> {
        self.mount.close()
    }
}

/// What the kernel calls available memory (`MemAvailable` in
/// /proc/meminfo), in bytes.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_available(&text)
}

fn meminfo_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Whether `data` bytes of stage fit in memory: within half of `available`.
pub fn fits(data: u64, available: u64) -> bool {
    data <= available / 2
}

/// Whether the stage goes in memory: `want`, and `data` (what the stage
/// is expected to hold) within half of the available memory. `Ok(Err(why))`
/// says why it stays in the work directory; `--stage-in memory` that cannot
/// be met is an error naming the need and what is available. Decided before
/// the preflight (which counts the stage where it goes); nothing is mounted
/// until [`mount`].
pub fn decide(want: StageIn, data: u64) -> Result<std::result::Result<(), String>> {
    if want == StageIn::Disk {
        return Ok(Err("--stage-in disk".into()));
    }
    let avail = available_memory();
    if avail.is_some_and(|a| fits(data, a)) {
        return Ok(Ok(()));
    }
    let why = match avail {
        Some(a) => format!(
            "its {} MiB are more than half of the {} MiB of memory available",
            data >> 20,
            a >> 20
        ),
        None => "/proc/meminfo has no MemAvailable".into(),
    };
    if want == StageIn::Memory {
        bail!("--stage-in memory: the stage does not fit in memory: {why}; use --stage-in disk (or auto), or free memory");
    }
    Ok(Err(why))
}

/// Mount the stage's tmpfs at `work`/[`STAGE_DIR`], `limit` bytes at most
/// (what the stage files can hold).
pub fn mount(work: &Path, limit: u64) -> Result<RamStage> {
    let at = work.join(STAGE_DIR);
    let mount = Mount::new(
        Path::new("tmpfs"),
        &at,
        "tmpfs",
        &format!("size={},mode=0700", limit.max(1 << 20)),
    )
    .with_context(|| format!("mounting a tmpfs for the stage on {}", at.display()))?;
    Ok(RamStage { mount })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo() {
        let t = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(meminfo_available(t), Some(20_000_000 * 1024));
        assert_eq!(meminfo_available("MemTotal: 5 kB\n"), None);
    }

    #[test]
    fn half_of_available() {
        assert!(fits(1 << 30, 2 << 30));
        assert!(!fits((1 << 30) + 1, 2 << 30));
    }

    #[test]
    fn disk_is_never_memory() {
        assert_eq!(
            decide(StageIn::Disk, 1).unwrap().err().as_deref(),
            Some("--stage-in disk")
        );
    }

    #[test]
    fn memory_that_does_not_fit_is_an_error() {
        let e = match decide(StageIn::Memory, 1 << 62) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a stage larger than memory was accepted"),
        };
        assert!(e.contains("does not fit in memory"), "{e}");
        let r = decide(StageIn::Auto, 1 << 62).unwrap();
        assert!(r.err().unwrap().contains("more than half"));
        assert!(decide(StageIn::Auto, 1).unwrap().is_ok());
    }
}
