//! Why a certificate is refused, said in one line: a [`Refusal`] names the
//! host, the certificate's subject, issuer and thumbprint, the cause (a
//! webpki error read back into words, an out-of-date period, a pin that
//! does not match, an RSA key too small for rustls) and the one fix that
//! applies, never to set a variable that is already set
//! (fixtures/UPSTREAM.md §26). The decision itself is
//! [`Trust::check`](super::Trust)'s; this is what it says.
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::CertificateError;
use std::sync::Arc;

use super::super::cert::{utc, CertInfo};
use super::known_hosts::KNOWN_HOSTS_VAR;
use super::{Trust, CA_VAR};

/// The names a certificate is for, from rustls' name error
/// (`DnsName("x")`, `IpAddress(1.2.3.4)`).
fn presented_names(presented: &[String]) -> String {
    if presented.is_empty() {
        return "no name".into();
    }
    presented
        .iter()
        .map(|p| {
            if let Some(d) = p
                .strip_prefix("DnsName(\"")
                .and_then(|r| r.strip_suffix("\")"))
            {
                return d.to_string();
            }
            match p
                .strip_prefix("IpAddress(")
                .and_then(|r| r.strip_suffix(')'))
            {
                // webpki writes `0::1`: the address as it is usually written.
                Some(ip) => ip
                    .parse::<std::net::IpAddr>()
                    .map_or_else(|_| ip.to_string(), |a| a.to_string()),
                None => p.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn server_name_str(n: &ServerName<'_>) -> String {
    n.to_str().into_owned()
}

/// Why a certificate is not trusted by its chain.
pub(super) enum Untrusted {
    /// Signed by no CA in the roots (or a CA certificate in none of them).
    Issuer,
    /// The name in the URL is not one the certificate is for.
    Name { names: String, url: String },
    /// Another reason webpki gives.
    Other(String),
}

/// The certificate is refused whatever is pinned.
pub(super) struct Invalid {
    pub(super) cause: String,
    pub(super) fix: String,
}

/// A refused server certificate, said in one line: the host, why, the
/// certificate's subject, issuer and thumbprint, and the one fix.
#[derive(Debug, Clone, thiserror::Error)]
#[error("TLS verification failed for {host}: {cause} (certificate subject \"{subject}\", issuer \"{issuer}\", SHA-1 thumbprint {thumbprint}); {fix}")]
pub struct Refusal {
    /// `host:port`, with "ESXi host" for one an NFC lease named.
    pub host: String,
    pub cause: String,
    pub subject: String,
    pub issuer: String,
    pub thumbprint: String,
    pub fix: String,
}

impl Trust {
    fn label(&self, addr: &str) -> String {
        if addr == self.vcenter {
            addr.to_string()
        } else {
            format!("ESXi host {addr}")
        }
    }

    pub(super) fn refusal(
        &self,
        addr: &str,
        info: &CertInfo,
        cause: String,
        fix: String,
    ) -> Box<Refusal> {
        Box::new(Refusal {
            host: self.label(addr),
            cause,
            subject: info.subject.clone(),
            issuer: info.issuer.clone(),
            thumbprint: info.sha1.clone(),
            fix,
        })
    }

    /// The validity period, for a certificate trusted as itself (webpki
    /// checks it for the others).
    pub(super) fn period(info: &CertInfo, now: UnixTime) -> Option<Invalid> {
        let now = now.as_secs() as i64;
        if let Some(nb) = info.not_before.filter(|&t| now < t) {
            return Some(Invalid {
                cause: format!("its certificate is not valid before {}", utc(nb)),
                fix: "check this machine's clock".into(),
            });
        }
        if let Some(na) = info.not_after.filter(|&t| now > t) {
            return Some(Invalid {
                cause: format!("its certificate expired on {}", utc(na)),
                fix: "have the host's certificate renewed".into(),
            });
        }
        None
    }

    /// webpki's refusal: for lack of trust (a pin may still trust it), or
    /// for good.
    pub(super) fn classify(
        e: rustls::Error,
        info: &CertInfo,
        name: &ServerName<'_>,
    ) -> Result<Untrusted, Invalid> {
        let e = match e {
            rustls::Error::InvalidCertificate(c) => c,
            other => return Ok(Untrusted::Other(other.to_string())),
        };
        let renew = || "have the host's certificate renewed".to_string();
        match e {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                Ok(Untrusted::Issuer)
            }
            CertificateError::NotValidForName => Ok(Untrusted::Name {
                names: "other names".into(),
                url: server_name_str(name),
            }),
            CertificateError::NotValidForNameContext {
                expected,
                presented,
            } => Ok(Untrusted::Name {
                names: presented_names(&presented),
                url: server_name_str(&expected),
            }),
            // The context's time is that of the certificate of the chain
            // that is out of date (the server's, or a CA's).
            CertificateError::ExpiredContext { not_after, .. } => Err(Invalid {
                cause: format!(
                    "its certificate (or a CA's in its chain) expired on {}",
                    utc(not_after.as_secs() as i64)
                ),
                fix: renew(),
            }),
            CertificateError::Expired => Err(Invalid {
                cause: match info.not_after {
                    Some(t) => format!("its certificate expired on {}", utc(t)),
                    None => "its certificate has expired".into(),
                },
                fix: renew(),
            }),
            CertificateError::NotValidYetContext { not_before, .. } => Err(Invalid {
                cause: format!(
                    "its certificate (or a CA's in its chain) is not valid before {}",
                    utc(not_before.as_secs() as i64)
                ),
                fix: "check this machine's clock".into(),
            }),
            CertificateError::NotValidYet => Err(Invalid {
                cause: match info.not_before {
                    Some(t) => format!("its certificate is not valid before {}", utc(t)),
                    None => "its certificate is not valid yet".into(),
                },
                fix: "check this machine's clock".into(),
            }),
            CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
                Err(Invalid {
                    cause:
                        "its certificate is not for TLS server authentication (extended key usage)"
                            .into(),
                    fix: "have the host's certificate reissued with serverAuth usage".into(),
                })
            }
            CertificateError::Revoked => Err(Invalid {
                cause: "its certificate is revoked".into(),
                fix: renew(),
            }),
            CertificateError::Other(o) if format!("{o:?}").contains("CaUsedAsEndEntity") => {
                Ok(Untrusted::Issuer)
            }
            other => Ok(Untrusted::Other(format!("{other:?}"))),
        }
    }

    /// The one fix for a certificate that nothing trusts.
    pub(super) fn untrusted_fix(
        &self,
        addr: &str,
        info: &CertInfo,
        why: &Untrusted,
        name_ok: bool,
    ) -> String {
        let line = format!("\"{addr} {}\"", info.sha1);
        // A name mismatch comes after the chain verified: for vCenter, the
        // URL is what to change.
        if matches!(why, Untrusted::Name { .. }) && addr == self.vcenter {
            return "use a host name the certificate is for in GOVC_URL".into();
        }
        if let Some(kh) = &self.known_hosts {
            let f = kh
                .files
                .first()
                .map(|f| f.display().to_string())
                .unwrap_or_default();
            return format!(
                "if that is {addr}'s certificate, add the line {line} to {f} ({KNOWN_HOSTS_VAR})"
            );
        }
        if info.self_issued || !name_ok {
            return format!(
                "if that is {addr}'s certificate, pin it: set {KNOWN_HOSTS_VAR} to a file holding the line {line}"
            );
        }
        match &self.ca {
            Some(c) => format!(
                "add the PEM of the CA that signed it (\"{}\") to {} ({CA_VAR})",
                info.issuer, c.spec
            ),
            None => format!(
                "set {CA_VAR} to the PEM of the CA that signed it (\"{}\")",
                info.issuer
            ),
        }
    }

    pub(super) fn untrusted_cause(&self, why: &Untrusted, info: &CertInfo) -> String {
        let trusted_by = match &self.ca {
            Some(c) => format!("{} ({CA_VAR})", c.spec),
            None => "the system's trust store".into(),
        };
        match why {
            Untrusted::Issuer if info.self_issued => {
                format!("its self-signed certificate is not in {trusted_by}")
            }
            Untrusted::Issuer => {
                format!("its certificate is signed by an unknown CA (none in {trusted_by})")
            }
            Untrusted::Name { names, url } => {
                format!("its certificate is for {names} but the URL names {url}")
            }
            Untrusted::Other(o) => format!("its certificate is not trusted: {o}"),
        }
    }

    /// A handshake signature failed: said as a refusal when the key is
    /// one rustls does not take (RSA under 2048 bits, as govmomi 0.24's
    /// simulator certificate), else rustls' own error.
    pub(super) fn signature_refusal(
        &self,
        addr: &str,
        cert: &CertificateDer<'_>,
        e: rustls::Error,
    ) -> rustls::Error {
        let info = CertInfo::parse(cert);
        match info.rsa_bits {
            Some(bits) if bits < 2048 => {
                let r = self.refusal(
                    addr,
                    &info,
                    format!("its certificate's RSA key has {bits} bits, fewer than the 2048 this tool's TLS (rustls) accepts"),
                    "have the host's certificate reissued with an RSA key of 2048 bits or more, or an ECDSA key".into(),
                );
                refusal_error(*r)
            }
            _ => e,
        }
    }
}

/// A refusal as the rustls error a verifier returns.
pub(super) fn refusal_error(r: Refusal) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(r))))
}

/// The [`Refusal`] inside a rustls error, if it is one.
pub fn refusal_in(e: &rustls::Error) -> Option<&Refusal> {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::Other(o)) => {
            o.0.downcast_ref::<Refusal>()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_written() {
        let v = vec![
            "DnsName(\"example.com\")".to_string(),
            "IpAddress(127.0.0.1)".to_string(),
            "IpAddress(0::1)".to_string(),
        ];
        assert_eq!(presented_names(&v), "example.com, 127.0.0.1, ::1");
        assert_eq!(presented_names(&[]), "no name");
    }
}
