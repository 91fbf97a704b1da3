//! Azure fixed VHD writer: the raw disk, zero-extended to a whole MiB,
//! followed by a 512-byte VHD footer (Microsoft "Virtual Hard Disk Image
//! Format Specification" v1.0, "Hard Disk Footer Format" and appendix
//! "CHS Calculation").
//!
//! A fixed VHD is a raw image with a trailer, so the output is written with
//! the sparse raw writer ([`crate::io::sparse::write_sparse`]) over a view
//! that appends the zero padding and the footer: holes of the disk stay
//! holes in the file, and the SHA-256 of the whole file comes for free.
//!
//! Azure requires the virtual size (the footer's current size) to be a
//! whole number of MiB, so a file is `n * 1 MiB + 512` bytes long.
//!
//! QEMU probes for VHD by a cookie at offset 0, which only dynamic VHDs
//! have: `qemu-img info` calls a fixed VHD `raw` (with the footer counted
//! as disk); `-f vpc` reads it as VHD from the footer.
use crate::io::sparse::{clamped_extents, write_sparse};
use crate::io::view::DiskView;
use anyhow::{ensure, Context, Result};
use std::ops::Range;
use std::path::Path;

/// Size of the footer (spec: "Hard Disk Footer Format", 512 bytes).
pub const FOOTER_SIZE: u64 = 512;
/// Azure accepts only VHDs whose virtual size is a whole MiB (Azure docs
/// on preparing Linux VHDs; docs/contract.md §3).
pub const SIZE_ALIGN: u64 = 1 << 20;
/// Sector size the footer's geometry counts in (spec: "Disk Geometry").
const SECTOR_SIZE: u64 = 512;
/// Footer cookie (spec: "Cookie").
const COOKIE: &[u8; 8] = b"conectix";
/// Features: bit 1 "Reserved" must always be set (spec: "Features").
const FEATURES_RESERVED: u32 = 0x0000_0002;
/// File format version 1.0 (spec: "File Format Version").
const FILE_FORMAT_VERSION: u32 = 0x0001_0000;
/// Data offset of a fixed disk, which has no dynamic header (spec: "Data
/// Offset", all ones for fixed disks). qemu-img writes all 64 bits set
/// (observed); so do we.
const DATA_OFFSET_FIXED: u64 = u64::MAX;
/// Creator application. QEMU's vpc driver (and tools that copy its table)
/// takes the disk size from "current size" only for known creators (`win `,
/// `qem2`, `d2v `, `tap\0`, `CTXS`) and from the CHS geometry otherwise,
/// which is smaller than the real size for most disks. `qem2` is what
/// `qemu-img convert -O vpc -o subformat=fixed,force_size` writes, i.e. what
/// coreos-assembler publishes for Azure; Azure itself uses current size.
const CREATOR_APP: &[u8; 4] = b"qem2";
/// Creator version written by qemu-img alongside `qem2` (observed in the
/// footer of `qemu-img create -f vpc -o subformat=fixed,force_size`).
const CREATOR_VERSION: u32 = 0x0005_0003;
/// Creator host OS: `Wi2k` (spec: "Creator Host OS", Windows 0x5769326B),
/// as qemu-img writes it.
const CREATOR_HOST_OS: &[u8; 4] = b"Wi2k";
/// Disk type 2 = fixed hard disk (spec: "Disk Type").
const DISK_TYPE_FIXED: u32 = 2;
/// The footer's time stamp counts seconds since 2000-01-01 00:00:00 UTC
/// (spec: "Time Stamp"); this is that instant in Unix time.
const VHD_EPOCH_UNIX: i64 = 946_684_800;
/// Largest geometry the spec's CHS algorithm produces: 65535 cylinders,
/// 16 heads, 255 sectors per track.
const CHS_MAX_SECTORS: u64 = 65535 * 16 * 255;

/// Footer field offsets (spec: "Hard Disk Footer Format").
mod off {
    pub const COOKIE: usize = 0;
    pub const FEATURES: usize = 8;
    pub const VERSION: usize = 12;
    pub const DATA_OFFSET: usize = 16;
    pub const TIMESTAMP: usize = 24;
    pub const CREATOR_APP: usize = 28;
    pub const CREATOR_VERSION: usize = 32;
    pub const CREATOR_HOST_OS: usize = 36;
    pub const ORIGINAL_SIZE: usize = 40;
    pub const CURRENT_SIZE: usize = 48;
    pub const GEOMETRY: usize = 56;
    pub const DISK_TYPE: usize = 60;
    pub const CHECKSUM: usize = 64;
    pub const UNIQUE_ID: usize = 68;
    pub const SAVED_STATE: usize = 84;
}

/// What [`write_vhd`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VhdStats {
    /// Virtual disk size: the view's length rounded up to a whole MiB
    /// (the footer's original and current size).
    pub virtual_size: u64,
    /// Size of the VHD file: `virtual_size + 512`.
    pub file_size: u64,
    /// Lower-case hex SHA-256 of the whole VHD file.
    pub sha256: String,
    /// The footer's unique id.
    pub uuid: [u8; 16],
}

/// Write `view` as a fixed VHD at `out` (created or truncated, fsynced; no
/// temporary name: the caller renames). The disk is zero-extended to a
/// whole MiB; holes stay holes. The footer gets the unique id `uuid` and
/// the time stamp `timestamp` (seconds since 2000-01-01 UTC,
/// [`vhd_timestamp`]): given by the caller, derived from the inputs, so
/// the same disk gives the same bytes. `progress` gets the bytes done so
/// far, out of `file_size`.
pub fn write_vhd(
    view: &dyn DiskView,
    out: &Path,
    uuid: [u8; 16],
    timestamp: u32,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<VhdStats> {
    let virtual_size = view
        .len()
        .checked_next_multiple_of(SIZE_ALIGN)
        .context("disk size overflows")?;
    ensure!(virtual_size > 0, "cannot write an empty disk as a VHD");
    let padded = VhdView {
        disk: view,
        virtual_size,
        footer: footer(virtual_size, uuid, timestamp),
    };
    let w = write_sparse(&padded, out, progress)
        .with_context(|| format!("writing VHD image {}", out.display()))?;
    let stats = VhdStats {
        virtual_size,
        file_size: w.size,
        sha256: w.sha256,
        uuid,
    };
    tracing::debug!(?stats, "wrote VHD");
    Ok(stats)
}

impl<'a> VhdView<'a> {
    /// The fixed VHD of `view`, its footer's unique id `uuid` and time
    /// stamp `timestamp` ([`write_vhd`]).
    pub fn new(view: &'a dyn DiskView, uuid: [u8; 16], timestamp: u32) -> Result<Self> {
        let virtual_size = view
            .len()
            .checked_next_multiple_of(SIZE_ALIGN)
            .context("disk size overflows")?;
        ensure!(virtual_size > 0, "cannot write an empty disk as a VHD");
        Ok(VhdView {
            disk: view,
            virtual_size,
            footer: footer(virtual_size, uuid, timestamp),
        })
    }
}

/// Seconds since the VHD epoch (2000-01-01 UTC) for a Unix time, clamped
/// to the field's range.
pub fn vhd_timestamp(unix: i64) -> u32 {
    (unix - VHD_EPOCH_UNIX).clamp(0, u32::MAX as i64) as u32
}

/// The 512-byte footer of a fixed VHD whose disk is `size` bytes (a
/// multiple of 512; original and current size are both `size`).
pub fn footer(size: u64, uuid: [u8; 16], timestamp: u32) -> [u8; 512] {
    let mut f = [0u8; FOOTER_SIZE as usize];
    let (c, h, s) = chs_geometry(size / SECTOR_SIZE);
    let mut put = |at: usize, bytes: &[u8]| f[at..at + bytes.len()].copy_from_slice(bytes);
    put(off::COOKIE, COOKIE);
    put(off::FEATURES, &FEATURES_RESERVED.to_be_bytes());
    put(off::VERSION, &FILE_FORMAT_VERSION.to_be_bytes());
    put(off::DATA_OFFSET, &DATA_OFFSET_FIXED.to_be_bytes());
    put(off::TIMESTAMP, &timestamp.to_be_bytes());
    put(off::CREATOR_APP, CREATOR_APP);
    put(off::CREATOR_VERSION, &CREATOR_VERSION.to_be_bytes());
    put(off::CREATOR_HOST_OS, CREATOR_HOST_OS);
    put(off::ORIGINAL_SIZE, &size.to_be_bytes());
    put(off::CURRENT_SIZE, &size.to_be_bytes());
    put(off::GEOMETRY, &c.to_be_bytes());
    put(off::GEOMETRY + 2, &[h, s]);
    put(off::DISK_TYPE, &DISK_TYPE_FIXED.to_be_bytes());
    put(off::UNIQUE_ID, &uuid);
    put(off::SAVED_STATE, &[0]);
    let sum = checksum(&f);
    f[off::CHECKSUM..off::CHECKSUM + 4].copy_from_slice(&sum.to_be_bytes());
    f
}

/// One's complement of the byte sum of the footer, the checksum field
/// itself counted as zero (spec: "Checksum").
fn checksum(footer: &[u8; 512]) -> u32 {
    let sum = footer
        .iter()
        .enumerate()
        .filter(|(i, _)| !(off::CHECKSUM..off::CHECKSUM + 4).contains(i))
        .fold(0u32, |a, (_, &b)| a.wrapping_add(b as u32));
    !sum
}

/// Cylinders, heads and sectors per track for `total_sectors`, by the
/// spec's appendix "CHS Calculation" (the geometry may cover slightly less
/// than the disk; sizes past 65535/16/255 are capped there).
pub fn chs_geometry(total_sectors: u64) -> (u16, u8, u8) {
    let total = total_sectors.min(CHS_MAX_SECTORS);
    let (spt, heads, cyl_times_heads);
    if total >= 65535 * 16 * 63 {
        spt = 255;
        heads = 16;
        cyl_times_heads = total / spt;
    } else {
        let mut s = 17;
        let mut cth = total / s;
        let mut h = cth.div_ceil(1024).max(4);
        if cth >= h * 1024 || h > 16 {
            s = 31;
            h = 16;
            cth = total / s;
        }
        if cth >= h * 1024 {
            s = 63;
            h = 16;
            cth = total / s;
        }
        spt = s;
        heads = h;
        cyl_times_heads = cth;
    }
    // All three fit their fields by construction: heads <= 16, spt <= 255,
    // and cylinders <= 65535 because total is capped.
    ((cyl_times_heads / heads) as u16, heads as u8, spt as u8)
}

/// The disk, zero padding up to `virtual_size`, then the footer: a fixed
/// VHD as a view, so it can be compressed without being written first.
pub struct VhdView<'a> {
    disk: &'a dyn DiskView,
    virtual_size: u64,
    footer: [u8; 512],
}

impl DiskView for VhdView<'_> {
    fn len(&self) -> u64 {
        self.virtual_size + FOOTER_SIZE
    }

    fn shared_source(&self, r: std::ops::Range<u64>) -> Option<(u64, u64)> {
        (r.end <= self.disk.len())
            .then(|| self.disk.shared_source(r))
            .flatten()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        // Every read of the writer passes here: a signal stops it within
        // one block.
        crate::util::cancel::check()?;
        let end = offset + buf.len() as u64;
        let disk_len = self.disk.len();
        // Disk bytes.
        let disk_end = end.min(disk_len);
        let mut pos = offset;
        if pos < disk_end {
            let n = (disk_end - pos) as usize;
            self.disk.read_at(&mut buf[..n], pos)?;
            pos = disk_end;
        }
        // Padding, footer, and zeros past the end.
        while pos < end {
            let out = &mut buf[(pos - offset) as usize..];
            let footer_range = self.virtual_size..self.len();
            if footer_range.contains(&pos) {
                let at = (pos - self.virtual_size) as usize;
                let n = (FOOTER_SIZE as usize - at).min(out.len());
                out[..n].copy_from_slice(&self.footer[at..at + n]);
                pos += n as u64;
            } else {
                let stop = if pos < self.virtual_size {
                    self.virtual_size.min(end)
                } else {
                    end
                };
                out[..(stop - pos) as usize].fill(0);
                pos = stop;
            }
        }
        Ok(())
    }

    fn data_extents(&self) -> Result<Vec<Range<u64>>> {
        let mut v = clamped_extents(self.disk)?;
        v.push(self.virtual_size..self.len());
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::sparse::test_support::*;
    use crate::io::view::{Composite, FileView, Patch};
    use std::os::unix::fs::FileExt;
    use std::process::Command;
    use std::sync::atomic::{AtomicU64, Ordering};

    const MIB: u64 = 1 << 20;
    const UUID: [u8; 16] = *b"0123456789abcdef";

    fn be32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
    }

    fn be64(b: &[u8], at: usize) -> u64 {
        u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
    }

    /// The checksum, recomputed here without the module's helper: sum of
    /// all bytes with the checksum field zeroed, complemented.
    fn independent_checksum(f: &[u8]) -> u32 {
        let mut copy = f.to_vec();
        copy[64..68].fill(0);
        !copy.iter().map(|&b| b as u32).sum::<u32>()
    }

    #[test]
    fn footer_fields_and_checksum() {
        let size = 3 * MIB;
        let f = footer(size, UUID, 0x1234_5678);
        assert_eq!(&f[0..8], b"conectix");
        assert_eq!(be32(&f, 8), 2);
        assert_eq!(be32(&f, 12), 0x0001_0000);
        assert_eq!(be64(&f, 16), u64::MAX);
        assert_eq!(be32(&f, 24), 0x1234_5678);
        assert_eq!(&f[28..32], b"qem2");
        assert_eq!(&f[36..40], b"Wi2k");
        assert_eq!(be64(&f, 40), size);
        assert_eq!(be64(&f, 48), size);
        assert_eq!(be32(&f, 60), 2, "disk type fixed");
        assert_eq!(&f[68..84], &UUID);
        assert_eq!(f[84], 0, "saved state");
        assert!(f[85..].iter().all(|&b| b == 0), "reserved bytes");
        assert_eq!(be32(&f, 64), independent_checksum(&f));
        // Geometry: 6144 sectors -> 17 spt, 4 heads, 90 cylinders (spec
        // algorithm by hand: 6144/17 = 361, heads = max(4, ceil(361/1024))).
        assert_eq!(u16::from_be_bytes([f[56], f[57]]), 90);
        assert_eq!((f[58], f[59]), (4, 17));
    }

    #[test]
    fn timestamps_count_from_2000() {
        assert_eq!(vhd_timestamp(946_684_800), 0);
        assert_eq!(vhd_timestamp(946_684_800 + 86_400), 86_400);
        assert_eq!(vhd_timestamp(0), 0);
    }

    #[test]
    fn geometry_caps_and_branches() {
        assert_eq!(chs_geometry(u64::MAX), (65535, 16, 255));
        assert_eq!(chs_geometry(65535 * 16 * 255), (65535, 16, 255));
        // The 255-sector branch starts at 65535*16*63 sectors.
        assert_eq!(chs_geometry(65535 * 16 * 63), (16191, 16, 255));
        // Just below it: 63 sectors per track, 16 heads.
        let (c, h, s) = chs_geometry(65535 * 16 * 63 - 1);
        assert_eq!((h, s), (16, 63));
        assert_eq!(c, 65534);
        for total in [1u64, 2048, 6144, 1 << 21, 1 << 24, 1 << 26, 1 << 30] {
            let (c, h, s) = chs_geometry(total);
            let covered = c as u64 * h as u64 * s as u64;
            assert!(covered <= total, "{total}: {c}/{h}/{s}");
        }
    }

    /// qemu-img computes the same geometry (it loops until C*H*S covers the
    /// requested size, by the same algorithm): for the size qemu rounded
    /// to, both must agree.
    #[test]
    fn geometry_matches_qemu_img() {
        let dir = tempfile::tempdir().unwrap();
        for size in ["3M", "100M", "1G", "20G", "40G", "200G"] {
            let p = dir.path().join(format!("q-{size}.vhd"));
            let st = Command::new("qemu-img")
                .args(["create", "-q", "-f", "vpc", "-o", "subformat=fixed"])
                .arg(&p)
                .arg(size)
                .status()
                .unwrap();
            assert!(st.success());
            let file = std::fs::File::open(&p).unwrap();
            let len = file.metadata().unwrap().len();
            let mut f = [0u8; 512];
            file.read_exact_at(&mut f, len - 512).unwrap();
            let cur = be64(&f, 48);
            let qemu = (u16::from_be_bytes([f[56], f[57]]), f[58], f[59]);
            assert_eq!(chs_geometry(cur / 512), qemu, "{size}");
        }
    }

    /// `qemu-img info -f vpc` as (format, virtual size).
    fn qemu_info(path: &Path) -> (String, u64) {
        let out = Command::new("qemu-img")
            .args(["info", "-f", "vpc", "--output=json"])
            .arg(path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            v["format"].as_str().unwrap().to_string(),
            v["virtual-size"].as_u64().unwrap(),
        )
    }

    /// Write `view` as a VHD and check it every way available.
    fn check_vhd(view: &dyn DiskView, dir: &Path, name: &str) -> VhdStats {
        let out = dir.join(format!("{name}.vhd"));
        let last = AtomicU64::new(0);
        let stats = write_vhd(view, &out, UUID, 777, &|n| {
            assert!(n >= last.load(Ordering::Relaxed), "progress went back");
            last.store(n, Ordering::Relaxed);
        })
        .unwrap();
        let rounded = view.len().next_multiple_of(MIB);
        assert_eq!(stats.virtual_size, rounded);
        assert_eq!(stats.file_size, rounded + 512);
        assert_eq!(last.load(Ordering::Relaxed), rounded + 512);
        let file_len = std::fs::metadata(&out).unwrap().len();
        assert_eq!(file_len, stats.file_size);
        assert_eq!(file_len % MIB, 512);
        assert_eq!(stats.sha256, sha256sum(&out));

        // The footer, read back from the file.
        let bytes = std::fs::read(&out).unwrap();
        let f = &bytes[bytes.len() - 512..];
        assert_eq!(&f[..8], b"conectix");
        assert_eq!(be64(f, 48), rounded);
        assert_eq!(be64(f, 40), rounded);
        assert_eq!(be32(f, 60), 2);
        assert_eq!(be32(f, 64), independent_checksum(f));
        assert_eq!(be32(f, 24), 777);

        // The disk content, then zeros up to the footer.
        let want = view_bytes(view);
        assert!(bytes[..want.len()] == want[..], "disk bytes differ");
        assert!(
            bytes[want.len()..rounded as usize].iter().all(|&b| b == 0),
            "padding not zero"
        );

        // qemu: forced to vpc, the virtual size is the rounded size, and
        // the content equals the view zero-extended to it.
        assert_eq!(qemu_info(&out), ("vpc".to_string(), rounded));
        let reference = dir.join(format!("{name}.ref"));
        std::fs::write(&reference, &want).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&reference)
            .unwrap()
            .set_len(rounded)
            .unwrap();
        // Not strict (-s): that also compares allocation, and the
        // reference is fully allocated while the VHD keeps holes.
        let compare = || {
            Command::new("qemu-img")
                .args(["compare", "-f", "vpc", "-F", "raw"])
                .arg(&out)
                .arg(&reference)
                .output()
                .unwrap()
        };
        let cmp = compare();
        assert!(
            cmp.status.success(),
            "qemu-img compare: {}{}",
            String::from_utf8_lossy(&cmp.stdout),
            String::from_utf8_lossy(&cmp.stderr)
        );
        // And the comparison does see a change of one byte in the padding.
        std::fs::File::options()
            .write(true)
            .open(&reference)
            .unwrap()
            .write_all_at(b"x", rounded - 1)
            .unwrap();
        assert_eq!(
            compare().status.code(),
            Some(1),
            "qemu-img compare is blind"
        );
        // `qemu-img check` has no checker for vpc: it must say so (exit
        // 63), not report corruption.
        let check = Command::new("qemu-img")
            .args(["check", "-f", "vpc"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            check.status.success() || check.status.code() == Some(63),
            "qemu-img check: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        stats
    }

    #[test]
    fn sparse_file_round_trips_and_stays_sparse() {
        let dir = tempfile::tempdir().unwrap();
        // Not a MiB nor a sector multiple: data runs to the very end.
        let len = 40 * MIB + 777;
        let fx = fixture(dir.path(), len);
        let view = FileView::open(&fx.base).unwrap();
        check_vhd(&view, dir.path(), "odd");
        let out = dir.path().join("odd.vhd");
        // The fixture has ~4 MiB of data and 2 MiB of written zeros; the
        // zeros and the holes must not be allocated.
        let alloc = allocated(&out);
        assert!(alloc <= 5 * MIB, "VHD allocates {alloc} bytes");
    }

    #[test]
    fn exact_mib_disk_and_composite() {
        let dir = tempfile::tempdir().unwrap();
        let fx = fixture(dir.path(), 24 * MIB);
        let base = FileView::open(&fx.base).unwrap();
        let s = check_vhd(&base, dir.path(), "exact");
        assert_eq!(s.virtual_size, 24 * MIB, "no rounding needed");
        let patch = Patch::from_file(&fx.patch, 7 * MIB + 4096, MIB).unwrap();
        let c = Composite::new(&base, 30 * MIB + 3, vec![patch]).unwrap();
        let s = check_vhd(&c, dir.path(), "composite");
        assert_eq!(s.virtual_size, 31 * MIB);
    }

    #[test]
    fn empty_disk_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("empty");
        std::fs::File::create(&p).unwrap();
        let view = FileView::open(&p).unwrap();
        let err = write_vhd(&view, &dir.path().join("e.vhd"), UUID, 0, &|_| {}).unwrap_err();
        assert!(format!("{err:#}").contains("empty"), "{err:#}");
    }

    #[test]
    fn same_inputs_same_bytes_and_errors_name_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let fx = fixture(dir.path(), 8 * MIB);
        let view = FileView::open(&fx.base).unwrap();
        let a = write_vhd(&view, &dir.path().join("a.vhd"), UUID, 9, &|_| {}).unwrap();
        let b = write_vhd(&view, &dir.path().join("b.vhd"), UUID, 9, &|_| {}).unwrap();
        assert_eq!(a.sha256, b.sha256);
        // The id and the time are in the footer: another of either, other bytes.
        let c = write_vhd(&view, &dir.path().join("c.vhd"), [7; 16], 9, &|_| {}).unwrap();
        let d = write_vhd(&view, &dir.path().join("d.vhd"), UUID, 10, &|_| {}).unwrap();
        assert_ne!(a.sha256, c.sha256);
        assert_ne!(a.sha256, d.sha256);
        let err =
            write_vhd(&view, &dir.path().join("no/such/x.vhd"), UUID, 9, &|_| {}).unwrap_err();
        assert!(format!("{err:#}").contains("no/such/x.vhd"), "{err:#}");
    }
}
