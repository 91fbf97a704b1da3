//! The trust configuration: a release-verification ConfigMap read as
//! library-go's `newFromConfigMapData` reads it (`pkg/verify/configmap.go`):
//! `data` keys `verifier-public-key-*` are keyrings (armored or binary, one
//! key may hold several public keys), `store-*` are signature store URLs
//! (http, https or file), any other key is ignored. Also the built-in
//! configurations, cluster-update-keys' manifests stored verbatim.
//! In: YAML or JSON bytes and where they came from. Out: [`VerificationConfig`].
use super::{armor, objects, Keyring, VerificationConfig};
use anyhow::{bail, Result};

/// `data` key prefixes (library-go `pkg/verify/configmap.go`).
const KEYRING_PREFIX: &str = "verifier-public-key-";
const STORE_PREFIX: &str = "store-";

/// OCP's: cluster-update-keys `manifests.rhel/0000_90_cluster-update-keys_configmap.yaml`.
const REDHAT: &[u8] = include_bytes!("redhat-release-verification.yaml");
/// OKD's (the OpenShift CI keys): cluster-update-keys `manifests/0000_90_cluster-update-keys_configmap.yaml`.
const OKD: &[u8] = include_bytes!("okd-release-verification.yaml");

/// The names [`builtin`] knows.
pub const BUILTIN_NAMES: &[&str] = &["redhat", "okd"];

/// A built-in configuration by name: "redhat" (OCP) or "okd".
pub fn builtin(name: &str) -> Option<VerificationConfig> {
    let (bytes, origin) = match name {
        "redhat" => (REDHAT, "built-in redhat"),
        "okd" => (OKD, "built-in okd"),
        _ => return None,
    };
    // Tested (tests::builtin_keyrings_are_the_published_keys): cannot fail.
    parse_verification_config(bytes, origin).ok()
}

/// Parse a release-verification ConfigMap; `origin` names it in errors.
pub fn parse_verification_config(bytes: &[u8], origin: &str) -> Result<VerificationConfig> {
    let objs = match objects::parse(bytes) {
        Ok(o) => o,
        Err(e) => bail!("trust configuration {origin} is {e}: give a ConfigMap like cluster-update-keys' release-verification"),
    };
    let [obj] = objs.as_slice() else {
        bail!(
            "trust configuration {origin} holds {} objects, not one ConfigMap: give the release-verification ConfigMap alone",
            objs.len()
        );
    };
    if obj.kind() != "ConfigMap" {
        bail!(
            "trust configuration {origin} is a {:?}, not a ConfigMap: give a ConfigMap like cluster-update-keys' release-verification",
            obj.kind()
        );
    }
    let mut cfg = VerificationConfig {
        keyrings: Vec::new(),
        stores: Vec::new(),
    };
    for (k, v) in obj.data.iter().flatten() {
        let is_keyring = k.starts_with(KEYRING_PREFIX);
        if !is_keyring && !k.starts_with(STORE_PREFIX) {
            tracing::debug!(
                "{origin}: ignoring data key {k} (not verifier-public-key-* or store-*)"
            );
            continue;
        }
        let Some(v) = v.as_str() else {
            bail!("trust configuration {origin}: data key {k} is not a string: quote it");
        };
        if is_keyring {
            armor::binary_keyring(v.as_bytes(), &format!("{k} of {origin}"))?;
            cfg.keyrings.push(Keyring {
                name: k.clone(),
                armored: v.as_bytes().to_vec(),
            });
        } else {
            let url = v.trim();
            let scheme_ok = ["http://", "https://", "file://"].iter().any(|s| {
                url.len() > s.len()
                    && url
                        .get(..s.len())
                        .is_some_and(|p| p.eq_ignore_ascii_case(s))
            });
            if !scheme_ok {
                bail!("trust configuration {origin}: store {k} = {url:?} is not a URL with scheme file://, http:// or https://: fix the URL");
            }
            cfg.stores.push((k.clone(), url.to_string()));
        }
    }
    if cfg.keyrings.is_empty() {
        bail!("trust configuration {origin} has no data key verifier-public-key-*: add the armored public keys that must sign the release");
    }
    Ok(cfg)
}
