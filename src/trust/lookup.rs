//! Where a release's signatures are found and how each mechanism checks
//! them: the stores of the ConfigMaps (read once per digest), the
//! signature files, the GPG keyrings, the cosign signatures in the
//! release's (and the OS image's) repository. In: the keys that decide and
//! the digests; out: what verified and what was refused, into the
//! `Record`.
use super::record::{short, By, Record};
use super::subject::{Options, Subject, Vendor};
use super::{atomic, sigstore};
use crate::image::fetch::FetchOptions;
use crate::image::imageref::{DockerRef, ImageRef};
use crate::publish::registry::client::{Client, Options as RegistryOptions};
use anyhow::Result;

/// Every store of every configuration read once per digest: (store URL,
/// digest) → its signatures. A store out of reach is a warning.
pub(super) type StoreSigs = Vec<(String, String, Vec<atomic::Signature>)>;

pub(super) fn stores(
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
pub(super) fn gpg(
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
pub(super) fn cosign(
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

/// A URL (or a text holding one) without the password of its userinfo.
pub(super) fn redact(s: &str) -> String {
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
