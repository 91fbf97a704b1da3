//! What the VM backends need from this host: qemu and supermin installed,
//! a readable kernel with its modules, and (for `kvm`) a /dev/kvm on which
//! qemu can really set up a guest. In: the host's tools, `/boot` and
//! `/lib/modules`; out: [`missing`]'s verdict for backend choice, and
//! [`host_kernel`] for the appliance.
use crate::util::cmd;
use anyhow::{Context, Result};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Seconds qemu may take to set up the KVM probe's guest.
const KVM_PROBE_SECS: u64 = 20;

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
pub(super) fn host_kernel() -> Result<(PathBuf, PathBuf)> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_by_number() {
        assert!(version_cmp("6.1.0-56-amd64", "6.1.0-9-amd64").is_gt());
        assert!(version_cmp("5.10.0", "6.1.0").is_lt());
    }
}
