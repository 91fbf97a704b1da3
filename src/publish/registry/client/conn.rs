//! The connection to one repository: how to reach the registry
//! (`Options`), the `Client` with its credentials and current
//! `Authorization`, the first `GET /v2/` (HTTP after HTTPS only with
//! --insecure), each request sent (once more with credentials after a 401)
//! and the retry loop every operation runs in. In: a `DockerRef` and
//! `Options`; out: HTTP responses to the operations of the sibling files.
use super::super::auth::{self, Credentials};
use super::wire::{header, sleep, Body, Fault};
use crate::image::fetch::RetryPolicy;
use crate::image::imageref::DockerRef;
use crate::util::http;
use anyhow::{anyhow, bail, Context, Result};
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How to reach a registry.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Credentials file (containers-auth.json); else REGISTRY_AUTH_FILE,
    /// else the default locations.
    pub authfile: Option<PathBuf>,
    /// Plain HTTP, or HTTPS without verification (test registries).
    pub insecure: bool,
    /// A PEM file of CAs to trust besides the system's.
    pub ca_file: Option<PathBuf>,
    /// A directory of `*.crt` CA files to trust besides the system's
    /// (`--cert-dir`; `generate --push` reuses generate's).
    pub ca_dir: Option<PathBuf>,
    /// Chunk size of blob uploads (bytes).
    pub chunk: u64,
}

/// Default upload chunk: large enough that the per-request round trip is
/// noise, small enough that a failure repeats little.
pub const DEFAULT_CHUNK: u64 = 64 << 20;

/// One registry repository, with its credentials and current token.
pub struct Client {
    pub(super) agent: ureq::Agent,
    /// `https://host` or, with --insecure when HTTPS fails, `http://host`.
    pub(super) base: String,
    pub host: String,
    pub repo: String,
    pub(super) creds: Option<Credentials>,
    /// The `Authorization` value in use.
    pub(super) authz: Mutex<Option<String>>,
    pub(super) chunk: u64,
    pub retry: RetryPolicy,
}

impl Client {
    /// A client for `r`'s repository: credentials looked up, the registry
    /// reached (`GET /v2/`), HTTP tried after HTTPS only with --insecure.
    pub fn connect(r: &DockerRef, o: &Options) -> Result<Client> {
        let files = auth::auth_files(o.authfile.as_deref())?;
        let creds = auth::lookup(&files, &r.registry, &r.repository)?;
        let trust = match (&o.ca_file, &o.ca_dir) {
            (Some(f), _) => http::Trust::SystemAnd(f, "--ca-file"),
            (None, Some(d)) => http::Trust::SystemAndDir(d, "--cert-dir"),
            (None, None) => http::Trust::System,
        };
        let agent = http::agent(trust, o.insecure, Duration::from_secs(300))?;
        let mut c = Client {
            agent,
            base: format!("https://{}", r.registry),
            host: r.registry.clone(),
            repo: r.repository.clone(),
            creds,
            authz: Mutex::new(None),
            chunk: if o.chunk == 0 { DEFAULT_CHUNK } else { o.chunk },
            retry: RetryPolicy::from_env(),
        };
        match c.ping() {
            Ok(()) => Ok(c),
            Err(e) if o.insecure => {
                tracing::info!("registry {}: HTTPS failed ({e:#}); trying HTTP (--insecure)", c.host);
                c.base = format!("http://{}", r.registry);
                c.ping().map(|()| c).map_err(|e2| {
                    anyhow!(
                        "registry {}: not reachable over HTTPS ({e:#}) nor HTTP ({e2:#})",
                        r.registry
                    )
                })
            }
            Err(e) if format!("{e:#}").contains("TLS") => Err(e.context(format!(
                "cannot verify registry {} (give the CA that signed its certificate with --ca-file FILE or --cert-dir DIR, or --insecure for a test registry)",
                r.registry
            ))),
            Err(e) if format!("{e:#}").to_lowercase().contains("refused") => Err(e.context(format!(
                "cannot reach registry {} (is it running, and is the host:port right?)",
                r.registry
            ))),
            Err(e) => Err(e),
        }
    }

    fn ping(&self) -> Result<()> {
        let url = format!("{}/v2/", self.base);
        let r = self.send("GET", &url, &[], Body::Empty, false)?;
        match r.status().as_u16() {
            200 | 401 => Ok(()),
            s => bail!(
                "registry {}: GET /v2/ answered HTTP {s}: not an OCI registry at this address?",
                self.host
            ),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}/v2/{}/{path}", self.base, self.repo)
    }

    /// A `Location` header made absolute.
    pub(super) fn absolute(&self, loc: &str) -> String {
        if loc.starts_with("http://") || loc.starts_with("https://") {
            loc.to_string()
        } else {
            format!("{}{}", self.base, loc)
        }
    }

    /// One request: as is, and once more with credentials when the
    /// registry answers 401 (`retry_auth`).
    pub(super) fn send(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, String)],
        body: Body<'_>,
        retry_auth: bool,
    ) -> Result<ureq::http::Response<ureq::Body>> {
        let r = self.send_once(method, url, headers, &body)?;
        if r.status().as_u16() != 401 || !retry_auth && self.authz.lock().unwrap().is_some() {
            return Ok(r);
        }
        let challenge = header(&r, "WWW-Authenticate").unwrap_or_default();
        self.authenticate(&challenge)?;
        let r = self.send_once(method, url, headers, &body)?;
        if r.status().as_u16() == 401 {
            bail!("{}", self.refused());
        }
        Ok(r)
    }

    fn send_once(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, String)],
        body: &Body<'_>,
    ) -> Result<ureq::http::Response<ureq::Body>> {
        let mut b = ureq::http::Request::builder().method(method).uri(url);
        for (k, v) in headers {
            b = b.header(*k, v.as_str());
        }
        if let Some(a) = self.authz.lock().unwrap().clone() {
            b = b.header("Authorization", a);
        }
        let res = match body {
            Body::Empty => {
                if matches!(method, "POST" | "PUT" | "PATCH") {
                    b = b.header("Content-Length", "0");
                }
                self.agent.run(b.body(()).context("an HTTP request")?)
            }
            Body::Bytes(x) => self.agent.run(b.body(*x).context("an HTTP request")?),
            Body::File { path, at, len } => {
                let mut f = std::fs::File::open(path)
                    .with_context(|| format!("opening {}", path.display()))?;
                f.seek(SeekFrom::Start(*at))?;
                let mut r = f.take(*len);
                let b = b.header("Content-Length", len.to_string());
                self.agent.run(
                    b.body(ureq::SendBody::from_reader(&mut r))
                        .context("an HTTP request")?,
                )
            }
        };
        res.map_err(|e| {
            anyhow!(
                "registry {}: {method} {}: {}",
                self.host,
                url.split('?').next().unwrap_or(url),
                http::transport(e)
            )
        })
    }

    /// `op` with retries on transient faults within the retry budget.
    pub(super) fn retrying<T>(
        &self,
        what: &str,
        mut op: impl FnMut() -> Result<T, Fault>,
    ) -> Result<T> {
        let t0 = Instant::now();
        let mut delay = self.retry.first;
        let mut attempt = 1;
        loop {
            match op() {
                Ok(v) => return Ok(v),
                Err(Fault::Fatal(e)) => return Err(e),
                Err(Fault::Transient(e)) => {
                    if t0.elapsed() + delay > self.retry.budget {
                        return Err(e.context(format!(
                            "{what}: gave up after {attempt} attempts in {:.0?}",
                            t0.elapsed()
                        )));
                    }
                    tracing::warn!("{what}: {e:#}; again in {delay:.0?}");
                    sleep(delay)?;
                    delay = (delay * 2).min(self.retry.max_delay);
                    attempt += 1;
                }
            }
        }
    }
}
