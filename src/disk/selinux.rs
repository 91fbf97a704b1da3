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
//! Everything runs in the OS's buildroot ([`super::buildroot`]); the files
//! to label are bound into it at the path they have on a booted node.
use crate::oscontainer::buildroot::{Bind, Buildroot, BIND_ROOT};
use crate::util::cmd;
use anyhow::{Context, Result};
use std::path::Path;

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
        Ok(count_relabeled(&String::from_utf8_lossy(&out)))
    }
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
    fn relabeled_lines_counted() {
        let out = "Relabeled /a/boot from unlabeled_t to system_u:object_r:boot_t:s0\n\
                   Would relabel /a/boot/x from <no context> to system_u:object_r:boot_t:s0\n\
                   setfiles: something else\n";
        assert_eq!(count_relabeled(out), 2);
        assert_eq!(count_relabeled(""), 0);
    }
}
