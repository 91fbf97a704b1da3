//! Whether the release may be built from: which keys apply (the user's, or
//! the built-in ones of an official release), where its signatures are
//! looked for, what verified it, and the one-line refusal when nothing did.
//! In: the pull spec as given, its IDMS sources, the resolved digests and
//! the user's trust options; out: a `Record` that the run prints, `inspect`
//! shows, meta.json summarises and `release-verification.json` holds whole.
use super::{atomic, sigstore};
use crate::image::fetch::FetchOptions;
use crate::image::idms::Mirrors;
use crate::image::imageref::{DockerRef, ImageRef};
use crate::publish::registry::client::{Client, Options as RegistryOptions};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::PathBuf;

/// The user's trust options (`--verification-config`, `--signatures`,
/// `--sigstore-key`, `--require-signature`, `--no-verify-signature`).
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub verification_configs: Vec<PathBuf>,
    pub signatures: Vec<PathBuf>,
    pub sigstore_keys: Vec<PathBuf>,
    pub require: bool,
    pub skip: bool,
}

impl Options {
    /// The user gave keys of their own: what they name must verify.
    fn has_keys(&self) -> bool {
        !self.verification_configs.is_empty() || !self.sigstore_keys.is_empty()
    }
}

/// Whose release a pull spec names. Decided by the pull spec the user gave
/// or the IDMS source it mirrors, never by what the payload says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// OCP: the scopes of cluster-update-keys' ClusterImagePolicy.
    RedHat,
    /// OKD's release repositories.
    Okd,
}

/// OKD's release repositories (OKD's docs: `quay.io/okd/scos-release`,
/// earlier `quay.io/openshift/okd`).
const OKD_REPOS: &[&str] = &["quay.io/okd/scos-release", "quay.io/openshift/okd"];

impl Vendor {
    /// The vendor whose repository `name` (`host/repo`) is.
    pub fn of(name: &str) -> Option<Vendor> {
        if sigstore::builtin_openshift_scopes()
            .iter()
            .any(|s| name == s.as_str())
        {
            Some(Vendor::RedHat)
        } else if OKD_REPOS.contains(&name) {
            Some(Vendor::Okd)
        } else {
            None
        }
    }

    fn gpg_builtin(self) -> &'static str {
        match self {
            Vendor::RedHat => "redhat",
            Vendor::Okd => "okd",
        }
    }
}

/// The vendor of the release as the user named it: its repository, or the
/// source repository of the IDMS rule it is a mirror of.
pub fn official(release: &ImageRef, mirrors: Option<&Mirrors>) -> Option<(Vendor, String)> {
    let ImageRef::Docker(d) = release else {
        return None;
    };
    let mut names = vec![d.name()];
    if let Some(m) = mirrors {
        names.extend(m.sources_of(d));
    }
    names
        .into_iter()
        .find_map(|n| Vendor::of(&n).map(|v| (v, n)))
}

/// The record's file beside meta.json.
pub const RECORD_FILE: &str = "release-verification.json";

/// One mechanism's success: which key, from where.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct By {
    /// `gpg` (atomic container signature) or `sigstore` (cosign).
    pub mechanism: &'static str,
    /// The digest the signature is over.
    pub digest: String,
    /// GPG fingerprint or cosign key id.
    pub key: String,
    /// The keyring (ConfigMap key) or key file it belongs to.
    pub keyring: String,
    /// Where the signature was found (store URL, file, tag).
    pub origin: String,
    /// The identity the signature names.
    pub signed_reference: String,
}

/// What was checked and what it gave.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Record {
    pub release: String,
    /// The digest the user's pull spec resolves to (the manifest list's,
    /// for a multi-arch payload) and the per-arch manifest's.
    pub digest: String,
    pub arch_digest: String,
    pub official: Option<Vendor>,
    /// Why verification was (or was not) required.
    pub policy: String,
    pub verified: bool,
    pub by: Vec<By>,
    /// Signatures found and refused, each with why.
    pub refused: Vec<String>,
    /// Stores that could not be read, and other notes.
    pub warnings: Vec<String>,
    /// The OS image's own sigstore signature, when it has one.
    pub os: Option<String>,
}

impl Record {
    /// One line for the console and meta.json's `release-payload.comment`.
    pub fn summary(&self) -> String {
        if !self.verified {
            return format!("signature not verified ({})", self.policy);
        }
        let by: Vec<String> = self
            .by
            .iter()
            .map(|b| {
                format!(
                    "{} key {} ({}) over {}",
                    b.mechanism,
                    b.key,
                    b.keyring,
                    crate::plan::input::short(&b.digest)
                )
            })
            .collect();
        format!("signature verified: {}", by.join("; "))
    }
}

impl Record {
    /// [`Record::summary`] with where each signature was found and the
    /// warnings: what the run says on the console.
    pub fn console(&self) -> String {
        let mut s = self.summary();
        let from: Vec<&str> = self.by.iter().map(|b| b.origin.as_str()).collect();
        if !from.is_empty() {
            s.push_str(&format!(", from {}", from.join(" and ")));
        }
        if let Some(os) = &self.os {
            s.push_str(&format!("; OS image: {os}"));
        }
        s
    }
}

/// What the checks need of the resolved release.
pub struct Subject<'a> {
    pub release: &'a ImageRef,
    pub mirrors: Option<&'a Mirrors>,
    pub fetch: &'a FetchOptions,
    /// The digest of what the pull spec names (a list's, for a list).
    pub digest: &'a str,
    /// The per-arch manifest's digest.
    pub arch_digest: &'a str,
    /// Where the OS image was read from, and its digest.
    pub os_source: &'a str,
    pub os_digest: &'a str,
}

/// Check the release; `Err` (one line) when verification is required and
/// nothing verified it.
pub fn check(o: &Options, s: &Subject) -> Result<Record> {
    let vendor = official(s.release, s.mirrors);
    let mut rec = Record {
        release: s.release.to_string(),
        digest: s.digest.to_string(),
        arch_digest: s.arch_digest.to_string(),
        official: vendor.as_ref().map(|v| v.0),
        policy: String::new(),
        verified: false,
        by: Vec::new(),
        refused: Vec::new(),
        warnings: Vec::new(),
        os: None,
    };
    let required = if o.skip {
        rec.policy = "--no-verify-signature".into();
        return Ok(rec);
    } else if let Some((_, name)) = &vendor {
        rec.policy = format!("required: an official release ({name})");
        true
    } else if o.require {
        rec.policy = "required: --require-signature".into();
        true
    } else if o.has_keys() {
        rec.policy = "required: keys were given".into();
        true
    } else {
        rec.policy = "not required: not an official release and no keys given".into();
        false
    };
    let digests: Vec<&str> = if s.digest == s.arch_digest {
        vec![s.digest]
    } else {
        vec![s.digest, s.arch_digest]
    };
    let mut tried = Vec::new();

    // GPG atomic signatures.
    let mut configs = Vec::new();
    for f in &o.verification_configs {
        let raw = std::fs::read(f)
            .with_context(|| format!("--verification-config {}: cannot read it", f.display()))?;
        configs.push(atomic::parse_verification_config(
            &raw,
            &f.display().to_string(),
        )?);
    }
    if configs.is_empty() {
        if let Some((v, _)) = &vendor {
            configs.extend(atomic::builtin(v.gpg_builtin()));
        }
    }
    if !o.signatures.is_empty() && configs.is_empty() {
        bail!("--signatures needs the keys to check them with: give the release-verification ConfigMap with --verification-config FILE");
    }
    if !configs.is_empty() {
        gpg(o, s, &configs, &digests, &mut rec, &mut tried)?;
    }

    // cosign signatures of the per-arch manifest.
    let mut keys = Vec::new();
    for f in &o.sigstore_keys {
        let raw = std::fs::read(f)
            .with_context(|| format!("--sigstore-key {}: cannot read it", f.display()))?;
        keys.push(sigstore::PublicKey::from_pem(
            &raw,
            &f.display().to_string(),
        )?);
    }
    if keys.is_empty() && vendor.as_ref().is_some_and(|v| v.0 == Vendor::RedHat) {
        keys.push(sigstore::builtin_openshift_key());
    }
    if !keys.is_empty() {
        cosign(s, &keys, &mut rec, &mut tried)?;
    }

    rec.verified = !rec.by.is_empty();
    // A store tried for each digest warns once.
    let mut seen = std::collections::BTreeSet::new();
    rec.warnings.retain(|w| seen.insert(w.clone()));
    if required && !rec.verified {
        let refused = if rec.refused.is_empty() {
            String::new()
        } else {
            format!("; refused: {}", rec.refused.join("; "))
        };
        let unreachable = if rec.warnings.is_empty() {
            String::new()
        } else {
            format!("; {}", rec.warnings.join("; "))
        };
        bail!(
            "release {} ({}): its signature is not verified ({}): tried {}{refused}{unreachable}; give its signatures with --signatures FILE|DIR (what `oc adm release mirror --release-image-signature-to-dir` or oc-mirror's signature-configmap wrote), the keys with --verification-config or --sigstore-key, or build it unverified with --no-verify-signature",
            rec.release,
            crate::plan::input::short(s.digest),
            rec.policy,
            if tried.is_empty() { "nothing".to_string() } else { tried.join(", ") }
        );
    }
    Ok(rec)
}

fn gpg(
    o: &Options,
    s: &Subject,
    configs: &[atomic::VerificationConfig],
    digests: &[&str],
    rec: &mut Record,
    tried: &mut Vec<String>,
) -> Result<()> {
    let agent = crate::util::http::agent_following(
        match &s.fetch.cert_dir {
            Some(d) => crate::util::http::Trust::SystemAndDir(d, "--cert-dir"),
            None => crate::util::http::Trust::System,
        },
        false,
        std::time::Duration::from_secs(30),
        10,
    )?;
    for cfg in configs {
        for &digest in digests {
            let mut sigs = atomic::signatures_from_files(&o.signatures, digest)?;
            if !o.signatures.is_empty() {
                tried.push(format!(
                    "GPG signatures of {} in --signatures ({} found)",
                    crate::plan::input::short(digest),
                    sigs.len()
                ));
            }
            for (name, url) in &cfg.stores {
                match atomic::signatures_from_store(url, digest, &agent) {
                    Ok(found) => {
                        tried.push(format!("store {name} ({url}: {} found)", found.len()));
                        sigs.extend(found);
                    }
                    Err(e) => {
                        let w = format!("store {name} ({url}) could not be read: {e:#}");
                        crate::util::ui::status(format!("warning: {w}"));
                        rec.warnings.push(w);
                    }
                }
            }
            if sigs.is_empty() {
                continue;
            }
            match atomic::verify(&cfg.keyrings, &sigs, digest) {
                Ok(v) => {
                    rec.refused
                        .extend(v.refused.iter().map(|(o, why)| format!("{o}: {why}")));
                    rec.by.extend(v.verified.into_iter().map(|x| By {
                        mechanism: "gpg",
                        digest: digest.to_string(),
                        key: x.fingerprint,
                        keyring: x.keyring,
                        origin: x.origin,
                        signed_reference: x.docker_reference,
                    }));
                    break;
                }
                Err(e) => rec.refused.push(format!("{e:#}")),
            }
        }
    }
    Ok(())
}

fn cosign(
    s: &Subject,
    keys: &[sigstore::PublicKey],
    rec: &mut Record,
    tried: &mut Vec<String>,
) -> Result<()> {
    let ImageRef::Docker(d) = s.release else {
        rec.warnings.push(format!(
            "{}: cosign signatures live in a registry; a local image carries none",
            s.release
        ));
        return Ok(());
    };
    let client = match connect(d, s.fetch) {
        Ok(c) => c,
        Err(e) => {
            let w = format!("cosign signatures of {}: {e:#}", d.name());
            crate::util::ui::status(format!("warning: {w}"));
            rec.warnings.push(w);
            return Ok(());
        }
    };
    // Red Hat signs the per-arch manifests; a user's key may sign the list.
    let mut digests = vec![s.arch_digest];
    if s.digest != s.arch_digest {
        digests.push(s.digest);
    }
    for digest in digests {
        tried.push(format!(
            "cosign signatures of {} in {}",
            crate::plan::input::short(digest),
            d.name()
        ));
        match sigstore::verify_image(&client, digest, keys) {
            Ok(Some(v)) => {
                rec.by.push(By {
                    mechanism: "sigstore",
                    digest: digest.to_string(),
                    key: v.key_id.clone(),
                    keyring: v.key_origin.clone(),
                    origin: v.found.clone(),
                    signed_reference: v.docker_reference.clone().unwrap_or_default(),
                });
                break;
            }
            Ok(None) => {}
            Err(e) => rec.refused.push(format!("{e:#}")),
        }
    }
    // The OS image: covered by the verified release's digest pin; checked
    // itself when it carries a cosign signature.
    if let Ok(ImageRef::Docker(os)) = ImageRef::parse(s.os_source) {
        if let Ok(c) = connect(&os, s.fetch) {
            match sigstore::verify_image(&c, s.os_digest, keys) {
                Ok(Some(v)) => {
                    rec.os = Some(format!(
                        "cosign signature by key {} ({})",
                        v.key_id, v.found
                    ))
                }
                Ok(None) => {
                    rec.os =
                        Some("no signature of its own: covered by the release's digest pin".into())
                }
                // Its own signatures are by other keys (a release the
                // user signed again over Red Hat's OS image): the pin by
                // the verified release still covers it; said, not fatal.
                Err(e) => {
                    let w = format!(
                        "OS image {} ({}): its cosign signatures do not verify with these keys ({e:#}); it is covered by the release's digest pin",
                        os.name(),
                        crate::plan::input::short(s.os_digest)
                    );
                    crate::util::ui::status(format!("warning: {w}"));
                    rec.os = Some(
                        "its own signatures are by other keys: covered by the release's digest pin"
                            .into(),
                    );
                    rec.warnings.push(w);
                }
            }
        }
    }
    Ok(())
}

fn connect(d: &DockerRef, f: &FetchOptions) -> Result<Client> {
    Client::connect(
        d,
        &RegistryOptions {
            authfile: f.authfile.clone(),
            insecure: f.insecure,
            ca_file: None,
            ca_dir: f.cert_dir.clone(),
            chunk: 0,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> ImageRef {
        ImageRef::parse(s).unwrap()
    }

    #[test]
    fn official_is_the_pull_spec_or_its_idms_source() {
        assert_eq!(
            official(
                &r("quay.io/openshift-release-dev/ocp-release:4.18.1-x86_64"),
                None
            )
            .map(|v| v.0),
            Some(Vendor::RedHat)
        );
        assert_eq!(
            official(&r("quay.io/okd/scos-release:4.18.0-okd-scos.1"), None).map(|v| v.0),
            Some(Vendor::Okd)
        );
        // A look-alike repository is not official.
        assert_eq!(
            official(
                &r("quay.io/openshift-release-dev/ocp-release-nightly:4.18"),
                None
            ),
            None
        );
        assert_eq!(
            official(&r("mirror.local:5000/ocp/release:4.18"), None),
            None
        );
        let m = Mirrors::parse(
            "apiVersion: config.openshift.io/v1\nkind: ImageDigestMirrorSet\nspec:\n  imageDigestMirrors:\n  - source: quay.io/openshift-release-dev/ocp-release\n    mirrors:\n    - mirror.local:5000/ocp/release\n",
        )
        .unwrap();
        assert_eq!(
            official(&r("mirror.local:5000/ocp/release:4.18"), Some(&m)).map(|v| v.0),
            Some(Vendor::RedHat)
        );
        assert_eq!(
            official(&r("mirror.local:5000/ocp/other:4.18"), Some(&m)),
            None
        );
        assert_eq!(official(&r("oci:/tmp/x:release"), Some(&m)), None);
    }
}
