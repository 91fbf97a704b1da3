//! File metadata the standard library does not reach: every extended
//! attribute of a path itself (a symlink's own), times set without
//! following a symlink, and the inode flags (`chattr`'s `i`). Used to
//! rebuild a staged tree entry by entry (`disk::stage`).
use anyhow::{Context, Result};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn c_path(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .with_context(|| format!("{} holds a NUL byte", p.display()))
}

/// Every extended attribute of `p` itself (names in the order the
/// filesystem lists them), with its value.
pub fn xattrs(p: &Path) -> Result<Vec<(CString, Vec<u8>)>> {
    let c = c_path(p)?;
    let err = |what: &str| {
        let e = std::io::Error::last_os_error();
        anyhow::Error::new(e).context(format!("{what} extended attributes of {}", p.display()))
    };
    // SAFETY: `c` is NUL-terminated and outlives the call; a null buffer
    // of length 0 asks for the size only.
    let n = unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
    if n < 0 {
        return Err(err("listing"));
    }
    let mut names = vec![0u8; n as usize];
    // SAFETY: `names` is a live, writable buffer of `names.len()` bytes.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n < 0 {
        return Err(err("listing"));
    }
    names.truncate(n as usize);
    let mut out = Vec::new();
    for name in names.split(|b| *b == 0).filter(|s| !s.is_empty()) {
        let cn = CString::new(name).expect("split at NUL");
        // SAFETY: as above; size query first.
        let len = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), std::ptr::null_mut(), 0) };
        if len < 0 {
            return Err(err("reading"));
        }
        let mut v = vec![0u8; len as usize];
        // SAFETY: `v` is a live, writable buffer of `v.len()` bytes.
        let len =
            unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        if len < 0 {
            return Err(err("reading"));
        }
        v.truncate(len as usize);
        out.push((cn, v));
    }
    Ok(out)
}

/// Set the extended attribute `name` of `p` itself.
pub fn set_xattr(p: &Path, name: &CString, value: &[u8]) -> Result<()> {
    let c = c_path(p)?;
    // SAFETY: both strings are NUL-terminated and outlive the call; `value`
    // is a live buffer of `value.len()` bytes, only read.
    let rc = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("setting {name:?} on {}", p.display()));
    }
    Ok(())
}

/// Set the access and modification times of `p` itself (not a symlink's
/// target), in whole seconds.
pub fn set_times(p: &Path, atime: i64, mtime: i64) -> Result<()> {
    let c = c_path(p)?;
    let ts = [
        libc::timespec {
            tv_sec: atime as libc::time_t,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: mtime as libc::time_t,
            tv_nsec: 0,
        },
    ];
    // SAFETY: `c` is NUL-terminated; `ts` is an array of two timespecs.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("setting the times of {}", p.display()));
    }
    Ok(())
}

/// `FS_IMMUTABLE_FL` (linux/fs.h): `chattr +i`.
pub const IMMUTABLE: libc::c_long = 0x10;

/// The inode flags (`lsattr`) of the directory `dir`.
pub fn dir_flags(dir: &Path) -> Result<libc::c_long> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one long into `flags`, which lives
    // through the call; the descriptor is open.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("reading the inode flags of {}", dir.display()));
    }
    Ok(flags)
}
