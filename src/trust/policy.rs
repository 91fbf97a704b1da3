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
        // Host names compare without case, and :443 is the default port.
        let name = name.to_lowercase();
        let name = match name.split_once('/') {
            Some((host, repo)) => format!("{}/{repo}", host.trim_end_matches(":443")),
            None => name,
        };
        let name = name.as_str();
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
                    short(&b.digest)
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

/// What the check needs of the release: as named, and its digests.
pub struct Subject<'a> {
    pub release: &'a ImageRef,
    pub mirrors: Option<&'a Mirrors>,
    pub fetch: &'a FetchOptions,
    /// The digest of what the pull spec names (a list's, for a list).
    pub digest: &'a str,
    /// The per-arch manifest's digest.
    pub arch_digest: &'a str,
}

/// The keys that decide, and whether every one of them must verify.
struct Keys {
    /// Each configuration's keyrings (all of a configuration's keyrings
    /// must be satisfied, as pkg/verify requires).
    gpg: Vec<atomic::VerificationConfig>,
    sigstore: Vec<sigstore::PublicKey>,
    /// The user's keys: every configuration given, and the sigstore keys
    /// when given, must verify. The built-in ones of an official release:
    /// either mechanism suffices (the CVO checks GPG, nodes sigstore).
    all: bool,
}

fn keys(o: &Options, vendor: Option<Vendor>) -> Result<Keys> {
    let mut gpg = Vec::new();
    for f in &o.verification_configs {
        let raw = std::fs::read(f)
            .with_context(|| format!("--verification-config {}: cannot read it", f.display()))?;
        gpg.push(atomic::parse_verification_config(
            &raw,
            &f.display().to_string(),
        )?);
    }
    let mut sig = Vec::new();
    for f in &o.sigstore_keys {
        let raw = std::fs::read(f)
            .with_context(|| format!("--sigstore-key {}: cannot read it", f.display()))?;
        sig.push(sigstore::PublicKey::from_pem(
            &raw,
            &f.display().to_string(),
        )?);
    }
    if o.has_keys() {
        // The user's keys replace every built-in one.
        return Ok(Keys {
            gpg,
            sigstore: sig,
            all: true,
        });
    }
    if !o.signatures.is_empty() && vendor.is_none() {
        bail!("--signatures needs the keys to check them with: give the release-verification ConfigMap with --verification-config FILE");
    }
    match vendor {
        Some(v) => Ok(Keys {
            gpg: atomic::builtin(v.gpg_builtin()).into_iter().collect(),
            sigstore: match v {
                Vendor::RedHat => vec![sigstore::builtin_openshift_key()],
                Vendor::Okd => Vec::new(),
            },
            all: false,
        }),
        None => Ok(Keys {
            gpg: Vec::new(),
            sigstore: Vec::new(),
            all: false,
        }),
    }
}

/// Check the release's signature, before anything its payload names is
/// read; `Err` (one line) when verification is required and the keys that
/// decide are not satisfied.
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
    let k = keys(o, vendor.as_ref().map(|v| v.0))?;
    let digests: Vec<&str> = if s.digest == s.arch_digest {
        vec![s.digest]
    } else {
        vec![s.digest, s.arch_digest]
    };
    let mut tried = Vec::new();
    let mut missing = Vec::new();
    let stores = stores(s, &k.gpg, &digests, &mut rec)?;
    for (i, cfg) in k.gpg.iter().enumerate() {
        if !gpg(o, cfg, &stores, &digests, &mut rec, &mut tried)? {
            missing.push(format!(
                "the keyrings of {}",
                o.verification_configs
                    .get(i)
                    .map_or("the built-in configuration".to_string(), |f| f
                        .display()
                        .to_string())
            ));
        }
    }
    if !k.sigstore.is_empty() && !cosign(s, &k.sigstore, &mut rec, &mut tried)? {
        missing.push("a cosign signature by a --sigstore-key".to_string());
    }
    let mut seen = std::collections::BTreeSet::new();
    rec.warnings.retain(|w| seen.insert(w.clone()));
    for w in &rec.warnings {
        crate::util::ui::status(format!("warning: {w}"));
    }
    rec.verified = if k.all {
        !rec.by.is_empty() && missing.is_empty()
    } else {
        !rec.by.is_empty()
    };
    if required && !rec.verified {
        let unmet = if k.all && !rec.by.is_empty() {
            format!("; not satisfied: {}", missing.join(", "))
        } else {
            String::new()
        };
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
            "release {} ({}): its signature is not verified ({}): {}{unmet}{refused}{unreachable}; give its signatures with --signatures FILE|DIR (what `oc adm release mirror --release-image-signature-to-dir` or oc-mirror's signature-configmap wrote), the keys with --verification-config or --sigstore-key, or build it unverified with --no-verify-signature",
            rec.release,
            short(s.digest),
            rec.policy,
            if tried.is_empty() {
                "there were no keys to check it with".to_string()
            } else {
                format!("tried {}", tried.join(", "))
            }
        );
    }
    if !rec.verified {
        rec.by.clear();
    }
    Ok(rec)
}

/// Every store of every configuration read once per digest: (store URL,
/// digest) → its signatures. A store out of reach is a warning.
type StoreSigs = Vec<(String, String, Vec<atomic::Signature>)>;

fn stores(
    s: &Subject,
    configs: &[atomic::VerificationConfig],
    digests: &[&str],
    rec: &mut Record,
) -> Result<StoreSigs> {
    let mut out: StoreSigs = Vec::new();
    if configs.iter().all(|c| c.stores.is_empty()) {
        return Ok(out);
    }
    let agent = crate::util::http::agent_following(
        match &s.fetch.cert_dir {
            Some(d) => crate::util::http::Trust::SystemAndDir(d, "--cert-dir"),
            None => crate::util::http::Trust::System,
        },
        false,
        std::time::Duration::from_secs(30),
        10,
    )?;
    let mut dead = Vec::new();
    for cfg in configs {
        for (name, url) in &cfg.stores {
            for &digest in digests {
                if dead.contains(url) || out.iter().any(|(u, d, _)| u == url && d == digest) {
                    continue;
                }
                match atomic::signatures_from_store(url, digest, &agent) {
                    Ok(found) => out.push((url.clone(), digest.to_string(), found)),
                    Err(e) => {
                        dead.push(url.clone());
                        rec.warnings.push(format!(
                            "store {name} ({}) could not be read: {}",
                            redact(url),
                            redact(&format!("{e:#}"))
                        ));
                    }
                }
            }
        }
    }
    Ok(out)
}

/// `cfg`'s keyrings checked against the signatures of each digest in turn
/// (files, then its stores); whether they were all satisfied.
fn gpg(
    o: &Options,
    cfg: &atomic::VerificationConfig,
    stores: &StoreSigs,
    digests: &[&str],
    rec: &mut Record,
    tried: &mut Vec<String>,
) -> Result<bool> {
    for &digest in digests {
        let mut sigs = atomic::signatures_from_files(&o.signatures, digest)?;
        if !o.signatures.is_empty() {
            tried.push(format!(
                "GPG signatures of {} in --signatures ({} found)",
                short(digest),
                sigs.len()
            ));
        }
        for (_, url) in &cfg.stores {
            if let Some((_, _, found)) = stores.iter().find(|(u, d, _)| u == url && d == digest) {
                tried.push(format!(
                    "store {} for {} ({} found)",
                    redact(url),
                    short(digest),
                    found.len()
                ));
                sigs.extend(found.iter().map(|x| atomic::Signature {
                    origin: redact(&x.origin),
                    bytes: x.bytes.clone(),
                }));
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
                return Ok(true);
            }
            Err(e) => rec.refused.push(format!("{e:#}")),
        }
    }
    Ok(false)
}

/// A cosign signature of the per-arch manifest (Red Hat signs those), or
/// of the list, by one of `keys`; whether one verified.
fn cosign(
    s: &Subject,
    keys: &[sigstore::PublicKey],
    rec: &mut Record,
    tried: &mut Vec<String>,
) -> Result<bool> {
    let ImageRef::Docker(d) = s.release else {
        rec.warnings.push(format!(
            "{}: cosign signatures live in a registry; a local image carries none",
            s.release
        ));
        return Ok(false);
    };
    let client = match connect(d, s.fetch) {
        Ok(c) => c,
        Err(e) => {
            rec.warnings
                .push(format!("cosign signatures of {}: {e:#}", d.name()));
            return Ok(false);
        }
    };
    let mut digests = vec![s.arch_digest];
    if s.digest != s.arch_digest {
        digests.push(s.digest);
    }
    for digest in digests {
        tried.push(format!(
            "cosign signatures of {} in {}",
            short(digest),
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
                return Ok(true);
            }
            Ok(None) => {}
            Err(e) => rec.refused.push(format!("{e:#}")),
        }
    }
    Ok(false)
}

/// The OS image's own cosign signature, when sigstore keys apply: the
/// verified release pins it by digest, which covers it; its own signature
/// is checked where it has one, and said.
pub fn check_os(o: &Options, rec: &mut Record, f: &FetchOptions, os_source: &str, os_digest: &str) {
    if o.skip || !rec.verified {
        return;
    }
    let keys: Vec<sigstore::PublicKey> = if o.has_keys() {
        o.sigstore_keys
            .iter()
            .filter_map(|p| {
                let raw = std::fs::read(p).ok()?;
                sigstore::PublicKey::from_pem(&raw, &p.display().to_string()).ok()
            })
            .collect()
    } else if rec.official == Some(Vendor::RedHat) {
        vec![sigstore::builtin_openshift_key()]
    } else {
        Vec::new()
    };
    let Ok(ImageRef::Docker(os)) = ImageRef::parse(os_source) else {
        return;
    };
    if keys.is_empty() {
        return;
    }
    let c = match connect(&os, f) {
        Ok(c) => c,
        Err(e) => {
            rec.os = Some(format!(
                "its own signature could not be looked up ({e:#}); covered by the release's digest pin"
            ));
            return;
        }
    };
    rec.os = Some(match sigstore::verify_image(&c, os_digest, &keys) {
        Ok(Some(v)) => format!("cosign signature by key {} ({})", v.key_id, v.found),
        Ok(None) => "no signature of its own: covered by the release's digest pin".into(),
        Err(e) => {
            let w = format!(
                "OS image {} ({}): its own cosign signatures do not verify ({e:#}); it is covered by the release's digest pin",
                os.name(),
                short(os_digest)
            );
            crate::util::ui::status(format!("warning: {w}"));
            rec.warnings.push(w);
            "its own cosign signatures do not verify with these keys (see the warnings): covered by the release's digest pin".into()
        }
    });
}

/// First 12 hex digits of a digest.
fn short(d: &str) -> String {
    d.trim_start_matches("sha256:").chars().take(12).collect()
}

/// A URL (or a text holding one) without the password of its userinfo.
fn redact(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("://") {
        out.push_str(&rest[..i + 3]);
        rest = &rest[i + 3..];
        let end = rest.find(['/', ' ', ')']).unwrap_or(rest.len());
        if let Some(at) = rest[..end].rfind('@') {
            out.push_str("***@");
            rest = &rest[at + 1..];
        }
    }
    out.push_str(rest);
    out
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
        // Another spelling of the same host is the same repository.
        assert_eq!(
            Vendor::of("QUAY.IO:443/openshift-release-dev/ocp-release"),
            Some(Vendor::RedHat)
        );
    }

    #[test]
    fn store_urls_are_said_without_their_password() {
        assert_eq!(
            redact("store https://user:tok@mirror.example/sigs (x) could not be read"),
            "store https://***@mirror.example/sigs (x) could not be read"
        );
        assert_eq!(redact("file:///srv/sigs"), "file:///srv/sigs");
        assert_eq!(redact("http://h:80/a@b"), "http://h:80/a@b");
    }
}
