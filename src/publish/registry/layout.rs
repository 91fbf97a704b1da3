//! What `push` writes and `pull` reads (README "Registry"; UPSTREAM.md
//! sections 23 and 28): one OCI artifact manifest per published file, an
//! index per run (its part), and the index at the user's tag that is the
//! union of every run's.
//!
//! - Artifact type: Konflux's `application/vnd.diskimage.<format>[.<compression>]`
//!   (build-definitions `task/build-vm-image/0.3`: `raw.gzip`, `qcow2`,
//!   `vmdk.gzip`, `vhd.gzip`, `ova`, `iso`, `gce.tgz`), the compression
//!   spelled out (`gzip`, `xz`, `zstd`). Files Konflux has no type for get
//!   one in the same scheme (`vhdx`, `pxe.kernel`, `pxe.initramfs`,
//!   `pxe.rootfs`); meta.json and stream.json get ours.
//! - Config: an image config with `architecture` and `os` (consumers that
//!   read `platform` from the config found `{}` empty: konflux-ci
//!   build-definitions PR #3835), made unique per artifact by a label
//!   naming it, so two artifacts never share an image ID (the collision
//!   that made Konflux drop the idea, PR #3830).
//! - One layer, the file as published, titled with its file name
//!   (`org.opencontainers.image.title`: what `oras pull` names the file).
//! - Annotations `io.bootimage-gen.*`: platform, version, stream, release,
//!   and the uncompressed sha256 and size where meta.json has them.
//! - Every index entry carries `platform` (`architecture`, `os`).
//! - Each run also tags its own index, its part (fanin.rs): one per
//!   (arch, stream, platform group); the index at the user's tag holds
//!   every part's artifacts once, and one meta.json and one stream.json
//!   per (arch, stream) merged from all its parts.
use anyhow::{bail, Result};
use serde_json::{json, Value};

pub const CONFIG_OCI: &str = "application/vnd.oci.image.config.v1+json";
pub const META_TYPE: &str = "application/vnd.bootimage-gen.meta.v1+json";
pub const STREAM_TYPE: &str = "application/vnd.coreos.stream.v1+json";
/// The annotation marking an index as this tool's (and its layout version).
pub const INDEX_MARK: &str = "io.bootimage-gen.index";
pub const INDEX_VERSION: &str = "1";
pub const A_PLATFORM: &str = "io.bootimage-gen.platform";
pub const A_ARCH: &str = "io.bootimage-gen.arch";
pub const A_STREAM: &str = "io.bootimage-gen.stream";
pub const A_VERSION: &str = "io.bootimage-gen.version";
pub const A_RELEASE: &str = "io.bootimage-gen.release";
pub const A_FILE: &str = "io.bootimage-gen.file";
pub const A_UNCOMPRESSED_SHA256: &str = "io.bootimage-gen.uncompressed-sha256";
pub const A_UNCOMPRESSED_SIZE: &str = "io.bootimage-gen.uncompressed-size";
pub const TITLE: &str = "org.opencontainers.image.title";
/// On a run's part index (fan-in, fanin.rs): the platform keys it holds
/// (comma-separated), the OS commit of its build, the build in words, and
/// why it was withdrawn (a part that lost a conflict holds no entries).
pub const A_PART_PLATFORMS: &str = "io.bootimage-gen.part-platforms";
pub const A_COMMIT: &str = "io.bootimage-gen.ostree-commit";
pub const A_BUILD: &str = "io.bootimage-gen.build";
pub const A_WITHDRAWN: &str = "io.bootimage-gen.withdrawn";
/// On a meta.json or stream.json merged from several parts: the parts it
/// was merged from (their tags less `<tag>.part.`, comma-separated).
pub const A_MERGED_FROM: &str = "io.bootimage-gen.merged-from";

/// The artifact type of a published file, by its name: `(format,
/// compression)` as Konflux spells them.
pub fn artifact_type(key: &str, file: &str) -> String {
    let (stem, comp) = if let Some(s) = file.strip_suffix(".gz") {
        (s, Some("gzip"))
    } else if let Some(s) = file.strip_suffix(".xz") {
        (s, Some("xz"))
    } else if let Some(s) = file.strip_suffix(".zst") {
        (s, Some("zstd"))
    } else {
        (file, None)
    };
    let format = match key {
        "live-kernel" => "pxe.kernel".to_string(),
        "live-initramfs" => "pxe.initramfs".to_string(),
        "live-rootfs" => "pxe.rootfs".to_string(),
        "meta" => return META_TYPE.to_string(),
        "stream" => return STREAM_TYPE.to_string(),
        _ if stem.ends_with(".tar") && comp == Some("gzip") => {
            // GCP's tar.gz: Konflux's `gce.tgz`.
            return "application/vnd.diskimage.gce.tgz".to_string();
        }
        _ => stem.rsplit('.').next().unwrap_or(stem).to_string(),
    };
    match comp {
        Some(c) => format!("application/vnd.diskimage.{format}.{c}"),
        None => format!("application/vnd.diskimage.{format}"),
    }
}

/// A descriptor.
pub fn descriptor(media_type: &str, digest: &str, size: u64) -> Value {
    json!({"mediaType": media_type, "digest": digest, "size": size})
}

/// The config of one artifact: an image config (architecture, os, the
/// layer as its rootfs) whose label names the artifact.
pub fn config(oci_arch: &str, file: &str, layer_digest: &str) -> Vec<u8> {
    let v = json!({
        "architecture": oci_arch,
        "os": "linux",
        "config": {"Labels": {A_FILE: file}},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    });
    serde_json::to_vec(&v).expect("JSON")
}

/// An artifact manifest: its config and one layer, the file.
pub fn manifest(
    artifact_type: &str,
    config: &Value,
    layer: &Value,
    annotations: &serde_json::Map<String, Value>,
) -> Vec<u8> {
    let v = json!({
        "schemaVersion": 2,
        "mediaType": super::client::MANIFEST_OCI,
        "artifactType": artifact_type,
        "config": config,
        "layers": [layer],
        "annotations": annotations,
    });
    serde_json::to_vec_pretty(&v).expect("JSON")
}

/// An index of `entries` (descriptors with `platform` and annotations).
pub fn index(entries: &[Value], annotations: &serde_json::Map<String, Value>) -> Vec<u8> {
    let v = json!({
        "schemaVersion": 2,
        "mediaType": super::client::INDEX_OCI,
        "manifests": entries,
        "annotations": annotations,
    });
    serde_json::to_vec_pretty(&v).expect("JSON")
}

/// The identity of an index entry: one per (arch, stream, meta key) in
/// the index at the user's tag (fanin.rs).
pub fn entry_key(e: &Value) -> (String, String, String) {
    let a = &e["annotations"];
    let s = |k: &str| a[k].as_str().unwrap_or("").to_string();
    (s(A_ARCH), s(A_STREAM), s(A_PLATFORM))
}

/// The entries of an index this tool made; an error naming `what` for
/// anything else.
pub fn our_entries(raw: &[u8], what: &str) -> Result<Vec<Value>> {
    let v: Value =
        serde_json::from_slice(raw).map_err(|e| anyhow::anyhow!("{what} is not JSON ({e})"))?;
    if v["mediaType"] != super::client::INDEX_OCI || v["annotations"][INDEX_MARK].as_str().is_none()
    {
        bail!(
            "{what} is not an index made by bootimage-gen (no {INDEX_MARK} annotation): choose another tag, or delete it first"
        );
    }
    Ok(v["manifests"].as_array().cloned().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_types_follow_konflux() {
        for (key, file, want) in [
            (
                "metal",
                "x-metal.x86_64.raw.gz",
                "application/vnd.diskimage.raw.gzip",
            ),
            (
                "qemu",
                "x-qemu.x86_64.qcow2.gz",
                "application/vnd.diskimage.qcow2.gzip",
            ),
            (
                "nutanix",
                "x-nutanix.x86_64.qcow2",
                "application/vnd.diskimage.qcow2",
            ),
            (
                "aws",
                "x-aws.x86_64.vmdk.gz",
                "application/vnd.diskimage.vmdk.gzip",
            ),
            (
                "azure",
                "x-azure.x86_64.vhd.xz",
                "application/vnd.diskimage.vhd.xz",
            ),
            (
                "hyperv",
                "x-hyperv.x86_64.vhdx.zst",
                "application/vnd.diskimage.vhdx.zstd",
            ),
            (
                "vmware",
                "x-vmware.x86_64.ova",
                "application/vnd.diskimage.ova",
            ),
            (
                "gcp",
                "x-gcp.x86_64.tar.gz",
                "application/vnd.diskimage.gce.tgz",
            ),
            (
                "live-iso",
                "x-live-iso.x86_64.iso",
                "application/vnd.diskimage.iso",
            ),
            (
                "live-kernel",
                "x-live-kernel.x86_64",
                "application/vnd.diskimage.pxe.kernel",
            ),
            (
                "live-rootfs",
                "x-live-rootfs.x86_64.img",
                "application/vnd.diskimage.pxe.rootfs",
            ),
            ("meta", "meta.json", META_TYPE),
        ] {
            assert_eq!(artifact_type(key, file), want, "{key}");
        }
    }

    #[test]
    fn only_our_indexes_are_read() {
        let other = serde_json::to_vec(
            &json!({"mediaType": super::super::client::INDEX_OCI, "manifests": []}),
        )
        .unwrap();
        let err = our_entries(&other, "x:y").unwrap_err().to_string();
        assert!(err.contains("not an index made by bootimage-gen"), "{err}");
        let ours = index(
            &[json!({"digest": "a"})],
            &serde_json::Map::from_iter([(INDEX_MARK.to_string(), json!(INDEX_VERSION))]),
        );
        assert_eq!(our_entries(&ours, "x:y").unwrap().len(), 1);
    }

    #[test]
    fn configs_differ_per_artifact() {
        let a = config("amd64", "a.raw.gz", "sha256:1");
        let b = config("amd64", "b.raw.gz", "sha256:2");
        assert_ne!(a, b);
        let v: Value = serde_json::from_slice(&a).unwrap();
        assert_eq!(
            (v["architecture"].as_str(), v["os"].as_str()),
            (Some("amd64"), Some("linux"))
        );
    }
}
