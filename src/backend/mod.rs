//! Backends decide where the privileged disk steps run. `loopback` runs them
//! on this host with loop devices and mounts; `kvm` and `nokvm` inside a
//! throw-away VM ([`vm`]).
mod base_fs;
mod boot_fs;
mod bootloaders;
pub mod job;
mod live_stage;
mod live_tree;
mod loopback;
pub mod vm;

use anyhow::{bail, Result};
use serde::Serialize;
use std::path::Path;

/// The backend asked for (`--backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Auto,
    Loopback,
    Kvm,
    Nokvm,
}

/// Where a run's privileged steps run: chosen once ([`choose`]), then
/// matched on, never compared by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Runner {
    /// This host, with loop devices and mounts.
    Loopback,
    /// A throw-away VM under KVM.
    Kvm,
    /// A throw-away VM, emulated (TCG).
    Nokvm,
}

impl Runner {
    /// Its `--backend` name.
    pub fn name(self) -> &'static str {
        match self {
            Runner::Loopback => "loopback",
            Runner::Kvm => "kvm",
            Runner::Nokvm => "nokvm",
        }
    }

    /// Whether the steps run in a VM ([`vm`]).
    pub fn in_vm(self) -> bool {
        self.vm().is_some()
    }

    /// The VM it runs the steps in, by its acceleration (`None`: this host).
    pub fn vm(self) -> Option<vm::Accel> {
        match self {
            Runner::Loopback => None,
            Runner::Kvm => Some(vm::Accel::Kvm),
            Runner::Nokvm => Some(vm::Accel::Tcg),
        }
    }
}

impl std::fmt::Display for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The backend chosen for a run, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Chosen {
    pub name: Runner,
    pub reason: String,
}

/// What the loopback backend lacks on this host (`None` when it can run).
pub fn loopback_missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Some(format!(
            "it needs root (loop devices, mkfs, mount), and this process runs as uid {euid}"
        ));
    }
    if let Some(why) = crate::util::container::loopback_missing() {
        return Some(why);
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("this host has no /dev/loop-control (no loop device support; in a container, run it privileged or pass the loop devices in)".into());
    }
    for tool in [
        "losetup",
        "mount",
        "umount",
        "mkfs.ext4",
        "mkfs.xfs",
        "ostree",
    ] {
        if !crate::util::cmd::have(tool) {
            return Some(format!(
                "`{tool}` is not installed (run scripts/install-deps.sh)"
            ));
        }
    }
    None
}

/// Resolve `--backend`.
pub fn choose(b: Backend) -> Result<Chosen> {
    let vm_missing = vm::missing;
    match b {
        Backend::Loopback => match loopback_missing() {
            None => Ok(Chosen {
                name: Runner::Loopback,
                reason: "--backend loopback".into(),
            }),
            Some(why) => bail!(
                "--backend loopback cannot run here: {why}; --backend nokvm needs no privileges"
            ),
        },
        Backend::Kvm | Backend::Nokvm => {
            let (name, kvm) = match b {
                Backend::Kvm => (Runner::Kvm, true),
                _ => (Runner::Nokvm, false),
            };
            match vm_missing(kvm) {
                None => Ok(Chosen {
                    name,
                    reason: format!("--backend {name}"),
                }),
                Some(why) if kvm => bail!(
                    "--backend kvm cannot run here: {why}; use --backend nokvm, or give this user access to /dev/kvm (the kvm group)"
                ),
                Some(why) => bail!("--backend nokvm cannot run here: {why}"),
            }
        }
        Backend::Auto => {
            let Some(no_loop) = loopback_missing() else {
                return Ok(Chosen {
                    name: Runner::Loopback,
                    reason: "auto: running as root with loop devices".into(),
                });
            };
            if let Some(no_vm) = vm_missing(false) {
                bail!("no backend can run here: the loopback backend cannot because {no_loop}, and the VM backends cannot because {no_vm}");
            }
            match vm_missing(true) {
                None => Ok(Chosen {
                    name: Runner::Kvm,
                    reason: format!("auto: the loopback backend cannot run ({no_loop}); /dev/kvm is usable"),
                }),
                Some(no_kvm) => Ok(Chosen {
                    name: Runner::Nokvm,
                    reason: format!("auto: the loopback backend cannot run ({no_loop}) and {no_kvm}: emulating the VM (slow)"),
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chosen runner reads as its `--backend` name in the dry run's
    /// JSON and in messages, and only the VM runners are in a VM.
    #[test]
    fn runners_read_as_their_backend_names() {
        for (r, name, vm) in [
            (Runner::Loopback, "loopback", false),
            (Runner::Kvm, "kvm", true),
            (Runner::Nokvm, "nokvm", true),
        ] {
            assert_eq!(serde_json::to_value(r).unwrap(), name);
            assert_eq!(r.to_string(), name);
            assert_eq!(r.in_vm(), vm, "{name}");
        }
    }
}
