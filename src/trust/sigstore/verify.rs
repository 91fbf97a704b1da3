//! Whether an image is signed by one of our keys, looked for where cosign
//! 2 and 3 put signatures: the `sha256-<hex>.sig` tag's simple-signing
//! layers, and the sigstore bundles that refer to the image (the referrers
//! API, else the `sha256-<hex>` tag schema). In: a registry client, the
//! image's digest and the keys; out: what verified it (`Verified`), none
//! there (`None`), or an error saying why each signature was refused.
use super::dsse::{self, key_list};
use super::keys::PublicKey;
use super::{
    digest_tag, BUNDLE_MEDIA_TYPE_PREFIX, COSIGN_SIGNATURE_TYPE, COSIGN_SIGN_PREDICATE_TYPE,
    INTOTO_PAYLOAD_TYPE, SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE,
};
use crate::publish::registry::client::Client;
use anyhow::{anyhow, bail, Result};
use base64::Engine;
use serde_json::Value;

/// The largest payload, envelope or bundle read (cosign's are a few KiB).
const DOC_LIMIT: u64 = 1 << 20;
/// The most referrers looked at for one image.
const MAX_REFERRERS: usize = 100;

/// What verified an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The key's id (`PublicKey::id`) and origin.
    pub key_id: String,
    pub key_origin: String,
    /// Where the signature was: ".sig tag sha256-<hex>.sig layer N",
    /// "bundle referrer sha256:<hex>" or "bundle tag sha256-<hex> → sha256:<hex>".
    pub found: String,
    /// The signed `critical.identity.docker-reference` (simple signing
    /// only; cosign 3's statements carry none).
    pub docker_reference: Option<String>,
}

fn as_json(bytes: &[u8], what: &str) -> Result<Value> {
    serde_json::from_slice(bytes).map_err(|e| anyhow!("{what} is not JSON: {e}"))
}

fn layers(manifest: &Value) -> &[Value] {
    manifest["layers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Every cosign signature of `digest` in `client`'s repository; `Ok(None)`
/// when there is none; `Ok(Some)` when one verifies with one of `keys`
/// and signs this digest as a cosign image signature; an error naming why
/// each was refused otherwise.
pub fn verify_image(client: &Client, digest: &str, keys: &[PublicKey]) -> Result<Option<Verified>> {
    let image = format!("{}/{}@{digest}", client.host, client.repo);
    let mut refused: Vec<String> = Vec::new();

    let tag = digest_tag(digest, ".sig");
    if let Some(m) = client.get_manifest(&tag)? {
        let m = as_json(&m.bytes, &format!("{image}: the manifest {tag}"))?;
        for (i, layer) in layers(&m).iter().enumerate() {
            if layer["mediaType"] != SIMPLE_SIGNING_MEDIA_TYPE {
                continue;
            }
            let found = format!(".sig tag {tag} layer {i}");
            match simple_signing(client, layer, digest, keys) {
                Ok((k, docker_reference)) => return Ok(Some(verified(k, found, docker_reference))),
                Err(e) => refused.push(format!("{found}: {e:#}")),
            }
        }
    }

    let (index, via) = match client.referrers(digest)? {
        Some(ix) => (Some(ix), None),
        None => {
            let t = digest_tag(digest, "");
            let ix = client.get_manifest(&t)?;
            (
                ix.map(|m| as_json(&m.bytes, &format!("{image}: the referrers tag {t}")))
                    .transpose()?,
                Some(t),
            )
        }
    };
    let entries = index
        .as_ref()
        .and_then(|ix| ix["manifests"].as_array())
        .map(Vec::as_slice)
        .unwrap_or_default();
    for e in entries.iter().take(MAX_REFERRERS) {
        let Some(d) = e["digest"].as_str() else {
            continue;
        };
        let found = match &via {
            None => format!("bundle referrer {d}"),
            Some(t) => format!("bundle tag {t} → {d}"),
        };
        match bundle_of(client, d, digest) {
            Ok(None) => {}
            Ok(Some(b)) => match bundle(&b, digest, keys) {
                Ok(k) => return Ok(Some(verified(k, found, None))),
                Err(e) => refused.push(format!("{found}: {e:#}")),
            },
            Err(e) => refused.push(format!("{found}: {e:#}")),
        }
    }

    if refused.is_empty() {
        return Ok(None);
    }
    bail!(
        "image {image}: {} cosign signature(s), none verifies with {}: {}",
        refused.len(),
        key_list(keys),
        refused.join("; ")
    )
}

fn verified(k: &PublicKey, found: String, docker_reference: Option<String>) -> Verified {
    Verified {
        key_id: k.id(),
        key_origin: k.origin().to_string(),
        found,
        docker_reference,
    }
}

/// A `.sig` layer: its payload verified with one of `keys`, then read as
/// a cosign simple-signing payload of `digest` (the key names as
/// containers/image reads them: exact, lower case).
fn simple_signing<'k>(
    client: &Client,
    layer: &Value,
    digest: &str,
    keys: &'k [PublicKey],
) -> Result<(&'k PublicKey, Option<String>)> {
    let Some(b64) = layer["annotations"][SIGNATURE_ANNOTATION].as_str() else {
        bail!("no {SIGNATURE_ANNOTATION} annotation");
    };
    let sig = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| anyhow!("its signature annotation is not base64 ({e})"))?;
    let Some(pd) = layer["digest"].as_str() else {
        bail!("a layer without a digest");
    };
    let payload = client.blob_bytes(pd, DOC_LIMIT)?;
    let Some(key) = keys.iter().find(|k| k.verify(&payload, &sig)) else {
        bail!("its signature does not verify with {}", key_list(keys));
    };
    let p = as_json(&payload, "the signed payload")?;
    let c = &p["critical"];
    if c["type"] != COSIGN_SIGNATURE_TYPE {
        bail!(
            "signed by {} but its critical.type is {}, not {COSIGN_SIGNATURE_TYPE:?}",
            key.describe(),
            c["type"]
        );
    }
    match c["image"]["docker-manifest-digest"].as_str() {
        Some(d) if d == digest => {}
        other => bail!(
            "signed by {} but it signs the image {}, not {digest} (a signature copied from another image)",
            key.describe(),
            other.unwrap_or("(none)")
        ),
    }
    let r = c["identity"]["docker-reference"].as_str().map(String::from);
    Ok((key, r))
}

/// The sigstore bundle a referrer manifest holds when it is an image
/// signature (cosign 3: one layer `application/vnd.dev.sigstore.bundle…`);
/// `None` for other referrers (attestations, SBOMs, anything else).
fn bundle_of(client: &Client, manifest_digest: &str, digest: &str) -> Result<Option<Value>> {
    let Some(m) = client.get_manifest(manifest_digest)? else {
        bail!("the referrers list names it but the registry has no such manifest");
    };
    let m = as_json(&m.bytes, "the referrer manifest")?;
    let [layer] = layers(&m) else { return Ok(None) };
    if !layer["mediaType"]
        .as_str()
        .unwrap_or("")
        .starts_with(BUNDLE_MEDIA_TYPE_PREFIX)
    {
        return Ok(None);
    }
    let Some(ld) = layer["digest"].as_str() else {
        bail!("a bundle layer without a digest");
    };
    let b = as_json(&client.blob_bytes(ld, DOC_LIMIT)?, "the bundle")?;
    // A bundle of another predicate (cosign 3 attestations) is no signature.
    let statement = b["dsseEnvelope"]["payload"]
        .as_str()
        .and_then(dsse::b64_any)
        .and_then(|p| serde_json::from_slice::<Value>(&p).ok());
    if let Some(s) = statement {
        if s["predicateType"] != COSIGN_SIGN_PREDICATE_TYPE {
            return Ok(None);
        }
    }
    if m["subject"]["digest"].as_str().is_some_and(|s| s != digest) {
        bail!("its subject is {}, not {digest}", m["subject"]["digest"]);
    }
    Ok(Some(b))
}

/// A cosign 3 signature bundle: its DSSE envelope verified with one of
/// `keys`, then read as an in-toto statement of predicate type
/// `COSIGN_SIGN_PREDICATE_TYPE` whose subject is `digest`.
fn bundle<'k>(b: &Value, digest: &str, keys: &'k [PublicKey]) -> Result<&'k PublicKey> {
    if b["dsseEnvelope"].is_null() {
        if !b["messageSignature"].is_null() {
            bail!("a message-signature bundle (cosign sign-blob), not an image signature");
        }
        bail!("a bundle with neither dsseEnvelope nor messageSignature");
    }
    let (payload, payload_type, key) = dsse::open(&b["dsseEnvelope"], keys)?;
    if payload_type != INTOTO_PAYLOAD_TYPE {
        bail!(
            "signed by {} but its payload type is {payload_type:?}, not {INTOTO_PAYLOAD_TYPE:?}",
            key.describe()
        );
    }
    let s = as_json(&payload, "the signed statement")?;
    if s["predicateType"] != COSIGN_SIGN_PREDICATE_TYPE {
        bail!(
            "signed by {} but its predicate type is {}, not {COSIGN_SIGN_PREDICATE_TYPE:?}",
            key.describe(),
            s["predicateType"]
        );
    }
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    let subjects = s["subject"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if !subjects.iter().any(|x| x["digest"]["sha256"] == hex) {
        bail!(
            "signed by {} but its subject is {}, not {digest} (a signature copied from another image)",
            key.describe(),
            s["subject"]
        );
    }
    Ok(key)
}
