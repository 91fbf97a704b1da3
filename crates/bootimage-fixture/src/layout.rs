//! The OCI image layout on disk (image-spec image-layout.md): media types,
//! blobs by digest, `index.json` tags, and an image's manifest and config
//! stored or loaded as JSON. Paths and JSON values in, digests and
//! descriptors out; every subcommand writes through here.
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::Path;

pub(crate) const MT_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const MT_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub(crate) const MT_LAYER_GZ: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub(crate) const MT_LAYER_ZST: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
pub(crate) const MT_INDEX: &str = "application/vnd.oci.image.index.v1+json";
// Docker image manifest v2 schema 2 (distribution/distribution
// docs/spec/manifest-v2-2.md) and the Docker image config.
pub(crate) const MT_D_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub(crate) const MT_D_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub(crate) const MT_D_LAYER: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";
pub(crate) const CREATED: &str = "2026-11-21T00:00:00Z";
pub(crate) const REF_NAME: &str = "org.opencontainers.image.ref.name";

pub(crate) fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

pub(crate) fn init_layout(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir.join("blobs/sha256"))?;
    if !dir.join("oci-layout").exists() {
        std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)?;
    }
    if !dir.join("index.json").exists() {
        std::fs::write(
            dir.join("index.json"),
            r#"{"schemaVersion":2,"manifests":[]}"#,
        )?;
    }
    Ok(())
}

pub(crate) fn write_blob(dir: &Path, data: &[u8]) -> Result<(String, u64)> {
    let d = sha256(data);
    let p = dir
        .join("blobs/sha256")
        .join(d.trim_start_matches("sha256:"));
    if !p.exists() {
        std::fs::write(&p, data)?;
    }
    Ok((d, data.len() as u64))
}

pub(crate) fn set_tag(dir: &Path, tag: &str, desc: Value) -> Result<()> {
    let mut index: Value = serde_json::from_slice(&std::fs::read(dir.join("index.json"))?)?;
    let m = index["manifests"]
        .as_array_mut()
        .context("bad index.json")?;
    m.retain(|d| d["annotations"][REF_NAME].as_str() != Some(tag));
    let mut desc = desc;
    desc["annotations"] = json!({ REF_NAME: tag });
    m.push(desc);
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index)?)?;
    Ok(())
}

pub(crate) fn read_blob(layout: &Path, digest: &str) -> Result<Vec<u8>> {
    let p = layout
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"));
    std::fs::read(&p).with_context(|| format!("{}", p.display()))
}

pub(crate) fn find_tag(layout: &Path, tag: &str) -> Result<Value> {
    let index: Value = serde_json::from_slice(
        &std::fs::read(layout.join("index.json"))
            .with_context(|| format!("{}", layout.display()))?,
    )?;
    let found = index["manifests"].as_array().and_then(|m| {
        m.iter()
            .find(|d| d["annotations"][REF_NAME].as_str() == Some(tag))
            .cloned()
    });
    match found {
        Some(d) => Ok(d),
        None => {
            // A single untagged manifest is taken as the one.
            let m = index["manifests"].as_array().cloned().unwrap_or_default();
            if m.len() == 1 {
                return Ok(m[0].clone());
            }
            bail!("tag {tag} not in {}", layout.display())
        }
    }
}

/// Store a config and its manifest, tag it, print and return its digest.
pub(crate) fn put_image(
    layout: &Path,
    tag: &str,
    config: &Value,
    layers: Vec<Value>,
    docker: bool,
) -> Result<String> {
    let (mt, ct) = if docker {
        (MT_D_MANIFEST, MT_D_CONFIG)
    } else {
        (MT_MANIFEST, MT_CONFIG)
    };
    let (cd, cn) = write_blob(layout, &serde_json::to_vec(config)?)?;
    let manifest = json!({"schemaVersion": 2, "mediaType": mt, "config": {"mediaType": ct, "digest": cd, "size": cn}, "layers": layers});
    let (md, mn) = write_blob(layout, &serde_json::to_vec(&manifest)?)?;
    set_tag(
        layout,
        tag,
        json!({"mediaType": mt, "digest": md, "size": mn}),
    )?;
    println!("{md}");
    Ok(md)
}

/// The OCI manifest and config that TAG names.
pub(crate) fn load_image(layout: &Path, tag: &str) -> Result<(Value, Value)> {
    let desc = find_tag(layout, tag)?;
    let manifest: Value = serde_json::from_slice(&read_blob(
        layout,
        desc["digest"].as_str().context("digest")?,
    )?)?;
    if manifest["mediaType"].as_str() != Some(MT_MANIFEST)
        && desc["mediaType"].as_str() != Some(MT_MANIFEST)
    {
        bail!("{tag} is not an OCI image manifest");
    }
    let config: Value = serde_json::from_slice(&read_blob(
        layout,
        manifest["config"]["digest"].as_str().context("config")?,
    )?)?;
    Ok((manifest, config))
}

/// Write `config`, point `manifest` at it, write that and tag it TAG;
/// prints the manifest digest.
pub(crate) fn store_image(
    layout: &Path,
    tag: &str,
    mut manifest: Value,
    config: &Value,
) -> Result<()> {
    let (cd, cn) = write_blob(layout, &serde_json::to_vec(config)?)?;
    manifest["config"] = json!({"mediaType": MT_CONFIG, "digest": cd, "size": cn});
    let (md, mn) = write_blob(layout, &serde_json::to_vec(&manifest)?)?;
    set_tag(
        layout,
        tag,
        json!({"mediaType": MT_MANIFEST, "digest": md, "size": mn}),
    )?;
    println!("{md}");
    Ok(())
}
