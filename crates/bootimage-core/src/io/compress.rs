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
//!
//! This file holds the entry point, [`compress_view`], and its options;
//! the kinds are in `compressor.rs`, the per-chunk encoders in
//! `encoder.rs`, the shared-chunk cache in `cache.rs` and the parallel run
//! in `chunked.rs`.
mod cache;
mod chunked;
mod compressor;
mod encoder;
#[cfg(test)]
mod tests;

pub use super::buffers::Written;
pub use cache::ChunkCache;
pub(crate) use cache::{CacheKey, Codec};
pub use compressor::Compressor;

use super::sparse;
use super::view::DiskView;
use anyhow::{ensure, Context, Result};
use chunked::{run, Settings};
use std::path::Path;

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
