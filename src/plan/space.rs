//! Free space: the places a run writes to, what each needs, and the
//! check that refuses a run that would not fit (naming the filesystem, the
//! need and what is free).
use super::{Plan, PlanArtifact};
use crate::util::space::{describe_fs, mib, Place};
use anyhow::{bail, Context, Result};
use std::path::Path;

/// Space kept free beyond the estimates.
const SPACE_MARGIN: u64 = 64 << 20;

/// Free bytes for unprivileged users on the filesystem holding `p`, and its device.
pub fn free_space(p: &Path) -> Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes())?;
    // SAFETY: statvfs is a plain-old-data struct: all zeroes is a valid value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs on a valid path into a zeroed struct.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", p.display()));
    }
    let dev = std::fs::metadata(p)?.dev();
    Ok((s.f_bavail as u64 * s.f_frsize as u64, dev))
}

/// Hidden switch for tests: skip the free-space preflight so a real ENOSPC
/// happens (and is reported) while writing.
pub const SKIP_SPACE_CHECK_ENV: &str = "BOOTIMAGE_GEN_SKIP_SPACE_CHECK";

/// The places the run writes to, with the estimated need of each (for the
/// preflight below and for naming the filesystem of a later ENOSPC).
/// Estimated bytes: the work dir holds the base disk's data, a boot
/// filesystem per platform and a qcow2 before compression; each artifact
/// holds at most the disk's data (compressed ones about half).
/// With `staged` (mkfs makes the base disk's filesystems from a staged tree,
/// docs/contract.md §9), the stage's files hold the OS's data a second time
/// while the base disk's filesystems are made from them.
pub fn space_places(plan: &Plan, work: &Path, out: &Path, staged: bool) -> Vec<Place> {
    let d = &plan.disk;
    let data = d.content_bytes + (64 << 20);
    let mut work_need = data + plan.artifacts.len() as u64 * (64 << 20) + SPACE_MARGIN;
    // A stage in the work directory: the staged tree, and beside it the
    // root filesystem mkfs makes from it; the stage is removed before that
    // goes into the base disk, so the peak holds the data twice.
    if staged {
        work_need += data;
    }
    // Formats encoded to a work file before compression (or packing).
    let staged = |x: &PlanArtifact| x.spec.format.staged(x.compressed);
    if plan.artifacts.iter().any(staged) {
        work_need += data;
    }
    // Live: the squashfs and the rootfs cpio holding it (the ISO links to
    // the rootfs), each at most the data.
    if plan.artifacts.iter().any(|x| x.live.is_some()) {
        work_need += 2 * data;
    }
    // Each artifact holds at most the disk's data (compressed about half),
    // plus the OS container archive.
    let out_need: u64 = plan
        .artifacts
        .iter()
        .map(|x| if x.compressed { data / 2 } else { data })
        .sum::<u64>()
        + data / 2
        + SPACE_MARGIN;
    vec![
        Place {
            role: "work directory in the cache".into(),
            path: work.to_path_buf(),
            need: work_need,
            fix: "free some space there or use --cache-dir on a larger filesystem; the cache stays valid".into(),
        },
        Place {
            role: "output directory".into(),
            path: out.to_path_buf(),
            need: out_need,
            fix: "free some space there or choose another with -o; the cache stays valid for the next run".into(),
        },
    ]
}

/// Refuse a run that would not fit, naming the filesystem, the need and
/// what is free.
pub fn check_space(places: &[Place]) -> Result<()> {
    if std::env::var_os(SKIP_SPACE_CHECK_ENV).is_some() {
        return Ok(());
    }
    let [work, out] = places else {
        bail!("internal: check_space takes the work and output places");
    };
    // The output dir may not exist yet: measure its nearest existing ancestor.
    let out_fs = out
        .path
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("."));
    let (wfree, wdev) = free_space(&work.path)?;
    let (ofree, odev) = free_space(out_fs)?;
    if wdev == odev {
        let need = work.need + out.need;
        if wfree < need {
            bail!("not enough free space on {}: the build needs about {} ({} of work files in {}, {} of artifacts in {}) and {} is free; free some space, or put -o or --cache-dir on a larger filesystem", describe_fs(&work.path), mib(need), mib(work.need), work.path.display(), mib(out.need), out.path.display(), mib(wfree));
        }
    } else {
        if wfree < work.need {
            bail!("not enough free space in the cache directory {} on {}: the build needs about {} there and {} is free; use --cache-dir on a larger filesystem", work.path.display(), describe_fs(&work.path), mib(work.need), mib(wfree));
        }
        if ofree < out.need {
            bail!("not enough free space for output directory {} on {}: the artifacts need about {} and {} is free; choose another with -o", out.path.display(), describe_fs(out_fs), mib(out.need), mib(ofree));
        }
    }
    Ok(())
}
