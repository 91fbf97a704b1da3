//! `vsphere import`: an OVA into vCenter as a VM template, as openshift-
//! install (`pkg/infrastructure/vsphere/clusterapi/import.go`) and the MCO
//! (`pkg/controller/bootimage/vsphere_helpers.go`) import theirs (docs/contract.md §7):
//! OvfManager.CreateImportSpec → ResourcePool.ImportVApp → the NFC lease
//! (the VMDK POSTed to its device URL, HttpNfcLeaseProgress as keep-alive,
//! HttpNfcLeaseComplete, or HttpNfcLeaseAbort and Destroy_Task on any
//! failure or signal) → ReconfigVM_Task (firmware and secure boot as the
//! OVF says, the annotation recording the RHCOS version) → MarkAsTemplate.
//!
//! The parts: `types` (the settings and the outcome), `ova` (reading the
//! OVA), `annotation` (the version record on a template), `connect_error`
//! (one-line connection errors), `inventory` and `placement` (where the
//! template goes), `flow` (the import's steps, in order) and `upload`
//! (ImportVApp and the NFC lease). [`import`] is the entry point.
pub mod patches;
pub mod soap;

mod annotation;
mod connect_error;
mod flow;
mod inventory;
mod ova;
mod placement;
mod types;
mod upload;

pub use annotation::{annotation, annotation_version};
pub use ova::{read_ova, Ova};
pub use types::{Outcome, Settings, DISK_PROVISIONING};

use anyhow::{bail, Result};
use connect_error::connect_error;
use flow::import_with;
use soap::{Client, Endpoint};

/// Import `ova` as the template `s.name`. Connects, checks everything it
/// can before creating anything, and leaves nothing behind on failure.
pub fn import(s: &Settings, ova: &Ova, rhcos_version: &str) -> Result<Outcome> {
    if ova.networks.len() != 1 {
        bail!(
            "{}: the OVF has {} networks; the import maps exactly one (as the installer does)",
            ova.path.display(),
            ova.networks.len()
        );
    }
    if let Some(d) = &s.disk_provisioning {
        if !DISK_PROVISIONING.contains(&d.as_str()) {
            bail!(
                "disk provisioning {d:?} is not one of {}",
                DISK_PROVISIONING.join(", ")
            );
        }
    }
    let mut ep = Endpoint::parse(&s.url, s.insecure, s.ca_file.clone())?;
    ep.known_hosts = s.known_hosts.clone().map(Into::into);
    let mut c = Client::connect(ep, &s.username, &s.password).map_err(|e| connect_error(e, s))?;
    let r = import_with(&mut c, s, ova, rhcos_version);
    c.logout();
    r
}

#[cfg(test)]
mod tests;
