//! One artifact manifest pushed for a file already in the registry: its
//! config and manifest, and the index entry naming it. Shared by `push`
//! (each published file) and the fan-in (each merged meta.json and
//! stream.json), so neither imports the other for it.
use super::client::{Client, MANIFEST_OCI};
use super::layout::*;
use anyhow::Result;
use serde_json::{json, Map, Value};

/// The artifact manifest of a file already pushed as the blob `digest`
/// (`size` bytes; its name in `ann`'s file annotation): its config and
/// the manifest pushed; its index entry.
pub(super) fn artifact(
    c: &Client,
    digest: &str,
    size: u64,
    atype: &str,
    oarch: &str,
    ann: Map<String, Value>,
) -> Result<Value> {
    let name = ann
        .get(A_FILE)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let cfg = config(oarch, &name, digest);
    let (cdigest, _) = c.push_bytes(&cfg)?;
    let mut layer = descriptor(atype, digest, size);
    layer["annotations"] = json!({ TITLE: name });
    let mbytes = manifest(
        atype,
        &descriptor(CONFIG_OCI, &cdigest, cfg.len() as u64),
        &layer,
        &ann,
    );
    let mdigest = c.put_manifest(
        &format!(
            "sha256:{}",
            hex::encode(crate::util::sha256::Sha256::digest(&mbytes))
        ),
        MANIFEST_OCI,
        &mbytes,
    )?;
    let mut e = descriptor(MANIFEST_OCI, &mdigest, mbytes.len() as u64);
    e["artifactType"] = atype.into();
    e["platform"] = json!({"architecture": oarch, "os": "linux"});
    e["annotations"] = Value::Object(ann);
    Ok(e)
}
