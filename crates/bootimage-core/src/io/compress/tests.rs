//! Tests of [`super::compress_view`] and [`super::Compressor`]: every
//! kind round-trips through its own command-line tool (`gzip`, `xz`,
//! `zstd` must be installed), output depends on content only, the chunk
//! cache changes nothing, and errors name the output.
use super::*;
use crate::io::sparse::test_support::*;
use crate::io::view::{Composite, FileView, Patch};
use crate::util::sha256::Sha256;
use anyhow::bail;
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
