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

/// Copy the data of `src` (its holes skipped, [`view::file_extents`]) into
/// `dst` at byte `at`: a filesystem image made as a file placed into its
/// partition of a disk. Returns the bytes copied.
pub fn place_file(src: &Path, dst: &std::fs::File, at: u64) -> Result<u64> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(src).with_context(|| format!("opening {}", src.display()))?;
    let len = f.metadata()?.len();
    let mut buf = vec![0u8; 4 << 20];
    let mut copied = 0;
    for r in view::file_extents(&f, 0..len)? {
        let mut pos = r.start;
        while pos < r.end {
            let n = ((r.end - pos) as usize).min(buf.len());
            view::read_file_at(&f, &mut buf[..n], pos)?;
            dst.write_all_at(&buf[..n], at + pos).with_context(|| {
                format!("writing {} into the disk at {}", src.display(), at + pos)
            })?;
            pos += n as u64;
            copied += n as u64;
        }
    }
    Ok(copied)
}

#[cfg(test)]
mod place_tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn places_the_data_at_the_offset_and_keeps_holes() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("fs.img");
        let f = create_sized(&src, 8 << 20).unwrap();
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(b"tail", (8 << 20) - 4).unwrap();
        drop(f);
        let disk = create_sized(&d.path().join("disk"), 16 << 20).unwrap();
        disk.write_all_at(b"gpt!", 0).unwrap();
        let copied = place_file(&src, &disk, 1 << 20).unwrap();
        assert!(copied < 8 << 20, "the hole was copied: {copied} bytes");
        let mut b = [0u8; 4];
        disk.read_exact_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"gpt!");
        disk.read_exact_at(&mut b, 1 << 20).unwrap();
        assert_eq!(&b, b"head");
        disk.read_exact_at(&mut b, (9 << 20) - 4).unwrap();
        assert_eq!(&b, b"tail");
        disk.read_exact_at(&mut b, 4 << 20).unwrap();
        assert_eq!(b, [0; 4]);
    }
}
