//! A small typed client for the vSphere Web Services (SOAP, `urn:vim25`)
//! API: exactly the calls `vsphere import` makes, each named after its
//! vSphere method (fixtures/UPSTREAM.md §17 lists them with their sources).
//!
//! Requests are written by hand (escaped); responses are read with
//! roxmltree. HTTP is ureq (blocking) over the tree's rustls with ring. The
//! session is the `vmware_soap_session` cookie that `Login` sets.
//!
//! The parts, one job each: `types` (MoRef, Fault, Endpoint,
//! ServiceContent), `session` (the [`Client`], one SOAP call, login and
//! logout), `query` (inventory searches and property retrieval), `lease`
//! (the OVF import spec, ImportVApp and its NFC lease, the disk upload),
//! `tasks` (Task waiting, reconfigure, rename, mark as template, destroy),
//! and TLS as govc does it: `trust` (which certificates are trusted, and
//! the one-line [`Refusal`] of one that is not), `cert` (what a refusal
//! says about a certificate, read from its DER) and `tls` (the agent whose
//! connections that trust verifies).
//! Everything is reached through this module, as it always was.
mod cert;
mod lease;
mod query;
mod session;
mod tasks;
mod tls;
mod trust;
mod types;

pub use lease::{DeviceUrl, LeaseInfo};
pub use query::ObjectContent;
pub use session::{Client, Response};
pub use trust::Refusal;
pub use types::{moref, Endpoint, Fault, MoRef, ServiceContent};

pub use crate::util::xml::esc;

pub use crate::util::http::TransportError;

pub use crate::util::xml::{child_text, children, find};

#[cfg(test)]
mod tests;
