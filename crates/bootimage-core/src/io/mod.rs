//! Streaming I/O: disk views (base + delta), compression, sparse output.
pub mod buffers;
pub mod compress;
pub mod deflate;
pub mod ordered;
pub mod sparse;
pub mod view;

use anyhow::{Context, Result};
use std::path::Path;

/// Create (or truncate) `path` as a sparse file of `len` bytes, open for
/// reading and writing.
pub fn create_sized(path: &Path, len: u64) -> Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.set_len(len)
        .with_context(|| format!("sizing {} to {len} bytes", path.display()))?;
    Ok(f)
}
