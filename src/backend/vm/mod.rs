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
//!
//! `host.rs` says whether this host can run them; `packages.rs`,
//! `init.rs` and `appliance.rs` make the appliance; `qemu.rs` starts the
//! VM, `watch.rs` follows it to its end, and `outcome.rs` carries the
//! job's result back. This file stages the run and ties the steps together.
mod appliance;
mod host;
mod init;
mod outcome;
mod packages;
mod qemu;
mod watch;

pub use appliance::appliance_lock;
pub use host::missing;
pub use init::DEBUG_HANG_ENV;
pub use outcome::job_main;
pub use packages::job_packages;

use crate::backend::job::{DiskJob, DiskOutput};
use crate::util::progress::Reporter;
use anyhow::{bail, Context, Result};
use appliance::appliance;
use outcome::{rebuild, Outcome};
use std::path::{Path, PathBuf};

/// The VM of the kvm and nokvm backends (`--vm-*`).
#[derive(Debug, Clone)]
pub struct VmSettings {
    /// Memory, in MiB.
    pub vm_memory: u32,
    /// CPUs (default: this host's, at most 4).
    pub vm_cpus: Option<u32>,
    /// Seconds without a sign of life before the VM is stopped.
    pub vm_watchdog: u64,
}

/// How the VM runs: under KVM, or emulated (TCG).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

/// Run `job` in a VM, accelerated as `accel` says.
pub fn run(
    job: &DiskJob,
    args: &VmSettings,
    accel: Accel,
    cache_dir: &Path,
    r: &Reporter,
) -> Result<DiskOutput> {
    let kvm = accel == Accel::Kvm;
    // Shared read-only at the same paths: the OS's buildroot (its tools
    // run in the VM as they would here), and the mkfs tools when they are
    // not this host's own (which the appliance has).
    let mut ro_shares: Vec<(&str, PathBuf)> = Vec::new();
    if let Some(t) = &job.buildroot {
        let b = &t.buildroot;
        ro_shares.push(("buildroot", b.dir.parent().unwrap_or(&b.dir).to_path_buf()));
    }
    if let Some(d) = job.mkfs.as_ref().and_then(|t| t.share.clone()) {
        ro_shares.push(("mkfs", d));
    }
    check_shareable(job, &ro_shares)?;
    let exe = std::env::current_exe().context("finding this program")?;
    let app = appliance(&cache_dir.join("appliance"), &exe, &job_packages(job)?, r)?;
    let files = VmFiles::stage(job, &exe)?;

    let cpus = args
        .vm_cpus
        .unwrap_or_else(|| (crate::util::threads(0) as u32).min(4));
    let launch = qemu::Launch {
        job,
        app: &app,
        kvm,
        memory: args.vm_memory,
        cpus,
        ro_shares: &ro_shares,
        vmdir: &files.vmdir,
        console: &files.console,
    };
    let (vm, started) = qemu::start(&launch, r)?;
    let w = watch::Watch {
        kvm,
        watchdog_secs: args.vm_watchdog,
        console: &files.console,
        cache_dir,
    };
    let (status, qemu_err) = watch::watch(vm, started, &w, r)?;
    let outcome = watch::read_outcome(&files.result, &files.console, cache_dir, status, &qemu_err)?;
    // The job's copy of this program and its scratch space are done.
    let _ = std::fs::remove_file(&files.guest_exe);
    let _ = std::fs::remove_dir_all(files.vmdir.join("tmp"));
    match outcome {
        Outcome::Ok(o) => Ok(*o),
        Outcome::Error(chain) => Err(rebuild(chain)),
    }
}

/// Fail unless the VM can share every path of the job (the work
/// directory, the OS repository, the read-only shares): 9p options and the
/// kernel command line cannot carry a space, comma, colon or quote.
fn check_shareable(job: &DiskJob, ro_shares: &[(&str, PathBuf)]) -> Result<()> {
    for p in [job.work.as_path(), job.cache_repo.as_path()]
        .into_iter()
        .chain(ro_shares.iter().map(|(_, p)| p.as_path()))
    {
        let s = p.to_string_lossy();
        if s.chars()
            .any(|c| c.is_whitespace() || c == ',' || c == '"' || c == ':')
        {
            bail!(
                "the VM backends cannot share {s}: the path holds a space, comma, colon or quote; use --cache-dir (or --mkfs-tools) with a plain path"
            );
        }
    }
    Ok(())
}

/// The run's files under `<work>/vm`, shared with the VM.
struct VmFiles {
    vmdir: PathBuf,
    /// The job's copy of this program.
    guest_exe: PathBuf,
    /// Where the guest writes its [`Outcome`].
    result: PathBuf,
    /// The guest console log.
    console: PathBuf,
}

impl VmFiles {
    /// Make `<work>/vm` (and its `tmp`), copy this program `exe` there and
    /// write the job file.
    fn stage(job: &DiskJob, exe: &Path) -> Result<VmFiles> {
        let vmdir = job.work.join("vm");
        std::fs::create_dir_all(vmdir.join("tmp"))?;
        let guest_exe = vmdir.join("bootimage-gen");
        std::fs::copy(exe, &guest_exe)
            .with_context(|| format!("copying this program to {}", guest_exe.display()))?;
        let job_file = vmdir.join("job.json");
        std::fs::write(&job_file, serde_json::to_vec_pretty(job)?)?;
        let result = vmdir.join("result.json");
        let console = vmdir.join("console.log");
        Ok(VmFiles {
            vmdir,
            guest_exe,
            result,
            console,
        })
    }
}
