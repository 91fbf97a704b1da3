//! Checksums: a file streamed through SHA-256, and SHA256SUMS written in
//! `sha256sum -c` format from `(file name, hex)` pairs. In: files and
//! pairs; out: digests and the SHA256SUMS file.
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};

use super::checks::{check_file_name, is_sha256_hex};
use super::schema::SHA256SUMS;
use super::store::write_atomic;

/// Streams a file through SHA-256: `(lower-case hex, size in bytes)`.
pub fn sha256_file(path: &Path) -> Result<(String, u64)> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = crate::util::sha256::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        size += n as u64;
    }
    Ok((hex::encode(h.finalize()), size))
}

/// Writes `dir/SHA256SUMS` atomically in `sha256sum -c` format:
/// `<hex>  <name>\n` per file, sorted by name. Identical duplicates are
/// written once; conflicting duplicates and names sha256sum would have to
/// escape (newline, backslash) or that leave `dir` are errors.
pub fn write_sha256sums(dir: &Path, files: &[(String, String)]) -> Result<()> {
    let mut sums: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, hash) in files {
        check_file_name(name).context("SHA256SUMS")?;
        if !is_sha256_hex(hash) {
            bail!("SHA256SUMS: checksum {hash:?} of {name} is not 64 lower-case hex characters");
        }
        if let Some(prev) = sums.insert(name, hash) {
            if prev != hash {
                bail!("SHA256SUMS: {name} listed with two checksums ({prev} and {hash})");
            }
        }
    }
    let mut out = String::new();
    for (name, hash) in sums {
        out.push_str(hash);
        out.push_str("  ");
        out.push_str(name);
        out.push('\n');
    }
    write_atomic(dir, SHA256SUMS, out.as_bytes())
}
