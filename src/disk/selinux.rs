//! SELinux labels on the disk, set by the OS's own `setfiles` with the OS's
//! own policy, as osbuild's two stages do in coreos-assembler's build
//! (`build.common.ipp.yaml`): `org.osbuild.selinux` on the physical root
//! before `ostree admin init-fs`, and `org.osbuild.ostree.selinux` after the
//! deploy on `/boot`, the deployment's `/etc` and the stateroot's `/var`
//! (`setfiles -F -r <root> <file_contexts> <path>`, osbuild
//! `util/selinux.py`). ostree labels only when SELinux is enabled on the
//! build host, which a build host usually is not; RHCOS's policy does not
//! let Ignition touch unlabelled files (coreos-assembler#688).
//!
//! On cosa's builders (SELinux enabled) what ostree makes under the
//! labelled physical root takes its parent's label; here nothing does, so
//! once the deploy is done the whole physical root is labelled by path
//! ([`Labeller::label_physical_root`]): `/ostree`, the repo, its config and
//! refs, the origin files. Unlabelled, a node reads them as `unlabeled_t`,
//! which FCOS's upgrade test refuses (`find /sysroot -context
//! '*unlabeled_t*'`, fedora-coreos-tracker#1772).
//!
//! Everything runs in the OS's buildroot ([`super::buildroot`]); the files
//! to label are bound into it at the path they have on a booted node.
use crate::oscontainer::buildroot::{Bind, Buildroot, BIND_ROOT};
use crate::util::cmd;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// The OS's setfiles.
pub const SETFILES: &str = "usr/sbin/setfiles";

/// The OS's policy and setfiles, ready to label.
#[derive(Debug, Clone)]
pub struct Labeller<'a> {
    br: &'a Buildroot,
    /// `SELINUXTYPE` of the OS's `/etc/selinux/config`.
    pub policy: String,
    /// Its file contexts, as the buildroot sees them.
    file_contexts: String,
}

/// `SELINUXTYPE=` of an `/etc/selinux/config`.
pub fn policy_type(config: &str) -> Option<String> {
    config.lines().find_map(|l| {
        let v = l.trim().strip_prefix("SELINUXTYPE=")?.trim();
        let v = v.trim_matches(|c| c == '"' || c == '\'');
        (!v.is_empty() && !v.contains('/')).then(|| v.to_string())
    })
}

impl<'a> Labeller<'a> {
    /// The labeller of the OS in `br`; `Err(reason)` when the OS has no
    /// policy or no setfiles (nothing is labelled then, and the run says
    /// why).
    pub fn new(br: &'a Buildroot) -> Result<std::result::Result<Labeller<'a>, String>> {
        let etc = br.dir.join("usr/etc");
        let cfg = etc.join("selinux/config");
        let text = match std::fs::read_to_string(&cfg) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Err(
                    "the OS ships no SELinux policy (/usr/etc/selinux/config)".into(),
                ))
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", cfg.display())),
        };
        let Some(policy) = policy_type(&text) else {
            return Ok(Err(
                "the OS's /usr/etc/selinux/config names no SELINUXTYPE".into()
            ));
        };
        let fc = format!("selinux/{policy}/contexts/files/file_contexts");
        if !etc.join(&fc).is_file() {
            return Ok(Err(format!(
                "the OS's SELinux policy {policy} has no /usr/etc/{fc}"
            )));
        }
        if !br.dir.join(SETFILES).is_file() {
            return Ok(Err(format!(
                "the OS ships SELinux policy {policy} but no /{SETFILES} (policycoreutils)"
            )));
        }
        Ok(Ok(Labeller {
            br,
            policy,
            file_contexts: format!("/etc/{fc}"),
        }))
    }

    /// Label the tree at `host` as the path `at` of a node (`/`, `/boot`,
    /// `/etc`, `/var`): `setfiles -F -r R <file_contexts> R<at>` with `host`
    /// bound at `R<at>`.
    pub fn label(&self, host: &Path, at: &str) -> Result<usize> {
        self.setfiles(host, at, &[], false)
    }

    /// [`Labeller::label`] leaving out the subtrees `exclude` (node paths,
    /// `setfiles -e`), and with `dry_run` (`-n`) changing nothing. Returns
    /// how many files setfiles (re)labelled, or would have.
    pub fn setfiles(
        &self,
        host: &Path,
        at: &str,
        exclude: &[&str],
        dry_run: bool,
    ) -> Result<usize> {
        let out = self.run(host, at, exclude, dry_run)?;
        Ok(count_relabeled(&out))
    }

    /// The whole physical root at `root` (the root filesystem, `/boot`
    /// mounted on it) labelled by path, as a node's `/sysroot` holds it,
    /// once the deploy is done: what ostree made there (`/ostree`, the
    /// repo's directories, config, refs and state, the deployments'
    /// origin files, the boot links) and what this program wrote (the
    /// aleph file). Left out, as they keep or get their own labels: each
    /// deployment (from the commit; its `/etc` labelled as `/etc`), each
    /// stateroot's `/var` (labelled as `/var`), `/boot` (labelled on its
    /// own, last) and the repo's file objects, which are the deployments'
    /// files (hardlinks): never relabelled. The repo's directories and its
    /// other objects (commits, dirtrees, dirmetas) are labelled, by
    /// [`Labeller::label_repo_objects`]. Returns how many entries were
    /// labelled.
    pub fn label_physical_root(&self, root: &Path) -> Result<usize> {
        let own = own_label_subtrees(root)?;
        let exclude: Vec<&str> = own.iter().map(String::as_str).collect();
        let n = self.setfiles(root, "/", &exclude, false)?;
        Ok(n + self.label_repo_objects(root)?)
    }

    /// The sysroot repo's `objects` directory, the directories in it and
    /// every object but the file objects, labelled as setfiles says: it
    /// labels a directory only with all it holds, so it runs in no-act
    /// mode (`-n`, read-only) over `objects` and the label it names for
    /// each entry is set here (as libselinux's `lsetfilecon` sets it),
    /// leaving every `.file` object as it is.
    pub fn label_repo_objects(&self, root: &Path) -> Result<usize> {
        let objects = root.join(OBJECTS.trim_start_matches('/'));
        let out = self.run(&objects, OBJECTS, &[], true)?;
        let guest_root = format!("{BIND_ROOT}/label");
        let mut n = 0;
        for (path, context) in out.lines().filter_map(would_relabel) {
            let node = path.strip_prefix(&guest_root).unwrap_or(path);
            let Some(rel) = node.strip_prefix(OBJECTS) else {
                bail!("the OS's setfiles named {path}, outside {OBJECTS}");
            };
            let rel = rel.trim_start_matches('/');
            if rel.split('/').any(|c| c == "..") {
                bail!("the OS's setfiles named {path}, outside {OBJECTS}");
            }
            if is_file_object(rel) {
                continue;
            }
            let host = match rel {
                "" => objects.clone(),
                r => objects.join(r),
            };
            set_context(&host, context)?;
            n += 1;
        }
        Ok(n)
    }

    /// The OS's `setfiles -F -v` (with `-n` when `dry_run`) over the tree
    /// at `host` seen as the node path `at`, without `exclude`; its output.
    fn run(&self, host: &Path, at: &str, exclude: &[&str], dry_run: bool) -> Result<String> {
        let root = format!("{BIND_ROOT}/label");
        let target = match at.trim_end_matches('/') {
            "" => root.clone(),
            a => format!("{root}{a}"),
        };
        let binds = [Bind {
            host: host.to_path_buf(),
            guest: target.clone(),
            read_only: dry_run,
        }];
        let excluded: Vec<String> = exclude.iter().map(|e| format!("{root}{e}")).collect();
        let mut argv = vec!["/usr/sbin/setfiles", "-F", "-v"];
        if dry_run {
            argv.push("-n");
        }
        for e in &excluded {
            argv.extend(["-e", e.as_str()]);
        }
        argv.extend(["-r", &root, &self.file_contexts, &target]);
        let out = cmd::run(&mut self.br.command(&binds, &argv)?).with_context(|| {
            format!(
                "the OS's setfiles could not label {at} with its SELinux policy {} (/usr{} in the OS image; its message follows)",
                self.policy, self.file_contexts
            )
        })?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

/// The sysroot repo's objects, as a node path.
const OBJECTS: &str = "/ostree/repo/objects";

/// Whether `rel` (a path under the repo's `objects`) is a file object
/// (`xx/<rest of the sha256>.file`, a regular file or a symlink): the
/// deployments' files are hardlinks of these.
fn is_file_object(rel: &str) -> bool {
    rel.ends_with(".file")
}

/// The subtrees of the physical root at `root` that keep or get their own
/// labels (node paths): `/boot`, the repo's objects, each stateroot's
/// `/var` and each deployment (`ostree/deploy/<stateroot>/deploy/<dir>`;
/// its `.origin` file is the physical root's).
fn own_label_subtrees(root: &Path) -> Result<Vec<String>> {
    let mut v = vec!["/boot".to_string(), OBJECTS.to_string()];
    let deploy = root.join("ostree/deploy");
    for stateroot in read_dir_sorted(&deploy)? {
        let Some(name) = stateroot.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let base = format!("/ostree/deploy/{name}");
        if stateroot.join("var").is_dir() {
            v.push(format!("{base}/var"));
        }
        let deployments = stateroot.join("deploy");
        if !deployments.is_dir() {
            continue;
        }
        for d in read_dir_sorted(&deployments)? {
            let dir = std::fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir());
            if let (true, Some(n)) = (dir, d.file_name().and_then(|n| n.to_str())) {
                v.push(format!("{base}/deploy/{n}"));
            }
        }
    }
    Ok(v)
}

/// The entries of `dir`, sorted; none when it does not exist.
fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let mut v = rd
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()
        .with_context(|| format!("reading {}", dir.display()))?;
    v.sort();
    Ok(v)
}

/// The path and the new context of a `Would relabel <path> from <old> to
/// <new>` line of `setfiles -n -v` (libselinux `restorecon_sb`; `<old>` is
/// `<no context>` for an unlabelled file). A path holding ` from ` is not
/// told apart: the repo's object paths never do.
fn would_relabel(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim_start().strip_prefix("Would relabel ")?;
    let (path, rest) = rest.split_once(" from ")?;
    let (_, context) = rest.rsplit_once(" to ")?;
    let context = context.trim();
    (!context.is_empty()).then_some((path, context))
}

/// Set the SELinux context of `path` itself (a symlink's own), as
/// libselinux's `lsetfilecon` writes it: the `security.selinux` extended
/// attribute, the context with its terminating NUL.
fn set_context(path: &Path, context: &str) -> Result<()> {
    let mut value = context.as_bytes().to_vec();
    value.push(0);
    crate::sys::fsmeta::set_xattr(path, &c"security.selinux".into(), &value)
        .with_context(|| format!("labelling {} {context}", path.display()))
}

/// How many files `setfiles -v` said it relabelled (`Relabeled <path> from
/// ...`), or would have with `-n` (`Would relabel <path> from ...`).
pub fn count_relabeled(out: &str) -> usize {
    out.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("Relabeled ") || l.starts_with("Would relabel "))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_type_from_config() {
        let c = "# comment\nSELINUX=enforcing\nSELINUXTYPE=targeted\n";
        assert_eq!(policy_type(c).as_deref(), Some("targeted"));
        assert_eq!(
            policy_type("SELINUXTYPE=\"default\"\n").as_deref(),
            Some("default")
        );
        assert_eq!(policy_type("SELINUX=permissive\n"), None);
        assert_eq!(policy_type("SELINUXTYPE=../x\n"), None);
    }

    #[test]
    fn would_relabel_lines_read() {
        let l = "Would relabel /run/bootimage/label/ostree/repo/objects/ab from <no context> to system_u:object_r:default_t:s0";
        assert_eq!(
            would_relabel(l),
            Some((
                "/run/bootimage/label/ostree/repo/objects/ab",
                "system_u:object_r:default_t:s0"
            ))
        );
        let l = "Would relabel /o/ab/cd.dirtree from system_u:object_r:bin_t:s0 to system_u:object_r:default_t:s0\n";
        assert_eq!(
            would_relabel(l),
            Some(("/o/ab/cd.dirtree", "system_u:object_r:default_t:s0"))
        );
        assert_eq!(would_relabel("Relabeled /a from x to y"), None);
        assert_eq!(would_relabel("Would relabel /a from x to "), None);
        assert!(is_file_object("ab/cdef.file"));
        for o in [
            "ab/cdef.commit",
            "ab/cdef.dirtree",
            "ab/cdef.dirmeta",
            "ab",
            "",
        ] {
            assert!(!is_file_object(o), "{o}");
        }
    }

    #[test]
    fn own_label_subtrees_of_a_sysroot() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        for p in [
            "ostree/repo/objects/ab",
            "ostree/deploy/rhcos/var/lib",
            "ostree/deploy/rhcos/deploy/0123.0/usr",
            "ostree/deploy/rhcos/deploy/4567.1",
        ] {
            std::fs::create_dir_all(r.join(p)).unwrap();
        }
        std::fs::write(r.join("ostree/deploy/rhcos/deploy/0123.0.origin"), "").unwrap();
        assert_eq!(
            own_label_subtrees(r).unwrap(),
            [
                "/boot",
                "/ostree/repo/objects",
                "/ostree/deploy/rhcos/var",
                "/ostree/deploy/rhcos/deploy/0123.0",
                "/ostree/deploy/rhcos/deploy/4567.1",
            ]
        );
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(
            own_label_subtrees(empty.path()).unwrap(),
            ["/boot", "/ostree/repo/objects"]
        );
    }

    #[test]
    fn relabeled_lines_counted() {
        let out = "Relabeled /a/boot from unlabeled_t to system_u:object_r:boot_t:s0\n\
                   Would relabel /a/boot/x from <no context> to system_u:object_r:boot_t:s0\n\
                   setfiles: something else\n";
        assert_eq!(count_relabeled(out), 2);
        assert_eq!(count_relabeled(""), 0);
    }
}
