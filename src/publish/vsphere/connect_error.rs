//! Connection-level errors of `vsphere import` said in one line: a login
//! fault, a refused certificate, a TLS or connect failure or a non-vCenter
//! answer in, the object, the cause and the fix (which setting to change)
//! out.
use anyhow::anyhow;

use super::soap::{Fault, Refusal, TransportError};
use super::types::Settings;

/// Say a connection-level error in one line: the object, the cause, the fix.
pub(super) fn connect_error(e: anyhow::Error, s: &Settings) -> anyhow::Error {
    let url = &s.url;
    // A certificate refused (soap::trust): it names the host, the
    // certificate and the one fix itself.
    if let Some(r) = e.downcast_ref::<Refusal>() {
        return anyhow!("vCenter {url}: {r}");
    }
    if let Some(f) = e.downcast_ref::<Fault>() {
        if f.kind.contains("InvalidLogin") {
            return anyhow!(
                "vCenter {url}: login as {:?} refused: wrong user name or password; check {} (no retry was made)",
                s.username,
                match &s.credentials_file {
                    Some(f) => format!("the user and password in {}", f.display()),
                    None => "GOVC_USERNAME and GOVC_PASSWORD".into(),
                }
            );
        }
        return anyhow!("vCenter {url}: {f}");
    }
    if let Some(t) = e.downcast_ref::<TransportError>() {
        return match t {
            // Certificates are judged by soap::trust and refused as a
            // Refusal (above); what is left is the handshake itself.
            TransportError::Tls(cause) => anyhow!(
                "vCenter {url}: TLS handshake failed: {cause}; check that GOVC_URL names vCenter's HTTPS endpoint (https://<vcenter>/sdk)"
            ),
            TransportError::Connect(cause) => anyhow!(
                "vCenter {url} unreachable: {cause}; check GOVC_URL (https://<vcenter>/sdk) and that this host can reach it"
            ),
        };
    }
    let msg = format!("{e:#}");
    if msg.contains("not a vSphere API endpoint") || msg.contains("not a vCenter") {
        return anyhow!(
            "{url}: {msg}; check GOVC_URL: it must be a vCenter's https://<vcenter>/sdk"
        );
    }
    anyhow!("vCenter {url}: {msg}")
}
