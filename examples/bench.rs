//! `make bench`: `generate <release> all` on the large test OS, timed per
//! stage, then the standard tools doing the same jobs on the same base disk,
//! and our steps as ratios to them. Prints a table and appends one JSON line
//! to `bench/results.jsonl`.
//!
//! ```text
//! cargo run --release --example bench -- RELEASE_REF [--work DIR] [--results FILE] [--no-single]
//!     [--platforms "P1 P2 ..."]   (default: all; `make bench BENCH_PLATFORMS=...`)
//! ```
//!
//! Every figure is measured in this run: stage boundaries are the tool's
//! `--progress json` events (a stage runs from its `start` event to the next
//! stage's, so nothing falls between stages), CPU time per stage is the
//! child's utime+stime (+ its reaped children's) read from /proc at each
//! event, peak RSS and the whole run's CPU come from `wait4`, bytes from the
//! files written. Each standard tool runs as its own child, timed the same way.
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

const MIB: f64 = 1048576.0;

/// One measured run of a child process.
#[derive(Debug, Clone, Default)]
struct Run {
    wall: f64,
    cpu: f64,
    /// Largest peak RSS of the process and its descendants (`wait4`).
    peak_rss: u64,
    /// Peak RSS of the process itself (its VmHWM, read at each progress
    /// event; 0 when not sampled).
    own_peak_rss: u64,
}

/// A stage of our run, from its progress events.
#[derive(Debug, Clone)]
struct Stage {
    name: String,
    start: f64,
    cpu_start: f64,
    wall: f64,
    cpu: f64,
    /// The file the step published (from its `done` detail), if any.
    file: Option<String>,
    bytes: u64,
}

/// A standard tool's measured run.
#[derive(Debug, Clone)]
struct Tool {
    name: String,
    run: Run,
    bytes: u64,
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut release = None;
    let top = std::env::current_dir()?;
    let mut work = top.join("bench/work");
    let mut results = top.join("bench/results.jsonl");
    let mut single = true;
    let mut platforms = "all".to_string();
    let mut compare_deploy = false;
    let mut compare_mkfs = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--compare-deploy" => compare_deploy = true,
            "--compare-mkfs" => compare_mkfs = true,
            "--work" => work = PathBuf::from(args.next().context("--work DIR")?),
            "--results" => results = PathBuf::from(args.next().context("--results FILE")?),
            "--no-single" => single = false,
            "--platforms" => platforms = args.next().context("--platforms \"P1 P2 ...\"")?,
            s if !s.starts_with('-') => release = Some(s.to_string()),
            s => bail!("unknown option {s}"),
        }
    }
    let release = release.context("usage: bench RELEASE_REF [--work DIR] [--results FILE]")?;
    let tool = top.join("target/release/bootimage-gen");
    if !tool.exists() {
        bail!(
            "{} is missing: run `cargo build --release --workspace --bins` first",
            tool.display()
        );
    }
    for (cmd, pkg) in [
        ("qemu-img", "qemu-utils"),
        ("gzip", "gzip"),
        ("pigz", "pigz"),
        ("zstd", "zstd"),
        ("tar", "tar"),
        ("mksquashfs", "squashfs-tools"),
        ("xorriso", "xorriso"),
        ("dd", "coreutils"),
    ] {
        if !on_path(cmd) {
            bail!("the benchmark needs `{cmd}`: install the Debian package {pkg} (scripts/install-deps.sh does)");
        }
    }
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("cleaning {}", work.display()))?;
    }
    std::fs::create_dir_all(&work)?;
    if compare_deploy {
        return compare_deploys(&tool, &release, &work, &results);
    }
    if compare_mkfs {
        return compare_mkfs_paths(&tool, &release, &work, &results);
    }
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let live = lists_live(&tool)?;

    // 1. Our run: everything, from a cold cache.
    eprintln!("bench: generate {release} {platforms}");
    let out_all = work.join("out-all");
    let (all_run, stages) = generate(
        &tool,
        &release,
        &platforms,
        &work.join("cache-all"),
        &out_all,
    )?;
    let cache_bytes = du(&work.join("cache-all"))?;
    std::fs::remove_dir_all(work.join("cache-all")).ok();

    // 2. The base disk, as raw: the metal image decompressed (sparse).
    let metal = stages
        .iter()
        .find(|s| s.name == "metal")
        .and_then(|s| s.file.clone())
        .context("the run published no metal image")?;
    let raw = work.join("base.raw");
    let metal_path = out_all.join(&metal);
    let dec = match metal.rsplit('.').next() {
        Some("gz") => "gzip -dc",
        Some("zst") => "zstd -dc",
        Some("xz") => "xz -dc",
        _ => "cat",
    };
    sh(&format!(
        "{dec} {} | dd of={} bs=1M conv=sparse status=none",
        q(&metal_path),
        q(&raw)
    ))?;
    let raw_len = std::fs::metadata(&raw)?.len();
    let raw_data = allocated(&raw)?;
    let cloud_len = cloud_size(&out_all)?.unwrap_or(raw_len);
    // The outputs are measured: free their space for the tools' outputs.
    std::fs::remove_dir_all(&out_all).ok();
    // Bytes of the stages that publish no file: the imported repository and
    // the base disk's data.
    let mut stages = stages;
    for s in &mut stages {
        match s.name.as_str() {
            "fetch+import" => s.bytes = cache_bytes,
            "base disk" => s.bytes = raw_data,
            _ => {}
        }
    }

    // 3. The standard tools, on that disk.
    let t = work.join("tools");
    std::fs::create_dir_all(&t)?;
    let mut tools: Vec<Tool> = Vec::new();
    let mut tool_run = |name: &str, cmd: String, out: &Path| -> Result<()> {
        eprintln!("bench: {name}");
        let r = measure(Command::new("bash").arg("-c").arg(&cmd))?;
        let bytes = if out.is_dir() {
            du(out)?
        } else {
            allocated(out)?
        };
        tools.push(Tool {
            name: name.into(),
            run: r,
            bytes,
        });
        Ok(())
    };
    let (r, tq) = (q(&raw), |n: &str| q(&t.join(n)));
    tool_run(
        "cp --sparse=always",
        format!("cp --sparse=always {r} {}", tq("cp.raw")),
        &t.join("cp.raw"),
    )?;
    std::fs::remove_file(t.join("cp.raw"))?;
    tool_run(
        "zstd -T0 -3",
        format!("zstd -q -T0 -3 -f {r} -o {}", tq("raw.zst")),
        &t.join("raw.zst"),
    )?;
    tool_run(
        "gzip -6",
        format!("gzip -6 -c {r} > {}", tq("raw.gz")),
        &t.join("raw.gz"),
    )?;
    tool_run(
        "pigz -6",
        format!("pigz -6 -c {r} > {}", tq("raw.pigz.gz")),
        &t.join("raw.pigz.gz"),
    )?;
    for f in ["raw.zst", "raw.gz", "raw.pigz.gz"] {
        std::fs::remove_file(t.join(f))?;
    }
    // The cloud formats have the cloud disk size: the same data, a longer hole.
    let cloud = work.join("cloud.raw");
    std::fs::rename(&raw, &cloud)?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&cloud)?
        .set_len(cloud_len)?;
    let c = q(&cloud);
    let formats = [
        ("qemu-img qcow2", "qcow2", "-O qcow2 -o compat=1.1"),
        (
            "qemu-img vmdk",
            "vmdk",
            "-O vmdk -o adapter_type=lsilogic,subformat=streamOptimized",
        ),
        ("qemu-img vpc fixed", "vhd", "-O vpc -o subformat=fixed"),
    ];
    for (name, ext, opts) in formats {
        let f = format!("x.{ext}");
        tool_run(
            name,
            format!("qemu-img convert -f raw {opts} {c} {}", tq(&f)),
            &t.join(&f),
        )?;
        let gz = format!("x.{ext}.gz");
        tool_run(
            &format!("gzip -6 of {ext}"),
            format!("gzip -6 -c {} > {}", tq(&f), tq(&gz)),
            &t.join(&gz),
        )?;
        std::fs::remove_file(t.join(&f))?;
        std::fs::remove_file(t.join(&gz))?;
    }
    let gcpdir = t.join("gcp");
    std::fs::create_dir_all(&gcpdir)?;
    std::fs::hard_link(&cloud, gcpdir.join("disk.raw"))?;
    for gz in ["gzip", "pigz"] {
        tool_run(
            &format!("tar -S | {gz} -9"),
            format!(
                "tar --format=oldgnu -S -C {} -cf - disk.raw | {gz} -9 > {}",
                q(&gcpdir),
                tq("gcp.tar.gz")
            ),
            &t.join("gcp.tar.gz"),
        )?;
        std::fs::remove_file(t.join("gcp.tar.gz"))?;
    }
    std::fs::remove_dir_all(&gcpdir)?;
    // The live references need the OS tree: the root filesystem, mounted
    // read-only from the disk by offset.
    let mut notes: Vec<String> = Vec::new();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&cloud)?
        .set_len(raw_len)?;
    match mount_root(&cloud, &work.join("root")) {
        Ok(mnt) => {
            let sq = t.join("rootfs.squashfs");
            let r1 = tool_run(
                "mksquashfs -comp zstd",
                format!(
                    "mksquashfs {} {} -comp zstd -noappend -quiet -no-progress",
                    q(&mnt),
                    q(&sq)
                ),
                &sq,
            );
            // RHCOS 10's EROFS rootfs of the same tree: rhel-coreos-config's
            // options (as the rhel10 test OS's image.yaml carries them),
            // mapped onto this host's mkfs.erofs exactly as `generate` does.
            let er = t.join("rootfs.erofs");
            let r2 = erofs_options().and_then(|(requested, o)| {
                notes.push(format!(
                    "mkfs.erofs RHCOS 10: `{requested}` run as `mkfs.erofs {}`{}",
                    o.used(),
                    o.replaced
                        .iter()
                        .map(|r| format!("; {}", r.line()))
                        .collect::<String>()
                ));
                tool_run(
                    "mkfs.erofs RHCOS 10",
                    format!("mkfs.erofs {} {} {}", o.used(), q(&er), q(&mnt)),
                    &er,
                )
            });
            std::fs::remove_file(&er).ok();
            sh(&format!("umount {}", q(&mnt))).ok();
            r1?;
            if let Err(e) = r2 {
                notes.push(format!("mkfs.erofs skipped: {e:#}"));
            }
            tool_run(
                "xorriso",
                format!(
                    "xorriso -as mkisofs -quiet -o {} -V BENCH -graft-points images/pxeboot/rootfs.img={}",
                    tq("live.iso"),
                    q(&sq)
                ),
                &t.join("live.iso"),
            )?;
            std::fs::remove_file(&sq).ok();
            std::fs::remove_file(t.join("live.iso")).ok();
        }
        Err(e) => notes.push(format!("mksquashfs/xorriso skipped: {e:#}")),
    }
    std::fs::remove_file(&cloud).ok();

    // 4. The most expensive platform alone, to see what `all` shares: the
    // platform whose stages took longest in `all` (live: its four).
    let mut per_platform: Vec<(String, f64)> = Vec::new();
    for s in &stages {
        if s.file.is_none() || s.name == "ostree" {
            continue;
        }
        let p = if s.name.starts_with("live-") {
            "live"
        } else {
            s.name.as_str()
        };
        match per_platform.iter_mut().find(|(n, _)| n == p) {
            Some((_, w)) => *w += s.wall,
            None => per_platform.push((p.to_string(), s.wall)),
        }
    }
    let costliest = per_platform
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(p, _)| p.clone());
    let single_run = match (single, &costliest) {
        (true, Some(p)) => {
            eprintln!("bench: generate {release} {p} (alone)");
            let out = work.join("out-single");
            let (r, _) = generate(&tool, &release, p, &work.join("cache-single"), &out)?;
            std::fs::remove_dir_all(&out).ok();
            std::fs::remove_dir_all(work.join("cache-single")).ok();
            Some((p.clone(), r))
        }
        _ => None,
    };

    // 5. Report.
    let tool_of = |n: &str| tools.iter().find(|t| t.name == n);
    let wall_of = |names: &[&str]| -> Option<f64> {
        names.iter().map(|n| tool_of(n).map(|t| t.run.wall)).sum()
    };
    let mut table = String::new();
    let line = |t: &mut String, s: String| {
        t.push_str(&s);
        t.push('\n');
    };
    line(&mut table, format!(
        "bootimage-gen generate all: {release}\n{cores} cores, load average before: {}; base disk {:.0} MiB ({:.0} MiB of data), cloud disks {:.0} MiB",
        load_before.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        raw_len as f64 / MIB, raw_data as f64 / MIB, cloud_len as f64 / MIB
    ));
    line(
        &mut table,
        format!(
            "{:<16} {:>8} {:>8} {:>10} {:>8}   {:<28} {:>7} {:>7} {:>7} {:>7}",
            "stage",
            "wall s",
            "cpu s",
            "out MiB",
            "MiB/s",
            "standard tool",
            "x std",
            "x pigz",
            "x cp",
            "x zstd"
        ),
    );
    let mut stage_json = Vec::new();
    for s in &stages {
        let (std_name, std_tools): (&str, Vec<&str>) = counterpart(s);
        let std_wall = if std_tools.is_empty() {
            None
        } else {
            wall_of(&std_tools)
        };
        let ratio = |w: Option<f64>| w.map(|w| w / s.wall.max(1e-9));
        // pigz and the floors are the disk images' yardsticks: not for the
        // live files (a squashfs, an ISO, a copied kernel) or the OS archive.
        let disk = s.file.is_some() && !s.name.starts_with("live") && s.name != "ostree";
        let (x_std, x_pigz, x_cp, x_zstd) = (
            ratio(std_wall),
            match &s.file {
                _ if !disk => None,
                // pigz at our level: -9 for the GCP tarball
                Some(f) if f.ends_with(".tar.gz") => ratio(wall_of(&["tar -S | pigz -9"])),
                _ => ratio(wall_of(&["pigz -6"])),
            },
            disk.then(|| ratio(wall_of(&["cp --sparse=always"])))
                .flatten(),
            disk.then(|| ratio(wall_of(&["zstd -T0 -3"]))).flatten(),
        );
        let f = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.2}"));
        line(
            &mut table,
            format!(
                "{:<16} {:>8.1} {:>8.1} {:>10.0} {:>8.1}   {:<28} {:>7} {:>7} {:>7} {:>7}",
                s.name,
                s.wall,
                s.cpu,
                s.bytes as f64 / MIB,
                s.bytes as f64 / MIB / s.wall.max(1e-9),
                if std_tools.is_empty() { "-" } else { std_name },
                f(x_std),
                f(x_pigz),
                f(x_cp),
                f(x_zstd)
            ),
        );
        stage_json.push(json!({
            "stage": s.name, "wall_s": s.wall, "cpu_s": s.cpu, "bytes": s.bytes, "file": s.file,
            "standard": (!std_tools.is_empty()).then_some(std_tools.clone()), "standard_wall_s": std_wall,
            "x_standard": x_std, "x_pigz": x_pigz, "x_cp": x_cp, "x_zstd": x_zstd,
        }));
    }
    line(
        &mut table,
        format!(
            "{:<16} {:>8.1} {:>8.1}   peak RSS: bootimage-gen {:.0} MiB, the largest process (tools included) {:.0} MiB",
            "whole run",
            all_run.wall,
            all_run.cpu,
            all_run.own_peak_rss as f64 / MIB,
            all_run.peak_rss as f64 / MIB
        ),
    );
    line(
        &mut table,
        "standard tools (same base disk; x = their time / ours, >1 means we are faster):".into(),
    );
    for t in &tools {
        line(
            &mut table,
            format!(
                "  {:<24} {:>8.1} s wall {:>8.1} s cpu {:>9.0} MiB out {:>7.0} MiB peak RSS",
                t.name,
                t.run.wall,
                t.run.cpu,
                t.bytes as f64 / MIB,
                t.run.peak_rss as f64 / MIB
            ),
        );
    }
    if let Some((p, r)) = &single_run {
        line(
            &mut table,
            format!(
                "`all` {:.1} s vs {p} alone {:.1} s: {:.2}x (target <= 2x)",
                all_run.wall,
                r.wall,
                all_run.wall / r.wall
            ),
        );
    }
    if !live {
        notes.push(
            "live ISO/PXE not built by this version (`bootimage-gen platforms`): no live stages"
                .into(),
        );
    }
    for n in &notes {
        line(&mut table, format!("note: {n}"));
    }
    print!("{table}");

    let record = json!({
        "time": chrono::Utc::now().to_rfc3339(),
        "git": git_head(),
        "release": release,
        "platforms": platforms,
        "cores": cores,
        "loadavg_before": load_before.trim(),
        // the large fixture's payload knob (fixtures/large-payload.sh)
        "extra_mb": std::env::var("BENCH_EXTRA_MB").unwrap_or_else(|_| "2560".into()),
        "base_disk_bytes": raw_len, "base_disk_data_bytes": raw_data, "cloud_disk_bytes": cloud_len,
        "import_cache_bytes": cache_bytes,
        "run": {"wall_s": all_run.wall, "cpu_s": all_run.cpu, "peak_rss_bytes": all_run.peak_rss,
            "own_peak_rss_bytes": all_run.own_peak_rss},
        "stages": stage_json,
        "tools": tools.iter().map(|t| json!({"tool": t.name, "wall_s": t.run.wall, "cpu_s": t.run.cpu,
            "peak_rss_bytes": t.run.peak_rss, "bytes": t.bytes})).collect::<Vec<_>>(),
        "single": single_run.as_ref().map(|(p, r)| json!({"platform": p, "wall_s": r.wall, "cpu_s": r.cpu,
            "peak_rss_bytes": r.peak_rss, "all_over_single": all_run.wall / r.wall})),
        "notes": notes,
    });
    append_result(&results, &record)?;
    eprintln!("bench: appended to {}", results.display());
    Ok(())
}

/// RHCOS 10's `live-rootfs-fsoptions` (the rhel10 test OS's image.yaml,
/// from rhel-coreos-config) mapped onto this host's mkfs.erofs.
fn erofs_options() -> Result<(String, bootimage_gen::live::erofs::Options)> {
    use bootimage_gen::live::erofs;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/os/config/image-rhel10.yaml");
    let y: serde_yaml_ng::Value = serde_yaml_ng::from_slice(&std::fs::read(&path)?)
        .with_context(|| format!("parsing {}", path.display()))?;
    let requested = y["live-rootfs-fsoptions"]
        .as_str()
        .with_context(|| format!("{}: no live-rootfs-fsoptions", path.display()))?
        .to_string();
    let host = erofs::Host::probe()?;
    let o = erofs::map_options(&requested, &host, 0, &erofs::uuid_from("bench"))?;
    Ok((requested, o))
}

/// The standard tools that do a stage's job, by the file it published.
fn counterpart(s: &Stage) -> (&'static str, Vec<&'static str>) {
    let Some(f) = s.file.as_deref() else {
        return ("", vec![]);
    };
    match s.name.as_str() {
        "live-rootfs" => return ("mksquashfs -comp zstd", vec!["mksquashfs -comp zstd"]),
        "live-iso" => return ("xorriso", vec!["xorriso"]),
        n if n.starts_with("live") => return ("", vec![]),
        _ => {}
    }
    let gz = f.ends_with(".gz");
    if f.ends_with(".tar.gz") {
        ("tar -S | gzip -9", vec!["tar -S | gzip -9"])
    } else if f.contains(".raw") {
        ("gzip -6", vec!["gzip -6"])
    } else if f.contains(".qcow2") && gz {
        (
            "qemu-img qcow2 + gzip -6",
            vec!["qemu-img qcow2", "gzip -6 of qcow2"],
        )
    } else if f.contains(".qcow2") {
        ("qemu-img qcow2", vec!["qemu-img qcow2"])
    } else if f.contains(".vmdk") && gz {
        (
            "qemu-img vmdk + gzip -6",
            vec!["qemu-img vmdk", "gzip -6 of vmdk"],
        )
    } else if f.contains(".vmdk") || f.ends_with(".ova") {
        ("qemu-img vmdk", vec!["qemu-img vmdk"])
    } else if f.contains(".vhd") && gz {
        (
            "qemu-img vpc + gzip -6",
            vec!["qemu-img vpc fixed", "gzip -6 of vhd"],
        )
    } else if f.contains(".vhd") {
        ("qemu-img vpc fixed", vec!["qemu-img vpc fixed"])
    } else {
        ("", vec![])
    }
}

/// Issue 28's before/after: the import and the deploy of `release`'s OS as
/// this program did before (this host's ostree lays it down: `--deploy-ostree
/// host`) and as it does now (the OS's own ostree from a buildroot, SELinux
/// labels from its setfiles, the image refs), each from a cold cache, in
/// one run. Prints a table; appends one JSON line to `results`.
fn compare_deploys(tool: &Path, release: &str, work: &Path, results: &Path) -> Result<()> {
    let stage_names = ["fetch+import", "buildroot", "base disk"];
    // (label, (wall, cpu) per stage, the whole run)
    type Row<'a> = (&'a str, Vec<(f64, f64)>, Run);
    let mut rows: Vec<Row> = Vec::new();
    for (label, how) in [
        ("before (host ostree)", "host"),
        ("after (OS's tools)", "os"),
    ] {
        eprintln!("bench: generate {release} metal --deploy-ostree {how}");
        let cache = work.join(format!("cache-{how}"));
        let (run, stages) = generate(
            tool,
            release,
            &format!("metal --deploy-ostree {how}"),
            &cache,
            &work.join(format!("out-{how}")),
        )?;
        std::fs::remove_dir_all(&cache).ok();
        std::fs::remove_dir_all(work.join(format!("out-{how}"))).ok();
        let per: Vec<(f64, f64)> = stage_names
            .iter()
            .map(|n| {
                stages
                    .iter()
                    .filter(|s| s.name == *n)
                    .fold((0.0, 0.0), |a, s| (a.0 + s.wall, a.1 + s.cpu))
            })
            .collect();
        rows.push((label, per, run));
    }
    println!("\nimport + deploy of {release} (metal), cold cache each:");
    println!(
        "{:<22} {:>14} {:>14} {:>14} {:>14} {:>10}",
        "", "fetch+import", "buildroot", "base disk", "sum (wall)", "run wall"
    );
    let sum = |v: &[(f64, f64)]| v.iter().map(|x| x.0).sum::<f64>();
    for (label, per, run) in &rows {
        println!(
            "{:<22} {:>14} {:>14} {:>14} {:>13.1}s {:>9.1}s",
            label,
            format!("{:.1}s/{:.1}cpu", per[0].0, per[0].1),
            format!("{:.1}s/{:.1}cpu", per[1].0, per[1].1),
            format!("{:.1}s/{:.1}cpu", per[2].0, per[2].1),
            sum(per),
            run.wall
        );
    }
    let (b, a) = (sum(&rows[0].1), sum(&rows[1].1));
    println!(
        "after/before (import + buildroot + base disk, wall): {:.2} ({:+.1} %)",
        a / b,
        (a / b - 1.0) * 100.0
    );
    let line = json!({
        "kind": "self-install",
        "release": release,
        "stages": stage_names,
        "rows": rows.iter().map(|(l, per, run)| json!({
            "label": l,
            "wall_cpu": per,
            "run_wall_s": run.wall,
        })).collect::<Vec<_>>(),
        "ratio_wall": a / b,
    });
    append_result(results, &line)
}

/// Issue 45's before/after: the base disk (partition, filesystems, the OS
/// deployed, bootloaders, labels) as before, written by the kernel through
/// loop mounts (no mkfs tools found: `BOOTIMAGE_CACHE` at an empty
/// directory, this host's mkfs too old), and now, deployed into stage
/// filesystems and made from them by `mkfs.xfs -p`/`mke2fs -d`. One warm
/// cache (imported once), `metal`, three rounds alternating; prints the
/// base-disk stage's wall and CPU times and their medians, appends one JSON
/// line to `results`.
fn compare_mkfs_paths(tool: &Path, release: &str, work: &Path, results: &Path) -> Result<()> {
    let cache = work.join("cache");
    let empty = work.join("no-mkfs-tools");
    std::fs::create_dir_all(&empty)?;
    eprintln!("bench: warming the cache (import of {release})");
    generate(tool, release, "metal", &cache, &work.join("out-warm"))?;
    let labels = ["before (kernel writes)", "after (mkfs from stage)"];
    let mut walls: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut cpus: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..3 {
        for k in 0..2 {
            // Edition 2021, one thread: the child inherits it.
            if k == 0 {
                std::env::set_var("BOOTIMAGE_CACHE", &empty);
            } else {
                std::env::remove_var("BOOTIMAGE_CACHE");
            }
            let out = work.join(format!("out-{k}-{round}"));
            let (_, stages) = generate(tool, release, "metal", &cache, &out)?;
            std::fs::remove_dir_all(&out).ok();
            let (w, c) = stages
                .iter()
                .filter(|s| s.name == "base disk")
                .fold((0.0, 0.0), |a, s| (a.0 + s.wall, a.1 + s.cpu));
            eprintln!(
                "bench: round {round} {}: base disk {w:.2} s wall, {c:.2} s CPU",
                labels[k]
            );
            walls[k].push(w);
            cpus[k].push(c);
        }
    }
    std::env::remove_var("BOOTIMAGE_CACHE");
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    println!("\nbase disk of {release} (metal), warm cache, 3 rounds:");
    println!(
        "{:<26} {:>28} {:>12} {:>12}",
        "", "wall per round (s)", "median wall", "median CPU"
    );
    for k in 0..2 {
        println!(
            "{:<26} {:>28} {:>11.2}s {:>11.2}s",
            labels[k],
            walls[k]
                .iter()
                .map(|w| format!("{w:.2}"))
                .collect::<Vec<_>>()
                .join(" "),
            median(&walls[k]),
            median(&cpus[k])
        );
    }
    let ratio = median(&walls[1]) / median(&walls[0]);
    println!(
        "after/before (median wall): {ratio:.2} ({:+.1} %)",
        (ratio - 1.0) * 100.0
    );
    let line = json!({
        "kind": "mkfs-from-stage",
        "release": release,
        "before_wall_s": walls[0], "after_wall_s": walls[1],
        "before_cpu_s": cpus[0], "after_cpu_s": cpus[1],
        "ratio_wall": ratio,
    });
    append_result(results, &line)
}

/// Append one JSON line to the results file (its directory made).
fn append_result(results: &Path, line: &serde_json::Value) -> Result<()> {
    if let Some(d) = results.parent() {
        std::fs::create_dir_all(d)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(results)?;
    writeln!(f, "{line}")?;
    Ok(())
}

/// Run `generate` with JSON progress; the run's figures and its stages.
fn generate(
    tool: &Path,
    release: &str,
    platforms: &str,
    cache: &Path,
    out: &Path,
) -> Result<(Run, Vec<Stage>)> {
    let mut cmd = Command::new(tool);
    cmd.args(["generate", release])
        .args(platforms.split([' ', ',']).filter(|p| !p.is_empty()))
        .args(["--progress", "json", "-o"])
        .arg(out)
        .arg("--cache-dir")
        .arg(cache)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("running {}", tool.display()))?;
    let pid = child.id();
    let err = child.stderr.take().context("stderr")?;
    let mut stages: Vec<Stage> = vec![Stage {
        name: "fetch+import".into(),
        start: 0.0,
        cpu_start: 0.0,
        wall: 0.0,
        cpu: 0.0,
        file: None,
        bytes: 0,
    }];
    let mut tail: Vec<String> = Vec::new();
    let mut own_hwm = 0u64;
    for l in BufReader::new(err).lines() {
        let l = l?;
        let (now, cpu) = (t0.elapsed().as_secs_f64(), proc_cpu(pid));
        own_hwm = own_hwm.max(proc_hwm(pid).unwrap_or(0));
        let Ok(v) = serde_json::from_str::<Value>(&l) else {
            tail.push(l);
            continue;
        };
        let step = v.get("step").and_then(Value::as_str).unwrap_or("");
        match v.get("event").and_then(Value::as_str) {
            Some("start") => {
                close(stages.last_mut(), now, cpu);
                stages.push(Stage {
                    name: step.to_string(),
                    start: now,
                    cpu_start: cpu.unwrap_or(0.0),
                    wall: 0.0,
                    cpu: 0.0,
                    file: None,
                    bytes: 0,
                });
            }
            Some("done") => {
                if let Some(s) = stages.iter_mut().rev().find(|s| s.name == step) {
                    let detail = v.get("detail").and_then(Value::as_str).unwrap_or("");
                    let first = detail.split_whitespace().next().unwrap_or("");
                    // Checked once the run is over: some files are
                    // published after their step (the live ISO and PXE).
                    if !first.is_empty() {
                        s.file = Some(first.to_string());
                    }
                }
            }
            Some("note") => {
                if let Some(m) = v.get("message").and_then(Value::as_str) {
                    eprintln!("  {m}");
                }
            }
            _ => {}
        }
        if tail.len() > 20 {
            tail.remove(0);
        }
    }
    let (mut run, ok) = wait(&mut child, t0)?;
    run.own_peak_rss = own_hwm;
    let cpu_end = run.cpu;
    if let Some(s) = stages.last_mut() {
        s.wall = run.wall - s.start;
        s.cpu = (cpu_end - s.cpu_start).max(0.0);
    }
    if !ok {
        bail!("generate {platforms} failed:\n{}", tail.join("\n"));
    }
    // A stage's file: the first word of its `done` detail, if the run
    // published it, else the published file named after the stage (the
    // live PXE files, staged before the ISO is built).
    let published: Vec<String> = std::fs::read_dir(out)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    for s in &mut stages {
        s.file = s.file.take().filter(|f| published.contains(f));
        if s.file.is_none() && s.name.starts_with("live-") {
            let tag = format!("-{}.", s.name);
            s.file = published.iter().find(|f| f.contains(&tag)).cloned();
        }
        if let Some(f) = &s.file {
            s.bytes = allocated(&out.join(f))?;
        }
    }
    Ok((run, stages))
}

fn close(s: Option<&mut Stage>, now: f64, cpu: Option<f64>) {
    if let Some(s) = s {
        s.wall = now - s.start;
        s.cpu = cpu.map_or(0.0, |c| (c - s.cpu_start).max(0.0));
    }
}

/// utime + stime of a live process and its reaped children, in seconds.
fn proc_cpu(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which ends with the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime, stime, cutime, cstime are fields 14..17 of stat: 11..14 here.
    let ticks: f64 = f
        .get(11..15)?
        .iter()
        .filter_map(|x| x.parse::<f64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz)
}

/// A live process's own peak RSS in bytes (VmHWM).
fn proc_hwm(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Wait for a child with wait4: wall since `t0`, CPU and peak RSS, and
/// whether it succeeded.
fn wait(child: &mut Child, t0: Instant) -> Result<(Run, bool)> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid pointers.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    if pid < 0 {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    let wall = t0.elapsed().as_secs_f64();
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let st = std::process::ExitStatus::from_raw(status);
    let run = Run {
        wall,
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        peak_rss: ru.ru_maxrss as u64 * 1024,
        own_peak_rss: 0,
    };
    Ok((run, st.success()))
}

fn measure(cmd: &mut Command) -> Result<Run> {
    let t0 = Instant::now();
    let mut child = cmd.stdin(Stdio::null()).spawn()?;
    let (r, ok) = wait(&mut child, t0)?;
    if !ok {
        bail!("{cmd:?} failed");
    }
    Ok(r)
}

fn sh(cmd: &str) -> Result<()> {
    let st = Command::new("bash").arg("-c").arg(cmd).status()?;
    if !st.success() {
        bail!("`{cmd}` failed ({st})");
    }
    Ok(())
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

/// Bytes a file really occupies (sparse files count their data only).
fn allocated(p: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).with_context(|| format!("{}", p.display()))?;
    Ok(m.blocks() * 512)
}

fn du(p: &Path) -> Result<u64> {
    let o = Command::new("du").arg("-sB1").arg(p).output()?;
    Ok(String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .and_then(|x| x.parse().ok())
        .unwrap_or(0))
}

/// Whether this build of the tool builds the live platform.
fn lists_live(tool: &Path) -> Result<bool> {
    let o = Command::new(tool).arg("platforms").output()?;
    Ok(String::from_utf8_lossy(&o.stdout).lines().any(|l| {
        l.starts_with("live") && l.trim_end().ends_with("supported") && !l.contains("not built")
    }))
}

/// The cloud disk size: the virtual size of the qcow2 the run published.
fn cloud_size(out: &Path) -> Result<Option<u64>> {
    for e in std::fs::read_dir(out)? {
        let p = e?.path();
        let n = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if n.contains(".qcow2") {
            let cmd = if n.ends_with(".gz") {
                format!("gzip -dc {} | head -c 32 | od -An -tx1 -j24 -N8", q(&p))
            } else {
                format!("od -An -tx1 -j24 -N8 {}", q(&p))
            };
            let o = Command::new("bash").arg("-c").arg(cmd).output()?;
            let hex: String = String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .collect();
            return Ok(u64::from_str_radix(&hex, 16).ok());
        }
    }
    Ok(None)
}

/// Mount the root filesystem (XFS, GPT partition named `root`) of a raw
/// disk read-only through a loop device at its offset.
fn mount_root(raw: &Path, mnt: &Path) -> Result<PathBuf> {
    let o = Command::new("sfdisk")
        .arg("-J")
        .arg(raw)
        .output()
        .context("sfdisk (fdisk)")?;
    if !o.status.success() {
        bail!(
            "sfdisk -J {}: {}",
            raw.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    let v: Value = serde_json::from_slice(&o.stdout)?;
    let pt = &v["partitiontable"];
    let sector = pt["sectorsize"].as_u64().unwrap_or(512);
    let p = pt["partitions"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "root"))
        .context("no partition named root")?;
    let start = p["start"].as_u64().context("start")? * sector;
    let size = p["size"].as_u64().context("size")? * sector;
    std::fs::create_dir_all(mnt)?;
    sh(&format!(
        "mount -t xfs -o ro,norecovery,nouuid,loop,offset={start},sizelimit={size} {} {}",
        q(raw),
        q(mnt)
    ))
    .context("mounting the root filesystem (needs root and loop devices)")?;
    Ok(mnt.to_path_buf())
}

fn git_head() -> Option<String> {
    let o = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}
