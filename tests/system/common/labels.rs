//! SELinux labels on a built disk, read (and, for the negative cases,
//! removed) from this host. The host runs no SELinux policy: there a label
//! is the plain extended attribute `security.selinux`, which these read and
//! write as libselinux's `lgetfilecon`/`lsetfilecon` do (never following a
//! symlink).
use super::{must, Loop};
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const XATTR: &CStr = c"security.selinux";

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// The SELinux context of `p` itself (a symlink's own), `None` when it
/// has none.
pub fn context(p: &Path) -> Option<String> {
    let c = c_path(p);
    let mut buf = vec![0u8; 256];
    loop {
        // SAFETY: `c` and `XATTR` are NUL-terminated strings that outlive
        // the call; `buf` is a live, writable buffer of `buf.len()` bytes.
        let n = unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                XATTR.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if let Ok(n) = usize::try_from(n) {
            buf.truncate(n);
            let s = String::from_utf8_lossy(&buf);
            return Some(s.trim_end_matches('\0').to_string());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENODATA) => return None,
            Some(libc::ERANGE) => buf.resize(buf.len() * 4, 0),
            _ => panic!("reading the SELinux label of {}: {e}", p.display()),
        }
    }
}

/// Remove the SELinux label of `p` itself (`setfattr -h -x
/// security.selinux`).
pub fn remove_context(p: &Path) {
    let c = c_path(p);
    // SAFETY: both arguments are NUL-terminated strings that outlive the
    // call.
    let rc = unsafe { libc::lremovexattr(c.as_ptr(), XATTR.as_ptr()) };
    assert_eq!(
        rc,
        0,
        "removing the SELinux label of {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

/// Every entry under `root`, `root` included, that carries no SELinux
/// context, as node paths (`/` being `root`), sorted; the walk stays on
/// `root`'s filesystem (`find ROOT -xdev`). What `find /sysroot -context
/// '*unlabeled_t*'` finds on a booted node (fedora-coreos-config
/// `tests/kola/upgrade/extended/test.sh`, `selinux-sanity-check`).
pub fn unlabelled(root: &Path) -> Vec<String> {
    let dev = std::fs::symlink_metadata(root).unwrap().dev();
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let md = std::fs::symlink_metadata(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        if md.dev() != dev {
            continue;
        }
        if context(&p).is_none() {
            found.push(node_path(root, &p));
        }
        if md.is_dir() {
            for e in std::fs::read_dir(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())) {
                stack.push(e.unwrap().path());
            }
        }
    }
    found.sort();
    found
}

/// `p` under `root` as the node path it has (`root` is `/`).
pub fn node_path(root: &Path, p: &Path) -> String {
    format!("/{}", p.strip_prefix(root).unwrap().display())
}

/// The regular files under `dir`, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let md = std::fs::symlink_metadata(&p).unwrap();
        if md.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        } else if md.is_file() {
            v.push(p);
        }
    }
    v.sort();
    v
}

/// A filesystem of part of a disk image, mounted read-write (through a
/// loop device) at its path, `.0`; unmounted and detached on drop.
pub struct RwMount(pub PathBuf, Loop);

impl RwMount {
    /// `file[offset..offset+size)`, an `fstype` filesystem, mounted with
    /// `opts` at `at`.
    pub fn new(file: &Path, offset: u64, size: u64, fstype: &str, opts: &str, at: &Path) -> Self {
        let l = Loop(must(
            Command::new("losetup")
                .args(["--find", "--show"])
                .arg(format!("--offset={offset}"))
                .arg(format!("--sizelimit={size}"))
                .arg(file),
        ));
        std::fs::create_dir_all(at).unwrap();
        must(
            Command::new("mount")
                .args(["-t", fstype, "-o", opts])
                .arg(&l.0)
                .arg(at),
        );
        RwMount(at.to_path_buf(), l)
    }

    /// The root filesystem of a raw x86_64 disk this project built (see
    /// [`super::mount_raw_root`]), read-write: for a private copy only.
    pub fn raw_root(raw: &Path, at: &Path) -> Self {
        let (offset, len) = super::raw_root_extent(raw);
        RwMount::new(raw, offset, len, "xfs", "rw,nouuid", at)
    }
}

impl Drop for RwMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}
