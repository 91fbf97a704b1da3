//! The HTTP agent of a vSphere session when TLS is verified: ureq over a
//! TLS connector of our own, so that each connection's rustls verifier is
//! [`Trust`]'s for that host (ureq's own connector takes only a root
//! list, which cannot trust a certificate as itself or by thumbprint).
//! The chain is ureq's usual one otherwise: an HTTP CONNECT proxy if the
//! environment names one, TCP, then TLS. Also: a ureq error said as the
//! [`Refusal`] inside it, when there is one.
use anyhow::Result;
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, StreamOwned};
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{
    Buffers, ConnectProxyConnector, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout,
    TcpConnector, Transport, TransportAdapter,
};

use super::trust::{host_addr, refusal_in, Refusal, Trust};
use crate::util::http::{transport, TransportError};

/// An agent whose TLS trust is `trust`'s; HTTP as `util::http::agent`
/// sets it (error statuses returned, no redirects, 15 s to connect,
/// `recv` to wait for an answer).
pub fn agent(trust: Arc<Trust>, recv: Duration) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(15)))
        .timeout_recv_response(Some(recv))
        .max_redirects(0)
        .build();
    let connector =
        ().chain(ConnectProxyConnector::default())
            .chain(TcpConnector::default())
            .chain(TrustedTls { trust });
    ureq::Agent::with_parts(config, connector, DefaultResolver::default())
}

/// Wraps the chained transport in TLS verified by [`Trust`].
struct TrustedTls {
    trust: Arc<Trust>,
}

impl std::fmt::Debug for TrustedTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustedTls").finish_non_exhaustive()
    }
}

impl<In: Transport> Connector<In> for TrustedTls {
    type Out = Either<In, TlsTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(inner) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || inner.is_tls() {
            return Ok(Some(Either::A(inner)));
        }
        let authority = details
            .uri
            .authority()
            .ok_or(ureq::Error::Tls("a URL without a host"))?;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let addr = match authority.port_u16() {
            Some(p) => format!("{}:{p}", authority.host()),
            None => host_addr(authority.host()),
        };
        let name =
            ServerName::try_from(host).map_err(|_| ureq::Error::Tls("an invalid host name"))?;
        let config = self
            .trust
            .client_config(&addr)
            .map_err(|e| ureq::Error::Io(std::io::Error::other(e)))?;
        let mut conn = ClientConnection::new(config, name)
            .map_err(|e| ureq::Error::Io(std::io::Error::other(e)))?;
        let mut sock = TransportAdapter::new(
            Box::new(inner) as Box<dyn Transport>,
            details.current_time.clone(),
        );
        sock.set_timeout(details.timeout);
        conn.complete_io(&mut sock)?;
        Ok(Some(Either::B(TlsTransport {
            buffers: LazyBuffers::new(
                details.config.input_buffer_size(),
                details.config.output_buffer_size(),
            ),
            stream: StreamOwned { conn, sock },
        })))
    }
}

/// A TLS stream as a ureq transport.
pub struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl std::fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsTransport").finish_non_exhaustive()
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let out = &self.buffers.output()[..amount];
        self.stream.write_all(out)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let n = self.stream.read(self.buffers.input_append_buf())?;
        self.buffers.input_appended(n);
        Ok(n > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}

/// The [`Refusal`] a ureq error carries, if any.
fn refusal(e: &ureq::Error) -> Option<Refusal> {
    let io = match e {
        ureq::Error::Io(io) => io,
        ureq::Error::Rustls(r) => return refusal_in(r).cloned(),
        _ => return None,
    };
    let inner = io.get_ref()?;
    if let Some(r) = inner.downcast_ref::<rustls::Error>() {
        return refusal_in(r).cloned();
    }
    inner.downcast_ref::<Refusal>().cloned()
}

/// A ureq error as the session says it: the [`Refusal`] of a certificate,
/// else a [`TransportError`].
pub fn error(e: ureq::Error) -> anyhow::Error {
    match refusal(&e) {
        Some(r) => r.into(),
        None => {
            let t: TransportError = transport(e);
            t.into()
        }
    }
}
