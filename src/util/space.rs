//! Disk space: which filesystem a path is on (its mount point, from
//! /proc/self/mountinfo), how much it has free (statvfs), and turning an
//! ENOSPC anywhere in an error chain (our writes, or a tool's "No space left
//! on device") into one line that names the filesystem and says how much
//! was needed against how much is free.
use std::path::{Path, PathBuf};

/// Free and total bytes of the filesystem holding `p` (or its nearest
/// existing ancestor), for an unprivileged writer (`f_bavail`).
pub fn free_total(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let p = p.ancestors().find(|a| a.exists())?;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we pass; c is a valid
    // NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let f = st.f_frsize as u64;
    Some((st.f_bavail as u64 * f, st.f_blocks as u64 * f))
}

/// One mountinfo line's mount point and source (device).
fn mounts() -> Vec<(PathBuf, String)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| {
            let point = l.split(' ').nth(4)?;
            // After the " - " separator: fstype, source, options.
            let source = l.split(" - ").nth(1)?.split(' ').nth(1)?;
            Some((PathBuf::from(unescape(point)), unescape(source)))
        })
        .collect()
}

/// Mount points at or under `dir`.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    mounts()
        .into_iter()
        .map(|(m, _)| m)
        .filter(|m| m.starts_with(dir))
        .collect()
}

/// The filesystem holding `p`: its mount point and source device.
pub fn filesystem_of(p: &Path) -> Option<(PathBuf, String)> {
    let abs = std::fs::canonicalize(p.ancestors().find(|a| a.exists())?).ok()?;
    mounts()
        .into_iter()
        .filter(|(m, _)| abs.starts_with(m))
        .max_by_key(|(m, _)| m.components().count())
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// MiB, rounded up, for messages.
pub fn mib(b: u64) -> String {
    format!("{} MiB", b.div_ceil(1 << 20))
}

/// Whether the chain holds an ENOSPC or EDQUOT (as an io::Error, or in the
/// text of a tool's error).
pub fn is_enospc(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .and_then(|io| io.raw_os_error())
            .is_some_and(|n| n == libc::ENOSPC || n == libc::EDQUOT)
            || {
                let s = c.to_string();
                s.contains("No space left on device") || s.contains("Disk quota exceeded")
            }
    })
}

/// A place the run writes to: its role in messages, a path on it, how much
/// the run was estimated to need there (0: unknown), and what to do.
#[derive(Debug, Clone)]
pub struct Place {
    pub role: String,
    pub path: PathBuf,
    pub need: u64,
    pub fix: String,
}

/// "the filesystem at /mnt (/dev/loop3)".
pub fn describe_fs(p: &Path) -> String {
    match filesystem_of(p) {
        Some((m, dev)) => format!("the filesystem at {} ({dev})", m.display()),
        None => format!("the filesystem holding {}", p.display()),
    }
}

/// If `e` is a disk-full error, put one line in front of it naming the
/// filesystem that filled (among `places`: the one the error names, else
/// the one with the least room for its need) and how much was needed there
/// against how much is free now (after the run removed its partial files).
pub fn explain_places(e: anyhow::Error, places: &[Place]) -> anyhow::Error {
    if !is_enospc(&e) || places.is_empty() {
        return e;
    }
    let text = format!("{e:#}");
    let named = places
        .iter()
        .filter(|p| text.contains(&*p.path.to_string_lossy()))
        .max_by_key(|p| p.path.as_os_str().len());
    let room = |p: &Place| {
        let free = free_total(&p.path).map_or(0, |x| x.0);
        free as i128 - p.need as i128
    };
    let Some(p) = named.or_else(|| places.iter().min_by_key(|p| room(p))) else {
        return e;
    };
    let (free, total) = free_total(&p.path).unwrap_or((0, 0));
    let need = if p.need > 0 {
        format!("this run needs about {} there", mib(p.need))
    } else {
        "the amount needed was not estimated".to_string()
    };
    let line = format!(
        "no space left on {} ({}, {}): {need}; {} free of {}; {}",
        describe_fs(&p.path),
        p.role,
        p.path.display(),
        mib(free),
        mib(total),
        p.fix
    );
    e.context(line)
}

/// For a single write site: an io error while writing under `dir` (of
/// `need` bytes, 0 if unknown) becomes one line naming the filesystem.
pub fn explain(e: std::io::Error, dir: &Path, need: u64) -> anyhow::Error {
    let e = anyhow::Error::new(e);
    explain_places(
        e,
        &[Place {
            role: "writing".into(),
            path: dir.to_path_buf(),
            need,
            fix: "free some space there".into(),
        }],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enospc_is_found_and_explained() {
        let d = tempfile::tempdir().unwrap();
        let io = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let e = anyhow::Error::new(io).context(format!("writing {}/x", d.path().display()));
        assert!(is_enospc(&e));
        let place = Place {
            role: "output directory".into(),
            path: d.path().to_path_buf(),
            need: 5 << 20,
            fix: "choose another with -o".into(),
        };
        let msg = format!("{:#}", explain_places(e, &[place]));
        assert!(
            msg.starts_with("no space left on the filesystem at /"),
            "{msg}"
        );
        assert!(msg.contains("this run needs about 5 MiB there"), "{msg}");
        assert!(msg.contains(" free of "), "{msg}");
        assert!(msg.contains("choose another with -o"), "{msg}");
        // A tool's text counts too; other errors pass through unchanged.
        assert!(is_enospc(&anyhow::anyhow!(
            "`mkfs.xfs` failed: No space left on device"
        )));
        let other = anyhow::anyhow!("boom");
        assert_eq!(format!("{:#}", explain_places(other, &[])), "boom");
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert!(filesystem_of(d.path()).is_some());
    }
}
