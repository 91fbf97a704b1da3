//! Backends decide where the privileged disk steps run. `loopback` runs them
//! on this host with loop devices and mounts.
pub mod loopback;

use crate::cli::Backend;
use anyhow::{bail, Result};
use serde::Serialize;
use std::path::Path;

/// The backend chosen for a run, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Chosen {
    pub name: &'static str,
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
    match (b, loopback_missing()) {
        (Backend::Loopback | Backend::Auto, None) => Ok(Chosen {
            name: "loopback",
            reason: if b == Backend::Auto {
                "auto: running as root with loop devices".into()
            } else {
                "--backend loopback".into()
            },
        }),
        (Backend::Loopback, Some(why)) => {
            bail!("--backend loopback cannot run here: {why}")
        }
        (Backend::Auto, Some(why)) => bail!(
            "no backend can run here: the loopback backend is the only one in this version and {why}; run as root on a host with loop devices"
        ),
    }
}
