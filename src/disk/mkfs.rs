//! mkfs command lines for the boot and root filesystems (docs/contract.md §2), with the
//! features a given OS kernel can mount. The host's mkfs may enable newer
//! features by default than the OS's kernel supports (e2fsprogs 1.47
//! `orphan_file` needs Linux 5.15; xfsprogs 5.15+ `bigtime`/`inobtcount`
//! need Linux 5.10): those are switched off for older kernels.
use super::layout::{Fs, PartSpec};
use crate::util::cmd;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Block size of both filesystems: equal to the largest logical sector size
/// we produce, so one root filesystem serves 512- and 4096-byte disks.
pub const FS_BLOCK: u64 = 4096;

/// A kernel release as (major, minor); unknown parts are 0.
pub fn kernel_release(v: &str) -> (u32, u32) {
    let mut it = v
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// A feature a newer mkfs turns on by default and the kernel that first
/// mounts it read-write.
struct Gate {
    fs: Fs,
    since: (u32, u32),
    off: &'static str,
}

/// Features to switch off for older kernels (kernel release notes; mke2fs.conf,
/// mkfs.xfs man pages).
const GATES: &[Gate] = &[
    Gate {
        fs: Fs::Ext4,
        since: (5, 15),
        off: "^orphan_file",
    },
    Gate {
        fs: Fs::Xfs,
        since: (5, 10),
        off: "bigtime=0",
    },
    Gate {
        fs: Fs::Xfs,
        since: (5, 10),
        off: "inobtcount=0",
    },
];

/// Does the host's mkfs know the feature a gate would switch off? Asked
/// once per filesystem type and run.
fn host_knows(g: &Gate) -> bool {
    static EXT4: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    static XFS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    match g.fs {
        Fs::Ext4 => *EXT4.get_or_init(|| ask_host(Fs::Ext4)),
        Fs::Xfs => *XFS.get_or_init(|| ask_host(Fs::Xfs)),
        _ => false,
    }
}

fn ask_host(fs: Fs) -> bool {
    match fs {
        Fs::Ext4 => {
            // orphan_file arrived in e2fsprogs 1.47.
            let v = std::process::Command::new("mke2fs").arg("-V").output();
            let text = v
                .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .unwrap_or_default();
            let ver = text
                .split_whitespace()
                .nth(1)
                .map(kernel_release)
                .unwrap_or((0, 0));
            ver >= (1, 47)
        }
        Fs::Xfs => {
            let v = std::process::Command::new("mkfs.xfs").arg("-V").output();
            let text = v
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            let ver = text
                .split_whitespace()
                .last()
                .map(kernel_release)
                .unwrap_or((0, 0));
            ver >= (5, 10)
        }
        _ => false,
    }
}

/// The filesystem UUID and label of `part` (the layout table's).
fn fs_ids(part: &PartSpec) -> Result<(&'static str, &'static str)> {
    let uuid = part
        .fs_uuid
        .context("filesystem UUID in the layout table")?;
    Ok((uuid, part.fs_label.unwrap_or(part.label)))
}

/// The mkfs command for `part` on `dev`, for an OS running `kernel`.
pub fn command(part: &PartSpec, dev: &Path, kernel: &str) -> Result<std::process::Command> {
    let k = kernel_release(kernel);
    let off: Vec<&str> = GATES
        .iter()
        .filter(|g| g.fs == part.fs && k < g.since && host_knows(g))
        .map(|g| g.off)
        .collect();
    let (uuid, label) = fs_ids(part)?;
    let mut c = match part.fs {
        Fs::Ext4 => {
            let mut features = vec!["metadata_csum_seed"];
            features.extend(off.iter().copied());
            cmd::new(
                "mkfs.ext4",
                [
                    "-q".to_string(),
                    "-F".into(),
                    "-L".into(),
                    label.into(),
                    "-U".into(),
                    uuid.into(),
                    "-b".into(),
                    FS_BLOCK.to_string(),
                    "-O".into(),
                    features.join(","),
                    // Reproducible images: no lazy init left for first boot.
                    "-E".into(),
                    "lazy_itable_init=0,lazy_journal_init=0".into(),
                ],
            )
        }
        Fs::Xfs => {
            let mut m = vec![format!("uuid={uuid}")];
            m.extend(off.iter().map(|s| s.to_string()));
            cmd::new(
                "mkfs.xfs",
                [
                    "-q".to_string(),
                    "-f".into(),
                    "-L".into(),
                    label.into(),
                    "-m".into(),
                    m.join(","),
                    "-d".into(),
                    "agcount=2".into(),
                    // 4096-byte sectors: mounts on 512 and 4Kn disks alike.
                    "-s".into(),
                    format!("size={FS_BLOCK}"),
                ],
            )
        }
        other => bail!("no mkfs for {other:?} (built in userspace or not a filesystem)"),
    };
    c.arg(dev);
    Ok(c)
}

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

/// `mke2fs`'s configuration for [`ext4_from_dir`]: everything pinned, so
/// neither the host's `/etc/mke2fs.conf` nor the tools' defaults reach
/// the image (the command line pins the same again).
pub const MKE2FS_CONF: &str = "[defaults]
\tbase_features = sparse_super,large_file,filetype,resize_inode,dir_index,ext_attr
\tdefault_mntopts = acl,user_xattr
\tenable_periodic_fsck = 0
\tblocksize = 4096
\tinode_size = 256
\tinode_ratio = 16384
\treserved_ratio = 5.0
\thash_alg = half_md4
\tlazy_itable_init = false
\tlazy_journal_init = false
\tdiscard = false

[fs_types]
\text4 = {
\t\tfeatures = has_journal,extent,huge_file,flex_bg,metadata_csum,metadata_csum_seed,64bit,dir_nlink,extra_isize
\t}
";

/// The ext4 features of the boot filesystem, all of them (the set today's
/// images have; `orphan_file` left out: Linux 5.15).
const EXT4_FEATURES: &str = "none,has_journal,ext_attr,resize_inode,dir_index,filetype,extent,64bit,flex_bg,metadata_csum_seed,sparse_super,large_file,huge_file,dir_nlink,extra_isize,metadata_csum";

/// The environment that makes both mkfs reproducible: the OS's time as
/// every "now", fixed seeds, C locale, nothing else inherited that they
/// read (`MKE2FS_*`, `XFS_*` from the caller).
fn pinned(c: &mut std::process::Command, time: i64) {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("MKE2FS_")
            || k.starts_with("E2FSPROGS_")
            || k.starts_with("XFS")
            || k.starts_with("LC_")
        {
            c.env_remove(&*k);
        }
    }
    c.env("LC_ALL", "C").env("TZ", "UTC");
    // Fault injection for the tests: the clock and random seeds back, to
    // prove the two-run check bites.
    if std::env::var(FAULT_ENV).is_ok_and(|v| v == FAULT_UNPINNED) {
        return;
    }
    c.env("SOURCE_DATE_EPOCH", time.to_string())
        .env("DETERMINISTIC_SEED", "1")
        .env("E2FSPROGS_FAKE_TIME", time.to_string());
}

/// `BOOTIMAGE_GEN_FAULT=unpinned-mkfs`: mkfs without the OS's time and the
/// fixed seeds (tests only).
pub const FAULT_ENV: &str = "BOOTIMAGE_GEN_FAULT";
pub const FAULT_UNPINNED: &str = "unpinned-mkfs";

/// `mkfs.xfs -p DIR` onto `dev`: every feature, the geometry (AG count,
/// sector and block size, log size) and the seeds pinned; the features a
/// kernel older than the OS's lacks switched off as [`command`] does.
pub fn xfs_from_dir(
    t: &Tools,
    part: &PartSpec,
    dev: &Path,
    dir: &Path,
    kernel: &str,
    time: i64,
) -> Result<std::process::Command> {
    let k = kernel_release(kernel);
    let new = |since| if k >= since { "1" } else { "0" };
    let (uuid, label) = fs_ids(part)?;
    let mut c = std::process::Command::new(&t.mkfs_xfs);
    pinned(&mut c, time);
    c.args(["-q", "-f", "-K"])
        .args([
            "-b",
            &format!("size={FS_BLOCK}"),
            "-s",
            &format!("size={FS_BLOCK}"),
        ])
        .arg("-m")
        .arg(format!(
            "crc=1,finobt=1,rmapbt=0,reflink=1,inobtcount={},bigtime={},metadir=0,uuid={uuid}",
            new((5, 10)),
            new((5, 10))
        ))
        .args([
            "-i",
            "size=512,attr=2,projid32bit=1,sparse=1,nrext64=0,exchange=0",
        ])
        .args(["-n", "version=2,size=4096,ftype=1,parent=0"])
        .args(["-d", "agcount=2"])
        .args(["-l", "internal,size=16384b,version=2,lazy-count=1"])
        .args(["-L", label])
        .arg("-p")
        .arg(dir)
        .arg(dev);
    Ok(c)
}

/// `xfs_db -x` on `dev` setting the immutable flag of each directory in
/// `dirs` (relative to the root), which `mkfs.xfs -p` does not copy.
pub fn xfs_set_immutable(t: &Tools, dev: &Path, dirs: &[PathBuf]) -> Result<std::process::Command> {
    let mut c = std::process::Command::new(&t.xfs_db);
    c.env("LC_ALL", "C").arg("-x");
    for d in dirs {
        let p = d.to_str().context("a non-UTF-8 path")?;
        if p.contains(char::is_whitespace) {
            bail!("xfs_db cannot name {p:?} (it holds white space) to set its immutable flag");
        }
        c.args(["-c", &format!("path /{p}"), "-c", "write core.immutable 1"]);
    }
    c.arg(dev);
    Ok(c)
}

/// `mke2fs -d DIR` onto `dev`: ext4 with every feature, the geometry, the
/// UUID and hash seed, and the configuration (`config`, holding
/// [`MKE2FS_CONF`]) pinned. It walks the tree in sorted order itself.
pub fn ext4_from_dir(
    t: &Tools,
    part: &PartSpec,
    dev: &Path,
    dir: &Path,
    config: &Path,
    time: i64,
) -> Result<std::process::Command> {
    let (uuid, label) = fs_ids(part)?;
    let mut c = std::process::Command::new(&t.mke2fs);
    pinned(&mut c, time);
    c.env("MKE2FS_CONFIG", config)
        .env("MKE2FS_DEVICE_SECTSIZE", "512")
        .env("MKE2FS_DEVICE_PHYS_SECTSIZE", "512")
        .args(["-q", "-F", "-t", "ext4", "-T", "default"])
        .args([
            "-b",
            &FS_BLOCK.to_string(),
            "-I",
            "256",
            "-i",
            "16384",
            "-m",
            "5",
            "-G",
            "16",
            "-J",
            "size=16",
        ])
        .args(["-O", EXT4_FEATURES, "-U", uuid, "-L", label])
        .arg("-E")
        .arg(format!(
            "hash_seed={uuid},nodiscard,lazy_itable_init=0,lazy_journal_init=0,root_owner=0:0"
        ))
        .arg("-d")
        .arg(dir)
        .arg(dev);
    Ok(c)
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
    use crate::disk::layout::PARTITIONS;
    #[test]
    fn kernel_versions_gate_features() {
        assert_eq!(kernel_release("5.14.0-427.el9.x86_64"), (5, 14));
        assert_eq!(kernel_release("6.1.0-56-amd64"), (6, 1));
        let root = PARTITIONS.iter().find(|p| p.fs == Fs::Xfs).unwrap();
        let new = cmd::render(&command(root, Path::new("/dev/x"), "6.1.0").unwrap());
        assert!(
            new.contains("uuid=910678ff-f77e-4a7d-8d53-86f2ac47a823"),
            "{new}"
        );
        assert!(
            new.contains("agcount=2") && new.contains("size=4096"),
            "{new}"
        );
        assert!(!new.contains("bigtime=0"), "{new}");
        let old = cmd::render(&command(root, Path::new("/dev/x"), "4.18.0-372").unwrap());
        assert!(old.contains("bigtime=0"), "{old}");
        let boot = PARTITIONS.iter().find(|p| p.fs == Fs::Ext4).unwrap();
        let b = cmd::render(&command(boot, Path::new("/dev/x"), "5.14.0").unwrap());
        assert!(b.contains("metadata_csum_seed"), "{b}");
        assert!(b.contains("-L boot"), "{b}");
        assert!(b.contains("^orphan_file"), "{b}");
        let esp = PARTITIONS.iter().find(|p| p.fs == Fs::Vfat).unwrap();
        assert!(command(esp, Path::new("/dev/x"), "6.1").is_err());
    }
}
