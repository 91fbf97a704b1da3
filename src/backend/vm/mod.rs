//! The `kvm` and `nokvm` backends: the privileged disk steps
//! ([`DiskJob`]) run inside a throw-away VM, so a build needs neither root
//! nor loop devices on the host.
//!
//! - **Appliance**: a Linux kernel and a small root built by `supermin`
//!   from this host's installed packages (the tools the job calls and the
//!   libraries this binary links), plus our own `/init`. It is cached
//!   under `<cache>/appliance/<key>`, the key hashing every input (package
//!   versions, kernel, init script), so it is rebuilt only when one of
//!   them changes.
//! - **Data**: the run's work directory and the imported OS repository are
//!   shared with the VM over virtio-9p and mounted at the same paths, so the
//!   job file's paths mean the same inside. The job runs this same binary
//!   (copied into the work directory) with its loopback code, on loop
//!   devices over the shared files.
//! - **Channels**: the guest console (kernel messages) goes to
//!   `vm/console.log`; the job's own output comes back on a second serial
//!   port and is shown as the loopback backend would show it. A heartbeat
//!   line every few seconds proves the VM alive; when it makes no progress
//!   for `--vm-watchdog` seconds, it is stopped. The result (or the error
//!   chain) comes back as `vm/result.json`.
use crate::backend::job::{self, DiskJob, DiskOutput};
use crate::util::{cancel, cmd, progress::Reporter};
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The least time the backend VM gets to show its first sign of life (the
/// watchdog's window while it boots; `--vm-watchdog` applies after).
const BOOT_ALLOWANCE: Duration = Duration::from_secs(120);
/// Bump when the appliance's make-up changes in a way the key does not see.
const APPLIANCE_FORMAT: &str = "1";
/// Packages whose programs the job runs inside the VM (besides the
/// libraries of this binary, found with ldd).
const TOOL_PACKAGES: &[&str] = &[
    "dash",
    "coreutils",
    "util-linux",
    "mount",
    "kmod",
    "xfsprogs",
    "e2fsprogs",
    "ostree",
    "grub-common",
    "squashfs-tools",
    "erofs-utils",
    "cpio",
];
/// Kernel modules the job needs beyond what supermin's init loads.
const MODULES: &[&str] = &["9pnet_virtio", "9p", "loop", "xfs", "ext4", "squashfs"];
/// Prefix of the lines the appliance itself writes on the job channel.
const MARK: &str = "@@bootimage-gen ";
/// Seconds between heartbeats.
const HEARTBEAT_SECS: u32 = 5;
/// Size of the appliance's (sparse, copy-on-write) root filesystem.
const ROOT_SIZE: &str = "4G";
/// 9p message size: large messages make big sequential I/O cheaper.
const MSIZE: u32 = 1 << 20;
/// Seconds qemu may take to set up the KVM probe's guest.
const KVM_PROBE_SECS: u64 = 20;
/// Env var that makes the appliance hang before the job (tests the watchdog).
pub const DEBUG_HANG_ENV: &str = "BOOTIMAGE_GEN_VM_DEBUG_HANG";

/// What the VM backends lack on this host (`None` when they can run);
/// `kvm`: also require a usable /dev/kvm.
pub fn missing(kvm: bool) -> Option<String> {
    for (tool, pkg) in [
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("supermin", "supermin"),
    ] {
        if !cmd::have(tool) {
            return Some(format!(
                "`{tool}` is not installed (package {pkg}; run scripts/install-deps.sh)"
            ));
        }
    }
    if let Err(e) = host_kernel() {
        return Some(format!("{e:#}"));
    }
    if kvm {
        if let Err(e) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
        {
            return Some(format!("/dev/kvm is not usable ({e})"));
        }
        if let Err(e) = kvm_guest_starts() {
            return Some(format!("/dev/kvm is not usable ({e})"));
        }
    }
    None
}

/// Whether qemu can set up a KVM guest here. /dev/kvm can open and still
/// fail: under nested KVM that lacks some MSRs, qemu aborts while setting
/// up the vCPU ("failed to set MSR 0x10a"), just after its QMP greeting. A
/// guest that is never started (`-S`) shows it: qemu answers a QMP
/// `query-status` only if it survived the set-up.
fn kvm_guest_starts() -> std::result::Result<(), String> {
    let mut probe = Command::new("qemu-system-x86_64");
    crate::util::owner::die_with_parent(&mut probe);
    let child = probe
        .args(["-machine", "q35,accel=kvm", "-cpu", "host", "-m", "64"])
        .args(["-nodefaults", "-no-user-config", "-display", "none", "-S"])
        .args(["-monitor", "none", "-serial", "none", "-qmp", "stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return Err(format!("starting qemu-system-x86_64: {e}")),
    };
    // Kept open until qemu is killed: EOF on stdin would end QMP.
    let mut stdin = child.stdin.take();
    if let Some(i) = stdin.as_mut() {
        let _ = std::io::Write::write_all(
            i,
            b"{\"execute\":\"qmp_capabilities\"}\n{\"execute\":\"query-status\"}\n",
        );
    }
    let stdout = child.stdout.take();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Some(o) = stdout else { return };
        for line in BufReader::new(o).lines() {
            let Ok(line) = line else { break };
            if line.contains("\"status\"") {
                let _ = tx.send(());
                break;
            }
        }
    });
    let answered = rx.recv_timeout(Duration::from_secs(KVM_PROBE_SECS)).is_ok();
    let _ = child.kill();
    drop(stdin);
    let out = child.wait_with_output();
    if answered {
        return Ok(());
    }
    let err = out
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .unwrap_or_default();
    let err: Vec<&str> = err
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    Err(format!(
        "qemu cannot start a KVM guest here{}",
        if err.is_empty() {
            String::new()
        } else {
            format!(": {}", err.join("; "))
        }
    ))
}

/// The host kernel the appliance boots: the newest readable
/// `/boot/vmlinuz-<v>` with `/lib/modules/<v>`.
fn host_kernel() -> Result<(PathBuf, PathBuf)> {
    let mut found: Vec<(String, PathBuf, PathBuf)> = Vec::new();
    let dir = std::fs::read_dir("/boot").context("listing /boot for a kernel for the VM")?;
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(v) = name.strip_prefix("vmlinuz-") else {
            continue;
        };
        let modules = Path::new("/lib/modules").join(v);
        if modules.is_dir() && std::fs::File::open(e.path()).is_ok() {
            found.push((v.to_string(), e.path(), modules));
        }
    }
    found.sort_by(|a, b| version_cmp(&a.0, &b.0));
    found
        .pop()
        .map(|(_, k, m)| (k, m))
        .context("no readable /boot/vmlinuz-<version> with its /lib/modules/<version> for the VM (install linux-image-amd64; the kernel file must be readable by this user)")
}

/// Compare version strings number by number.
fn version_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let parts = |s: &str| -> Vec<u64> {
        s.split(|c: char| !c.is_ascii_digit())
            .filter(|p| !p.is_empty())
            .map(|p| p.parse().unwrap_or(0))
            .collect()
    };
    parts(a).cmp(&parts(b))
}

/// The appliance's /init: mount the shares, keep a heartbeat, run the job,
/// power off.
fn init_script() -> String {
    format!(
        r#"#!/bin/sh
# bootimage-gen appliance init (written by bootimage-gen; format {APPLIANCE_FORMAT})
mkdir -p /proc /sys /dev /tmp /run
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
chan=/dev/ttyS1
say() {{ echo "{MARK}$*" > $chan; }}
off() {{ sync; echo o > /proc/sysrq-trigger; sleep 10; }}
say up
for a in $(cat /proc/cmdline); do
  case "$a" in
    bootimage_gen.work=*) work="${{a#*=}}" ;;
    bootimage_gen.repo=*) repo="${{a#*=}}" ;;
    bootimage_gen.hang=*) hang="${{a#*=}}" ;;
    bootimage_gen.buildroot=*) buildroot="${{a#*=}}" ;;
  esac
done
for m in {modules}; do modprobe "$m" 2>/dev/null; done
mkdir -p "$work" "$repo"
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize={MSIZE},cache=mmap work "$work"; then
  say "error mounting the work directory share"; off
fi
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize={MSIZE},ro repo "$repo"; then
  say "error mounting the OS repository share"; off
fi
if [ -n "$buildroot" ]; then
  mkdir -p "$buildroot"
  if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize={MSIZE},ro buildroot "$buildroot"; then
    say "error mounting the OS buildroot share"; off
  fi
fi
( while :; do say alive; sleep {HEARTBEAT_SECS}; done ) &
beat=$!
if [ -n "$hang" ]; then
  kill $beat
  say "hanging on purpose ({DEBUG_HANG_ENV})"
  while :; do sleep 1000; done
fi
mkdir -p "$work/vm/tmp"
TMPDIR="$work/vm/tmp" PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  "$work/vm/bootimage-gen" vm-job "$work/vm/job.json" "$work/vm/result.json" > $chan 2>&1
say "job exited $?"
kill $beat
[ -z "$buildroot" ] || umount "$buildroot"
umount "$repo" "$work"
off
"#,
        modules = MODULES.join(" "),
    )
}

/// A built appliance.
struct Appliance {
    kernel: PathBuf,
    initrd: PathBuf,
    root: PathBuf,
    /// Shared while the VM uses it: `gc` and newer builds leave it alone.
    _use: crate::util::lock::Lock,
}

/// Packages owning the shared libraries this binary links.
fn library_packages(exe: &Path) -> Result<Vec<String>> {
    let out = cmd::run(&mut cmd::new("ldd", [exe])).context("listing this binary's libraries")?;
    let mut files = Vec::new();
    for line in String::from_utf8_lossy(&out).lines() {
        // "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)" or
        // "/lib64/ld-linux-x86-64.so.2 (0x...)".
        let path = match line.split_once("=>") {
            Some((_, r)) => r.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            files.push(p.to_string());
            if let Ok(real) = std::fs::canonicalize(p) {
                files.push(real.to_string_lossy().into_owned());
            }
        }
    }
    // One dpkg for all files (a call per file took 8 s for this binary's
    // 62 libraries). It exits non-zero when it does not know some path
    // (e.g. the /lib64 symlink) but still lists the owners of the others.
    owner_packages(&files)
}

/// The packages owning `files` (`dpkg -S`, arch qualifiers dropped, each
/// once). dpkg exits non-zero for a path it does not know but still lists
/// the owners of the others.
fn owner_packages<S: AsRef<std::ffi::OsStr>>(files: &[S]) -> Result<Vec<String>> {
    let Ok(o) = Command::new("dpkg").arg("-S").args(files).output() else {
        bail!("dpkg is not available: the VM backends need a Debian-based host");
    };
    let mut pkgs: Vec<String> = Vec::new();
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        if let Some((p, _)) = l.split_once(": ") {
            for p in p.split(", ") {
                let p = p.split(':').next().unwrap_or(p).to_string();
                if !pkgs.contains(&p) {
                    pkgs.push(p);
                }
            }
        }
    }
    Ok(pkgs)
}

/// Packages the job needs on top of [`TOOL_PACKAGES`]: s390x runs the OS's
/// zipl under qemu-s390x-static; a buildroot of another arch runs under
/// its emulator (the package that owns it).
pub fn job_packages(job: &DiskJob) -> Result<Vec<String>> {
    let mut v = Vec::new();
    if crate::platforms::arch_boot(&job.disk.arch).zipl && std::env::consts::ARCH != "s390x" {
        v.push("qemu-user-static".to_string());
    }
    if let Some(e) = job.buildroot.as_ref().and_then(|b| b.emulator.as_ref()) {
        let real = std::fs::canonicalize(e).unwrap_or_else(|_| e.clone());
        match owner_packages(&[real])?.into_iter().next() {
            Some(p) if !v.contains(&p) => v.push(p),
            Some(_) => {}
            None => bail!(
                "the VM appliance copies host packages, and the emulator {} (for the OS's {} programs) belongs to none: install qemu-user-static from the distribution, or use --backend loopback",
                e.display(),
                job.disk.arch
            ),
        }
    }
    Ok(v)
}

/// Build (or reuse) the appliance under `dir`, with `extra` packages.
fn appliance(dir: &Path, exe: &Path, extra: &[String], r: &Reporter) -> Result<Appliance> {
    let (kernel, modules) = host_kernel()?;
    for p in extra {
        let ok = Command::new("dpkg-query")
            .args(["-W", "-f=${Status}", p])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"));
        if !ok {
            bail!("the VM appliance for this disk needs the host package {p} (it copies the host's programs), which is not installed: apt-get install {p}");
        }
    }
    let mut pkgs: Vec<String> = TOOL_PACKAGES
        .iter()
        .map(|s| s.to_string())
        .chain(extra.iter().cloned())
        .collect();
    for p in library_packages(exe)? {
        if !pkgs.contains(&p) {
            pkgs.push(p);
        }
    }
    pkgs.sort();
    let versions = cmd::run(&mut cmd::new(
        "dpkg-query",
        std::iter::once("-W".to_string())
            .chain(std::iter::once("-f=${Package} ${Version}\\n".to_string()))
            .chain(pkgs.iter().cloned()),
    ))
    .context("reading the versions of the appliance's packages")?;
    let supermin = cmd::run(&mut cmd::new("supermin", ["--version"])).unwrap_or_default();
    let kmeta = std::fs::metadata(&kernel)?;
    let mtime = kmeta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let key_src = format!(
        "{APPLIANCE_FORMAT}\n{}\n{}\n{} {} {mtime}\n{}\n{}",
        init_script(),
        String::from_utf8_lossy(&versions),
        kernel.display(),
        kmeta.len(),
        modules.display(),
        String::from_utf8_lossy(&supermin)
    );
    let key = crate::util::sha256_hex(key_src.as_bytes());
    let out = dir.join(&key[..16]);
    // The lock lives with the cache's other locks (`<cache>/locks/`), not
    // among the appliances: exclusive while building, shared while a VM
    // uses it.
    let locks = dir.parent().unwrap_or(dir).join("locks");
    let lock_path = appliance_lock(&locks, &key[..16]);
    let what = format!("using the VM appliance {}", out.display());
    let done = |d: &Path| -> Result<Appliance> {
        let l = crate::util::lock::Lock::shared(&lock_path, &what)?;
        let _ = std::fs::File::open(d).and_then(|f| f.set_modified(std::time::SystemTime::now()));
        Ok(Appliance {
            kernel: d.join("kernel"),
            initrd: d.join("initrd"),
            root: d.join("root"),
            _use: l,
        })
    };
    if out.join("root").exists() {
        r.note(&format!("VM appliance: cached {}", out.display()));
        return done(&out);
    }
    // One build per appliance at a time; a run that waited finds the other's.
    let lock = crate::util::lock::Lock::wait(
        &lock_path,
        &format!("building the VM appliance {}", out.display()),
    )?;
    if out.join("root").exists() {
        r.note(&format!(
            "VM appliance: built by another run {}",
            out.display()
        ));
        drop(lock);
        return done(&out);
    }
    let step = r.step("VM appliance");
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(&format!(
            ".build-{}-",
            crate::util::owner::Owner::me().tag()
        ))
        .tempdir_in(dir)
        .with_context(|| format!("creating a build directory in {}", dir.display()))?;
    let sd = tmp.path().join("supermin.d");
    cmd::run(
        cmd::new("supermin", ["--prepare", "--use-installed", "-o"])
            .arg(&sd)
            .args(&pkgs),
    )
    .context("preparing the VM appliance with supermin")?;
    // Our /init, as an extra tarball supermin unpacks over the packages.
    let init = init_script();
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(init.len() as u64);
    h.set_mode(0o755);
    h.set_cksum();
    tar.append_data(&mut h, "init", init.as_bytes())?;
    let tarball = tar.into_inner()?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &tarball)?;
    std::fs::write(sd.join("init.tar.gz"), gz.finish()?)?;
    let built = tmp.path().join("appliance");
    cmd::run(
        cmd::new(
            "supermin",
            [
                "--build",
                "--use-installed",
                "-f",
                "ext2",
                "--size",
                ROOT_SIZE,
            ],
        )
        .arg(&sd)
        .arg("-o")
        .arg(&built)
        .env("SUPERMIN_KERNEL", &kernel)
        .env("SUPERMIN_MODULES", &modules),
    )
    .context("building the VM appliance with supermin")?;
    // The kernel is a symlink into /boot; keep it so.
    match std::fs::rename(&built, &out) {
        Ok(()) => {}
        // Another run built the same appliance meanwhile.
        Err(_) if out.join("root").exists() => {}
        Err(e) => return Err(e).with_context(|| format!("renaming to {}", out.display())),
    }
    // Older appliances are of no more use, unless a VM still runs on one.
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p != out && !name.starts_with('.') {
                if let Ok(Some(_l)) =
                    crate::util::lock::Lock::try_exclusive(&appliance_lock(&locks, &name))
                {
                    let _ = std::fs::remove_dir_all(&p);
                }
            }
        }
    }
    step.done(&format!("{}", out.display()));
    drop(lock);
    done(&out)
}

/// The lock file of the appliance `<cache>/appliance/<name>`.
pub fn appliance_lock(locks: &Path, name: &str) -> PathBuf {
    locks.join(format!("appliance-{name}.lock"))
}

/// How the job ended inside the VM.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Outcome {
    Ok(Box<DiskOutput>),
    /// The error chain, outermost first.
    Error(Vec<String>),
}

/// The VM of the kvm and nokvm backends (`--vm-*`).
#[derive(Debug, Clone)]
pub struct VmArgs {
    /// Memory, in MiB.
    pub vm_memory: u32,
    /// CPUs (default: this host's, at most 4).
    pub vm_cpus: Option<u32>,
    /// Seconds without a sign of life before the VM is stopped.
    pub vm_watchdog: u64,
}

/// Inside the VM: run the job file `job`, write the outcome to `result`.
pub fn job_main(job_file: &Path, result: &Path) -> Result<()> {
    let outcome = match job::read(job_file).and_then(|j| {
        let r = Reporter::new(crate::util::progress::Progress::Plain);
        j.run(&r)
    }) {
        Ok(o) => Outcome::Ok(Box::new(o)),
        Err(e) => Outcome::Error(e.chain().map(|c| c.to_string()).collect()),
    };
    let bytes = serde_json::to_vec(&outcome)?;
    let dir = result.parent().context("result path")?;
    let name = result.file_name().context("result path")?;
    crate::publish::meta::write_atomic(dir, &name.to_string_lossy(), &bytes)
}

/// Kills and reaps the VM when dropped.
struct Vm(Child);

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run `job` in a VM: under KVM with `kvm`, else emulated (TCG).
pub fn run(
    job: &DiskJob,
    args: &VmArgs,
    kvm: bool,
    cache_dir: &Path,
    r: &Reporter,
) -> Result<DiskOutput> {
    // The OS's buildroot (its tools run in the VM as they would here),
    // shared read-only at the same path.
    let buildroot_dir = job
        .buildroot
        .as_ref()
        .map(|b| b.dir.parent().unwrap_or(&b.dir).to_path_buf());
    for p in [
        Some(&job.work),
        Some(&job.cache_repo),
        buildroot_dir.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        let s = p.to_string_lossy();
        if s.chars().any(|c| c.is_whitespace() || c == ',' || c == '"') {
            bail!(
                "the VM backends cannot share {s}: the path holds a space, comma or quote; use --cache-dir with a plain path"
            );
        }
    }
    let exe = std::env::current_exe().context("finding this program")?;
    let app = appliance(&cache_dir.join("appliance"), &exe, &job_packages(job)?, r)?;
    let vmdir = job.work.join("vm");
    std::fs::create_dir_all(vmdir.join("tmp"))?;
    let guest_exe = vmdir.join("bootimage-gen");
    std::fs::copy(&exe, &guest_exe)
        .with_context(|| format!("copying this program to {}", guest_exe.display()))?;
    let job_file = vmdir.join("job.json");
    std::fs::write(&job_file, serde_json::to_vec_pretty(job)?)?;
    let result = vmdir.join("result.json");
    let console = vmdir.join("console.log");

    let cpus = args
        .vm_cpus
        .unwrap_or_else(|| (crate::util::threads(0) as u32).min(4));
    let mut append = format!(
        "console=ttyS0 root=/dev/vda rw quiet loglevel=3 panic=-1 bootimage_gen.work={} bootimage_gen.repo={}",
        job.work.display(),
        job.cache_repo.display()
    );
    if let Some(d) = &buildroot_dir {
        append.push_str(&format!(" bootimage_gen.buildroot={}", d.display()));
    }
    if std::env::var_os(DEBUG_HANG_ENV).is_some() {
        append.push_str(" bootimage_gen.hang=1");
    }
    let mut c = Command::new("qemu-system-x86_64");
    // A SIGKILLed run takes its VM along (and `sys::stale` finds the pidfile
    // should the VM outlive it anyway).
    crate::util::owner::die_with_parent(&mut c);
    c.args([
        "-machine",
        if kvm {
            "q35,accel=kvm"
        } else {
            "q35,accel=tcg"
        },
    ])
    .args(["-cpu", if kvm { "host" } else { "max" }])
    .args(["-m", &args.vm_memory.to_string()])
    .args(["-smp", &cpus.to_string()])
    .args([
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
    ])
    .args(["-monitor", "none"])
    .arg("-kernel")
    .arg(&app.kernel)
    .arg("-initrd")
    .arg(&app.initrd)
    .arg("-append")
    .arg(&append)
    .arg("-drive")
    .arg(format!(
        "file={},format=raw,if=virtio,snapshot=on",
        app.root.display()
    ))
    .arg("-virtfs")
    .arg(format!(
        "local,path={},mount_tag=work,security_model=none",
        job.work.display()
    ))
    .arg("-virtfs")
    .arg(format!(
        "local,path={},mount_tag=repo,security_model=none,readonly=on",
        job.cache_repo.display()
    ))
    .args(buildroot_dir.iter().flat_map(|d| {
        [
            "-virtfs".to_string(),
            format!(
                "local,path={},mount_tag=buildroot,security_model=none,readonly=on",
                d.display()
            ),
        ]
    }))
    .arg("-serial")
    .arg(format!("file:{}", console.display()))
    .args(["-serial", "stdio"])
    // The snapshot overlay of the root goes here, and is deleted at exit.
    .env("TMPDIR", vmdir.join("tmp"))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    tracing::info!(?c, "starting the backend VM");
    let started = Instant::now();
    let child = c
        .spawn()
        .context("starting qemu-system-x86_64 for the backend VM")?;
    let mut vm = Vm(child);
    if let Some(o) = crate::util::owner::Owner::of(vm.0.id()) {
        let p = job.work.join(crate::sys::stale::VM_PIDFILE);
        crate::util::owner::write_pidfile(&p, &o)
            .with_context(|| format!("writing the VM's pidfile {}", p.display()))?;
    }
    r.note(&format!(
        "backend VM ({}, {cpus} CPUs, {} MiB) started",
        if kvm { "KVM" } else { "emulated, TCG" },
        args.vm_memory
    ));

    let (tx, rx) = mpsc::channel::<String>();
    let stdout = vm.0.stdout.take().context("VM output")?;
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = vm.0.stderr.take().context("VM errors")?;
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut s);
        s
    });
    let watchdog = Duration::from_secs(args.vm_watchdog.max(1));
    // Until its first sign of life the VM is booting, which under TCG on a
    // loaded host can itself take a minute: that phase gets at least
    // BOOT_ALLOWANCE, the watchdog's own window applies once it runs.
    let boot_window = watchdog.max(BOOT_ALLOWANCE);
    let mut last = Instant::now();
    let mut alive = false;
    loop {
        if let Err(e) = cancel::check() {
            drop(vm);
            return Err(e);
        }
        match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(line) => {
                last = Instant::now();
                alive = true;
                let line = line.trim_end_matches('\r');
                match line.strip_prefix(MARK) {
                    Some("alive") => {}
                    Some(s) => tracing::info!("appliance: {s}"),
                    None if !line.is_empty() => r.note(line),
                    None => {}
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let window = if alive { watchdog } else { boot_window };
                if last.elapsed() > window {
                    drop(vm);
                    let console = keep_console(&console, cache_dir);
                    bail!(
                        "the backend VM made no progress for {} s ({}) and was stopped; {} (console log: {})",
                        window.as_secs(),
                        if alive { "its heartbeat stopped" } else { "it never showed a sign of life" },
                        if kvm {
                            "nested KVM can start and then hang on some hosts: try --backend nokvm"
                        } else {
                            "on a very loaded host, a larger --vm-watchdog may help"
                        },
                        console.display()
                    );
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = vm.0.wait().context("waiting for the backend VM")?;
    let qemu_err = err_thread.join().unwrap_or_default();
    tracing::info!(elapsed = ?started.elapsed(), ?status, "backend VM stopped");
    r.note(&format!(
        "backend VM stopped after {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    let outcome: Outcome = match std::fs::read(&result) {
        Ok(b) => serde_json::from_slice(&b).context("reading the VM's result")?,
        Err(_) => {
            let tail = tail_of(&console, 20);
            keep_console(&console, cache_dir);
            bail!(
                "the backend VM stopped ({status}) without a result{}{}",
                if qemu_err.trim().is_empty() {
                    String::new()
                } else {
                    format!("; qemu: {}", qemu_err.trim())
                },
                if tail.is_empty() {
                    String::new()
                } else {
                    format!("; last console lines:\n{tail}")
                }
            );
        }
    };
    // The job's copy of this program and its scratch space are done.
    let _ = std::fs::remove_file(&guest_exe);
    let _ = std::fs::remove_dir_all(vmdir.join("tmp"));
    match outcome {
        Outcome::Ok(o) => Ok(*o),
        Outcome::Error(chain) => Err(rebuild(chain)),
    }
}

/// An error with the same chain (and so the same message) as the guest's.
fn rebuild(chain: Vec<String>) -> anyhow::Error {
    let mut it = chain.into_iter().rev();
    let mut e = anyhow!(it.next().unwrap_or_else(|| "the VM job failed".into()));
    for c in it {
        e = e.context(c);
    }
    e
}

/// Copy the console log of a failed VM out of the work directory (which
/// is removed) to `<cache>/last-vm-console.log`; returns where it is.
fn keep_console(console: &Path, cache_dir: &Path) -> PathBuf {
    let kept = cache_dir.join("last-vm-console.log");
    match std::fs::copy(console, &kept) {
        Ok(_) => kept,
        Err(_) => console.to_path_buf(),
    }
}

/// The last `n` lines of a text file (empty when unreadable).
fn tail_of(path: &Path, n: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_by_number() {
        assert!(version_cmp("6.1.0-56-amd64", "6.1.0-9-amd64").is_gt());
        assert!(version_cmp("5.10.0", "6.1.0").is_lt());
    }

    #[test]
    fn error_chain_survives_the_trip() {
        let e = anyhow!("root cause").context("middle").context("outer");
        let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
        let back = rebuild(chain);
        assert_eq!(format!("{back:#}"), format!("{e:#}"));
        assert_eq!(back.chain().count(), 3);
    }

    #[test]
    fn init_script_names_every_module_and_the_channel() {
        let s = init_script();
        for m in MODULES {
            assert!(s.contains(m), "{m}");
        }
        assert!(s.contains("vm-job"));
        assert!(s.contains("/dev/ttyS1"));
    }
}
