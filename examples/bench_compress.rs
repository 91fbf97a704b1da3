//! Throughput of the chunked parallel compressors against the usual tools
//! on the same data.
//!
//! ```text
//! cargo run --release --example bench_compress -- [DATA] [--threads N] [--chunks] [--quick]
//! ```
//!
//! DATA defaults to ~300 MiB of shared libraries concatenated from
//! /usr/lib/x86_64-linux-gnu (made once, at /tmp/bench_compress.data).
//! Every run is a child process, so its peak RSS (from `wait4`) is its own.
//! `--chunks` also tries other chunk sizes; `--quick` skips xz.
use anyhow::{bail, Context, Result};
use bootimage_gen::io::compress::{compress_view, CompressOpts, Compressor};
use bootimage_gen::io::view::FileView;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const MIB: u64 = 1 << 20;
const DEFAULT_DATA: &str = "/tmp/bench_compress.data";
const DATA_SIZE: u64 = 300 * MIB;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--one") {
        return one(&args[1..]);
    }
    let mut data = None;
    let mut threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let (mut chunks, mut quick) = (false, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--threads" => threads = it.next().context("--threads N")?.parse()?,
            "--chunks" => chunks = true,
            "--quick" => quick = true,
            s if !s.starts_with('-') => data = Some(PathBuf::from(s)),
            s => bail!("unknown argument {s}"),
        }
    }
    let data = match data {
        Some(d) => d,
        None => make_data(Path::new(DEFAULT_DATA))?,
    };
    let size = std::fs::metadata(&data)?.len();
    let work = tempfile::tempdir_in("/tmp")?;
    println!(
        "data: {} ({:.1} MiB), {threads} threads",
        data.display(),
        size as f64 / MIB as f64
    );
    println!(
        "{:<34} {:>9} {:>12} {:>7} {:>9}",
        "compressor", "MiB/s", "bytes", "ratio", "peak RSS"
    );
    let sha = sha_speed(&data)?;
    println!("{:<34} {:>9.0}", "sha256 (sha2 crate, 1 thread)", sha);
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut me: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut me) };
    println!(
        "(tools' peak RSS comes from wait4 and is at least this process's {} MiB)",
        me.ru_maxrss / 1024
    );

    let mut runs: Vec<(Compressor, u32, usize)> = vec![
        (Compressor::Gzip, 6, 0),
        (Compressor::Zstd, 10, 0),
        (Compressor::Zstd, 3, 0),
        (Compressor::Xz, 9, 0),
    ];
    if chunks {
        runs.extend([
            (Compressor::Gzip, 6, MIB as usize),
            (Compressor::Gzip, 6, 16 * MIB as usize),
            (Compressor::Zstd, 10, 4 * MIB as usize),
            (Compressor::Zstd, 10, 16 * MIB as usize),
            (Compressor::Xz, 9, 16 * MIB as usize),
            (Compressor::Xz, 9, 64 * MIB as usize),
        ]);
    }
    let exe = std::env::current_exe()?;
    for (kind, level, chunk) in runs {
        if quick && kind == Compressor::Xz {
            continue;
        }
        let chunk = if chunk == 0 { kind.chunk_size() } else { chunk };
        let out = work.path().join("ours");
        let mut cmd = Command::new(&exe);
        cmd.args(["--one", kind.name(), &level.to_string(), &chunk.to_string()])
            .arg(&data)
            .arg(&out)
            .arg(threads.to_string());
        let name = format!("ours {kind} -{level} ({} MiB chunks)", chunk as u64 / MIB);
        report(&name, size, &out, cmd, None)?;
    }

    let (p, tt) = (threads.to_string(), format!("-T{threads}"));
    let tools: Vec<(String, Vec<&str>)> = vec![
        ("gzip -6".into(), vec!["gzip", "-6", "-c"]),
        (format!("pigz -6 -p{p}"), vec!["pigz", "-6", "-p", &p, "-c"]),
        (
            format!("zstd -10 {tt}"),
            vec!["zstd", "-q", "-10", &tt, "-c"],
        ),
        (format!("zstd -3 {tt}"), vec!["zstd", "-q", "-3", &tt, "-c"]),
        (format!("xz -9 {tt}"), vec!["xz", "-9", &tt, "-c"]),
        (format!("xz -6 {tt}"), vec!["xz", "-6", &tt, "-c"]),
    ];
    for (name, argv) in tools {
        if quick && argv[0] == "xz" {
            continue;
        }
        if !have(argv[0]) {
            println!("{name:<34} (not installed)");
            continue;
        }
        let out = work.path().join("tool");
        let mut cmd = Command::new(argv[0]);
        cmd.args(&argv[1..]).arg(&data);
        if let Err(e) = report(&name, size, &out, cmd, Some(&out)) {
            println!("{name:<34} failed: {e:#}");
        }
    }
    Ok(())
}

/// Child mode: `--one KIND LEVEL CHUNK DATA OUT THREADS`.
fn one(a: &[String]) -> Result<()> {
    let kind = Compressor::parse(&a[0])?;
    let level: u32 = a[1].parse()?;
    let chunk: usize = a[2].parse()?;
    let view = FileView::open(Path::new(&a[3]))?;
    let threads: usize = a[5].parse()?;
    let opts = CompressOpts::new(kind, level, threads).with_chunk(chunk);
    compress_view(&view, Path::new(&a[4]), &opts, &|_| {})?;
    // Our own peak RSS, for the parent (the wait4 figure also covers the
    // parent's memory: a vfork'ed child's exec keeps the old high-water mark).
    let status = std::fs::read_to_string("/proc/self/status")?;
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .context("no VmHWM")?;
    println!("{}", hwm.trim().trim_end_matches(" kB"));
    Ok(())
}

/// Run `cmd` (stdout to `stdout_to` if given), time it, read its peak RSS,
/// and print a row.
fn report(
    name: &str,
    size: u64,
    out: &Path,
    mut cmd: Command,
    stdout_to: Option<&Path>,
) -> Result<()> {
    if let Some(p) = stdout_to {
        cmd.stdout(File::create(p)?);
    } else {
        cmd.stdout(Stdio::piped());
    }
    let t = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("running {name}"))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; std's Child is not waited on again.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let secs = t.elapsed().as_secs_f64();
    if r != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{name} failed (status {status})");
    }
    let mut rss_kib = ru.ru_maxrss as u64;
    if let Some(mut o) = child.stdout.take() {
        let mut s = String::new();
        o.read_to_string(&mut s)?;
        rss_kib = s.trim().parse().context("child's VmHWM")?;
    }
    let bytes = std::fs::metadata(out)?.len();
    println!(
        "{:<34} {:>9.1} {:>12} {:>6.1}% {:>5} MiB",
        name,
        size as f64 / MIB as f64 / secs,
        bytes,
        100.0 * bytes as f64 / size as f64,
        rss_kib / 1024
    );
    std::fs::remove_file(out)?;
    Ok(())
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// MiB/s of the sha2 crate over the data (warm page cache).
fn sha_speed(data: &Path) -> Result<f64> {
    use sha2::Digest;
    let f = File::open(data)?;
    let mut buf = vec![0u8; 4 << 20];
    let mut h = sha2::Sha256::new();
    let (mut off, t) = (0u64, Instant::now());
    loop {
        let n = f.read_at(&mut buf, off)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        off += n as u64;
    }
    let _ = h.finalize();
    Ok(off as f64 / MIB as f64 / t.elapsed().as_secs_f64())
}

/// Concatenate the shared libraries of the system up to [`DATA_SIZE`].
fn make_data(path: &Path) -> Result<PathBuf> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() == DATA_SIZE) {
        return Ok(path.to_owned());
    }
    let mut libs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/x86_64-linux-gnu")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains(".so"))
                && std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
        })
        .collect();
    libs.sort();
    let tmp = path.with_extension("tmp");
    let mut out = File::create(&tmp)?;
    let mut left = DATA_SIZE;
    for l in libs {
        // Streamed, so that this process stays small (see `report`).
        left -= std::io::copy(&mut File::open(&l)?.take(left), &mut out)?;
        if left == 0 {
            break;
        }
    }
    if left > 0 {
        bail!("not enough shared libraries for {DATA_SIZE} bytes");
    }
    out.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(path.to_owned())
}
