//! Starting the backend VM: the kernel command line that tells the
//! appliance's /init where the shares go, the qemu command (machine, the
//! appliance's kernel, initrd and copy-on-write root, the virtio-9p shares,
//! the two serial ports), and the [`Vm`] guard that kills and reaps qemu
//! when dropped. In: the job, the [`Appliance`], the VM's size; out: a
//! running [`Vm`] whose stdout is the job channel (`watch.rs` reads it).
use super::appliance::Appliance;
use super::init::DEBUG_HANG_ENV;
use crate::backend::job::DiskJob;
use crate::util::progress::Reporter;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// Kills and reaps the VM when dropped.
pub(super) struct Vm(pub(super) Child);

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the backend VM is started with.
pub(super) struct Launch<'a> {
    pub(super) job: &'a DiskJob,
    pub(super) app: &'a Appliance,
    /// Under KVM, else emulated (TCG).
    pub(super) kvm: bool,
    /// Memory, in MiB.
    pub(super) memory: u32,
    pub(super) cpus: u32,
    /// Directories shared read-only at the same paths, by 9p tag (the
    /// OS's buildroot, the mkfs tools).
    pub(super) ro_shares: &'a [(&'a str, PathBuf)],
    /// `<work>/vm`: its `tmp` holds the root's snapshot overlay.
    pub(super) vmdir: &'a Path,
    /// Where the guest console (kernel messages) goes.
    pub(super) console: &'a Path,
}

/// Start the VM of `l` (its pidfile written, so `sys::stale` can find it);
/// returns it with the instant it was started.
pub(super) fn start(l: &Launch<'_>, r: &Reporter) -> Result<(Vm, Instant)> {
    let append = kernel_append(l.job, l.ro_shares);
    let mut c = qemu_command(l, &append);
    tracing::info!(?c, "starting the backend VM");
    let started = Instant::now();
    let child = c
        .spawn()
        .context("starting qemu-system-x86_64 for the backend VM")?;
    let vm = Vm(child);
    if let Some(o) = crate::util::owner::Owner::of(vm.0.id()) {
        let p = l.job.work.join(crate::sys::stale::VM_PIDFILE);
        crate::util::owner::write_pidfile(&p, &o)
            .with_context(|| format!("writing the VM's pidfile {}", p.display()))?;
    }
    r.note(&format!(
        "backend VM ({}, {} CPUs, {} MiB) started",
        if l.kvm { "KVM" } else { "emulated, TCG" },
        l.cpus,
        l.memory
    ));
    Ok((vm, started))
}

/// The appliance's kernel command line: the console, the root, and the
/// `bootimage_gen.*` parameters its /init reads. `no_timer_check`: the x86
/// kernel's boot-time check that the timer ticks through the IO-APIC
/// (`check_timer`) panics with "IO-APIC + timer doesn't work" when a loaded
/// host delays an emulated (TCG) guest's ticks (seen: a nokvm run on 2 busy
/// cores); the check guards against broken hardware, which qemu's is not.
/// libguestfs's appliance and Kata's guests boot with it for the same reason.
fn kernel_append(job: &DiskJob, ro_shares: &[(&str, PathBuf)]) -> String {
    let mut append = format!(
        "console=ttyS0 root=/dev/vda rw quiet loglevel=3 panic=-1 no_timer_check bootimage_gen.work={} bootimage_gen.repo={}",
        job.work.display(),
        job.cache_repo.display()
    );
    for (tag, d) in ro_shares {
        append.push_str(&format!(" bootimage_gen.ro={tag}:{}", d.display()));
    }
    if std::env::var_os(DEBUG_HANG_ENV).is_some() {
        append.push_str(" bootimage_gen.hang=1");
    }
    append
}

/// The qemu command of `l`, booting the appliance with `append`.
fn qemu_command(l: &Launch<'_>, append: &str) -> Command {
    let (job, app, kvm) = (l.job, l.app, l.kvm);
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
    .args(["-m", &l.memory.to_string()])
    .args(["-smp", &l.cpus.to_string()])
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
    .arg(append)
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
    .args(l.ro_shares.iter().flat_map(|(tag, d)| {
        [
            "-virtfs".to_string(),
            format!(
                "local,path={},mount_tag={tag},security_model=none,readonly=on",
                d.display()
            ),
        ]
    }))
    .arg("-serial")
    .arg(format!("file:{}", l.console.display()))
    .args(["-serial", "stdio"])
    // The snapshot overlay of the root goes here, and is deleted at exit.
    .env("TMPDIR", l.vmdir.join("tmp"))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c
}
