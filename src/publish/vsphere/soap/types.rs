//! The values the vSphere SOAP client passes around: managed object
//! references ([`MoRef`], read from an element by [`moref`]), a SOAP
//! [`Fault`], the [`Endpoint`] a session goes to (parsed from govc's
//! `GOVC_URL` forms) and the [`ServiceContent`] references a session reads
//! at login. Nothing here talks to the network; the session, query, lease
//! and task files build on these.
use anyhow::{bail, Result};

use crate::util::xml::esc;

/// A managed object reference: `<x type="Folder">group-d1</x>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MoRef {
    pub kind: String,
    pub value: String,
}

impl MoRef {
    pub fn new(kind: &str, value: &str) -> Self {
        MoRef {
            kind: kind.into(),
            value: value.into(),
        }
    }

    /// The reference as the element `tag`.
    pub fn xml(&self, tag: &str) -> String {
        format!(
            "<{tag} type=\"{}\">{}</{tag}>",
            esc(&self.kind),
            esc(&self.value)
        )
    }
}

impl std::fmt::Display for MoRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind, self.value)
    }
}

/// A MoRef from an element.
pub fn moref(n: roxmltree::Node<'_, '_>) -> MoRef {
    MoRef::new(n.attribute("type").unwrap_or(""), n.text().unwrap_or(""))
}

/// A SOAP fault: the fault's type (`InvalidLogin`, `DuplicateName`, ...)
/// and its message.
#[derive(Debug, thiserror::Error)]
#[error("{message} ({kind})")]
pub struct Fault {
    pub kind: String,
    pub message: String,
}

/// How to reach and trust the server.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `https://host[:port]/sdk`
    pub sdk: String,
    /// `host[:port]`, for the `*` in NFC device URLs.
    pub authority: String,
    pub insecure: bool,
    /// PEM file(s) of CAs to trust instead of the system store
    /// (`GOVC_TLS_CA_CERTS`: one file or a `:` list).
    pub ca_file: Option<std::path::PathBuf>,
    /// Files of `host thumbprint` lines (`GOVC_TLS_KNOWN_HOSTS`: one
    /// file or a `:` list), set after [`Endpoint::parse`].
    pub known_hosts: Option<std::ffi::OsString>,
}

impl Endpoint {
    /// From govc's `GOVC_URL` forms: `host`, `host:port`, `https://host[/sdk]`.
    /// User info in the URL is refused (passwords come from the environment).
    pub fn parse(url: &str, insecure: bool, ca_file: Option<std::path::PathBuf>) -> Result<Self> {
        let u = url.trim();
        if u.is_empty() {
            bail!("the vCenter URL is empty: set GOVC_URL (e.g. https://vcenter.example.com/sdk)");
        }
        let rest = if let Some(r) = u.strip_prefix("https://") {
            r
        } else if u.starts_with("http://") {
            bail!("vCenter URL {u}: plain http is not supported; use https://");
        } else if u.contains("://") {
            bail!("vCenter URL {u}: not an https URL");
        } else {
            u
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.contains('@') {
            bail!("vCenter URL {u} carries credentials: remove them and set GOVC_USERNAME and GOVC_PASSWORD");
        }
        if authority.is_empty() {
            bail!("vCenter URL {u} has no host");
        }
        let path = match path.trim_end_matches('/') {
            "" => "/sdk",
            p => p,
        };
        Ok(Endpoint {
            sdk: format!("https://{authority}{path}"),
            authority: authority.into(),
            insecure,
            ca_file,
            known_hosts: None,
        })
    }
}

/// The ServiceContent references used here.
#[derive(Debug, Clone)]
pub struct ServiceContent {
    pub root_folder: MoRef,
    pub property_collector: MoRef,
    pub view_manager: MoRef,
    pub session_manager: MoRef,
    pub search_index: MoRef,
    pub ovf_manager: MoRef,
    pub api_type: String,
    pub full_name: String,
    pub api_version: String,
}
