//! The CoreOS disk layout (docs/contract.md §2, §3.2; cosa `src/osbuild-manifests/
//! coreos.osbuild.<arch>.mpp.yaml`), as one table per architecture:
//! partitions, type GUIDs, labels, filesystems, UUIDs and mkfs options.
//! Offsets are in bytes and the same for 512- and 4096-byte sectors. The
//! arch is the OS image's, never the host's.
use crate::util::arch::Arch;
use anyhow::{bail, Result};
use serde::Serialize;

pub const MIB: u64 = 1 << 20;

/// Fixed disk GUID; the first boot randomises it (docs/contract.md §2).
pub const DISK_GUID: &str = "00000000-0000-4000-a000-000000000001";

/// Filesystem of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fs {
    None,
    Vfat,
    Ext4,
    Xfs,
}

/// One row of the partition table.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PartSpec {
    pub number: u32,
    pub label: &'static str,
    pub type_guid: &'static str,
    /// Unique partition GUID (fixed so images are reproducible).
    pub part_guid: &'static str,
    /// Size in bytes; `None` = the rest of the disk.
    pub size: Option<u64>,
    pub fs: Fs,
    pub fs_label: Option<&'static str>,
    /// Filesystem UUID (or FAT volume id for vfat).
    pub fs_uuid: Option<&'static str>,
}

/// The x86_64 table. Type GUIDs: UEFI spec / Discoverable Partitions Spec.
pub const PARTITIONS: [PartSpec; 4] = X86_64;

/// The ESP row, the same on every arch that has one.
const ESP: PartSpec = PartSpec {
    number: 2,
    label: "EFI-SYSTEM",
    type_guid: "C12A7328-F81F-11D2-BA4B-00A0C93EC93B",
    part_guid: "00000000-0000-4000-a000-000000000102",
    size: Some(127 * MIB),
    fs: Fs::Vfat,
    fs_label: Some("EFI-SYSTEM"),
    fs_uuid: Some("7B77-95E7"),
};
/// The boot row, the same on every arch.
const BOOT: PartSpec = PartSpec {
    number: 3,
    label: "boot",
    type_guid: "BC13C2FF-59E6-4262-A352-B275FD6F7172",
    part_guid: "00000000-0000-4000-a000-000000000103",
    size: Some(384 * MIB),
    fs: Fs::Ext4,
    fs_label: Some("boot"),
    fs_uuid: Some("96d15588-3596-4b3c-adca-a2ff7279ea63"),
};
/// The root row with the arch's root type GUID (Discoverable Partitions
/// Spec, as cosa's manifests set them).
const fn root(type_guid: &'static str) -> PartSpec {
    PartSpec {
        number: 4,
        label: "root",
        type_guid,
        part_guid: "00000000-0000-4000-a000-000000000104",
        size: None,
        fs: Fs::Xfs,
        fs_label: Some("root"),
        fs_uuid: Some("910678ff-f77e-4a7d-8d53-86f2ac47a823"),
    }
}

/// aarch64 (cosa `coreos.osbuild.aarch64.mpp.yaml`): a 1 MiB `reserved`
/// partition where x86_64 has BIOS-BOOT (nothing is written to it; it keeps
/// the offsets of x86_64), the ESP, boot, root. EFI only.
pub const AARCH64: [PartSpec; 4] = [
    PartSpec {
        number: 1,
        label: "reserved",
        type_guid: "8DA63339-0007-60C0-C436-083AC8230908",
        part_guid: "00000000-0000-4000-a000-000000000101",
        size: Some(MIB),
        fs: Fs::None,
        fs_label: None,
        fs_uuid: None,
    },
    ESP,
    BOOT,
    root("B921B045-1DF0-41C3-AF44-4C6F280D3FAE"),
];

/// The PReP boot partition's label (cosa's partition name): GRUB's
/// powerpc-ieee1275 core image is written raw into it, and Open Firmware
/// (SLOF, PowerVM) loads it from there.
pub const PREP_LABEL: &str = "PowerPC-PReP-boot";

/// ppc64le (cosa `coreos.osbuild.ppc64le.mpp.yaml`): a 4 MiB PReP boot
/// partition (`ppc_prep_size_mb`), a 1 MiB `reserved`, boot, and root with
/// the ppc64le root type. No ESP: boot, root and everything after them sit
/// 124 MiB further down than on x86_64 (partitions follow each other from
/// 1 MiB, as osbuild's sfdisk places them without explicit starts).
pub const PPC64LE: [PartSpec; 4] = [
    PartSpec {
        number: 1,
        label: PREP_LABEL,
        type_guid: "9E1A2D38-C612-4316-AA26-8B49521E5A8B",
        part_guid: "00000000-0000-4000-a000-000000000101",
        size: Some(4 * MIB),
        fs: Fs::None,
        fs_label: None,
        fs_uuid: None,
    },
    PartSpec {
        number: 2,
        label: "reserved",
        type_guid: "8DA63339-0007-60C0-C436-083AC8230908",
        part_guid: "00000000-0000-4000-a000-000000000102",
        size: Some(MIB),
        fs: Fs::None,
        fs_label: None,
        fs_uuid: None,
    },
    BOOT,
    root("C31C45E6-3F39-412E-80FB-4809C4980599"),
];

/// s390x (cosa `coreos.osbuild.s390x.mpp.yaml`): boot and root only, kept
/// at partition numbers 3 and 4 (`partnum`) so device names match the other
/// arches; GPT entries 1 and 2 stay empty. zipl's boot record goes in the
/// first sector and its bootmap file in the boot filesystem.
pub const S390X: [PartSpec; 2] = [BOOT, root("5EEAD9A9-FE09-4A1E-A1D7-520D00531306")];

/// The partition table of `arch` (the OS image's architecture).
pub fn table(arch: Arch) -> Result<&'static [PartSpec]> {
    match arch {
        Arch::X86_64 => Ok(&X86_64),
        Arch::Aarch64 => Ok(&AARCH64),
        Arch::Ppc64le => Ok(&PPC64LE),
        Arch::S390x => Ok(&S390X),
        Arch::Other(_) => bail!(
            "no disk layout for architecture {arch} (known: {})",
            Arch::known_names()
        ),
    }
}

const X86_64: [PartSpec; 4] = [
    PartSpec {
        number: 1,
        label: "BIOS-BOOT",
        type_guid: "21686148-6449-6E6F-744E-656564454649",
        part_guid: "00000000-0000-4000-a000-000000000101",
        size: Some(MIB),
        fs: Fs::None,
        fs_label: None,
        fs_uuid: None,
    },
    ESP,
    BOOT,
    root("4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"),
];

/// First partition starts at 1 MiB; all are 1 MiB aligned.
pub const ALIGN: u64 = MIB;
/// The last MiB of every disk is left to the backup GPT (at most 5 sectors of
/// 4096 bytes), so a platform can move it without touching the root.
pub const TAIL: u64 = MIB;

/// A partition placed on a disk.
#[derive(Debug, Clone, Serialize)]
pub struct Placed {
    pub spec: PartSpec,
    pub start: u64,
    pub size: u64,
}

/// A concrete layout for an arch, a disk size and a sector size.
#[derive(Debug, Clone, Serialize)]
pub struct Layout {
    pub sector_size: u64,
    pub disk_size: u64,
    pub parts: Vec<Placed>,
}

/// Sectors used by one copy of the GPT entry array (128 entries × 128 bytes).
pub fn entry_sectors(sector: u64) -> u64 {
    (128 * 128u64).div_ceil(sector)
}

impl Layout {
    /// Place the table on a disk of `disk_size` bytes; the root partition
    /// takes the rest, ending on a 1 MiB boundary before the backup GPT (so
    /// the same root fits 512- and 4096-byte-sector disks of one size).
    pub fn new(arch: Arch, disk_size: u64, sector_size: u64) -> Result<Self> {
        Self::place(arch, disk_size, sector_size, None)
    }

    /// Place the table with a root partition of exactly `root_size` bytes
    /// (a derived platform: the same root on a possibly larger disk).
    pub fn with_root(arch: Arch, disk_size: u64, sector_size: u64, root_size: u64) -> Result<Self> {
        Self::place(arch, disk_size, sector_size, Some(root_size))
    }

    fn place(arch: Arch, disk_size: u64, sector_size: u64, root_size: Option<u64>) -> Result<Self> {
        let table = table(arch)?;
        if sector_size != 512 && sector_size != 4096 {
            bail!("sector size {sector_size} is not supported (512 or 4096)");
        }
        if disk_size % sector_size != 0 {
            bail!("disk size {disk_size} is not a multiple of the sector size {sector_size}");
        }
        let end = disk_size.saturating_sub(TAIL) / ALIGN * ALIGN;
        let mut start = ALIGN;
        let mut parts = Vec::new();
        for &p in table {
            let size = match (p.size, root_size) {
                (Some(s), _) => s,
                (None, Some(r)) => {
                    if r % ALIGN != 0 || start + r > end {
                        bail!(
                            "a root partition of {r} bytes does not fit a disk of {} MiB",
                            disk_size / MIB
                        );
                    }
                    r
                }
                (None, None) => {
                    if end <= start + 64 * MIB {
                        bail!(
                            "a disk of {} MiB is too small for the CoreOS layout",
                            disk_size / MIB
                        );
                    }
                    end - start
                }
            };
            parts.push(Placed {
                spec: p,
                start,
                size,
            });
            start += size;
        }
        Ok(Layout {
            sector_size,
            disk_size,
            parts,
        })
    }

    /// The partition with a given label.
    pub fn part(&self, label: &str) -> &Placed {
        self.parts
            .iter()
            .find(|p| p.spec.label == label)
            .expect("label in the layout table")
    }

    /// The partition with a given label, if this arch's table has it.
    pub fn find(&self, label: &str) -> Option<&Placed> {
        self.parts.iter().find(|p| p.spec.label == label)
    }

    /// Smallest disk holding a root filesystem of `root` bytes (rounded up
    /// to whole MiB): the fixed partitions, the root and the tail MiB that
    /// holds the backup GPT.
    pub fn disk_size_for_root(arch: Arch, root: u64) -> Result<u64> {
        let fixed: u64 = table(arch)?.iter().filter_map(|p| p.size).sum();
        Ok(ALIGN + fixed + root.div_ceil(MIB) * MIB + TAIL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn offsets_match_spec_for_both_sector_sizes() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            for ss in [512, 4096] {
                let l = Layout::new(arch, 10 << 30, ss).unwrap();
                let starts: Vec<u64> = l.parts.iter().map(|p| p.start / MIB).collect();
                assert_eq!(starts, vec![1, 2, 129, 513]);
                let root = l.part("root");
                assert!(root.start + root.size <= l.disk_size - (1 + entry_sectors(ss)) * ss);
                assert_eq!(root.size % ss, 0);
            }
            assert!(Layout::new(arch, 100 * MIB, 512).is_err());
            assert!(Layout::new(arch, 10 << 30, 1024).is_err());
            let d = Layout::disk_size_for_root(arch, 1 << 30).unwrap();
            for ss in [512, 4096] {
                assert_eq!(Layout::new(arch, d, ss).unwrap().part("root").size, 1 << 30);
                let l = Layout::with_root(arch, d + (5 << 30), ss, 1 << 30).unwrap();
                assert_eq!(l.part("root").size, 1 << 30);
            }
            assert!(Layout::with_root(arch, d, 512, 2 << 30).is_err());
        }
    }

    /// cosa's aarch64 manifest: `reserved` (type 8DA63339-...) where x86_64
    /// has BIOS-BOOT, and the aarch64 root type; the rest as on x86_64.
    #[test]
    fn per_arch_tables() {
        let x = Layout::new(Arch::X86_64, 10 << 30, 512).unwrap();
        let a = Layout::new(Arch::Aarch64, 10 << 30, 512).unwrap();
        let labels = |l: &Layout| l.parts.iter().map(|p| p.spec.label).collect::<Vec<_>>();
        assert_eq!(labels(&x), ["BIOS-BOOT", "EFI-SYSTEM", "boot", "root"]);
        assert_eq!(labels(&a), ["reserved", "EFI-SYSTEM", "boot", "root"]);
        assert_eq!(
            a.parts[0].spec.type_guid,
            "8DA63339-0007-60C0-C436-083AC8230908"
        );
        assert_eq!(
            a.part("root").spec.type_guid,
            "B921B045-1DF0-41C3-AF44-4C6F280D3FAE"
        );
        assert_eq!(
            x.part("root").spec.type_guid,
            "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"
        );
        assert!(a.find("BIOS-BOOT").is_none());
        for (p, q) in x.parts.iter().zip(&a.parts).skip(1) {
            assert_eq!(
                (p.start, p.size, p.spec.fs_uuid),
                (q.start, q.size, q.spec.fs_uuid)
            );
        }
        let e = Layout::new(Arch::RISCV64, 10 << 30, 512)
            .unwrap_err()
            .to_string();
        assert!(e.contains("riscv64") && e.contains("ppc64le"), "{e}");
    }

    /// cosa's ppc64le and s390x manifests: PReP 4 MiB + reserved 1 MiB, then
    /// boot and root right after; s390x boot and root only, numbered 3 and 4.
    #[test]
    fn ppc64le_and_s390x_tables() {
        for ss in [512, 4096] {
            let p = Layout::new(Arch::Ppc64le, 10 << 30, ss).unwrap();
            let got: Vec<_> = p
                .parts
                .iter()
                .map(|x| (x.spec.number, x.spec.label, x.start / MIB))
                .collect();
            assert_eq!(
                got,
                [
                    (1, PREP_LABEL, 1),
                    (2, "reserved", 5),
                    (3, "boot", 6),
                    (4, "root", 390)
                ]
            );
            assert_eq!(p.part(PREP_LABEL).size, 4 * MIB);
            assert_eq!(
                p.part(PREP_LABEL).spec.type_guid,
                "9E1A2D38-C612-4316-AA26-8B49521E5A8B"
            );
            assert_eq!(
                p.part("root").spec.type_guid,
                "C31C45E6-3F39-412E-80FB-4809C4980599"
            );
            assert!(p.find("EFI-SYSTEM").is_none());
            let z = Layout::new(Arch::S390x, 10 << 30, ss).unwrap();
            let got: Vec<_> = z
                .parts
                .iter()
                .map(|x| (x.spec.number, x.spec.label, x.start / MIB))
                .collect();
            assert_eq!(got, [(3, "boot", 1), (4, "root", 385)]);
            assert_eq!(
                z.part("root").spec.type_guid,
                "5EEAD9A9-FE09-4A1E-A1D7-520D00531306"
            );
            let d = Layout::disk_size_for_root(Arch::S390x, 1 << 30).unwrap();
            assert_eq!(
                Layout::new(Arch::S390x, d, ss).unwrap().part("root").size,
                1 << 30
            );
        }
    }
}
