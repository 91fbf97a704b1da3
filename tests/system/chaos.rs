//! Chaos tier (issue 19): `generate <fixture release> metal qemu live`
//! killed with SIGKILL at a random moment, uniform over a measured run
//! length, then run again normally; interrupted with SIGINT/SIGTERM at
//! random moments; run out of space on a small loop-mounted ext4; and the
//! leftovers of a killed run (work dir, VM, mounts, loop devices, partial
//! files) built by hand and removed by `gc`. Every run is checked for leaked
//! loop devices, mounts and processes.
//!
//! Bounded for CI (the target takes about 3.5 minutes on 2 shared cores): CHAOS_RUNS kills and as many
//! interrupts (default 4 each); `CHAOS_RUNS=50 make chaos` is the long
//! version. CHAOS_SEED replays a run (the seed is printed). Root and loop
//! devices needed (`--features privileged`). The figures are printed (run
//! with --nocapture) so they can be quoted.
use crate::common::boot::{self, DiskFormat, Firmware, Media};
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The timing-sensitive tests run one at a time (a run length measured
/// alone means nothing under a parallel load).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// splitmix64: small, seeded, good enough to pick moments.
struct Rng(u64);
impl Rng {
    fn from_env() -> Rng {
        let seed = std::env::var("CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("chaos: seed {seed} (CHAOS_SEED={seed} replays it)");
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, d).
    fn within(&mut self, d: Duration) -> Duration {
        Duration::from_nanos(self.next() % (d.as_nanos() as u64).max(1))
    }
}

fn runs() -> usize {
    std::env::var("CHAOS_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4)
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bootimage-gen"))
}

fn gen_args(out: &Path, cache: &Path) -> Vec<String> {
    let mut v: Vec<String> = vec!["generate".into(), oci("release")];
    v.extend(["metal", "qemu", "live"].map(String::from));
    v.extend([
        "-o".into(),
        out.display().to_string(),
        "--cache-dir".into(),
        cache.display().to_string(),
        "--progress".into(),
        "plain".into(),
    ]);
    v
}

/// What a run may leak, under `root`.
#[derive(Debug, Default, Clone, PartialEq)]
struct Leaks {
    loops: Vec<String>,
    mounts: Vec<String>,
    procs: Vec<String>,
    work_dirs: Vec<String>,
    partials: Vec<String>,
}

impl Leaks {
    fn is_empty(&self) -> bool {
        *self == Leaks::default()
    }
    fn count(&self) -> usize {
        self.loops.len()
            + self.mounts.len()
            + self.procs.len()
            + self.work_dirs.len()
            + self.partials.len()
    }
}

/// Loop devices over files under `root`, mounts under it, processes that
/// name it (our tools, qemu), work dirs in the cache, `.partial` files in
/// the output.
fn leaks(root: &Path, cache: &Path, out: &Path) -> Leaks {
    let r = root.display().to_string();
    let loops = bootimage_gen::sys::stale::loops()
        .into_iter()
        .filter(|(_, b)| b.starts_with(root))
        .map(|(d, b)| format!("{} -> {}", d.display(), b.display()))
        .filter(|l| !PREEXISTING.lock().unwrap().contains(l))
        .collect();
    let mounts = bootimage_gen::util::space::mounts_under(root)
        .into_iter()
        .map(|m| m.display().to_string())
        .collect();
    let procs = procs_naming(&r);
    let names = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    Leaks {
        loops,
        mounts,
        procs,
        work_dirs: names(&cache.join("tmp")),
        partials: names(out)
            .into_iter()
            .filter(|n| n.ends_with(".partial"))
            .collect(),
    }
}

/// A file published under its final name is whole: one that the run's
/// SHA256SUMS lists matches its checksum; otherwise a gzip stream passes
/// `gzip -t` (a cut one fails: unexpected end of file), the live initramfs
/// ends with a whole gzip'd cpio, and anything else has the size the same
/// file has in a complete run's output `reference`. (Byte equality with
/// `reference` does not hold: each build stamps its own time and
/// filesystem UUIDs, and so the live initramfs's gzip'd cpio, appended
/// last, differs in size by a few bytes from run to run.)
fn assert_whole(p: &Path, reference: &Path) {
    let name = p.file_name().unwrap();
    let name_s = name.to_string_lossy();
    let want = reference.join(name);
    assert!(
        want.exists(),
        "{} is not a file a complete run writes",
        p.display()
    );
    let dir = p.parent().unwrap();
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap_or_default();
    if let Some(line) = sums.lines().find(|l| l.ends_with(&format!("  {name_s}"))) {
        let sum = sha256_file(p);
        assert!(
            line.starts_with(&sum),
            "{} does not match SHA256SUMS ({line}): {sum}",
            p.display()
        );
    } else if name_s.ends_with(".gz") {
        must(Command::new("gzip").arg("-t").arg(p));
    } else if name_s.contains("-live-initramfs.") {
        assert!(
            ends_with_whole_cpio_gz(&read(p)),
            "{} does not end with a whole gzip'd cpio: a partial artifact under a final name",
            p.display()
        );
    } else if !["meta.json", "stream.json", "SHA256SUMS"].contains(&&*name_s) {
        assert_eq!(
            std::fs::metadata(p).unwrap().len(),
            std::fs::metadata(&want).unwrap().len(),
            "{} has another size than a complete run's: a partial artifact under a final name",
            p.display()
        );
    }
}

/// Some gzip member of `data` decodes to the end of `data` (but for the
/// zeros padding it to 4 bytes) and holds a newc
/// cpio closed by its `TRAILER!!!` entry (the live initramfs's last part).
fn ends_with_whole_cpio_gz(data: &[u8]) -> bool {
    use std::io::Read;
    (0..data.len().saturating_sub(2)).rev().any(|i| {
        if data[i..i + 3] != [0x1f, 0x8b, 0x08] {
            return false;
        }
        let mut z = flate2::bufread::GzDecoder::new(&data[i..]);
        let mut cpio = Vec::new();
        // A member that decodes whole and leaves nothing after it but the
        // zeros that pad the file to 4 bytes.
        if z.read_to_end(&mut cpio).is_err() {
            return false;
        }
        let rest = z.into_inner();
        rest.len() < 4
            && rest.iter().all(|&b| b == 0)
            && bootimage_gen::fs::cpio::list(&cpio).is_ok()
    })
}

/// `sha256sum -c SHA256SUMS` in `out`.
fn verify(out: &Path) {
    let o = Command::new("sha256sum")
        .args(["-c", "--quiet", "SHA256SUMS"])
        .current_dir(out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "sha256sum -c in {}: {}{}",
        out.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A normal run; its log and time.
fn normal_run(out: &Path, cache: &Path) -> (String, Duration) {
    let t = Instant::now();
    let o = bin().args(gen_args(out, cache)).output().unwrap();
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "normal run failed:\n{log}");
    (log, t.elapsed())
}

/// Boots the qemu qcow2 of a run's output `out` under SeaBIOS (TCG): the
/// marker must say platform=qemu, firstboot=1. Gives the boot's time.
fn boot_qemu_of(out: &Path) -> Duration {
    let meta = serde_json::from_slice(&read(&out.join("meta.json"))).unwrap();
    let gz = image_file(&meta, out, "qemu");
    let qcow2 = out.join("boot.qcow2");
    gunzip(&gz, &qcow2);
    let r = boot::assert_boots(
        &[Media::disk_as(&qcow2, DiskFormat::Qcow2)],
        Firmware::Bios,
        boot::default_timeout(),
    );
    assert_eq!(r.marker.platform, "qemu", "{}", r.log);
    assert!(r.marker.firstboot, "{}", r.log);
    r.duration
}

/// Loop devices already attached over files under a test's root before it
/// started (left by an earlier, failed run of this test that the kernel
/// will not let go): reported, not counted against this run.
static PREEXISTING: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn fresh(name: &str) -> PathBuf {
    let root = scratch("chaos").join(name);
    let old: Vec<String> = bootimage_gen::sys::stale::loops()
        .into_iter()
        .filter(|(_, b)| b.starts_with(&root))
        .map(|(d, b)| format!("{} -> {}", d.display(), b.display()))
        .collect();
    if !old.is_empty() {
        eprintln!("chaos: loop devices left by an earlier run, not counted: {old:?}");
        PREEXISTING.lock().unwrap().extend(old);
    }
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    root
}

/// Processes of a killed run's tools die with it (PR_SET_PDEATHSIG), but
/// asynchronously: give them a moment before counting.
fn settle() {
    std::thread::sleep(Duration::from_millis(300));
}

/// Processes (but this one) whose command line names `r`, as "pid: cmd".
/// Our tools and our VM name paths under the test's root (the VM: its work
/// dir); another qemu on this machine is not ours.
fn procs_naming(r: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut procs = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = e.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me {
            continue;
        }
        let Ok(c) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let c = String::from_utf8_lossy(&c).replace('\0', " ");
        if c.contains(r) {
            procs.push(format!("{pid}: {}", c.trim()));
        }
    }
    procs
}

/// After a SIGKILL: settle, then give the run's children (killed by their
/// PR_SET_PDEATHSIG) up to 15 s to be gone. A SIGKILLed process finishes
/// the uninterruptible I/O it is in first (an `ostree admin deploy`
/// syncing a loop-backed filesystem, on a machine the rest of the suite
/// loads, took over 300 ms); one still there after that outlived the run.
fn settle_killed(root: &Path) {
    settle();
    let r = root.display().to_string();
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_secs(15) && !procs_naming(&r).is_empty() {
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn sigkill_at_random_moments_then_rerun() {
    let _s = serial();
    let mut rng = Rng::from_env();
    let root = fresh("kill");
    let cache = root.join("cache");
    // The run length, measured cold (the kills below land in the import too
    // whenever the OS entry was pruned).
    let (_, cold) = normal_run(&root.join("measure"), &cache);
    std::fs::remove_dir_all(root.join("measure")).unwrap();
    eprintln!("chaos: a cold run takes {:.2} s", cold.as_secs_f64());
    let n = runs();
    let (mut left_total, mut recovered_logs, mut finished_first) = (Leaks::default(), 0, 0);
    let (mut follow_times, mut boot_time) = (vec![], vec![]);
    let t_all = Instant::now();
    for i in 0..n {
        // Every third kill starts cold: gc prunes the OS import first.
        if i % 3 == 2 {
            let o = bin()
                .args(["gc", "--max-size", "0", "--cache-dir"])
                .arg(&cache)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        let out = root.join(format!("out-{i}"));
        let at = rng.within(cold);
        let mut child = bin()
            .args(gen_args(&out, &cache))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(at);
        let done_before = child.try_wait().unwrap().is_some();
        let _ = child.kill();
        child.wait().unwrap();
        settle_killed(&root);
        let left = leaks(&root, &cache, &out);
        if done_before {
            finished_first += 1;
        }
        eprintln!(
            "chaos: kill {}/{n} at {:.2} s{}: left {} ({} loops, {} mounts, {} processes, {} work dirs, {} partial files)",
            i + 1,
            at.as_secs_f64(),
            if done_before { " (the run had finished)" } else { "" },
            left.count(),
            left.loops.len(),
            left.mounts.len(),
            left.procs.len(),
            left.work_dirs.len(),
            left.partials.len()
        );
        assert!(
            left.procs.is_empty(),
            "processes outlived the killed run: {:?}",
            left.procs
        );
        left_total.loops.extend(left.loops.clone());
        left_total.mounts.extend(left.mounts.clone());
        left_total.work_dirs.extend(left.work_dirs.clone());
        left_total.partials.extend(left.partials.clone());
        // The follow-up run recovers and succeeds; nothing is left after it.
        let (log, took) = normal_run(&out, &cache);
        follow_times.push(took);
        if !left.work_dirs.is_empty() || !left.partials.is_empty() {
            assert!(
                log.contains("recovered from a killed run: removed"),
                "leftovers {left:?} but no recovery line:\n{log}"
            );
            recovered_logs += 1;
        }
        // A loop device left here would be one the kernel cannot let go
        // of: a run killed during ostree's freeze/thaw cycle of /boot left
        // it frozen, and the sweep must thaw it before unmounting.
        let after = leaks(&root, &cache, &out);
        assert!(
            after.is_empty(),
            "after the follow-up run: {after:?}\n{log}"
        );
        verify(&out);
        // One follow-up run in ten is booted: its qemu qcow2 under SeaBIOS.
        if i % 10 == 0 {
            boot_time.push(boot_qemu_of(&out));
        }
        std::fs::remove_dir_all(&out).unwrap();
    }
    let avg = follow_times.iter().sum::<Duration>().as_secs_f64() / n.max(1) as f64;
    eprintln!(
        "chaos: {n} SIGKILLs in {:.0} s ({finished_first} after the run had finished); leftovers found after the kills: {} loop devices, {} mounts, {} work dirs, {} partial files, 0 processes; {recovered_logs} follow-up runs said what they recovered; every follow-up run succeeded (mean {avg:.2} s), sha256sum -c OK, and left 0 loop devices, 0 mounts, 0 processes; {} of them booted ({})",
        t_all.elapsed().as_secs_f64(),
        left_total.loops.len(),
        left_total.mounts.len(),
        left_total.work_dirs.len(),
        left_total.partials.len(),
        boot_time.len(),
        boot_time
            .iter()
            .map(|d| format!("{:.1} s", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    std::fs::remove_dir_all(&root).ok();
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn sigint_sigterm_at_random_moments() {
    let _s = serial();
    let mut rng = Rng::from_env();
    let root = fresh("interrupt");
    let cache = root.join("cache");
    let (_, warm) = {
        normal_run(&root.join("warm"), &cache);
        std::fs::remove_dir_all(root.join("warm")).unwrap();
        normal_run(&root.join("measure"), &cache)
    };
    // The measured outputs are the reference for "no partial artifact
    // under a final name" ([`assert_whole`]).
    let reference = root.join("measure");
    eprintln!("chaos: a warm run takes {:.2} s", warm.as_secs_f64());
    let n = runs();
    let (mut codes, mut early, mut finished) = (vec![], 0, 0);
    let mut cleanup = vec![];
    for i in 0..n {
        let (sig, code) = if i % 2 == 0 {
            (libc::SIGINT, 130)
        } else {
            (libc::SIGTERM, 143)
        };
        let out = root.join(format!("out-{i}"));
        let at = rng.within(warm);
        let mut child = bin()
            .args(gen_args(&out, &cache))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut err, &mut s).ok();
            s
        });
        std::thread::sleep(at);
        send_signal(&child, sig);
        let sent = Instant::now();
        let st = child.wait().unwrap();
        let stopped_in = sent.elapsed();
        let log = reader.join().unwrap();
        use std::os::unix::process::ExitStatusExt;
        match (st.code(), st.signal()) {
            (Some(c), _) if c == code => {
                assert!(log.contains("interrupted by a signal; cleaned up"), "{log}");
                cleanup.push(stopped_in);
            }
            (Some(0), _) => finished += 1,
            // Before the handler is installed (the first milliseconds of
            // the process), the default action ends it: nothing exists yet.
            (None, Some(s)) if s == sig && at < Duration::from_millis(50) => early += 1,
            other => panic!("signal {sig} at {at:?}: exit {other:?}, want {code}\n{log}"),
        }
        codes.push(st.code());
        let left = leaks(&root, &cache, &out);
        assert!(
            left.is_empty(),
            "after signal {sig} at {at:?}: {left:?}\n{log}"
        );
        for e in std::fs::read_dir(&out).into_iter().flatten().flatten() {
            assert_whole(&e.path(), &reference);
        }
        eprintln!(
            "chaos: signal {} at {:.2} s: exit {:?}, stopped in {} ms, 0 leaks",
            if sig == libc::SIGINT { "INT" } else { "TERM" },
            at.as_secs_f64(),
            st.code(),
            stopped_in.as_millis()
        );
        let _ = std::fs::remove_dir_all(&out);
    }
    // The random moments can all miss the handler (every run finished
    // first, or was ended before the handler was set): then one more run is
    // stopped at a known step, so every run of this test sees a signal
    // handled and cleaned up after.
    if cleanup.is_empty() {
        let out = root.join("out-paused");
        let mut cmd = bin();
        cmd.args(gen_args(&out, &cache));
        let sent = Instant::now();
        let (st, log) =
            run_until_paused(&mut cmd, "encode", Duration::from_secs(600)).signal(libc::SIGTERM);
        assert_eq!(st.code(), Some(143), "{log}");
        assert!(log.contains("interrupted by a signal; cleaned up"), "{log}");
        let left = leaks(&root, &cache, &out);
        assert!(left.is_empty(), "after SIGTERM at encode: {left:?}\n{log}");
        cleanup.push(sent.elapsed());
        eprintln!("chaos: no random signal landed in the run; one more run stopped at encode");
    }
    assert!(!cleanup.is_empty(), "no signal was handled");
    let worst = cleanup.iter().max().copied().unwrap_or_default();
    eprintln!(
        "chaos: {n} SIGINT/SIGTERM: {} exited 130/143, {finished} had finished (exit 0), {early} ended by the signal before the handler was set; 0 leaks, no partial artifact under a final name; slowest clean-up {} ms",
        cleanup.len(),
        worst.as_millis()
    );
    std::fs::remove_dir_all(&root).ok();
}

/// A small ext4 on a loop device, mounted read-write at `root/small`;
/// unmounted and detached on drop.
fn small_fs(root: &Path, mib: u64) -> Mnt {
    let img = root.join("small.img");
    let f = std::fs::File::create(&img).unwrap();
    f.set_len(mib << 20).unwrap();
    must(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0"])
            .arg(&img),
    );
    Mnt::dev(Loop::rw(&img), &root.join("small"))
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn enospc_on_the_output_is_clean_and_the_cache_stays_good() {
    let _s = serial();
    let root = fresh("enospc");
    let cache = root.join("cache");
    let fs = small_fs(&root, 48);
    let small_dev = fs.loop_dev().to_string();
    let out = fs.0.join("out");
    let error_lines = |log: &str| -> Vec<String> {
        log.lines()
            .filter(|l| l.starts_with("error:"))
            .map(String::from)
            .collect()
    };
    // 1. The preflight estimate refuses before anything is built.
    let t = Instant::now();
    let o = bin().args(gen_args(&out, &cache)).output().unwrap();
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{log}");
    let errs = error_lines(&log);
    assert_eq!(errs.len(), 1, "{log}");
    let mnt = fs.0.display().to_string();
    assert!(
        errs[0].contains(&format!("on the filesystem at {mnt} (/dev/loop")),
        "{}",
        errs[0]
    );
    assert!(
        errs[0].contains("MiB is free") || errs[0].contains("MiB free"),
        "{}",
        errs[0]
    );
    assert!(!out.exists() || std::fs::read_dir(&out).unwrap().count() == 0);
    eprintln!(
        "chaos: ENOSPC preflight ({:.1} s): {}",
        t.elapsed().as_secs_f64(),
        errs[0]
    );

    // 2. Past the preflight (hidden switch), the disk really fills.
    let t = Instant::now();
    let o = bin()
        .args(gen_args(&out, &cache))
        .env("BOOTIMAGE_GEN_SKIP_SPACE_CHECK", "1")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{log}");
    let errs = error_lines(&log);
    assert_eq!(errs.len(), 1, "{log}");
    assert!(
        errs[0].starts_with(&format!(
            "error: no space left on the filesystem at {mnt} (/dev/loop"
        )),
        "{}",
        errs[0]
    );
    assert!(errs[0].contains("this run needs about"), "{}", errs[0]);
    assert!(errs[0].contains("No space left on device"), "{}", errs[0]);
    // The small filesystem itself is the test's; nothing else may be left.
    let mut left = leaks(&root, &cache, &out);
    left.loops
        .retain(|l| !l.starts_with(&format!("{small_dev} ")));
    left.mounts.retain(|m| *m != mnt);
    assert!(left.is_empty(), "{left:?}");
    let kept: Vec<PathBuf> = std::fs::read_dir(&out)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    eprintln!(
        "chaos: real ENOSPC ({:.1} s), files kept under final names {:?}: {}",
        t.elapsed().as_secs_f64(),
        kept.iter()
            .map(|p| p.file_name().unwrap())
            .collect::<Vec<_>>(),
        errs[0]
    );

    // 3. With room, a rerun succeeds from the cache; what the failed run
    // left under final names is whole.
    let big = root.join("out-big");
    let (log, took) = normal_run(&big, &cache);
    assert!(log.contains("reusing the cached import"), "{log}");
    verify(&big);
    for p in &kept {
        assert_whole(p, &big);
    }
    eprintln!(
        "chaos: the rerun with room took {:.1} s and reused the cached import; {} files left by the failed run verified complete",
        took.as_secs_f64(),
        kept.len()
    );
    drop(fs);
    std::fs::remove_dir_all(&root).ok();
}

/// The leftovers of a killed run built by hand — a work dir owned by a
/// dead process holding a VM pidfile (a live `sleep` standing in for qemu),
/// a frozen ext4 mounted from a loop device over a file in a tmpfs in it
/// (the stage in memory), a bind mount of
/// a directory outside it — plus a live run's work dir and a `.partial` in
/// an output directory: `gc` removes exactly the dead run's, never empties
/// the bind mount's source, and leaves the live one.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn gc_removes_a_dead_runs_leftovers_and_nothing_else() {
    let root = fresh("gc");
    let cache = root.join("cache");
    let tmp = cache.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // A dead owner: a child that has exited.
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    let boot: String = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .replace('-', "")
        .chars()
        .take(8)
        .collect();
    let dead = tmp.join(format!("work-{pid}.12345.{boot}-dead00"));
    // A live owner (this test process) and a PID-reuse case (our PID with
    // another start time).
    let me = bootimage_gen::util::owner::Owner::me();
    let live = tmp.join(format!("work-{}-live00", me.tag()));
    let reused = tmp.join(format!(
        "work-{}.{}.{}-reuse0",
        me.pid,
        me.start + 7,
        me.boot
    ));
    for d in [&dead, &live, &reused] {
        std::fs::create_dir_all(d.join("vm")).unwrap();
    }
    // The "VM".
    let mut vm = Command::new("sleep").arg("300").spawn().unwrap();
    let vm_owner = bootimage_gen::util::owner::Owner::of(vm.id()).unwrap();
    bootimage_gen::util::owner::write_pidfile(&dead.join("vm/qemu.pid"), &vm_owner).unwrap();
    // An ext4 on a loop device over a file in a tmpfs inside the dead dir,
    // mounted inside it (a killed loopback run's stage in memory,
    // `--stage-in memory`): the tmpfs stays busy until the device is
    // detached, and a lazy unmount before that would keep its memory.
    let ram = dead.join("stage-ram");
    std::fs::create_dir_all(&ram).unwrap();
    must(
        Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64m", "tmpfs"])
            .arg(&ram),
    );
    let img = ram.join("stage-root.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    must(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img));
    let dev = must(Command::new("losetup").args(["--find", "--show"]).arg(&img));
    let mnt = dead.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    must(Command::new("mount").arg(&dev).arg(&mnt));
    // Frozen, as a run killed during `ostree admin deploy`'s freeze/thaw
    // cycle of /boot leaves it: unthawed, it would outlive its unmount and
    // hold the loop device until reboot.
    must(Command::new("fsfreeze").arg("-f").arg(&mnt));
    // A bind mount of something outside (the cache repo in a live build).
    let precious = root.join("precious");
    std::fs::create_dir_all(&precious).unwrap();
    std::fs::write(precious.join("keep"), b"keep").unwrap();
    let bind = dead.join("stage");
    std::fs::create_dir_all(&bind).unwrap();
    must(
        Command::new("mount")
            .arg("--bind")
            .arg(&precious)
            .arg(&bind),
    );
    // A partial file in an output directory.
    let out = root.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join(".x.raw.gz.Ab12.partial"), b"x").unwrap();
    std::fs::write(out.join("x.raw.gz"), b"done").unwrap();

    let t = Instant::now();
    let o = bin()
        .args(["gc", "--cache-dir"])
        .arg(&cache)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let took = t.elapsed();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        text.contains("leftovers of killed runs: 2 work dirs (")
            && text.contains("MiB), 1 VM process, 3 mounts, 1 loop device, 1 partial file"),
        "{text}"
    );
    // The VM is gone (reaped here: it is our child).
    let st = vm.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(st.signal(), Some(libc::SIGKILL));
    assert!(!dead.exists() && !reused.exists() && live.exists());
    assert_eq!(std::fs::read(precious.join("keep")).unwrap(), b"keep");
    assert!(bootimage_gen::sys::stale::loops()
        .iter()
        .all(|(d, _)| d.display().to_string() != dev));
    assert!(bootimage_gen::util::space::mounts_under(&root).is_empty());
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        1,
        "only x.raw.gz stays"
    );
    eprintln!(
        "chaos: gc removed a killed run's leftovers in {} ms: {}",
        took.as_millis(),
        text.trim()
    );
    std::fs::remove_dir_all(&root).ok();
}

/// `gc --max-size 0` removes every cache entry, except the one a running
/// `generate` holds; the next run imports again.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn gc_prunes_the_cache_but_not_an_entry_in_use() {
    let _s = serial();
    let root = fresh("gc-prune");
    let cache = root.join("cache");
    normal_run(&root.join("out-a"), &cache);
    // A run holding the entry (paused while encoding).
    let paused = run_until_paused(
        bin().args(gen_args(&root.join("out-b"), &cache)),
        "encode",
        Duration::from_secs(120),
    );
    let gc = |extra: &[&str]| -> String {
        let o = bin()
            .args(["gc", "--max-size", "0", "--cache-dir"])
            .arg(&cache)
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let held = gc(&[]);
    assert!(held.contains("kept OS image sha256:"), "{held}");
    assert!(held.contains("in use by a running bootimage-gen"), "{held}");
    let (st, log) = paused.signal(libc::SIGINT);
    assert_eq!(st.code(), Some(130), "{log}");
    let freed = gc(&[]);
    assert!(freed.contains("removed OS image sha256:"), "{freed}");
    // The cache shrinks to the bare repo: the commit's objects are freed.
    let line = freed.lines().last().unwrap().to_string();
    let mib: Vec<u64> = line.split(' ').filter_map(|w| w.parse().ok()).collect();
    assert!(
        mib.len() == 2 && mib[1] * 4 < mib[0],
        "the cache did not shrink: {line}"
    );
    let (log, _) = normal_run(&root.join("out-c"), &cache);
    assert!(log.contains("importing"), "{log}");
    eprintln!("chaos: gc while a run held the entry: kept it; after: {line}");
    std::fs::remove_dir_all(&root).ok();
}
