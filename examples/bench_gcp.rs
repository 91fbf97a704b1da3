//! The GCP tarball writer on a real raw disk, against `tar -cSf - | gzip -9`
//! and `| pigz -9` (wall and CPU time, output size), or, with `--map`, the
//! size of the sparse map for several minimum hole sizes (the trade-off
//! behind `formats::gcp::MIN_HOLE`).
//!
//! ```text
//! cargo run --release --example bench_gcp -- DISK.raw [--rounds N] [--map]
//! ```
use anyhow::{bail, Context, Result};
use bootimage_gen::formats::gcp::{map_summary, sparse_map, write_gcp_tar_gz, GRANULE, MIN_HOLE};
use bootimage_gen::io::view::{DiskView, FileView};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut disk, mut rounds, mut map) = (None, 1usize, false);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => rounds = args.next().context("--rounds N")?.parse()?,
            "--map" => map = true,
            s if !s.starts_with('-') => disk = Some(PathBuf::from(s)),
            s => bail!("unknown argument {s}"),
        }
    }
    let disk = disk.context("usage: bench_gcp DISK.raw [--rounds N] [--map]")?;
    let view = FileView::open(&disk)?;
    if map {
        return map_study(&disk, &view);
    }
    let dir = tempfile::tempdir_in(disk.parent().unwrap_or(Path::new(".")))?;
    let t = Instant::now();
    let m = sparse_map(&view)?;
    println!(
        "scan: {:.2?}, {} entries, {} MiB stored",
        t.elapsed(),
        m.len(),
        m.iter().map(|r| r.end - r.start).sum::<u64>() >> 20
    );
    for _ in 0..rounds {
        let out = dir.path().join("ours.tar.gz");
        let (t, cpu) = (Instant::now(), cpu_seconds(libc::RUSAGE_SELF));
        let s = write_gcp_tar_gz(&view, &out, 0, 0, &|_| {})?;
        println!(
            "ours: {:.2?} wall, {:.1} s CPU, {} bytes out",
            t.elapsed(),
            cpu_seconds(libc::RUSAGE_SELF) - cpu,
            s.written.size
        );
        for z in ["gzip -9", "pigz -9"] {
            let (t, cpu) = (Instant::now(), cpu_seconds(libc::RUSAGE_CHILDREN));
            let reference = dir.path().join("ref.tar.gz");
            let sh = format!(
                "tar --format=oldgnu -cSf - -C '{}' '{}' | {z} > '{}'",
                disk.parent().unwrap_or(Path::new(".")).display(),
                disk.file_name()
                    .context("disk file name")?
                    .to_string_lossy(),
                reference.display()
            );
            let st = Command::new("sh").arg("-c").arg(&sh).status()?;
            if !st.success() {
                bail!("`{sh}` failed ({st}); needs tar, gzip and pigz");
            }
            println!(
                "tar -cSf | {z}: {:.2?} wall, {:.1} s CPU, {} bytes out",
                t.elapsed(),
                cpu_seconds(libc::RUSAGE_CHILDREN) - cpu,
                std::fs::metadata(&reference)?.len()
            );
        }
    }
    Ok(())
}

fn map_study(disk: &Path, view: &FileView) -> Result<()> {
    let extents = view.data_extents()?;
    let allocated: u64 = extents.iter().map(|r| r.end - r.start).sum();
    println!(
        "{}: {} MiB, {} allocated extents, {} MiB allocated",
        disk.display(),
        view.len() >> 20,
        extents.len(),
        allocated >> 20
    );
    for min_hole in [GRANULE, 16 * KIB, MIN_HOLE, 256 * KIB, MIB] {
        let t = Instant::now();
        let s = map_summary(view, min_hole)?;
        println!(
            "min hole {:>7} KiB: {:>7} entries ({} header blocks), {:.1} MiB stored, scan {:.2?}",
            min_hole >> 10,
            s.entries,
            s.header_blocks,
            s.stored as f64 / MIB as f64,
            t.elapsed()
        );
    }
    Ok(())
}

/// CPU seconds (user + system) of this process (`RUSAGE_SELF`) or of its
/// waited-for children (`RUSAGE_CHILDREN`).
fn cpu_seconds(who: i32) -> f64 {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    unsafe { libc::getrusage(who, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
