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
//!
//! The ELF facts of the OS's binaries live in `elf`, the choice of how this
//! host runs them (natively or through qemu-user) in `emulator`; both are
//! re-exported here.
mod elf;
mod emulator;

pub use elf::{elf_arch, elf_info, resolve_in, ElfInfo};
pub use emulator::{emulator_version, runner};

use super::repo::Repo;
use crate::util::arch::Arch;
use crate::util::cmd;
use anyhow::{bail, Context, Result};
use elf::head_of;
use emulator::{search_path, BINFMT_DIR};
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
    pub fn prepare(cache_dir: &Path, repo: &Repo, commit: &str, arch: Arch) -> Result<Buildroot> {
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
    pub fn from_tree(dir: PathBuf, arch: Arch) -> Result<Buildroot> {
        make_mount_points(&dir)?;
        Buildroot::probe(dir, arch)
    }

    /// Check that the tree's ostree runs here and read its version.
    fn probe(dir: PathBuf, arch: Arch) -> Result<Buildroot> {
        let what = format!("the OS's /{OSTREE}");
        let elf = elf_info(&head_of(&dir.join(OSTREE))?).unwrap_or(ElfInfo {
            machine: 0,
            arch: None,
            interp: None,
        });
        // A script or unknown file: taken to be for the disk's arch.
        let elf = match elf.machine {
            0 => ElfInfo {
                arch: Some(arch).filter(Arch::is_known),
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
mod tests;
