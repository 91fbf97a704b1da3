//! Parallel, chunked compression of a disk view into a standard `.gz`,
//! `.xz` or `.zst` file.
//!
//! The view is cut into fixed-size chunks; each chunk is compressed on its
//! own into a complete gzip member, xz stream or zstd frame, and the pieces
//! are written in order. A concatenation of members/streams/frames is a
//! valid file for `gzip -d`, `xz -d` and `zstd -d` (and their `-t`), the same
//! trick as `pigz --independent` and `xz -T`.
//!
//! - Deterministic: the output depends only on the content, the kind and
//!   the level, not on the thread count nor on how tight the view's data
//!   extents are (an all-zero chunk compresses to the same bytes as the
//!   cached zero chunk).
//! - Chunks outside the view's data extents are never read, and every chunk
//!   that is all zero reuses one cached compressed zero chunk, so a mostly
//!   empty 16 GiB disk costs little more than hashing 16 GiB of zeros.
//! - Bounded memory: a pool of `2 * threads + 2` chunk buffers (xz:
//!   `threads + 2`) is all the input in flight (read, compressing, waiting
//!   for its turn, hashing). Peak memory is about that many chunks, their
//!   compressed forms, and the encoders: a few MiB each for gzip and zstd,
//!   about 100 MiB each for xz (see `XZ_MAX_DICT`).
//! - SHA-256 of the uncompressed stream runs on its own thread; SHA-256 of
//!   the output is computed by the writer as it writes.
pub use super::buffers::Written;
use super::buffers::{is_zero, BufPool, HashThread};
use super::sparse;
use super::view::DiskView;
use crate::util::sha256::Sha256;
use anyhow::{anyhow, bail, ensure, Context, Result};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

const MIB: usize = 1 << 20;
/// gzip chunk: deflate's window is 32 KiB, so a new member every 4 MiB
/// loses ~0.03% against one member (measured on 128 MiB of shared
/// libraries: 39,629,957 vs 39,616,802 bytes at 16 MiB chunks).
const GZIP_CHUNK: usize = 4 * MIB;
/// zstd chunk: level 10 has a window of several MiB; 8 MiB chunks cost ~1%
/// against one frame (4 MiB: 2.3%, 16 MiB: 0.4%), for half the buffer
/// memory of 16 MiB.
const ZSTD_CHUNK: usize = 8 * MIB;
/// xz chunk. Sizes of 128 MiB of shared libraries at level 9, in chunks
/// (chunk/dictionary) against one stream (25,518,664 bytes): 16/16 MiB
/// +2.9%, 32/8 MiB +2.7%, 32/16 MiB +2.1%, 64/16 MiB +1.0%, 64/64 MiB
/// +0.2%. A fresh stream's probability models cost more than a smaller
/// dictionary, so chunks are larger than the dictionary; 32 MiB keeps the
/// buffers in flight (`threads + 2` chunks) small next to the encoders.
const XZ_CHUNK: usize = 32 * MIB;
/// Largest LZMA2 dictionary used. The encoder needs about 11.5 times its
/// dictionary with the BT4 match finder of levels 5-9 (xz(1): `-6`, 8 MiB,
/// 94 MiB; `-9`, 64 MiB, 674 MiB), so an xz worker stays near 100 MiB;
/// levels 6-9, which differ only in dictionary size, become one. Measured
/// on 300 MiB of shared libraries with 2 threads: peak RSS 526 MiB and
/// 69,154,692 bytes with a 16 MiB dictionary, 299 MiB and 69,666,624 bytes
/// (+0.7%) with 8 MiB; `xz -9 -T2`: 1712 MiB and 67,433,096 bytes.
const XZ_MAX_DICT: u32 = 8 << 20;
/// Output buffer of the writer.
const WRITE_BUFFER: usize = MIB;
/// LZMA2 dictionary sizes of the xz presets 0-9 (xz(1), "Presets").
const XZ_PRESET_DICT: [u32; 10] = [
    256 << 10,
    1 << 20,
    2 << 20,
    4 << 20,
    4 << 20,
    8 << 20,
    8 << 20,
    16 << 20,
    32 << 20,
    64 << 20,
];

/// Compression applied to a released disk image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compressor {
    None,
    Gzip,
    Xz,
    Zstd,
}

impl Compressor {
    pub const ALL: [Compressor; 4] = [
        Compressor::None,
        Compressor::Gzip,
        Compressor::Xz,
        Compressor::Zstd,
    ];

    /// Parse `none`, `gzip`, `xz` or `zstd` (the names of `image.json`'s
    /// `compressor`).
    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| anyhow!("unknown compressor {s:?}: valid are none, gzip, xz, zstd"))
    }

    pub fn name(&self) -> &'static str {
        match self {
            Compressor::None => "none",
            Compressor::Gzip => "gzip",
            Compressor::Xz => "xz",
            Compressor::Zstd => "zstd",
        }
    }

    /// File name extension added to compressed artifacts, without the dot.
    pub fn extension(&self) -> Option<&'static str> {
        match self {
            Compressor::None => None,
            Compressor::Gzip => Some("gz"),
            Compressor::Xz => Some("xz"),
            Compressor::Zstd => Some("zst"),
        }
    }

    /// The compressor whose extension ends `path` (`None` if no known one
    /// does).
    pub fn of_file(path: &str) -> Compressor {
        Self::ALL
            .into_iter()
            .find(|c| {
                c.extension()
                    .is_some_and(|e| path.strip_suffix(e).is_some_and(|p| p.ends_with('.')))
            })
            .unwrap_or(Compressor::None)
    }

    /// Default level. gzip 6 and xz 9 are what RHCOS and FCOS publish with
    /// (cosa `image.json`: `gzip -6`, `xz -9`). zstd 10 runs at about the
    /// speed of `gzip -6` and writes ~13% less (300 MiB of shared libraries,
    /// 2 threads: 87 vs 65 MiB/s, 87.9 vs 100.9 MB); pass 3 for speed
    /// (380 MiB/s, 97.8 MB) or 19 for size.
    pub fn default_level(&self) -> u32 {
        match self {
            Compressor::None => 0,
            Compressor::Gzip => 6,
            Compressor::Xz => 9,
            Compressor::Zstd => 10,
        }
    }

    /// Levels accepted by [`compress_view`] (the ranges of the CLI tools).
    pub fn levels(&self) -> std::ops::RangeInclusive<u32> {
        match self {
            Compressor::None => 0..=0,
            Compressor::Gzip => 1..=9,
            Compressor::Xz => 0..=9,
            Compressor::Zstd => 1..=22,
        }
    }

    /// The independent-chunk size used for this kind (0 for `None`).
    pub fn chunk_size(&self) -> usize {
        match self {
            Compressor::None => 0,
            Compressor::Gzip => GZIP_CHUNK,
            Compressor::Xz => XZ_CHUNK,
            Compressor::Zstd => ZSTD_CHUNK,
        }
    }
}

impl std::fmt::Display for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Compressor {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

/// How [`compress_view`] encodes a view.
#[derive(Clone, Copy, Debug)]
pub struct CompressOpts<'a> {
    pub kind: Compressor,
    /// One of [`Compressor::levels`] (ignored by `Compressor::None`).
    pub level: u32,
    /// Workers (0: one per CPU; ignored by `Compressor::None`).
    pub threads: usize,
    /// Size of the independently compressed chunks. `None`: the kind's own
    /// ([`Compressor::chunk_size`]). `Some` is for tests and the benchmark
    /// in `examples/bench_compress.rs`; it is an error with
    /// `Compressor::None`.
    pub chunk: Option<usize>,
    /// Reused and filled for the view's shared ranges
    /// ([`DiskView::shared_source`]); the output is byte-identical without
    /// it.
    pub cache: Option<&'a ChunkCache>,
}

impl<'a> CompressOpts<'a> {
    /// `kind` at `level` with `threads` workers, in the kind's own chunks,
    /// without a cache.
    pub fn new(kind: Compressor, level: u32, threads: usize) -> Self {
        CompressOpts {
            kind,
            level,
            threads,
            chunk: None,
            cache: None,
        }
    }

    /// These options with `cache`.
    pub fn with_cache(self, cache: Option<&'a ChunkCache>) -> Self {
        CompressOpts { cache, ..self }
    }

    /// These options with chunks of `chunk` bytes.
    pub fn with_chunk(self, chunk: usize) -> Self {
        CompressOpts {
            chunk: Some(chunk),
            ..self
        }
    }
}

/// Compress `view` into `out` (created or truncated, then fsynced) as
/// `opts` say. `Compressor::None` writes a sparse raw file instead (see
/// [`sparse::write_sparse`]; level, threads and cache are ignored).
/// `progress` is called with the number of input bytes done so far, from
/// the calling thread.
pub fn compress_view(
    view: &dyn DiskView,
    out: &Path,
    opts: &CompressOpts,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Written> {
    let CompressOpts {
        kind,
        level,
        threads,
        chunk,
        cache,
    } = *opts;
    let chunk = match chunk {
        Some(chunk) => chunk,
        None if kind == Compressor::None => return sparse::write_sparse(view, out, progress),
        None => kind.chunk_size(),
    };
    ensure!(kind != Compressor::None, "no chunks without compression");
    ensure!(
        kind.levels().contains(&level),
        "{kind} level {level} is out of range {:?}",
        kind.levels()
    );
    ensure!(chunk > 0, "chunk size must not be zero");
    let threads = crate::util::threads(threads);
    let settings = Settings {
        kind,
        level,
        chunk,
        threads,
    };
    run(settings, view, out, progress, cache)
        .with_context(|| format!("writing {kind}-compressed image {}", out.display()))
}

/// Validated settings of one compression run ([`compress_view`]).
#[derive(Clone, Copy)]
struct Settings {
    kind: Compressor,
    level: u32,
    chunk: usize,
    /// Workers (at least one).
    threads: usize,
}

/// Compressed chunks of regions several outputs share (the base disk's
/// unchanged ranges, see [`DiskView::shared_source`]): the first output
/// compresses them, later ones reuse the bytes. Kept in a file, so memory
/// stays bounded whatever the disk size.
pub struct ChunkCache {
    path: std::path::PathBuf,
    inner: Mutex<CacheInner>,
}

impl std::fmt::Debug for ChunkCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkCache")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

struct CacheInner {
    file: std::fs::File,
    end: u64,
    index: HashMap<CacheKey, (u64, usize)>,
    /// Per codec: chunks reused and the input bytes they cover.
    hits: BTreeMap<&'static str, (usize, u64)>,
}

/// What a cached chunk is an encoding of: the same input bytes encoded
/// the same way give the same cached bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CacheKey {
    /// The input's source ([`DiskView::shared_source`]).
    pub tag: u64,
    /// The encoding: a compressor, or another encoder's own kind.
    pub codec: Codec,
    pub level: u32,
    /// Chunk size the encoder cuts its input into.
    pub chunk: usize,
    /// Offset of the input chunk in its source, and its length.
    pub offset: u64,
    pub len: usize,
}

/// Encoders whose chunks the [`ChunkCache`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Codec {
    /// A gzip member, xz stream or zstd frame ([`compress_view`]).
    Stream(Compressor),
    /// The same, for content that is already compressed
    /// ([`DiskView::precompressed`]).
    StreamPrecompressed(Compressor),
    /// A run of streamOptimized VMDK grains (`formats::vmdk`).
    VmdkGrains,
}

impl Codec {
    fn name(self) -> &'static str {
        match self {
            Codec::Stream(c) | Codec::StreamPrecompressed(c) => c.name(),
            Codec::VmdkGrains => "vmdk grains",
        }
    }
}

impl ChunkCache {
    /// A new, empty cache file at `path`.
    pub fn new(path: &Path) -> Result<Self> {
        let file = crate::io::create_sized(path, 0)?;
        Ok(ChunkCache {
            path: path.to_path_buf(),
            inner: Mutex::new(CacheInner {
                file,
                end: 0,
                index: HashMap::new(),
                hits: BTreeMap::new(),
            }),
        })
    }

    /// The bytes cached under `key`, if any (counted as reused).
    pub(crate) fn get(&self, key: &CacheKey) -> Result<Option<Vec<u8>>> {
        use std::os::unix::fs::FileExt;
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(&(at, len)) = inner.index.get(key) else {
            return Ok(None);
        };
        let mut v = vec![0u8; len];
        inner
            .file
            .read_exact_at(&mut v, at)
            .with_context(|| format!("reading chunk cache {}", self.path.display()))?;
        let hit = inner.hits.entry(key.codec.name()).or_default();
        hit.0 += 1;
        hit.1 += key.len as u64;
        Ok(Some(v))
    }

    /// Cache `bytes` under `key` (the first value put for a key stays).
    pub(crate) fn put(&self, key: CacheKey, bytes: &[u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.index.contains_key(&key) {
            return Ok(());
        }
        let at = inner.end;
        inner
            .file
            .write_all_at(bytes, at)
            .with_context(|| format!("writing chunk cache {}", self.path.display()))?;
        inner.end += bytes.len() as u64;
        inner.index.insert(key, (at, bytes.len()));
        Ok(())
    }

    /// Chunks reused so far, and the input bytes they cover.
    pub fn reused(&self) -> (usize, u64) {
        self.reused_by()
            .iter()
            .fold((0, 0), |(n, b), (_, hn, hb)| (n + hn, b + hb))
    }

    /// [`ChunkCache::reused`] per encoding (`gzip`, `vmdk grains`, ...).
    pub fn reused_by(&self) -> Vec<(&'static str, usize, u64)> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.hits.iter().map(|(k, &(n, b))| (*k, n, b)).collect()
    }
}

/// One chunk's encoder; each worker owns one.
enum Encoder {
    Gzip(Box<super::deflate::Deflater>),
    Xz { level: u32, chunk: usize },
    Zstd(Box<zstd::bulk::Compressor<'static>>),
}

impl Encoder {
    /// `precompressed`: the input is already compressed data
    /// ([`DiskView::precompressed`]); gzip then uses zlib's run-length
    /// strategy, which only codes runs (the padding around compressed
    /// blocks) and Huffman-codes the rest: the size of a full match search
    /// on such input, at several times its speed.
    fn new(kind: Compressor, level: u32, chunk: usize, precompressed: bool) -> Result<Self> {
        Ok(match kind {
            Compressor::Gzip => Encoder::Gzip(Box::new(if precompressed {
                super::deflate::Deflater::gzip_rle(level)
            } else {
                super::deflate::Deflater::gzip(level)
            })),
            Compressor::Xz => Encoder::Xz { level, chunk },
            Compressor::Zstd => {
                let mut c = zstd::bulk::Compressor::new(level as i32)
                    .context("creating a zstd compressor")?;
                // Like the zstd tool: content size in the header, and an
                // xxhash64 of the content that `zstd -t` and `-d` check.
                c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))?;
                c.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(true))?;
                Encoder::Zstd(Box::new(c))
            }
            Compressor::None => bail!("no encoder for uncompressed output"),
        })
    }

    /// `data` as one complete gzip member / xz stream / zstd frame.
    fn compress(&mut self, data: &[u8]) -> Result<Vec<u8>> {
        match self {
            Encoder::Gzip(z) => z.compress_vec(data),
            Encoder::Xz { level, chunk } => {
                let dict = XZ_PRESET_DICT[*level as usize]
                    .min(XZ_MAX_DICT)
                    .min(u32::try_from(*chunk).unwrap_or(u32::MAX))
                    // liblzma's minimum dictionary is 4 KiB.
                    .max(4096);
                let mut opts = xz2::stream::LzmaOptions::new_preset(*level)?;
                opts.dict_size(dict);
                let mut filters = xz2::stream::Filters::new();
                filters.lzma2(&opts);
                let stream =
                    xz2::stream::Stream::new_stream_encoder(&filters, xz2::stream::Check::Crc64)?;
                let buf = Vec::with_capacity(out_bound(data.len()));
                let mut e = xz2::write::XzEncoder::new_stream(buf, stream);
                e.write_all(data)?;
                Ok(e.finish()?)
            }
            Encoder::Zstd(c) => Ok(c.compress(data)?),
        }
    }
}

/// Capacity reserved for one compressed chunk: enough for incompressible
/// input (deflate and LZMA2 add well under 1% plus headers), so the buffer
/// never grows by copying. Pages never written cost no memory.
fn out_bound(len: usize) -> usize {
    len + len / 64 + 4096
}

/// Compressed all-zero chunks, by length (at most two: full and last).
#[derive(Default)]
struct ZeroCache(Mutex<HashMap<usize, Arc<Vec<u8>>>>);

impl ZeroCache {
    fn get(&self, len: usize, enc: &mut Encoder) -> Result<Arc<Vec<u8>>> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(z) = map.get(&len) {
            return Ok(z.clone());
        }
        let z = Arc::new(enc.compress(&vec![0u8; len])?);
        map.insert(len, z.clone());
        Ok(z)
    }
}

/// A compressed chunk: its own bytes, or the shared zero chunk.
enum Packed {
    Owned(Vec<u8>),
    Zero(Arc<Vec<u8>>),
}

impl Packed {
    fn bytes(&self) -> &[u8] {
        match self {
            Packed::Owned(v) => v,
            Packed::Zero(z) => z,
        }
    }
}

/// A worker's result for one chunk: the input buffer (`None` when the
/// chunk read back all zero) and the compressed bytes.
struct Done {
    input: Option<Vec<u8>>,
    packed: Packed,
}

/// Shared state of one compression run.
struct Job<'a> {
    view: &'a dyn DiskView,
    kind: Compressor,
    level: u32,
    chunk: usize,
    /// Indices of the chunks that touch a data extent, in order.
    data_chunks: Vec<usize>,
    pool: Arc<BufPool>,
    zeros: ZeroCache,
    cache: Option<&'a ChunkCache>,
}

impl Job<'_> {
    fn chunk_len(&self, i: usize) -> usize {
        let off = i as u64 * self.chunk as u64;
        (self.view.len() - off).min(self.chunk as u64) as usize
    }

    /// Compress one chunk, through the cache when its range is shared.
    fn shared(&self, enc: &mut Encoder, data: &[u8], off: u64) -> Result<Vec<u8>> {
        let key = self.cache.and_then(|_| {
            let (tag, src) = self.view.shared_source(off..off + data.len() as u64)?;
            Some(CacheKey {
                tag,
                codec: if self.view.precompressed() {
                    Codec::StreamPrecompressed(self.kind)
                } else {
                    Codec::Stream(self.kind)
                },
                level: self.level,
                chunk: self.chunk,
                offset: src,
                len: data.len(),
            })
        });
        let (Some(cache), Some(key)) = (self.cache, key) else {
            return enc.compress(data);
        };
        if let Some(bytes) = cache.get(&key)? {
            return Ok(bytes);
        }
        let c = enc.compress(data)?;
        cache.put(key, &c)?;
        Ok(c)
    }

    /// One data chunk, the `k`-th: read it into `buf` and compress it.
    fn item(&self, enc: &mut Encoder, k: usize, mut buf: Vec<u8>) -> Result<Done> {
        let i = self.data_chunks[k];
        let len = self.chunk_len(i);
        let off = i as u64 * self.chunk as u64;
        let res = match self.view.read_at(&mut buf[..len], off) {
            Err(e) => {
                self.pool.put(buf);
                Err(e)
            }
            Ok(()) if is_zero(&buf[..len]) => {
                self.pool.put(buf);
                self.zeros.get(len, enc).map(|z| Done {
                    input: None,
                    packed: Packed::Zero(z),
                })
            }
            Ok(()) => match self.shared(enc, &buf[..len], off) {
                Ok(c) => Ok(Done {
                    input: Some(buf),
                    packed: Packed::Owned(c),
                }),
                Err(e) => {
                    self.pool.put(buf);
                    Err(e.context(format!("compressing {len} bytes at offset {off}")))
                }
            },
        };
        res
    }
}

fn run(
    settings: Settings,
    view: &dyn DiskView,
    out: &Path,
    progress: &(dyn Fn(u64) + Sync),
    cache: Option<&ChunkCache>,
) -> Result<Written> {
    let Settings {
        kind,
        level,
        chunk,
        threads,
    } = settings;
    let len = view.len();
    let nchunks = usize::try_from(len.div_ceil(chunk as u64)).context("disk too large")?;
    let mut is_data = vec![false; nchunks];
    for r in sparse::clamped_extents(view)? {
        let first = (r.start / chunk as u64) as usize;
        let last = ((r.end - 1) / chunk as u64) as usize;
        is_data[first..=last].fill(true);
    }
    let data_chunks: Vec<usize> = (0..nchunks).filter(|&i| is_data[i]).collect();
    let workers = threads.clamp(1, data_chunks.len().max(1));
    // Chunk buffers in flight: one per worker, plus spares so that workers
    // go on while a slow chunk holds up the writer. xz chunks are large
    // and each takes seconds, so they get fewer spares.
    let window = match kind {
        Compressor::Xz => workers + 2,
        _ => 2 * workers + 2,
    };

    let file = crate::io::create_sized(out, 0)?;
    let mut w = BufWriter::with_capacity(WRITE_BUFFER, &file);
    let mut out_hash = Sha256::new();
    let mut out_size = 0u64;
    let mut emit = |bytes: &[u8]| -> Result<()> {
        w.write_all(bytes).context("writing the output file")?;
        out_hash.update(bytes);
        out_size += bytes.len() as u64;
        Ok(())
    };

    let pool = BufPool::new(chunk, window);
    let hasher = HashThread::spawn(pool.clone(), window)?;
    let job = Job {
        view,
        kind,
        level,
        chunk,
        data_chunks,
        pool: pool.clone(),
        zeros: ZeroCache::default(),
        cache,
    };

    let result = super::pipeline::run(
        &kind.to_string(),
        workers,
        job.data_chunks.len(),
        &pool,
        || Encoder::new(kind, level, chunk, view.precompressed()),
        |enc, k, buf| job.item(enc, k, buf),
        |ordered| -> Result<()> {
            if nchunks == 0 {
                // An empty stream still needs one member/stream/frame to be a
                // valid file.
                let mut enc = Encoder::new(kind, level, chunk, view.precompressed())?;
                emit(&enc.compress(&[])?)?;
            }
            let mut own_encoder: Option<Encoder> = None;
            let mut next = 0usize;
            while next < nchunks {
                crate::util::cancel::check()?;
                let clen = job.chunk_len(next);
                if !is_data[next] {
                    let enc = match &mut own_encoder {
                        Some(e) => e,
                        None => own_encoder.insert(Encoder::new(
                            kind,
                            level,
                            chunk,
                            view.precompressed(),
                        )?),
                    };
                    emit(&job.zeros.get(clen, enc)?)?;
                    hasher.zeros(clen as u64)?;
                } else {
                    let done = ordered.next()?;
                    emit(done.packed.bytes())?;
                    match done.input {
                        Some(buf) => hasher.data(buf, clen)?,
                        None => hasher.zeros(clen as u64)?,
                    }
                }
                next += 1;
                progress((next as u64 * chunk as u64).min(len));
            }
            Ok(())
        },
    );
    result?;
    progress(len);
    w.flush().context("writing the output file")?;
    drop(w);
    file.sync_all().context("syncing the output file")?;
    let (uncompressed_sha256, hashed) = hasher.finish()?;
    ensure!(hashed == len, "hashed {hashed} of {len} bytes");
    Ok(Written {
        size: out_size,
        sha256: hex::encode(out_hash.finalize()),
        uncompressed_size: len,
        uncompressed_sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::sparse::test_support::*;
    use crate::io::view::{Composite, FileView, Patch};
    use std::ops::Range;
    use std::path::PathBuf;
    use std::process::{Command, Stdio};
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn tool(kind: Compressor) -> &'static str {
        match kind {
            Compressor::Gzip => "gzip",
            Compressor::Xz => "xz",
            Compressor::Zstd => "zstd",
            Compressor::None => unreachable!(),
        }
    }

    /// `<tool> -t` on the file; panics with its stderr on failure.
    fn test_with_tool(kind: Compressor, path: &Path) {
        let out = Command::new(tool(kind))
            .args(["-t", "-q"])
            .arg(path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{} -t {}: {}",
            tool(kind),
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `<tool> -dc file > dst`.
    fn decompress_to(kind: Compressor, path: &Path, dst: &Path) {
        let st = Command::new(tool(kind))
            .args(["-d", "-c", "-q"])
            .arg(path)
            .stdout(std::fs::File::create(dst).unwrap())
            .status()
            .unwrap();
        assert!(st.success(), "{} -dc {}", tool(kind), path.display());
    }

    /// `<tool> -dc file | sha256sum`, streamed (for large outputs).
    fn decompressed_sha256(kind: Compressor, path: &Path) -> (String, u64) {
        let mut child = Command::new(tool(kind))
            .args(["-d", "-c", "-q"])
            .arg(path)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut h = Sha256::new();
        let n = std::io::copy(child.stdout.as_mut().unwrap(), &mut h).unwrap();
        assert!(child.wait().unwrap().success());
        (hex::encode(h.finalize()), n)
    }

    /// Compress `view` with `kind`, then check it every way we can: the
    /// tool's own test, byte-for-byte decompressed content, both hashes
    /// against sha256sum, sizes, and progress.
    fn roundtrip(
        kind: Compressor,
        chunk: usize,
        threads: usize,
        view: &dyn DiskView,
        dir: &Path,
    ) -> (Written, PathBuf) {
        let out = dir.join(format!("out-{kind}-{chunk}-{threads}"));
        let last = AtomicU64::new(0);
        let progress = |n: u64| {
            assert!(n >= last.load(Ordering::Relaxed), "progress went back");
            assert!(n <= view.len());
            last.store(n, Ordering::Relaxed);
        };
        let opts = CompressOpts::new(kind, kind.default_level(), threads);
        let opts = if chunk == 0 {
            opts
        } else {
            opts.with_chunk(chunk)
        };
        let w = compress_view(view, &out, &opts, &progress).unwrap();
        assert_eq!(last.load(Ordering::Relaxed), view.len(), "final progress");
        let want = view_bytes(view);
        assert_eq!(w.uncompressed_size, want.len() as u64);
        assert_eq!(w.uncompressed_sha256, crate::util::sha256_hex(&want));
        assert_eq!(w.size, std::fs::metadata(&out).unwrap().len());
        assert_eq!(w.sha256, sha256sum(&out));
        let raw = dir.join("decompressed");
        if kind == Compressor::None {
            std::fs::copy(&out, &raw).unwrap();
        } else {
            test_with_tool(kind, &out);
            decompress_to(kind, &out, &raw);
        }
        assert_eq!(sha256sum(&raw), w.uncompressed_sha256);
        let got = std::fs::read(&raw).unwrap();
        assert!(got == want, "{kind}: decompressed content differs");
        (w, out)
    }

    #[test]
    fn names_extensions_and_levels() {
        for c in Compressor::ALL {
            assert_eq!(Compressor::parse(c.name()).unwrap(), c);
            assert_eq!(c.to_string().parse::<Compressor>().unwrap(), c);
            assert!(c.levels().contains(&c.default_level()));
            assert_eq!(serde_json::to_value(c).unwrap(), c.name());
        }
        assert_eq!(Compressor::Gzip.extension(), Some("gz"));
        assert_eq!(Compressor::Xz.extension(), Some("xz"));
        assert_eq!(Compressor::Zstd.extension(), Some("zst"));
        assert_eq!(Compressor::None.extension(), None);
        assert_eq!(Compressor::Gzip.default_level(), 6);
        assert_eq!(Compressor::Xz.default_level(), 9);
        let err = Compressor::parse("bzip2").unwrap_err().to_string();
        assert!(
            err.contains("bzip2") && err.contains("none, gzip, xz, zstd"),
            "{err}"
        );
        assert!(Compressor::parse("GZIP").is_err());
    }

    #[test]
    fn every_kind_round_trips_a_sparse_file() {
        let dir = tempfile::tempdir().unwrap();
        // Not a chunk multiple; data across the 4 MiB and 8 MiB boundaries,
        // an allocated zero region, and a partial last chunk.
        let fx = fixture(dir.path(), 40 * MIB + 777);
        let view = FileView::open(&fx.base).unwrap();
        for kind in Compressor::ALL {
            let (w, _) = roundtrip(kind, 0, 3, &view, dir.path());
            assert_eq!(w.uncompressed_sha256, sha256sum(&fx.base));
            if kind != Compressor::None {
                assert!(w.size < 6 * MIB, "{kind}: {w:?}");
            }
        }
    }

    #[test]
    fn small_chunks_and_a_composite_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let fx = fixture(dir.path(), 24 * MIB);
        let base = FileView::open(&fx.base).unwrap();
        let patch = Patch::from_file(&fx.patch, 7 * MIB + 4096, MIB).unwrap();
        let c = Composite::new(&base, 30 * MIB + 3, vec![patch]).unwrap();
        for kind in [Compressor::Gzip, Compressor::Xz, Compressor::Zstd] {
            // Odd chunk size: many chunks, so reordering and zero reuse of
            // both the full and the short last chunk are exercised.
            let (w, _) = roundtrip(kind, 300_001, 4, &c, dir.path());
            assert_eq!(w.uncompressed_size, 30 * MIB + 3);
        }
        // And the patch really shows: the unpatched view hashes differently.
        let plain = Composite::new(&base, 30 * MIB + 3, vec![]).unwrap();
        assert_ne!(
            crate::io::sparse::sha256_view(&plain).unwrap(),
            crate::io::sparse::sha256_view(&c).unwrap()
        );
    }

    #[test]
    fn shared_chunks_are_reused_and_outputs_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let fx = fixture(dir.path(), 24 * MIB);
        let base = FileView::open(&fx.base).unwrap();
        let cache = ChunkCache::new(&dir.path().join("chunks")).unwrap();
        for kind in [Compressor::Gzip, Compressor::Zstd] {
            let mut before = cache.reused();
            // Two platforms over one base: different patches, sizes.
            for (i, (at, len)) in [(7 * MIB + 4096, 26 * MIB), (MIB, 40 * MIB)]
                .into_iter()
                .enumerate()
            {
                let patch = Patch::from_file(&fx.patch, at, MIB).unwrap();
                let v = Composite::new(&base, len, vec![patch]).unwrap().shared(7);
                let plain_out = dir.path().join(format!("plain-{kind}-{i}"));
                let cached_out = dir.path().join(format!("cached-{kind}-{i}"));
                let opts = CompressOpts::new(kind, kind.default_level(), 2);
                let a = compress_view(&v, &plain_out, &opts, &|_| {}).unwrap();
                let opts = opts.with_cache(Some(&cache));
                let b = compress_view(&v, &cached_out, &opts, &|_| {}).unwrap();
                assert_eq!(a, b, "{kind}: the cache changes nothing in the output");
                assert_eq!(
                    std::fs::read(&plain_out).unwrap(),
                    std::fs::read(&cached_out).unwrap()
                );
                test_with_tool(kind, &cached_out);
                let now = cache.reused();
                if i == 0 {
                    assert_eq!(now, before, "{kind}: nothing to reuse on the first output");
                } else {
                    assert!(now.0 > before.0, "{kind}: the second output reuses chunks");
                }
                before = now;
            }
        }
        // A view that is not declared shared never uses the cache.
        let plain = Composite::new(&base, 24 * MIB, vec![]).unwrap();
        let before = cache.reused();
        let opts = CompressOpts::new(Compressor::Gzip, 6, 2).with_cache(Some(&cache));
        compress_view(&plain, &dir.path().join("x"), &opts, &|_| {}).unwrap();
        assert_eq!(cache.reused(), before);
    }

    /// Reports one extent over the whole disk: every chunk is read and
    /// checked for zeros instead of being skipped.
    /// Reads that reach past the second field fail (`u64::MAX`: never).
    struct Loose<'a>(&'a dyn DiskView, u64);
    impl DiskView for Loose<'_> {
        fn len(&self) -> u64 {
            self.0.len()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
            if offset + buf.len() as u64 > self.1 {
                bail!("injected read error at {offset}");
            }
            self.0.read_at(buf, offset)
        }
        fn data_extents(&self) -> Result<Vec<Range<u64>>> {
            Ok(std::iter::once(0..self.len()).collect())
        }
    }

    #[test]
    fn output_depends_on_content_only() {
        let dir = tempfile::tempdir().unwrap();
        let fx = fixture(dir.path(), 20 * MIB + 512);
        let view = FileView::open(&fx.base).unwrap();
        for kind in [Compressor::Gzip, Compressor::Zstd, Compressor::Xz] {
            let chunk = 1 << 20;
            let mut outs = Vec::new();
            for (i, (v, threads)) in [
                (&view as &dyn DiskView, 1),
                (&view, 5),
                (&Loose(&view, u64::MAX), 2),
            ]
            .into_iter()
            .enumerate()
            {
                let out = dir.path().join(format!("det-{kind}-{i}"));
                let opts = CompressOpts::new(kind, 3, threads).with_chunk(chunk);
                compress_view(v, &out, &opts, &|_| {}).unwrap();
                outs.push(std::fs::read(&out).unwrap());
            }
            assert!(
                outs[0] == outs[1],
                "{kind}: thread count changed the output"
            );
            assert!(outs[0] == outs[2], "{kind}: extents changed the output");
        }
    }

    #[test]
    fn large_sparse_disk_is_fast_and_valid() {
        let dir = tempfile::tempdir().unwrap();
        let len = 2 * GIB;
        let path = dir.path().join("big.raw");
        make_sparse(
            &path,
            len,
            &[
                (MIB, 2 * MIB, Fill::Text),
                (GIB + 5, 3 * MIB, Fill::Random),
                (len - MIB, MIB, Fill::Text),
            ],
            99,
        );
        let view = FileView::open(&path).unwrap();
        // Expected hash by plain reads of the file (coreutils sha256sum has
        // no SHA-NI and takes half a minute on 8 GiB).
        let mut h = Sha256::new();
        std::io::copy(&mut std::fs::File::open(&path).unwrap(), &mut h).unwrap();
        let want = hex::encode(h.finalize());
        let mut checks = Vec::new();
        for kind in [Compressor::Gzip, Compressor::Xz, Compressor::Zstd] {
            let out = dir
                .path()
                .join(format!("big.{}", kind.extension().unwrap()));
            let t = Instant::now();
            let opts = CompressOpts::new(kind, kind.default_level(), 2);
            let w = compress_view(&view, &out, &opts, &|_| {}).unwrap();
            eprintln!(
                "{kind}: 2 GiB sparse disk (6 MiB data) in {:.2?} -> {} bytes",
                t.elapsed(),
                w.size
            );
            assert_eq!(w.uncompressed_size, len);
            assert_eq!(w.uncompressed_sha256, want);
            assert_eq!(w.sha256, sha256sum(&out));
            checks.push((kind, out));
        }
        // `-t` decompresses everything and checks every member's CRC (gzip),
        // stream's CRC64 (xz) or frame's xxhash (zstd). The three run at
        // once, after the timed part.
        let checks: Vec<_> = checks
            .into_iter()
            .map(|(kind, out)| {
                let child = Command::new(tool(kind))
                    .args(["-t", "-q"])
                    .arg(&out)
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                (kind, out, child, Instant::now())
            })
            .collect();
        for (kind, out, child, t) in checks {
            let res = child.wait_with_output().unwrap();
            assert!(
                res.status.success(),
                "{kind} -t: {}",
                String::from_utf8_lossy(&res.stderr)
            );
            eprintln!("{kind} -t passed (all checks: {:.2?} so far)", t.elapsed());
            // The small tests check every kind byte for byte; here the
            // full content goes through one decompressor.
            if kind == Compressor::Zstd {
                assert_eq!(decompressed_sha256(kind, &out), (want.clone(), len));
            }
        }
        let t = Instant::now();
        let out = dir.path().join("big.copy");
        let opts = CompressOpts::new(Compressor::None, 0, 2);
        let w = compress_view(&view, &out, &opts, &|_| {}).unwrap();
        eprintln!("none: 2 GiB sparse disk in {:.2?}", t.elapsed());
        assert_eq!(w.sha256, want);
        assert!(allocated(&out) < 16 * MIB);
    }

    #[test]
    fn empty_disk_gives_valid_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.raw");
        std::fs::File::create(&path).unwrap();
        let view = FileView::open(&path).unwrap();
        for kind in Compressor::ALL {
            let (w, _) = roundtrip(kind, 0, 2, &view, dir.path());
            assert_eq!(w.uncompressed_size, 0);
        }
    }

    #[test]
    fn errors_name_the_output_and_bad_levels_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fx = fixture(dir.path(), 16 * MIB);
        let view = FileView::open(&fx.base).unwrap();
        let out = dir.path().join("missing/dir/disk.raw.gz");
        let opts = CompressOpts::new(Compressor::Gzip, 6, 2);
        let err = compress_view(&view, &out, &opts, &|_| {}).unwrap_err();
        assert!(
            format!("{err:#}").contains("missing/dir/disk.raw.gz"),
            "{err:#}"
        );
        let out = dir.path().join("x.xz");
        let opts = CompressOpts::new(Compressor::Xz, 10, 2);
        let err = compress_view(&view, &out, &opts, &|_| {}).unwrap_err();
        assert!(format!("{err:#}").contains("level 10"), "{err:#}");
        let opts = CompressOpts::new(Compressor::Gzip, 0, 2);
        assert!(compress_view(&view, &out, &opts, &|_| {}).is_err());
    }

    /// A view whose reads fail past some offset: the error comes back with
    /// the output's name, and no thread is left hanging.
    #[test]
    fn read_errors_stop_the_workers() {
        let dir = tempfile::tempdir().unwrap();
        let fx = fixture(dir.path(), 32 * MIB);
        let view = FileView::open(&fx.base).unwrap();
        let out = dir.path().join("fail.zst");
        let f = Loose(&view, 9 * MIB);
        let opts = CompressOpts::new(Compressor::Zstd, 3, 3).with_chunk(MIB as usize);
        let err = compress_view(&f, &out, &opts, &|_| {}).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("injected read error"), "{msg}");
        assert!(msg.contains("fail.zst"), "{msg}");
    }
}
