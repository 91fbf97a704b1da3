//! [`ChunkCache`]: compressed chunks of the ranges several outputs share,
//! kept in one file and keyed by [`CacheKey`] (source, encoding, level,
//! chunk size, offset). An encoder asks it before compressing a shared
//! chunk and puts what it made; the cache counts what was reused, per
//! [`Codec`].
use super::compressor::Compressor;
use anyhow::{Context, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Mutex;

/// Compressed chunks of regions several outputs share (the base disk's
/// unchanged ranges, see
/// [`DiskView::shared_source`](crate::io::view::DiskView::shared_source)):
/// the first output compresses them, later ones reuse the bytes. Kept in a
/// file, so memory stays bounded whatever the disk size.
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
    /// The input's source ([`DiskView::shared_source`](crate::io::view::DiskView::shared_source)).
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
    /// A gzip member, xz stream or zstd frame ([`compress_view`](super::compress_view)).
    Stream(Compressor),
    /// The same, for content that is already compressed
    /// ([`DiskView::precompressed`](crate::io::view::DiskView::precompressed)).
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
