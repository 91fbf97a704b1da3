//! How the OS travels: the labels an OS image carries, the format they
//! tell ([`OsFormat`]: ostree-native or legacy machine-os-content), and the
//! checksum test its commits pass. In: an image's labels; out: its format.
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Labels of an ostree-native container (ostree-ext encapsulation, bootc).
pub const LABEL_OSTREE_COMMIT: &str = "ostree.commit";
pub const LABEL_OSTREE_BOOTABLE: &str = "ostree.bootable";
pub const LABEL_BOOTC: &str = "containers.bootc";
pub const LABEL_OSTREE_LINUX: &str = "ostree.linux";
pub const LABEL_OSNAME: &str = "com.coreos.osname";
/// Label of a legacy machine-os-content image.
pub const LABEL_LEGACY_COMMIT: &str = "com.coreos.ostree-commit";
/// Where a legacy image keeps its repo.
pub const LEGACY_REPO_DIR: &str = "srv/repo";

/// How the OS travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OsFormat {
    OstreeNative,
    Legacy,
}

impl std::fmt::Display for OsFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OsFormat::OstreeNative => "ostree-native",
            OsFormat::Legacy => "legacy",
        })
    }
}

/// Tell the format from the image labels.
pub fn detect_format(labels: &BTreeMap<String, String>, what: &str) -> Result<OsFormat> {
    if labels.contains_key(LABEL_OSTREE_COMMIT)
        || labels.contains_key(LABEL_OSTREE_BOOTABLE)
        || labels.contains_key(LABEL_BOOTC)
    {
        return Ok(OsFormat::OstreeNative);
    }
    if labels.contains_key(LABEL_LEGACY_COMMIT) {
        return Ok(OsFormat::Legacy);
    }
    bail!(
        "{what} is not an OS image: it has neither the ostree-native labels ({LABEL_OSTREE_COMMIT}, {LABEL_BOOTC}) nor the machine-os-content label {LABEL_LEGACY_COMMIT}"
    )
}

/// Whether `s` is an ostree commit checksum (64 hex digits).
pub(super) fn is_checksum(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}
