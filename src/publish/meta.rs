//! meta.json and SHA256SUMS: the files that describe a build's artifacts, in
//! the shape coreos-assembler (cosa) publishes them.
//!
//! The meta.json layout follows cosa's JSON schema (`src/v1.json` in
//! coreos/coreos-assembler; a verbatim copy is kept as test data in
//! `tests/data/cosa-meta-v1.schema.json` and `tests/meta_schema.rs` validates
//! our output against it). That schema sets `additionalProperties: false` at
//! the top level, so we cannot add an object of our own: every fact we record
//! goes into a key cosa defines:
//!
//! | our fact                         | meta.json key                            |
//! |----------------------------------|------------------------------------------|
//! | OS version (= build id)          | `buildid`, `ostree-version`              |
//! | OS name (`rhcos`, `fedora-coreos`)| `name`                                  |
//! | ostree commit and its timestamp  | `ostree-commit`, `ostree-timestamp`      |
//! | architecture                     | `coreos-assembler.basearch`              |
//! | when we built the images         | `coreos-assembler.build-timestamp`       |
//! | "built from an OCI image"        | `coreos-assembler.oci-imported`          |
//! | this tool's name and version     | `coreos-assembler.container-image-git`   |
//! | OS image source repo/revision    | `coreos-assembler.container-config-git`  |
//! | OS container image + digest      | `base-oscontainer`                       |
//! | OpenShift release + digest       | `release-payload` (tags: release version)|
//!
//! Files are written atomically: a temporary file in the same directory,
//! fsync, rename, fsync of the directory.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
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

/// `images` keys of the live artifacts (SPEC 5, 6.1).
pub const IMAGE_KEY_LIVE_ISO: &str = "live-iso";
pub const IMAGE_KEY_LIVE_KERNEL: &str = "live-kernel";
pub const IMAGE_KEY_LIVE_INITRAMFS: &str = "live-initramfs";
pub const IMAGE_KEY_LIVE_ROOTFS: &str = "live-rootfs";

// The `images` keys this tool writes (SPEC 6.1, all defined by cosa's
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
    /// (`%Y-%m-%dT%H:%M:%SZ`, see [`rfc3339_utc`]).
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
    /// entries by [`write_meta`], read back by [`read_meta`].
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CosaInfo {
    /// Architecture (`x86_64`, `aarch64`, `s390x`, `ppc64le`).
    #[serde(rename = "coreos-assembler.basearch")]
    pub basearch: String,
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
const ARTIFACT_FIELDS: &[&str] = &[
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

impl ImageEntry {
    /// An entry for an existing file: its name, SHA-256 and size.
    pub fn for_file(path: &Path) -> Result<Self> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .with_context(|| format!("artifact path {} has no UTF-8 file name", path.display()))?
            .to_string();
        let (sha256, size) = sha256_file(path)?;
        Ok(ImageEntry {
            path: name,
            sha256,
            size,
            uncompressed_sha256: None,
            uncompressed_size: None,
            skip_compression: None,
        })
    }
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

impl Meta {
    /// A new build record as cosa import would start it: `buildid` and
    /// `ostree-version` are the OS version, `coreos-assembler.oci-imported`
    /// is true, the build timestamp is now and this tool is recorded in
    /// `coreos-assembler.container-image-git`.
    pub fn new(
        name: &str,
        version: &str,
        ostree_commit: &str,
        ostree_timestamp: &str,
        basearch: &str,
    ) -> Self {
        Meta {
            buildid: version.to_string(),
            name: name.to_string(),
            ostree_commit: ostree_commit.to_string(),
            ostree_timestamp: ostree_timestamp.to_string(),
            ostree_version: version.to_string(),
            ostree_content_checksum: None,
            coreos_assembler: CosaInfo {
                basearch: basearch.to_string(),
                build_timestamp: Some(rfc3339_utc(chrono::Utc::now().timestamp())),
                oci_imported: Some(true),
                container_image_git: Some(Git::this_tool()),
                container_config_git: None,
            },
            base_oscontainer: None,
            release_payload: None,
            summary: None,
            images: BTreeMap::new(),
            amis: Vec::new(),
            extra: serde_json::Map::new(),
            image_details: BTreeMap::new(),
        }
    }

    /// Checks the constraints of cosa's schema that the types do not
    /// express (non-empty ids, 64-hex commit, timestamp form, file names).
    /// A missing `images.ostree` is not an error here: see
    /// [`Meta::lacks_ostree_image`].
    pub fn check(&self) -> Result<()> {
        let nonempty = [
            ("buildid", &self.buildid),
            ("name", &self.name),
            ("ostree-version", &self.ostree_version),
            ("coreos-assembler.basearch", &self.coreos_assembler.basearch),
        ];
        for (key, v) in nonempty {
            if v.is_empty() {
                bail!("meta.json: {key} is empty");
            }
        }
        if !is_sha256_hex(&self.ostree_commit) {
            bail!(
                "meta.json: ostree-commit {:?} is not 64 hex characters",
                self.ostree_commit
            );
        }
        if let Some(c) = &self.ostree_content_checksum {
            if !is_sha256_hex(c) {
                bail!("meta.json: ostree-content-checksum {c:?} is not 64 hex characters");
            }
        }
        if !is_cosa_timestamp(&self.ostree_timestamp) {
            bail!(
                "meta.json: ostree-timestamp {:?} is not of the form YYYY-MM-DDT...Z",
                self.ostree_timestamp
            );
        }
        for (key, img) in &self.images {
            check_file_name(&img.path).with_context(|| format!("meta.json: images.{key}"))?;
            if !is_sha256_hex(&img.sha256) {
                bail!(
                    "meta.json: images.{key}.sha256 {:?} is not 64 hex characters",
                    img.sha256
                );
            }
            if let Some(u) = &img.uncompressed_sha256 {
                if !is_sha256_hex(u) {
                    bail!("meta.json: images.{key}.uncompressed-sha256 {u:?} is not 64 hex characters");
                }
            }
        }
        for git in [
            &self.coreos_assembler.container_image_git,
            &self.coreos_assembler.container_config_git,
        ]
        .into_iter()
        .flatten()
        {
            if git.commit.len() < 5 || git.origin.is_empty() {
                bail!("meta.json: git reference {git:?} needs a commit of 5+ characters and an origin");
            }
        }
        Ok(())
    }

    /// cosa's schema requires `images.ostree` whenever `images` is present.
    /// True when this record has images but no such entry, i.e. it would not
    /// validate against the upstream schema.
    pub fn lacks_ostree_image(&self) -> bool {
        !self.images.is_empty() && !self.images.contains_key(IMAGE_KEY_OSTREE)
    }

    /// Every artifact as `(file name, sha256)`, for [`write_sha256sums`].
    pub fn checksums(&self) -> Vec<(String, String)> {
        self.images
            .values()
            .map(|i| (i.path.clone(), i.sha256.clone()))
            .collect()
    }

    /// Whether `other` describes the same build (same OS, version, commit
    /// and architecture), so that their images may share one directory.
    pub fn same_build(&self, other: &Meta) -> bool {
        self.identity() == other.identity()
    }

    fn identity(&self) -> String {
        format!(
            "{} {} ({}, ostree commit {})",
            self.name, self.buildid, self.coreos_assembler.basearch, self.ostree_commit
        )
    }

    /// Folds `existing` (read from the output directory) into `self`.
    ///
    /// Both must describe the same build ([`Meta::same_build`]), else an
    /// [`OutputDirConflict`] naming `dir` is returned. Images and AMIs are
    /// united, entries of `self` replacing those of `existing` with the same
    /// key (image key, AMI region); optional facts `self` lacks are taken
    /// from `existing`; unmodelled keys are kept.
    pub fn merge_existing(&mut self, existing: Meta, dir: &Path) -> Result<()> {
        if !self.same_build(&existing) {
            return Err(OutputDirConflict {
                dir: dir.to_path_buf(),
                existing: existing.identity(),
                new: self.identity(),
            }
            .into());
        }
        let Meta {
            ostree_content_checksum,
            coreos_assembler,
            base_oscontainer,
            release_payload,
            summary,
            images,
            amis,
            extra,
            image_details,
            ..
        } = existing;
        for (k, v) in image_details {
            if !self.image_details.contains_key(&k) && !self.images.contains_key(&k) {
                self.image_details.insert(k, v);
            }
        }
        fill(&mut self.ostree_content_checksum, ostree_content_checksum);
        let ca = &mut self.coreos_assembler;
        fill(&mut ca.build_timestamp, coreos_assembler.build_timestamp);
        fill(&mut ca.oci_imported, coreos_assembler.oci_imported);
        fill(
            &mut ca.container_image_git,
            coreos_assembler.container_image_git,
        );
        fill(
            &mut ca.container_config_git,
            coreos_assembler.container_config_git,
        );
        fill(&mut self.base_oscontainer, base_oscontainer);
        fill(&mut self.release_payload, release_payload);
        fill(&mut self.summary, summary);
        for (k, v) in images {
            self.images.entry(k).or_insert(v);
        }
        let mut merged: Vec<Ami> = amis
            .into_iter()
            .filter(|old| !self.amis.iter().any(|new| new.name == old.name))
            .collect();
        merged.append(&mut self.amis);
        merged.sort_by(|a, b| a.name.cmp(&b.name));
        self.amis = merged;
        for (k, v) in extra {
            self.extra.entry(k).or_insert(v);
        }
        Ok(())
    }
}

fn fill<T>(slot: &mut Option<T>, old: Option<T>) {
    if slot.is_none() {
        *slot = old;
    }
}

pub use crate::util::rfc3339_utc;

/// Streams a file through SHA-256: `(lower-case hex, size in bytes)`.
pub fn sha256_file(path: &Path) -> Result<(String, u64)> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = crate::util::sha256::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        size += n as u64;
    }
    Ok((hex::encode(h.finalize()), size))
}

/// Reads `dir/meta.json`; `Ok(None)` when there is none.
pub fn read_meta(dir: &Path) -> Result<Option<Meta>> {
    let path = dir.join(META_JSON);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut meta: Meta =
        serde_json::from_slice(&data).with_context(|| format!("parsing {}", path.display()))?;
    // The entries' keys beyond cosa's artifact fields.
    let v: serde_json::Value = serde_json::from_slice(&data)?;
    if let Some(images) = v.get("images").and_then(|i| i.as_object()) {
        for (k, e) in images {
            let Some(e) = e.as_object() else { continue };
            let more: serde_json::Map<_, _> = e
                .iter()
                .filter(|(f, _)| !ARTIFACT_FIELDS.contains(&f.as_str()))
                .map(|(f, x)| (f.clone(), x.clone()))
                .collect();
            if !more.is_empty() {
                meta.image_details.insert(k.clone(), more);
            }
        }
    }
    Ok(Some(meta))
}

/// Writes `dir/meta.json` atomically, pretty-printed with four-space
/// indentation like cosa (`json.dump(..., indent=4)`), mode 0644.
pub fn write_meta(dir: &Path, meta: &Meta) -> Result<()> {
    meta.check()?;
    if meta.lacks_ostree_image() {
        tracing::warn!(
            "{META_JSON} has no images.{IMAGE_KEY_OSTREE} entry, which cosa's schema requires"
        );
    }
    let mut v = serde_json::to_value(meta).context("serialising meta.json")?;
    for (k, more) in &meta.image_details {
        if let Some(e) = v
            .get_mut("images")
            .and_then(|i| i.get_mut(k))
            .and_then(|e| e.as_object_mut())
        {
            for (f, x) in more {
                e.insert(f.clone(), x.clone());
            }
        }
    }
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    v.serialize(&mut ser).context("serialising meta.json")?;
    out.push(b'\n');
    write_atomic(dir, META_JSON, &out)
}

/// Merges `meta` with the meta.json already in `dir` (if any, see
/// [`Meta::merge_existing`]) and writes the result; returns what was
/// written. A meta.json of another build is an [`OutputDirConflict`].
pub fn write_merged_meta(dir: &Path, mut meta: Meta) -> Result<Meta> {
    if let Some(existing) = read_meta(dir)? {
        meta.merge_existing(existing, dir)?;
    }
    write_meta(dir, &meta)?;
    Ok(meta)
}

/// Writes `dir/SHA256SUMS` atomically in `sha256sum -c` format:
/// `<hex>  <name>\n` per file, sorted by name. Identical duplicates are
/// written once; conflicting duplicates and names sha256sum would have to
/// escape (newline, backslash) or that leave `dir` are errors.
pub fn write_sha256sums(dir: &Path, files: &[(String, String)]) -> Result<()> {
    let mut sums: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, hash) in files {
        check_file_name(name).context("SHA256SUMS")?;
        if !is_sha256_hex(hash) {
            bail!("SHA256SUMS: checksum {hash:?} of {name} is not 64 lower-case hex characters");
        }
        if let Some(prev) = sums.insert(name, hash) {
            if prev != hash {
                bail!("SHA256SUMS: {name} listed with two checksums ({prev} and {hash})");
            }
        }
    }
    let mut out = String::new();
    for (name, hash) in sums {
        out.push_str(hash);
        out.push_str("  ");
        out.push_str(name);
        out.push('\n');
    }
    write_atomic(dir, SHA256SUMS, out.as_bytes())
}

/// Write `dir/name` atomically (the staged path of [`super::staged`]).
pub(crate) fn write_atomic(dir: &Path, name: &str, data: &[u8]) -> Result<()> {
    super::staged::write_file(dir, name, data)
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// cosa schema `ostree-timestamp.pattern`: `\d{4}-\d{2}-\d{2}T.*Z$`
/// (unanchored at the start, so we look for the date anywhere).
fn is_cosa_timestamp(s: &str) -> bool {
    if !s.ends_with('Z') {
        return false;
    }
    let b = s.as_bytes();
    (0..b.len().saturating_sub(10)).any(|i| {
        let w = &b[i..i + 11];
        w[..4].iter().all(u8::is_ascii_digit)
            && w[4] == b'-'
            && w[5..7].iter().all(u8::is_ascii_digit)
            && w[7] == b'-'
            && w[8..10].iter().all(u8::is_ascii_digit)
            && w[10] == b'T'
    })
}

/// A plain file name: not empty, no `/`, not `.`/`..`, and nothing
/// `sha256sum` would escape (newline, carriage return, backslash).
fn check_file_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name == "."
        || name == ".."
        || name.contains(['/', '\n', '\r', '\\', '\0'])
    {
        bail!("{name:?} is not a plain file name");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: &str = "f15f5b25cf138a7683e3d200c53ece2091bf71d31332135da87892ab72ff4ee3";
    const OTHER_COMMIT: &str = "742edc307e58f35824d906958b6493510e12b593742edc307e58f35824d90695";

    fn hash(c: char) -> String {
        std::iter::repeat(c).take(64).collect()
    }

    fn image(path: &str, c: char) -> ImageEntry {
        ImageEntry {
            path: path.into(),
            sha256: hash(c),
            size: 42,
            uncompressed_sha256: None,
            uncompressed_size: None,
            skip_compression: None,
        }
    }

    fn meta(commit: &str) -> Meta {
        Meta::new(
            "rhcos",
            "418.94.202501221327-0",
            commit,
            "2025-01-22T13:27:00Z",
            "x86_64",
        )
    }

    #[test]
    fn serialises_with_cosa_key_names() {
        let mut m = meta(COMMIT);
        m.images.insert(
            "qemu".into(),
            ImageEntry {
                uncompressed_sha256: Some(hash('b')),
                uncompressed_size: Some(1 << 30),
                ..image("rhcos-418.94.202501221327-0-qemu.x86_64.qcow2.gz", 'a')
            },
        );
        m.amis.push(Ami {
            name: "us-east-1".into(),
            hvm: "ami-0123".into(),
            snapshot: "snap-0123".into(),
        });
        let v = serde_json::to_value(&m).unwrap();
        let o = v.as_object().unwrap();
        for k in [
            "buildid",
            "name",
            "ostree-commit",
            "ostree-timestamp",
            "ostree-version",
            "coreos-assembler.basearch",
            "coreos-assembler.build-timestamp",
            "coreos-assembler.oci-imported",
            "coreos-assembler.container-image-git",
            "images",
            "amis",
        ] {
            assert!(o.contains_key(k), "missing {k} in {v}");
        }
        assert!(!o.contains_key("coreos_assembler"));
        assert!(!o.contains_key("extra"));
        assert!(!o.contains_key("summary"));
        let q = &v["images"]["qemu"];
        assert_eq!(q["uncompressed-size"], 1u64 << 30);
        assert_eq!(q["uncompressed-sha256"], hash('b'));
        assert!(q.get("skip-compression").is_none());
        assert_eq!(v["amis"][0]["hvm"], "ami-0123");
    }

    #[test]
    fn empty_images_and_amis_are_omitted() {
        let v = serde_json::to_value(meta(COMMIT)).unwrap();
        assert!(v.get("images").is_none());
        assert!(v.get("amis").is_none());
    }

    #[test]
    fn round_trip_through_file_keeps_unknown_keys() {
        let d = tempfile::tempdir().unwrap();
        let mut m = meta(COMMIT);
        m.images.insert("metal".into(), image("a.raw.gz", 'a'));
        m.images.insert(
            "vmware".into(),
            ImageEntry {
                skip_compression: Some(true),
                ..image("a.ova", 'c')
            },
        );
        m.base_oscontainer = Some(ContainerImage {
            image: "quay.io/openshift-release-dev/ocp-v4.0-art-dev".into(),
            digest: Some(format!("sha256:{}", hash('d'))),
            tags: vec![],
            comment: None,
        });
        m.extra
            .insert("coreos-assembler.image-genver".into(), 0.into());
        write_meta(d.path(), &m).unwrap();
        let text = std::fs::read_to_string(d.path().join(META_JSON)).unwrap();
        assert!(text.starts_with("{\n    \"buildid\": "), "{text}");
        assert!(text.ends_with("}\n"));
        let back = read_meta(d.path()).unwrap().unwrap();
        assert_eq!(back, m);
        assert_eq!(back.extra["coreos-assembler.image-genver"], 0);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.path().join(META_JSON))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
        // no temporary file left behind
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(META_JSON)]);
    }

    #[test]
    fn read_meta_absent_is_none() {
        let d = tempfile::tempdir().unwrap();
        assert!(read_meta(d.path()).unwrap().is_none());
    }

    #[test]
    fn merge_same_build_unites_images_and_amis() {
        let d = tempfile::tempdir().unwrap();
        let mut first = meta(COMMIT);
        first.images.insert("metal".into(), image("m.raw.gz", 'a'));
        first.images.insert("qemu".into(), image("q.qcow2.gz", 'b'));
        first.amis.push(Ami {
            name: "us-east-1".into(),
            hvm: "ami-old".into(),
            snapshot: "snap-old".into(),
        });
        first.amis.push(Ami {
            name: "eu-west-1".into(),
            hvm: "ami-eu".into(),
            snapshot: "snap-eu".into(),
        });
        first.release_payload = Some(ContainerImage {
            image: "quay.io/openshift-release-dev/ocp-release".into(),
            digest: Some(format!("sha256:{}", hash('e'))),
            tags: vec!["4.18.1".into()],
            comment: None,
        });
        first.extra.insert("x-kept".into(), "yes".into());
        write_merged_meta(d.path(), first).unwrap();

        let mut second = meta(COMMIT);
        second
            .images
            .insert("qemu".into(), image("q.qcow2.gz", 'c'));
        second.images.insert("live-iso".into(), image("l.iso", 'd'));
        second.amis.push(Ami {
            name: "us-east-1".into(),
            hvm: "ami-new".into(),
            snapshot: "snap-new".into(),
        });
        let merged = write_merged_meta(d.path(), second).unwrap();
        assert_eq!(read_meta(d.path()).unwrap().unwrap(), merged);

        let keys: Vec<_> = merged.images.keys().map(String::as_str).collect();
        assert_eq!(keys, ["live-iso", "metal", "qemu"]);
        assert_eq!(merged.images["qemu"].sha256, hash('c'), "new image wins");
        assert_eq!(merged.images["metal"].sha256, hash('a'), "old image kept");
        let amis: Vec<_> = merged
            .amis
            .iter()
            .map(|a| (a.name.as_str(), a.hvm.as_str()))
            .collect();
        assert_eq!(amis, [("eu-west-1", "ami-eu"), ("us-east-1", "ami-new")]);
        assert_eq!(
            merged.release_payload.as_ref().unwrap().tags,
            ["4.18.1"],
            "facts the new run lacks are kept"
        );
        assert_eq!(merged.extra["x-kept"], "yes");
        let sums = merged.checksums();
        assert_eq!(sums.len(), 3);
    }

    #[test]
    fn merge_other_commit_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let mut first = meta(COMMIT);
        first.images.insert("metal".into(), image("m.raw.gz", 'a'));
        write_merged_meta(d.path(), first.clone()).unwrap();

        let err = write_merged_meta(d.path(), meta(OTHER_COMMIT)).unwrap_err();
        assert!(err.downcast_ref::<OutputDirConflict>().is_some(), "{err:#}");
        let msg = format!("{err:#}");
        assert!(msg.contains("use an empty output directory"), "{msg}");
        assert!(msg.contains(COMMIT) && msg.contains(OTHER_COMMIT), "{msg}");
        // the existing file is untouched
        assert_eq!(read_meta(d.path()).unwrap().unwrap(), first);

        let mut other_arch = meta(COMMIT);
        other_arch.coreos_assembler.basearch = "aarch64".into();
        assert!(write_merged_meta(d.path(), other_arch).is_err());
        let mut other_version = meta(COMMIT);
        other_version.buildid = "418.94.202501221327-1".into();
        other_version.ostree_version = other_version.buildid.clone();
        assert!(write_merged_meta(d.path(), other_version).is_err());
    }

    #[test]
    fn check_rejects_what_the_schema_would() {
        assert!(meta(COMMIT).check().is_ok());
        assert!(meta("abc").check().is_err());
        let mut m = meta(COMMIT);
        m.ostree_timestamp = "2025-01-22T13:27:00+00:00".into();
        assert!(m.check().is_err());
        let mut m = meta(COMMIT);
        m.buildid.clear();
        assert!(m.check().is_err());
        let mut m = meta(COMMIT);
        m.images.insert("metal".into(), image("../x", 'a'));
        assert!(m.check().is_err());
        let d = tempfile::tempdir().unwrap();
        assert!(write_meta(d.path(), &m).is_err());
    }

    #[test]
    fn lacks_ostree_image() {
        let mut m = meta(COMMIT);
        assert!(!m.lacks_ostree_image());
        m.images.insert("metal".into(), image("m.raw", 'a'));
        assert!(m.lacks_ostree_image());
        m.images
            .insert(IMAGE_KEY_OSTREE.into(), image("o.ociarchive", 'b'));
        assert!(!m.lacks_ostree_image());
    }

    #[test]
    fn timestamps_are_cosa_form() {
        assert_eq!(rfc3339_utc(1579116691), "2020-01-15T19:31:31Z");
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert!(is_cosa_timestamp("2020-01-15T19:31:31Z"));
        assert!(!is_cosa_timestamp("2020-01-15 19:31:31Z"));
        assert!(!is_cosa_timestamp("2020-01-15T19:31:31"));
        assert!(!is_cosa_timestamp("Z"));
    }

    #[test]
    fn sha256sums_sorted_deduplicated_and_strict() {
        let d = tempfile::tempdir().unwrap();
        let files = vec![
            ("b.iso".to_string(), hash('b')),
            ("a.raw.gz".to_string(), hash('a')),
            ("b.iso".to_string(), hash('b')),
        ];
        write_sha256sums(d.path(), &files).unwrap();
        let text = std::fs::read_to_string(d.path().join(SHA256SUMS)).unwrap();
        assert_eq!(
            text,
            format!("{}  a.raw.gz\n{}  b.iso\n", hash('a'), hash('b'))
        );

        let clash = vec![("a".to_string(), hash('a')), ("a".to_string(), hash('b'))];
        assert!(write_sha256sums(d.path(), &clash).is_err());
        assert!(write_sha256sums(d.path(), &[("a\nb".into(), hash('a'))]).is_err());
        assert!(write_sha256sums(d.path(), &[("sub/a".into(), hash('a'))]).is_err());
        assert!(write_sha256sums(d.path(), &[("a".into(), "XYZ".into())]).is_err());
        // the failed writes left the first file alone
        assert_eq!(
            std::fs::read_to_string(d.path().join(SHA256SUMS)).unwrap(),
            text
        );
    }

    #[test]
    fn image_entry_for_file_hashes_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.raw");
        std::fs::write(&p, b"abc").unwrap();
        let e = ImageEntry::for_file(&p).unwrap();
        assert_eq!(e.path, "x.raw");
        assert_eq!(e.size, 3);
        assert_eq!(
            e.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
