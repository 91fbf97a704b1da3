//! The OS's own tools, run from a buildroot made of the OS tree itself, so
//! that the steps that depend on the OS's version behave as on a node.
//!
//! coreos-assembler builds osbuild's buildroot "from the target OSTree
//! contents so we have version matches" (`coreos.osbuild.<arch>.mpp.yaml`,
//! `buildroot: name:deployed-tree`), and bootc-image-builder runs the
//! image's own `bootc install`. This host's ostree may be far older than the
//! OS's (Debian 12: 2022.7, which writes no composefs image), so the deploy
//! runs the OS's `/usr/bin/ostree` instead.
//!
//! The buildroot is a checkout of the OS commit (hardlinks into the cache's
//! repo, made once per commit under `<cache>/buildroot/<commit>`). Each
//! command runs in a private mount namespace (`unshare --mount`) where the
//! checkout is bind-mounted read-only onto itself (the hardlinked objects
//! are never written), `/etc` is the tree's `/usr/etc` (read-only), `/proc`,
//! `/sys` and `/dev` are the host's, `/run`, `/tmp` and `/var` are fresh
//! tmpfs, and the paths the command needs are bound under `/run/bootimage/`;
//! then `chroot`. Every mount lives in that namespace only: it goes when the
//! command ends, however it ends (a SIGKILLed run leaves nothing mounted).
use super::repo::Repo;
use crate::util::cmd;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The OS's ostree CLI, relative to its tree.
pub const OSTREE: &str = "usr/bin/ostree";
/// Where binds appear inside the buildroot (a tmpfs, so any path works).
pub const BIND_ROOT: &str = "/run/bootimage";
/// Where the emulator appears in the buildroot (a file bind).
const EMULATOR: &str = "/run/bootimage/qemu-user";
/// Directories the namespace mounts over; made in the checkout if the
/// commit lacks them (an ostree commit need not carry `/etc` or `/run`).
const MOUNT_POINTS: [&str; 7] = ["proc", "sys", "dev", "run", "tmp", "var", "etc"];

/// The namespace's set-up, run by the host's `sh` under `unshare --mount`:
/// `$1` the buildroot, `$2` the number of binds, then `src dst ro|rw` per
/// bind, then the command to run in the buildroot.
const SETUP: &str = r#"set -e
br=$(cd "$1" && pwd -P); n=$2; shift 2
mount --bind "$br" "$br"
mount -o remount,bind,ro "$br"
mount -t proc proc "$br/proc"
mount -t sysfs sysfs "$br/sys"
mount --rbind /dev "$br/dev"
for d in run tmp var; do mount -t tmpfs -o mode=0755 tmpfs "$br/$d"; done
chmod 1777 "$br/tmp"
if [ -d "$br/usr/etc" ]; then
  mount --bind "$br/usr/etc" "$br/etc"
  mount -o remount,bind,ro "$br/etc"
fi
while [ "$n" -gt 0 ]; do
  if [ -d "$1" ]; then mkdir -p "$br$2"; else mkdir -p "$(dirname "$br$2")"; : > "$br$2"; fi
  mount --rbind "$1" "$br$2"
  if [ "$3" = ro ]; then mount -o remount,bind,ro "$br$2"; fi
  shift 3; n=$((n - 1))
done
# Let go of the loop-backed filesystems this namespace copied from the host
# that are not the buildroot's own (another run's disk, mounted right now):
# held in here, such a filesystem would outlive that run's unmount until
# this command ends, its last writes landing after the run has read the
# disk, and its loop device could not be released.
grep ' - [^ ]* /dev/loop' /proc/self/mountinfo | cut -d' ' -f5 | sort -r |
while read -r m; do
  case "$m" in "$br"|"$br"/*) continue ;; esac
  case "$br/" in "$m"/*) continue ;; esac
  umount -l "$m" 2>/dev/null || :
done
exec chroot "$br" "$@"
"#;

/// A host path made visible inside the buildroot.
#[derive(Debug, Clone)]
pub struct Bind {
    pub host: PathBuf,
    /// Absolute, under [`BIND_ROOT`].
    pub guest: String,
    pub read_only: bool,
}

/// A checkout of the OS commit to run the OS's programs from.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Buildroot {
    pub dir: PathBuf,
    /// `ostree --version`'s `Version:` of the OS's ostree.
    pub ostree_version: String,
    /// The static qemu-user that runs the OS's programs on a host of
    /// another arch (bound into the buildroot and run explicitly).
    #[serde(default)]
    pub emulator: Option<PathBuf>,
}

/// Whether the OS tree of `commit` ships an ostree CLI.
pub fn os_has_ostree(repo: &Repo, commit: &str) -> Result<bool> {
    let listing = repo
        .list_dir(commit, "/usr/bin")
        .with_context(|| format!("listing /usr/bin of commit {commit}"))?;
    Ok(listing
        .unwrap_or_default()
        .iter()
        .any(|(dir, name)| !dir && name == "ostree"))
}

/// Where an OS says whether its root must be composefs (read by its
/// ostree-prepare-root from the initramfs, and by its ostree at deploy).
pub const PREPARE_ROOT_CONF: &str = "/usr/lib/ostree/prepare-root.conf";

/// Whether a `prepare-root.conf` makes composefs required: `[composefs]
/// enabled` = `yes` (or another GLib true: `true`, `1`), `verity` or
/// `signed` (ostree `otcore_load_rootfs_config`; `maybe` and `no` boot
/// without a composefs image).
pub fn composefs_required(conf: &str) -> bool {
    let mut section = "";
    for l in conf.lines().map(str::trim) {
        if let Some(s) = l.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = s;
        } else if section == "composefs" {
            if let Some((k, v)) = l.split_once('=') {
                if k.trim() == "enabled" {
                    return matches!(
                        v.trim().to_ascii_lowercase().as_str(),
                        "yes" | "true" | "1" | "verity" | "signed"
                    );
                }
            }
        }
    }
    false
}

/// Whether `ostree --version` output lists the composefs feature.
pub fn has_composefs_feature(out: &str) -> bool {
    out.lines().any(|l| l.trim() == "- composefs")
}

/// The version line of `ostree --version` output (`  Version: '2026.4'`).
pub fn parse_ostree_version(out: &str) -> Option<String> {
    out.lines().find_map(|l| {
        let v = l.trim().strip_prefix("Version:")?.trim();
        let v = v.trim_matches(|c| c == '\'' || c == '"');
        (!v.is_empty()).then(|| v.to_string())
    })
}

/// What the buildroot needs to know of an ELF file: its machine, by the
/// name qemu-user gives it where one is known, and its interpreter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfInfo {
    /// `e_machine`.
    pub machine: u16,
    /// As `uname -m` and qemu-user name it (`None`: a machine this tool
    /// has no name for).
    pub arch: Option<&'static str>,
    /// `PT_INTERP` (the dynamic loader); `None` for a static binary, or
    /// one whose program headers lie past `head`.
    pub interp: Option<String>,
}

/// The ELF facts of a file that starts with `head` (`None`: not ELF).
pub fn elf_info(head: &[u8]) -> Option<ElfInfo> {
    if head.len() < 20 || &head[..4] != b"\x7fELF" {
        return None;
    }
    let little = head[5] != 2;
    let wide = head[4] == 2;
    let num = |off: usize, len: usize| -> Option<u64> {
        let b = head.get(off..off + len)?;
        let mut v = 0u64;
        for i in 0..len {
            let byte = if little { b[len - 1 - i] } else { b[i] };
            v = (v << 8) | u64::from(byte);
        }
        Some(v)
    };
    let machine = num(18, 2)? as u16;
    let arch = match (machine, little) {
        (0x3e, _) => "x86_64",
        (0xb7, _) => "aarch64",
        (0x15, true) => "ppc64le",
        (0x15, false) => "ppc64",
        (0x16, _) => "s390x",
        (0xf3, _) => "riscv64",
        (0x03, _) => "i386",
        (0x28, _) => "arm",
        _ => "",
    };
    let interp = (|| {
        // e_phoff, e_phentsize, e_phnum; each header's p_type, p_offset, p_filesz.
        let (phoff, entsize, count) = match wide {
            true => (num(0x20, 8)?, num(0x36, 2)?, num(0x38, 2)?),
            false => (num(0x1c, 4)?, num(0x2a, 2)?, num(0x2c, 2)?),
        };
        for i in 0..count {
            let h = usize::try_from(phoff + i * entsize).ok()?;
            if num(h, 4)? != 3 {
                continue;
            }
            let (off, size) = match wide {
                true => (num(h + 8, 8)?, num(h + 0x20, 8)?),
                false => (num(h + 4, 4)?, num(h + 0x10, 4)?),
            };
            let b = head.get(usize::try_from(off).ok()?..usize::try_from(off + size).ok()?)?;
            let s = String::from_utf8_lossy(b)
                .trim_end_matches('\0')
                .to_string();
            return (!s.is_empty()).then_some(s);
        }
        None
    })();
    Some(ElfInfo {
        machine,
        arch: (!arch.is_empty()).then_some(arch),
        interp,
    })
}

/// The ELF machine of a binary, as `uname -m` names it (`None` if not ELF
/// or an unknown machine).
pub fn elf_arch(head: &[u8]) -> Option<&'static str> {
    elf_info(head)?.arch
}

/// The first 64 KiB of a file: enough for an ELF header, its program
/// headers and the interpreter's name.
fn head_of(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(64 << 10).read_to_end(&mut head))
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(head)
}

/// `path` (absolute, as the tree sees it) resolved inside the tree at
/// `root`: symlinks followed with `root` as `/`, so an absolute link (Debian's
/// `/lib64/ld-linux-x86-64.so.2`) never escapes to the host's files. `None`
/// when some component is missing or the links loop.
pub fn resolve_in(root: &Path, path: &str) -> Option<PathBuf> {
    let mut todo: Vec<String> = path
        .split('/')
        .filter(|c| !c.is_empty())
        .rev()
        .map(str::to_string)
        .collect();
    let mut cur: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        match c.as_str() {
            "." => continue,
            ".." => {
                cur.pop();
                continue;
            }
            _ => {}
        }
        let p = cur
            .iter()
            .fold(root.to_path_buf(), |p, c| p.join(c))
            .join(&c);
        let meta = std::fs::symlink_metadata(&p).ok()?;
        if meta.file_type().is_symlink() {
            hops += 1;
            if hops > 40 {
                return None;
            }
            let target = std::fs::read_link(&p).ok()?;
            let t = target.to_string_lossy();
            if t.starts_with('/') {
                cur.clear();
            }
            todo.extend(
                t.split('/')
                    .filter(|c| !c.is_empty())
                    .rev()
                    .map(str::to_string),
            );
        } else {
            cur.push(c);
        }
    }
    Some(cur.iter().fold(root.to_path_buf(), |p, c| p.join(c)))
}

const BINFMT_DIR: &str = "/proc/sys/fs/binfmt_misc";

/// The names a static qemu-user build of `arch` goes by (Debian 12 and
/// Fedora: `qemu-<arch>-static`; from Debian 13 `qemu-user` itself is
/// static, `qemu-<arch>`).
fn emulator_names(arch: &str) -> [String; 2] {
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
    let host = crate::util::arch::host_arch();
    let Some(arch) = elf.arch else {
        return Err(format!(
            "{what} is built for ELF machine {:#x}, which this {host} host cannot run and qemu-user (package qemu-user-static) does not emulate here: use an OS image of x86_64, aarch64, ppc64le or s390x",
            elf.machine
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
fn search_path() -> Vec<PathBuf> {
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

/// The directories the namespace mounts over, made where the tree lacks them.
fn make_mount_points(dir: &Path) -> Result<()> {
    for m in MOUNT_POINTS {
        let p = dir.join(m);
        if std::fs::symlink_metadata(&p).is_err() {
            std::fs::create_dir(&p).with_context(|| format!("creating {}", p.display()))?;
        }
    }
    Ok(())
}

impl Buildroot {
    /// The buildroot of `commit` under `cache_dir/buildroot/`, checked out
    /// from `repo` the first time (into a scratch name, then renamed, so a
    /// killed checkout is never taken for a whole one), and probed: its
    /// ostree must run here.
    pub fn prepare(cache_dir: &Path, repo: &Repo, commit: &str, arch: &str) -> Result<Buildroot> {
        let base = cache_dir.join("buildroot");
        let dir = base.join(commit);
        if !dir.join(OSTREE).exists() {
            std::fs::create_dir_all(&base)
                .with_context(|| format!("creating {}", base.display()))?;
            let tmp = base.join(format!(".{commit}.{}", std::process::id()));
            if tmp.exists() {
                std::fs::remove_dir_all(&tmp)
                    .with_context(|| format!("removing {}", tmp.display()))?;
            }
            // User mode and hardlinks: no copy of the tree, and the
            // namespace mounts it read-only, so no object is ever written.
            let res = cmd::run(&mut cmd::new(
                "ostree",
                [
                    "checkout".to_string(),
                    format!("--repo={}", repo.path.display()),
                    "--user-mode".into(),
                    "--require-hardlinks".into(),
                    commit.into(),
                    tmp.display().to_string(),
                ],
            ))
            .with_context(|| format!("checking out the OS tree {commit} as a buildroot"))
            .and_then(|_| {
                make_mount_points(&tmp)?;
                std::fs::rename(&tmp, &dir)
                    .with_context(|| format!("renaming {} to {}", tmp.display(), dir.display()))
            });
            if let Err(e) = res {
                let _ = std::fs::remove_dir_all(&tmp);
                // Another run made the same buildroot meanwhile: use it.
                if !dir.join(OSTREE).exists() {
                    return Err(e);
                }
            }
        }
        Buildroot::probe(dir, arch)
    }

    /// A buildroot of a tree already on disk (the merged layers of an image
    /// with no ostree commit): the namespace's mount points are made in it.
    pub fn from_tree(dir: PathBuf, arch: &str) -> Result<Buildroot> {
        make_mount_points(&dir)?;
        Buildroot::probe(dir, arch)
    }

    /// Check that the tree's ostree runs here and read its version.
    fn probe(dir: PathBuf, arch: &str) -> Result<Buildroot> {
        let what = format!("the OS's /{OSTREE}");
        let elf = elf_info(&head_of(&dir.join(OSTREE))?).unwrap_or(ElfInfo {
            machine: 0,
            arch: None,
            interp: None,
        });
        // A script or unknown file: taken to be for the disk's arch.
        let elf = match elf.machine {
            0 => ElfInfo {
                arch: crate::util::arch::ARCHES
                    .iter()
                    .copied()
                    .find(|a| *a == arch),
                ..elf
            },
            _ => elf,
        };
        if let Some(i) = &elf.interp {
            if !resolve_in(&dir, i).is_some_and(|p| p.is_file()) {
                bail!(
                    "{what} needs its ELF interpreter {i}, which the OS tree lacks (a damaged buildroot cache? remove {} and it is made again; else the OS image is incomplete)",
                    dir.display()
                );
            }
        }
        let emulator = runner(&what, &elf, &search_path(), Path::new(BINFMT_DIR))
            .map_err(|e| anyhow::anyhow!(e))?;
        let bin_arch = elf.arch.unwrap_or(arch);
        let mut b = Buildroot {
            dir,
            ostree_version: String::new(),
            emulator,
        };
        let out = cmd::run_str(&mut b.command(&[], &["/usr/bin/ostree", "--version"])?)
            .with_context(|| {
                format!(
                    "the OS's /{OSTREE} ({bin_arch}{}) does not run in its buildroot {} (a damaged cache? remove that directory and it is made again)",
                    b.emulator.as_ref().map(|e| format!(", through {}", e.display())).unwrap_or_default(),
                    b.dir.display()
                )
            })?;
        b.ostree_version = parse_ostree_version(&out).with_context(|| {
            format!("the OS's `ostree --version` printed no Version line: {out}")
        })?;
        Ok(b)
    }

    /// The namespace set-up script next to the buildroots (a file, so
    /// that command lines in logs and errors stay short).
    fn setup_script(&self) -> Result<PathBuf> {
        let base = self.dir.parent().unwrap_or(Path::new("/"));
        let p = base.join(format!(
            "setup-{}.sh",
            &crate::util::sha256_hex(SETUP.as_bytes())[..12]
        ));
        // Rewritten unless it holds exactly this script: root runs it.
        if std::fs::read(&p).ok().as_deref() != Some(SETUP.as_bytes()) {
            let tmp = base.join(format!(".setup.{}", std::process::id()));
            std::fs::write(&tmp, SETUP).with_context(|| format!("writing {}", tmp.display()))?;
            std::fs::rename(&tmp, &p).with_context(|| format!("writing {}", p.display()))?;
        }
        Ok(p)
    }

    /// `argv` run inside the buildroot with `binds`.
    pub fn command(&self, binds: &[Bind], argv: &[&str]) -> Result<Command> {
        let mut c = Command::new("unshare");
        // A PID namespace too: whatever the OS's program starts dies with
        // it, and unshare (the parent) takes it down if we are killed.
        c.args([
            "--mount",
            "--propagation",
            "private",
            "--pid",
            "--fork",
            "--kill-child",
            "--",
            "sh",
        ])
        .arg(self.setup_script()?)
        .arg(&self.dir)
        .arg((binds.len() + usize::from(self.emulator.is_some())).to_string());
        let emulator = self.emulator.as_ref().map(|e| Bind {
            host: e.clone(),
            guest: EMULATOR.into(),
            read_only: true,
        });
        for b in binds.iter().chain(emulator.as_ref()) {
            c.arg(&b.host)
                .arg(&b.guest)
                .arg(if b.read_only { "ro" } else { "rw" });
        }
        if emulator.is_some() {
            c.arg(EMULATOR);
        }
        c.args(argv);
        Ok(c)
    }
}

/// Remove the buildroots of commits the repo no longer has (after gc).
pub fn prune(cache_dir: &Path, repo: &Repo) -> Result<Vec<String>> {
    let base = cache_dir.join("buildroot");
    let mut removed = Vec::new();
    let Ok(rd) = std::fs::read_dir(&base) else {
        return Ok(removed);
    };
    for e in rd {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let is_commit = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
        if !e.file_type()?.is_dir() {
            continue;
        }
        let keep = match name.strip_prefix('.').and_then(|r| r.rsplit_once('.')) {
            // A checkout under way: kept while the run making it lives.
            Some((c, pid)) if is_commit(c) => Path::new("/proc").join(pid).exists(),
            // Not ours: left alone.
            Some(_) => true,
            None if is_commit(&name) => repo.has_commit(&name),
            None => true,
        };
        if !keep {
            std::fs::remove_dir_all(e.path())
                .with_context(|| format!("removing buildroot {}", e.path().display()))?;
            removed.push(name);
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_line() {
        let out = "libostree:\n Version: '2026.4'\n Git: v2026.4\n Features:\n  - libcurl\n";
        assert_eq!(parse_ostree_version(out).as_deref(), Some("2026.4"));
        assert_eq!(parse_ostree_version("libostree:\n Git: x\n"), None);
        assert_eq!(parse_ostree_version(" Version: ''\n"), None);
    }

    #[test]
    fn composefs_requirement() {
        let yes = "# rhel-coreos-config\n[composefs]\nenabled = yes\n";
        assert!(composefs_required(yes));
        assert!(composefs_required("[composefs]\nenabled=verity\n"));
        assert!(composefs_required(
            "[sysroot]\nreadonly=true\n[composefs]\nenabled = true\n"
        ));
        assert!(!composefs_required("[composefs]\nenabled = maybe\n"));
        assert!(!composefs_required("[composefs]\nenabled = no\n"));
        assert!(!composefs_required("[sysroot]\nenabled = yes\n"));
        assert!(!composefs_required(""));
        let v = "libostree:\n Version: '2026.4'\n Features:\n  - libcurl\n  - composefs\n";
        assert!(has_composefs_feature(v));
        assert!(!has_composefs_feature(
            " Features:\n  - libcurl\n  - composefs-like\n"
        ));
    }

    #[test]
    fn elf_machine() {
        let mut h = [0u8; 20];
        h[..4].copy_from_slice(b"\x7fELF");
        h[5] = 1;
        h[18] = 0x3e;
        assert_eq!(elf_arch(&h), Some("x86_64"));
        h[18] = 0xb7;
        assert_eq!(elf_arch(&h), Some("aarch64"));
        h[5] = 2;
        h[18] = 0;
        h[19] = 0x16;
        assert_eq!(elf_arch(&h), Some("s390x"));
        h[19] = 0x99;
        assert_eq!(elf_arch(&h), None);
        assert_eq!(elf_arch(b"#!/bin/sh\n echo not elf.."), None);
    }

    /// An ELF64 little-endian header for `machine`, with a PT_INTERP of
    /// `interp` when given.
    fn elf64(machine: u16, interp: Option<&str>) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        h[18..20].copy_from_slice(&machine.to_le_bytes());
        if let Some(i) = interp {
            h[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
            h[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
            h[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
            let mut ph = vec![0u8; 56];
            ph[..4].copy_from_slice(&3u32.to_le_bytes());
            ph[8..16].copy_from_slice(&120u64.to_le_bytes());
            ph[0x20..0x28].copy_from_slice(&(i.len() as u64 + 1).to_le_bytes());
            h.extend(ph);
            h.extend(i.as_bytes());
            h.push(0);
        }
        h
    }

    #[test]
    fn elf_interpreter() {
        let e = elf_info(&elf64(0xb7, Some("/lib/ld-linux-aarch64.so.1"))).unwrap();
        assert_eq!(e.arch, Some("aarch64"));
        assert_eq!(e.interp.as_deref(), Some("/lib/ld-linux-aarch64.so.1"));
        let e = elf_info(&elf64(0x32, None)).unwrap();
        assert_eq!((e.machine, e.arch, e.interp), (0x32, None, None));
        // Program headers past the bytes read: no interpreter claimed.
        let mut cut = elf64(0x3e, Some("/lib64/ld-linux-x86-64.so.2"));
        cut.truncate(100);
        assert_eq!(elf_info(&cut).unwrap().interp, None);
    }

    #[test]
    fn paths_resolve_inside_the_tree() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("usr/lib/x86_64-linux-gnu")).unwrap();
        std::fs::write(r.join("usr/lib/x86_64-linux-gnu/ld.so"), "x").unwrap();
        std::os::unix::fs::symlink("usr/lib", r.join("lib")).unwrap();
        std::fs::create_dir(r.join("usr/lib64")).unwrap();
        std::os::unix::fs::symlink("usr/lib64", r.join("lib64")).unwrap();
        // Absolute, as Debian ships /lib64/ld-linux-x86-64.so.2.
        std::os::unix::fs::symlink("/lib/x86_64-linux-gnu/ld.so", r.join("usr/lib64/ld.so"))
            .unwrap();
        assert_eq!(
            resolve_in(r, "/lib64/ld.so"),
            Some(r.join("usr/lib/x86_64-linux-gnu/ld.so"))
        );
        std::fs::remove_file(r.join("usr/lib/x86_64-linux-gnu/ld.so")).unwrap();
        assert_eq!(resolve_in(r, "/lib64/ld.so"), None);
        std::os::unix::fs::symlink("loop", r.join("loop")).unwrap();
        assert_eq!(resolve_in(r, "/loop/x"), None);
        assert_eq!(resolve_in(r, "/usr/../lib"), Some(r.join("usr/lib")));
    }

    #[test]
    fn foreign_binaries_run_through_a_static_qemu_user() {
        let host = crate::util::arch::host_arch();
        let other = if host == "s390x" { "aarch64" } else { "s390x" };
        let machine = |a: &str| match a {
            "aarch64" => 0xb7,
            _ => 0x16,
        };
        let ostree = |a: &str| ElfInfo {
            machine: machine(a),
            arch: Some(if a == other { other } else { "x86_64" }),
            interp: None,
        };
        let bin = tempfile::tempdir().unwrap();
        let binfmt = tempfile::tempdir().unwrap();
        let search = [bin.path().to_path_buf()];
        let what = "the OS's /usr/bin/ostree";
        if host == "x86_64" {
            assert_eq!(
                runner(what, &ostree("x86_64"), &search, binfmt.path()),
                Ok(None)
            );
        }
        // No emulator, no handler: the binary, the arch and the package.
        let why = runner(what, &ostree(other), &search, binfmt.path()).unwrap_err();
        for w in [
            what,
            other,
            "qemu-user-static",
            &format!("qemu-{other}-static"),
        ] {
            assert!(why.contains(w), "{w:?} not in {why}");
        }
        // A handler without F (its interpreter looked up inside the tree).
        let handler = binfmt.path().join(format!("qemu-{other}"));
        std::fs::write(&handler, "enabled\ninterpreter /usr/bin/q\nflags: OP\n").unwrap();
        assert!(runner(what, &ostree(other), &search, binfmt.path()).is_err());
        std::fs::write(&handler, "disabled\ninterpreter /usr/bin/q\nflags: OPF\n").unwrap();
        assert!(runner(what, &ostree(other), &search, binfmt.path()).is_err());
        std::fs::write(&handler, "enabled\ninterpreter /usr/bin/q\nflags: OPF\n").unwrap();
        assert_eq!(
            runner(what, &ostree(other), &search, binfmt.path()),
            Ok(None)
        );
        std::fs::remove_file(&handler).unwrap();
        // A dynamically linked qemu cannot start inside the OS's tree.
        let dynamic = bin.path().join(format!("qemu-{other}"));
        std::fs::write(&dynamic, elf64(0x3e, Some("/lib64/ld-linux-x86-64.so.2"))).unwrap();
        let why = runner(what, &ostree(other), &search, binfmt.path()).unwrap_err();
        assert!(why.contains("dynamically linked"), "{why}");
        // A static one is run explicitly.
        let stat = bin.path().join(format!("qemu-{other}-static"));
        std::fs::write(&stat, elf64(0x3e, None)).unwrap();
        assert_eq!(
            runner(what, &ostree(other), &search, binfmt.path()),
            Ok(Some(stat))
        );
        // A machine qemu-user is not used for.
        let ia64 = ElfInfo {
            machine: 0x32,
            arch: None,
            interp: None,
        };
        let why = runner(what, &ia64, &search, binfmt.path()).unwrap_err();
        for w in [what, "ELF machine 0x32", "qemu-user-static"] {
            assert!(why.contains(w), "{w:?} not in {why}");
        }
    }
}
