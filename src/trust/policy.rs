//! Whether the release may be built from: which keys apply (the user's, or
//! the built-in ones of an official release), where its signatures are
//! looked for, what verified it, and the one-line refusal when nothing did.
//! In: the pull spec as given, its IDMS sources, the resolved digests and
//! the user's trust options; out: a `Record` that the run prints, `inspect`
//! shows, meta.json summarises and `release-verification.json` holds whole.
pub use super::lookup::check_os;
use super::lookup::{cosign, gpg, stores};
pub use super::record::{short, By, Record, RECORD_FILE};
pub use super::subject::{official, Options, Subject, Vendor};
use super::{atomic, sigstore};
use anyhow::{bail, Context, Result};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::idms::Mirrors;
    use crate::image::imageref::ImageRef;

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
            crate::trust::lookup::redact(
                "store https://user:tok@mirror.example/sigs (x) could not be read"
            ),
            "store https://***@mirror.example/sigs (x) could not be read"
        );
        assert_eq!(
            crate::trust::lookup::redact("file:///srv/sigs"),
            "file:///srv/sigs"
        );
        assert_eq!(
            crate::trust::lookup::redact("http://h:80/a@b"),
            "http://h:80/a@b"
        );
    }
}
