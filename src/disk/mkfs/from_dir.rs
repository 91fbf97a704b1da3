//! The command lines that make the root and boot filesystems from a
//! staged tree in one pass, reproducibly (docs/contract.md §9).
use super::{fs_ids, kernel_release, Tools, FS_BLOCK};
use crate::disk::layout::PartSpec;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

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
