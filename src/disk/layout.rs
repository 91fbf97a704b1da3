//! The CoreOS disk layout (SPEC 2; cosa `src/osbuild-manifests/
//! coreos.osbuild.x86_64.mpp.yaml`), as a table: partitions, type GUIDs,
//! labels, filesystems, UUIDs and mkfs options. Offsets are in bytes and the
//! same for 512- and 4096-byte sectors.
use anyhow::{bail, Result};
use serde::Serialize;

pub const MIB: u64 = 1 << 20;

/// Fixed disk GUID; the first boot randomises it (SPEC 2).
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
pub const PARTITIONS: [PartSpec; 4] = [
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
    PartSpec {
        number: 2,
        label: "EFI-SYSTEM",
        type_guid: "C12A7328-F81F-11D2-BA4B-00A0C93EC93B",
        part_guid: "00000000-0000-4000-a000-000000000102",
        size: Some(127 * MIB),
        fs: Fs::Vfat,
        fs_label: Some("EFI-SYSTEM"),
        fs_uuid: Some("7B77-95E7"),
    },
    PartSpec {
        number: 3,
        label: "boot",
        type_guid: "BC13C2FF-59E6-4262-A352-B275FD6F7172",
        part_guid: "00000000-0000-4000-a000-000000000103",
        size: Some(384 * MIB),
        fs: Fs::Ext4,
        fs_label: Some("boot"),
        fs_uuid: Some("96d15588-3596-4b3c-adca-a2ff7279ea63"),
    },
    PartSpec {
        number: 4,
        label: "root",
        type_guid: "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709",
        part_guid: "00000000-0000-4000-a000-000000000104",
        size: None,
        fs: Fs::Xfs,
        fs_label: Some("root"),
        fs_uuid: Some("910678ff-f77e-4a7d-8d53-86f2ac47a823"),
    },
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

/// A concrete layout for a disk size and sector size.
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
    pub fn new(disk_size: u64, sector_size: u64) -> Result<Self> {
        Self::place(disk_size, sector_size, None)
    }

    /// Place the table with a root partition of exactly `root_size` bytes
    /// (a derived platform: the same root on a possibly larger disk).
    pub fn with_root(disk_size: u64, sector_size: u64, root_size: u64) -> Result<Self> {
        Self::place(disk_size, sector_size, Some(root_size))
    }

    fn place(disk_size: u64, sector_size: u64, root_size: Option<u64>) -> Result<Self> {
        if sector_size != 512 && sector_size != 4096 {
            bail!("sector size {sector_size} is not supported (512 or 4096)");
        }
        if disk_size % sector_size != 0 {
            bail!("disk size {disk_size} is not a multiple of the sector size {sector_size}");
        }
        let end = disk_size.saturating_sub(TAIL) / ALIGN * ALIGN;
        let mut start = ALIGN;
        let mut parts = Vec::new();
        for p in PARTITIONS {
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

    /// Smallest disk holding a root filesystem of `root` bytes (rounded up
    /// to whole MiB): the fixed partitions, the root and the tail MiB that
    /// holds the backup GPT.
    pub fn disk_size_for_root(root: u64) -> u64 {
        let fixed: u64 = PARTITIONS.iter().filter_map(|p| p.size).sum();
        ALIGN + fixed + root.div_ceil(MIB) * MIB + TAIL
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn offsets_match_spec_for_both_sector_sizes() {
        for ss in [512, 4096] {
            let l = Layout::new(10 << 30, ss).unwrap();
            let starts: Vec<u64> = l.parts.iter().map(|p| p.start / MIB).collect();
            assert_eq!(starts, vec![1, 2, 129, 513]);
            let root = l.part("root");
            assert!(root.start + root.size <= l.disk_size - (1 + entry_sectors(ss)) * ss);
            assert_eq!(root.size % ss, 0);
        }
        assert!(Layout::new(100 * MIB, 512).is_err());
        assert!(Layout::new(10 << 30, 1024).is_err());
        let d = Layout::disk_size_for_root(1 << 30);
        for ss in [512, 4096] {
            assert_eq!(Layout::new(d, ss).unwrap().part("root").size, 1 << 30);
            let l = Layout::with_root(d + (5 << 30), ss, 1 << 30).unwrap();
            assert_eq!(l.part("root").size, 1 << 30);
        }
        assert!(Layout::with_root(d, 512, 2 << 30).is_err());
    }
}
