//! Sparse raw output and hashing of disk views: all-zero blocks are never
//! written (holes stay holes), and SHA-256 runs on its own thread over the
//! full logical content, zeros included.
//!
//! The buffer pool and hashing thread it runs on are in `buffers.rs`.
use super::buffers::{is_zero, BufPool, HashThread, Written};
use super::view::DiskView;
use anyhow::{Context, Result};
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Bytes read from the view per step by the sparse writer and by
/// [`sha256_view`]: large enough for sequential throughput, small enough
/// that a few of them in flight cost little memory.
const IO_BLOCK: usize = 4 << 20;
/// Zero-detection granule of the sparse writer, aligned to absolute disk
/// offsets: 4 KiB is the block size of the file systems the output lands
/// on (ext4, xfs, btrfs), so a skipped granule is a whole hole block.
const HOLE_GRANULE: u64 = 4096;
/// Buffers in flight between the reader and the hashing thread.
const IO_BUFFERS: usize = 4;

/// `view`'s data extents cut to its length, sorted and non-overlapping.
pub fn clamped_extents(view: &dyn DiskView) -> Result<Vec<Range<u64>>> {
    let len = view.len();
    let mut out: Vec<Range<u64>> = Vec::new();
    for r in view.data_extents()? {
        let r = r.start.min(len)..r.end.min(len);
        if r.start >= r.end {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.end >= r.start => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    Ok(out)
}

/// Write `view` to `out` as a raw, sparse file: the file is created (or
/// truncated), sized to `view.len()`, and only 4 KiB blocks holding a
/// non-zero byte are written, so holes in the view, and zeros written in
/// it, stay holes. The SHA-256 covers the full logical content. The file is
/// fsynced. `progress` gets the number of input bytes done so far.
pub fn write_sparse(
    view: &dyn DiskView,
    out: &Path,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Written> {
    write_sparse_inner(view, out, progress, true)
        .with_context(|| format!("writing raw image {}", out.display()))
}

/// [`write_sparse`] without the SHA-256 (its fields are left empty): for
/// copies nobody publishes (`--debug-raw-dir`), where hashing a 100 GiB
/// disk's zeros would cost minutes of a core.
pub fn write_sparse_unhashed(view: &dyn DiskView, out: &Path) -> Result<()> {
    write_sparse_inner(view, out, &|_| {}, false)
        .map(|_| ())
        .with_context(|| format!("writing raw image {}", out.display()))
}

fn write_sparse_inner(
    view: &dyn DiskView,
    out: &Path,
    progress: &(dyn Fn(u64) + Sync),
    hash: bool,
) -> Result<Written> {
    let len = view.len();
    let file = crate::io::create_sized(out, len)?;

    let pool = BufPool::new(IO_BLOCK, IO_BUFFERS);
    let hasher = if hash {
        Some(HashThread::spawn(pool.clone(), IO_BUFFERS)?)
    } else {
        None
    };
    let zeros = |n: u64| hasher.as_ref().map_or(Ok(()), |h| h.zeros(n));
    let mut pos = 0u64;
    for r in clamped_extents(view)? {
        zeros(r.start - pos)?;
        pos = r.start;
        progress(pos);
        while pos < r.end {
            crate::util::cancel::check()?;
            let n = (r.end - pos).min(IO_BLOCK as u64) as usize;
            let mut buf = pool.get().context("buffer pool closed")?;
            view.read_at(&mut buf[..n], pos)?;
            write_nonzero(&file, &buf[..n], pos)?;
            match &hasher {
                Some(h) => h.data(buf, n)?,
                None => pool.put(buf),
            }
            pos += n as u64;
            progress(pos);
        }
    }
    zeros(len - pos)?;
    progress(len);
    let sha256 = match hasher {
        Some(h) => {
            let (sha256, hashed) = h.finish()?;
            debug_assert_eq!(hashed, len);
            sha256
        }
        None => String::new(),
    };
    file.sync_all().context("syncing the output file")?;
    Ok(Written {
        size: len,
        sha256: sha256.clone(),
        uncompressed_size: len,
        uncompressed_sha256: sha256,
    })
}

/// Write the non-zero granules of `buf`, which sits at `offset` of the
/// disk, merging neighbours into one `pwrite`. Granules are aligned to
/// absolute offsets, so partial ones at both ends are possible.
fn write_nonzero(file: &File, buf: &[u8], offset: u64) -> Result<()> {
    let end = offset + buf.len() as u64;
    let mut run: Option<u64> = None; // start of the pending non-zero run
    let mut pos = offset;
    while pos < end {
        let next = ((pos / HOLE_GRANULE + 1) * HOLE_GRANULE).min(end);
        let g = &buf[(pos - offset) as usize..(next - offset) as usize];
        if is_zero(g) {
            if let Some(s) = run.take() {
                write_range(file, buf, offset, s..pos)?;
            }
        } else if run.is_none() {
            run = Some(pos);
        }
        pos = next;
    }
    if let Some(s) = run {
        write_range(file, buf, offset, s..end)?;
    }
    Ok(())
}

fn write_range(file: &File, buf: &[u8], offset: u64, r: Range<u64>) -> Result<()> {
    let data = &buf[(r.start - offset) as usize..(r.end - offset) as usize];
    file.write_all_at(data, r.start)
        .with_context(|| format!("writing {} bytes at offset {}", data.len(), r.start))
}

/// Lower-case hex SHA-256 of the full content of `view` (holes hash as
/// zeros without being read). Reading and hashing overlap.
pub fn sha256_view(view: &dyn DiskView) -> Result<String> {
    let pool = BufPool::new(IO_BLOCK, IO_BUFFERS);
    let hasher = HashThread::spawn(pool.clone(), IO_BUFFERS)?;
    let mut pos = 0u64;
    for r in clamped_extents(view)? {
        hasher.zeros(r.start - pos)?;
        pos = r.start;
        while pos < r.end {
            crate::util::cancel::check()?;
            let n = (r.end - pos).min(IO_BLOCK as u64) as usize;
            let mut buf = pool.get().context("buffer pool closed")?;
            view.read_at(&mut buf[..n], pos)?;
            hasher.data(buf, n)?;
            pos += n as u64;
        }
    }
    hasher.zeros(view.len() - pos)?;
    Ok(hasher.finish()?.0)
}

/// Helpers shared by the tests of the I/O and format modules.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;
    use crate::io::view::FileView;
    use std::path::PathBuf;
    use std::process::Command;

    /// How a test region is filled.
    #[derive(Clone, Copy, Debug)]
    pub enum Fill {
        /// xorshift bytes: incompressible.
        Random,
        /// Text-like, compressible bytes.
        Text,
        /// Written zeros: allocated on disk, but all zero.
        Zeros,
    }

    /// Deterministic test bytes without a rand crate (xorshift64*).
    pub struct Rng(pub u64);
    impl Rng {
        pub fn fill(&mut self, buf: &mut [u8]) {
            for chunk in buf.chunks_mut(8) {
                self.0 ^= self.0 >> 12;
                self.0 ^= self.0 << 25;
                self.0 ^= self.0 >> 27;
                let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
                chunk.copy_from_slice(&v[..chunk.len()]);
            }
        }
        pub fn text(&mut self, buf: &mut [u8]) {
            const WORDS: [&[u8]; 8] = [
                b"ostree ",
                b"deploy ",
                b"kernel ",
                b"console=ttyS0 ",
                b"rhcos ",
                b"\n",
                b"0x7f454c46 ",
                b"boot ",
            ];
            let mut i = 0;
            let mut r = [0u8; 8];
            while i < buf.len() {
                self.fill(&mut r);
                let w = WORDS[(r[0] % 8) as usize];
                let n = w.len().min(buf.len() - i);
                buf[i..i + n].copy_from_slice(&w[..n]);
                i += n;
            }
        }
    }

    /// Create a sparse file of `len` bytes at `path` with the regions
    /// `(offset, length, fill)` written.
    pub fn make_sparse(path: &Path, len: u64, regions: &[(u64, u64, Fill)], seed: u64) {
        let f = File::create(path).unwrap();
        f.set_len(len).unwrap();
        let mut rng = Rng(seed | 1);
        let mut buf = vec![0u8; 1 << 20];
        for &(off, n, fill) in regions {
            let mut done = 0;
            while done < n {
                let k = (n - done).min(buf.len() as u64) as usize;
                match fill {
                    Fill::Random => rng.fill(&mut buf[..k]),
                    Fill::Text => rng.text(&mut buf[..k]),
                    Fill::Zeros => buf[..k].fill(0),
                }
                f.write_all_at(&buf[..k], off + done).unwrap();
                done += k as u64;
            }
        }
        f.sync_all().unwrap();
    }

    /// The whole content of a (small) view.
    pub fn view_bytes(v: &dyn DiskView) -> Vec<u8> {
        let mut b = vec![0xa5u8; v.len() as usize];
        v.read_at(&mut b, 0).unwrap();
        b
    }

    /// `sha256sum` of a file, by the coreutils tool.
    pub fn sha256sum(path: &Path) -> String {
        let out = Command::new("sha256sum").arg(path).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()[..64].to_string()
    }

    /// Allocated bytes of a file (st_blocks * 512).
    pub fn allocated(path: &Path) -> u64 {
        std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(path).unwrap()) * 512
    }

    /// A sparse base file and a Composite-ready patch file in `dir`.
    pub struct Fixture {
        pub base: PathBuf,
        pub patch: PathBuf,
    }

    /// Base of `len` bytes with random and text data at chunk-boundary and
    /// unaligned places, one allocated all-zero region, and a 1 MiB patch
    /// file with text in it.
    pub fn fixture(dir: &Path, len: u64) -> Fixture {
        const MIB: u64 = 1 << 20;
        let base = dir.join("base.raw");
        make_sparse(
            &base,
            len,
            &[
                (0, MIB + 3, Fill::Text),
                (4 * MIB - 5000, 10_000, Fill::Random),
                (7 * MIB + 12_345, 3 * MIB, Fill::Text),
                (12 * MIB, 2 * MIB, Fill::Zeros),
                (len - 1234, 1234, Fill::Random),
            ],
            0x1234,
        );
        let patch = dir.join("patch.bin");
        make_sparse(
            &patch,
            MIB,
            &[(100, 300_000, Fill::Text), (MIB - 7, 7, Fill::Random)],
            0x77,
        );
        Fixture { base, patch }
    }

    /// Open the base of a fixture.
    pub fn open(p: &Path) -> FileView {
        FileView::open(p).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use crate::io::view::{Composite, Patch};
    use std::sync::atomic::{AtomicU64, Ordering};

    const MIB: u64 = 1 << 20;

    #[test]
    fn is_zero_finds_a_single_byte_anywhere() {
        let mut b = vec![0u8; 4096 + 37];
        assert!(is_zero(&b));
        assert!(is_zero(&[]));
        for i in [0, 63, 64, 4095, 4096 + 36] {
            b[i] = 1;
            assert!(!is_zero(&b), "byte {i}");
            b[i] = 0;
        }
    }

    #[test]
    fn sparse_copy_keeps_holes_and_content() {
        let dir = tempfile::tempdir().unwrap();
        let len = 64 * MIB + 4096 + 100; // not a granule or block multiple
        let fx = fixture(dir.path(), len);
        let view = open(&fx.base);
        // The written-zeros region really is allocated in the source.
        assert!(allocated(&fx.base) >= 6 * MIB, "{}", allocated(&fx.base));

        let out = dir.path().join("out.raw");
        std::fs::write(&out, vec![1u8; 100]).unwrap(); // truncated, not kept
        let last = AtomicU64::new(0);
        let w = write_sparse(&view, &out, &|n| {
            assert!(n >= last.load(Ordering::Relaxed), "progress went back");
            last.store(n, Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(last.load(Ordering::Relaxed), len);
        assert_eq!(std::fs::metadata(&out).unwrap().len(), len);
        assert_eq!(w.size, len);
        assert_eq!(w.uncompressed_size, len);
        let sum = sha256sum(&out);
        assert_eq!(w.sha256, sum);
        assert_eq!(w.uncompressed_sha256, sum);
        assert_eq!(sha256sum(&fx.base), sum);
        let st = std::process::Command::new("cmp")
            .arg(&fx.base)
            .arg(&out)
            .status()
            .unwrap();
        assert!(st.success(), "cmp found a difference");
        // Data written: ~1+0.01+3 MiB + two partial blocks; the 2 MiB of
        // written zeros and the holes must not be allocated.
        let alloc = allocated(&out);
        assert!(alloc <= 5 * MIB, "output allocates {alloc} bytes");
        assert!(alloc >= 4 * MIB, "output allocates only {alloc} bytes");
        let du = std::process::Command::new("du")
            .args(["-k", "--apparent-size"])
            .arg(&out)
            .output()
            .unwrap();
        let du = String::from_utf8(du.stdout).unwrap();
        let k: u64 = du.split_whitespace().next().unwrap().parse().unwrap();
        assert_eq!(k, len.div_ceil(1024));
    }

    #[test]
    fn sparse_copy_of_a_composite_matches_its_reads() {
        let dir = tempfile::tempdir().unwrap();
        let fx = fixture(dir.path(), 24 * MIB);
        let base = open(&fx.base);
        let patch = Patch::from_file(&fx.patch, 7 * MIB, MIB).unwrap();
        // Zero-extended past the base, patch over base data.
        let c = Composite::new(&base, 40 * MIB + 512, vec![patch]).unwrap();
        let out = dir.path().join("c.raw");
        let w = write_sparse(&c, &out, &|_| {}).unwrap();
        let want = view_bytes(&c);
        assert_eq!(std::fs::read(&out).unwrap(), want);
        assert_eq!(w.sha256, crate::util::sha256_hex(&want));
        assert_eq!(sha256_view(&c).unwrap(), w.sha256);
        assert!(allocated(&out) < 6 * MIB);
    }

    #[test]
    fn sha256_view_matches_sha256sum() {
        let dir = tempfile::tempdir().unwrap();
        let fx = fixture(dir.path(), 33 * MIB + 1);
        assert_eq!(sha256_view(&open(&fx.base)).unwrap(), sha256sum(&fx.base));
        let empty = dir.path().join("empty");
        File::create(&empty).unwrap();
        assert_eq!(
            sha256_view(&open(&empty)).unwrap(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn errors_name_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let fx = fixture(dir.path(), 16 * MIB);
        let out = dir.path().join("no/such/dir/x.raw");
        let err = write_sparse(&open(&fx.base), &out, &|_| {}).unwrap_err();
        assert!(format!("{err:#}").contains("no/such/dir/x.raw"), "{err:#}");
    }
}
