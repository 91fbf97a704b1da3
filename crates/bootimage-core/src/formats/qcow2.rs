//! Streaming qcow2 (version 3, compat 1.1) writer: turns a disk view (a raw,
//! possibly sparse image, or a base with patches) into a qcow2 image holding
//! only its non-zero clusters.
//!
//! Every constant below is taken from QEMU `docs/interop/qcow2.txt`.
//!
//! Layout of the output, in host clusters of [`CLUSTER_SIZE`] bytes:
//!
//! ```text
//! [header] [unused up to `align`] [shared blocks] [other data clusters]
//! [L2 tables] [L1 table] [refcount table] [refcount blocks]
//! ```
//!
//! The source is read once: data clusters are streamed out while their
//! guest cluster numbers are remembered (16 bytes per data cluster); the
//! metadata follows once the data count is known and the header is written
//! last.
//!
//! Shared blocks: the caller names an alignment (a compressor's chunk
//! size). Every whole `align`-sized guest block that the view declares
//! shared ([`DiskView::shared_source`]: the unchanged base disk under a
//! platform's patches) and that holds any data is stored whole, zero
//! clusters included, at an `align`-aligned file offset, in guest order. So
//! the file's chunk at such an offset has exactly the bytes of the raw
//! disk's chunk at the block's guest offset, and a compressor reuses its
//! work on the raw disk (or on another platform's qcow2) for it
//! ([`Qcow2Stats::shared`]). The other non-zero clusters follow. The
//! clusters between the header and the first block (`align` > one cluster)
//! are unused: refcount 0, a hole in the file. Every other cluster of the
//! file is in use exactly once (refcount 1).
use crate::io::buffers::{is_zero, BufPool};
use crate::io::sparse::clamped_extents;
use crate::io::view::{DiskView, FileView};
use anyhow::{ensure, Context, Result};
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

/// Header magic, `'Q' 'F' 'I' 0xfb` (qcow2.txt: "magic").
const QCOW2_MAGIC: u32 = 0x5146_49fb;
/// Header version 3, i.e. "compat=1.1" (qcow2.txt: "version").
const QCOW2_VERSION: u32 = 3;
/// log2 of the cluster size (qcow2.txt: "cluster_bits"); 16 is QEMU's default.
const CLUSTER_BITS: u32 = 16;
/// Cluster size in bytes, `1 << cluster_bits`.
pub const CLUSTER_SIZE: u64 = 1 << CLUSTER_BITS;
/// No encryption (qcow2.txt: "crypt_method", 0 = no encryption).
const CRYPT_NONE: u32 = 0;
/// log2 of the refcount width in bits (qcow2.txt: "refcount_order"); 4 means
/// 16-bit refcounts, QEMU's default.
const REFCOUNT_ORDER: u32 = 4;
/// Bytes per refcount entry: `(1 << refcount_order) / 8`.
const REFCOUNT_BYTES: u64 = (1 << REFCOUNT_ORDER) / 8;
/// Length of the version 3 header without the optional compression type
/// (qcow2.txt: "header_length", 104 for the fields up to byte 103).
const HEADER_LENGTH: u32 = 104;
/// Header extension type marking the end of the extension area
/// (qcow2.txt: "0x00000000 - End of the header extension area").
const HEADER_EXT_END: u32 = 0;
/// Bytes per L1, L2 and refcount table entry (all are 64-bit big-endian).
const TABLE_ENTRY_BYTES: u64 = 8;
/// L2 entries per L2 table: one cluster of 64-bit entries.
const L2_ENTRIES: u64 = CLUSTER_SIZE / TABLE_ENTRY_BYTES;
/// Refcount entries per refcount block: one cluster of refcounts.
const REFCOUNT_BLOCK_ENTRIES: u64 = CLUSTER_SIZE / REFCOUNT_BYTES;
/// Refcount table entries per cluster of the refcount table.
const REFCOUNT_TABLE_ENTRIES_PER_CLUSTER: u64 = CLUSTER_SIZE / TABLE_ENTRY_BYTES;
/// L1/L2 entry bit 63, "COPIED": the cluster's refcount is exactly one
/// (qcow2.txt: "L1 table entry" and "Standard Cluster Descriptor" tables).
const ENTRY_COPIED: u64 = 1 << 63;
/// Bits 9-55 of an L1/L2 entry hold the host offset (qcow2.txt).
const ENTRY_OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;
/// The guest disk size must be a multiple of the 512-byte sector, as QEMU
/// rounds image sizes to sectors (`BDRV_SECTOR_SIZE`).
const SECTOR_SIZE: u64 = 512;
/// How many clusters are read from the source per `pread`.
const READ_BATCH_CLUSTERS: u64 = 16;
/// Output buffer size; data clusters are written through it.
const WRITE_BUFFER_BYTES: usize = 4 << 20;

/// What [`write_qcow2`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qcow2Stats {
    /// Guest-visible disk size in bytes (the header's `size`).
    pub virtual_size: u64,
    /// Number of data clusters stored (non-zero guest clusters, and the
    /// zero clusters inside shared blocks).
    pub data_clusters: u64,
    /// Size of the qcow2 file in bytes.
    pub file_size: u64,
    /// Where the file holds shared blocks of the view, if any.
    pub shared: Option<SharedBlocks>,
}

/// The shared blocks of a qcow2 file (see the module documentation): block
/// `i` is the `align` bytes at `start + i * align` of the file, and holds
/// the bytes the view declared shared as `blocks[i]` (a tag and a source
/// offset, [`DiskView::shared_source`]). `io::view::Remapped` presents the
/// file to a compressor with this mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedBlocks {
    pub start: u64,
    pub align: u64,
    pub blocks: Vec<(u64, u64)>,
}

/// Where the metadata goes, computed once the data cluster count is known.
/// All values are in host clusters unless named `*_offset` (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    /// First data cluster: clusters 1..data_first are unused.
    data_first: u64,
    /// Entries in the L1 table (the header's `l1_size`).
    l1_entries: u64,
    /// Number of L2 tables written (one per L1 entry that maps any data).
    l2_tables: u64,
    l2_first: u64,
    l1_first: u64,
    l1_clusters: u64,
    refcount_table_first: u64,
    refcount_table_clusters: u64,
    refcount_block_first: u64,
    refcount_blocks: u64,
    /// Total host clusters in the file; every one but the unused ones has
    /// refcount 1.
    total_clusters: u64,
}

impl Layout {
    /// `data_first`: host cluster of the first data cluster (1 right after
    /// the header; more when the data is aligned).
    fn new(virtual_size: u64, data_first: u64, data_clusters: u64, l2_tables: u64) -> Self {
        let guest_clusters = virtual_size.div_ceil(CLUSTER_SIZE);
        let l1_entries = guest_clusters.div_ceil(L2_ENTRIES);
        let l1_clusters = (l1_entries * TABLE_ENTRY_BYTES).div_ceil(CLUSTER_SIZE);
        // Header cluster, then data, then L2 tables, then the L1 table.
        let l2_first = data_first + data_clusters;
        let l1_first = l2_first + l2_tables;
        let refcount_table_first = l1_first + l1_clusters;
        // The refcount structures count themselves: iterate to a fixed point
        // (the sizes only grow, so this terminates within a few rounds).
        let (mut rt_clusters, mut blocks) = (0u64, 0u64);
        loop {
            let total = refcount_table_first + rt_clusters + blocks;
            let need_blocks = total.div_ceil(REFCOUNT_BLOCK_ENTRIES);
            let need_rt = need_blocks.div_ceil(REFCOUNT_TABLE_ENTRIES_PER_CLUSTER);
            if need_blocks == blocks && need_rt == rt_clusters {
                break;
            }
            blocks = need_blocks;
            rt_clusters = need_rt;
        }
        Layout {
            data_first,
            l1_entries,
            l2_tables,
            l2_first,
            l1_first,
            l1_clusters,
            refcount_table_first,
            refcount_table_clusters: rt_clusters,
            refcount_block_first: refcount_table_first + rt_clusters,
            refcount_blocks: blocks,
            total_clusters: refcount_table_first + rt_clusters + blocks,
        }
    }
}

/// Convert the raw image at `src` into a qcow2 image at `dst` (written in
/// place and fsynced: publishing under a final name is the caller's, see
/// `publish::staged`). The guest size is the source's length rounded up to a
/// sector.
pub fn convert_file(src: &Path, dst: &Path) -> Result<Qcow2Stats> {
    let input = FileView::open(src).context("opening raw image")?;
    write_qcow2_file(&input, dst, CLUSTER_SIZE)
        .with_context(|| format!("converting {} to qcow2 {}", src.display(), dst.display()))
}

/// Write `view` as a qcow2 image straight to `out` (created or truncated,
/// then fsynced; no temporary name: the caller renames), its shared blocks
/// aligned to `align` bytes (see [`write_qcow2`]).
pub fn write_qcow2_file(view: &dyn DiskView, out: &Path, align: u64) -> Result<Qcow2Stats> {
    let mut file =
        File::create(out).with_context(|| format!("creating qcow2 image {}", out.display()))?;
    let stats = write_qcow2(view, &mut file, align)
        .with_context(|| format!("writing qcow2 image {}", out.display()))?;
    file.sync_all()
        .with_context(|| format!("syncing qcow2 image {}", out.display()))?;
    Ok(stats)
}

/// Write `src` (a disk view) as a qcow2 image to `out`, which must be empty:
/// it is written from offset 0 with absolute seeks. The virtual size is the
/// view's length rounded up to a whole 512-byte sector, as QEMU does for raw
/// images (the padding reads as zeros). Only clusters that touch the view's
/// data extents and are not entirely zero are stored; everything else stays
/// unallocated and reads as zeros, except the zero clusters of shared
/// blocks: `align` (a multiple of the cluster size) is the size and file
/// alignment of shared blocks; one cluster means no padding, and each
/// shared non-zero cluster is a block of its own.
///
/// Memory use is bounded by the virtual size: 16 bytes per stored cluster
/// plus one L1 entry per 512 MiB of guest disk and a few fixed buffers.
pub fn write_qcow2<W: Write + Seek>(
    src: &dyn DiskView,
    out: &mut W,
    align: u64,
) -> Result<Qcow2Stats> {
    ensure!(
        align >= CLUSTER_SIZE && align % CLUSTER_SIZE == 0,
        "qcow2 block alignment {align} is not a multiple of the cluster size {CLUSTER_SIZE}"
    );
    let virtual_size = virtual_size(src)?;

    let mut w = BufWriter::with_capacity(WRITE_BUFFER_BYTES, out);
    w.seek(SeekFrom::Start(0))
        .context("seeking to the start of the qcow2 output")?;
    // Placeholder header cluster; the real header is written last.
    w.write_all(&[0u8; CLUSTER_SIZE as usize])
        .context("writing qcow2 header cluster")?;

    let data_first = align / CLUSTER_SIZE;
    // Clusters 1..data_first stay a hole.
    w.seek(SeekFrom::Start(data_first * CLUSTER_SIZE))
        .context("seeking to the qcow2 data")?;
    let data = copy_data_clusters(src, &mut w, align)?;
    let map = data.map(data_first);
    let data_clusters = map.len() as u64;
    debug_assert!(map
        .last()
        .map_or(true, |&(g, _)| g < virtual_size.div_ceil(CLUSTER_SIZE)));
    let l2_tables = count_l2_tables(&map);
    let layout = Layout::new(virtual_size, data_first, data_clusters, l2_tables);
    let entries: Vec<(u64, u64)> = (map.iter())
        .map(|&(g, h)| (g, (h * CLUSTER_SIZE) | ENTRY_COPIED))
        .collect();
    write_metadata(&mut w, &layout, &entries, &|_| 1)?;

    w.seek(SeekFrom::Start(0))
        .context("seeking back to the qcow2 header")?;
    w.write_all(&header(virtual_size, &layout))
        .context("writing qcow2 header")?;
    w.flush().context("flushing qcow2 output")?;

    let stats = Qcow2Stats {
        virtual_size,
        data_clusters,
        file_size: layout.total_clusters * CLUSTER_SIZE,
        shared: (!data.blocks.is_empty()).then(|| SharedBlocks {
            start: data_first * CLUSTER_SIZE,
            align,
            blocks: data.blocks.iter().map(|b| b.1).collect(),
        }),
    };
    tracing::debug!(?stats, ?layout, "wrote qcow2");
    Ok(stats)
}

/// L2 entry bit 62: the cluster is compressed (qcow2.txt, "L2 table entry").
const ENTRY_COMPRESSED: u64 = 1 << 62;
/// Compressed cluster descriptor (qcow2.txt): `x = 62 - (cluster_bits - 8)`;
/// bits 0..x-1 hold the host byte offset, bits x..61 the number of
/// additional 512-byte sectors the compressed data spans.
const COMPRESSED_SHIFT: u32 = 62 - (CLUSTER_BITS - 8);
/// deflate window of compressed clusters: QEMU compresses and inflates
/// them as raw deflate with a 4 KiB window (`qcow2-threads.c`,
/// `deflateInit2(..., -12, ...)`).
const COMPRESSED_WINDOW_BITS: u8 = 12;

/// Write `src` as a qcow2 image whose clusters are compressed (what
/// `qemu-img convert -c` and osbuild's `org.osbuild.qemu` with
/// `compression: true` write; cosa's nutanix image): every non-zero
/// cluster is deflated and the results packed back to back; a cluster
/// that does not shrink is stored as is, cluster-aligned. `threads`
/// workers compress (0: one per CPU). The file is created or truncated,
/// and fsynced.
pub fn write_qcow2_compressed_file(
    src: &dyn DiskView,
    out: &Path,
    level: u32,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Qcow2Stats> {
    let file =
        File::create(out).with_context(|| format!("creating qcow2 image {}", out.display()))?;
    let stats = write_compressed(src, &file, level, threads, progress)
        .with_context(|| format!("writing compressed qcow2 image {}", out.display()))?;
    file.sync_all()
        .with_context(|| format!("syncing qcow2 image {}", out.display()))?;
    Ok(stats)
}

fn deflate_cluster(level: u32, data: &[u8]) -> Result<Vec<u8>> {
    let mut c = flate2::Compress::new_with_window_bits(
        flate2::Compression::new(level),
        false,
        COMPRESSED_WINDOW_BITS,
    );
    let mut out = Vec::with_capacity(data.len() + 64);
    let status = c
        .compress_vec(data, &mut out, flate2::FlushCompress::Finish)
        .context("deflating a qcow2 cluster")?;
    // A cluster that does not fit its own size is stored uncompressed.
    if status != flate2::Status::StreamEnd {
        out.clear();
    }
    Ok(out)
}

/// The guest size of `src` in a qcow2 header: its length in whole sectors,
/// within what an L2 entry's offset field (bits 9-55) can address.
fn virtual_size(src: &dyn DiskView) -> Result<u64> {
    let size = src
        .len()
        .checked_next_multiple_of(SECTOR_SIZE)
        .context("disk size overflows")?;
    ensure!(
        size <= ENTRY_OFFSET_MASK,
        "qcow2 virtual size {size} is too large"
    );
    Ok(size)
}

/// A cluster as the compressed writer stores it.
enum Stored {
    /// Deflated, packed back to back.
    Deflated(Vec<u8>),
    /// As is, on a cluster boundary (it did not shrink).
    Plain(Vec<u8>),
}

/// The runs of guest clusters the compressed writer reads, in guest order:
/// up to [`READ_BATCH_CLUSTERS`] clusters each, inside the view's data
/// extents (holes are never read).
fn cluster_runs(src: &dyn DiskView) -> Result<Vec<(u64, u64)>> {
    let mut runs = Vec::new();
    let mut next = 0u64;
    for r in clamped_extents(src).context("mapping the disk's data")? {
        let end = r.end.div_ceil(CLUSTER_SIZE);
        let mut c = (r.start / CLUSTER_SIZE).max(next);
        while c < end {
            let n = READ_BATCH_CLUSTERS.min(end - c);
            runs.push((c, n));
            c += n;
        }
        next = next.max(end);
    }
    Ok(runs)
}

fn write_compressed(
    src: &dyn DiskView,
    file: &File,
    level: u32,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Qcow2Stats> {
    let virtual_size = virtual_size(src)?;
    let mut w = BufWriter::with_capacity(WRITE_BUFFER_BYTES, file);
    w.write_all(&[0u8; CLUSTER_SIZE as usize])
        .context("writing qcow2 header cluster")?;
    // Next free byte of the data area, its users per host cluster, and
    // the L2 entry of each stored guest cluster.
    let mut pos = CLUSTER_SIZE;
    let mut users: Vec<u16> = Vec::new();
    let mut entries: Vec<(u64, u64)> = Vec::new();
    let add_user = |users: &mut Vec<u16>, from: u64, to: u64| {
        for c in from / CLUSTER_SIZE..=(to - 1) / CLUSTER_SIZE {
            let i = (c - 1) as usize;
            if users.len() <= i {
                users.resize(i + 1, 0);
            }
            users[i] += 1;
        }
    };
    // The runs are read and deflated by the encoders' one ordered worker
    // pool (io::ordered), and stored here in guest order.
    let runs = cluster_runs(src)?;
    let workers = crate::util::threads(threads);
    let pool = BufPool::new(
        (READ_BATCH_CLUSTERS * CLUSTER_SIZE) as usize,
        workers * 2 + 2,
    );
    crate::io::ordered::run(
        "qcow2",
        workers,
        runs.len(),
        &pool,
        || Ok(()),
        |_, k, mut buf| {
            let (c, n) = runs[k];
            let pos = c * CLUSTER_SIZE;
            // The last cluster may be partial: the view reads zeros past its end.
            let chunk = &mut buf[..(n * CLUSTER_SIZE) as usize];
            let read = src
                .read_at(chunk, pos)
                .with_context(|| format!("reading the disk at offset {pos}"));
            let mut out = Vec::new();
            if read.is_ok() {
                for (i, cluster) in chunk.chunks_exact(CLUSTER_SIZE as usize).enumerate() {
                    if is_zero(cluster) {
                        continue;
                    }
                    let z = deflate_cluster(level, cluster)?;
                    out.push((
                        c + i as u64,
                        if z.is_empty() || z.len() as u64 >= CLUSTER_SIZE {
                            Stored::Plain(cluster.to_vec())
                        } else {
                            Stored::Deflated(z)
                        },
                    ));
                }
            }
            pool.put(buf);
            read.map(|_| out)
        },
        |ordered| -> Result<()> {
            for &(c, n) in &runs {
                crate::util::cancel::check()?;
                for (guest, stored) in ordered.next()? {
                    match stored {
                        Stored::Plain(data) => {
                            let at = pos.next_multiple_of(CLUSTER_SIZE);
                            w.write_all(&vec![0u8; (at - pos) as usize])?;
                            w.write_all(&data)?;
                            add_user(&mut users, at, at + CLUSTER_SIZE);
                            entries.push((guest, at | ENTRY_COPIED));
                            pos = at + CLUSTER_SIZE;
                        }
                        Stored::Deflated(z) => {
                            let len = z.len() as u64;
                            let sectors = (pos + len - 1) / SECTOR_SIZE - pos / SECTOR_SIZE;
                            w.write_all(&z)?;
                            // QEMU counts a compressed cluster as a user of
                            // every host cluster its sectors touch.
                            add_user(&mut users, pos, pos + len);
                            entries.push((
                                guest,
                                ENTRY_COMPRESSED | (sectors << COMPRESSED_SHIFT) | pos,
                            ));
                            pos += len;
                        }
                    }
                }
                progress(((c + n) * CLUSTER_SIZE).min(virtual_size));
            }
            Ok(())
        },
    )
    .context("writing qcow2 data")?;
    // Sectors of the last compressed data are read whole: end on a cluster.
    let end = pos.next_multiple_of(CLUSTER_SIZE);
    w.write_all(&vec![0u8; (end - pos) as usize])
        .context("writing qcow2 data")?;
    let data_clusters = end / CLUSTER_SIZE - 1;
    users.resize(data_clusters as usize, 0);
    let l2_tables = count_l2_tables(&entries);
    let layout = Layout::new(virtual_size, 1, data_clusters, l2_tables);
    write_metadata(&mut w, &layout, &entries, &|c| users[(c - 1) as usize])?;
    w.seek(SeekFrom::Start(0))
        .context("seeking back to the qcow2 header")?;
    w.write_all(&header(virtual_size, &layout))
        .context("writing qcow2 header")?;
    w.flush().context("flushing qcow2 output")?;
    progress(virtual_size);
    Ok(Qcow2Stats {
        virtual_size,
        data_clusters: entries.len() as u64,
        file_size: layout.total_clusters * CLUSTER_SIZE,
        shared: None,
    })
}

/// Call `f(cluster, bytes)` for every non-zero guest cluster within the
/// view's data extents for which `pick(cluster)` holds, in guest order.
/// Clusters not picked are never read.
fn for_each_cluster(
    src: &dyn DiskView,
    pick: &dyn Fn(u64) -> bool,
    f: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut buf = vec![0u8; (READ_BATCH_CLUSTERS * CLUSTER_SIZE) as usize];
    // First guest cluster not yet looked at.
    let mut next = 0u64;
    for r in clamped_extents(src).context("mapping the disk's data")? {
        let end = r.end.div_ceil(CLUSTER_SIZE);
        let mut c = (r.start / CLUSTER_SIZE).max(next);
        while c < end {
            crate::util::cancel::check()?;
            if !pick(c) {
                c += 1;
                continue;
            }
            // A run of picked clusters, at most one batch long.
            let mut n = 1;
            while n < READ_BATCH_CLUSTERS && c + n < end && pick(c + n) {
                n += 1;
            }
            let pos = c * CLUSTER_SIZE;
            // The last cluster may be partial: the view reads zeros past its end.
            let chunk = &mut buf[..(n * CLUSTER_SIZE) as usize];
            src.read_at(chunk, pos)
                .with_context(|| format!("reading the disk at offset {pos}"))?;
            for (i, cluster) in chunk.chunks_exact(CLUSTER_SIZE as usize).enumerate() {
                if !is_zero(cluster) {
                    f(c + i as u64, cluster)?;
                }
            }
            c += n;
        }
        next = next.max(end);
    }
    Ok(())
}

/// Data clusters as stored, in host order: the shared blocks, then the
/// other clusters.
struct DataClusters {
    /// Per shared block: its first guest cluster and its source.
    blocks: Vec<(u64, (u64, u64))>,
    /// Guest clusters per block.
    per_block: u64,
    own: Vec<u64>,
}

impl DataClusters {
    /// `(guest cluster, host cluster)` of every data cluster, sorted by
    /// guest; data starts at host cluster `data_first`.
    fn map(&self, data_first: u64) -> Vec<(u64, u64)> {
        let k = self.per_block;
        let first_own = data_first + self.blocks.len() as u64 * k;
        let mut v: Vec<(u64, u64)> = (self.blocks.iter().enumerate())
            .flat_map(|(i, &(g, _))| (0..k).map(move |j| (g + j, data_first + i as u64 * k + j)))
            .chain((self.own.iter().enumerate()).map(|(i, &g)| (g, first_own + i as u64)))
            .collect();
        v.sort_unstable();
        v
    }
}

/// Stream the data to `w` (at the first data cluster): first every whole
/// `align`-sized guest block the view declares shared and that holds data,
/// whole; then every other non-zero guest cluster within the view's data
/// extents, each group in guest order.
fn copy_data_clusters<W: Write>(src: &dyn DiskView, w: &mut W, align: u64) -> Result<DataClusters> {
    let len = src.len();
    let per_block = align / CLUSTER_SIZE;
    let mut blocks: Vec<(u64, (u64, u64))> = Vec::new();
    let mut buf = vec![0u8; align as usize];
    // First guest block not yet looked at.
    let mut next = 0u64;
    for r in clamped_extents(src).context("mapping the disk's data")? {
        let end = r.end.div_ceil(align).min(len / align);
        for b in (r.start / align).max(next)..end {
            crate::util::cancel::check()?;
            let pos = b * align;
            let Some(source) = src.shared_source(pos..pos + align) else {
                continue;
            };
            src.read_at(&mut buf, pos)
                .with_context(|| format!("reading the disk at offset {pos}"))?;
            if is_zero(&buf) {
                continue;
            }
            w.write_all(&buf)
                .with_context(|| format!("writing qcow2 data for guest offset {pos}"))?;
            blocks.push((b * per_block, source));
        }
        next = next.max(end);
    }
    let stored = |c: u64| {
        blocks
            .binary_search_by_key(&(c - c % per_block), |b| b.0)
            .is_ok()
    };
    let mut own = Vec::new();
    for_each_cluster(src, &|c| !stored(c), &mut |c, bytes| {
        w.write_all(bytes)
            .with_context(|| format!("writing qcow2 data cluster for guest cluster {c}"))?;
        own.push(c);
        Ok(())
    })?;
    Ok(DataClusters {
        blocks,
        per_block,
        own,
    })
}

/// Number of distinct L2 tables needed to map the (sorted) guest clusters.
fn count_l2_tables(map: &[(u64, u64)]) -> u64 {
    let mut n = 0;
    let mut last = None;
    for &(g, _) in map {
        let l1 = g / L2_ENTRIES;
        if last != Some(l1) {
            n += 1;
            last = Some(l1);
        }
    }
    n
}

/// Write L2 tables, L1 table, refcount table and refcount blocks, in that
/// order, starting right after the data clusters. `entries`: (guest
/// cluster, L2 entry), sorted by guest cluster; `data_refcount`: the
/// refcount of each host cluster of the data area (the header and the
/// metadata have 1, the unused clusters before the data 0).
fn write_metadata<W: Write>(
    w: &mut W,
    layout: &Layout,
    map: &[(u64, u64)],
    data_refcount: &dyn Fn(u64) -> u16,
) -> Result<()> {
    let mut table = vec![0u8; CLUSTER_SIZE as usize];
    let set = |table: &mut [u8], index: u64, value: u64| {
        let i = (index * TABLE_ENTRY_BYTES) as usize;
        table[i..i + TABLE_ENTRY_BYTES as usize].copy_from_slice(&value.to_be_bytes());
    };

    // L2 tables, from the (guest, host) cluster map.
    let mut l1 = vec![0u64; layout.l1_entries as usize];
    let mut l2_host = layout.l2_first;
    let mut k = 0usize;
    while k < map.len() {
        let l1_index = map[k].0 / L2_ENTRIES;
        table.fill(0);
        while k < map.len() && map[k].0 / L2_ENTRIES == l1_index {
            let (guest, entry) = map[k];
            set(&mut table, guest % L2_ENTRIES, entry);
            k += 1;
        }
        w.write_all(&table)
            .with_context(|| format!("writing qcow2 L2 table {l1_index}"))?;
        l1[l1_index as usize] = (l2_host * CLUSTER_SIZE) | ENTRY_COPIED;
        l2_host += 1;
    }
    debug_assert_eq!(l2_host, layout.l1_first);

    // L1 table, padded to whole clusters.
    let mut l1_bytes = vec![0u8; (layout.l1_clusters * CLUSTER_SIZE) as usize];
    for (i, e) in l1.iter().enumerate() {
        set(&mut l1_bytes, i as u64, *e);
    }
    w.write_all(&l1_bytes).context("writing qcow2 L1 table")?;

    // Refcount table: one entry per refcount block.
    for t in 0..layout.refcount_table_clusters {
        table.fill(0);
        let first_block = t * REFCOUNT_TABLE_ENTRIES_PER_CLUSTER;
        let last_block =
            (first_block + REFCOUNT_TABLE_ENTRIES_PER_CLUSTER).min(layout.refcount_blocks);
        for b in first_block..last_block {
            let off = (layout.refcount_block_first + b) * CLUSTER_SIZE;
            set(&mut table, b - first_block, off);
        }
        w.write_all(&table)
            .context("writing qcow2 refcount table")?;
    }

    // Refcount blocks: clusters 0..total_clusters are all used exactly
    // once, but for the unused ones between the header and the data and
    // the data clusters, which count their users.
    for b in 0..layout.refcount_blocks {
        table.fill(0);
        let first = b * REFCOUNT_BLOCK_ENTRIES;
        let used = layout
            .total_clusters
            .saturating_sub(first)
            .min(REFCOUNT_BLOCK_ENTRIES);
        for (i, e) in (table.chunks_exact_mut(REFCOUNT_BYTES as usize))
            .take(used as usize)
            .enumerate()
        {
            let c = first + i as u64;
            let n = if c == 0 || c >= layout.l2_first {
                1
            } else if c >= layout.data_first {
                data_refcount(c)
            } else {
                0
            };
            e.copy_from_slice(&n.to_be_bytes());
        }
        w.write_all(&table)
            .with_context(|| format!("writing qcow2 refcount block {b}"))?;
    }
    Ok(())
}

/// The header (version 3, 104 bytes) followed by the end-of-extensions marker.
fn header(virtual_size: u64, layout: &Layout) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_LENGTH as usize + 8);
    h.extend_from_slice(&QCOW2_MAGIC.to_be_bytes()); // 0: magic
    h.extend_from_slice(&QCOW2_VERSION.to_be_bytes()); // 4: version
    h.extend_from_slice(&0u64.to_be_bytes()); // 8: backing_file_offset
    h.extend_from_slice(&0u32.to_be_bytes()); // 16: backing_file_size
    h.extend_from_slice(&CLUSTER_BITS.to_be_bytes()); // 20: cluster_bits
    h.extend_from_slice(&virtual_size.to_be_bytes()); // 24: size
    h.extend_from_slice(&CRYPT_NONE.to_be_bytes()); // 32: crypt_method
    h.extend_from_slice(&(layout.l1_entries as u32).to_be_bytes()); // 36: l1_size
    h.extend_from_slice(&(layout.l1_first * CLUSTER_SIZE).to_be_bytes()); // 40: l1_table_offset
    h.extend_from_slice(&(layout.refcount_table_first * CLUSTER_SIZE).to_be_bytes()); // 48: refcount_table_offset
    h.extend_from_slice(&(layout.refcount_table_clusters as u32).to_be_bytes()); // 56: refcount_table_clusters
    h.extend_from_slice(&0u32.to_be_bytes()); // 60: nb_snapshots
    h.extend_from_slice(&0u64.to_be_bytes()); // 64: snapshots_offset
    h.extend_from_slice(&0u64.to_be_bytes()); // 72: incompatible_features
    h.extend_from_slice(&0u64.to_be_bytes()); // 80: compatible_features
    h.extend_from_slice(&0u64.to_be_bytes()); // 88: autoclear_features
    h.extend_from_slice(&REFCOUNT_ORDER.to_be_bytes()); // 96: refcount_order
    h.extend_from_slice(&HEADER_LENGTH.to_be_bytes()); // 100: header_length
    debug_assert_eq!(h.len(), HEADER_LENGTH as usize);
    h.extend_from_slice(&HEADER_EXT_END.to_be_bytes()); // extension type: end
    h.extend_from_slice(&0u32.to_be_bytes()); // extension length
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::sparse::test_support::Rng;
    use crate::util::cmd;
    use serde_json::Value;
    use std::os::unix::fs::FileExt;
    use std::path::PathBuf;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// A region of the raw test image: random bytes, or written zeros
    /// (allocated on disk but all zero).
    #[derive(Clone, Copy)]
    enum Fill {
        Random,
        Zeros,
    }

    /// Create a sparse raw image of `size` bytes with the given regions.
    fn make_raw(dir: &Path, size: u64, regions: &[(u64, u64, Fill)]) -> PathBuf {
        let path = dir.join("disk.raw");
        let f = File::create(&path).unwrap();
        f.set_len(size).unwrap();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut buf = vec![0u8; (4 * MIB) as usize];
        for &(off, len, fill) in regions {
            let mut done = 0;
            while done < len {
                let n = (len - done).min(buf.len() as u64) as usize;
                match fill {
                    Fill::Random => rng.fill(&mut buf[..n]),
                    Fill::Zeros => buf[..n].fill(0),
                }
                f.write_all_at(&buf[..n], off + done).unwrap();
                done += n as u64;
            }
        }
        f.sync_all().unwrap();
        path
    }

    /// Distinct guest clusters touched by the random regions.
    fn clusters_touched(regions: &[(u64, u64, Fill)]) -> u64 {
        let mut set = std::collections::BTreeSet::new();
        for &(off, len, fill) in regions {
            if let Fill::Random = fill {
                set.extend(off / CLUSTER_SIZE..(off + len).div_ceil(CLUSTER_SIZE));
            }
        }
        set.len() as u64
    }

    fn qemu_img_json(args: &[&str]) -> Value {
        let out = cmd::run(&mut cmd::new("qemu-img", args)).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    /// Verify `qcow2` with qemu-img: check (no errors, no leaks), info, and a
    /// byte-for-byte compare with the raw source.
    fn verify(raw: &Path, qcow2: &Path, virtual_size: u64, stats: &Qcow2Stats) {
        let (raw, qcow2) = (raw.to_str().unwrap(), qcow2.to_str().unwrap());
        // Exit 0 from `qemu-img check` means no corruption and no leaks
        // (2 = corruptions, 3 = leaks); cmd::run fails on non-zero.
        let check = qemu_img_json(&["check", "-f", "qcow2", "--output=json", qcow2]);
        assert_eq!(check["check-errors"], 0, "{check}");
        assert!(check.get("corruptions").map_or(true, |v| v == 0), "{check}");
        assert!(check.get("leaks").map_or(true, |v| v == 0), "{check}");
        assert_eq!(check["image-end-offset"], stats.file_size, "{check}");

        let info = qemu_img_json(&["info", "--output=json", "-f", "qcow2", qcow2]);
        assert_eq!(info["format"], "qcow2", "{info}");
        assert_eq!(info["virtual-size"], virtual_size, "{info}");
        assert_eq!(info["cluster-size"], CLUSTER_SIZE, "{info}");
        assert_eq!(info["format-specific"]["data"]["compat"], "1.1", "{info}");
        assert_eq!(
            info["format-specific"]["data"]["refcount-bits"], 16,
            "{info}"
        );
        assert!(info.get("backing-filename").is_none(), "{info}");
        assert!(info["actual-size"].as_u64().is_some(), "{info}");

        cmd::run(&mut cmd::new(
            "qemu-img",
            ["compare", "-f", "raw", "-F", "qcow2", raw, qcow2],
        ))
        .unwrap();
        assert_eq!(
            std::fs::metadata(qcow2).unwrap().len(),
            stats.file_size,
            "file size"
        );
    }

    /// 300 MiB + 4 KiB: not a cluster multiple; data at aligned and
    /// unaligned offsets, in the last partial cluster, and one written but
    /// all-zero region.
    fn small_regions() -> (u64, Vec<(u64, u64, Fill)>) {
        let size = 300 * MIB + 4096;
        let regions = vec![
            (0, MIB, Fill::Random),
            (5 * MIB + 123, 700_001, Fill::Random),
            (40 * MIB + 65_535, 2, Fill::Random),
            (64 * MIB, 8 * MIB, Fill::Zeros),
            (100 * MIB - 4096, 3 * MIB + 17, Fill::Random),
            (299 * MIB + 7, 4 * MIB / 4, Fill::Random),
            (size - 1000, 1000, Fill::Random),
        ];
        (size, regions)
    }

    /// nutanix's qcow2: clusters deflated inside the file, read back by
    /// qemu-img (check: no corruption, no leaks; compare: same bytes), and
    /// `qemu-img map` reports the clusters compressed.
    #[test]
    fn compressed_image_is_valid_identical_and_compressed() {
        let dir = tempfile::tempdir().unwrap();
        let (size, mut regions) = small_regions();
        // Compressible data too (text-like), besides random bytes.
        regions.push((200 * MIB, 2 * MIB, Fill::Zeros));
        let raw = make_raw(dir.path(), size, &regions);
        {
            let f = std::fs::OpenOptions::new().write(true).open(&raw).unwrap();
            let text = b"CoreOS compressible line of text\n".repeat(64 << 10);
            f.write_all_at(&text, 150 * MIB + 100).unwrap();
        }
        let out = dir.path().join("c.qcow2");
        let view = FileView::open(&raw).unwrap();
        let stats = write_qcow2_compressed_file(&view, &out, 6, 2, &|_| {}).unwrap();
        let (r, q) = (raw.to_str().unwrap(), out.to_str().unwrap());
        let check = qemu_img_json(&["check", "-f", "qcow2", "--output=json", q]);
        assert_eq!(check["check-errors"], 0, "{check}");
        assert!(check.get("corruptions").map_or(true, |v| v == 0), "{check}");
        assert!(check.get("leaks").map_or(true, |v| v == 0), "{check}");
        assert!(
            check["compressed-clusters"].as_u64().unwrap() > 0,
            "{check}"
        );
        cmd::run(&mut cmd::new(
            "qemu-img",
            ["compare", "-f", "raw", "-F", "qcow2", r, q],
        ))
        .unwrap();
        let info = qemu_img_json(&["info", "--output=json", "-f", "qcow2", q]);
        assert_eq!(info["virtual-size"], stats.virtual_size, "{info}");
        assert_eq!(std::fs::metadata(&out).unwrap().len(), stats.file_size);
        // The text compresses: the file is well under the data it holds.
        let plain = dir.path().join("p.qcow2");
        let p = write_qcow2_file(&view, &plain, CLUSTER_SIZE).unwrap();
        assert!(stats.file_size < p.file_size, "{stats:?} vs {p:?}");
    }

    #[test]
    fn small_sparse_image_is_valid_and_identical() {
        let dir = tempfile::tempdir().unwrap();
        let (size, regions) = small_regions();
        let raw = make_raw(dir.path(), size, &regions);
        let qcow2 = dir.path().join("disk.qcow2");
        let stats = convert_file(&raw, &qcow2).unwrap();
        assert_eq!(stats.virtual_size, size);
        verify(&raw, &qcow2, size, &stats);
    }

    #[test]
    fn holes_and_zero_clusters_stay_unallocated() {
        let dir = tempfile::tempdir().unwrap();
        let (size, regions) = small_regions();
        let raw = make_raw(dir.path(), size, &regions);
        // The zero region really is allocated in the source file.
        let blocks = std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&raw).unwrap());
        let random: u64 = regions
            .iter()
            .filter(|r| matches!(r.2, Fill::Random))
            .map(|r| r.1)
            .sum();
        assert!(
            blocks * 512 >= random + 8 * MIB,
            "zero region not allocated"
        );

        let qcow2 = dir.path().join("disk.qcow2");
        let stats = write_qcow2_file(&FileView::open(&raw).unwrap(), &qcow2, CLUSTER_SIZE).unwrap();
        assert_eq!(stats.data_clusters, clusters_touched(&regions));
        let data_bytes = stats.data_clusters * CLUSTER_SIZE;
        assert!(
            stats.file_size <= data_bytes + 8 * CLUSTER_SIZE,
            "{stats:?} for {data_bytes} bytes of data"
        );
        verify(&raw, &qcow2, size, &stats);

        // qemu's own view: the zero region and the holes hold no data.
        let map = qemu_img_json(&[
            "map",
            "--output=json",
            "-f",
            "qcow2",
            qcow2.to_str().unwrap(),
        ]);
        let data_at = |pos: u64| -> bool {
            let e = map
                .as_array()
                .unwrap()
                .iter()
                .find(|e| {
                    let s = e["start"].as_u64().unwrap();
                    s <= pos && pos < s + e["length"].as_u64().unwrap()
                })
                .unwrap();
            e["data"].as_bool().unwrap()
        };
        assert!(!data_at(64 * MIB));
        assert!(!data_at(72 * MIB - 1));
        assert!(!data_at(200 * MIB));
        assert!(data_at(0));
        assert!(data_at(size - 1));
    }

    #[test]
    fn empty_disk_has_no_data_clusters() {
        let dir = tempfile::tempdir().unwrap();
        let size = 64 * MIB;
        let raw = make_raw(dir.path(), size, &[]);
        let qcow2 = dir.path().join("disk.qcow2");
        let stats = convert_file(&raw, &qcow2).unwrap();
        assert_eq!(stats.data_clusters, 0);
        verify(&raw, &qcow2, size, &stats);
    }

    /// 20 GiB guest: 40 L1 entries, several L2 tables, and more than 2 GiB
    /// of data so the refcounts span two refcount blocks.
    #[test]
    fn large_disk_needs_several_l2_tables_and_refcount_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let size = 20 * GIB;
        let regions = vec![
            (0, 3 * MIB + 5, Fill::Random),
            (GIB - 100, 2 * GIB + 64 * MIB, Fill::Random),
            (10 * GIB + 12345, MIB, Fill::Random),
            (size - 5 * MIB - 3, 5 * MIB + 3, Fill::Random),
        ];
        let raw = make_raw(dir.path(), size, &regions);
        let qcow2 = dir.path().join("disk.qcow2");
        let stats = convert_file(&raw, &qcow2).unwrap();
        assert_eq!(stats.data_clusters, clusters_touched(&regions));
        let layout = Layout::new(size, 1, stats.data_clusters, 0);
        assert!(layout.refcount_blocks >= 2, "{layout:?}");
        assert!(layout.l1_entries == 40, "{layout:?}");
        verify(&raw, &qcow2, size, &stats);
    }

    #[test]
    fn layout_counts_its_own_refcount_structures() {
        // Data that exactly fills one refcount block forces a second block.
        let l = Layout::new(GIB, 1, REFCOUNT_BLOCK_ENTRIES - 4, 2);
        assert_eq!(l.total_clusters, REFCOUNT_BLOCK_ENTRIES + 3);
        assert_eq!(l.refcount_blocks, 2);
        assert_eq!(l.refcount_table_clusters, 1);
        assert_eq!(l.l1_entries, 2);
        let empty = Layout::new(0, 1, 0, 0);
        assert_eq!(empty.total_clusters, 3);
    }

    /// A view of any length with no data, for size checks.
    struct Empty(u64);
    impl DiskView for Empty {
        fn len(&self) -> u64 {
            self.0
        }
        fn read_at(&self, buf: &mut [u8], _offset: u64) -> Result<()> {
            buf.fill(0);
            Ok(())
        }
        fn data_extents(&self) -> Result<Vec<std::ops::Range<u64>>> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn rejects_too_large_disks() {
        let mut out = std::io::Cursor::new(Vec::new());
        let err = write_qcow2(
            &Empty(ENTRY_OFFSET_MASK + SECTOR_SIZE),
            &mut out,
            CLUSTER_SIZE,
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("too large"), "{err:#}");
        assert!(out.get_ref().is_empty(), "nothing written");
    }

    /// A length that is not a sector multiple is rounded up, like QEMU
    /// does; the padding reads as zeros and the data up to it is intact.
    #[test]
    fn unaligned_length_rounds_up_to_a_sector() {
        let dir = tempfile::tempdir().unwrap();
        let size = 3 * MIB + 1000;
        let raw = make_raw(
            dir.path(),
            size,
            &[(0, 4096, Fill::Random), (size - 10, 10, Fill::Random)],
        );
        let qcow2 = dir.path().join("disk.qcow2");
        let stats = write_qcow2_file(&FileView::open(&raw).unwrap(), &qcow2, CLUSTER_SIZE).unwrap();
        assert_eq!(stats.virtual_size, 3 * MIB + 1024);
        assert_eq!(stats.data_clusters, 2);
        // The same content, padded by hand, must compare equal.
        let padded = dir.path().join("padded.raw");
        std::fs::copy(&raw, &padded).unwrap();
        File::options()
            .write(true)
            .open(&padded)
            .unwrap()
            .set_len(3 * MIB + 1024)
            .unwrap();
        verify(&padded, &qcow2, 3 * MIB + 1024, &stats);
    }

    /// A base disk with a patch: the qcow2 holds the patched content and
    /// compares equal to the view written out as a sparse raw file.
    #[test]
    fn composite_view_is_written_with_its_patch() {
        use crate::io::sparse::{test_support, write_sparse};
        use crate::io::view::{Composite, Patch};
        let dir = tempfile::tempdir().unwrap();
        let fx = test_support::fixture(dir.path(), 24 * MIB);
        let base = FileView::open(&fx.base).unwrap();
        let patch = Patch::from_file(&fx.patch, 7 * MIB, MIB).unwrap();
        let c = Composite::new(&base, 64 * MIB, vec![patch]).unwrap();
        let qcow2 = dir.path().join("c.qcow2");
        let stats = write_qcow2_file(&c, &qcow2, CLUSTER_SIZE).unwrap();
        let raw = dir.path().join("c.raw");
        write_sparse(&c, &raw, &|_| {}).unwrap();
        verify(&raw, &qcow2, 64 * MIB, &stats);
        // And it differs from the unpatched base, so the compare can fail.
        let plain = dir.path().join("plain.qcow2");
        write_qcow2_file(
            &Composite::new(&base, 64 * MIB, vec![]).unwrap(),
            &plain,
            CLUSTER_SIZE,
        )
        .unwrap();
        let st = std::process::Command::new("qemu-img")
            .args(["compare", "-q", "-f", "raw", "-F", "qcow2"])
            .arg(&raw)
            .arg(&plain)
            .status()
            .unwrap();
        assert_eq!(st.code(), Some(1), "compare must see the patch");
    }

    /// Shared blocks: whole aligned guest blocks, at aligned file offsets,
    /// the same in every image over one base; the bytes of each are the
    /// raw disk's at its source offset; the rest of the image is its own.
    #[test]
    fn shared_blocks_are_the_raw_disks_chunks_at_aligned_offsets() {
        use crate::io::sparse::{test_support, write_sparse};
        use crate::io::view::{Composite, Patch};
        let dir = tempfile::tempdir().unwrap();
        let fx = test_support::fixture(dir.path(), 24 * MIB);
        // A second patch at the same place with more data in it: its image
        // has more clusters of its own, but the shared ones do not move.
        let other = dir.path().join("other.bin");
        std::fs::write(&other, vec![0x5a; MIB as usize]).unwrap();
        let base = FileView::open(&fx.base).unwrap();
        let align = MIB;
        let mut images = Vec::new();
        for (i, p) in [&fx.patch, &other].into_iter().enumerate() {
            let patch = Patch::from_file(p, 2 * MIB + 4096, MIB).unwrap();
            let c = Composite::new(&base, 64 * MIB, vec![patch])
                .unwrap()
                .shared(1);
            let qcow2 = dir.path().join(format!("{i}.qcow2"));
            let stats = write_qcow2_file(&c, &qcow2, align).unwrap();
            let raw = dir.path().join(format!("{i}.raw"));
            write_sparse(&c, &raw, &|_| {}).unwrap();
            verify(&raw, &qcow2, 64 * MIB, &stats);
            let (q, r) = (std::fs::read(&qcow2).unwrap(), std::fs::read(&raw).unwrap());
            let sh = stats.shared.clone().unwrap();
            assert_eq!((sh.start, sh.align), (align, align));
            for (k, &(tag, src)) in sh.blocks.iter().enumerate() {
                assert_eq!(tag, 1);
                assert_eq!(src % align, 0);
                // Never a block under the patch.
                let patched = 2 * MIB + 4096..3 * MIB + 4096;
                assert!(src + align <= patched.start || src >= patched.end, "{src}");
                let at = (sh.start + k as u64 * align) as usize;
                let src = src as usize;
                assert!(
                    q[at..at + align as usize] == r[src..src + align as usize],
                    "block {k} holds the raw disk's bytes at {src}"
                );
            }
            images.push((q, stats));
        }
        let (a, sa) = &images[0];
        let (b, sb) = &images[1];
        assert_ne!(sa.data_clusters, sb.data_clusters);
        let (ra, rb) = (sa.shared.clone().unwrap(), sb.shared.clone().unwrap());
        assert_eq!(ra, rb, "same shared blocks");
        assert!(ra.blocks.len() >= 4, "{ra:?}");
        let end = (ra.start + ra.blocks.len() as u64 * ra.align) as usize;
        assert!(a[ra.start as usize..end] == b[ra.start as usize..end]);
        assert!(a[end..] != b[end..], "the rest differs");
        // The unused clusters between the header and the blocks are a hole.
        let qa = dir.path().join("0.qcow2");
        let ext =
            crate::io::view::file_extents(&File::open(&qa).unwrap(), 0..a.len() as u64).unwrap();
        assert!(
            ext.iter()
                .all(|r| r.end <= CLUSTER_SIZE || r.start >= align),
            "{ext:?}"
        );
        // A view that declares nothing shared has no shared blocks, and no
        // padding.
        let plain = Composite::new(&base, 64 * MIB, vec![]).unwrap();
        let p = dir.path().join("plain.qcow2");
        let stats = write_qcow2_file(&plain, &p, align).unwrap();
        assert_eq!(stats.shared, None);
        let raw = dir.path().join("plain.raw");
        write_sparse(&plain, &raw, &|_| {}).unwrap();
        verify(&raw, &p, 64 * MIB, &stats);
        // A misaligned block size is refused.
        let err = write_qcow2_file(&plain, &p, CLUSTER_SIZE + 512).unwrap_err();
        assert!(
            format!("{err:#}").contains("multiple of the cluster size"),
            "{err:#}"
        );
    }

    /// The point of shared blocks: compressing the qcow2 reuses the raw
    /// disk's compressed chunks, and the output is the same as without
    /// the cache.
    #[test]
    fn compressing_the_qcow2_reuses_the_raw_disks_chunks() {
        use crate::io::compress::{compress_view, ChunkCache, CompressOpts, Compressor};
        use crate::io::sparse::test_support;
        use crate::io::view::{Composite, Patch, Remapped};
        let dir = tempfile::tempdir().unwrap();
        let fx = test_support::fixture(dir.path(), 24 * MIB);
        let base = FileView::open(&fx.base).unwrap();
        let patch = Patch::from_file(&fx.patch, 2 * MIB + 4096, MIB).unwrap();
        let c = Composite::new(&base, 64 * MIB, vec![patch])
            .unwrap()
            .shared(9);
        let cache = ChunkCache::new(&dir.path().join("chunks")).unwrap();
        let gz = Compressor::Gzip;
        let plain_opts = CompressOpts::new(gz, 6, 2);
        let opts = plain_opts.with_cache(Some(&cache));
        compress_view(&c, &dir.path().join("raw.gz"), &opts, &|_| {}).unwrap();
        assert_eq!(cache.reused().0, 0);
        let q = dir.path().join("disk.qcow2");
        let stats = write_qcow2_file(&c, &q, gz.chunk_size() as u64).unwrap();
        let sh = stats.shared.clone().unwrap();
        // 4-8 and 8-12 MiB hold data, 12-16 MiB only zeros, 20-24 MiB the
        // base's last bytes; 0-4 MiB is patched.
        let srcs: Vec<u64> = sh.blocks.iter().map(|b| b.1 / MIB).collect();
        assert_eq!(srcs, [4, 8, 20]);
        let ev = FileView::open(&q).unwrap();
        let r = Remapped {
            inner: &ev,
            start: sh.start,
            align: sh.align,
            blocks: &sh.blocks,
        };
        let cached = dir.path().join("cached.qcow2.gz");
        let a = compress_view(&r, &cached, &opts, &|_| {}).unwrap();
        assert_eq!(cache.reused(), (3, 12 * MIB), "every shared block reused");
        let plain = dir.path().join("plain.qcow2.gz");
        let b = compress_view(&ev, &plain, &plain_opts, &|_| {}).unwrap();
        assert_eq!(a, b, "the cache changes nothing in the output");
        cmd::run(&mut cmd::new("gzip", ["-t".as_ref(), cached.as_os_str()])).unwrap();
        let back = dir.path().join("back.qcow2");
        cmd::run(cmd::new("bash", ["-c", "gzip -dc \"$0\" > \"$1\""]).args([&cached, &back]))
            .unwrap();
        let raw = dir.path().join("disk.raw");
        crate::io::sparse::write_sparse(&c, &raw, &|_| {}).unwrap();
        verify(&raw, &back, 64 * MIB, &stats);
    }
}
