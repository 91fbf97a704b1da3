//! How this host runs the OS's programs: natively, through an enabled
//! binfmt_misc handler, or through a static qemu-user run explicitly (looked
//! for on PATH). In: the ELF facts of the OS's binary; out: the emulator to
//! bind into the buildroot, or why it cannot run here.
use super::elf::{elf_info, head_of, ElfInfo};
use crate::util::arch::Arch;
use crate::util::cmd;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where binfmt_misc is mounted.
pub(super) const BINFMT_DIR: &str = "/proc/sys/fs/binfmt_misc";

/// The names a static qemu-user build of `arch` goes by (Debian 12 and
/// Fedora: `qemu-<arch>-static`; from Debian 13 `qemu-user` itself is
/// static, `qemu-<arch>`).
fn emulator_names(arch: Arch) -> [String; 2] {
    [format!("qemu-{arch}-static"), format!("qemu-{arch}")]
}

/// How this host runs `what`, a program of the OS built for `elf`:
/// `Ok(None)` natively (or through an enabled binfmt_misc handler with the
/// `F` flag, which the kernel finds from inside the buildroot), `Ok(Some)`
/// through that static qemu-user, run explicitly (no binfmt_misc
/// registration needed). `Err` says why it cannot run, naming the binary,
/// the arch and the package. `search` is where emulators are looked for
/// (PATH); `binfmt_dir` the mounted binfmt_misc.
pub fn runner(
    what: &str,
    elf: &ElfInfo,
    search: &[PathBuf],
    binfmt_dir: &Path,
) -> std::result::Result<Option<PathBuf>, String> {
    let host = Arch::host();
    let Some(arch) = elf.arch else {
        return Err(format!(
            "{what} is built for ELF machine {:#x}, which this {host} host cannot run and qemu-user (package qemu-user-static) does not emulate here: use an OS image of {}",
            elf.machine,
            Arch::known_names()
        ));
    };
    if arch == host {
        return Ok(None);
    }
    let mut dynamic = None;
    for name in emulator_names(arch) {
        for d in search {
            let p = d.join(&name);
            if !p.is_file() {
                continue;
            }
            match head_of(&p).ok().as_deref().and_then(elf_info) {
                Some(e) if e.interp.is_none() => return Ok(Some(p)),
                _ => dynamic = dynamic.or(Some(p)),
            }
        }
    }
    let handler =
        std::fs::read_to_string(binfmt_dir.join(format!("qemu-{arch}"))).unwrap_or_default();
    let enabled = handler.lines().next() == Some("enabled");
    let fixed = handler
        .lines()
        .any(|l| l.strip_prefix("flags: ").is_some_and(|f| f.contains('F')));
    if enabled && fixed {
        return Ok(None);
    }
    Err(match dynamic {
        Some(p) => format!(
            "{what} is built for {arch}, and this {host} host runs {arch} programs only through qemu-user: {} is dynamically linked, so it cannot start inside the OS's tree; install the static build (package qemu-user-static; from Debian 13 qemu-user), or run on an {arch} host",
            p.display()
        ),
        None => format!(
            "{what} is built for {arch}, and this {host} host runs {arch} programs only through qemu-user, which is not installed ({} found nowhere on PATH): install qemu-user-static (Debian 12, Ubuntu, Fedora, RHEL; from Debian 13 qemu-user), or run on an {arch} host",
            emulator_names(arch).join(" or ")
        ),
    })
}

/// Where emulators are looked for: PATH.
pub(super) fn search_path() -> Vec<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default()
}

/// `qemu-<arch> --version`'s first line (`qemu-aarch64 version 7.2.18 (...)`).
pub fn emulator_version(emulator: &Path) -> String {
    cmd::run_str(Command::new(emulator).arg("--version"))
        .ok()
        .and_then(|o| o.lines().next().map(str::to_string))
        .unwrap_or_else(|| "(version unknown)".into())
}
