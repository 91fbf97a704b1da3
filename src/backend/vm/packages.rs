//! Which host packages go into the appliance: the tools the job calls
//! ([`TOOL_PACKAGES`]), the owners of the libraries this binary links, and
//! what a given disk job needs on top ([`job_packages`]: an emulator for a
//! foreign-arch buildroot, qemu-user-static for zipl). In: this binary's
//! path, the job, and dpkg's answers; out: package names for supermin
//! (`appliance.rs`).
use crate::backend::job::DiskJob;
use crate::util::arch::Arch;
use crate::util::cmd;
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

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

/// Fail unless every one of the `extra` packages is installed on this host
/// (the appliance copies the host's programs).
pub(super) fn require_installed(extra: &[String]) -> Result<()> {
    for p in extra {
        let ok = Command::new("dpkg-query")
            .args(["-W", "-f=${Status}", p])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"));
        if !ok {
            bail!("the VM appliance for this disk needs the host package {p} (it copies the host's programs), which is not installed: apt-get install {p}");
        }
    }
    Ok(())
}

/// Every package of the appliance, sorted: [`TOOL_PACKAGES`], `extra`, and
/// the owners of the libraries `exe` links, each once.
pub(super) fn appliance_packages(exe: &Path, extra: &[String]) -> Result<Vec<String>> {
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
    Ok(pkgs)
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
    if crate::platforms::arch_boot(job.disk.arch).zipl && Arch::host() != Arch::S390x {
        v.push("qemu-user-static".to_string());
    }
    if let Some(e) = job
        .buildroot
        .as_ref()
        .and_then(|t| t.buildroot.emulator.as_ref())
    {
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
