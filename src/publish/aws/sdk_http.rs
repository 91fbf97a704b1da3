//! The HTTP client the AWS SDK (EBS) runs on: rustls with ring, trusting
//! the system's roots plus the PEM file named by `$AWS_CA_BUNDLE`.
use anyhow::{Context, Result};

/// The HTTP client: rustls with ring, the system's roots plus
/// `$AWS_CA_BUNDLE` (private regions often use a private CA).
pub(super) fn http_client() -> Result<aws_sdk_ebs::config::SharedHttpClient> {
    use aws_smithy_http_client::{tls, Builder};
    let b = Builder::new().tls_provider(tls::Provider::Rustls(
        tls::rustls_provider::CryptoMode::Ring,
    ));
    let b = match std::env::var_os("AWS_CA_BUNDLE") {
        Some(p) if !p.is_empty() => {
            let pem = std::fs::read(&p).with_context(|| {
                format!(
                    "reading AWS_CA_BUNDLE {}",
                    std::path::Path::new(&p).display()
                )
            })?;
            let ctx = tls::TlsContext::builder()
                .with_trust_store(tls::TrustStore::default().with_pem_certificate(pem))
                .build()
                .context("AWS_CA_BUNDLE")?;
            b.tls_context(ctx)
        }
        _ => b,
    };
    Ok(b.build_https())
}
