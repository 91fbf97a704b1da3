//! Throughput of the streamOptimized VMDK writer against `qemu-img convert`
//! on the same sparse disk.
//!
//! ```text
//! cargo run --release --example bench_vmdk -- [DATA] [--threads N] [--ova OUT]
//! ```
//!
//! DATA (default: ~300 MiB of shared libraries concatenated from
//! /usr/lib/x86_64-linux-gnu, made once at /tmp/bench_compress.data) is laid
//! out in three pieces in a sparse 2 GiB raw file, which both writers
//! convert. Throughput is MiB of DATA per second. Every run is a child
//! process, so its peak RSS (from `wait4`) is its own. `--ova OUT` also
//! writes an OVA of the disk, for inspection.
use anyhow::{bail, Context, Result};
use bootimage_gen::formats::ova::{write_ova, OvaParams};
use bootimage_gen::formats::vmdk::{write_vmdk, VmdkOptions};
use bootimage_gen::io::view::FileView;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const MIB: u64 = 1 << 20;
const DEFAULT_DATA: &str = "/tmp/bench_compress.data";
const DATA_SIZE: u64 = 300 * MIB;
const DISK_SIZE: u64 = 2048 * MIB;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--one") {
        return one(&args[1..]);
    }
    let mut data = None;
    let mut ova = None;
    let mut threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--threads" => threads = it.next().context("--threads N")?.parse()?,
            "--ova" => ova = Some(PathBuf::from(it.next().context("--ova OUT")?)),
            s if !s.starts_with('-') => data = Some(PathBuf::from(s)),
            s => bail!("unknown argument {s}"),
        }
    }
    let data = match data {
        Some(d) => d,
        None => make_data(Path::new(DEFAULT_DATA))?,
    };
    let work = tempfile::tempdir_in("/tmp")?;
    let raw = work.path().join("disk.raw");
    let data_len = make_disk(&data, &raw)?;
    // Warm the page cache so that neither run pays for the first read.
    std::io::copy(&mut File::open(&raw)?, &mut std::io::sink())?;
    println!(
        "disk: {} MiB sparse holding {:.1} MiB of {}",
        DISK_SIZE / MIB,
        data_len as f64 / MIB as f64,
        data.display()
    );
    println!(
        "{:<40} {:>6} {:>7} {:>6} {:>9} {:>11} {:>8}",
        "writer", "wall s", "MiB/s", "CPU s", "MiB/CPU-s", "bytes", "peak RSS"
    );
    let me = std::env::current_exe()?;
    let mut runs: Vec<(String, Command)> = Vec::new();
    let mut counts = vec![1, threads];
    counts.dedup();
    for (t, level) in counts.iter().map(|&t| (t, 6)).chain([(threads, 1)]) {
        let mut c = Command::new(&me);
        c.args(["--one", &t.to_string(), &level.to_string()])
            .arg(&raw)
            .arg(work.path().join(format!("ours-{t}-{level}.vmdk")));
        runs.push((format!("bootimage-gen, {t} thread(s), zlib {level}"), c));
    }
    for (label, opts) in [
        (
            "qemu-img convert (cosa's options)",
            "adapter_type=lsilogic,subformat=streamOptimized,compat6",
        ),
        (
            "qemu-img convert (no compat6)",
            "adapter_type=lsilogic,subformat=streamOptimized",
        ),
    ] {
        let mut c = Command::new("qemu-img");
        c.args(["convert", "-f", "raw", "-O", "vmdk", "-o", opts])
            .arg(&raw)
            .arg(work.path().join(format!("qemu-{}.vmdk", runs.len())));
        runs.push((label.to_string(), c));
    }
    for (label, mut c) in runs {
        let out = PathBuf::from(c.get_args().last().unwrap());
        let (secs, cpu, rss) = timed(&mut c)?;
        let size = std::fs::metadata(&out)?.len();
        let mib = data_len as f64 / MIB as f64;
        println!(
            "{label:<40} {secs:>6.2} {:>7.1} {cpu:>6.2} {:>9.1} {size:>11} {:>4} MiB",
            mib / secs,
            mib / cpu,
            rss / 1024
        );
        // Both outputs must hold the disk.
        let st = Command::new("qemu-img")
            .args(["compare", "-q", "-f", "vmdk", "-F", "raw"])
            .arg(&out)
            .arg(&raw)
            .status()?;
        if !st.success() {
            bail!("{} differs from the disk", out.display());
        }
        std::fs::remove_file(&out)?;
    }
    if let Some(ova) = ova {
        let mut p = OvaParams::new("bench-1.0", "rhel9_64Guest", 15, true, "1.0");
        p.product = Some("bench".into());
        p.vmdk.threads = threads;
        let s = write_ova(&FileView::open(&raw)?, &ova, &p, &|_| {})?;
        println!("wrote {}: {s:?}", ova.display());
    }
    Ok(())
}

/// Child mode: `--one THREADS LEVEL RAW OUT`.
fn one(args: &[String]) -> Result<()> {
    let [threads, level, raw, out] = args else {
        bail!("usage: --one THREADS LEVEL RAW OUT");
    };
    let view = FileView::open(Path::new(raw))?;
    write_vmdk(
        &view,
        Path::new(out),
        &VmdkOptions {
            compression_level: level.parse()?,
            threads: threads.parse()?,
            ..Default::default()
        },
        &|_| {},
    )?;
    Ok(())
}

/// Run `c`; wall seconds, CPU seconds (user + system) and peak RSS in KiB
/// (from `wait4`).
fn timed(c: &mut Command) -> Result<(f64, f64, i64)> {
    let start = Instant::now();
    let child = c.stdout(Stdio::null()).spawn()?;
    let mut status = 0i32;
    // SAFETY: an all-zero rusage is valid; wait4 fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child with valid out-pointers.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    let secs = start.elapsed().as_secs_f64();
    if pid < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    let st = std::process::ExitStatus::from_raw(status);
    if !st.success() {
        bail!("{c:?} failed: {st}");
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok((secs, tv(ru.ru_utime) + tv(ru.ru_stime), ru.ru_maxrss))
}

/// Lay `data` out in three pieces of a sparse `DISK_SIZE` file; returns the
/// bytes placed. Streams through a small buffer: a large heap here would
/// show up in the children's peak RSS (Linux keeps the high-water mark
/// across fork and exec).
fn make_disk(data: &Path, raw: &Path) -> Result<u64> {
    let mut src = File::open(data).with_context(|| format!("opening {}", data.display()))?;
    let len = src.metadata()?.len();
    let f = File::create(raw)?;
    f.set_len(DISK_SIZE)?;
    let third = len.div_ceil(3);
    let mut buf = vec![0u8; MIB as usize];
    for (i, at) in [MIB, 700 * MIB, 1500 * MIB + 12_345]
        .into_iter()
        .enumerate()
    {
        let mut left = third.min(len - i as u64 * third);
        let mut pos = at;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            src.read_exact(&mut buf[..n])?;
            f.write_all_at(&buf[..n], pos)?;
            pos += n as u64;
            left -= n as u64;
        }
    }
    f.sync_all()?;
    Ok(len)
}

/// Concatenate shared libraries into `path` up to `DATA_SIZE` (once).
fn make_data(path: &Path) -> Result<PathBuf> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() >= DATA_SIZE) {
        return Ok(path.to_owned());
    }
    let mut out = File::create(path)?;
    let mut left = DATA_SIZE;
    let mut libs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/x86_64-linux-gnu")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.to_string_lossy().contains(".so"))
        .collect();
    libs.sort();
    let mut buf = Vec::new();
    for lib in libs {
        if left == 0 {
            break;
        }
        buf.clear();
        File::open(&lib)?.read_to_end(&mut buf)?;
        let n = (buf.len() as u64).min(left) as usize;
        out.write_all(&buf[..n])?;
        left -= n as u64;
    }
    if left > 0 {
        bail!("not enough shared libraries for {} MiB", DATA_SIZE / MIB);
    }
    Ok(path.to_owned())
}
