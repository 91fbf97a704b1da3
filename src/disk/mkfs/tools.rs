//! The mkfs that makes the filesystems from a staged tree: found (this
//! host's own when new enough, else a `scripts/mkfs-root.sh` entry) and
//! its versions checked.
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The mkfs that makes the root and boot filesystems in one pass from a
/// staged tree, reproducibly (docs/contract.md §9): `mkfs.xfs -p` with
/// `SOURCE_DATE_EPOCH` and `DETERMINISTIC_SEED` (xfsprogs 6.19 or later),
/// `mke2fs -d` that clamps times to `SOURCE_DATE_EPOCH` and copies inode
/// flags (e2fsprogs 1.47.3 or later), and `xfs_db -x` to set the flag
/// `mkfs.xfs -p` drops.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tools {
    pub mkfs_xfs: PathBuf,
    pub xfs_db: PathBuf,
    pub mke2fs: PathBuf,
    /// The directory a VM must see at the same path to run them (a
    /// `scripts/mkfs-root.sh` entry); `None` for this host's own (the VM's
    /// appliance is made of this host's packages).
    pub share: Option<PathBuf>,
    /// "mkfs.xfs 7.2.0, mke2fs 1.47.4"
    pub versions: String,
    /// Where they come from, for the console.
    pub source: String,
}

/// The oldest xfsprogs whose `mkfs.xfs -p` is reproducible (docs/contract.md §9).
pub const XFS_MIN: (u32, u32, u32) = (6, 19, 0);
/// The oldest e2fsprogs whose `mke2fs -d` clamps times and copies flags.
pub const E2FS_MIN: (u32, u32, u32) = (1, 47, 3);

/// A version's first three numbers ("7.2.0", "1.47.4"); missing ones are 0.
pub fn version3(v: &str) -> (u32, u32, u32) {
    let mut it = v
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    (
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    )
}

fn show(v: (u32, u32, u32)) -> String {
    format!("{}.{}.{}", v.0, v.1, v.2)
}

/// The version a tool prints for `-V` (mkfs.xfs on stdout as
/// "mkfs.xfs version 7.2.0", mke2fs on stderr as "mke2fs 1.47.4 (date)").
fn tool_version(program: &Path) -> Option<(u32, u32, u32)> {
    let o = std::process::Command::new(program)
        .arg("-V")
        .output()
        .ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let line = text.lines().find(|l| !l.trim().is_empty())?;
    let word = line
        .split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))?;
    Some(version3(word))
}

/// The tools in `dir` (holding mkfs.xfs, mke2fs and xfs_db), if they run
/// and are new enough; else why not.
fn tools_in(dir: &Path, share: Option<&Path>, source: &str) -> std::result::Result<Tools, String> {
    let path = |t: &str| dir.join(t);
    let xfs = tool_version(&path("mkfs.xfs"));
    let e2 = tool_version(&path("mke2fs"));
    let why = match (xfs, e2) {
        (None, _) => format!("no runnable mkfs.xfs in {}", dir.display()),
        (_, None) => format!("no runnable mke2fs in {}", dir.display()),
        (Some(x), _) if x < XFS_MIN => format!(
            "{}'s mkfs.xfs is {} (needs {} or later for a reproducible -p)",
            source,
            show(x),
            show(XFS_MIN)
        ),
        (_, Some(e)) if e < E2FS_MIN => format!(
            "{}'s mke2fs is {} (needs {} or later for a reproducible -d)",
            source,
            show(e),
            show(E2FS_MIN)
        ),
        _ if !path("xfs_db").exists() => format!("no xfs_db in {}", dir.display()),
        (Some(x), Some(e)) => {
            return Ok(Tools {
                mkfs_xfs: path("mkfs.xfs"),
                xfs_db: path("xfs_db"),
                mke2fs: path("mke2fs"),
                share: share.map(Path::to_path_buf),
                versions: format!("mkfs.xfs {}, mke2fs {}", show(x), show(e)),
                source: source.to_string(),
            })
        }
    };
    Err(why)
}

/// A `scripts/mkfs-root.sh` entry (`bin/`, `VERSIONS`) at `entry`, or the
/// newest entry under `entry` when it is the script's cache directory.
fn entry_tools(entry: &Path) -> std::result::Result<Tools, String> {
    let whole = |e: &Path| e.join("VERSIONS").is_file() && e.join("bin").is_dir();
    let chosen = if whole(entry) {
        entry.to_path_buf()
    } else {
        let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(entry)
            .map_err(|e| format!("{}: {e}", entry.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|e| whole(e))
            .filter_map(|e| Some((e.join("VERSIONS").metadata().ok()?.modified().ok()?, e)))
            .collect();
        found.sort();
        match found.pop() {
            Some((_, e)) => e,
            None => return Err(format!("no mkfs-root.sh entry in {}", entry.display())),
        }
    };
    let versions = std::fs::read_to_string(chosen.join("VERSIONS")).unwrap_or_default();
    let of = |p: &str| {
        versions
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{p} ")))
            .unwrap_or("?")
            .to_string()
    };
    let suite = versions
        .lines()
        .find_map(|l| l.strip_prefix("suite="))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or("?");
    tools_in(
        &chosen.join("bin"),
        Some(&chosen),
        &format!(
            "Debian {suite}'s xfsprogs {}, e2fsprogs {} ({})",
            of("xfsprogs"),
            of("e2fsprogs"),
            chosen.display()
        ),
    )
}

/// Where the tool looks for a `scripts/mkfs-root.sh` cache, after this
/// host's own tools: the tool's image (`/usr/lib/bootimage-gen/mkfs-root`),
/// the script's default cache (`$BOOTIMAGE_CACHE`, else
/// `/var/cache/bootimage-gen` as root, else `$XDG_CACHE_HOME/bootimage-gen`)
/// and the run's `--cache-dir`.
pub fn search_path(cache_dir: &Path) -> Vec<PathBuf> {
    let mut v = vec![PathBuf::from("/usr/lib/bootimage-gen/mkfs-root")];
    if let Some(c) = std::env::var_os("BOOTIMAGE_CACHE") {
        v.push(PathBuf::from(c).join("mkfs-root"));
    } else if crate::util::owner::is_root() {
        v.push(PathBuf::from("/var/cache/bootimage-gen/mkfs-root"));
    }
    if let Some(c) = dirs::cache_dir() {
        v.push(c.join("bootimage-gen/mkfs-root"));
    }
    v.push(cache_dir.join("mkfs-root"));
    v.dedup();
    v
}

/// The mkfs to make the filesystems from a staged tree: `explicit`
/// (`--mkfs-tools`: an entry of `scripts/mkfs-root.sh`, its cache
/// directory, or a directory holding mkfs.xfs, mke2fs and xfs_db) must be
/// usable, else an error; otherwise this host's own when new enough, else
/// the newest entry in [`search_path`]. `Ok(Err(why))`: none, and why (the
/// filesystems are then written by the kernel, not reproducibly).
pub fn find_tools(
    explicit: Option<&Path>,
    cache_dir: &Path,
) -> Result<std::result::Result<Tools, String>> {
    if let Some(d) = explicit {
        let t = match entry_tools(d) {
            Ok(t) => Ok(t),
            Err(_) if d.join("mkfs.xfs").exists() => tools_in(d, Some(d), &d.display().to_string()),
            Err(e) => Err(e),
        };
        return t
            .map(Ok)
            .map_err(|why| anyhow::anyhow!("--mkfs-tools {}: {why}", d.display()));
    }
    let mut why = Vec::new();
    let host = ["/usr/sbin", "/sbin", "/usr/bin"]
        .iter()
        .map(Path::new)
        .find(|d| d.join("mkfs.xfs").exists());
    match host.map(|d| tools_in(d, None, "this host")) {
        Some(Ok(t)) => return Ok(Ok(t)),
        Some(Err(w)) => why.push(w),
        None => why.push("this host has no mkfs.xfs".into()),
    }
    for d in search_path(cache_dir) {
        if !d.is_dir() {
            continue;
        }
        match entry_tools(&d) {
            Ok(t) => return Ok(Ok(t)),
            Err(w) => why.push(w),
        }
    }
    why.push(format!(
        "no scripts/mkfs-root.sh entry in {}",
        search_path(cache_dir)
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok(Err(why.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of fake tools that print `xfs` and `e2` as their
    /// versions the way the real ones do.
    fn fake_tools(xfs: &str, e2: &str) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let tool = |name: &str, body: String| {
            let p = d.path().join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        tool("mkfs.xfs", format!("echo 'mkfs.xfs version {xfs}'"));
        tool(
            "mke2fs",
            format!(
                "echo 'mke2fs {e2} (6-Mar-2025)' >&2\necho 'Using EXT2FS Library version {e2}' >&2"
            ),
        );
        tool("xfs_db", String::new());
        d
    }

    #[test]
    fn tools_are_taken_only_when_new_enough_and_the_reason_is_named() {
        assert_eq!(version3("7.2.0"), (7, 2, 0));
        assert_eq!(version3("1.47.4"), (1, 47, 4));
        let good = fake_tools("7.2.0", "1.47.4");
        let t = find_tools(Some(good.path()), Path::new("/nonexistent"))
            .unwrap()
            .unwrap();
        assert_eq!(t.versions, "mkfs.xfs 7.2.0, mke2fs 1.47.4");
        assert_eq!(t.mkfs_xfs, good.path().join("mkfs.xfs"));
        // Debian 12's: too old, each named with what it needs.
        let old = fake_tools("6.1.0", "1.47.4");
        let e = find_tools(Some(old.path()), Path::new("/nonexistent")).unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains("--mkfs-tools") && e.contains("6.1.0") && e.contains("6.19.0"),
            "{e}"
        );
        let old_e2 = fake_tools("7.2.0", "1.47.0");
        let e = format!(
            "{:#}",
            find_tools(Some(old_e2.path()), Path::new("/x")).unwrap_err()
        );
        assert!(e.contains("1.47.0") && e.contains("1.47.3"), "{e}");
        let empty = tempfile::tempdir().unwrap();
        let e = format!(
            "{:#}",
            find_tools(Some(empty.path()), Path::new("/x")).unwrap_err()
        );
        assert!(e.contains(&empty.path().display().to_string()), "{e}");
    }

    #[test]
    fn a_mkfs_root_entry_is_found_under_its_cache_and_its_packages_named() {
        let cache = tempfile::tempdir().unwrap();
        let entry = cache.path().join("mkfs-root/0123456789abcdef");
        std::fs::create_dir_all(&entry).unwrap();
        let bin = fake_tools("7.2.0", "1.47.4");
        std::fs::rename(bin.path(), entry.join("bin")).unwrap();
        std::fs::write(
            entry.join("VERSIONS"),
            "e2fsprogs 1.47.4-1+b2\nxfsprogs 7.2.0-1\nsuite=forky mirror=http://deb.debian.org/debian\n",
        )
        .unwrap();
        let t = entry_tools(&cache.path().join("mkfs-root")).unwrap();
        assert_eq!(t.share.as_deref(), Some(entry.as_path()));
        assert!(
            t.source
                .contains("forky's xfsprogs 7.2.0-1, e2fsprogs 1.47.4-1+b2"),
            "{}",
            t.source
        );
        assert!(search_path(cache.path()).contains(&cache.path().join("mkfs-root")));
    }
}
