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
use crate::oscontainer::repo::Repo;
use crate::util::cmd;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The OS's ostree CLI, relative to its tree.
pub const OSTREE: &str = "usr/bin/ostree";
/// Where binds appear inside the buildroot (a tmpfs, so any path works).
pub const BIND_ROOT: &str = "/run/bootimage";
/// Directories the namespace mounts over; made in the checkout if the
/// commit lacks them (an ostree commit need not carry `/etc` or `/run`).
const MOUNT_POINTS: [&str; 7] = ["proc", "sys", "dev", "run", "tmp", "var", "etc"];

/// The namespace's set-up, run by the host's `sh` under `unshare --mount`:
/// `$1` the buildroot, `$2` the number of binds, then `src dst ro|rw` per
/// bind, then the command to run in the buildroot.
const SETUP: &str = r#"set -e
br=$1; n=$2; shift 2
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
  mkdir -p "$br$2"
  mount --rbind "$1" "$br$2"
  if [ "$3" = ro ]; then mount -o remount,bind,ro "$br$2"; fi
  shift 3; n=$((n - 1))
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

/// The ELF machine of a binary, as `uname -m` names it (`None` if not ELF
/// or an unknown machine).
pub fn elf_arch(head: &[u8]) -> Option<&'static str> {
    if head.len() < 20 || &head[..4] != b"\x7fELF" {
        return None;
    }
    let machine = match head[5] {
        1 => u16::from_le_bytes([head[18], head[19]]),
        _ => u16::from_be_bytes([head[18], head[19]]),
    };
    Some(match machine {
        0x3e => "x86_64",
        0xb7 => "aarch64",
        0x15 => "ppc64le",
        0x16 => "s390x",
        _ => return None,
    })
}

const BINFMT_DIR: &str = "/proc/sys/fs/binfmt_misc";

/// Why this host cannot run a binary of `arch` (`None` when it can:
/// natively, or through qemu-user registered with binfmt_misc under
/// `binfmt_dir`). `what` names the binary.
pub fn cannot_run(what: &str, arch: &str, binfmt_dir: &Path) -> Option<String> {
    let host = crate::util::arch::host_arch();
    if arch == host {
        return None;
    }
    let handler = format!("qemu-{arch}");
    let enabled = std::fs::read_to_string(binfmt_dir.join(&handler))
        .map(|s| s.lines().next() == Some("enabled"))
        .unwrap_or(false);
    if enabled {
        return None;
    }
    let installed = ["/usr/bin", "/usr/libexec/qemu-binfmt"]
        .iter()
        .any(|d| Path::new(d).join(format!("{handler}-static")).exists());
    Some(match installed {
        true => format!(
            "{what} is built for {arch}, and this {host} host runs {arch} programs only through qemu-user: {handler}-static (package qemu-user-static) is installed but not registered with binfmt_misc (mount binfmt_misc on {}, then `update-binfmts --enable {handler}` or restart systemd-binfmt)",
            binfmt_dir.display()
        ),
        false => format!(
            "{what} is built for {arch}, and this {host} host cannot run it: install qemu-user-static (Debian, Ubuntu, Fedora, RHEL; it registers {handler} with binfmt_misc), or run on a {arch} host"
        ),
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
        let bin = dir.join(OSTREE);
        let mut head = [0u8; 20];
        {
            use std::io::Read;
            let mut f =
                std::fs::File::open(&bin).with_context(|| format!("opening the OS's /{OSTREE}"))?;
            let _ = f.read(&mut head);
        }
        let bin_arch = elf_arch(&head).unwrap_or(arch);
        if let Some(why) = cannot_run(
            &format!("the OS's /{OSTREE}"),
            bin_arch,
            Path::new(BINFMT_DIR),
        ) {
            bail!("{why}");
        }
        let mut b = Buildroot {
            dir,
            ostree_version: String::new(),
        };
        let out = cmd::run_str(&mut b.command(&[], &["/usr/bin/ostree", "--version"])?)
            .with_context(|| {
                format!(
                    "the OS's /{OSTREE} ({bin_arch}) does not run in its buildroot {} (a damaged cache? remove that directory and it is made again)",
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
        .arg(binds.len().to_string());
        for b in binds {
            c.arg(&b.host)
                .arg(&b.guest)
                .arg(if b.read_only { "ro" } else { "rw" });
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

    #[test]
    fn foreign_binaries_need_a_registered_qemu() {
        let d = tempfile::tempdir().unwrap();
        let host = crate::util::arch::host_arch();
        assert_eq!(cannot_run("/usr/bin/ostree", &host, d.path()), None);
        let other = if host == "s390x" { "aarch64" } else { "s390x" };
        let why = cannot_run("the OS's /usr/bin/ostree", other, d.path()).unwrap();
        for w in [
            "/usr/bin/ostree",
            other,
            "qemu-user-static",
            &format!("qemu-{other}"),
        ] {
            assert!(why.contains(w), "{w:?} not in {why}");
        }
        std::fs::write(d.path().join(format!("qemu-{other}")), "disabled\n").unwrap();
        assert!(cannot_run("x", other, d.path()).is_some());
        std::fs::write(
            d.path().join(format!("qemu-{other}")),
            "enabled\ninterpreter /usr/libexec/qemu-binfmt/x\n",
        )
        .unwrap();
        assert_eq!(cannot_run("x", other, d.path()), None);
    }
}
