//! What the trust check is asked about: the user's options, whose
//! release a pull spec names (`Vendor`, decided by the pull spec or its
//! IDMS source), and the release's digests (`Subject`). In: the CLI's
//! options and the pull spec; out: the inputs of `policy` and `lookup`.
use super::sigstore;
use crate::image::fetch::FetchOptions;
use crate::image::idms::Mirrors;
use crate::image::imageref::ImageRef;
use serde::Serialize;
use std::path::PathBuf;

/// The user's trust options (`--verification-config`, `--signatures`,
/// `--sigstore-key`, `--require-signature`, `--no-verify-signature`).
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub verification_configs: Vec<PathBuf>,
    pub signatures: Vec<PathBuf>,
    pub sigstore_keys: Vec<PathBuf>,
    pub require: bool,
    pub skip: bool,
}

impl Options {
    /// The user gave keys of their own: what they name must verify.
    pub(super) fn has_keys(&self) -> bool {
        !self.verification_configs.is_empty() || !self.sigstore_keys.is_empty()
    }
}

/// Whose release a pull spec names. Decided by the pull spec the user gave
/// or the IDMS source it mirrors, never by what the payload says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// OCP: the scopes of cluster-update-keys' ClusterImagePolicy.
    RedHat,
    /// OKD's release repositories.
    Okd,
}

/// OKD's release repositories (OKD's docs: `quay.io/okd/scos-release`,
/// earlier `quay.io/openshift/okd`).
const OKD_REPOS: &[&str] = &["quay.io/okd/scos-release", "quay.io/openshift/okd"];

impl Vendor {
    /// The vendor whose repository `name` (`host/repo`) is.
    pub fn of(name: &str) -> Option<Vendor> {
        // Host names compare without case, and :443 is the default port.
        let name = name.to_lowercase();
        let name = match name.split_once('/') {
            Some((host, repo)) => format!("{}/{repo}", host.trim_end_matches(":443")),
            None => name,
        };
        let name = name.as_str();
        if sigstore::builtin_openshift_scopes()
            .iter()
            .any(|s| name == s.as_str())
        {
            Some(Vendor::RedHat)
        } else if OKD_REPOS.contains(&name) {
            Some(Vendor::Okd)
        } else {
            None
        }
    }

    pub(super) fn gpg_builtin(self) -> &'static str {
        match self {
            Vendor::RedHat => "redhat",
            Vendor::Okd => "okd",
        }
    }
}

/// The vendor of the release as the user named it: its repository, or the
/// source repository of the IDMS rule it is a mirror of.
pub fn official(release: &ImageRef, mirrors: Option<&Mirrors>) -> Option<(Vendor, String)> {
    let ImageRef::Docker(d) = release else {
        return None;
    };
    let mut names = vec![d.name()];
    if let Some(m) = mirrors {
        names.extend(m.sources_of(d));
    }
    names
        .into_iter()
        .find_map(|n| Vendor::of(&n).map(|v| (v, n)))
}

/// What the check needs of the release: as named, and its digests.
pub struct Subject<'a> {
    pub release: &'a ImageRef,
    pub mirrors: Option<&'a Mirrors>,
    pub fetch: &'a FetchOptions,
    /// The digest of what the pull spec names (a list's, for a list).
    pub digest: &'a str,
    /// The per-arch manifest's digest.
    pub arch_digest: &'a str,
}
