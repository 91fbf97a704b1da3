//! The meta.json schema as types: cosa's top-level keys (`Meta`,
//! `CosaInfo`), its `definitions` (`Git`, `ContainerImage`, the artifact
//! `ImageEntry`), the AMIs, the file names and `images` keys this tool
//! writes, the `live-rootfs` details, and the error of an output directory
//! holding another build. Plain data: serde in and out, no I/O.
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::util::arch::Arch;
use serde::{Deserialize, Serialize};

/// File name of the build metadata (cosa `builds/<id>/<arch>/meta.json`).
pub const META_JSON: &str = "meta.json";
/// File name of the checksum list, in `sha256sum -c` format.
pub const SHA256SUMS: &str = "SHA256SUMS";

/// `images` key of the OS container as an oci-archive. cosa's schema makes
/// it the one *required* key of `images` (cosa `src/v1.json`,
/// `properties.images.required`); cosa import names the file
/// `<name>-<version>-ostree.<arch>.ociarchive` (cosa `src/cmd-import`).
pub const IMAGE_KEY_OSTREE: &str = "ostree";
/// `images` key of the OS image's raw manifest JSON (cosa `src/cmd-import`:
/// `<name>-<version>-ostree.<arch>-manifest.json`).
pub const IMAGE_KEY_OCI_MANIFEST: &str = "oci-manifest";

/// Key, in each disk image's `images` entry, of how the OS was deployed:
/// an object with `tool` (`os`: the OS image's own ostree, from a buildroot
/// of its tree; `host`: this machine's), `ostree-version`, and `reason`
/// when the host's was used.
pub const DETAILS_KEY_DEPLOY: &str = "ostree-deploy";

/// `images` keys of the live artifacts (docs/contract.md §5, §6.1).
pub const IMAGE_KEY_LIVE_ISO: &str = "live-iso";
pub const IMAGE_KEY_LIVE_KERNEL: &str = "live-kernel";
pub const IMAGE_KEY_LIVE_INITRAMFS: &str = "live-initramfs";
pub const IMAGE_KEY_LIVE_ROOTFS: &str = "live-rootfs";

// The `images` keys this tool writes (docs/contract.md §6.1, all defined by cosa's
// schema) come from the platform table: [`crate::platforms::meta_keys`].

/// Build metadata, serialised exactly as cosa's `meta.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Build id; cosa uses the OS version (e.g. `418.94.202501221327-0`).
    pub buildid: String,
    /// OS name: `rhcos` or `fedora-coreos`.
    pub name: String,
    /// ostree commit checksum (64 hex characters).
    #[serde(rename = "ostree-commit")]
    pub ostree_commit: String,
    /// Commit timestamp, RFC 3339 in UTC as cosa writes it
    /// (`%Y-%m-%dT%H:%M:%SZ`, see [`rfc3339_utc`](crate::util::rfc3339_utc)).
    #[serde(rename = "ostree-timestamp")]
    pub ostree_timestamp: String,
    /// The commit's `version` metadata (equal to `buildid` in cosa builds).
    #[serde(rename = "ostree-version")]
    pub ostree_version: String,
    /// ostree content checksum (64 hex), when known.
    #[serde(
        rename = "ostree-content-checksum",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ostree_content_checksum: Option<String>,
    /// The `coreos-assembler.*` keys (flattened into the top level).
    #[serde(flatten)]
    pub coreos_assembler: CosaInfo,
    /// The OS container image the build came from (cosa: the pushed
    /// `images.ostree` container, `{image, digest, tags}`).
    #[serde(
        rename = "base-oscontainer",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub base_oscontainer: Option<ContainerImage>,
    /// The OpenShift release image the OS image was resolved from.
    #[serde(
        rename = "release-payload",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub release_payload: Option<ContainerImage>,
    /// One-line description (cosa import: the image's
    /// `org.opencontainers.image.description` label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Artifacts by cosa image key (`metal`, `qemu`, `live-iso`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub images: BTreeMap<String, ImageEntry>,
    /// AMIs registered from the `aws` image, one per region.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<Ami>,
    /// Keys we do not model, kept as they were read so a merge never drops
    /// them.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// More keys of an `images.<key>` entry beyond cosa's artifact fields
    /// (its schema allows them there, not at the top level), e.g. how
    /// `live-rootfs` was made: `live-rootfs-fstype`, the options the OS asked
    /// for and those used (see [`live_rootfs_details`]). Written into the
    /// entries by [`write_meta`](super::write_meta), read back by
    /// [`read_meta`](super::read_meta).
    #[serde(skip)]
    pub image_details: BTreeMap<String, serde_json::Map<String, serde_json::Value>>,
}

/// `images.live-rootfs` details of an EROFS rootfs: the fstype, the options
/// the OS's image.json asked for, those mkfs.erofs ran with, and each one
/// replaced or left out because of the host's mkfs.erofs, with the reason.
pub fn live_rootfs_details(
    fstype: &str,
    requested: &str,
    mkfs: &str,
    used: &str,
    replaced: &[(String, String, String)],
) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert("live-rootfs-fstype".into(), fstype.into());
    m.insert("live-rootfs-fsoptions".into(), requested.into());
    m.insert("mkfs".into(), mkfs.into());
    m.insert("mkfs-options".into(), used.into());
    m.insert(
        "mkfs-options-replaced".into(),
        replaced
            .iter()
            .map(|(r, u, why)| serde_json::json!({"requested": r, "used": u, "reason": why}))
            .collect::<Vec<_>>()
            .into(),
    );
    m
}

/// The `coreos-assembler.*` top-level keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CosaInfo {
    /// Architecture (`x86_64`, `aarch64`, `s390x`, `ppc64le`).
    #[serde(rename = "coreos-assembler.basearch")]
    pub basearch: Arch,
    /// When the images were built, RFC 3339 UTC.
    #[serde(
        rename = "coreos-assembler.build-timestamp",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub build_timestamp: Option<String>,
    /// True when the build was imported from an OCI image (cosa import).
    #[serde(
        rename = "coreos-assembler.oci-imported",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub oci_imported: Option<bool>,
    /// The tool that built the images; cosa records its own git here.
    #[serde(
        rename = "coreos-assembler.container-image-git",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub container_image_git: Option<Git>,
    /// Where the OS image was built from (cosa import: the image's
    /// `org.opencontainers.image.source` / `.revision` labels).
    #[serde(
        rename = "coreos-assembler.container-config-git",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub container_config_git: Option<Git>,
}

/// cosa schema `definitions.git`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Git {
    /// Commit or revision (schema: at least 5 characters).
    pub commit: String,
    /// Repository (schema: at least 1 character).
    pub origin: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dirty: Option<String>,
}

impl Git {
    /// This tool, as recorded in `coreos-assembler.container-image-git`:
    /// origin = package name (or repository URL when Cargo.toml names one),
    /// commit = `v<crate version>`.
    pub fn this_tool() -> Self {
        let repo = env!("CARGO_PKG_REPOSITORY");
        Git {
            commit: format!("v{}", env!("CARGO_PKG_VERSION")),
            origin: if repo.is_empty() {
                env!("CARGO_PKG_NAME").to_string()
            } else {
                repo.to_string()
            },
            branch: None,
            dirty: None,
        }
    }
}

/// cosa schema `definitions.image` / `definitions.primary-image`: a
/// container image by repository and digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerImage {
    /// Repository or full pull spec.
    pub image: String,
    /// `sha256:<hex>` manifest digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// The fields of cosa's `definitions.artifact`.
pub(super) const ARTIFACT_FIELDS: &[&str] = &[
    "path",
    "sha256",
    "size",
    "uncompressed-sha256",
    "uncompressed-size",
    "skip-compression",
];

/// cosa schema `definitions.artifact`: one file of the build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageEntry {
    /// File name, relative to the directory holding meta.json.
    pub path: String,
    /// Lower-case hex SHA-256 of the file as published.
    pub sha256: String,
    /// Size in bytes of the file as published.
    pub size: u64,
    /// SHA-256 of the uncompressed file, for compressed artifacts.
    #[serde(
        rename = "uncompressed-sha256",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub uncompressed_sha256: Option<String>,
    /// Size of the uncompressed file, for compressed artifacts.
    #[serde(
        rename = "uncompressed-size",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub uncompressed_size: Option<u64>,
    /// True when the artifact must not be (de)compressed before use (OVA,
    /// GCP tarball, live artifacts).
    #[serde(
        rename = "skip-compression",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub skip_compression: Option<bool>,
}

/// One AMI (cosa schema `properties.amis.items`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ami {
    /// AWS region, e.g. `us-east-1`.
    pub name: String,
    /// AMI id, e.g. `ami-0123456789abcdef0`.
    pub hvm: String,
    /// EBS snapshot id, e.g. `snap-0123456789abcdef0`.
    pub snapshot: String,
}

/// Returned (inside the anyhow chain) when the output directory already
/// holds meta.json of another build.
#[derive(Debug, thiserror::Error)]
#[error(
    "{dir} already holds {META_JSON} for {existing} but this build is {new}: \
     use an empty output directory"
)]
pub struct OutputDirConflict {
    pub dir: PathBuf,
    pub existing: String,
    pub new: String,
}
