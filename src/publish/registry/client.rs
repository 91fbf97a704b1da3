//! A client of the OCI distribution API (opencontainers/distribution-spec
//! v1.1, spec.md; UPSTREAM.md section 23): blobs checked with HEAD, pushed
//! in one request when small and in chunks (PATCH with Content-Range) when
//! large, a failed chunk resumed from the offset the registry reports
//! (GET on the upload URL, its `Range`), manifests by tag or digest, and
//! the tag list. Authentication as registries ask for it
//! (`WWW-Authenticate`): Basic with the user's credentials, or a Bearer
//! token from the realm the registry names (docker's token protocol).
use super::auth::{self, Credentials};
use crate::image::fetch::RetryPolicy;
use crate::image::imageref::DockerRef;
use crate::util::http;
use crate::util::sha256::Sha256;
use anyhow::{anyhow, bail, Context, Result};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const MANIFEST_OCI: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX_OCI: &str = "application/vnd.oci.image.index.v1+json";
const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";

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

/// A request body.
enum Body<'a> {
    Empty,
    Bytes(&'a [u8]),
    /// `len` bytes of the file from `at`.
    File {
        path: &'a Path,
        at: u64,
        len: u64,
    },
}

/// One registry repository, with its credentials and current token.
pub struct Client {
    agent: ureq::Agent,
    /// `https://host` or, with --insecure when HTTPS fails, `http://host`.
    base: String,
    pub host: String,
    pub repo: String,
    creds: Option<Credentials>,
    /// The `Authorization` value in use.
    authz: Mutex<Option<String>>,
    chunk: u64,
    pub retry: RetryPolicy,
}

/// A blob push's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// The registry had it already.
    Existed,
    Uploaded,
}

/// A manifest as the registry holds it.
pub struct Manifest {
    pub media_type: String,
    pub bytes: Vec<u8>,
    pub digest: String,
}

/// `key="value"` pairs of a `WWW-Authenticate` challenge after its scheme.
fn challenge_params(s: &str) -> Vec<(String, String)> {
    let mut v = Vec::new();
    let mut rest = s;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim().trim_start_matches(',').trim().to_string();
        let after = &rest[eq + 1..];
        let (val, next) = if let Some(q) = after.strip_prefix('"') {
            match q.find('"') {
                Some(end) => (q[..end].to_string(), &q[end + 1..]),
                None => (q.to_string(), ""),
            }
        } else {
            match after.find(',') {
                Some(end) => (after[..end].trim().to_string(), &after[end..]),
                None => (after.trim().to_string(), ""),
            }
        };
        v.push((key.to_ascii_lowercase(), val));
        rest = next;
    }
    v
}

/// Percent-encoding of a query value.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn header(r: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The registry's error body, short: the first `errors[].message` (and
/// code) of the distribution spec's error format, or the text.
fn error_text(r: &mut ureq::http::Response<ureq::Body>) -> String {
    let body = r
        .body_mut()
        .with_config()
        .limit(64 << 10)
        .read_to_string()
        .unwrap_or_default();
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) {
        if let Some(e) = v["errors"].as_array().and_then(|a| a.first()) {
            let code = e["code"].as_str().unwrap_or("");
            let msg = e["message"].as_str().unwrap_or("");
            return format!("{code}: {msg}")
                .trim_matches([' ', ':'])
                .to_string();
        }
    }
    body.chars()
        .take(200)
        .collect::<String>()
        .trim()
        .to_string()
}

/// A JSON response body of at most `limit` bytes.
fn json_body(
    r: &mut ureq::http::Response<ureq::Body>,
    limit: u64,
    what: &str,
) -> Result<serde_json::Value> {
    let text = r
        .body_mut()
        .with_config()
        .limit(limit)
        .read_to_string()
        .with_context(|| format!("reading {what}"))?;
    serde_json::from_str(&text).with_context(|| format!("{what} is not JSON"))
}

/// A transient fault: worth another attempt.
fn transient_status(s: u16) -> bool {
    matches!(s, 408 | 429 | 500 | 502 | 503 | 504)
}

/// The end offset (exclusive) a `Range: 0-N` header reports. `0-0` is
/// read as nothing: distribution sends it for an empty session too (it
/// cannot say "one byte" apart), and a wrong guess only costs a retry: the
/// closing PUT's digest check refuses a blob that is not whole.
fn range_end(r: &ureq::http::Response<ureq::Body>) -> Option<u64> {
    let v = header(r, "Range")?;
    let (_, end) = v.trim().trim_start_matches("bytes=").split_once('-')?;
    match end.trim().parse::<u64>().ok()? {
        0 => Some(0),
        e => Some(e + 1),
    }
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
    fn absolute(&self, loc: &str) -> String {
        if loc.starts_with("http://") || loc.starts_with("https://") {
            loc.to_string()
        } else {
            format!("{}{}", self.base, loc)
        }
    }

    /// One request: as is, and once more with credentials when the
    /// registry answers 401 (`retry_auth`).
    fn send(
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

    fn refused(&self) -> String {
        match &self.creds {
            Some(c) => format!(
                "registry {} refused the credentials of {} from {} (HTTP 401); podman login {} writes new ones",
                self.host,
                c.user,
                c.from.display(),
                self.host
            ),
            None => format!(
                "registry {} wants credentials and none were found (--authfile, REGISTRY_AUTH_FILE or podman login {})",
                self.host, self.host
            ),
        }
    }

    /// Answer a challenge: Basic takes the credentials as they are; Bearer
    /// trades them for a token with pull and push on the repository.
    fn authenticate(&self, challenge: &str) -> Result<()> {
        let (scheme, rest) = challenge
            .trim()
            .split_once(' ')
            .unwrap_or((challenge.trim(), ""));
        match scheme.to_ascii_lowercase().as_str() {
            "basic" => {
                let c = self
                    .creds
                    .as_ref()
                    .ok_or_else(|| anyhow!("{}", self.refused()))?;
                *self.authz.lock().unwrap() = Some(c.basic());
                Ok(())
            }
            "bearer" => {
                let p = challenge_params(rest);
                let get = |k: &str| p.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone());
                let realm = get("realm").ok_or_else(|| {
                    anyhow!(
                        "registry {}: a Bearer challenge without realm: {challenge}",
                        self.host
                    )
                })?;
                let mut url = format!(
                    "{realm}?scope={}",
                    enc(&format!("repository:{}:pull,push", self.repo))
                );
                if let Some(s) = get("service") {
                    url.push_str(&format!("&service={}", enc(&s)));
                }
                let mut b = ureq::http::Request::builder().method("GET").uri(&url);
                if let Some(c) = &self.creds {
                    b = b.header("Authorization", c.basic());
                }
                let mut r = self
                    .agent
                    .run(b.body(()).context("a token request")?)
                    .map_err(|e| {
                        anyhow!(
                            "registry {}: token from {realm}: {}",
                            self.host,
                            http::transport(e)
                        )
                    })?;
                let status = r.status().as_u16();
                if status == 401 || status == 403 {
                    bail!("{}", self.refused());
                }
                if status != 200 {
                    bail!(
                        "registry {}: token from {realm}: HTTP {status}: {}",
                        self.host,
                        error_text(&mut r)
                    );
                }
                let v = json_body(&mut r, 1 << 20, "the token response")?;
                let t = v["token"]
                    .as_str()
                    .or_else(|| v["access_token"].as_str())
                    .ok_or_else(|| {
                        anyhow!("registry {}: the token response has no token", self.host)
                    })?;
                *self.authz.lock().unwrap() = Some(format!("Bearer {t}"));
                Ok(())
            }
            _ => bail!("{}", self.refused()),
        }
    }

    /// `op` with retries on transient faults within the retry budget.
    fn retrying<T>(&self, what: &str, mut op: impl FnMut() -> Result<T, Fault>) -> Result<T> {
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

    /// The blob's size when the repository has it.
    pub fn blob_size(&self, digest: &str) -> Result<Option<u64>> {
        let url = self.url(&format!("blobs/{digest}"));
        self.retrying(
            &format!("registry {}: HEAD blob {digest}", self.host),
            || {
                let r = self
                    .send("HEAD", &url, &[], Body::Empty, true)
                    .map_err(Fault::Transient)?;
                match r.status().as_u16() {
                    200 => Ok(header(&r, "Content-Length").and_then(|v| v.parse().ok())),
                    404 => Ok(None),
                    s if transient_status(s) => Err(Fault::Transient(anyhow!("HTTP {s}"))),
                    s => Err(Fault::Fatal(anyhow!(
                        "registry {}: HEAD {digest}: HTTP {s}",
                        self.host
                    ))),
                }
            },
        )
    }

    /// Push the blob that is `size` bytes of `path` from `start` (an OCI
    /// archive member, or the whole file) unless the repository has it;
    /// `progress` gets the bytes sent so far.
    pub fn push_blob(
        &self,
        path: &Path,
        start: u64,
        digest: &str,
        size: u64,
        progress: &dyn Fn(u64),
    ) -> Result<Pushed> {
        if self.blob_size(digest)? == Some(size) {
            progress(size);
            return Ok(Pushed::Existed);
        }
        let what = format!("registry {}: blob {digest} ({})", self.host, path.display());
        self.retrying(&what, || self.upload(path, start, digest, size, progress))?;
        Ok(Pushed::Uploaded)
    }

    /// Push `bytes` as a blob (configs, small documents).
    pub fn push_bytes(&self, bytes: &[u8]) -> Result<(String, Pushed)> {
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(bytes)));
        if self.blob_size(&digest)? == Some(bytes.len() as u64) {
            return Ok((digest, Pushed::Existed));
        }
        let what = format!("registry {}: blob {digest}", self.host);
        self.retrying(&what, || {
            let loc = self.start_upload()?;
            let url = with_digest(&loc, &digest);
            let mut r = self
                .send(
                    "PUT",
                    &url,
                    &[("Content-Type", "application/octet-stream".into())],
                    Body::Bytes(bytes),
                    true,
                )
                .map_err(Fault::Transient)?;
            self.expect_created(&mut r, &digest)
        })?;
        Ok((digest, Pushed::Uploaded))
    }

    fn expect_created(
        &self,
        r: &mut ureq::http::Response<ureq::Body>,
        digest: &str,
    ) -> Result<(), Fault> {
        match r.status().as_u16() {
            201 | 204 => Ok(()),
            s if transient_status(s) => {
                Err(Fault::Transient(anyhow!("HTTP {s}: {}", error_text(r))))
            }
            s => Err(Fault::Fatal(anyhow!(
                "registry {} refused blob {digest}: HTTP {s}: {}",
                self.host,
                error_text(r)
            ))),
        }
    }

    /// POST a new upload session: its absolute URL.
    fn start_upload(&self) -> Result<String, Fault> {
        let url = self.url("blobs/uploads/");
        let mut r = self
            .send("POST", &url, &[], Body::Empty, true)
            .map_err(Fault::Transient)?;
        match r.status().as_u16() {
            202 => header(&r, "Location")
                .map(|l| self.absolute(&l))
                .ok_or_else(|| Fault::Fatal(anyhow!("registry {}: an upload without Location", self.host))),
            s if transient_status(s) => Err(Fault::Transient(anyhow!("HTTP {s}"))),
            s => Err(Fault::Fatal(anyhow!(
                "registry {} refused an upload to {}: HTTP {s}: {} (push access to the repository?)",
                self.host,
                self.repo,
                error_text(&mut r)
            ))),
        }
    }

    /// Where an upload session stands: the bytes the registry has.
    fn upload_offset(&self, loc: &str) -> Result<Option<u64>> {
        let r = self.send("GET", loc, &[], Body::Empty, true)?;
        Ok(match r.status().as_u16() {
            204 | 202 | 200 => Some(range_end(&r).unwrap_or(0)),
            _ => None,
        })
    }

    /// One upload session: chunks from offset 0 (or where a failed chunk
    /// left the session, as the registry reports), then the closing PUT.
    fn upload(
        &self,
        path: &Path,
        start: u64,
        digest: &str,
        size: u64,
        progress: &dyn Fn(u64),
    ) -> Result<(), Fault> {
        let mut loc = self.start_upload()?;
        if size <= self.chunk {
            // Monolithic: the closing PUT carries the bytes.
            let mut r = self
                .send(
                    "PUT",
                    &with_digest(&loc, digest),
                    &[("Content-Type", "application/octet-stream".into())],
                    Body::File {
                        path,
                        at: start,
                        len: size,
                    },
                    true,
                )
                .map_err(Fault::Transient)?;
            self.expect_created(&mut r, digest)?;
            progress(size);
            return Ok(());
        }
        let mut at = 0u64;
        let mut failures = 0;
        while at < size {
            crate::util::cancel::check().map_err(Fault::Fatal)?;
            let n = self.chunk.min(size - at);
            let sent = self.send(
                "PATCH",
                &loc,
                &[
                    ("Content-Type", "application/octet-stream".into()),
                    ("Content-Range", format!("{at}-{}", at + n - 1)),
                ],
                Body::File {
                    path,
                    at: start + at,
                    len: n,
                },
                true,
            );
            let ok = match sent {
                Ok(mut r) => match r.status().as_u16() {
                    202 => {
                        if let Some(l) = header(&r, "Location") {
                            loc = self.absolute(&l);
                        }
                        at = range_end(&r).unwrap_or(at + n);
                        true
                    }
                    416 => false,
                    s if transient_status(s) => {
                        tracing::warn!("registry {}: chunk at {at}: HTTP {s}", self.host);
                        false
                    }
                    s => {
                        return Err(Fault::Fatal(anyhow!(
                            "registry {} refused a chunk of blob {digest}: HTTP {s}: {}",
                            self.host,
                            error_text(&mut r)
                        )))
                    }
                },
                Err(e) => {
                    tracing::warn!("{e:#}");
                    false
                }
            };
            if !ok {
                // Resume where the registry says the session is; a session
                // it forgot starts over (the caller's retry).
                failures += 1;
                if failures > 5 {
                    return Err(Fault::Transient(anyhow!(
                        "chunk at {at} failed {failures} times"
                    )));
                }
                sleep(self.retry.first).map_err(Fault::Fatal)?;
                match self.upload_offset(&loc) {
                    Ok(Some(off)) => at = off,
                    _ => {
                        return Err(Fault::Transient(anyhow!(
                            "the upload session was lost at {at}"
                        )))
                    }
                }
            }
            progress(at);
        }
        let mut r = self
            .send("PUT", &with_digest(&loc, digest), &[], Body::Empty, true)
            .map_err(Fault::Transient)?;
        self.expect_created(&mut r, digest)
    }

    /// A manifest by tag or digest; `None` when the repository has none.
    pub fn get_manifest(&self, reference: &str) -> Result<Option<Manifest>> {
        let url = self.url(&format!("manifests/{reference}"));
        self.retrying(
            &format!("registry {}: manifest {reference}", self.host),
            || {
                let mut r = self
                    .send("GET", &url, &[("Accept", ACCEPT.into())], Body::Empty, true)
                    .map_err(Fault::Transient)?;
                match r.status().as_u16() {
                    200 => {
                        let media_type = header(&r, "Content-Type").unwrap_or_default();
                        let bytes = r
                            .body_mut()
                            .with_config()
                            .limit(4 << 20)
                            .read_to_vec()
                            .map_err(|e| Fault::Transient(anyhow!("reading a manifest: {e}")))?;
                        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
                        if reference.starts_with("sha256:") && reference != digest {
                            return Err(Fault::Fatal(anyhow!(
                                "registry {}: manifest {reference} has digest {digest}",
                                self.host
                            )));
                        }
                        Ok(Some(Manifest {
                            media_type,
                            bytes,
                            digest,
                        }))
                    }
                    404 => Ok(None),
                    s if transient_status(s) => Err(Fault::Transient(anyhow!("HTTP {s}"))),
                    s => Err(Fault::Fatal(anyhow!(
                        "registry {}: manifest {reference}: HTTP {s}: {}",
                        self.host,
                        error_text(&mut r)
                    ))),
                }
            },
        )
    }

    /// PUT a manifest under `reference` (a tag, or its digest); its digest.
    pub fn put_manifest(&self, reference: &str, media_type: &str, bytes: &[u8]) -> Result<String> {
        let url = self.url(&format!("manifests/{reference}"));
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(bytes)));
        self.retrying(
            &format!("registry {}: manifest {reference}", self.host),
            || {
                let mut r = self
                    .send(
                        "PUT",
                        &url,
                        &[("Content-Type", media_type.to_string())],
                        Body::Bytes(bytes),
                        true,
                    )
                    .map_err(Fault::Transient)?;
                match r.status().as_u16() {
                    201 | 200 | 204 => Ok(()),
                    s if transient_status(s) => Err(Fault::Transient(anyhow!("HTTP {s}"))),
                    s => {
                        let why = error_text(&mut r);
                        // A registry that takes images only: the manifest
                        // (artifactType, a non-image layer) is what it
                        // refuses, not its bytes; say what would take it.
                        let fix = if matches!(s, 400 | 415)
                            && (why.contains("MANIFEST_INVALID")
                                || why.contains("UNSUPPORTED")
                                || why.to_lowercase().contains("media type"))
                        {
                            ": it does not take OCI artifacts (a manifest with an artifactType and a disk image as its layer); push to a registry that implements the OCI distribution spec 1.1 (docker-registry/distribution 2.8 and later, Quay, Harbor, Zot do)"
                        } else {
                            ""
                        };
                        Err(Fault::Fatal(anyhow!(
                            "registry {} refused the manifest {reference} ({media_type}): HTTP {s}: {why}{fix}",
                            self.host
                        )))
                    }
                }
            },
        )?;
        Ok(digest)
    }

    /// Every tag of the repository (following `Link` pages). Each page is
    /// retried like any other read: the fan-in lists tags while other
    /// pushes write, and a reset or a 5xx then must not end the push.
    pub fn tags(&self) -> Result<Vec<String>> {
        let mut url = self.url("tags/list?n=1000");
        let mut tags = Vec::new();
        let what = format!("registry {}: tags of {}", self.host, self.repo);
        loop {
            let page = self.retrying(&what, || {
                let mut r = self
                    .send("GET", &url, &[], Body::Empty, true)
                    .map_err(Fault::Transient)?;
                match r.status().as_u16() {
                    200 => {}
                    404 => return Ok(None),
                    s if transient_status(s) => return Err(Fault::Transient(anyhow!("HTTP {s}"))),
                    s => {
                        return Err(Fault::Fatal(anyhow!(
                            "{what}: HTTP {s}: {}",
                            error_text(&mut r)
                        )))
                    }
                }
                let link = header(&r, "Link");
                let v = json_body(&mut r, 16 << 20, "the tag list").map_err(Fault::Transient)?;
                Ok(Some((link, v)))
            })?;
            let Some((link, v)) = page else {
                return Ok(tags);
            };
            tags.extend(
                v["tags"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t.as_str().map(String::from)),
            );
            // `Link: </v2/<name>/tags/list?n=..&last=..>; rel="next"`.
            match link.and_then(|l| {
                let s = l.find('<')? + 1;
                let e = l.find('>')?;
                Some(self.absolute(&l[s..e]))
            }) {
                Some(next) => url = next,
                None => return Ok(tags),
            }
        }
    }

    /// Download a blob to `dest` (through `dest.partial`), its digest and
    /// size checked before it takes the final name.
    pub fn pull_blob(
        &self,
        digest: &str,
        size: u64,
        dest: &Path,
        progress: &dyn Fn(u64),
    ) -> Result<()> {
        let what = format!("registry {}: blob {digest}", self.host);
        let partial = crate::publish::staged::Staged::new(dest)?;
        self.retrying(&what, || {
            let url = self.url(&format!("blobs/{digest}"));
            let mut r = self.send("GET", &url, &[], Body::Empty, true).map_err(Fault::Transient)?;
            // Registries may redirect blob reads to storage: followed
            // without our Authorization.
            let mut hops = 0;
            while matches!(r.status().as_u16(), 301 | 302 | 303 | 307 | 308) && hops < 5 {
                let to = header(&r, "Location")
                    .ok_or_else(|| Fault::Fatal(anyhow!("{what}: a redirect without Location")))?;
                let to = self.absolute(&to);
                r = self
                    .agent
                    .get(&to)
                    .call()
                    .map_err(|e| Fault::Transient(anyhow!("{what}: {}", http::transport(e))))?;
                hops += 1;
            }
            match r.status().as_u16() {
                200 => {}
                404 => {
                    return Err(Fault::Fatal(anyhow!(
                        "{what}: the repository {} has no such blob",
                        self.repo
                    )))
                }
                s if transient_status(s) => return Err(Fault::Transient(anyhow!("HTTP {s}"))),
                s => {
                    return Err(Fault::Fatal(anyhow!("{what}: HTTP {s}: {}", error_text(&mut r))))
                }
            }
            let mut f = std::fs::File::create(partial.path())
                .map_err(|e| Fault::Fatal(anyhow!("creating {}: {e}", partial.path().display())))?;
            let mut h = Sha256::new();
            let mut rd = r.body_mut().with_config().limit(u64::MAX).reader();
            let mut buf = vec![0u8; 1 << 20];
            let mut got = 0u64;
            loop {
                crate::util::cancel::check().map_err(Fault::Fatal)?;
                let n = rd
                    .read(&mut buf)
                    .map_err(|e| Fault::Transient(anyhow!("{what}: reading: {e}")))?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
                f.write_all(&buf[..n])
                    .map_err(|e| Fault::Fatal(anyhow!("writing {}: {e}", partial.path().display())))?;
                got += n as u64;
                progress(got);
            }
            let d = format!("sha256:{}", hex::encode(h.finalize()));
            if got != size || d != digest {
                return Err(Fault::Fatal(anyhow!(
                    "{what}: the registry sent {got} bytes with digest {d}, the manifest says {size} bytes {digest}: nothing kept"
                )));
            }
            f.sync_all()
                .map_err(|e| Fault::Fatal(anyhow!("writing {}: {e}", partial.path().display())))?;
            Ok(())
        })?;
        partial.commit()
    }
}

/// Sleep `d`, stopping early (with the error) on Ctrl-C or SIGTERM.
fn sleep(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        crate::util::cancel::check()?;
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(100)));
    }
    Ok(())
}

/// An upload URL with `digest=` added to its query.
fn with_digest(loc: &str, digest: &str) -> String {
    let sep = if loc.contains('?') { '&' } else { '?' };
    format!("{loc}{sep}digest={}", enc(digest))
}

/// Why an attempt failed: worth another, or not.
enum Fault {
    Transient(anyhow::Error),
    Fatal(anyhow::Error),
}

impl From<anyhow::Error> for Fault {
    fn from(e: anyhow::Error) -> Self {
        Fault::Transient(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_parse() {
        let p = challenge_params(
            r#"realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(
            p,
            [
                ("realm".into(), "https://auth.example/token".into()),
                ("service".into(), "registry.example".into()),
                ("scope".into(), "repository:a/b:pull,push".into())
            ]
        );
        assert_eq!(challenge_params("realm=x, service=y").len(), 2);
    }

    #[test]
    fn upload_urls_get_the_digest() {
        assert_eq!(
            with_digest("https://r/v2/a/blobs/uploads/u?_state=x", "sha256:ab"),
            "https://r/v2/a/blobs/uploads/u?_state=x&digest=sha256%3Aab"
        );
        assert_eq!(with_digest("/u", "sha256:ab"), "/u?digest=sha256%3Aab");
    }
}
