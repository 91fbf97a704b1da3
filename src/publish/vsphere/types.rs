//! What `vsphere import` is given and what it reports: the [`Settings`]
//! (where and how to import, from flags and govc's environment), the disk
//! provisioning types vCenter accepts, and the [`Outcome`] of an import
//! (the template's name, reference and path, and whether it was kept,
//! replaced or newly uploaded).
use std::path::PathBuf;

use super::soap::MoRef;

/// Where and how to import; each field also read from govc's environment
/// names by the CLI.
#[derive(Debug, Clone)]
pub struct Settings {
    pub url: String,
    pub username: String,
    pub password: String,
    /// `--credentials FILE`, when the user and password came from it.
    pub credentials_file: Option<PathBuf>,
    pub insecure: bool,
    /// `GOVC_TLS_CA_CERTS`: PEM file(s), `:`-separated, of the CAs (or
    /// the servers' own certificates) to trust instead of the system store.
    pub ca_file: Option<PathBuf>,
    /// `GOVC_TLS_KNOWN_HOSTS`: file(s), `:`-separated, of `host[:port]
    /// thumbprint` lines pinning certificates no CA vouches for.
    pub known_hosts: Option<String>,
    pub datacenter: Option<String>,
    pub datastore: Option<String>,
    pub resource_pool: Option<String>,
    pub folder: Option<String>,
    pub network: Option<String>,
    /// thin, thick or eagerZeroedThick; `None`: the datastore's default.
    pub disk_provisioning: Option<String>,
    pub name: String,
    pub replace: bool,
    /// The release the OVA came from, recorded in the annotation.
    pub release: Option<String>,
}

/// The disk provisioning types CreateImportSpec accepts (vim25
/// `OvfCreateImportSpecParamsDiskProvisioningType`, as the installer maps them).
pub const DISK_PROVISIONING: &[&str] = &["thin", "thick", "eagerZeroedThick"];

/// What an import did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub name: String,
    pub vm: MoRef,
    pub inventory_path: String,
    pub rhcos_version: String,
    /// An existing template with the same version was kept.
    pub reused: bool,
    /// An existing template was replaced.
    pub replaced: bool,
    pub uploaded: u64,
}
