//! s390x IPL (docs/contract.md §3.2): zipl, the OS's own s390x binary, writes its
//! bootmap into the boot filesystem and its SCSI boot record into the
//! disk's first sector, as osbuild's `org.osbuild.zipl.inst` runs it:
//!
//! ```text
//! zipl --verbose --target <boot> --image <kernel> --ramdisk <initrd>
//!      --parameters "<BLS options> ignition.firstboot"
//!      --targetbase <disk> --targettype SCSI
//!      --targetblocksize <sector size> --targetoffset <boot start in sectors>
//! ```
//!
//! with the BLS entry of `version 1`. On a host of another architecture the
//! binary runs under `qemu-s390x-static` with the deployment as its root
//! for libraries and zipl's stage files (`-L`). zipl needs a block device
//! as its target base: a scratch loop device of the disk's sector size,
//! whose first sector then holds the record; the bootmap's block numbers are
//! disk sectors (the boot filesystem's FIBMAP blocks plus `--targetoffset`),
//! so the boot filesystem image and the record fit any disk with the same
//! boot partition offset and sector size.
use super::bios::MBR_CODE_END;
use super::grubcfg::BlsEntry;
use crate::sys::loopback::LoopDevice;
use crate::util::arch::Arch;
use crate::util::cmd;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Where RHCOS ships zipl in the OS tree (s390-tools).
pub const ZIPL_PATH: &str = "usr/sbin/zipl";
/// The user-mode emulator that runs s390x binaries on other hosts
/// (Debian/Fedora `qemu-user-static`).
pub const QEMU_USER: &[&str] = &["qemu-s390x-static", "qemu-s390x"];
/// What zipl adds to the entry's options (osbuild `kernel_opts_append`):
/// zipl has no variables, so the first boot is marked here.
pub const FIRSTBOOT_KARG: &str = "ignition.firstboot";

/// One zipl run.
pub struct Zipl<'a> {
    /// The deployment's root (the OS whose zipl and stage files are used).
    pub sysroot: &'a Path,
    /// The mounted boot filesystem (zipl's `--target`).
    pub boot: &'a Path,
    /// The BLS entries on it, with the platform's options.
    pub entries: &'a [BlsEntry],
    /// The disk's sector size.
    pub block_size: u64,
    /// Byte offset of the boot partition on the disk.
    pub boot_start: u64,
    /// Scratch space.
    pub workdir: &'a Path,
}

/// The OS's zipl in `sysroot`, if it ships one.
pub fn find_zipl(sysroot: &Path) -> Option<PathBuf> {
    Some(sysroot.join(ZIPL_PATH)).filter(|p| p.is_file())
}

/// How to run an s390x program on this host: natively on s390x, else the
/// user-mode emulator.
pub fn emulator() -> Result<Option<&'static str>> {
    if Arch::host() == Arch::S390x {
        return Ok(None);
    }
    QEMU_USER
        .iter()
        .copied()
        .find(|p| cmd::have(p))
        .map(Some)
        .context(
            "s390x disks need the OS's zipl, an s390x program: this host runs it with \
             qemu-s390x-static, which is not installed (Debian/Fedora: qemu-user-static)",
        )
}

/// The kernel parameters zipl records: the entry's options and
/// `ignition.firstboot`.
pub fn parameters(e: &BlsEntry) -> String {
    let mut p: Vec<&str> = e.options.split_whitespace().collect();
    if !p.contains(&FIRSTBOOT_KARG) {
        p.push(FIRSTBOOT_KARG);
    }
    p.join(" ")
}

/// The entry zipl boots: `version 1` (osbuild `find_kernel(root, "1")`),
/// else the only one.
fn pick(entries: &[BlsEntry]) -> Result<&BlsEntry> {
    if let Some(e) = entries.iter().find(|e| e.version == "1") {
        return Ok(e);
    }
    match entries {
        [one] => Ok(one),
        _ => bail!(
            "zipl boots one BLS entry, but the boot filesystem has {} and none is version 1",
            entries.len()
        ),
    }
}

/// A path from a BLS entry (`/boot/...` with ostree's bootprefix, or
/// relative to the boot filesystem) inside the mounted boot filesystem.
fn on_boot(boot: &Path, p: &str) -> PathBuf {
    let rel = p.trim_start_matches('/');
    let rel = rel.strip_prefix("boot/").unwrap_or(rel);
    boot.join(rel)
}

/// Run zipl; returns the boot record for the disk's first sector (the MBR
/// code area; zipl keeps the partition table after it).
pub fn install(z: &Zipl) -> Result<Vec<u8>> {
    let zipl = find_zipl(z.sysroot).with_context(|| {
        format!(
            "the OS has no zipl ({ZIPL_PATH} in {}): s390x disks IPL through zipl's boot \
             record; use an OS image that ships s390-tools (as RHCOS does)",
            z.sysroot.display()
        )
    })?;
    let e = pick(z.entries)?;
    let kernel = on_boot(z.boot, &e.linux);
    let initrd = match e.initrd.as_slice() {
        [one] => on_boot(z.boot, one),
        other => bail!(
            "zipl takes one initramfs; the BLS entry names {}",
            other.len()
        ),
    };
    if z.boot_start % z.block_size != 0 {
        bail!(
            "the boot partition at byte {} is not on a {}-byte sector",
            z.boot_start,
            z.block_size
        );
    }
    // A sparse scratch disk up to the boot partition; zipl writes sector 0.
    let scratch = z.workdir.join("zipl-target.img");
    let f = crate::io::create_sized(&scratch, z.boot_start.max(1 << 20))?;
    drop(f);
    let dev = LoopDevice::attach(&scratch, 0, z.boot_start.max(1 << 20), z.block_size)?;
    let mut c = match emulator()? {
        Some(q) => {
            let mut c = cmd::new(q, ["-L"]);
            c.arg(z.sysroot).arg(&zipl);
            c
        }
        None => cmd::new(
            zipl.to_str().context("zipl's path is not UTF-8")?,
            Vec::<String>::new(),
        ),
    };
    c.arg("--verbose")
        .arg("--target")
        .arg(z.boot)
        .arg("--image")
        .arg(&kernel)
        .arg("--ramdisk")
        .arg(&initrd)
        .arg("--parameters")
        .arg(parameters(e))
        .arg("--targetbase")
        .arg(dev.path())
        .args(["--targettype", "SCSI", "--targetblocksize"])
        .arg(z.block_size.to_string())
        .arg("--targetoffset")
        .arg((z.boot_start / z.block_size).to_string());
    let ran = cmd::run(&mut c).context("running the OS's zipl");
    let closed = dev.close();
    ran?;
    closed?;
    let data = std::fs::read(&scratch).ok();
    std::fs::remove_file(&scratch).ok();
    let data = data.context("reading zipl's boot record")?;
    let rec = data[..MBR_CODE_END].to_vec();
    if &rec[..4] != b"zIPL" {
        bail!("zipl wrote no SCSI boot record (no zIPL magic in the first sector)");
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_add_firstboot_once() {
        let e = BlsEntry {
            options: "rw ostree=/ostree/boot.1/x ignition.platform.id=metal".into(),
            ..Default::default()
        };
        assert_eq!(
            parameters(&e),
            "rw ostree=/ostree/boot.1/x ignition.platform.id=metal ignition.firstboot"
        );
        let e = BlsEntry {
            options: "rw ignition.firstboot".into(),
            ..Default::default()
        };
        assert_eq!(parameters(&e), "rw ignition.firstboot");
    }

    #[test]
    fn picks_version_1_and_maps_paths() {
        let a = BlsEntry {
            version: "2".into(),
            ..Default::default()
        };
        let b = BlsEntry {
            version: "1".into(),
            ..Default::default()
        };
        assert_eq!(pick(&[a.clone(), b.clone()]).unwrap().version, "1");
        assert!(pick(&[a.clone(), a.clone()]).is_err());
        assert_eq!(pick(&[a]).unwrap().version, "2");
        let boot = Path::new("/mnt/b");
        assert_eq!(
            on_boot(boot, "/boot/ostree/x/vmlinuz"),
            Path::new("/mnt/b/ostree/x/vmlinuz")
        );
        assert_eq!(
            on_boot(boot, "/ostree/x/vmlinuz"),
            Path::new("/mnt/b/ostree/x/vmlinuz")
        );
    }
}
