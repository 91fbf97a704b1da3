//! Signatures and attestations pushed as cosign 2 pushes them (cosign
//! `pkg/oci/static`, `pkg/oci/mutate`, `cmd/cosign/cli/attest`): one
//! layer more in the manifest under `sha256-<hex>.sig` (a simple-signing
//! payload, its signature in the layer annotation) or `sha256-<hex>.att`
//! (a DSSE envelope of an in-toto statement, with the `predicateType`
//! annotation), the layers others put there kept, the config an empty
//! image's with one diff_id and history entry per layer (as
//! go-containerregistry's `mutate.AppendLayers` writes it). In: a registry
//! client, the image digest, a key; out: the tag's manifest updated.
use super::dsse::dsse_sign;
use super::keys::SigningKey;
use super::{
    digest_tag, COSIGN_SIGNATURE_TYPE, DSSE_MEDIA_TYPE, INTOTO_PAYLOAD_TYPE,
    PREDICATE_TYPE_ANNOTATION, SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE,
};
use crate::image::imageref::is_sha256_digest;
use crate::publish::registry::client::{Client, MANIFEST_OCI};
use anyhow::{bail, Context, Result};
use base64::Engine;
use serde_json::{json, Value};

const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// go-containerregistry's zero time, which `empty.Image` configs carry.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// The payload cosign signs: simple signing with `critical.type` "cosign
/// container image signature" and `optional` null, keys in cosign's order.
pub fn simple_signing_payload(docker_reference: &str, digest: &str) -> Vec<u8> {
    let v = json!({
        "critical": {
            "identity": {"docker-reference": docker_reference},
            "image": {"docker-manifest-digest": digest},
            "type": COSIGN_SIGNATURE_TYPE,
        },
        "optional": null,
    });
    serde_json::to_vec(&v).expect("JSON")
}

/// Sign `digest` as `cosign sign --key` (cosign 2 layout) does: a layer
/// added to `sha256-<hex>.sig`, unless a signature there already verifies
/// with this key over the same payload.
pub fn sign_image(
    client: &Client,
    docker_reference: &str,
    digest: &str,
    key: &SigningKey,
) -> Result<()> {
    check_digest(digest)?;
    let payload = simple_signing_payload(docker_reference, digest);
    let tag = digest_tag(digest, ".sig");
    let existing = existing_layers(client, &tag)?;
    let payload_digest = format!(
        "sha256:{}",
        hex::encode(crate::util::sha256::Sha256::digest(&payload))
    );
    let b64 = base64::engine::general_purpose::STANDARD;
    let public = key.public();
    let already = existing.iter().any(|l| {
        l["digest"] == payload_digest.as_str()
            && l["annotations"][SIGNATURE_ANNOTATION]
                .as_str()
                .and_then(|s| b64.decode(s).ok())
                .is_some_and(|s| public.verify(&payload, &s))
    });
    if already {
        tracing::info!("{tag}: already signed by {}", public.describe());
        return Ok(());
    }
    let sig = b64.encode(key.sign(&payload));
    let mut annotations = serde_json::Map::new();
    annotations.insert(SIGNATURE_ANNOTATION.into(), sig.into());
    append_layer(
        client,
        &tag,
        existing,
        &payload,
        SIMPLE_SIGNING_MEDIA_TYPE,
        annotations,
    )
    .with_context(|| format!("signing {}/{}@{digest}", client.host, client.repo))
}

/// Attach `statement` (an in-toto statement whose subject is `digest`) as
/// `cosign attest --key` (cosign 2 layout) does: a DSSE envelope layer
/// added to `sha256-<hex>.att`, annotated with its predicate type.
pub fn attest_image(
    client: &Client,
    digest: &str,
    statement: &Value,
    key: &SigningKey,
) -> Result<()> {
    check_digest(digest)?;
    let what = format!("attesting {}/{}@{digest}", client.host, client.repo);
    let hex = &digest["sha256:".len()..];
    let subjects = statement["subject"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if !subjects.iter().any(|s| s["digest"]["sha256"] == hex) {
        bail!("{what}: the statement's subject {} does not name this digest: build it with the image's digest as a subject", statement["subject"]);
    }
    let Some(predicate_type) = statement["predicateType"].as_str() else {
        bail!("{what}: the statement has no predicateType");
    };
    let envelope = dsse_sign(INTOTO_PAYLOAD_TYPE, &serde_json::to_vec(statement)?, key);
    let tag = digest_tag(digest, ".att");
    let existing = existing_layers(client, &tag)?;
    let mut annotations = serde_json::Map::new();
    annotations.insert(SIGNATURE_ANNOTATION.into(), "".into());
    annotations.insert(PREDICATE_TYPE_ANNOTATION.into(), predicate_type.into());
    append_layer(
        client,
        &tag,
        existing,
        &serde_json::to_vec(&envelope)?,
        DSSE_MEDIA_TYPE,
        annotations,
    )
    .with_context(|| what)
}

fn check_digest(digest: &str) -> Result<()> {
    if !is_sha256_digest(digest) {
        bail!(
            "'{digest}' is not an image digest (sha256:<64 hex digits>): sign the image by digest"
        );
    }
    Ok(())
}

/// The layers of the manifest under `tag`, none when there is no such tag.
fn existing_layers(client: &Client, tag: &str) -> Result<Vec<Value>> {
    let Some(m) = client.get_manifest(tag)? else {
        return Ok(Vec::new());
    };
    let v: Value = serde_json::from_slice(&m.bytes)
        .with_context(|| format!("registry {}: the manifest {tag} is not JSON", client.host))?;
    if v["mediaType"] != MANIFEST_OCI && !m.media_type.starts_with(MANIFEST_OCI) {
        bail!(
            "registry {}: {tag} is a {} not an OCI image manifest: not a cosign signature tag; delete it or sign elsewhere",
            client.host,
            m.media_type
        );
    }
    Ok(v["layers"].as_array().cloned().unwrap_or_default())
}

/// Push `blob`, then the manifest under `tag`: `existing` and one layer of
/// `blob`, with a config over all of them.
fn append_layer(
    client: &Client,
    tag: &str,
    mut layers: Vec<Value>,
    blob: &[u8],
    media_type: &str,
    annotations: serde_json::Map<String, Value>,
) -> Result<()> {
    let (digest, _) = client.push_bytes(blob)?;
    layers.push(json!({
        "mediaType": media_type,
        "size": blob.len(),
        "digest": digest,
        "annotations": annotations,
    }));
    let diff_ids: Vec<&Value> = layers.iter().map(|l| &l["digest"]).collect();
    let history: Vec<Value> = layers
        .iter()
        .map(|_| json!({"created": ZERO_TIME}))
        .collect();
    let config = serde_json::to_vec(&json!({
        "architecture": "",
        "created": ZERO_TIME,
        "history": history,
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "config": {},
    }))?;
    let (config_digest, _) = client.push_bytes(&config)?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_OCI,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "size": config.len(), "digest": config_digest},
        "layers": layers,
    }))?;
    client.put_manifest(tag, MANIFEST_OCI, &manifest)?;
    Ok(())
}
