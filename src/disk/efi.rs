//! The ESP's policy over the OS's `EFI/` tree (docs/contract.md §2): which directory is
//! the vendor's. The FAT filesystem itself is written by [`crate::fs::fat`].
use anyhow::{bail, Context, Result};
use std::path::Path;

/// Name of the removable-media directory under `EFI/` (UEFI spec 3.5.1.1).
const EFI_BOOT_DIR: &str = "BOOT";

/// The vendor directory under the OS's `EFI/` tree: the one directory other
/// than `BOOT` that holds a `grub*.efi` (RHCOS `redhat`, FCOS `fedora`).
pub fn vendor_dir(efi_src: &Path) -> Result<String> {
    let rd = std::fs::read_dir(efi_src)
        .with_context(|| format!("reading the OS's EFI directory {}", efi_src.display()))?;
    let mut found = Vec::new();
    for ent in rd {
        let ent = ent.with_context(|| format!("reading {}", efi_src.display()))?;
        let name = ent.file_name().to_string_lossy().into_owned();
        if name.eq_ignore_ascii_case(EFI_BOOT_DIR) || !ent.file_type()?.is_dir() {
            continue;
        }
        let has_grub = std::fs::read_dir(ent.path())
            .with_context(|| format!("reading {}", ent.path().display()))?
            .filter_map(|e| e.ok())
            .any(|e| {
                let n = e.file_name().to_string_lossy().to_ascii_lowercase();
                n.starts_with("grub") && n.ends_with(".efi") && e.path().is_file()
            });
        if has_grub {
            found.push(name);
        }
    }
    found.sort();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => bail!(
            "no vendor directory with a grub*.efi under {} (expected e.g. EFI/redhat/grubx64.efi); \
             UEFI boot needs the OS's GRUB",
            efi_src.display()
        ),
        _ => bail!(
            "more than one vendor directory with a grub*.efi under {}: {}; cannot tell which is the OS's",
            efi_src.display(),
            found.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOLID: u32 = 0x7B77_95E7;

    #[test]
    fn vendor_dir_finds_the_one_grub_dir() {
        let d = tempfile::tempdir().unwrap();
        for f in [
            "BOOT/BOOTX64.EFI",
            "redhat/shimx64.efi",
            "redhat/grubx64.efi",
        ] {
            let p = d.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"MZ").unwrap();
        }
        assert_eq!(vendor_dir(d.path()).unwrap(), "redhat");
        // BOOT is never the vendor, even with a grub in it.
        std::fs::write(d.path().join("BOOT/grubx64.efi"), b"x").unwrap();
        assert_eq!(vendor_dir(d.path()).unwrap(), "redhat");
        // A directory without grub*.efi does not count.
        std::fs::create_dir(d.path().join("other")).unwrap();
        std::fs::write(d.path().join("other/foo.efi"), b"x").unwrap();
        assert_eq!(vendor_dir(d.path()).unwrap(), "redhat");
        // Two candidates are ambiguous.
        std::fs::create_dir(d.path().join("testos")).unwrap();
        std::fs::write(d.path().join("testos/grubx64.efi"), b"x").unwrap();
        let e = format!("{:#}", vendor_dir(d.path()).unwrap_err());
        assert!(e.contains("redhat, testos"), "{e}");
        // None at all.
        let empty = tempfile::tempdir().unwrap();
        std::fs::create_dir(empty.path().join("BOOT")).unwrap();
        let e = format!("{:#}", vendor_dir(empty.path()).unwrap_err());
        assert!(e.contains("no vendor directory"), "{e}");
        assert!(vendor_dir(&empty.path().join("missing")).is_err());
    }

    /// Boots a disk with OVMF under TCG, with 512- and 4096-byte logical
    /// sectors: the firmware reads our FAT, starts the vendor GRUB (built
    /// here with grub-mkimage, prefix /EFI/<vendor>), which reads the stub
    /// grub.cfg from `efi_stub_cfg`, finds the boot filesystem and boots the
    /// test kernel from the boot grub.cfg. Needs root, qemu and OVMF.
    #[test]
    #[cfg_attr(not(feature = "boot"), ignore = "boots qemu as root (--features boot)")]
    fn ovmf_boots_grub_from_the_esp() {
        use crate::disk::bios::tests::{boot_and_check, gpt_disk, write_boot_fs};
        use crate::disk::grubcfg::efi_stub_cfg;
        let ovmf = "/usr/share/qemu/OVMF.fd";
        let efi_mods = "/usr/lib/grub/x86_64-efi";
        assert!(Path::new(ovmf).is_file() && Path::new(efi_mods).is_dir());
        let vendor = "vendorx";
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("BOOT")).unwrap();
        std::fs::create_dir_all(src.path().join(vendor)).unwrap();
        let grub_efi = src.path().join(vendor).join("grubx64.efi");
        let mut c = crate::util::cmd::new(
            "grub-mkimage",
            [
                "-O",
                "x86_64-efi",
                "-d",
                efi_mods,
                "-p",
                &format!("/EFI/{vendor}"),
                "-o",
            ],
        );
        c.arg(&grub_efi).args([
            "part_gpt",
            "fat",
            "ext2",
            "normal",
            "linux",
            "search",
            "search_label",
            "configfile",
            "echo",
            "test",
            "serial",
            "terminal",
            "all_video",
            "efi_gop",
            "gzio",
            "halt",
            "reboot",
        ]);
        crate::util::cmd::run(&mut c).unwrap();
        std::fs::copy(&grub_efi, src.path().join("BOOT/BOOTX64.EFI")).unwrap();
        assert_eq!(vendor_dir(src.path()).unwrap(), vendor);
        for ss in [512u64, 4096] {
            let (f, l) = gpt_disk(1 << 30, ss);
            let esp = l.part("EFI-SYSTEM");
            let extra = vec![(
                format!("EFI/{vendor}/grub.cfg"),
                efi_stub_cfg().into_bytes(),
            )];
            crate::fs::fat::build_esp(
                crate::fs::fat::EspTarget::Region {
                    disk: f.as_file(),
                    offset: esp.start,
                },
                &crate::fs::fat::EspOptions {
                    size: esp.size,
                    sector_size: ss as u16,
                    volume_id: VOLID,
                    label: "EFI-SYSTEM",
                    efi_src: src.path(),
                    extra: &extra,
                },
            )
            .unwrap();
            let hello = format!("UEFI-GRUB-CONSOLE-OK-{ss}");
            let bs = if ss == 4096 {
                vec!["-b", "4096"]
            } else {
                vec![]
            };
            write_boot_fs(f.path(), &l, &bs, &hello);
            let drive = format!("if=none,id=d0,format=raw,file={}", f.path().display());
            let dev =
                format!("virtio-blk-pci,drive=d0,logical_block_size={ss},physical_block_size={ss}");
            boot_and_check(&["-bios", ovmf, "-drive", &drive, "-device", &dev], &hello);
        }
    }
}
