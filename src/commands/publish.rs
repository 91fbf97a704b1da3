//! `generate`'s publish stage: every place a run's output goes besides the
//! output directory, chosen once from the flags and the platform table,
//! checked before the build (a typo, a refused credential, a key with the
//! wrong password or a missing platform costs seconds, not a build), and
//! done after it:
//! - `--sign-key`: the provenance beside meta.json, signed (after each run);
//! - `--vsphere-template`: the file the platform table sends to vSphere,
//!   imported as a template (after each run);
//! - `--push`: the whole output, once, into the registry, signed with the
//!   key when one is given (after every run).
//!
//! AWS is the one target the pipeline feeds itself: its snapshot is
//! streamed from the disk while that disk is encoded, and the AMIs go into
//! meta.json. A target that fails after the build says that the bootimages
//! are complete, what else is done, and the command that does the rest.
use crate::cli::{GenerateArgs, VsphereTarget};
use crate::pipeline::Ran;
use crate::plan::preflight::Named;
use crate::platforms::Upload;
use crate::publish::vsphere;
use crate::trust::sigstore::SigningKey;
use anyhow::Result;
use std::path::{Path, PathBuf};

/// The publish targets of one `generate`, checked.
pub struct Targets {
    key: Option<(SigningKey, PathBuf)>,
    push: Option<Push>,
    vsphere: Option<(vsphere::Settings, VsphereTarget)>,
    dry_run: bool,
    /// `--os-stream all`: the push is of every stream's directory at once.
    all_streams: bool,
}

/// `--push`: the registry reached, and how to push again by hand.
struct Push {
    target: super::registry::PushTarget,
    reference: String,
    /// `push`'s flags for the registry, as `generate` was given them.
    registry_flags: Vec<String>,
}

impl Targets {
    /// Each target's flags checked and its service reached, before any
    /// build: the key read (its password checked), the registry reached
    /// (the reference checked), vSphere's settings complete and a platform
    /// in the run whose disk goes there.
    pub fn check(a: &GenerateArgs) -> Result<Targets> {
        let key = super::registry::signing_key(a.sign_key.as_deref())?
            .map(|k| (k, a.sign_key.clone().unwrap_or_default()));
        let push = match (&a.push, a.dry_run) {
            (Some(r), false) => {
                let mut registry_flags = Vec::new();
                if let Some(f) = &a.input.registry_config {
                    registry_flags.push(format!("--authfile {}", f.display()));
                }
                if a.input.insecure {
                    registry_flags.push("--insecure".into());
                }
                if let Some(d) = &a.input.cert_dir {
                    registry_flags.push(format!("--cert-dir {}", d.display()));
                }
                Some(Push {
                    target: super::registry::generate_target(r, &a.input)?,
                    reference: r.clone(),
                    registry_flags,
                })
            }
            (Some(r), true) => {
                let (_, tag) = super::registry::push_reference(r)
                    .map_err(|e| e.context(format!("--push {r}")))?;
                crate::util::ui::status(format!(
                    "--dry-run: would push the output to {r} (tag {tag})"
                ));
                None
            }
            (None, _) => None,
        };
        let vsphere = match &a.vsphere_template {
            Some(name) => {
                if !Named::parse(&a.platforms)?.upload_to(Upload::Vsphere) {
                    anyhow::bail!("--vsphere-template {name} needs the vmware platform (the one whose disk goes to vSphere): add `vmware` to the platforms");
                }
                let s = super::vsphere::settings(
                    &a.vsphere,
                    name,
                    a.vsphere_insecure,
                    Some(a.input.release.clone()),
                )?;
                Some((s, a.vsphere.clone()))
            }
            None => None,
        };
        Ok(Targets {
            key,
            push,
            vsphere,
            dry_run: a.dry_run,
            all_streams: a.input.os_stream.as_deref() == Some(super::all_streams::ALL_STREAMS),
        })
    }

    /// After one run (one OS stream, into `out`): the signed provenance,
    /// then the vSphere template.
    pub fn after_run(&self, ran: &Ran, out: &Path) -> Result<()> {
        if self.dry_run {
            return Ok(());
        }
        // The push, which has not run yet, as it would push this run.
        let stream = (!self.all_streams).then_some(ran.os_stream.as_str());
        crate::trust::provenance::write(out, self.key.as_ref().map(|(k, _)| k)).map_err(|e| {
            self.partial(
                e,
                out,
                stream,
                "writing the provenance beside meta.json",
                &[],
            )
        })?;
        if let Some((s, t)) = &self.vsphere {
            let ova = ran.upload(Upload::Vsphere)?;
            super::vsphere::import_ova(s, ova, t).map_err(|e| {
                let again = format!(
                    "bootimage-gen vsphere import {} --name {} (with the same vSphere flags)",
                    ova.display(),
                    s.name
                );
                self.partial(e, out, stream, "the vSphere import", &[again])
            })?;
        }
        Ok(())
    }

    /// After every run: the push of the whole output `out`, as `stream`
    /// for a one-stream run.
    pub fn after_all(&self, out: &Path, stream: Option<&str>) -> Result<()> {
        let Some(p) = &self.push else { return Ok(()) };
        p.target
            .push(out, stream, self.key.as_ref().map(|(k, _)| k))
            .map_err(|e| {
                let mut done = vec![];
                if let Some((s, _)) = &self.vsphere {
                    done.push(format!("the vSphere template {} is imported", s.name));
                }
                e.context(format!(
                    "the bootimages in {} are complete{}; only the push failed: once its cause is fixed, run {}",
                    out.display(),
                    done.iter().map(|d| format!(", {d}")).collect::<String>(),
                    self.push_again(p, out, stream)
                ))
            })
    }

    /// `e` after the build: what is complete, what failed, and the commands
    /// that do what is left (`again`, then the push that has not run, as
    /// `stream`).
    fn partial(
        &self,
        e: anyhow::Error,
        out: &Path,
        stream: Option<&str>,
        what: &str,
        again: &[String],
    ) -> anyhow::Error {
        let mut left: Vec<String> = again.to_vec();
        if let Some(p) = &self.push {
            left.push(self.push_again(p, out, stream));
        }
        e.context(format!(
            "the bootimages in {} are complete (meta.json, SHA256SUMS); {what} failed{}",
            out.display(),
            if left.is_empty() {
                String::new()
            } else {
                format!(": once its cause is fixed, run {}", left.join(", then "))
            }
        ))
    }

    /// The `push` command that does what `--push` would have done.
    fn push_again(&self, p: &Push, out: &Path, stream: Option<&str>) -> String {
        let mut c = format!("bootimage-gen push {} {}", out.display(), p.reference);
        if let Some(s) = stream {
            c += &format!(" --stream {s}");
        }
        if let Some((_, k)) = &self.key {
            c += &format!(" --sign-key {}", k.display());
        }
        for f in &p.registry_flags {
            c += &format!(" {f}");
        }
        c
    }
}
