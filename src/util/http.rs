//! The blocking HTTP agent of our own API clients (the vSphere SOAP client,
//! the EC2 Query client): ureq over the tree's rustls with ring, trusting
//! the system store, a CA file instead of it, or both; and one way of
//! saying why a connection failed.
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The connection could not be made or TLS refused it: the cause, said for
/// a person (the caller adds the URL and the fix).
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("TLS: {0}")]
    Tls(String),
    #[error("{0}")]
    Connect(String),
}

/// Which CAs the agent trusts. The `&str` names where the file came from
/// (an option or environment variable), for errors.
#[derive(Debug, Clone, Copy)]
pub enum Trust<'a> {
    /// The system store.
    System,
    /// Only the PEM file's CAs.
    Only(&'a Path, &'a str),
    /// The system store and the PEM file's CAs.
    SystemAnd(&'a Path, &'a str),
    /// The system store and the CAs of every `*.crt` in the directory (a
    /// containers `certs.d` directory, as `--cert-dir` gives to skopeo).
    SystemAndDir(&'a Path, &'a str),
}

/// The `*.crt` files of a certificate directory, sorted; an error naming
/// the directory when it has none.
fn crt_files(dir: &Path, from: &str) -> Result<Vec<std::path::PathBuf>> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| {
            format!(
                "reading the certificate directory {} ({from})",
                dir.display()
            )
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "crt"))
        .collect();
    v.sort();
    if v.is_empty() {
        bail!(
            "certificate directory {} ({from}) holds no *.crt file: put the PEM of the CA that signed the server's certificate there as NAME.crt",
            dir.display()
        );
    }
    Ok(v)
}

fn system_roots() -> Vec<ureq::tls::Certificate<'static>> {
    rustls_native_certs::load_native_certs()
        .certs
        .iter()
        .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
        .collect()
}

fn pem_roots(f: &Path, from: &str) -> Result<Vec<ureq::tls::Certificate<'static>>> {
    use ureq::tls::PemItem;
    let pem = std::fs::read(f)
        .with_context(|| format!("reading the CA file {} ({from})", f.display()))?;
    let mut v = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        if let PemItem::Certificate(c) =
            item.with_context(|| format!("CA file {} ({from}): bad PEM", f.display()))?
        {
            v.push(c.to_owned());
        }
    }
    if v.is_empty() {
        bail!(
            "CA file {} ({from}) holds no certificate: give the PEM of the CA that signed the server's certificate",
            f.display()
        );
    }
    Ok(v)
}

/// An agent that does not turn HTTP error statuses into errors (the
/// callers read the service's error body), follows no redirect, and gives
/// up connecting after 15 s and waiting for an answer after `recv`.
pub fn agent(trust: Trust<'_>, insecure: bool, recv: Duration) -> Result<ureq::Agent> {
    agent_following(trust, insecure, recv, 0)
}

/// [`agent`], following up to `redirects` redirects (as Go's default
/// client follows 10: what a signature store behind a CDN needs).
pub fn agent_following(
    trust: Trust<'_>,
    insecure: bool,
    recv: Duration,
    redirects: u32,
) -> Result<ureq::Agent> {
    use ureq::tls::{RootCerts, TlsConfig, TlsProvider};
    let roots = match trust {
        Trust::System => system_roots(),
        Trust::Only(f, from) => pem_roots(f, from)?,
        Trust::SystemAnd(f, from) => {
            let mut v = system_roots();
            v.extend(pem_roots(f, from)?);
            v
        }
        Trust::SystemAndDir(d, from) => {
            let mut v = system_roots();
            for f in crt_files(d, from)? {
                v.extend(pem_roots(&f, from)?);
            }
            v
        }
    };
    let tls = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .root_certs(RootCerts::Specific(Arc::new(roots)))
        .disable_verification(insecure)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .build();
    Ok(ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(15)))
        .timeout_recv_response(Some(recv))
        .max_redirects(redirects)
        .build()
        .into())
}

/// Say a ureq error as a transport cause.
pub fn transport(e: ureq::Error) -> TransportError {
    let msg = match &e {
        ureq::Error::Rustls(r) => return TransportError::Tls(tls_cause(r)),
        ureq::Error::Tls(s) => return TransportError::Tls(s.to_string()),
        ureq::Error::Io(io) => {
            // rustls errors surface as io errors from the stream.
            if let Some(r) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                return TransportError::Tls(tls_cause(r));
            }
            format!("{io}")
        }
        ureq::Error::HostNotFound => "host not found (DNS)".into(),
        ureq::Error::ConnectionFailed => "connection refused or unreachable".into(),
        ureq::Error::Timeout(t) => format!("timed out ({t})"),
        other => other.to_string(),
    };
    TransportError::Connect(msg)
}

fn tls_cause(e: &rustls::Error) -> String {
    use rustls::{CertificateError, Error};
    match e {
        Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "the server's certificate is signed by an unknown CA".into()
        }
        Error::InvalidCertificate(CertificateError::NotValidForName) => {
            "the server's certificate is not valid for this host name".into()
        }
        Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected,
            presented,
        }) => format!(
            "the server's certificate is for {} but the URL names {}",
            if presented.is_empty() {
                "no name".to_string()
            } else {
                // rustls says `DnsName("x")` / `IpAddress(..)`: the names.
                presented
                    .iter()
                    .map(|p| {
                        p.split_once("(\"")
                            .and_then(|(_, r)| r.strip_suffix("\")"))
                            .unwrap_or(p)
                            .to_string()
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            expected.to_str()
        ),
        Error::InvalidCertificate(c) => format!("invalid certificate: {c:?}"),
        other => other.to_string(),
    }
}
