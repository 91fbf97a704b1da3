//! The chunked, parallel run behind [`compress_view`](super::compress_view):
//! settings in, the view cut into chunks; workers read and compress the
//! chunks that touch data (through the [`ChunkCache`] for shared ranges),
//! every all-zero chunk reuses a compressed zero chunk of its length (at
//! most two are made), and the pieces go
//! out in order to the file while the input is hashed on its own thread.
//! Out: the [`Written`] sizes and hashes.
use super::cache::{CacheKey, ChunkCache, Codec};
use super::compressor::{Compressor, MIB};
use super::encoder::Encoder;
use crate::io::buffers::{is_zero, BufPool, HashThread, Written};
use crate::io::sparse;
use crate::io::view::DiskView;
use crate::util::sha256::Sha256;
use anyhow::{ensure, Context, Result};
use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Output buffer of the writer.
const WRITE_BUFFER: usize = MIB;

/// Validated settings of one compression run
/// ([`compress_view`](super::compress_view)).
#[derive(Clone, Copy)]
pub(super) struct Settings {
    pub(super) kind: Compressor,
    pub(super) level: u32,
    pub(super) chunk: usize,
    /// Workers (at least one).
    pub(super) threads: usize,
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

/// Compress `view` into `out` as `settings` say; `progress` gets the input
/// bytes done so far.
pub(super) fn run(
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

    let result = crate::io::ordered::run(
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
