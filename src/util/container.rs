//! Running inside a container (the tool's own image, `containerfiles/`):
//! detect it, and word the checks that depend on how the container was
//! started (volumes, `--privileged`) in podman's terms.
use super::space::unescape;
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// Files a container engine leaves in every container: podman and
/// buildah write `/run/.containerenv`, docker `/.dockerenv`.
const MARKERS: &[&str] = &["/run/.containerenv", "/.dockerenv"];

/// Set by the image: the output directory `generate` uses when `-o` is not
/// given (the image's `/out` volume).
pub const DEFAULT_OUTPUT_ENV: &str = "BOOTIMAGE_GEN_DEFAULT_OUTPUT";

/// `generate -o`'s default in the CLI (`cli::GenerateArgs::output`).
const CLI_DEFAULT_OUTPUT: &str = "bootimages";

/// CAP_SYS_ADMIN's bit in the capability sets (linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;

/// Whether this process runs in the tool's own container image: a marker
/// file of a container engine AND the image's environment. A marker alone
/// is not enough: CI runners and dev machines are often containers
/// themselves (`/.dockerenv`), where a host-like run must stay host-like.
pub fn inside() -> bool {
    std::env::var_os(DEFAULT_OUTPUT_ENV).is_some() && MARKERS.iter().any(|m| Path::new(m).exists())
}

/// The output directory to use: `-o` as given, except that the CLI's
/// default becomes the image's `/out` when the image says so.
pub fn output_dir(given: &Path) -> PathBuf {
    match std::env::var_os(DEFAULT_OUTPUT_ENV) {
        Some(d) if given == Path::new(CLI_DEFAULT_OUTPUT) && !d.is_empty() => PathBuf::from(d),
        _ => given.to_path_buf(),
    }
}

/// Whether this process holds CAP_SYS_ADMIN (mount, loop devices): what a
/// container lacks unless started `--privileged`.
pub fn has_sys_admin() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return true;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .map_or(true, |caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

/// One mount of /proc/self/mountinfo: where it is, and which directory of
/// its source it shows.
struct Mount {
    point: PathBuf,
    root: String,
}

fn mounts() -> Vec<Mount> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let root = f.nth(3)?;
            let point = f.next()?;
            Some(Mount {
                point: PathBuf::from(unescape(point)),
                root: unescape(root),
            })
        })
        .collect()
}

/// An anonymous volume (what podman and docker create for an image's
/// `VOLUME` when no `-v` names it): `.../volumes/<64 hex digits>/_data`.
/// It is removed with the container (`--rm`) or forgotten, so files
/// written there are as good as lost.
fn anonymous_volume(root: &str) -> bool {
    let mut parts = root.rsplit('/');
    parts.next() == Some("_data")
        && parts
            .next()
            .is_some_and(|id| id.len() == 64 && id.bytes().all(|c| c.is_ascii_hexdigit()))
        && parts.next() == Some("volumes")
}

/// The nearest existing directory at or above `dir`, absolute.
fn existing_ancestor(dir: &Path) -> PathBuf {
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut p = abs.as_path();
    loop {
        if let Ok(c) = p.canonicalize() {
            return c;
        }
        match p.parent() {
            Some(q) => p = q,
            None => return PathBuf::from("/"),
        }
    }
}

/// In a container, `generate`'s output must reach the host: refuse an
/// output directory on the container's own filesystem (or on an anonymous
/// volume), and one the container cannot write, before anything runs.
pub fn check_output(dir: &Path) -> Result<()> {
    if !inside() {
        return Ok(());
    }
    let at = existing_ancestor(dir);
    let mounts = mounts();
    let holder = mounts
        .iter()
        .filter(|m| at.starts_with(&m.point))
        .max_by_key(|m| m.point.as_os_str().len());
    let lost = match holder {
        Some(m) => m.point == Path::new("/") || anonymous_volume(&m.root),
        None => false,
    };
    if lost {
        bail!(
            "output directory {} is inside the container, not on a volume: its files would be lost when the container exits; add `-v HOSTDIR:/out` to podman run (the default output is /out), or pass -o with a directory you mounted",
            dir.display()
        );
    }
    let c = std::ffi::CString::new(at.as_os_str().as_encoded_bytes())?;
    // SAFETY: access(2) on a valid NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let e = std::io::Error::last_os_error();
        bail!(
            "output directory {} is not writable in the container ({e}): mount a writable host directory (`-v HOSTDIR:/out`, without `:ro`; with rootless podman the directory must be writable by your user)",
            at.display()
        );
    }
    Ok(())
}

/// Why the loopback backend cannot run in this container, in podman's
/// terms (`None` when nothing container-specific is missing).
pub fn loopback_missing() -> Option<String> {
    if !inside() {
        return None;
    }
    if !has_sys_admin() || !Path::new("/dev/loop-control").exists() {
        return Some(
            "this container has no loop devices and may not mount: start it with `podman run --privileged`".into(),
        );
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
    {
        return Some(format!(
            "this container cannot use /dev/loop-control ({e}; rootless podman cannot attach loop devices even with --privileged: run podman as root)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_volumes_are_told_from_named_ones() {
        let hex = "a".repeat(64);
        assert!(anonymous_volume(&format!(
            "/var/lib/containers/storage/volumes/{hex}/_data"
        )));
        assert!(!anonymous_volume(
            "/var/lib/containers/storage/volumes/cache/_data"
        ));
        assert!(!anonymous_volume("/srv/out"));
        assert!(!anonymous_volume("/"));
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/a\040b\134c"), "/a b\\c");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/end\04"), r"/end\04");
    }

    #[test]
    fn only_the_cli_default_becomes_the_image_default() {
        // Without the variable, -o is kept as given.
        if std::env::var_os(DEFAULT_OUTPUT_ENV).is_none() {
            assert_eq!(output_dir(Path::new("bootimages")), Path::new("bootimages"));
        }
        assert_eq!(output_dir(Path::new("/x")), Path::new("/x"));
    }
}
