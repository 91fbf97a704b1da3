//! GCP image tarball: a tar archive holding one member, `disk.raw`, stored
//! as a GNU sparse file in the old GNU format, compressed with gzip -9:
//! what GCE's documented recipe `tar --format=oldgnu -Sczf image.tar.gz
//! disk.raw` makes (docs/contract.md §3; GCE imports a gzip-compressed tarball
//! whose one file is named `disk.raw`).
//!
//! # Design
//!
//! The tar byte stream is a pure function of the disk's sparse map, so it
//! is not produced by a writer but exposed as a *random-access view*
//! ([`TarView`], a [`DiskView`] over the archive bytes): header blocks
//! come from memory, data blocks are read from the disk at the mapped
//! offsets on demand, padding and end-of-archive blocks read as zeros. The
//! parallel chunked gzip of [`crate::io::compress`] then compresses that
//! view as it compresses any disk: each worker reads its own 4 MiB chunk of
//! the archive, the chunks become independent gzip members written in
//! order. Memory stays bounded by the compressor's buffer pool plus the
//! sparse map (two small vectors); nothing is staged on disk; both cores
//! work; the SHA-256 of the uncompressed tar comes with it.
//!
//! Two passes read the disk's data: a scan that builds the sparse map (the
//! header, which holds the map, comes first in the archive), then the
//! compression. The scan reads only the view's data extents and costs a
//! small fraction of gzip -9.
//!
//! # The sparse map
//!
//! The scan looks at 4 KiB granules (the block size of the file systems the
//! image holds) aligned to disk offsets, so every entry starts, and all but
//! a last one ending at the disk's end also end, on a 512-byte block. That
//! matters: GNU tar pads each entry's data to whole blocks, while Go's
//! `archive/tar` and Python's `tarfile` read the entries' data back to
//! back; with block-sized entries both readings agree. All-zero granules
//! inside allocated extents become holes too.
//!
//! Holes shorter than [`MIN_HOLE`] (64 KiB) are stored as data. The
//! trade-off: every entry costs 24 bytes of header (4 in the main header,
//! 21 per extension block) and a seek on extraction; a stored short hole
//! costs a little gzip time (zeros deflate fast, to about 1/1000) and real
//! blocks in an extracted file. Measured with `examples/bench_gcp.rs --map` on the
//! test OS's metal disk (1 GiB, ~51 MiB of data): 86 entries and 50.7 MiB
//! stored with 4 KiB holes kept (what GNU tar does), 21 entries and
//! 51.4 MiB (+1.4%) at 64 KiB, 14 entries and 53.9 MiB (+6%) at 1 MiB. An
//! ext4 image made by `mkfs.ext4 -d /usr` (5.8 GiB of data in 12 GiB) gave
//! 17 entries at 4 KiB and 16 at 64 KiB: file-system builders allocate
//! densely, and the limit only matters for fragmented images, where it
//! bounds the map to one entry per 68 KiB of disk at worst.
//!
//! A disk that ends in a hole gets a last entry of length 0 at the disk's
//! size, as GNU tar writes it, so that extraction restores the full size.
use crate::io::buffers::is_zero;
use crate::io::compress::{compress_view, CompressOpts, Compressor, Written};
use crate::io::sparse::clamped_extents;
use crate::io::view::DiskView;
use anyhow::{ensure, Context, Result};
use std::ops::Range;
use std::path::Path;

/// Name of the one member; GCE image import requires `disk.raw`.
pub const DISK_NAME: &str = "disk.raw";
/// gzip level (docs/contract.md §3: gcp is `gzip -9`).
pub const GZIP_LEVEL: u32 = 9;
/// Tar block size (POSIX `ustar`, GNU tar `BLOCKSIZE`).
const BLOCK: u64 = 512;
/// GNU tar's default record: blocking factor 20 (`tar --blocking-factor`),
/// the archive is padded with zeros to whole records.
const RECORD: u64 = 20 * BLOCK;
/// Zero blocks that end an archive (POSIX: "two consecutive blocks of
/// zero-filled records").
const END_BLOCKS: u64 = 2;
/// Zero-detection granule of the sparse map (see the module docs).
pub const GRANULE: u64 = 4096;
/// Holes shorter than this are stored as data (see the module docs).
pub const MIN_HOLE: u64 = 64 << 10;
/// Bytes read per step while scanning for the sparse map.
const SCAN_BLOCK: usize = 4 << 20;
/// File mode of the member, `-rw-r--r--` as tar would record it.
const MODE: u64 = 0o644;
/// Owner recorded for the member (uid/gid 0).
const OWNER: &str = "root";
/// Type flag of a regular file (POSIX `REGTYPE`).
const TYPE_REGULAR: u8 = b'0';
/// Type flag of an old GNU sparse file (GNU tar `GNUTYPE_SPARSE`).
const TYPE_GNU_SPARSE: u8 = b'S';
/// Magic and version of the old GNU format: `"ustar  \0"` (GNU tar
/// `OLDGNU_MAGIC`, where POSIX ustar has `"ustar\0" "00"`).
const OLDGNU_MAGIC: &[u8; 8] = b"ustar  \0";
/// Sparse entries in the main header (GNU tar `SPARSES_IN_OLDGNU_HEADER`).
const HEADER_ENTRIES: usize = 4;
/// Sparse entries per extension block (`SPARSES_IN_SPARSE_HEADER`).
const EXT_ENTRIES: usize = 21;
/// Bytes of one sparse entry: offset[12] and numbytes[12].
const ENTRY_SIZE: usize = 24;

/// Field offsets and widths of the old GNU header (GNU tar `tar.h`,
/// `struct oldgnu_header` overlaying `struct posix_header`).
mod hdr {
    pub const NAME: usize = 0;
    pub const MODE: (usize, usize) = (100, 8);
    pub const UID: (usize, usize) = (108, 8);
    pub const GID: (usize, usize) = (116, 8);
    pub const SIZE: (usize, usize) = (124, 12);
    pub const MTIME: (usize, usize) = (136, 12);
    pub const CHKSUM: (usize, usize) = (148, 8);
    pub const TYPEFLAG: usize = 156;
    pub const MAGIC: usize = 257;
    pub const UNAME: usize = 265;
    pub const GNAME: usize = 297;
    /// `sp[4]` of `struct oldgnu_header`.
    pub const SPARSE: usize = 386;
    pub const ISEXTENDED: usize = 482;
    pub const REALSIZE: (usize, usize) = (483, 12);
    /// `struct sparse_header`: `sp[21]` then `isextended`.
    pub const EXT_ISEXTENDED: usize = 504;
}

/// What [`write_gcp_tar_gz`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcpStats {
    /// The `.tar.gz` (`size`, `sha256`) and the tar inside it
    /// (`uncompressed_size`, `uncompressed_sha256`).
    pub written: Written,
    /// Size of `disk.raw` (the disk view's length).
    pub disk_size: u64,
    /// Disk bytes stored in the archive (the rest are holes).
    pub stored: u64,
    /// Entries of the sparse map, the final zero-length one included.
    pub sparse_entries: usize,
}

/// Write `view` as a GCP image tarball at `out` (created or truncated,
/// fsynced; no temporary name: the caller renames). The member's mtime is
/// `mtime`, Unix seconds: the output depends only on the disk's content
/// and `mtime`.
/// `threads` gzip workers (0: one per CPU). `progress` gets the disk bytes
/// done so far, out of `view.len()`.
pub fn write_gcp_tar_gz(
    view: &dyn DiskView,
    out: &Path,
    mtime: u64,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<GcpStats> {
    let ctx = || format!("writing GCP tarball {}", out.display());
    let map = sparse_map(view).with_context(ctx)?;
    let tar = TarView::new(view, map, mtime).with_context(ctx)?;
    let disk_len = view.len();
    let tar_progress = |n: u64| progress(tar.disk_offset(n).min(disk_len));
    let opts = CompressOpts::new(Compressor::Gzip, GZIP_LEVEL, threads);
    let written = compress_view(&tar, out, &opts, &tar_progress).with_context(ctx)?;
    let stats = GcpStats {
        written,
        disk_size: disk_len,
        stored: tar.stored,
        sparse_entries: tar.entries,
    };
    tracing::debug!(?stats, "wrote GCP tarball");
    Ok(stats)
}

/// The sparse map of `view`: sorted, disjoint ranges holding all its
/// non-zero bytes, aligned to [`GRANULE`] (the last may end at the disk's
/// end), separated by holes of at least [`MIN_HOLE`]. Reads the view's data
/// extents once.
pub fn sparse_map(view: &dyn DiskView) -> Result<Vec<Range<u64>>> {
    sparse_map_with(view, MIN_HOLE)
}

/// [`sparse_map`] keeping only holes of at least `min_hole` bytes.
/// What the sparse map would be with holes of at least `min_hole` bytes:
/// the trade-off behind [`MIN_HOLE`], studied by `examples/bench_gcp.rs`.
#[derive(Debug, Clone, Copy)]
pub struct MapSummary {
    /// Sparse map entries.
    pub entries: usize,
    /// 512-byte header blocks that hold them (the main header and the
    /// extension blocks).
    pub header_blocks: usize,
    /// Data bytes stored in the archive.
    pub stored: u64,
}

/// [`MapSummary`] of `view` for a minimum hole of `min_hole` bytes (a
/// multiple of [`GRANULE`]).
pub fn map_summary(view: &dyn DiskView, min_hole: u64) -> Result<MapSummary> {
    let map = sparse_map_with(view, min_hole)?;
    Ok(MapSummary {
        entries: map.len(),
        header_blocks: 1 + map
            .len()
            .saturating_sub(HEADER_ENTRIES)
            .div_ceil(EXT_ENTRIES),
        stored: map.iter().map(|r| r.end - r.start).sum(),
    })
}

fn sparse_map_with(view: &dyn DiskView, min_hole: u64) -> Result<Vec<Range<u64>>> {
    let len = view.len();
    let mut map: Vec<Range<u64>> = Vec::new();
    let mut buf = vec![0u8; SCAN_BLOCK];
    // First byte not yet scanned: aligned extents may overlap.
    let mut scanned = 0u64;
    for r in clamped_extents(view).context("mapping the disk's data")? {
        let start = (r.start / GRANULE * GRANULE).max(scanned);
        let end = r.end.next_multiple_of(GRANULE).min(len);
        let mut pos = start;
        while pos < end {
            crate::util::cancel::check()?;
            let n = (end - pos).min(SCAN_BLOCK as u64) as usize;
            let chunk = &mut buf[..n];
            view.read_at(chunk, pos)
                .with_context(|| format!("reading the disk at offset {pos}"))?;
            for (i, g) in chunk.chunks(GRANULE as usize).enumerate() {
                if is_zero(g) {
                    continue;
                }
                let g_start = pos + (i as u64) * GRANULE;
                let g_end = g_start + g.len() as u64;
                match map.last_mut() {
                    Some(last) if g_start - last.end < min_hole => last.end = g_end,
                    _ => map.push(g_start..g_end),
                }
            }
            pos += n as u64;
        }
        scanned = scanned.max(end);
    }
    Ok(map)
}

/// One stored piece of the disk: tar bytes `[tar, tar + len)` are disk
/// bytes `[disk, disk + len)`.
#[derive(Debug, Clone, Copy)]
struct Segment {
    tar: u64,
    disk: u64,
    len: u64,
}

/// The uncompressed tar archive as a random-access view (see the module
/// docs): header blocks, the map's data back to back, zero padding to a
/// block, two zero blocks, zero padding to a record.
pub struct TarView<'a> {
    disk: &'a dyn DiskView,
    /// Main header plus extension blocks.
    header: Vec<u8>,
    /// Non-empty entries of the map, contiguous in the archive.
    segments: Vec<Segment>,
    /// End of the last data byte in the archive.
    data_end: u64,
    len: u64,
    /// Disk bytes stored.
    stored: u64,
    /// Entries written in the sparse map.
    entries: usize,
}

impl<'a> TarView<'a> {
    /// The archive for `disk` with the sparse `map` (as [`sparse_map`]
    /// makes it: sorted, disjoint, block-aligned except at the disk's end)
    /// and member mtime `mtime`.
    pub fn new(disk: &'a dyn DiskView, map: Vec<Range<u64>>, mtime: u64) -> Result<Self> {
        Self::with_members(disk, map, mtime, DISK_NAME, &[])
    }

    /// The archive with regular members `leading` (name, content) first,
    /// then the disk as the sparse member `disk_name` (cosa's powervs OVA:
    /// `coreos.ovf`, then `<image>-disk.raw`).
    pub fn with_members(
        disk: &'a dyn DiskView,
        map: Vec<Range<u64>>,
        mtime: u64,
        disk_name: &str,
        leading: &[(&str, &[u8])],
    ) -> Result<Self> {
        for name in leading.iter().map(|m| m.0).chain([disk_name]) {
            ensure!(
                !name.is_empty() && name.len() < 100,
                "tar member name {name:?} must be 1 to 99 bytes (the old GNU header's name field)"
            );
        }
        let len = disk.len();
        let mut prev_end = 0;
        for r in &map {
            ensure!(
                r.start >= prev_end && r.start < r.end && r.end <= len,
                "sparse map entry {r:?} is out of order or past the disk's end ({len})"
            );
            ensure!(
                r.start % BLOCK == 0 && (r.end % BLOCK == 0 || r.end == len),
                "sparse map entry {r:?} is not block-aligned"
            );
            prev_end = r.end;
        }
        let mut entries: Vec<(u64, u64)> = map.iter().map(|r| (r.start, r.end - r.start)).collect();
        if prev_end < len || entries.is_empty() {
            // Trailing hole (or empty disk): GNU tar's final zero-length
            // entry at the disk's size.
            entries.push((len, 0));
        }
        let stored: u64 = entries.iter().map(|e| e.1).sum();
        let mut header = Vec::new();
        for (name, data) in leading {
            header.extend(regular_member(name, data, mtime));
        }
        header.extend(headers(disk_name, &entries, len, stored, mtime));
        let mut segments = Vec::with_capacity(map.len());
        let mut tar = header.len() as u64;
        for r in &map {
            let n = r.end - r.start;
            segments.push(Segment {
                tar,
                disk: r.start,
                len: n,
            });
            tar += n;
        }
        let data_end = tar;
        let archive = data_end.next_multiple_of(BLOCK) + END_BLOCKS * BLOCK;
        Ok(TarView {
            disk,
            header,
            segments,
            data_end,
            len: archive.next_multiple_of(RECORD),
            stored,
            entries: entries.len(),
        })
    }

    /// The disk offset the archive has reached at archive offset `n`: 0 in
    /// the headers, the mapped offset in the data, the disk's size after.
    fn disk_offset(&self, n: u64) -> u64 {
        if n >= self.data_end {
            return self.disk.len();
        }
        let i = self.segments.partition_point(|s| s.tar + s.len <= n);
        match self.segments.get(i) {
            Some(s) if s.tar <= n => s.disk + (n - s.tar),
            _ => 0,
        }
    }
}

impl DiskView for TarView<'_> {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        crate::util::cancel::check()?;
        let end = offset + buf.len() as u64;
        let mut pos = offset;
        while pos < end {
            let out = &mut buf[(pos - offset) as usize..];
            let hlen = self.header.len() as u64;
            if pos < hlen {
                let n = (hlen.min(end) - pos) as usize;
                out[..n].copy_from_slice(&self.header[pos as usize..pos as usize + n]);
                pos += n as u64;
                continue;
            }
            let i = self.segments.partition_point(|s| s.tar + s.len <= pos);
            match self.segments.get(i) {
                Some(s) if s.tar <= pos => {
                    let n = (s.tar + s.len).min(end) - pos;
                    let at = s.disk + (pos - s.tar);
                    self.disk
                        .read_at(&mut out[..n as usize], at)
                        .with_context(|| format!("reading the disk at offset {at}"))?;
                    pos += n;
                }
                // Segments are contiguous: past them is padding.
                _ => {
                    out[..(end - pos) as usize].fill(0);
                    pos = end;
                }
            }
        }
        Ok(())
    }

    fn data_extents(&self) -> Result<Vec<Range<u64>>> {
        let all = 0..self.data_end;
        Ok(vec![all])
    }
}

/// The fields every member header shares: name, mode, owner, size, mtime,
/// type and the old GNU magic.
fn common_header(main: &mut [u8], name: &str, size: u64, mtime: u64, typeflag: u8) {
    main[hdr::NAME..hdr::NAME + name.len()].copy_from_slice(name.as_bytes());
    put_num(main, hdr::MODE, MODE);
    put_num(main, hdr::UID, 0);
    put_num(main, hdr::GID, 0);
    put_num(main, hdr::SIZE, size);
    put_num(main, hdr::MTIME, mtime);
    main[hdr::TYPEFLAG] = typeflag;
    main[hdr::MAGIC..hdr::MAGIC + 8].copy_from_slice(OLDGNU_MAGIC);
    main[hdr::UNAME..hdr::UNAME + OWNER.len()].copy_from_slice(OWNER.as_bytes());
    main[hdr::GNAME..hdr::GNAME + OWNER.len()].copy_from_slice(OWNER.as_bytes());
}

/// Header checksum: byte sum with the field read as spaces, written as
/// six octal digits, NUL, space (GNU tar `finish_header`).
fn finish_header(main: &mut [u8]) {
    let (at, width) = hdr::CHKSUM;
    main[at..at + width].fill(b' ');
    let sum: u64 = main.iter().map(|&b| b as u64).sum();
    let digits = format!("{sum:06o}");
    main[at..at + 6].copy_from_slice(digits.as_bytes());
    main[at + 6] = 0;
    main[at + 7] = b' ';
}

/// A regular file member: its header and its data padded to whole blocks.
fn regular_member(name: &str, data: &[u8], mtime: u64) -> Vec<u8> {
    let mut out = vec![0u8; BLOCK as usize + (data.len() as u64).next_multiple_of(BLOCK) as usize];
    common_header(
        &mut out[..BLOCK as usize],
        name,
        data.len() as u64,
        mtime,
        TYPE_REGULAR,
    );
    finish_header(&mut out[..BLOCK as usize]);
    out[BLOCK as usize..BLOCK as usize + data.len()].copy_from_slice(data);
    out
}

/// Main header and extension blocks for the sparse `entries` (offset,
/// length) of a member `name` of `realsize` bytes storing `stored` bytes.
fn headers(name: &str, entries: &[(u64, u64)], realsize: u64, stored: u64, mtime: u64) -> Vec<u8> {
    let extra = entries.len().saturating_sub(HEADER_ENTRIES);
    let ext_blocks = extra.div_ceil(EXT_ENTRIES);
    let mut out = vec![0u8; (1 + ext_blocks) * BLOCK as usize];
    let (main, exts) = out.split_at_mut(BLOCK as usize);

    common_header(main, name, stored, mtime, TYPE_GNU_SPARSE);
    let (first, rest) = entries.split_at(entries.len().min(HEADER_ENTRIES));
    put_entries(&mut main[hdr::SPARSE..], first);
    main[hdr::ISEXTENDED] = u8::from(ext_blocks > 0);
    put_num(main, hdr::REALSIZE, realsize);

    for (k, (block, chunk)) in exts
        .chunks_exact_mut(BLOCK as usize)
        .zip(rest.chunks(EXT_ENTRIES))
        .enumerate()
    {
        put_entries(block, chunk);
        block[hdr::EXT_ISEXTENDED] = u8::from(k + 1 < ext_blocks);
    }

    finish_header(main);
    out
}

/// Sparse entries as offset[12] numbytes[12] pairs from the start of `dst`.
fn put_entries(dst: &mut [u8], entries: &[(u64, u64)]) {
    for (i, &(offset, len)) in entries.iter().enumerate() {
        let at = i * ENTRY_SIZE;
        put_num(dst, (at, 12), offset);
        put_num(dst, (at + 12, 12), len);
    }
}

/// A numeric field as GNU tar writes it: zero-padded octal and a NUL when
/// it fits in `width - 1` digits, else base-256 (first byte 0x80, then the
/// value big-endian), as GNU tar does for `oldgnu` (e.g. sizes of 8 GiB
/// and more in 12-byte fields).
fn put_num(dst: &mut [u8], (at, width): (usize, usize), v: u64) {
    let field = &mut dst[at..at + width];
    let digits = width - 1;
    if digits >= 22 || v < 1u64 << (3 * digits) {
        let s = format!("{v:0digits$o}");
        field[..digits].copy_from_slice(s.as_bytes());
        field[digits] = 0;
    } else {
        field.fill(0);
        for (i, b) in field.iter_mut().rev().take(width - 1).enumerate() {
            *b = v.checked_shr(8 * i as u32).unwrap_or(0) as u8;
        }
        field[0] |= 0x80;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::sparse::test_support::*;
    use crate::io::view::{Composite, FileView, Patch};
    use std::os::unix::fs::FileExt;
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicU64, Ordering};

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    const MTIME: u64 = 1_700_000_000;

    fn run(cmd: &mut Command) -> Vec<u8> {
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// `gzip -dc` of a file.
    fn gunzip(path: &Path) -> Vec<u8> {
        run(Command::new("gzip").arg("-dc").arg(path))
    }

    /// Equal content of two files of which only the data extents can hold
    /// non-zero bytes: compare sizes, then both files over each file's
    /// data extents (everything else reads zero in both).
    fn assert_same_content(a: &Path, b: &Path) {
        let (va, vb) = (FileView::open(a).unwrap(), FileView::open(b).unwrap());
        assert_eq!(va.len(), vb.len(), "sizes of {a:?} and {b:?}");
        for r in va
            .data_extents()
            .unwrap()
            .into_iter()
            .chain(vb.data_extents().unwrap())
        {
            let mut pos = r.start;
            while pos < r.end {
                let n = (r.end - pos).min(4 * MIB) as usize;
                let (mut x, mut y) = (vec![0u8; n], vec![0u8; n]);
                va.read_at(&mut x, pos).unwrap();
                vb.read_at(&mut y, pos).unwrap();
                assert!(
                    x == y,
                    "{a:?} and {b:?} differ in {pos}..{}",
                    pos + n as u64
                );
                pos += n as u64;
            }
        }
    }

    /// Everything an independent reader can check on a tarball of the
    /// file `src`: gzip's own test, GNU tar's listing, extraction (byte
    /// equality and sparseness), the oldgnu header magic, file(1).
    fn check_with_gnu_tar(tgz: &Path, src: &Path, dir: &Path) {
        let len = std::fs::metadata(src).unwrap().len();
        run(Command::new("gzip").arg("-t").arg(tgz));
        let list = String::from_utf8(run(Command::new("tar").arg("-tvzf").arg(tgz))).unwrap();
        let lines: Vec<&str> = list.lines().collect();
        assert_eq!(lines.len(), 1, "{list}");
        let fields: Vec<&str> = lines[0].split_whitespace().collect();
        assert_eq!(fields[0], "-rw-r--r--", "{list}");
        assert_eq!(fields[1], "root/root", "{list}");
        assert_eq!(fields[2], len.to_string(), "{list}");
        assert_eq!(*fields.last().unwrap(), "disk.raw", "{list}");

        let x = dir.join("x");
        std::fs::create_dir_all(&x).unwrap();
        run(Command::new("tar").arg("-xSzf").arg(tgz).arg("-C").arg(&x));
        let names: Vec<_> = std::fs::read_dir(&x)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["disk.raw"]);
        let got = x.join("disk.raw");
        assert_same_content(src, &got);
        // Sparse: no more allocated than the source's real data plus the
        // stored short holes.
        let alloc = allocated(&got);
        assert!(
            alloc <= allocated(src) + 4 * MIB,
            "extracted file allocates {alloc} bytes, source {}",
            allocated(src)
        );
        std::fs::remove_dir_all(&x).unwrap();

        let tar = gunzip(tgz);
        assert_eq!(&tar[257..265], b"ustar  \0", "oldgnu magic");
        assert_eq!(tar[156], b'S', "GNU sparse type flag");
        assert_eq!(tar.len() as u64 % RECORD, 0, "whole records");
        let mut file = Command::new("file")
            .args(["-b", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(file.stdin.as_mut().unwrap(), &tar[..BLOCK as usize * 4])
            .unwrap();
        drop(file.stdin.take());
        let what = String::from_utf8(file.wait_with_output().unwrap().stdout).unwrap();
        assert!(what.contains("tar archive (GNU)"), "file says {what}");
    }

    /// Python's `tarfile` (which reads sparse data back to back, like Go's
    /// `archive/tar`): the member's name, size, sparse map and the SHA-256
    /// of its content.
    fn python_view(tgz: &Path) -> (String, u64, Vec<(u64, u64)>, String) {
        let script = r#"
import hashlib, json, sys, tarfile
with tarfile.open(sys.argv[1], "r:gz") as tf:
    ms = tf.getmembers()
    assert len(ms) == 1, ms
    m = ms[0]
    h = hashlib.sha256()
    f = tf.extractfile(m)
    while True:
        b = f.read(1 << 20)
        if not b:
            break
        h.update(b)
    sparse = [list(e) for e in (m.sparse or []) if e[1] > 0]
    print(json.dumps([m.name, m.size, sparse, h.hexdigest()]))
"#;
        let out = run(Command::new("python3").arg("-c").arg(script).arg(tgz));
        let v: (String, u64, Vec<(u64, u64)>, String) = serde_json::from_slice(&out).unwrap();
        v
    }

    /// A file of `len` bytes with random data in `regions`.
    fn disk(dir: &Path, name: &str, len: u64, regions: &[(u64, u64)]) -> std::path::PathBuf {
        let p = dir.join(name);
        let r: Vec<_> = regions.iter().map(|&(o, n)| (o, n, Fill::Random)).collect();
        make_sparse(&p, len, &r, 42);
        p
    }

    fn write(view: &dyn DiskView, out: &Path, threads: usize) -> GcpStats {
        let last = AtomicU64::new(0);
        let s = write_gcp_tar_gz(view, out, MTIME, threads, &|n| {
            assert!(n >= last.load(Ordering::Relaxed), "progress went back");
            assert!(n <= view.len());
            last.store(n, Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(last.load(Ordering::Relaxed), view.len(), "final progress");
        assert_eq!(s.written.size, std::fs::metadata(out).unwrap().len());
        assert_eq!(s.written.sha256, sha256sum(out));
        assert_eq!(s.disk_size, view.len());
        s
    }

    #[test]
    fn numeric_fields_octal_and_base256() {
        let mut b = [0xffu8; 12];
        put_num(&mut b, (0, 12), 0o644);
        assert_eq!(&b, b"00000000644\0");
        put_num(&mut b, (0, 12), (1 << 33) - 1);
        assert_eq!(&b, b"77777777777\0");
        put_num(&mut b, (0, 12), 1 << 33);
        assert_eq!(b, [0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0]);
        let mut m = [0u8; 8];
        put_num(&mut m, (0, 8), 0o644);
        assert_eq!(&m, b"0000644\0");
    }

    #[test]
    fn map_merges_short_holes_and_drops_written_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let len = 8 * MIB + 100;
        let p = disk(
            dir.path(),
            "d",
            len,
            &[
                (0, 10),                    // granule 0
                (60 * KIB, 10),             // hole < 64 KiB: merged
                (200 * KIB + 5, 100 * KIB), // unaligned: widened
                (2 * MIB, 4 * KIB),         // separate
                (len - 50, 50),             // to the very end
            ],
        );
        // Written zeros inside an allocated extent: a hole in the map.
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(&vec![0u8; MIB as usize], 4 * MIB).unwrap();
        f.sync_all().unwrap();
        drop(f);
        assert!(allocated(&p) > MIB, "zeros are allocated");
        let map = sparse_map(&FileView::open(&p).unwrap()).unwrap();
        assert_eq!(
            map,
            vec![
                0..64 * KIB,
                200 * KIB..300 * KIB + 4 * KIB,
                2 * MIB..2 * MIB + 4 * KIB,
                (len - 100)..len,
            ]
        );
    }

    /// Many extents (two extension blocks), written zeros, a length that
    /// is not a multiple of 512, a composite view.
    #[test]
    fn extension_headers_odd_length_and_readers_agree() {
        let dir = tempfile::tempdir().unwrap();
        let len = 40 * MIB + 333;
        let mut regions: Vec<(u64, u64)> =
            (0..30).map(|i| (i * 1200 * KIB + 7, 300 * KIB)).collect();
        regions.push((len - 1000, 1000));
        let src = disk(dir.path(), "many.raw", len, &regions);
        let view = FileView::open(&src).unwrap();
        let map = sparse_map(&view).unwrap();
        assert_eq!(map.len(), 31);
        let out = dir.path().join("many.tar.gz");
        let s = write(&view, &out, 2);
        assert_eq!(s.sparse_entries, 31, "no trailing entry: data at the end");
        assert!(
            s.sparse_entries > HEADER_ENTRIES + EXT_ENTRIES,
            "two extension blocks"
        );
        assert_eq!(s.stored, map.iter().map(|r| r.end - r.start).sum::<u64>());
        check_with_gnu_tar(&out, &src, dir.path());

        let tar = gunzip(&out);
        assert_eq!(tar.len() as u64, s.written.uncompressed_size);
        assert_eq!(crate::util::sha256_hex(&tar), s.written.uncompressed_sha256);
        assert_eq!(tar[482], 1, "main header isextended");
        assert_eq!(tar[512 + 504], 1, "first extension block isextended");
        assert_eq!(tar[1024 + 504], 0, "last extension block");

        let (name, size, pmap, sha) = python_view(&out);
        assert_eq!(name, "disk.raw");
        assert_eq!(size, len);
        let want: Vec<(u64, u64)> = map.iter().map(|r| (r.start, r.end - r.start)).collect();
        assert_eq!(pmap, want);
        assert_eq!(sha, sha256sum(&src));

        // A composite (patch over base, zero-extended, odd size).
        let fx = fixture(dir.path(), 24 * MIB);
        let base = FileView::open(&fx.base).unwrap();
        let patch = Patch::from_file(&fx.patch, 7 * MIB + 4096, MIB).unwrap();
        let c = Composite::new(&base, 30 * MIB + 3, vec![patch]).unwrap();
        let out = dir.path().join("c.tar.gz");
        write(&c, &out, 3);
        let (_, size, _, sha) = python_view(&out);
        assert_eq!(size, 30 * MIB + 3);
        assert_eq!(sha, crate::util::sha256_hex(&view_bytes(&c)));
    }

    /// A disk that ends in a hole keeps its size through extraction, and
    /// the archive is byte for byte what GNU tar makes of the same file
    /// when the maps agree (4 KiB-aligned data, holes >= 64 KiB), also with
    /// base-256 fields (a disk over 8 GiB) and extension blocks.
    #[test]
    fn identical_to_gnu_tar_and_trailing_hole() {
        let dir = tempfile::tempdir().unwrap();
        let small: Vec<(u64, u64)> = vec![(0, 64 * KIB), (MIB, 8 * KIB), (5 * MIB, 3 * MIB)];
        let mut big = small.clone();
        big.extend((0..8).map(|i| (8 * GIB + i * MIB, 12 * KIB)));
        for (i, (len, regions, entries)) in [(16 * MIB, small, 4), (10 * GIB, big, 12)]
            .into_iter()
            .enumerate()
        {
            let sub = dir.path().join(i.to_string());
            std::fs::create_dir(&sub).unwrap();
            let src = disk(&sub, "disk.raw", len, &regions);
            let view = FileView::open(&src).unwrap();
            let out = sub.join("ours.tar.gz");
            let s = write(&view, &out, 2);
            assert_eq!(s.sparse_entries, entries, "the extents and the final hole");
            check_with_gnu_tar(&out, &src, &sub);
            let ours = gunzip(&out);
            let gnu = run(Command::new("tar")
                .args(["--format=oldgnu", "-cSf", "-"])
                .args(["--owner=root:0", "--group=root:0", "--mode=0644"])
                .arg(format!("--mtime=@{MTIME}"))
                .arg("-C")
                .arg(&sub)
                .arg("disk.raw"));
            assert_eq!(ours.len(), gnu.len(), "{len}");
            let first_diff = ours.iter().zip(&gnu).position(|(a, b)| a != b);
            assert_eq!(first_diff, None, "{len}: differs from GNU tar");
        }
    }

    /// Sizes and offsets of 8 GiB and more need base-256 fields.
    #[test]
    fn disk_over_8_gib() {
        let dir = tempfile::tempdir().unwrap();
        let len = 9 * GIB + 512 * 3;
        let src = disk(
            dir.path(),
            "big.raw",
            len,
            &[
                (MIB, MIB),
                (8 * GIB + 12_345, 200 * KIB),
                (len - 4096, 4096),
            ],
        );
        let view = FileView::open(&src).unwrap();
        let out = dir.path().join("big.tar.gz");
        let s = write(&view, &out, 2);
        assert_eq!(s.sparse_entries, 3);
        check_with_gnu_tar(&out, &src, dir.path());
        let tar = gunzip(&out);
        assert_eq!(tar[483], 0x80, "realsize in base-256");
        assert_eq!(tar[386 + 24], 0x80, "second entry's offset in base-256");
    }

    #[test]
    fn empty_and_all_zero_disks() {
        let dir = tempfile::tempdir().unwrap();
        for (name, len) in [("empty.raw", 0), ("zero.raw", 5 * MIB + 1)] {
            let src = disk(dir.path(), name, len, &[]);
            let out = dir.path().join(format!("{name}.tar.gz"));
            let s = write(&FileView::open(&src).unwrap(), &out, 2);
            assert_eq!((s.sparse_entries, s.stored), (1, 0));
            check_with_gnu_tar(&out, &src, dir.path());
            let (_, size, pmap, _) = python_view(&out);
            assert_eq!((size, pmap.len()), (len, 0));
        }
    }

    #[test]
    fn output_is_deterministic() {
        let dir = tempfile::tempdir().unwrap();
        let fx = fixture(dir.path(), 20 * MIB + 512);
        let view = FileView::open(&fx.base).unwrap();
        let a = dir.path().join("a.tar.gz");
        let b = dir.path().join("b.tar.gz");
        let sa = write(&view, &a, 1);
        let sb = write(&view, &b, 4);
        assert_eq!(sa, sb);
        assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap());
    }

    #[test]
    fn errors_name_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let fx = fixture(dir.path(), 8 * MIB);
        let view = FileView::open(&fx.base).unwrap();
        let out = dir.path().join("no/such/x.tar.gz");
        let err = write_gcp_tar_gz(&view, &out, MTIME, 2, &|_| {}).unwrap_err();
        assert!(format!("{err:#}").contains("no/such/x.tar.gz"), "{err:#}");
    }

    #[test]
    fn tar_view_rejects_bad_maps() {
        let dir = tempfile::tempdir().unwrap();
        let src = disk(dir.path(), "d", MIB, &[]);
        let v = FileView::open(&src).unwrap();
        let one = |r: Range<u64>| vec![r];
        assert!(TarView::new(&v, one(100..4096), 0).is_err());
        assert!(TarView::new(&v, vec![0..4096, 0..8192], 0).is_err());
        assert!(TarView::new(&v, one(0..2 * MIB), 0).is_err());
        assert!(TarView::new(&v, one(0..MIB), 0).is_ok());
    }
}
