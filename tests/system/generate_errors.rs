//! Bad input to `generate` (the disk issue's "Bad input" list): an unknown or
//! not-yet-built platform, an output path that is a file or not writable, too
//! little free space, a loopback backend without root or without loop
//! devices, an OS without GRUB, an unknown compressor; and `--dry-run`.
//!
//! Every failure must exit 1 with one `error:` line naming the cause and the
//! fix, no panic, and leave nothing behind: no loop device backed by a file
//! in the test's sandbox and no mount inside it (watched while the tool runs,
//! and checked after), nothing in (or no creation of) the output directory,
//! the cache's `tmp/` empty, no skopeo dirs in /var/tmp.
use crate::common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_bootimage-gen");
/// `nobody`: an unprivileged user.
const NOBODY: &[&str] = &[
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];
/// A private mount namespace whose /dev is an empty tmpfs (no loop-control).
const NO_DEV: &[&str] = &[
    "unshare",
    "-m",
    "sh",
    "-c",
    r#"mount -t tmpfs none /dev && exec "$0" "$@""#,
];

/// A temporary directory holding everything a case creates: the cache, the
/// output directory, the tool's work files (under the cache), our tmpfs.
struct Sandbox {
    /// Our tmpfs mounts ([`Mnt::tmpfs`]), unmounted before the directory
    /// is removed (fields drop in order).
    mounts: Vec<Mnt>,
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        Sandbox {
            mounts: Vec::new(),
            _dir: dir,
            root,
        }
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
    fn cache(&self) -> PathBuf {
        self.path("cache")
    }
    fn tmpfs(&mut self, rel: &str, options: &str) -> PathBuf {
        let p = self.path(rel);
        self.mounts.push(Mnt::tmpfs(&p, options));
        p
    }
    fn inside(&self, p: &str) -> bool {
        Path::new(p).starts_with(&self.root)
    }
    /// Loop devices whose backing file is in the sandbox (`losetup`).
    fn loop_devices(&self) -> BTreeSet<String> {
        let out = must(Command::new("losetup").args([
            "--list",
            "--noheadings",
            "--raw",
            "--output",
            "NAME,BACK-FILE",
        ]));
        out.lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(_, f)| self.inside(&unescape_hex(f)))
            .map(|(d, f)| format!("{d} {}", unescape_hex(f)))
            .collect()
    }
    /// Mounts in the sandbox other than our own tmpfs (`findmnt`).
    fn foreign_mounts(&self) -> BTreeSet<String> {
        let out =
            must(Command::new("findmnt").args(["--raw", "--noheadings", "--output", "TARGET"]));
        out.lines()
            .map(unescape_hex)
            .filter(|t| self.inside(t) && !self.mounts.iter().any(|m| Path::new(t) == m.0))
            .collect()
    }
}

/// Undo the escapes tools use for unsafe characters in paths: `losetup`
/// writes `\xHH` (`hex`), /proc/self/mountinfo writes `\ooo` (octal).
fn unescape(s: &str, hex: bool) -> String {
    let (skip, radix) = if hex { (2, 16) } else { (1, 8) };
    let width = skip + if hex { 2 } else { 3 };
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let marker_ok = !hex || b.get(i + 1) == Some(&b'x');
        if b[i] == b'\\' && marker_ok && i + width <= b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + skip..i + width], radix) {
                out.push(v);
                i += width;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn unescape_hex(s: &str) -> String {
    unescape(s, true)
}

fn unescape_octal(s: &str) -> String {
    unescape(s, false)
}

/// What a watcher saw while the tool ran: loop devices backed by files in the
/// sandbox, mounts in it (ours excluded).
#[derive(Default)]
struct Seen {
    loops: BTreeSet<String>,
    mounts: BTreeSet<String>,
}

/// Poll sysfs and mountinfo (cheap) until stopped.
fn watch(
    root: PathBuf,
    ours: Vec<PathBuf>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Seen> {
    std::thread::spawn(move || {
        let mut seen = Seen::default();
        loop {
            let last = stop.load(Ordering::SeqCst);
            if let Ok(d) = std::fs::read_dir("/sys/block") {
                for e in d.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if !name.starts_with("loop") {
                        continue;
                    }
                    if let Ok(f) = std::fs::read_to_string(e.path().join("loop/backing_file")) {
                        if Path::new(f.trim()).starts_with(&root) {
                            seen.loops.insert(format!("/dev/{name} {}", f.trim()));
                        }
                    }
                }
            }
            if let Ok(mi) = std::fs::read_to_string("/proc/self/mountinfo") {
                for l in mi.lines() {
                    if let Some(t) = l.split(' ').nth(4).map(unescape_octal) {
                        if Path::new(&t).starts_with(&root)
                            && !ours.iter().any(|o| o == Path::new(&t))
                        {
                            seen.mounts.insert(t);
                        }
                    }
                }
            }
            if last {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

/// One run of `bootimage-gen generate`.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
    seen: Seen,
    args: Vec<String>,
}

/// skopeo's extraction dirs in /var/tmp (the tool points it elsewhere).
fn var_tmp_oci() -> BTreeSet<String> {
    std::fs::read_dir("/var/tmp")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("oci"))
                .collect()
        })
        .unwrap_or_default()
}

/// Run `generate ARGS --cache-dir <sandbox>/cache`, under `wrapper` (a
/// command that execs its arguments) when not empty, watching the sandbox.
fn generate(sb: &Sandbox, wrapper: &[&str], args: &[&str]) -> Run {
    let cache = sb.cache();
    let mut c = match wrapper.split_first() {
        Some((w, rest)) => {
            let mut c = Command::new(w);
            c.args(rest).arg(BIN);
            c
        }
        None => Command::new(BIN),
    };
    c.arg("generate")
        .args(args)
        .arg("--cache-dir")
        .arg(&cache)
        .env("BOOTIMAGE_GEN_CACHE_DIR", &cache)
        .env_remove("REGISTRY_AUTH_FILE")
        .env("HOME", &cache)
        .env_remove("RUST_BACKTRACE");
    let var_tmp = var_tmp_oci();
    let stop = Arc::new(AtomicBool::new(false));
    let w = watch(
        sb.root.clone(),
        sb.mounts.iter().map(|m| m.0.clone()).collect(),
        stop.clone(),
    );
    let t = Instant::now();
    let o = c.output().expect("running bootimage-gen");
    let elapsed = t.elapsed();
    stop.store(true, Ordering::SeqCst);
    let seen = w.join().unwrap();
    let leaked: Vec<_> = var_tmp_oci().difference(&var_tmp).cloned().collect();
    assert!(
        leaked.is_empty(),
        "skopeo dirs left in /var/tmp: {leaked:?}"
    );
    Run {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        elapsed,
        seen,
        args: args.iter().map(|s| s.to_string()).collect(),
    }
}

/// No loop device or mount of the sandbox now, nor while the tool ran (when
/// `never` is set; a successful build makes some and must release them).
fn assert_nothing_attached(sb: &Sandbox, r: &Run, never: bool) {
    if never {
        assert!(
            r.seen.loops.is_empty() && r.seen.mounts.is_empty(),
            "{:?}: loop devices {:?} / mounts {:?} were made before failing",
            r.args,
            r.seen.loops,
            r.seen.mounts
        );
    }
    let loops = sb.loop_devices();
    assert!(
        loops.is_empty(),
        "{:?}: loop devices left: {loops:?}",
        r.args
    );
    let mounts = sb.foreign_mounts();
    assert!(mounts.is_empty(), "{:?}: mounts left: {mounts:?}", r.args);
    assert_cache_clean(&sb.cache());
}

/// The failure contract; returns the error line. Each of `words` (the cause
/// and the fix) must appear in it, case-insensitively.
fn assert_fails(sb: &Sandbox, r: &Run, words: &[&str]) -> String {
    let line = error_line(r, words);
    assert_nothing_attached(sb, r, true);
    line
}

/// Exit 1, no panic, exactly one error line, holding each of `words`
/// (case-insensitively); the line.
fn error_line(r: &Run, words: &[&str]) -> String {
    let err = &r.stderr;
    assert_eq!(
        r.code,
        Some(1),
        "expected exit 1 for {:?}\nstderr:\n{err}",
        r.args
    );
    assert!(
        !err.contains("panicked")
            && !err.contains("RUST_BACKTRACE")
            && !err.contains("stack backtrace"),
        "panic/backtrace:\n{err}"
    );
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "expected exactly one error line:\n{err}");
    let line = lines[0].to_string();
    let low = line.to_lowercase();
    for w in words {
        assert!(
            low.contains(&w.to_lowercase()),
            "the error line does not mention '{w}':\n{line}"
        );
    }
    line
}

/// The output directory was not created (it did not exist before).
fn assert_not_created(out: &Path) {
    assert!(
        std::fs::symlink_metadata(out).is_err(),
        "output directory {} was created",
        out.display()
    );
}

/// The output directory holds nothing (it existed, empty, before).
fn assert_empty(out: &Path) {
    let left: Vec<_> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{} holds {left:?}", out.display());
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Byte counts of every "<number> <unit>" in a message.
fn sizes_in(msg: &str) -> Vec<(String, f64)> {
    let unit = |u: &str| -> Option<f64> {
        Some(match u {
            "B" | "bytes" => 1.0,
            "KiB" | "K" => 1024.0,
            "MiB" | "M" => 1024.0 * 1024.0,
            "GiB" | "G" => 1024.0 * 1024.0 * 1024.0,
            "TiB" | "T" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            "kB" | "KB" => 1e3,
            "MB" => 1e6,
            "GB" => 1e9,
            _ => return None,
        })
    };
    let words: Vec<&str> = msg
        .split(|c: char| c.is_whitespace() || "(),;:".contains(c))
        .filter(|w| !w.is_empty())
        .collect();
    let mut v = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let split = w
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(w.len());
        let (num, rest) = w.split_at(split);
        let Ok(n) = num.parse::<f64>() else { continue };
        let u = if rest.is_empty() {
            words.get(i + 1).copied().unwrap_or("")
        } else {
            rest
        };
        if let Some(m) = unit(u) {
            v.push((format!("{num} {u}"), n * m));
        }
    }
    v
}

/// Every figure in a space error is non-zero ("0.0 GiB" tells nothing).
fn assert_space_figures_nonzero(line: &str) {
    let s = sizes_in(line);
    assert!(s.len() >= 2, "no sizes in the space error:\n{line}");
    for (txt, b) in &s {
        assert!(*b > 0.0, "the space error shows '{txt}':\n{line}");
    }
}

/// What a space error says is needed exceeds what it says is free (the last
/// figure); otherwise it contradicts itself.
fn assert_space_figures_consistent(line: &str) {
    let s = sizes_in(line);
    assert!(s.len() >= 2, "no sizes in the space error:\n{line}");
    let (free, need) = s.split_last().unwrap();
    let total: f64 = need.iter().map(|x| x.1).sum();
    let said: Vec<&str> = need.iter().map(|x| x.0.as_str()).collect();
    assert!(
        total > free.1,
        "the space error says the build needs {said:?} ({total:.0} bytes) and that {} ({:.0} bytes) is free, which would be enough:\n{line}",
        free.0,
        free.1
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn unknown_platform_lists_the_valid_ones() {
    let sb = Sandbox::new();
    let out = sb.path("out");
    let r = generate(
        &sb,
        &[],
        &[&oci("release"), "metal", "nosuch", "-o", p(&out)],
    );
    assert_fails(
        &sb,
        &r,
        &[
            "'nosuch'",
            "unknown platform",
            "valid platforms",
            "metal",
            "metal4k",
            "qemu",
            "vmware",
        ],
    );
    assert_not_created(&out);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn output_is_a_regular_file() {
    let sb = Sandbox::new();
    let f = sb.path("afile");
    std::fs::write(&f, "keep me").unwrap();
    let r = generate(&sb, &[], &[&oci("release"), "metal", "-o", p(&f)]);
    assert_fails(&sb, &r, &[p(&f), "not a directory", "-o"]);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "keep me");
    assert_eq!(
        std::fs::read_dir(&sb.root).unwrap().count(),
        1,
        "only the file"
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn output_on_a_read_only_filesystem() {
    let mut sb = Sandbox::new();
    let ro = sb.tmpfs("ro", "ro,size=1m");
    // The read-only directory itself, and a directory to be created in it.
    let r = generate(&sb, &[], &[&oci("release"), "metal", "-o", p(&ro)]);
    assert_fails(&sb, &r, &[p(&ro), "not writable", "read-only", "-o"]);
    assert_empty(&ro);
    let sub = ro.join("out");
    let r = generate(&sb, &[], &[&oci("release"), "metal", "-o", p(&sub)]);
    assert_fails(&sb, &r, &["not writable", "read-only", "-o"]);
    assert_not_created(&sub);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn not_enough_space_fails_before_building() {
    let mut sb = Sandbox::new();
    let small = sb.tmpfs("small", "size=8m");
    let r = generate(&sb, &[], &[&oci("release"), "metal", "-o", p(&small)]);
    let line = assert_fails(&sb, &r, &["not enough free space", p(&small), "-o"]);
    assert_empty(&small);
    assert!(
        !r.stderr.contains("base disk"),
        "started building:\n{}",
        r.stderr
    );
    assert!(r.elapsed < Duration::from_secs(30), "took {:?}", r.elapsed);
    assert_space_figures_nonzero(&line);
    assert_space_figures_consistent(&line);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn not_enough_space_does_not_create_the_output_dir() {
    let mut sb = Sandbox::new();
    let small = sb.tmpfs("small", "size=8m");
    let out = small.join("out");
    let r = generate(&sb, &[], &[&oci("release"), "metal", "-o", p(&out)]);
    assert_fails(&sb, &r, &["not enough free space", "-o"]);
    assert!(
        !r.stderr.contains("base disk"),
        "started building:\n{}",
        r.stderr
    );
    assert_not_created(&out);
    assert_empty(&small);
}

/// Room for the artifacts but not for the margin the tool keeps: the message
/// must not claim less is needed than is free.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn not_enough_space_message_is_consistent() {
    let mut sb = Sandbox::new();
    let mid = sb.tmpfs("mid", "size=100m");
    let r = generate(&sb, &[], &[&oci("release"), "metal", "-o", p(&mid)]);
    let line = assert_fails(&sb, &r, &["not enough free space", "-o"]);
    assert_empty(&mid);
    assert_space_figures_consistent(&line);
    assert_space_figures_nonzero(&line);
}

/// Make the sandbox usable by `nobody`, and check it can run the tool.
fn for_nobody(sb: &Sandbox) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&sb.root, std::fs::Permissions::from_mode(0o777)).unwrap();
    let index = fixture_dir().join("oci/index.json");
    let mut c = Command::new(NOBODY[0]);
    c.args(&NOBODY[1..])
        .args(["test", "-x", BIN, "-a", "-r"])
        .arg(&index)
        .args(["-a", "-w", p(&sb.root)]);
    must(&mut c);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn loopback_without_root_says_root_is_needed() {
    let sb = Sandbox::new();
    for_nobody(&sb);
    let out = sb.path("out");
    let r = generate(
        &sb,
        NOBODY,
        &[
            &oci("release"),
            "metal",
            "--backend",
            "loopback",
            "-o",
            p(&out),
        ],
    );
    // ... and names the backend that needs no root.
    assert_fails(
        &sb,
        &r,
        &[
            "--backend loopback",
            "needs root",
            "uid 65534",
            "--backend nokvm",
        ],
    );
    assert_not_created(&out);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn auto_backend_without_root_says_what_is_missing() {
    let sb = Sandbox::new();
    for_nobody(&sb);
    let out = sb.path("out");
    // `auto` falls back to a VM backend and says why (the VM run itself is
    // tested in tests/system/backend_vm.rs).
    let r = generate(
        &sb,
        NOBODY,
        &[&oci("release"), "metal", "--dry-run", "-o", p(&out)],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let plan: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let reason = plan["backend"]["reason"].as_str().unwrap();
    assert!(
        ["kvm", "nokvm"].contains(&plan["backend"]["name"].as_str().unwrap()),
        "{plan}"
    );
    assert!(
        reason.contains("needs root") && reason.contains("uid 65534"),
        "{reason}"
    );
    assert_not_created(&out);
}

fn dev_mount() -> String {
    must(Command::new("findmnt").args([
        "--noheadings",
        "--output",
        "SOURCE,FSTYPE,OPTIONS",
        "--mountpoint",
        "/dev",
    ]))
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn without_loop_devices() {
    let sb = Sandbox::new();
    let dev_before = dev_mount();
    let out = sb.path("out");
    {
        let backend = "loopback";
        let r = generate(
            &sb,
            NO_DEV,
            &[
                &oci("release"),
                "metal",
                "--backend",
                backend,
                "-o",
                p(&out),
            ],
        );
        assert_fails(
            &sb,
            &r,
            &[
                "/dev/loop-control",
                "loop device",
                "privileged",
                "pass the loop devices in",
            ],
        );
        assert_not_created(&out);
    }
    // (`auto` here falls back to a VM backend: tests/system/backend_vm.rs.)
    // The host's /dev is untouched.
    assert_eq!(dev_mount(), dev_before);
    use std::os::unix::fs::FileTypeExt;
    for d in ["/dev/loop-control", "/dev/null"] {
        let t = std::fs::metadata(d).unwrap().file_type();
        assert!(t.is_char_device(), "{d} is gone from the host");
    }
}

/// A ppc64le OS without GRUB for Open Firmware (the bootloader its arch
/// needs): one line naming the directory, the arch and the package, for
/// disks and for the live ISO; nothing created.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn ppc64le_os_without_powerpc_grub() {
    let sb = Sandbox::new();
    let out = sb.path("out");
    for plat in ["metal4k", "live"] {
        let r = generate(
            &sb,
            &[],
            &[&oci("release-ppc64le-nogrub"), plat, "-o", p(&out)],
        );
        assert_fails(
            &sb,
            &r,
            &[
                "no GRUB for Open Firmware",
                "/usr/lib/grub/powerpc-ieee1275",
                "ppc64le",
                "PReP",
                "grub2-ppc64le-modules",
            ],
        );
        assert_not_created(&out);
    }
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn os_without_grub() {
    let sb = Sandbox::new();
    let out = sb.path("out");
    for plat in ["metal", "metal4k"] {
        let r = generate(&sb, &[], &[&oci("release-nogrub"), plat, "-o", p(&out)]);
        assert_fails(
            &sb,
            &r,
            &[
                "the OS has no GRUB",
                "UEFI",
                "/usr/lib/bootupd/updates/EFI",
                "missing",
                "bootable",
            ],
        );
        assert_not_created(&out);
    }
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn os_without_bios_grub() {
    let sb = Sandbox::new();
    let out = sb.path("out");
    let r = generate(
        &sb,
        &[],
        &[
            &oci("release-nobiosgrub"),
            "metal",
            "metal4k",
            "-o",
            p(&out),
        ],
    );
    let line = assert_fails(
        &sb,
        &r,
        &[
            "the OS has no GRUB for BIOS",
            "/usr/lib/grub/i386-pc",
            "missing",
            "metal4k alone",
        ],
    );
    // It names metal as the one that needs BIOS GRUB, not metal4k.
    let needs = line.split(';').nth(1).unwrap_or("");
    assert!(
        needs.contains("metal") && !needs.trim_start().starts_with("metal4k"),
        "{line}"
    );
    assert_not_created(&out);
    // metal4k alone (UEFI only) builds.
    let r = generate(
        &sb,
        &[],
        &[&oci("release-nobiosgrub"), "metal4k", "-o", p(&out)],
    );
    assert_eq!(r.code, Some(0), "metal4k failed:\n{}", r.stderr);
    let f = fx();
    let art = out.join(format!(
        "{}-{}-metal4k.x86_64.raw.gz",
        f["osname"].as_str().unwrap(),
        f["rhel_coreos"]["version"].as_str().unwrap()
    ));
    assert!(art.is_file(), "{} missing", art.display());
    // The watcher works: the build was seen attaching and mounting.
    assert!(
        !r.seen.loops.is_empty() && !r.seen.mounts.is_empty(),
        "the watcher saw no loop device or mount during a build"
    );
    assert!(!out
        .join(format!(
            "{}-{}-metal.x86_64.raw.gz",
            f["osname"].as_str().unwrap(),
            f["rhel_coreos"]["version"].as_str().unwrap()
        ))
        .exists());
    assert_nothing_attached(&sb, &r, false);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn unknown_compressor_lists_the_valid_ones() {
    let sb = Sandbox::new();
    let out = sb.path("out");
    let r = generate(
        &sb,
        &[],
        &[&oci("release"), "metal", "--compress", "lz4", "-o", p(&out)],
    );
    assert_fails(&sb, &r, &["lz4", "none", "gzip", "xz", "zstd"]);
    assert_not_created(&out);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn dry_run_writes_nothing() {
    let sb = Sandbox::new();
    let out = sb.path("out");
    let f = fx();
    let prefix = format!(
        "{}-{}-",
        f["osname"].as_str().unwrap(),
        f["rhel_coreos"]["version"].as_str().unwrap()
    );
    let args = [
        &oci("release"),
        "metal",
        "qemu",
        "metal4k",
        "--dry-run",
        "-o",
        p(&out),
    ];
    let plan = |r: &Run| -> Value {
        assert_eq!(r.code, Some(0), "dry run failed:\n{}", r.stderr);
        assert_nothing_attached(&sb, r, true);
        assert_not_created(&out);
        let v: Value = serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("the plan is not JSON ({e}):\n{}", r.stdout));
        let files: Vec<&str> = v["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["file"].as_str().unwrap())
            .collect();
        let want: Vec<String> = [
            "metal.x86_64.raw.gz",
            "qemu.x86_64.qcow2.gz",
            "metal4k.x86_64.raw.gz",
        ]
        .iter()
        .map(|s| format!("{prefix}{s}"))
        .collect();
        assert_eq!(files, want);
        v
    };
    // A cold cache: the OS is not imported, so the disk sizes are not known
    // yet (plan.rs: "Known once the OS is imported").
    let cold = plan(&generate(&sb, &[], &args));
    assert_eq!(cold["os"]["imported"], false, "{cold:#}");
    // With the OS in the cache, the plan has the disk sizes.
    ok_json(&sb.cache(), &["inspect", &oci("release"), "--import"]);
    let warm = plan(&generate(&sb, &[], &args));
    assert_eq!(warm["os"]["imported"], true, "{warm:#}");
    let d = &warm["disk"];
    let metal = d["metal_size"].as_u64().unwrap_or(0);
    assert!(metal > 0, "no disk.metal_size: {warm:#}");
    assert!(d["root_size"].as_u64().unwrap() < metal);
    assert!(d["content_bytes"].as_u64().unwrap() > 0);
    for a in warm["artifacts"].as_array().unwrap() {
        assert!(a["disk_size"].as_u64().unwrap() >= metal, "{a:#}");
    }
}

/// docs/contract.md §1.3: platforms.json only supplies console settings. A platform it
/// does not list (metal never is, upstream) is built with
/// `ignition.platform.id` alone; the plan says where each console came from.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn unlisted_platforms_are_planned_with_no_console() {
    let sb = Sandbox::new();
    let out = sb.path("out");
    ok_json(&sb.cache(), &["inspect", &oci("release"), "--import"]);
    let r = generate(
        &sb,
        &[],
        &[
            &oci("release"),
            "metal",
            "metal4k",
            "qemu",
            "--dry-run",
            "-o",
            p(&out),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let plan: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let art = |name: &str| {
        plan["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["platform"] == name)
            .unwrap_or_else(|| panic!("{name} not planned: {plan:#}"))
            .clone()
    };
    for m in ["metal", "metal4k"] {
        let a = art(m);
        assert_eq!(a["kargs"], serde_json::json!([]), "{a:#}");
        assert_eq!(a["grub_commands"], serde_json::json!([]), "{a:#}");
        let src = a["console_source"].as_str().unwrap();
        assert!(src.contains("does not list metal"), "{src}");
    }
    let q = art("qemu");
    assert!(
        q["console_source"]
            .as_str()
            .unwrap()
            .contains("platforms.json entry qemu"),
        "{q:#}"
    );
    assert!(!q["kargs"].as_array().unwrap().is_empty(), "{q:#}");
    assert_not_created(&out);
}

/// `all` = what the release's pinned stream lists for the arch, plus
/// metal4k and live with metal; listed platforms this version cannot build
/// are reported as skipped.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn all_follows_the_release_stream() {
    let sb = Sandbox::new();
    let out = sb.path("out");
    let r = generate(
        &sb,
        &[],
        &[&oci("release"), "all", "--dry-run", "-o", p(&out)],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let plan: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let mut names: Vec<String> = plan["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["platform"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    // What the fixture's stream (the release's coreos-bootimages ConfigMap) lists.
    let stream = fixture_stream();
    let listed: Vec<String> = stream["architectures"]["x86_64"]["artifacts"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let built = bootimage_built_platforms();
    let mut want: Vec<String> = listed
        .iter()
        .filter(|p| built.contains(p))
        .cloned()
        .collect();
    want.extend(["metal4k".to_string(), "live".to_string()]);
    want.sort();
    want.dedup();
    assert_eq!(names, want, "{}", r.stderr);
    // Every platform RHCOS x86_64 ships is built now: nothing skipped.
    assert!(listed.iter().all(|p| built.contains(p)), "{listed:?}");
    assert!(!r.stderr.contains("skipping"), "{}", r.stderr);
    assert_not_created(&out);
}

/// A platform that exists, but not for the release's architecture: one
/// line naming it, the release's arch and the arches it exists for.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn platform_not_for_this_arch_names_its_arches() {
    let sb = Sandbox::new();
    let out = sb.path("out");
    let r = generate(
        &sb,
        &[],
        &[
            &oci("release-multi"),
            "--arch",
            "aarch64",
            "metal",
            "nutanix",
            "--dry-run",
            "-o",
            p(&out),
        ],
    );
    assert_fails(&sb, &r, &["'nutanix'", "aarch64", "x86_64 only", "--arch"]);
    assert_not_created(&out);
}

/// `all` on a release whose stream lists nothing for the arch (the -multi
/// fixture's stream has x86_64 only): every platform this tool builds for
/// that arch, said in one line with the reason; nothing x86_64-only.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn all_without_a_stream_says_what_and_why() {
    let sb = Sandbox::new();
    let out = sb.path("out");
    let r = generate(
        &sb,
        &[],
        &[
            &oci("release-multi"),
            "--arch",
            "aarch64",
            "all",
            "--dry-run",
            "-o",
            p(&out),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let notes: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("pins no stream"))
        .collect();
    assert_eq!(notes.len(), 1, "{}", r.stderr);
    let plan: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let names: Vec<&str> = plan["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["platform"].as_str().unwrap())
        .collect();
    for n in &names {
        assert!(notes[0].contains(n), "{n} not named in: {}", notes[0]);
    }
    for want in [
        "metal",
        "metal4k",
        "qemu",
        "aws",
        "azure",
        "gcp",
        "oraclecloud",
    ] {
        assert!(names.contains(&want), "{want} missing: {names:?}");
    }
    for never in ["nutanix", "vmware", "azurestack", "kubevirt", "virtualbox"] {
        assert!(!names.contains(&never), "{never} is x86_64's: {names:?}");
    }
    assert!(notes[0].contains("aarch64"), "{}", notes[0]);
    assert_not_created(&out);
}

/// The stream JSON the fixture release pins: `data.stream` of the
/// `coreos-bootimages` ConfigMap in the release's last layer, read here with
/// tar, flate2 and serde_yaml_ng straight from the OCI layout.
fn fixture_stream() -> serde_json::Value {
    use std::io::Read;
    let manifest = fixture_manifest("release");
    let last = manifest["layers"].as_array().unwrap().last().unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let gz = flate2::read::GzDecoder::new(std::fs::File::open(fixture_blob(&last)).unwrap());
    let mut ar = tar::Archive::new(gz);
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        if e.path()
            .unwrap()
            .to_string_lossy()
            .ends_with("0000_50_installer_coreos-bootimages.yaml")
        {
            let mut t = String::new();
            e.read_to_string(&mut t).unwrap();
            let cm: serde_yaml_ng::Value = serde_yaml_ng::from_str(&t).unwrap();
            return serde_json::from_str(cm["data"]["stream"].as_str().unwrap()).unwrap();
        }
    }
    panic!("no coreos-bootimages ConfigMap in the release layer");
}

/// Platforms this version builds, from `bootimage-gen platforms --json`.
fn bootimage_built_platforms() -> Vec<String> {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_bootimage-gen"))
        .args(["platforms", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .filter(|p| p["built"] == true)
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

/// The arch-keyed shape (hand-made OS images) is read for the build arch;
/// a platforms.json in neither shape is refused naming the file and both.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn platforms_json_shapes() {
    let sb = Sandbox::new();
    let out = sb.path("out");
    ok_json(
        &sb.cache(),
        &["inspect", &oci("release-archkeyed"), "--import"],
    );
    let r = generate(
        &sb,
        &[],
        &[
            &oci("release-archkeyed"),
            "qemu",
            "metal",
            "--dry-run",
            "-o",
            p(&out),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let plan: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let q = plan["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["platform"] == "qemu")
        .unwrap();
    assert!(
        q["kargs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k.as_str().unwrap().starts_with("console=")),
        "{q:#}"
    );
    let r = generate(
        &sb,
        &[],
        &[&oci("release-badplatforms"), "metal", "-o", p(&out)],
    );
    assert_fails(
        &sb,
        &r,
        &[
            "/usr/share/coreos-assembler/platforms.json",
            "upstream shape",
            "arch-keyed shape",
        ],
    );
    assert_not_created(&out);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn base_url_that_is_not_a_url() {
    let sb = Sandbox::new();
    let out = sb.path("out");
    for bad in ["mirror.example/rhcos", "http://", "://x", "http://a b/c"] {
        let r = generate(
            &sb,
            &[],
            &[&oci("release"), "metal", "--base-url", bad, "-o", p(&out)],
        );
        assert_fails(&sb, &r, &["--base-url", "not a url", "https://"]);
        assert_not_created(&out);
    }
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn no_room_for_all_is_found_before_building() {
    let mut sb = Sandbox::new();
    let mid = sb.tmpfs("mid", "size=300m");
    let r = generate(&sb, &[], &[&oci("release"), "all", "-o", p(&mid)]);
    let line = assert_fails(&sb, &r, &["not enough free space", "-o"]);
    assert!(
        !r.stderr.contains("base disk"),
        "started building:\n{}",
        r.stderr
    );
    assert_empty(&mid);
    assert_space_figures_consistent(&line);
    // The same filesystem holds one platform: the check is about `all`.
    let r = generate(&sb, &[], &[&oci("release"), "metal", "-o", p(&mid)]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

/// The work directory's estimate covers the stage (docs/contract.md §9)
/// when it is there (`--stage-in disk`; in memory it takes no room there):
/// with the least room the preflight accepts, the run succeeds. The cache
/// is a tmpfs: first the import alone, then the room for the build read
/// from the preflight's own refusal, then exactly that much free. And a
/// work directory that really fills (preflight skipped) is named as full.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn the_least_room_the_work_estimate_accepts_is_enough() {
    let mut sb = Sandbox::new();
    let cache = sb.tmpfs("cache", "size=2g");
    let out = sb.path("out");
    let used = || {
        let o = must(
            Command::new("df")
                .args(["-B1", "--output=used"])
                .arg(&cache),
        );
        o.lines().nth(1).unwrap().trim().parse::<u64>().unwrap()
    };
    let resize = |bytes: u64| {
        must(
            Command::new("mount")
                .args(["-o", &format!("remount,size={bytes}")])
                .arg(&cache),
        );
    };
    const MIB: u64 = 1 << 20;
    let release = oci("release");
    let metal = [
        release.as_str(),
        "metal",
        "-o",
        p(&out),
        "--stage-in",
        "disk",
    ];
    // The import (with a build), then a refusal that states the need.
    let r = generate(&sb, &[], &metal);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    std::fs::remove_dir_all(&out).unwrap();
    resize(used() + 8 * MIB);
    let r = generate(&sb, &[], &metal);
    let line = assert_fails(&sb, &r, &["not enough free space", p(&cache)]);
    let need = line
        .split("needs about ")
        .nth(1)
        .and_then(|t| t.split(" MiB").next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no need in: {line}"));
    // Past the preflight into a work directory too small: named as full,
    // at 8 MiB and at 70 % of the need.
    for room in [8, need * 7 / 10] {
        resize(used() + room * MIB);
        let r = generate(&sb, &["env", "BOOTIMAGE_GEN_SKIP_SPACE_CHECK=1"], &metal);
        // (loop devices are made on the way: the run fails mid-build, and
        // must release them.)
        error_line(
            &r,
            &[
                "error: no space left on the filesystem at",
                p(&cache),
                "work directory in the cache",
                "this run needs about",
            ],
        );
        assert_nothing_attached(&sb, &r, false);
    }
    // Exactly the room it asked for: accepted, and enough.
    resize(used() + (need + 1) * MIB);
    let r = generate(&sb, &[], &metal);
    assert_eq!(
        r.code,
        Some(0),
        "with the {need} MiB the preflight asked for:\n{}",
        r.stderr
    );
    assert_nothing_attached(&sb, &r, false);
}
