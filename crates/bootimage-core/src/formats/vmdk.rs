//! Streaming VMDK writer, subformat `streamOptimized`: the disk format cosa
//! publishes for AWS (`qemu-img convert -O vmdk -o
//! adapter_type=lsilogic,subformat=streamOptimized,compat6`) and puts inside
//! the VMware OVA.
//!
//! Format facts are from VMware's "Virtual Disk Format" technical notes
//! (1.1 and 5.0: sparse extent header, stream-optimized compressed sparse
//! extents) and were cross-checked against QEMU's reader (`block/vmdk.c`)
//! and against files written by `qemu-img`.
//!
//! Layout of the output, in 512-byte sectors:
//!
//! ```text
//! 0        sparse extent header, gdOffset = GD_AT_END
//! 1..21    embedded descriptor (20 sectors reserved)
//! 21..128  zero padding (the header's overHead is 128, as qemu-img writes)
//! 128..    for every 32 MiB of guest disk (one grain table's span), in order:
//!            its non-zero grains: [lba u64][size u32][zlib data], padded
//!            to a sector; then a GT marker and the grain table (4 sectors)
//!          GD marker, grain directory
//!          footer marker, footer (the header again with the real gdOffset)
//!          end-of-stream marker
//! ```
//!
//! - Only grains (64 KiB) holding a non-zero byte are stored; all others
//!   stay unallocated (grain table entry 0) and read as zeros. Grains
//!   outside the view's data extents are never read.
//! - Every grain table is written, even an empty one, so every grain
//!   directory entry points at a real table: readers need not know what a
//!   zero directory entry would mean.
//! - Grains are compressed in parallel; the output is written in guest
//!   order and is identical for any thread count.
//! - Memory is bounded: `2 * threads + 2` chunk buffers of about 2 MiB, the
//!   grain table being filled (2 KiB) and the grain directory (4 bytes per
//!   32 MiB of guest disk).
//! - The descriptor's CID is derived from the grain tables and directory
//!   (unless given), so the same input gives the same file; it is written
//!   last, with one seek back to sector 1.
use crate::io::buffers::{is_zero, BufPool};
use crate::io::compress::{CacheKey, ChunkCache, Codec};
use crate::io::deflate::Deflater;
use crate::io::sparse::clamped_extents;
use crate::io::view::DiskView;
use anyhow::{anyhow, bail, ensure, Context, Result};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// Sector size; every offset and size in the format counts these.
pub const SECTOR_SIZE: u64 = 512;
/// Grain size in sectors (header `grainSize`): 128 sectors = 64 KiB, what
/// qemu-img and VMware write for stream-optimized disks.
const GRAIN_SECTORS: u64 = 128;
/// Grain size in bytes.
pub const GRAIN_SIZE: u64 = GRAIN_SECTORS * SECTOR_SIZE;
/// Grain table entries per grain table (header `numGTEsPerGT`); VMware's
/// disk library supports only 512.
const GTES_PER_GT: u64 = 512;
/// Bytes of one grain table: 512 little-endian u32 sector numbers.
const GT_BYTES: u64 = GTES_PER_GT * 4;
/// Sectors of one grain table.
const GT_SECTORS: u64 = GT_BYTES / SECTOR_SIZE;
/// Header magic `KDMV` (VMDK4 "SPARSE_MAGICNUMBER" 0x564d444b, little-endian).
const MAGIC: &[u8; 4] = b"KDMV";
/// Header version 3: compressed grains (VMware "SPARSE_VERSION_INCOMPAT_FLAGS";
/// QEMU writes 3 for streamOptimized).
const VERSION: u32 = 3;
/// Flag bit 0: the newline-detection characters below are valid.
const FLAG_VALID_NEWLINE_TEST: u32 = 1 << 0;
/// Flag bit 16: grains are compressed.
const FLAG_COMPRESSED: u32 = 1 << 16;
/// Flag bit 17: grains and metadata carry markers (embedded LBA).
const FLAG_MARKERS: u32 = 1 << 17;
/// Bit 1 (redundant grain directory) is deliberately clear: stream-optimized
/// extents have none (VDF 5.0; recent QEMU no longer sets it, 7.2 still does).
const HEADER_FLAGS: u32 = FLAG_VALID_NEWLINE_TEST | FLAG_COMPRESSED | FLAG_MARKERS;
/// `gdOffset` of the leading header: the grain directory is at the end,
/// and the footer holds its real offset.
const GD_AT_END: u64 = u64::MAX;
/// `compressAlgorithm` 1 = deflate, stored as zlib (RFC 1950) streams.
const COMPRESSION_DEFLATE: u16 = 1;
/// The four newline-detection characters (`singleEndLineChar`,
/// `nonEndLineChar`, `doubleEndLineChar1`, `doubleEndLineChar2`): a
/// transfer that mangles line ends breaks them and the header is refused.
const NEWLINE_TEST: [u8; 4] = [b'\n', b' ', b'\r', b'\n'];
/// Sector of the embedded descriptor (header `descriptorOffset`).
const DESCRIPTOR_OFFSET: u64 = 1;
/// Sectors reserved for the descriptor (`descriptorSize`), as qemu-img and
/// VMware's open-vmdk reserve.
const DESCRIPTOR_SECTORS: u64 = 20;
/// Sectors before the first grain (`overHead`): qemu-img starts the data at
/// 64 KiB.
const OVERHEAD_SECTORS: u64 = 128;
/// Marker types, in the `type` field of a metadata marker (whose `size` is 0).
const MARKER_EOS: u32 = 0;
const MARKER_GT: u32 = 1;
const MARKER_GD: u32 = 2;
const MARKER_FOOTER: u32 = 3;
/// A grain marker: `lba` (u64, guest sector of the grain) and `size` (u32,
/// compressed bytes), followed by the compressed data.
const GRAIN_MARKER_BYTES: usize = 12;
/// The largest zlib stream for one grain ([`crate::io::deflate::bound`]).
const ZLIB_BOUND: usize = crate::io::deflate::bound(GRAIN_SIZE as usize);
/// Largest stored grain: marker, worst-case zlib stream, sector padding.
const MAX_PACKED_GRAIN: usize =
    (GRAIN_MARKER_BYTES + ZLIB_BOUND).next_multiple_of(SECTOR_SIZE as usize);
/// Grains per unit of work: 16 grains = 1 MiB read per `pread`. Divides
/// [`GTES_PER_GT`], so a chunk never spans two grain tables.
const CHUNK_GRAINS: u64 = 16;
const CHUNK_BYTES: usize = (CHUNK_GRAINS * GRAIN_SIZE) as usize;
/// Output space of one chunk.
const CHUNK_OUT: usize = CHUNK_GRAINS as usize * MAX_PACKED_GRAIN;
/// Grain table and directory entries are u32 sector numbers: the file must
/// stay below 2 TiB.
const MAX_FILE_SECTORS: u64 = u32::MAX as u64;
/// CIDs VMware reserves ("no parent" and "disk full of zeroes").
const RESERVED_CIDS: [u32; 2] = [0xffff_ffff, 0xffff_fffe];
/// `ddb.toolsVersion` written by qemu-img and open-vmdk by default: 2^31-1,
/// "guest-managed" VMware tools (open-vm-tools, which CoreOS ships).
pub const TOOLS_VERSION_GUEST_MANAGED: u32 = 2_147_483_647;
/// Output buffer of the writer.
const WRITE_BUFFER: usize = 1 << 20;

/// The disk controller named in the descriptor (`ddb.adapterType`); it
/// also sets the geometry's head count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AdapterType {
    Ide,
    BusLogic,
    /// What cosa uses for AWS and VMware.
    #[default]
    LsiLogic,
    LegacyEsx,
}

impl AdapterType {
    /// The descriptor value, as qemu-img's `adapter_type` option spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            AdapterType::Ide => "ide",
            AdapterType::BusLogic => "buslogic",
            AdapterType::LsiLogic => "lsilogic",
            AdapterType::LegacyEsx => "legacyESX",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "ide" => AdapterType::Ide,
            "buslogic" => AdapterType::BusLogic,
            "lsilogic" => AdapterType::LsiLogic,
            "legacyESX" => AdapterType::LegacyEsx,
            other => bail!("unknown VMDK adapter type {other:?}"),
        })
    }

    /// Geometry heads: 16 for IDE, 255 for SCSI (as qemu-img writes).
    fn heads(self) -> u64 {
        match self {
            AdapterType::Ide => 16,
            _ => 255,
        }
    }
}

/// Descriptor and encoding settings, and how the encoding runs. The
/// default is what cosa's
/// `-o adapter_type=lsilogic,subformat=streamOptimized,compat6` produces,
/// with one worker per CPU and no chunk cache.
#[derive(Debug, Clone)]
pub struct VmdkOptions<'a> {
    /// `ddb.adapterType`.
    pub adapter_type: AdapterType,
    /// `ddb.virtualHWVersion`: qemu-img writes "6" with `compat6`, "4"
    /// without. (VMware calls the field obsolete past ESX 3.)
    pub hw_version: u32,
    /// `ddb.toolsVersion`; see [`TOOLS_VERSION_GUEST_MANAGED`].
    pub tools_version: u32,
    /// File name in the descriptor's extent line. `None`: the output's own
    /// file name (what qemu-img writes). Set it when `out` is a temporary
    /// name, e.g. `disk.vmdk` inside an OVA.
    pub extent_name: Option<String>,
    /// zlib level 0-9; qemu-img uses zlib's default, 6.
    pub compression_level: u32,
    /// Descriptor `CID`. `None`: derived from the grain tables, so the
    /// output is reproducible.
    pub cid: Option<u32>,
    /// Workers compressing grains (0: one per CPU). The output is the same
    /// for any count.
    pub threads: usize,
    /// Reused and filled for the view's shared ranges
    /// ([`DiskView::shared_source`]); the output is byte-identical without
    /// it.
    pub cache: Option<&'a ChunkCache>,
}

impl Default for VmdkOptions<'_> {
    fn default() -> Self {
        VmdkOptions {
            adapter_type: AdapterType::LsiLogic,
            hw_version: 6,
            tools_version: TOOLS_VERSION_GUEST_MANAGED,
            extent_name: None,
            compression_level: 6,
            cid: None,
            threads: 0,
            cache: None,
        }
    }
}

/// What [`write_vmdk`] produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmdkStats {
    /// Guest disk size: the view's length rounded up to a sector (the
    /// header's capacity times 512), as qemu-img does.
    pub capacity_bytes: u64,
    /// Size of the VMDK file.
    pub file_size: u64,
    /// Grains stored (those holding a non-zero byte).
    pub grains_written: u64,
    /// Guest bytes covered by stored grains: 64 KiB per grain, the last one
    /// cut at the capacity. This is how much a thin-provisioned copy of the
    /// disk occupies, i.e. OVF `ovf:populatedSize` ("the actual used size
    /// of the disk"); it is not the (compressed) file size.
    pub populated_bytes: u64,
    /// The descriptor's CID.
    pub cid: u32,
}

/// Write `view` as a streamOptimized VMDK to `out` (created or truncated,
/// then fsynced; no temporary name: the caller renames), as `opts` say.
/// `progress` gets the number of input bytes done so far, from the calling
/// thread. A pending SIGINT/SIGTERM ([`crate::util::cancel`]) stops the run
/// with `Interrupted`.
pub fn write_vmdk(
    view: &dyn DiskView,
    out: &Path,
    opts: &VmdkOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<VmdkStats> {
    let extent_name = match &opts.extent_name {
        Some(n) => n.clone(),
        None => out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "disk.vmdk".into()),
    };
    run(
        view,
        out,
        opts,
        &extent_name,
        progress,
        &crate::util::cancel::check,
    )
    .with_context(|| format!("writing VMDK image {}", out.display()))
}

/// Sizes derived from the capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geometry {
    /// Capacity in sectors (header `capacity`).
    sectors: u64,
    /// Grains covering the capacity (the last may be partial).
    grains: u64,
    /// Grain tables, i.e. grain directory entries.
    tables: u64,
    /// Sectors of the grain directory.
    gd_sectors: u64,
}

impl Geometry {
    fn new(len: u64) -> Result<Self> {
        ensure!(len > 0, "a VMDK cannot hold an empty disk");
        let sectors = len
            .checked_next_multiple_of(SECTOR_SIZE)
            .context("disk size overflows")?
            / SECTOR_SIZE;
        let grains = sectors.div_ceil(GRAIN_SECTORS);
        let tables = grains.div_ceil(GTES_PER_GT);
        Ok(Geometry {
            sectors,
            grains,
            tables,
            gd_sectors: (tables * 4).div_ceil(SECTOR_SIZE),
        })
    }

    fn capacity_bytes(&self) -> u64 {
        self.sectors * SECTOR_SIZE
    }

    /// Guest bytes of grain `g` inside the capacity (64 KiB but the last).
    fn grain_len(&self, g: u64) -> u64 {
        (self.capacity_bytes() - g * GRAIN_SIZE).min(GRAIN_SIZE)
    }
}

/// The 512-byte sparse extent header; the footer is the same with the real
/// `gd_offset`.
fn header(geo: &Geometry, gd_offset: u64) -> [u8; SECTOR_SIZE as usize] {
    let mut h = [0u8; SECTOR_SIZE as usize];
    let mut put = |at: usize, bytes: &[u8]| h[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, MAGIC); // magicNumber
    put(4, &VERSION.to_le_bytes()); // version
    put(8, &HEADER_FLAGS.to_le_bytes()); // flags
    put(12, &geo.sectors.to_le_bytes()); // capacity
    put(20, &GRAIN_SECTORS.to_le_bytes()); // grainSize
    put(28, &DESCRIPTOR_OFFSET.to_le_bytes()); // descriptorOffset
    put(36, &DESCRIPTOR_SECTORS.to_le_bytes()); // descriptorSize
    put(44, &(GTES_PER_GT as u32).to_le_bytes()); // numGTEsPerGT
    put(48, &0u64.to_le_bytes()); // rgdOffset: none
    put(56, &gd_offset.to_le_bytes()); // gdOffset
    put(64, &OVERHEAD_SECTORS.to_le_bytes()); // overHead
    put(72, &[0]); // uncleanShutdown
    put(73, &NEWLINE_TEST); // the four newline-detection characters
    put(77, &COMPRESSION_DEFLATE.to_le_bytes()); // compressAlgorithm
    h
}

/// A metadata marker sector: `val` (sectors of metadata that follow), a zero
/// `size`, and the marker type.
fn marker(val: u64, kind: u32) -> [u8; SECTOR_SIZE as usize] {
    let mut m = [0u8; SECTOR_SIZE as usize];
    m[0..8].copy_from_slice(&val.to_le_bytes());
    m[12..16].copy_from_slice(&kind.to_le_bytes());
    m
}

/// The embedded descriptor, with the keys (and the order) qemu-img writes.
fn descriptor(geo: &Geometry, opts: &VmdkOptions, extent_name: &str, cid: u32) -> Result<Vec<u8>> {
    ensure!(
        !extent_name.is_empty()
            && !extent_name
                .chars()
                .any(|c| c == '"' || c == '\\' || c.is_control()),
        "VMDK extent name {extent_name:?} must be non-empty, without quotes, \
         backslashes or control characters"
    );
    let heads = opts.adapter_type.heads();
    // qemu-img: cylinders = capacity / (heads * 63), rounded down.
    let cylinders = geo.sectors / (heads * 63);
    let text = format!(
        "# Disk DescriptorFile\n\
         version=1\n\
         CID={cid:08x}\n\
         parentCID=ffffffff\n\
         createType=\"streamOptimized\"\n\
         \n\
         # Extent description\n\
         RW {sectors} SPARSE \"{extent_name}\"\n\
         \n\
         # The Disk Data Base\n\
         #DDB\n\
         \n\
         ddb.virtualHWVersion = \"{hw}\"\n\
         ddb.geometry.cylinders = \"{cylinders}\"\n\
         ddb.geometry.heads = \"{heads}\"\n\
         ddb.geometry.sectors = \"63\"\n\
         ddb.adapterType = \"{adapter}\"\n\
         ddb.toolsVersion = \"{tools}\"\n",
        sectors = geo.sectors,
        hw = opts.hw_version,
        adapter = opts.adapter_type.as_str(),
        tools = opts.tools_version,
    );
    let mut bytes = text.into_bytes();
    ensure!(
        bytes.len() as u64 <= DESCRIPTOR_SECTORS * SECTOR_SIZE,
        "VMDK descriptor is {} bytes, more than the {} reserved",
        bytes.len(),
        DESCRIPTOR_SECTORS * SECTOR_SIZE
    );
    bytes.resize((DESCRIPTOR_SECTORS * SECTOR_SIZE) as usize, 0);
    Ok(bytes)
}

/// Sequential output in whole sectors, with the current sector number.
struct Sink<'f> {
    w: BufWriter<&'f File>,
    sector: u64,
}

impl Sink<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        debug_assert_eq!(bytes.len() as u64 % SECTOR_SIZE, 0);
        self.w.write_all(bytes).context("writing the VMDK file")?;
        self.sector += bytes.len() as u64 / SECTOR_SIZE;
        Ok(())
    }

    /// `sector` as a u32 table entry, or an error past 2 TiB.
    fn entry(sector: u64) -> Result<u32> {
        ensure!(
            sector < MAX_FILE_SECTORS,
            "the VMDK file would exceed 2 TiB, beyond what grain tables address"
        );
        Ok(sector as u32)
    }
}

/// Grain tables and directory as the writer fills them.
struct Tables {
    /// Grain table number whose entries `gt` holds; all before it are written.
    table: u64,
    gt: Vec<u32>,
    gd: Vec<u32>,
    /// CRC-32 of the tables written, for the CID.
    crc: crc32fast::Hasher,
}

impl Tables {
    /// Write grain tables up to (not including) `until`.
    fn emit_until(&mut self, until: u64, sink: &mut Sink) -> Result<()> {
        let mut bytes = vec![0u8; GT_BYTES as usize];
        while self.table < until {
            for (b, e) in bytes.chunks_exact_mut(4).zip(&self.gt) {
                b.copy_from_slice(&e.to_le_bytes());
            }
            sink.write(&marker(GT_SECTORS, MARKER_GT))?;
            self.gd[self.table as usize] = Sink::entry(sink.sector)?;
            sink.write(&bytes)?;
            self.crc.update(&bytes);
            self.gt.fill(0);
            self.table += 1;
        }
        Ok(())
    }
}

/// A compressed chunk: `buf[CHUNK_BYTES..CHUNK_BYTES + used]` holds its
/// stored grains back to back; `grains` lists `(grain number, sector within
/// the chunk's output)`. `buf` returns to the pool once written.
struct Done {
    buf: Vec<u8>,
    used: usize,
    grains: Vec<(u64, u64)>,
}

/// Shared state of one run.
struct Job<'a> {
    view: &'a dyn DiskView,
    geo: Geometry,
    level: u32,
    /// Chunks touching a data extent, in guest order.
    chunks: Vec<u64>,
    pool: Arc<BufPool>,
    /// Packed chunks shared with other outputs over the same base.
    cache: Option<&'a ChunkCache>,
}

impl Job<'_> {
    /// One chunk, the `k`-th of those with data: read it, compress its
    /// non-zero grains.
    fn item(&self, z: &mut Deflater, k: usize, buf: Vec<u8>) -> Result<Done> {
        self.pack(self.chunks[k], buf, z)
    }

    /// [`Job::pack_fresh`], through the chunk cache when the chunk's range
    /// is shared: a grain's bytes (its marker holds its guest LBA) depend
    /// only on its content, position and the level, so a chunk packed for
    /// another output over the same base is reused as it is.
    fn pack(&self, chunk: u64, mut buf: Vec<u8>, z: &mut Deflater) -> Result<Done> {
        let off = chunk * CHUNK_GRAINS * GRAIN_SIZE;
        let n = (self.view.len() - off).min(CHUNK_BYTES as u64) as usize;
        let key = self.cache.and_then(|_| {
            // The grain markers hold the guest position: reuse only where
            // the source offset is the guest offset too.
            let (tag, src) = self.view.shared_source(off..off + n as u64)?;
            (src == off).then_some(())?;
            Some(CacheKey {
                tag,
                codec: Codec::VmdkGrains,
                level: self.level,
                chunk: CHUNK_BYTES,
                offset: off,
                len: n,
            })
        });
        let (Some(cache), Some(key)) = (self.cache, key) else {
            return self.pack_fresh(chunk, buf, z);
        };
        let hit = match cache.get(&key) {
            Ok(h) => h,
            Err(e) => {
                self.pool.put(buf);
                return Err(e);
            }
        };
        if let Some(bytes) = hit {
            return match unpack_cached(&bytes, &mut buf[CHUNK_BYTES..]) {
                Ok((used, grains)) => Ok(Done { buf, used, grains }),
                Err(e) => {
                    self.pool.put(buf);
                    Err(e)
                }
            };
        }
        let done = self.pack_fresh(chunk, buf, z)?;
        let out = &done.buf[CHUNK_BYTES..CHUNK_BYTES + done.used];
        if let Err(e) = cache.put(key, &pack_cached(&done.grains, out)) {
            self.pool.put(done.buf);
            return Err(e);
        }
        Ok(done)
    }

    /// Read chunk `chunk` and compress its non-zero grains into `buf`.
    fn pack_fresh(&self, chunk: u64, mut buf: Vec<u8>, z: &mut Deflater) -> Result<Done> {
        let first = chunk * CHUNK_GRAINS;
        let grains = (self.geo.grains - first).min(CHUNK_GRAINS);
        let off = first * GRAIN_SIZE;
        let n = (self.view.len() - off).min(CHUNK_BYTES as u64) as usize;
        let (input, output) = buf.split_at_mut(CHUNK_BYTES);
        if let Err(e) = self.view.read_at(&mut input[..n], off) {
            self.pool.put(buf);
            return Err(e.context(format!("reading the disk at offset {off}")));
        }
        // Past the view's end (last chunk): zeros up to the capacity.
        input[n..].fill(0);
        let mut used = 0usize;
        let mut stored = Vec::new();
        for i in 0..grains {
            let g = first + i;
            let start = (i * GRAIN_SIZE) as usize;
            let data = &input[start..start + self.geo.grain_len(g) as usize];
            if is_zero(data) {
                continue;
            }
            match pack_grain(z, data, g * GRAIN_SECTORS, &mut output[used..]) {
                Ok(len) => {
                    stored.push((g, used as u64 / SECTOR_SIZE));
                    used += len;
                }
                Err(e) => {
                    self.pool.put(buf);
                    return Err(e.context(format!("compressing grain {g}")));
                }
            }
        }
        Ok(Done {
            buf,
            used,
            grains: stored,
        })
    }
}

/// A packed chunk as the cache keeps it: the grain count (u32 LE), then
/// `(grain, sector)` pairs (u64 LE each), then the packed bytes.
fn pack_cached(grains: &[(u64, u64)], packed: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + 16 * grains.len() + packed.len());
    v.extend_from_slice(&(grains.len() as u32).to_le_bytes());
    for &(g, rel) in grains {
        v.extend_from_slice(&g.to_le_bytes());
        v.extend_from_slice(&rel.to_le_bytes());
    }
    v.extend_from_slice(packed);
    v
}

/// The inverse of [`pack_cached`]: copy the packed bytes to `out`; return
/// their length and the grain list.
fn unpack_cached(bytes: &[u8], out: &mut [u8]) -> Result<(usize, Vec<(u64, u64)>)> {
    let bad = || anyhow!("a cached VMDK chunk is malformed");
    let count = u32::from_le_bytes(bytes.get(..4).ok_or_else(bad)?.try_into()?) as usize;
    let table = bytes.get(4..4 + 16 * count).ok_or_else(bad)?;
    let grains = table
        .chunks_exact(16)
        .map(|e| {
            let g = u64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
            let rel = u64::from_le_bytes(e[8..].try_into().expect("8 bytes"));
            (g, rel)
        })
        .collect();
    let packed = &bytes[4 + 16 * count..];
    ensure!(packed.len() <= out.len(), bad());
    out[..packed.len()].copy_from_slice(packed);
    Ok((packed.len(), grains))
}

/// Store one grain at the start of `out`: marker (`lba`, compressed size),
/// zlib stream, zero padding to a sector. Returns the bytes used. The last
/// grain of a disk whose capacity is not a grain multiple holds only the
/// bytes up to the capacity, as VMware's own writer stores it.
fn pack_grain(z: &mut Deflater, data: &[u8], lba: u64, out: &mut [u8]) -> Result<usize> {
    let written = z
        .compress_into(data, &mut out[GRAIN_MARKER_BYTES..MAX_PACKED_GRAIN])
        .context("deflating a grain")?;
    out[..8].copy_from_slice(&lba.to_le_bytes());
    out[8..12].copy_from_slice(&(written as u32).to_le_bytes());
    let end = GRAIN_MARKER_BYTES + written;
    let padded = end.next_multiple_of(SECTOR_SIZE as usize);
    out[end..padded].fill(0);
    Ok(padded)
}

/// [`write_vmdk`] with the extent name resolved and the cancellation check
/// as a parameter (for tests).
fn run(
    view: &dyn DiskView,
    out: &Path,
    opts: &VmdkOptions,
    extent_name: &str,
    progress: &(dyn Fn(u64) + Sync),
    check: &(dyn Fn() -> Result<()> + Sync),
) -> Result<VmdkStats> {
    ensure!(
        opts.compression_level <= 9,
        "zlib level {} is out of range 0-9",
        opts.compression_level
    );
    let geo = Geometry::new(view.len())?;
    // Validate the descriptor before creating anything.
    let mut desc = descriptor(&geo, opts, extent_name, opts.cid.unwrap_or(0))?;
    check()?;

    let nchunks = geo.grains.div_ceil(CHUNK_GRAINS);
    let chunk_of = |byte: u64| byte / CHUNK_BYTES as u64;
    let mut chunks: Vec<u64> = Vec::new();
    for r in clamped_extents(view).context("mapping the disk's data")? {
        let first = chunk_of(r.start).max(chunks.last().map_or(0, |&c| c + 1));
        chunks.extend(first..=chunk_of(r.end - 1));
    }
    debug_assert!(chunks.last().map_or(true, |&c| c < nchunks));
    let workers = crate::util::threads(opts.threads).clamp(1, chunks.len().max(1));
    // Buffers in flight: one per worker plus spares, so that workers go on
    // while a slow chunk holds up the writer.
    let window = 2 * workers + 2;

    let file = crate::io::create_sized(out, 0)?;
    let mut sink = Sink {
        w: BufWriter::with_capacity(WRITE_BUFFER, &file),
        sector: 0,
    };
    sink.write(&header(&geo, GD_AT_END))?;
    sink.write(&desc)?;
    let pad = vec![0u8; ((OVERHEAD_SECTORS - 1 - DESCRIPTOR_SECTORS) * SECTOR_SIZE) as usize];
    sink.write(&pad)?;
    debug_assert_eq!(sink.sector, OVERHEAD_SECTORS);

    let mut tables = Tables {
        table: 0,
        gt: vec![0; GTES_PER_GT as usize],
        gd: vec![0; geo.tables as usize],
        crc: crc32fast::Hasher::new(),
    };
    let (mut grains_written, mut populated_bytes) = (0u64, 0u64);
    let len = view.len();

    let pool = BufPool::new(CHUNK_BYTES + CHUNK_OUT, window);
    let job = Job {
        view,
        geo,
        level: opts.compression_level,
        chunks,
        pool: pool.clone(),
        cache: opts.cache,
    };
    crate::io::ordered::run(
        "vmdk",
        workers,
        job.chunks.len(),
        &pool,
        || Ok(Deflater::zlib(job.level)),
        |z, k, buf| job.item(z, k, buf),
        |ordered| -> Result<()> {
            for k in 0..job.chunks.len() {
                check()?;
                let done = ordered.next()?;
                let chunk = job.chunks[k];
                // Tables before this chunk's are complete: write them first.
                tables.emit_until(chunk * CHUNK_GRAINS / GTES_PER_GT, &mut sink)?;
                let base = sink.sector;
                for &(g, rel) in &done.grains {
                    tables.gt[(g % GTES_PER_GT) as usize] = Sink::entry(base + rel)?;
                    populated_bytes += geo.grain_len(g);
                }
                grains_written += done.grains.len() as u64;
                sink.write(&done.buf[CHUNK_BYTES..CHUNK_BYTES + done.used])?;
                pool.put(done.buf);
                progress(((chunk + 1) * CHUNK_BYTES as u64).min(len));
            }
            Ok(())
        },
    )?;
    check()?;
    tables.emit_until(geo.tables, &mut sink)?;

    // Grain directory, footer, end-of-stream marker.
    sink.write(&marker(geo.gd_sectors, MARKER_GD))?;
    let gd_offset = sink.sector;
    let mut gd = vec![0u8; (geo.gd_sectors * SECTOR_SIZE) as usize];
    for (b, e) in gd.chunks_exact_mut(4).zip(&tables.gd) {
        b.copy_from_slice(&e.to_le_bytes());
    }
    sink.write(&gd)?;
    sink.write(&marker(1, MARKER_FOOTER))?;
    sink.write(&header(&geo, gd_offset))?;
    sink.write(&marker(0, MARKER_EOS))?;
    let file_size = sink.sector * SECTOR_SIZE;
    sink.w.flush().context("writing the VMDK file")?;
    drop(sink);

    let cid = match opts.cid {
        Some(c) => c,
        None => {
            tables.crc.update(&gd);
            tables.crc.update(&geo.sectors.to_le_bytes());
            let mut c = tables.crc.finalize();
            if RESERVED_CIDS.contains(&c) {
                c ^= 0x0001_0000;
            }
            desc = descriptor(&geo, opts, extent_name, c)?;
            file.write_all_at(&desc, DESCRIPTOR_OFFSET * SECTOR_SIZE)
                .context("writing the VMDK descriptor")?;
            c
        }
    };
    file.sync_all().context("syncing the VMDK file")?;
    progress(len);
    let stats = VmdkStats {
        capacity_bytes: geo.capacity_bytes(),
        file_size,
        grains_written,
        populated_bytes,
        cid,
    };
    tracing::debug!(?stats, "wrote VMDK");
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::sparse::test_support::{self, make_sparse, Fill};
    use crate::io::view::{Composite, FileView, Patch};
    use crate::util::cmd;
    use serde_json::Value;
    use std::collections::BTreeMap;
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering;

    const MIB: u64 = 1 << 20;

    fn qemu_img(args: &[&str]) -> Vec<u8> {
        cmd::run(&mut cmd::new("qemu-img", args)).unwrap()
    }

    fn qemu_json(args: &[&str]) -> Value {
        serde_json::from_slice(&qemu_img(args)).unwrap()
    }

    fn s(p: &Path) -> &str {
        p.to_str().unwrap()
    }

    /// The descriptor text of a VMDK file, as key -> value (quotes removed)
    /// plus the extent line under "extent".
    fn read_descriptor(path: &Path) -> BTreeMap<String, String> {
        let f = File::open(path).unwrap();
        let mut buf = vec![0u8; (DESCRIPTOR_SECTORS * SECTOR_SIZE) as usize];
        f.read_exact_at(&mut buf, SECTOR_SIZE).unwrap();
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        let text = std::str::from_utf8(&buf[..end]).unwrap();
        let mut map = BTreeMap::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some((k, v)) = line.split_once('=') {
                map.insert(k.trim().to_string(), v.trim().trim_matches('"').to_string());
            } else {
                map.insert("extent".to_string(), line.to_string());
            }
        }
        map
    }

    /// Check `vmdk` with qemu-img: info, check, compare with `raw`, and a
    /// conversion back to raw that must equal `raw` padded to `capacity`.
    fn verify(raw: &Path, vmdk: &Path, stats: &VmdkStats) {
        let info = qemu_json(&["info", "--output=json", "-f", "vmdk", s(vmdk)]);
        assert_eq!(info["format"], "vmdk", "{info}");
        assert_eq!(info["virtual-size"], stats.capacity_bytes, "{info}");
        let data = &info["format-specific"]["data"];
        assert_eq!(data["create-type"], "streamOptimized", "{info}");
        assert_eq!(data["cid"], stats.cid, "{info}");
        assert_eq!(data["parent-cid"], 0xffff_ffffu32, "{info}");
        let extents = data["extents"].as_array().unwrap();
        assert_eq!(extents.len(), 1, "{info}");
        assert_eq!(extents[0]["compressed"], true, "{info}");
        assert_eq!(extents[0]["cluster-size"], GRAIN_SIZE, "{info}");
        assert_eq!(extents[0]["virtual-size"], stats.capacity_bytes, "{info}");
        assert_eq!(
            std::fs::metadata(vmdk).unwrap().len(),
            stats.file_size,
            "file size"
        );

        // `qemu-img check` exits non-zero on corruption.
        let check = qemu_json(&["check", "--output=json", "-f", "vmdk", s(vmdk)]);
        assert_eq!(check["check-errors"], 0, "{check}");
        assert!(check.get("corruptions").map_or(true, |v| v == 0), "{check}");

        qemu_img(&["compare", "-f", "vmdk", "-F", "raw", s(vmdk), s(raw)]);

        let back = vmdk.with_extension("back.raw");
        qemu_img(&["convert", "-f", "vmdk", "-O", "raw", s(vmdk), s(&back)]);
        let mut want = std::fs::read(raw).unwrap();
        want.resize(stats.capacity_bytes as usize, 0);
        let got = std::fs::read(&back).unwrap();
        assert_eq!(got.len(), want.len(), "converted size");
        assert!(got == want, "qemu-img convert back to raw differs");
        std::fs::remove_file(&back).unwrap();
    }

    /// Structure by hand: header, markers, footer, end of stream.
    fn check_layout(vmdk: &Path, stats: &VmdkStats) {
        let bytes = std::fs::read(vmdk).unwrap();
        let sec = |i: u64| &bytes[(i * SECTOR_SIZE) as usize..((i + 1) * SECTOR_SIZE) as usize];
        let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let n = bytes.len() as u64 / SECTOR_SIZE;
        assert_eq!(bytes.len() as u64 % SECTOR_SIZE, 0);
        let h = sec(0);
        assert_eq!(&h[0..4], b"KDMV");
        assert_eq!(u32_at(h, 4), 3);
        assert_eq!(u32_at(h, 8), 0x0003_0001);
        assert_eq!(u64_at(h, 12) * SECTOR_SIZE, stats.capacity_bytes);
        assert_eq!(u64_at(h, 20), 128);
        assert_eq!(u64_at(h, 28), 1);
        assert_eq!(u64_at(h, 36), 20);
        assert_eq!(u32_at(h, 44), 512);
        assert_eq!(u64_at(h, 48), 0);
        assert_eq!(u64_at(h, 56), u64::MAX, "GD_AT_END in the header");
        assert_eq!(&h[73..77], b"\n \r\n");
        assert_eq!(u16::from_le_bytes([h[77], h[78]]), 1);
        // End: footer marker, footer, end-of-stream marker.
        let eos = sec(n - 1);
        assert!(eos.iter().all(|&b| b == 0), "end-of-stream marker");
        let footer = sec(n - 2);
        assert_eq!(&footer[..56], &h[..56]);
        assert_eq!(&footer[64..], &h[64..]);
        let gd_offset = u64_at(footer, 56);
        let fm = sec(n - 3);
        assert_eq!((u64_at(fm, 0), u32_at(fm, 8), u32_at(fm, 12)), (1, 0, 3));
        // The GD marker sits right before the grain directory.
        let gdm = sec(gd_offset - 1);
        let geo = Geometry::new(stats.capacity_bytes).unwrap();
        assert_eq!(u64_at(gdm, 0), geo.gd_sectors);
        assert_eq!((u32_at(gdm, 8), u32_at(gdm, 12)), (0, 2));
        assert_eq!(gd_offset + geo.gd_sectors, n - 3);
        // Every GD entry points after a GT marker; every GT entry at a grain
        // marker naming its own LBA; no grain is stored twice.
        let mut seen = std::collections::BTreeSet::new();
        for t in 0..geo.tables {
            let gt = u32_at(&bytes, ((gd_offset * SECTOR_SIZE) + t * 4) as usize) as u64;
            assert!(gt > OVERHEAD_SECTORS, "table {t} at {gt}");
            let m = sec(gt - 1);
            assert_eq!((u64_at(m, 0), u32_at(m, 8), u32_at(m, 12)), (4, 0, 1));
            for e in 0..GTES_PER_GT {
                let at = (gt * SECTOR_SIZE + e * 4) as usize;
                let g = u32_at(&bytes, at) as u64;
                if g == 0 {
                    continue;
                }
                let gm = sec(g);
                assert_eq!(u64_at(gm, 0), (t * GTES_PER_GT + e) * GRAIN_SECTORS);
                assert!(u32_at(gm, 8) > 0);
                assert_eq!(gm[12], 0x78, "zlib header");
                assert!(seen.insert(g));
            }
        }
        assert_eq!(seen.len() as u64, stats.grains_written);
    }

    /// Guest grains touched by the non-zero regions.
    fn grains_touched(regions: &[(u64, u64, Fill)]) -> u64 {
        let mut set = std::collections::BTreeSet::new();
        for &(off, n, fill) in regions {
            if !matches!(fill, Fill::Zeros) {
                set.extend(off / GRAIN_SIZE..(off + n).div_ceil(GRAIN_SIZE));
            }
        }
        set.len() as u64
    }

    /// 100 MiB + 7 sectors: not a grain (nor chunk) multiple; data at
    /// aligned and odd offsets, across a grain table boundary (32 MiB), in
    /// the last partial grain, and written zeros that must stay unallocated.
    fn regions(len: u64) -> Vec<(u64, u64, Fill)> {
        vec![
            (0, MIB + 3, Fill::Text),
            (4 * MIB - 5000, 10_000, Fill::Random),
            (32 * MIB - 70_000, 140_000, Fill::Text),
            (40 * MIB, 4 * MIB, Fill::Zeros),
            (50 * MIB + 65_535, 2, Fill::Random),
            (60 * MIB, 3 * MIB, Fill::Random),
            (len - 1000, 1000, Fill::Text),
        ]
    }

    fn write(view: &dyn DiskView, out: &Path, threads: usize) -> VmdkStats {
        let opts = VmdkOptions {
            threads,
            ..Default::default()
        };
        write_vmdk(view, out, &opts, &|_| {}).unwrap()
    }

    #[test]
    fn sparse_disk_reads_back_identical() {
        let dir = tempfile::tempdir().unwrap();
        let len = 100 * MIB + 7 * SECTOR_SIZE;
        let regions = regions(len);
        let raw = dir.path().join("disk.raw");
        make_sparse(&raw, len, &regions, 7);
        let vmdk = dir.path().join("disk.vmdk");
        let last = AtomicU64::new(0);
        let stats = write_vmdk(
            &FileView::open(&raw).unwrap(),
            &vmdk,
            &VmdkOptions {
                threads: 3,
                ..Default::default()
            },
            &|n| {
                assert!(n >= last.load(Ordering::Relaxed), "progress went back");
                last.store(n, Ordering::Relaxed);
            },
        )
        .unwrap();
        assert_eq!(last.load(Ordering::Relaxed), len);
        assert_eq!(stats.capacity_bytes, len);
        assert_eq!(stats.grains_written, grains_touched(&regions));
        // The last grain holds 7 sectors of guest data.
        assert_eq!(
            stats.populated_bytes,
            (stats.grains_written - 1) * GRAIN_SIZE + 7 * SECTOR_SIZE
        );
        verify(&raw, &vmdk, &stats);
        check_layout(&vmdk, &stats);
        // Much smaller than the disk: ~8 MiB of data, half of it text.
        assert!(stats.file_size < 7 * MIB, "{stats:?}");

        // qemu's own map: the written zeros and the holes hold no data.
        let map = qemu_json(&["map", "--output=json", "-f", "vmdk", s(&vmdk)]);
        let data_at = |pos: u64| -> bool {
            map.as_array()
                .unwrap()
                .iter()
                .find(|e| {
                    let st = e["start"].as_u64().unwrap();
                    st <= pos && pos < st + e["length"].as_u64().unwrap()
                })
                .map(|e| e["data"].as_bool().unwrap())
                .unwrap()
        };
        assert!(data_at(0));
        assert!(!data_at(40 * MIB));
        assert!(!data_at(44 * MIB - 1));
        assert!(!data_at(80 * MIB));
        assert!(data_at(len - 1));
    }

    #[test]
    fn descriptor_matches_what_qemu_img_writes_for_cosa() {
        let dir = tempfile::tempdir().unwrap();
        let len = 64 * MIB;
        let raw = dir.path().join("disk.raw");
        make_sparse(&raw, len, &[(MIB, 4096, Fill::Text)], 3);
        let ours = dir.path().join("ours.vmdk");
        write(&FileView::open(&raw).unwrap(), &ours, 2);
        let theirs = dir.path().join("theirs.vmdk");
        qemu_img(&[
            "convert",
            "-f",
            "raw",
            "-O",
            "vmdk",
            "-o",
            "adapter_type=lsilogic,subformat=streamOptimized,compat6",
            s(&raw),
            s(&theirs),
        ]);
        let (mut a, mut b) = (read_descriptor(&ours), read_descriptor(&theirs));
        assert_eq!(
            a["extent"],
            format!("RW {} SPARSE \"ours.vmdk\"", len / 512)
        );
        assert_eq!(a["ddb.adapterType"], "lsilogic");
        assert_eq!(a["ddb.virtualHWVersion"], "6");
        assert_eq!(a["createType"], "streamOptimized");
        // Same keys and values but for the random CID and the file name.
        for m in [&mut a, &mut b] {
            m.remove("CID");
            m.remove("extent");
        }
        assert_eq!(a, b);
        // The header fields qemu-img sets agree too (flags aside: qemu 7.2
        // still sets the redundant-GD bit; the GD offsets differ by design).
        let (ha, hb) = (
            std::fs::read(&ours).unwrap(),
            std::fs::read(&theirs).unwrap(),
        );
        assert_eq!(&ha[..8], &hb[..8]);
        assert_eq!(&ha[12..48], &hb[12..48]);
        assert_eq!(&ha[64..512], &hb[64..512]);
    }

    #[test]
    fn output_is_deterministic_across_thread_counts() {
        let dir = tempfile::tempdir().unwrap();
        let len = 70 * MIB;
        let raw = dir.path().join("disk.raw");
        make_sparse(&raw, len, &regions(len), 11);
        let view = FileView::open(&raw).unwrap();
        // Same directory entry name, so the descriptors can match.
        let (da, db) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir(&da).unwrap();
        std::fs::create_dir(&db).unwrap();
        let (a, b) = (da.join("disk.vmdk"), db.join("disk.vmdk"));
        let sa = write(&view, &a, 1);
        let sb = write(&view, &b, 4);
        assert_eq!(sa, sb);
        assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap());
        // A different disk gets a different CID.
        make_sparse(&raw, len, &[(5 * MIB, 100, Fill::Random)], 12);
        let c = dir.path().join("c.vmdk");
        assert_ne!(write(&FileView::open(&raw).unwrap(), &c, 2).cid, sa.cid);
    }

    #[test]
    fn empty_disk_has_no_grains() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("disk.raw");
        make_sparse(&raw, 64 * MIB + 512, &[(MIB, MIB, Fill::Zeros)], 1);
        let vmdk = dir.path().join("disk.vmdk");
        let stats = write(&FileView::open(&raw).unwrap(), &vmdk, 2);
        assert_eq!(stats.grains_written, 0);
        assert_eq!(stats.populated_bytes, 0);
        // Header, descriptor, padding, 3 GTs with markers, GD, footer, EOS.
        assert_eq!(stats.file_size, (128 + 3 * 5 + 2 + 3) * SECTOR_SIZE);
        verify(&raw, &vmdk, &stats);
        check_layout(&vmdk, &stats);
    }

    #[test]
    fn length_not_a_sector_multiple_rounds_up() {
        let dir = tempfile::tempdir().unwrap();
        let len = 3 * MIB + 1000;
        let raw = dir.path().join("disk.raw");
        make_sparse(
            &raw,
            len,
            &[(0, 4096, Fill::Random), (len - 10, 10, Fill::Random)],
            5,
        );
        let vmdk = dir.path().join("disk.vmdk");
        let stats = write(&FileView::open(&raw).unwrap(), &vmdk, 2);
        assert_eq!(stats.capacity_bytes, 3 * MIB + 1024);
        assert_eq!(stats.grains_written, 2);
        // qemu-img compare sees the raw file as shorter; the tail must read
        // as zeros, which verify() checks through the converted copy.
        verify(&raw, &vmdk, &stats);
        check_layout(&vmdk, &stats);
    }

    #[test]
    fn composite_view_is_written_with_its_patch() {
        let dir = tempfile::tempdir().unwrap();
        let fx = test_support::fixture(dir.path(), 24 * MIB);
        let base = FileView::open(&fx.base).unwrap();
        let patch = Patch::from_file(&fx.patch, 7 * MIB, MIB).unwrap();
        let c = Composite::new(&base, 48 * MIB, vec![patch]).unwrap();
        let vmdk = dir.path().join("c.vmdk");
        let stats = write(&c, &vmdk, 2);
        let raw = dir.path().join("c.raw");
        crate::io::sparse::write_sparse(&c, &raw, &|_| {}).unwrap();
        verify(&raw, &vmdk, &stats);
    }

    #[test]
    fn shared_grains_are_reused_and_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let fx = test_support::fixture(dir.path(), 24 * MIB);
        let base = FileView::open(&fx.base).unwrap();
        let cache = ChunkCache::new(&dir.path().join("cache")).unwrap();
        // Two outputs over one base, patched at different places.
        for (i, at) in [7 * MIB, 2 * MIB].into_iter().enumerate() {
            let patch = Patch::from_file(&fx.patch, at, MIB).unwrap();
            let c = Composite::new(&base, 48 * MIB, vec![patch])
                .unwrap()
                .shared(1);
            let plain = dir.path().join(format!("plain-{i}.vmdk"));
            let cached = dir.path().join(format!("cached-{i}.vmdk"));
            let opts = VmdkOptions {
                extent_name: Some("disk.vmdk".into()),
                threads: 2,
                ..Default::default()
            };
            let a = write_vmdk(&c, &plain, &opts, &|_| {}).unwrap();
            let before = cache.reused();
            let opts = VmdkOptions {
                cache: Some(&cache),
                ..opts
            };
            let b = write_vmdk(&c, &cached, &opts, &|_| {}).unwrap();
            assert_eq!(a, b);
            assert!(
                std::fs::read(&plain).unwrap() == std::fs::read(&cached).unwrap(),
                "output {i}: the cache changes nothing"
            );
            let after = cache.reused();
            if i == 0 {
                assert_eq!(after, before, "nothing to reuse in the first output");
            } else {
                // Base data chunks untouched by either patch: 0 (text at 0),
                // 3 (random at 4 MiB - 5000), 8..10 and 23.
                assert!(after.0 >= before.0 + 4, "{before:?} -> {after:?}");
            }
            let raw = dir.path().join(format!("c-{i}.raw"));
            crate::io::sparse::write_sparse(&c, &raw, &|_| {}).unwrap();
            verify(&raw, &cached, &b);
        }
    }

    #[test]
    fn options_reach_the_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("disk.raw");
        make_sparse(&raw, 16 * MIB, &[(0, 100, Fill::Text)], 2);
        let vmdk = dir.path().join("tmp-name");
        let opts = VmdkOptions {
            adapter_type: AdapterType::Ide,
            hw_version: 4,
            tools_version: 12_345,
            extent_name: Some("disk.vmdk".into()),
            compression_level: 9,
            cid: Some(0x1234_abcd),
            threads: 1,
            cache: None,
        };
        let stats = write_vmdk(&FileView::open(&raw).unwrap(), &vmdk, &opts, &|_| {}).unwrap();
        assert_eq!(stats.cid, 0x1234_abcd);
        let d = read_descriptor(&vmdk);
        assert_eq!(d["extent"], "RW 32768 SPARSE \"disk.vmdk\"");
        assert_eq!(d["CID"], "1234abcd");
        assert_eq!(d["ddb.adapterType"], "ide");
        assert_eq!(d["ddb.geometry.heads"], "16");
        assert_eq!(d["ddb.geometry.cylinders"], (32768 / (16 * 63)).to_string());
        assert_eq!(d["ddb.virtualHWVersion"], "4");
        assert_eq!(d["ddb.toolsVersion"], "12345");
        verify(&raw, &vmdk, &stats);
    }

    #[test]
    fn empty_view_and_bad_names_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.raw");
        File::create(&empty).unwrap();
        let out = dir.path().join("x.vmdk");
        let one = VmdkOptions {
            threads: 1,
            ..Default::default()
        };
        let e = write_vmdk(&FileView::open(&empty).unwrap(), &out, &one, &|_| {}).unwrap_err();
        assert!(format!("{e:#}").contains("empty disk"), "{e:#}");
        assert!(!out.exists(), "nothing created");
        let raw = dir.path().join("disk.raw");
        make_sparse(&raw, MIB, &[], 1);
        let opts = VmdkOptions {
            extent_name: Some("a\"b".into()),
            ..one
        };
        let e = write_vmdk(&FileView::open(&raw).unwrap(), &out, &opts, &|_| {}).unwrap_err();
        assert!(format!("{e:#}").contains("extent name"), "{e:#}");
        assert!(AdapterType::parse("scsi").is_err());
        assert_eq!(
            AdapterType::parse("legacyESX").unwrap(),
            AdapterType::LegacyEsx
        );
    }

    #[test]
    fn cancellation_stops_the_workers_and_names_the_signal() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("disk.raw");
        make_sparse(&raw, 64 * MIB, &[(0, 40 * MIB, Fill::Random)], 9);
        let out = dir.path().join("x.vmdk");
        let calls = AtomicUsize::new(0);
        let check = || -> Result<()> {
            if calls.fetch_add(1, Ordering::Relaxed) >= 5 {
                return Err(anyhow::Error::new(crate::util::cancel::Interrupted(130)));
            }
            Ok(())
        };
        let opts = VmdkOptions {
            threads: 2,
            ..Default::default()
        };
        let e = run(
            &FileView::open(&raw).unwrap(),
            &out,
            &opts,
            "x.vmdk",
            &|_| {},
            &check,
        )
        .unwrap_err();
        assert!(
            e.downcast_ref::<crate::util::cancel::Interrupted>()
                .is_some(),
            "{e:#}"
        );
        // It stopped early: far less than the 40 MiB of random data written.
        assert!(std::fs::metadata(&out).unwrap().len() < 20 * MIB);
    }

    /// A view whose reads fail after some offset: the error surfaces and
    /// the run does not hang.
    struct Failing(u64);
    impl DiskView for Failing {
        fn len(&self) -> u64 {
            self.0
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
            ensure!(offset < 8 * MIB, "injected read error");
            buf.fill(1);
            Ok(())
        }
        fn data_extents(&self) -> Result<Vec<std::ops::Range<u64>>> {
            Ok(std::iter::once(0..self.0).collect())
        }
    }

    #[test]
    fn read_errors_surface() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("x.vmdk");
        let e = write_vmdk(&Failing(64 * MIB), &out, &VmdkOptions::default(), &|_| {}).unwrap_err();
        assert!(format!("{e:#}").contains("injected read error"), "{e:#}");
        assert!(format!("{e:#}").contains("x.vmdk"), "{e:#}");
    }
}
