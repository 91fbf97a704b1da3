//! mkfs command lines for the boot and root filesystems (docs/contract.md §2), with the
//! features a given OS kernel can mount. The host's mkfs may enable newer
//! features by default than the OS's kernel supports (e2fsprogs 1.47
//! `orphan_file` needs Linux 5.15; xfsprogs 5.15+ `bigtime`/`inobtcount`
//! need Linux 5.10): those are switched off for older kernels.
use super::layout::{Fs, PartSpec};
use crate::util::cmd;
use anyhow::{bail, Context, Result};
use std::path::Path;

mod from_dir;
mod tools;
pub use from_dir::{
    ext4_from_dir, xfs_from_dir, xfs_set_immutable, FAULT_ENV, FAULT_UNPINNED, MKE2FS_CONF,
};
pub use tools::{find_tools, search_path, Tools};

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

#[cfg(test)]
mod tests {
    use super::*;
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
