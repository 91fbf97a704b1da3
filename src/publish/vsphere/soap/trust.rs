//! Which server certificates `vsphere import` trusts, as govc does
//! (govmomi `vim25/soap/client.go`, `nfc/lease.go`; fixtures/UPSTREAM.md
//! §26):
//!
//! 1. A certificate that is itself in `GOVC_TLS_CA_CERTS` is trusted as its
//!    own chain (Go's `x509.Verify` finds it among the roots), its validity
//!    period, server key usage and host name still checked. This is how a
//!    self-signed vCenter or ESXi certificate (often `CA:TRUE`, as vcsim's)
//!    is given; webpki alone refuses it (`CaUsedAsEndEntity`).
//! 2. Otherwise the chain is verified by webpki against `GOVC_TLS_CA_CERTS`
//!    (a `:`-separated list of PEM files) or, without it, the system store.
//! 3. When that fails for lack of trust (unknown issuer, a CA certificate
//!    nobody trusts, a name mismatch) and not for an expired or misused
//!    certificate, the host's pinned thumbprints decide: the
//!    `GOVC_TLS_KNOWN_HOSTS` files' `host[:port] thumbprint` lines, and
//!    the `sslThumbprint` vCenter gives for each ESXi host in an NFC lease.
//!    One that matches (SHA-1, or SHA-256) is trusted, one that does not is
//!    refused, no pin at all is refused.
//!
//! A refusal is a [`Refusal`]: one line naming the host, the certificate's
//! subject, issuer and thumbprint, why, and the one fix that applies (never
//! to set a variable that is already set).
//!
//! The parts: this file decides (the roots, the certificate trusted as
//! itself, the pins, and the rustls verifier of one connection);
//! `known_hosts` reads `GOVC_TLS_KNOWN_HOSTS` and keys hosts as govc does;
//! `refusal` says why a certificate is refused and what to do about it.
use anyhow::{bail, Context, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::{Arc, Mutex};

use super::cert::CertInfo;

mod known_hosts;
mod refusal;

use known_hosts::{read_known_hosts, KnownHosts, KNOWN_HOSTS_VAR};
use refusal::{refusal_error, Untrusted};

pub use known_hosts::host_addr;
pub use refusal::{refusal_in, Refusal};

/// Where the CA list comes from, for messages.
const CA_VAR: &str = "GOVC_TLS_CA_CERTS";

/// The certificates of `GOVC_TLS_CA_CERTS`.
struct CaFiles {
    /// The value as given (one file or a `:` list), for messages.
    spec: String,
    certs: Vec<CertificateDer<'static>>,
}

/// The trust settings of one session, shared by all its connections.
pub struct Trust {
    provider: Arc<CryptoProvider>,
    resumption: rustls::client::Resumption,
    /// The chain verifier over the roots; `None` when there are none.
    webpki: Option<Arc<WebPkiServerVerifier>>,
    ca: Option<CaFiles>,
    known_hosts: Option<KnownHosts>,
    /// `sslThumbprint`s of NFC leases, by `host:port`.
    lease: Mutex<HashMap<String, String>>,
    /// vCenter's `host:port`.
    vcenter: String,
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trust")
            .field("vcenter", &self.vcenter)
            .finish_non_exhaustive()
    }
}

fn read_ca_files(spec: &OsStr) -> Result<CaFiles> {
    use rustls::pki_types::pem::PemObject;
    let shown = spec.to_string_lossy().into_owned();
    let mut certs = Vec::new();
    for f in std::env::split_paths(spec).filter(|p| !p.as_os_str().is_empty()) {
        let pem = std::fs::read(&f)
            .with_context(|| format!("reading the CA file {} ({CA_VAR})", f.display()))?;
        let before = certs.len();
        for c in CertificateDer::pem_slice_iter(&pem) {
            certs.push(c.with_context(|| format!("CA file {} ({CA_VAR}): bad PEM", f.display()))?);
        }
        if certs.len() == before {
            bail!(
                "CA file {} ({CA_VAR}) holds no certificate: give the PEM of the CA that signed the server's certificate, or the server's own certificate",
                f.display()
            );
        }
    }
    Ok(CaFiles { spec: shown, certs })
}

fn system_roots() -> Vec<CertificateDer<'static>> {
    rustls_native_certs::load_native_certs().certs
}

impl Trust {
    /// The trust of a session with vCenter at `vcenter` (`host[:port]`):
    /// `ca` is `GOVC_TLS_CA_CERTS` (a `:` list of PEM files), `known_hosts`
    /// `GOVC_TLS_KNOWN_HOSTS` (a `:` list of files).
    pub fn load(
        vcenter: &str,
        ca: Option<&OsStr>,
        known_hosts: Option<&OsStr>,
    ) -> Result<Arc<Trust>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let ca = ca
            .filter(|s| !s.is_empty())
            .map(read_ca_files)
            .transpose()?;
        let known_hosts = known_hosts
            .filter(|s| !s.is_empty())
            .map(read_known_hosts)
            .transpose()?;
        let mut roots = RootCertStore::empty();
        match &ca {
            Some(c) => {
                roots.add_parsable_certificates(c.certs.iter().cloned());
            }
            None => {
                roots.add_parsable_certificates(system_roots());
            }
        }
        let webpki = if roots.is_empty() {
            None
        } else {
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .ok()
        };
        Ok(Arc::new(Trust {
            provider,
            resumption: rustls::client::Resumption::default(),
            webpki,
            ca,
            known_hosts,
            lease: Mutex::new(HashMap::new()),
            vcenter: host_addr(vcenter),
        }))
    }

    /// Record the `sslThumbprint` an NFC lease gives for the host of a
    /// device URL (`host[:port]`), as govmomi's `newLeaseInfo` does.
    pub fn pin_from_lease(&self, authority: &str, thumbprint: &str) {
        if thumbprint.trim().is_empty() {
            return;
        }
        let mut m = self.lease.lock().unwrap_or_else(|e| e.into_inner());
        m.insert(host_addr(authority), thumbprint.trim().to_string());
    }

    /// The rustls configuration of one connection to `addr` (`host:port`):
    /// its verifier knows which host it checks.
    pub fn client_config(self: &Arc<Self>, addr: &str) -> Result<Arc<ClientConfig>, rustls::Error> {
        let verifier = HostVerifier {
            addr: host_addr(addr),
            trust: self.clone(),
        };
        let mut c = ClientConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(rustls::ALL_VERSIONS)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        c.resumption = self.resumption.clone();
        Ok(Arc::new(c))
    }

    /// Decide on the certificate `ee` that `addr` presented for `name`.
    fn check(
        &self,
        addr: &str,
        ee: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<(), Box<Refusal>> {
        let info = CertInfo::parse(ee);
        let name_check = rustls::server::ParsedCertificate::try_from(ee)
            .and_then(|p| rustls::client::verify_server_name(&p, name));
        let name_ok = name_check.is_ok();
        let in_ca = self
            .ca
            .as_ref()
            .is_some_and(|c| c.certs.iter().any(|c| c.as_ref() == ee.as_ref()));
        let why = if in_ca {
            // Trusted as its own chain, as Go does for a certificate among
            // the roots; the period, usage and name are still checked.
            if let Some(inv) = Self::period(&info, now) {
                return Err(self.refusal(addr, &info, inv.cause, inv.fix));
            }
            if !info.server_auth {
                return Err(self.refusal(
                    addr,
                    &info,
                    "its certificate is not for TLS server authentication (extended key usage)"
                        .into(),
                    "have the host's certificate reissued with serverAuth usage".into(),
                ));
            }
            match name_check {
                Ok(()) => return Ok(()),
                Err(e) => match Self::classify(e, &info, name) {
                    Ok(u) => u,
                    Err(inv) => return Err(self.refusal(addr, &info, inv.cause, inv.fix)),
                },
            }
        } else {
            match self
                .webpki
                .as_ref()
                .map(|w| w.verify_server_cert(ee, intermediates, name, &[], now))
            {
                Some(Ok(_)) => return Ok(()),
                Some(Err(e)) => match Self::classify(e, &info, name) {
                    Ok(u) => u,
                    Err(inv) => return Err(self.refusal(addr, &info, inv.cause, inv.fix)),
                },
                None => Untrusted::Issuer,
            }
        };
        // Not trusted by a chain: the host's pins decide (govc's dialTLS).
        let file_pin = self
            .known_hosts
            .as_ref()
            .and_then(|k| k.pins.get(addr).cloned());
        let lease_pin = self
            .lease
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(addr)
            .cloned();
        if file_pin
            .as_ref()
            .is_some_and(|p| info.has_thumbprint(&p.thumbprint))
            || lease_pin.as_ref().is_some_and(|t| info.has_thumbprint(t))
        {
            tracing::debug!("TLS: {addr} trusted by its pinned thumbprint {}", info.sha1);
            return Ok(());
        }
        if let Some(p) = file_pin {
            return Err(self.refusal(
                addr,
                &info,
                format!(
                    "its certificate is not the one {} ({KNOWN_HOSTS_VAR}) pins for it ({})",
                    p.file.display(),
                    p.thumbprint
                ),
                format!(
                    "if {addr}'s certificate was replaced, check the new thumbprint with its administrator, then make that line \"{addr} {}\"",
                    info.sha1
                ),
            ));
        }
        if let Some(t) = lease_pin {
            return Err(self.refusal(
                addr,
                &info,
                format!("its certificate is not the one vCenter's NFC lease gives for it ({t})"),
                "have vCenter renew its record of the host's certificate (reconnect the host in vCenter), then retry".into(),
            ));
        }
        let cause = self.untrusted_cause(&why, &info);
        let fix = self.untrusted_fix(addr, &info, &why, name_ok);
        Err(self.refusal(addr, &info, cause, fix))
    }
}

/// The verifier of one connection: [`Trust::check`] for its host.
#[derive(Debug)]
struct HostVerifier {
    addr: String,
    trust: Arc<Trust>,
}

impl ServerCertVerifier for HostVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.trust
            .check(&self.addr, end_entity, intermediates, server_name, now)
            .map(|()| ServerCertVerified::assertion())
            .map_err(|r| refusal_error(*r))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.trust.provider.signature_verification_algorithms,
        )
        .map_err(|e| self.trust.signature_refusal(&self.addr, cert, e))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.trust.provider.signature_verification_algorithms,
        )
        .map_err(|e| self.trust.signature_refusal(&self.addr, cert, e))
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.trust
            .provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
