//! A GUID partition table writer: protective MBR, primary and backup headers
//! and entry arrays, for 512- and 4096-byte sectors (UEFI spec 2.10 ch. 5).
use super::layout::{entry_sectors, Layout};
use anyhow::{bail, Context, Result};
use std::io::{Seek, SeekFrom, Write};

/// "EFI PART", revision 1.0, 92-byte header (UEFI spec 5.3.2).
const SIGNATURE: &[u8; 8] = b"EFI PART";
const REVISION: u32 = 0x0001_0000;
const HEADER_SIZE: u32 = 92;
const ENTRIES: u32 = 128;
const ENTRY_SIZE: u32 = 128;
/// Protective MBR partition type.
const MBR_GPT_PROTECTIVE: u8 = 0xEE;

/// Parse a GUID string into its on-disk (mixed-endian) form.
pub fn guid_bytes(s: &str) -> Result<[u8; 16]> {
    let hexs: String = s.chars().filter(|c| *c != '-').collect();
    if hexs.len() != 32 {
        bail!("'{s}' is not a GUID");
    }
    let raw = hex::decode(&hexs).with_context(|| format!("'{s}' is not a GUID"))?;
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&[raw[3], raw[2], raw[1], raw[0]]);
    b[4..6].copy_from_slice(&[raw[5], raw[4]]);
    b[6..8].copy_from_slice(&[raw[7], raw[6]]);
    b[8..16].copy_from_slice(&raw[8..16]);
    Ok(b)
}

fn entry_array(l: &Layout) -> Result<Vec<u8>> {
    let ss = l.sector_size;
    let mut arr = vec![0u8; (ENTRIES * ENTRY_SIZE) as usize];
    for p in &l.parts {
        // The entry's index is the partition number (s390x leaves 1 and 2 empty).
        let i = (p.spec.number as usize)
            .checked_sub(1)
            .filter(|i| *i < ENTRIES as usize)
            .with_context(|| format!("partition number {} out of range", p.spec.number))?;
        let e = &mut arr[i * ENTRY_SIZE as usize..(i + 1) * ENTRY_SIZE as usize];
        e[0..16].copy_from_slice(&guid_bytes(p.spec.type_guid)?);
        e[16..32].copy_from_slice(&guid_bytes(p.spec.part_guid)?);
        e[32..40].copy_from_slice(&(p.start / ss).to_le_bytes());
        e[40..48].copy_from_slice(&((p.start + p.size) / ss - 1).to_le_bytes());
        for (j, u) in p.spec.label.encode_utf16().take(36).enumerate() {
            e[56 + 2 * j..58 + 2 * j].copy_from_slice(&u.to_le_bytes());
        }
    }
    Ok(arr)
}

fn header(
    l: &Layout,
    disk_guid: &str,
    current: u64,
    backup: u64,
    entries_lba: u64,
    entries_crc: u32,
) -> Result<Vec<u8>> {
    let ss = l.sector_size;
    let last = l.disk_size / ss - 1;
    let es = entry_sectors(ss);
    let mut h = vec![0u8; ss as usize];
    h[0..8].copy_from_slice(SIGNATURE);
    h[8..12].copy_from_slice(&REVISION.to_le_bytes());
    h[12..16].copy_from_slice(&HEADER_SIZE.to_le_bytes());
    h[24..32].copy_from_slice(&current.to_le_bytes());
    h[32..40].copy_from_slice(&backup.to_le_bytes());
    h[40..48].copy_from_slice(&(2 + es).to_le_bytes());
    h[48..56].copy_from_slice(&(last - 1 - es).to_le_bytes());
    h[56..72].copy_from_slice(&guid_bytes(disk_guid)?);
    h[72..80].copy_from_slice(&entries_lba.to_le_bytes());
    h[80..84].copy_from_slice(&ENTRIES.to_le_bytes());
    h[84..88].copy_from_slice(&ENTRY_SIZE.to_le_bytes());
    h[88..92].copy_from_slice(&entries_crc.to_le_bytes());
    let crc = crc32fast::hash(&h[..HEADER_SIZE as usize]);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    Ok(h)
}

fn protective_mbr(l: &Layout) -> Vec<u8> {
    let mut m = vec![0u8; l.sector_size as usize];
    let sectors = l.disk_size / l.sector_size - 1;
    let e = &mut m[446..462];
    e[1..4].copy_from_slice(&[0x00, 0x02, 0x00]); // CHS of LBA 1
    e[4] = MBR_GPT_PROTECTIVE;
    e[5..8].copy_from_slice(&[0xFF, 0xFF, 0xFF]);
    e[8..12].copy_from_slice(&1u32.to_le_bytes());
    e[12..16].copy_from_slice(&(sectors.min(u32::MAX as u64) as u32).to_le_bytes());
    m[510] = 0x55;
    m[511] = 0xAA;
    m
}

/// Write the protective MBR and both GPT copies to a disk of `l.disk_size`
/// bytes. The MBR boot code area (bytes 0..440) is left as is, so a BIOS
/// boot sector can be written before or after.
pub fn write<W: Write + Seek>(disk: &mut W, l: &Layout, disk_guid: &str) -> Result<()> {
    let ss = l.sector_size;
    let last = l.disk_size / ss - 1;
    let es = entry_sectors(ss);
    let arr = entry_array(l)?;
    let crc = crc32fast::hash(&arr);
    let mbr = protective_mbr(l);
    disk.seek(SeekFrom::Start(440))?;
    disk.write_all(&mbr[440..])?;
    disk.seek(SeekFrom::Start(ss))?;
    disk.write_all(&header(l, disk_guid, 1, last, 2, crc)?)?;
    disk.seek(SeekFrom::Start(2 * ss))?;
    disk.write_all(&arr)?;
    let backup_entries = last - es;
    disk.seek(SeekFrom::Start(backup_entries * ss))?;
    disk.write_all(&arr)?;
    disk.seek(SeekFrom::Start(last * ss))?;
    disk.write_all(&header(l, disk_guid, last, 1, backup_entries, crc)?)?;
    disk.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::layout::{DISK_GUID, MIB, PARTITIONS};
    use super::*;
    use crate::sys::loopback::LoopDevice;
    use crate::util::arch::Arch;
    use std::process::Command;

    /// `sfdisk -J` of the image; 4K images are read through a loop device
    /// with 4096-byte logical sectors (sfdisk has no sector-size option).
    fn sfdisk_json(path: &std::path::Path, ss: u64) -> serde_json::Value {
        let mut _guard = None;
        let dev = if ss == 512 {
            path.display().to_string()
        } else {
            let size = std::fs::metadata(path).unwrap().len();
            let l = LoopDevice::attach(path, 0, size, ss)
                .unwrap_or_else(|e| panic!("losetup (needs root): {e:#}"));
            let d = l.path().display().to_string();
            _guard = Some(l);
            d
        };
        let o = Command::new("sfdisk").args(["-J", &dev]).output().unwrap();
        assert!(
            o.status.success(),
            "sfdisk: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap()
    }

    #[test]
    #[cfg_attr(
        not(feature = "privileged"),
        ignore = "needs root: a loop device (--features privileged)"
    )]
    fn sfdisk_and_sgdisk_read_it_back() {
        for ss in [512u64, 4096] {
            let f = tempfile::NamedTempFile::new().unwrap();
            let size = 3 << 30;
            f.as_file().set_len(size).unwrap();
            let l = Layout::new(Arch::X86_64, size, ss).unwrap();
            write(&mut f.as_file(), &l, DISK_GUID).unwrap();
            let j = sfdisk_json(f.path(), ss);
            let t = &j["partitiontable"];
            assert_eq!(t["label"], "gpt");
            assert_eq!(t["id"].as_str().unwrap().to_lowercase(), DISK_GUID);
            assert_eq!(t["sectorsize"].as_u64().unwrap_or(ss), ss);
            let parts = t["partitions"].as_array().unwrap();
            assert_eq!(parts.len(), 4);
            for (p, spec) in parts.iter().zip(PARTITIONS) {
                assert_eq!(
                    p["type"].as_str().unwrap().to_uppercase(),
                    spec.type_guid.to_uppercase()
                );
                assert_eq!(p["name"], spec.label);
                assert_eq!(p["uuid"].as_str().unwrap().to_lowercase(), spec.part_guid);
            }
            let starts: Vec<u64> = parts
                .iter()
                .map(|p| p["start"].as_u64().unwrap() * ss / MIB)
                .collect();
            assert_eq!(starts, vec![1, 2, 129, 513]);
            // sgdisk verifies CRCs and the backup table (512-byte sectors only for files).
            if ss == 512 {
                let o = Command::new("sgdisk")
                    .arg("-v")
                    .arg(f.path())
                    .output()
                    .unwrap();
                let out = String::from_utf8_lossy(&o.stdout);
                assert!(out.contains("No problems found"), "{out}");
            }
        }
    }

    /// The ppc64le and s390x tables as sfdisk reads them: what cosa's
    /// manifests make (s390x's boot and root at node numbers 3 and 4).
    #[test]
    fn ppc64le_and_s390x_tables_read_back() {
        for (arch, want) in [
            (Arch::Ppc64le, vec![(1, 1), (2, 5), (3, 6), (4, 390)]),
            (Arch::S390x, vec![(3, 1), (4, 385)]),
        ] {
            for ss in [512u64, 4096] {
                let f = tempfile::NamedTempFile::new().unwrap();
                let size = 3 << 30;
                f.as_file().set_len(size).unwrap();
                let l = Layout::new(arch, size, ss).unwrap();
                write(&mut f.as_file(), &l, DISK_GUID).unwrap();
                let j = sfdisk_json(f.path(), ss);
                let parts = j["partitiontable"]["partitions"]
                    .as_array()
                    .unwrap()
                    .clone();
                let got: Vec<(u64, u64)> = parts
                    .iter()
                    .map(|p| {
                        let node = p["node"].as_str().unwrap();
                        let n = node[node.len() - 1..].parse().unwrap();
                        (n, p["start"].as_u64().unwrap() * ss / MIB)
                    })
                    .collect();
                assert_eq!(got, want, "{arch} {ss}");
                for (p, spec) in parts.iter().zip(&l.parts) {
                    assert_eq!(
                        p["type"].as_str().unwrap().to_uppercase(),
                        spec.spec.type_guid
                    );
                    assert_eq!(p["name"], spec.spec.label);
                }
            }
        }
    }

    #[test]
    fn guid_encoding() {
        let b = guid_bytes("C12A7328-F81F-11D2-BA4B-00A0C93EC93B").unwrap();
        assert_eq!(&b[..4], &[0x28, 0x73, 0x2A, 0xC1]);
        assert_eq!(&b[8..], &[0xBA, 0x4B, 0x00, 0xA0, 0xC9, 0x3E, 0xC9, 0x3B]);
        assert!(guid_bytes("nope").is_err());
    }
}
