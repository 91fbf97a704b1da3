//! The kvm/nokvm backends: an unprivileged user with no loop devices
//! builds metal and qemu inside an emulated VM; the images boot; their
//! partition tables, filesystem labels and UUIDs and every file's content
//! equal the loopback backend's, and so do their bytes (both made with
//! one mkfs); a hung VM is stopped by the watchdog and a
//! SIGINT stops the VM, leaving nothing behind. (These tests need root to
//! set up the unprivileged user's directories and to mount the images for
//! the comparison; CI runs them as root.)
use crate::common::boot::{self, Firmware, Media};
use crate::common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The unprivileged user the VM runs are made as (`nobody`).
const UID: u32 = 65534;

/// Under /var/tmp, not the checkout: the unprivileged user must reach it
/// whatever the checkout's parents allow (a clone under /root is private).
fn root() -> PathBuf {
    scratch_at(PathBuf::from("/var/tmp/bootimage-gen-tests/backend-vm"))
}

/// The test release as an oci-archive the unprivileged user can read.
fn release() -> String {
    format!(
        "oci-archive:{}:release",
        root().join("release.ociarchive").display()
    )
}

/// `bootimage-gen` as the unprivileged user, from a copy it can execute.
fn unprivileged(args: &[&str]) -> Output {
    let dir = root();
    let exe = dir.join("bootimage-gen");
    Command::new("setpriv")
        .args([
            &format!("--reuid={UID}"),
            &format!("--regid={UID}"),
            "--clear-groups",
            "--",
        ])
        .arg(&exe)
        .args(args)
        .env("HOME", dir.join("home"))
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("BOOTIMAGE_GEN_CACHE_DIR")
        .output()
        .expect("running setpriv")
}

/// scripts/mkfs-root.sh's entry (what `make test` set up), copied where
/// the unprivileged user can read it: both runs make their filesystems
/// with it (`--mkfs-tools`), the VM through its read-only share.
fn readable_mkfs_tools() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/mkfs-root.sh");
    let out = must(Command::new("bash").arg(script));
    let entry = out
        .lines()
        .last()
        .expect("mkfs-root.sh prints its entry")
        .trim();
    let dst = root().join("mkfs-tools");
    must(Command::new("cp").arg("-a").arg(entry).arg(&dst));
    must(Command::new("chmod").arg("-R").arg("a+rX").arg(&dst));
    dst
}

/// A directory under the test root owned by the unprivileged user.
fn owned_dir(name: &str) -> PathBuf {
    let p = root().join(name);
    std::fs::create_dir_all(&p).unwrap();
    std::os::unix::fs::chown(&p, Some(UID), Some(UID)).unwrap();
    p
}

struct Built {
    vm_out: PathBuf,
    vm_raw: PathBuf,
    loop_raw: PathBuf,
    meta: Value,
    log: String,
}

/// One unprivileged nokvm run of metal + qemu, then one loopback run of
/// metal as root over the same cache (so both deploy the same imported
/// commit).
fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let _ = std::fs::remove_dir_all(root());
        std::fs::create_dir_all(root()).unwrap();
        for d in root().ancestors().take(2) {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let archive = root().join("release.ociarchive");
        std::fs::copy(fixture_dir().join("release.ociarchive"), &archive).unwrap();
        std::fs::set_permissions(&archive, std::fs::Permissions::from_mode(0o644)).unwrap();
        let exe = root().join("bootimage-gen");
        std::fs::copy(env!("CARGO_BIN_EXE_bootimage-gen"), &exe).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        owned_dir("home");
        let cache = owned_dir("cache");
        let tools = readable_mkfs_tools();
        let (vm_out, vm_raw) = (owned_dir("vm-out"), owned_dir("vm-raw"));
        let t = Instant::now();
        let o = unprivileged(&[
            "generate",
            &release(),
            "metal",
            "qemu",
            "--no-ostree-archive",
            "--progress",
            "plain",
            "--cache-dir",
            cache.to_str().unwrap(),
            "-o",
            vm_out.to_str().unwrap(),
            "--debug-raw-dir",
            vm_raw.to_str().unwrap(),
            "--mkfs-tools",
            tools.to_str().unwrap(),
        ]);
        let log = stderr(&o);
        assert!(o.status.success(), "unprivileged nokvm run failed:\n{log}");
        eprintln!("unprivileged nokvm metal+qemu: {:.1?}", t.elapsed());
        let meta: Value =
            serde_json::from_slice(&std::fs::read(vm_out.join("meta.json")).unwrap()).unwrap();
        let loop_raw = root().join("loop-raw");
        let o = Command::new(env!("CARGO_BIN_EXE_bootimage-gen"))
            .args([
                "generate",
                &release(),
                "metal",
                "--no-ostree-archive",
                "--backend",
                "loopback",
                "--cache-dir",
                cache.to_str().unwrap(),
                "-o",
                root().join("loop-out").to_str().unwrap(),
                "--debug-raw-dir",
                loop_raw.to_str().unwrap(),
                "--mkfs-tools",
                tools.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "loopback run failed:\n{}", stderr(&o));
        Built {
            vm_out,
            vm_raw,
            loop_raw,
            meta,
            log,
        }
    })
}

/// qemu processes whose command line mentions `needle`.
fn qemus_with(needle: &str) -> Vec<String> {
    let out = Command::new("ps")
        .args(["-eo", "pid,args"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("qemu-system") && l.contains(needle))
        .map(str::to_string)
        .collect()
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn unprivileged_user_builds_in_an_emulated_vm() {
    let b = built();
    assert!(
        b.log
            .contains("backend nokvm: auto: the loopback backend cannot run"),
        "auto must pick nokvm and say why:\n{}",
        b.log
    );
    assert!(b.log.contains("VM appliance"), "{}", b.log);
    for k in ["metal", "qemu"] {
        let p = b.vm_out.join(b.meta["images"][k]["path"].as_str().unwrap());
        let md = std::fs::metadata(&p).unwrap();
        assert_eq!(md.uid(), UID, "{} is the user's", p.display());
    }
    // Nothing left: no work dir, no VM.
    let cache = root().join("cache");
    assert!(
        entries(&cache.join("tmp")).is_empty(),
        "{:?}",
        entries(&cache.join("tmp"))
    );
    assert!(qemus_with(cache.to_str().unwrap()).is_empty());
    // A cached appliance: a second run does not rebuild it.
    let o = unprivileged(&[
        "generate",
        &release(),
        "--dry-run",
        "metal",
        "--cache-dir",
        cache.to_str().unwrap(),
        "-o",
        owned_dir("dry-out").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let apps = entries(&cache.join("appliance"));
    assert_eq!(apps.len(), 1, "one appliance: {apps:?}");
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn kvm_backend_needs_a_usable_dev_kvm() {
    let _ = built();
    let o = unprivileged(&[
        "generate",
        &release(),
        "metal",
        "--backend",
        "kvm",
        "--cache-dir",
        root().join("cache").to_str().unwrap(),
        "-o",
        owned_dir("kvm-out").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("--backend kvm cannot run here: /dev/kvm is not usable"),
        "{e}"
    );
    assert!(e.contains("--backend nokvm"), "{e}");
    let o = unprivileged(&[
        "generate",
        &release(),
        "metal",
        "--backend",
        "loopback",
        "-o",
        owned_dir("kvm-out").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("it needs root"), "{}", stderr(&o));
}

/// The VM's metal disk boots (SeaBIOS). Its other images are derived
/// from the same base disk by the same host code as loopback's (the base
/// disks are shown equivalent below: tables, filesystems, every file, the
/// ESP's bytes), and loopback's qcow2 boots under OVMF in `generate`:
/// booting the VM's qcow2 too was that boot twice (issue 27).
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn vm_metal_boots() {
    let b = built();
    let r = boot::assert_boots(
        &[Media::disk(b.vm_raw.join("metal.raw"))],
        Firmware::Bios,
        boot::default_timeout(),
    );
    assert_eq!(r.marker.platform, "metal", "{}", r.log);
    assert!(r.marker.firstboot, "{}", r.log);
    // The qemu image holds what the run derived for qemu, as qcow2.
    let qcow2 = root().join("qemu.qcow2");
    let gz = b
        .vm_out
        .join(b.meta["images"]["qemu"]["path"].as_str().unwrap());
    gunzip(&gz, &qcow2);
    must(
        Command::new("qemu-img")
            .args(["compare", "-f", "qcow2", "-F", "raw"])
            .arg(&qcow2)
            .arg(b.vm_raw.join("qemu.raw")),
    );
    std::fs::remove_file(&qcow2).unwrap();
}

/// Every file under `dir`: path -> type, mode, owner, and content hash or
/// link target (not times: they differ between any two builds).
fn tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for p in names {
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let ft = md.file_type();
            let what = if ft.is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if ft.is_dir() {
                "dir".to_string()
            } else if ft.is_file() {
                let d = sha256_file(&p);
                format!("file {} {d}", md.len())
            } else {
                format!("special {:o}", md.mode() & 0o170000)
            };
            out.insert(
                rel,
                format!(
                    "{what} mode={:o} {}:{}",
                    md.mode() & 0o7777,
                    md.uid(),
                    md.gid()
                ),
            );
            if ft.is_dir() {
                walk(base, &p, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn sha256_file(p: &Path) -> String {
    must(Command::new("sha256sum").arg(p))
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// Byte range of partition `n` (1-based) as sgdisk reports it.
fn partition(raw: &Path, n: u32) -> (u64, u64) {
    let info = must(Command::new("sgdisk").arg(format!("-i{n}")).arg(raw));
    let sector = |key: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (first, last) = (sector("First sector: "), sector("Last sector: "));
    (first * 512, (last + 1 - first) * 512)
}

fn read_range(p: &Path, at: u64, len: u64) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(p).unwrap();
    let mut v = vec![0u8; len as usize];
    f.read_exact_at(&mut v, at).unwrap();
    v
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn vm_and_loopback_disks_are_equivalent() {
    let b = built();
    let (v, l) = (b.vm_raw.join("metal.raw"), b.loop_raw.join("metal.raw"));
    // Partition tables: the same entries, GUIDs and names.
    for n in 1..=4 {
        let a = must(Command::new("sgdisk").arg(format!("-i{n}")).arg(&v));
        let c = must(Command::new("sgdisk").arg(format!("-i{n}")).arg(&l));
        assert_eq!(a, c, "partition {n}");
    }
    // `sgdisk -p` without its first line (the file name).
    let table = |f: &Path| {
        let p = must(Command::new("sgdisk").arg("-p").arg(f));
        p.lines().skip(1).collect::<Vec<_>>().join("\n")
    };
    assert_eq!(table(&v), table(&l));
    // Filesystem types, labels and UUIDs.
    for n in 2..=4 {
        let (at, _) = partition(&v, n);
        let probe = |f: &Path| {
            let o = must(
                Command::new("blkid")
                    .args(["-p", "-o", "export", "-O", &at.to_string()])
                    .arg(f),
            );
            // Without DEVNAME (the file name).
            o.lines()
                .filter(|l| !l.starts_with("DEVNAME="))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let (pv, pl) = (probe(&v), probe(&l));
        assert!(pv.contains("UUID=") && pv.contains("LABEL="), "{pv}");
        assert_eq!(pv, pl, "partition {n}");
    }
    // BIOS boot code and the ESP (our FAT writer is deterministic): bytes.
    for n in [1, 2] {
        let (at, len) = partition(&v, n);
        assert!(
            read_range(&v, at, len) == read_range(&l, at, len),
            "partition {n} differs"
        );
    }
    assert!(read_range(&v, 0, 440) == read_range(&l, 0, 440), "MBR code");
    // boot (ext4) and root (xfs): every file the same.
    let mnt = root().join("mnt");
    let mut trees = Vec::new();
    for (i, f) in [&v, &l].into_iter().enumerate() {
        let (bat, blen) = partition(f, 3);
        let (rat, rlen) = partition(f, 4);
        let bm = Mnt::new(
            f,
            bat,
            blen,
            "ext4",
            "ro,noload",
            &mnt.join(format!("boot-{i}")),
        );
        let rm = Mnt::new(
            f,
            rat,
            rlen,
            "xfs",
            "ro,norecovery,nouuid",
            &mnt.join(format!("root-{i}")),
        );
        trees.push((tree(&bm.0), tree(&rm.0)));
    }
    let ((bv, rv), (bl, rl)) = (&trees[0], &trees[1]);
    assert!(bv.len() > 5 && rv.len() > 100, "{} {}", bv.len(), rv.len());
    for (name, a, c) in [("boot", bv, bl), ("root", rv, rl)] {
        let diff: Vec<_> = a
            .iter()
            .filter(|(k, x)| c.get(*k) != Some(x))
            .map(|(k, x)| format!("{k}: {x} vs {:?}", c.get(k)))
            .chain(
                c.keys()
                    .filter(|k| !a.contains_key(*k))
                    .map(|k| format!("only loopback: {k}")),
            )
            .take(20)
            .collect();
        assert!(
            diff.is_empty(),
            "{name} filesystems differ:\n{}",
            diff.join("\n")
        );
    }
    // Reproducible (docs/contract.md §9): the same disk, byte for byte,
    // whichever backend made it.
    assert!(
        b.log
            .contains("root and boot made from the staged tree by mkfs.xfs"),
        "{}",
        b.log
    );
    let differing: Vec<u32> = (1..=4)
        .filter(|n| {
            let (at, len) = partition(&v, *n);
            read_range(&v, at, len) != read_range(&l, at, len)
        })
        .collect();
    assert!(differing.is_empty(), "partitions {differing:?} differ");
    assert_eq!(
        sha256_file(&v),
        sha256_file(&l),
        "the nokvm and loopback metal disks differ"
    );
}

/// Start a root nokvm run in its own cache; returns the child and its
/// stderr lines as they come.
type Run = (
    std::process::Child,
    PathBuf,
    std::sync::mpsc::Receiver<String>,
);

fn start_vm_run(name: &str, extra_env: &[(&str, &str)], extra: &[&str]) -> Run {
    let dir = scratch(&format!("backend-vm-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootimage-gen"));
    c.args([
        "generate",
        &oci("release"),
        "metal",
        "--no-ostree-archive",
        "--progress",
        "plain",
        "--backend",
        "nokvm",
        "--cache-dir",
        dir.join("cache").to_str().unwrap(),
        "-o",
        dir.join("out").to_str().unwrap(),
    ])
    .args(extra)
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    for (k, v) in extra_env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(err).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    (child, dir, rx)
}

/// Nothing of a run under `dir` is left: no VM, no work dir, no output.
fn assert_nothing_left(dir: &Path) {
    assert!(
        qemus_with(dir.to_str().unwrap()).is_empty(),
        "{:?}",
        qemus_with(dir.to_str().unwrap())
    );
    let tmp = dir.join("cache/tmp");
    assert!(
        entries(&tmp).is_empty(),
        "work dirs left: {:?}",
        entries(&tmp)
    );
    let out = dir.join("out");
    assert!(entries(&out).is_empty(), "output left: {:?}", entries(&out));
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn watchdog_stops_a_hung_vm() {
    let t = Instant::now();
    // 45 s once the VM shows life; its boot, which under TCG on a loaded
    // 2-core host took over 45 s, has its own allowance (at least 120 s).
    let (child, dir, rx) = start_vm_run(
        "hang",
        &[("BOOTIMAGE_GEN_VM_DEBUG_HANG", "1")],
        &["--vm-watchdog", "45"],
    );
    let o = child.wait_with_output().unwrap();
    let log: Vec<String> = rx.iter().collect();
    let log = log.join("\n");
    assert_eq!(o.status.code(), Some(1), "{log}");
    assert!(
        log.contains("error: the backend VM made no progress for 45 s (its heartbeat stopped) and was stopped"),
        "{log}"
    );
    assert!(log.contains("--vm-watchdog"), "{log}");
    let kept = dir.join("cache/last-vm-console.log");
    assert!(
        log.contains(kept.to_str().unwrap()) && kept.exists(),
        "{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
    assert_nothing_left(&dir);
    eprintln!("hung VM stopped after {:.1?}", t.elapsed());
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn sigint_stops_the_vm() {
    let (mut child, dir, rx) = start_vm_run("sigint", &[], &[]);
    let t = Instant::now();
    let mut log = String::new();
    // Wait until the VM runs the job.
    loop {
        let l = rx
            .recv_timeout(Duration::from_secs(300))
            .unwrap_or_else(|_| panic!("no progress:\n{log}"));
        log.push_str(&l);
        log.push('\n');
        if l.starts_with("base disk") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(300), "{log}");
    }
    let vms = qemus_with(dir.to_str().unwrap());
    assert!(!vms.is_empty(), "the VM runs");
    // The emulated guest skips the IO-APIC timer check a loaded host fails
    // (its kernel panicked so in a suite run: "IO-APIC + timer doesn't work").
    assert!(
        vms.iter().all(|v| v.contains(" no_timer_check ")),
        "{vms:?}"
    );
    send_signal(&child, libc::SIGINT);
    let st = child.wait().unwrap();
    log.extend(rx.iter().map(|l| l + "\n"));
    assert_eq!(st.code(), Some(130), "{log}");
    assert!(log.contains("interrupted"), "{log}");
    assert_nothing_left(&dir);
}
