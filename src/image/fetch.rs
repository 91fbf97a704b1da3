//! Fetching images through containers/image (skopeo's image proxy, the same
//! path ostree-ext, rpm-ostree and bootc use): manifests, configs and blobs,
//! with every blob checked against its digest and errors that say what to do.
pub use super::access::{explain_error, FetchOptions};
use super::access::{has_status, short_proxy_error};
use super::imageref::ImageRef;
use crate::util::arch::Arch;
use crate::util::sha256::Sha256;
use anyhow::{anyhow, bail, Context, Result};
use ostree_ext::containers_image_proxy::{self as proxy, ImageProxy, OpenedImage};
use ostree_ext::oci_spec::image::{Descriptor, ImageConfiguration, ImageManifest};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use tokio::io::AsyncReadExt;

/// An opened image: its manifest (as OCI), the digest of the manifest as
/// stored at the source, and its configuration.
pub struct Image {
    /// The reference as named (by the user or the release).
    pub reference: ImageRef,
    /// What was opened: `reference`, or, for a manifest list, a reference
    /// to the chosen entry (what ostree-ext must import).
    pub opened: ImageRef,
    /// The manifest list entry chosen, when `reference` named a list.
    pub index: Option<super::index::Chosen>,
    pub digest: String,
    pub manifest: ImageManifest,
    pub config: ImageConfiguration,
    handle: OpenedImage,
}

impl Image {
    /// Image labels (empty when none).
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.config
            .config()
            .as_ref()
            .and_then(|c| c.labels().clone())
            .map(|m| m.into_iter().collect())
            .unwrap_or_default()
    }

    /// The image's architecture (its config's `architecture`, an OCI name).
    pub fn arch(&self) -> Result<Arch> {
        let name = self.config.architecture().to_string();
        Arch::parse(&name)
            .with_context(|| format!("image {}: its config's architecture", self.reference))
    }
}

/// A session with the image proxy.
pub struct Fetcher {
    proxy: ImageProxy,
    /// A blob read was abandoned on a stalled connection: skopeo still
    /// holds a request open, so it cannot be shut down cleanly (the proxy
    /// library panics on that); it ends with this process instead.
    abandoned: std::sync::atomic::AtomicBool,
    pub opts: FetchOptions,
    /// skopeo's TMPDIR.
    pub scratch: PathBuf,
}

impl Fetcher {
    /// Start the proxy (skopeo).
    /// `scratch` must exist; it holds skopeo's temporary files.
    pub async fn new(opts: &FetchOptions, scratch: &Path) -> Result<Self> {
        if !crate::util::cmd::have("skopeo") {
            bail!("skopeo is not installed: it is needed to read images (run scripts/install-deps.sh, or apt-get install skopeo)");
        }
        let proxy = ImageProxy::new_with_config(opts.proxy_config(scratch))
            .await
            .context("starting the skopeo image proxy")?;
        Ok(Fetcher {
            proxy,
            abandoned: Default::default(),
            opts: opts.clone(),
            scratch: scratch.to_path_buf(),
        })
    }

    /// Open an image and read its manifest and configuration. A manifest
    /// list / OCI index is resolved to its entry for the chosen arch
    /// ([`FetchOptions::arch_choice`]).
    pub async fn open(&self, r: &ImageRef) -> Result<Image> {
        self.open_arch(r, self.opts.arch_choice()).await
    }

    /// [`Fetcher::open`], picking `arch` from a manifest list.
    pub async fn open_arch(&self, r: &ImageRef, arch: Arch) -> Result<Image> {
        check_local(r)?;
        let mut index = None;
        let mut opened = r.clone();
        if let Some((digest, doc)) = super::index::top_index(r, &self.opts, &self.scratch)? {
            let c = super::index::choose(&doc, &digest, arch, &r.to_string())?;
            opened = super::index::entry_ref(r, &c, &self.scratch)?;
            index = Some(c);
        }
        let s = opened.to_transport_string();
        let handle = self
            .proxy
            .open_image(&s)
            .await
            .map_err(|e| self.explain(r, e))?;
        let (digest, raw) = self
            .proxy
            .fetch_manifest_raw_oci(&handle)
            .await
            .map_err(|e| self.explain(r, e))?;
        let manifest: ImageManifest = parse_json(&raw, &format!("image {r}: manifest"))?;
        let raw_config = self
            .proxy
            .fetch_config_raw(&handle)
            .await
            .map_err(|e| self.explain(r, e))?;
        let config = parse_config(&raw_config, &format!("image {r}: config"))?;
        Ok(Image {
            reference: r.clone(),
            opened,
            index,
            digest,
            manifest,
            config,
            handle,
        })
    }

    /// Download a blob to `dest`, verifying its size and digest. Transient
    /// registry faults (a connection reset or cut mid-blob, 5xx, a 429 that
    /// containers/image gave up on) are retried with exponential backoff
    /// within [`RetryPolicy::budget`]; a connection that stalls (no data for
    /// [`RetryPolicy::stall`]) ends the fetch. The final error names the
    /// blob, the registry, the attempts and the cause.
    pub async fn fetch_blob_to(&self, img: &Image, desc: &Descriptor, dest: &Path) -> Result<()> {
        let policy = RetryPolicy::from_env();
        let registry = img
            .opened
            .registry()
            .unwrap_or("the local image")
            .to_string();
        let started = std::time::Instant::now();
        let mut delay = policy.first;
        let mut attempt = 1;
        loop {
            let e = match self.fetch_blob_once(img, desc, dest, policy.stall).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let cause = format!("{e:#}");
            let retry = is_transient(&cause)
                && !cause.contains(STALLED)
                && started.elapsed() + delay < policy.budget;
            if !retry {
                let _ = std::fs::remove_file(dest);
                if attempt == 1 && !is_transient(&cause) {
                    return Err(e);
                }
                return Err(e.context(format!(
                    "fetching blob {} of {} from registry {registry}: gave up after {attempt} attempt{} in {:.0?}",
                    desc.digest(),
                    img.reference,
                    if attempt == 1 { "" } else { "s" },
                    started.elapsed()
                )));
            }
            crate::util::ui::status(format!(
                "registry {registry}: blob {} failed ({}); retrying in {delay:.0?} (attempt {})",
                desc.digest(),
                short_proxy_error(&cause),
                attempt + 1
            ));
            crate::util::cancel::check()?;
            tokio::time::sleep(delay).await;
            crate::util::cancel::check()?;
            delay = (delay * 2).min(policy.max_delay);
            attempt += 1;
        }
    }

    async fn fetch_blob_once(
        &self,
        img: &Image,
        desc: &Descriptor,
        dest: &Path,
        stall: std::time::Duration,
    ) -> Result<()> {
        let (mut reader, driver) =
            tokio::time::timeout(stall, self.proxy.get_descriptor(&img.handle, desc))
                .await
                .map_err(|_| anyhow!("{STALLED}: no response for {stall:?}"))?
                .map_err(|e| self.explain(&img.reference, e))
                .with_context(|| format!("fetching blob {} of {}", desc.digest(), img.reference))?;
        let mut out =
            std::fs::File::create(dest).with_context(|| format!("creating {}", dest.display()))?;
        let digest = desc.digest().to_string();
        let copy = async {
            let mut h = Sha256::new();
            let mut n: u64 = 0;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let k = tokio::time::timeout(stall, reader.read(&mut buf))
                    .await
                    .map_err(|_| anyhow!("{STALLED}: no data for {stall:?}"))??;
                if k == 0 {
                    break;
                }
                h.update(&buf[..k]);
                out.write_all(&buf[..k])?;
                n += k as u64;
            }
            anyhow::Ok((n, format!("sha256:{}", hex::encode(h.finalize()))))
        };
        // A stalled copy ends the attempt without waiting for the driver
        // (which waits for the same stalled connection).
        tokio::pin!(driver);
        let mut finished = None;
        let copied = {
            tokio::pin!(copy);
            loop {
                tokio::select! {
                    c = &mut copy => break c,
                    d = &mut driver, if finished.is_none() => finished = Some(d),
                }
            }
        };
        let finished = match (finished, &copied) {
            (Some(f), _) => f,
            (None, Err(e)) if format!("{e:#}").contains(STALLED) => {
                self.abandoned
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            }
            (None, _) => driver.await,
        };
        let blob_err = |e: String| {
            anyhow!(
                "blob {digest} of {} is corrupt: {e}; the image was damaged or tampered with (fetch it again from a trusted source)",
                img.reference
            )
        };
        let (n, got) = match (copied, finished) {
            (Ok(v), Ok(())) => v,
            // A network or registry fault is not corruption: say so, and
            // let the caller retry it.
            (_, Err(e)) if is_transient(&e.to_string()) => {
                bail!(
                    "blob {digest} of {}: {}",
                    img.reference,
                    short_proxy_error(&e.to_string())
                )
            }
            (_, Err(e)) => return Err(blob_err(short_proxy_error(&e.to_string()))),
            (Err(e), Ok(())) => {
                return Err(e)
                    .with_context(|| format!("reading blob {digest} of {}", img.reference))
            }
        };
        if digest.starts_with("sha256:") && got != digest {
            return Err(blob_err(format!("its content hashes to {got}")));
        }
        if n != desc.size() {
            return Err(blob_err(format!(
                "it is {n} bytes, the manifest says {}",
                desc.size()
            )));
        }
        out.sync_all().ok();
        Ok(())
    }

    /// Close an image.
    pub async fn close(&self, img: Image) -> Result<()> {
        tokio::time::timeout(PROXY_GRACE, self.proxy.close_image(&img.handle))
            .await
            .map_err(|_| anyhow!("closing image {}: skopeo did not answer within {PROXY_GRACE:?} (a stalled registry connection?)", img.reference))?
            .context("closing image")?;
        Ok(())
    }

    /// Stop the proxy. A skopeo stuck on a stalled registry connection
    /// never exits by itself: after [`PROXY_GRACE`] it is left to end with
    /// this process (its parent-death signal), and the run goes on to
    /// report what it already decided.
    pub async fn finish(self) -> Result<()> {
        if self.abandoned.load(std::sync::atomic::Ordering::Relaxed) {
            tracing::debug!("skopeo left to end with this process: a stalled read is still open");
            return Ok(());
        }
        tokio::time::timeout(PROXY_GRACE, self.proxy.finalize())
            .await
            .map_err(|_| anyhow!("stopping the skopeo image proxy: it did not exit within {PROXY_GRACE:?} (a stalled registry connection?)"))?
            .context("stopping the skopeo image proxy")?;
        Ok(())
    }

    /// Turn a proxy error into one line that names the object, the cause and
    /// the fix.
    fn explain(&self, r: &ImageRef, e: proxy::Error) -> anyhow::Error {
        explain_error(r, &e.to_string(), &self.opts)
    }
}

/// How a blob fetch meets registry faults (docs/design.md "Registry faults").
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Total time within which a failed attempt is retried.
    pub budget: std::time::Duration,
    /// First backoff delay, doubled after each attempt up to `max_delay`.
    pub first: std::time::Duration,
    pub max_delay: std::time::Duration,
    /// A read that waits this long for data ends the fetch.
    pub stall: std::time::Duration,
}

const STALLED: &str = "the registry connection stalled";

/// How long closing an image or stopping skopeo may take before it is
/// given up: skopeo answers at once unless a registry connection stalled.
const PROXY_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

impl RetryPolicy {
    /// Defaults: 5 minutes of retries, 1 s doubling to 30 s, a 60 s stall;
    /// `BOOTIMAGE_GEN_FETCH_RETRY_SECS` and `BOOTIMAGE_GEN_FETCH_STALL_SECS`
    /// change the budget and the stall (the tests shorten them).
    pub fn from_env() -> Self {
        let secs = |k: &str, d: f64| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0)
                .unwrap_or(d)
        };
        RetryPolicy {
            budget: std::time::Duration::from_secs_f64(secs(
                "BOOTIMAGE_GEN_FETCH_RETRY_SECS",
                300.0,
            )),
            first: std::time::Duration::from_secs(1),
            max_delay: std::time::Duration::from_secs(30),
            stall: std::time::Duration::from_secs_f64(
                secs("BOOTIMAGE_GEN_FETCH_STALL_SECS", 60.0).max(0.1),
            ),
        }
    }
}

/// A fault worth retrying: the network or the registry, not the request.
fn is_transient(msg: &str) -> bool {
    let m = msg.to_lowercase();
    [
        STALLED,
        "connection reset",
        "broken pipe",
        "unexpected eof",
        "eof",
        "timeout",
        "timed out",
        "too many requests",
        "500 internal server error",
        "502 bad gateway",
        "503 service unavailable",
        "504 gateway timeout",
        "registry 500",
        "registry 502",
        "registry 503",
        "registry 504",
        "(service unavailable)",
        "(bad gateway)",
        "(gateway timeout)",
        "status 500",
        "status 502",
        "status 503",
        "status 504",
        "connection refused",
    ]
    .iter()
    .any(|k| m.contains(k))
        || has_status(&m, "429")
}

/// Parse JSON into `T`, naming the object, the field path and the cause.
pub fn parse_json<T: serde::de::DeserializeOwned>(raw: &[u8], what: &str) -> Result<T> {
    let de = &mut serde_json::Deserializer::from_slice(raw);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." {
            String::new()
        } else {
            format!(" at `{path}`")
        };
        let inner = e.inner();
        if inner.is_syntax() || inner.is_eof() {
            anyhow!("{what} is not valid JSON{at}: {inner}")
        } else {
            anyhow!("{what} has an unexpected value{at}: {inner}")
        }
    })
}

/// An image configuration as the OCI image spec defines it: only
/// `architecture`, `os` and `rootfs` are required (`history`, `created`,
/// `config` may be absent: `buildah --omit-history`, crane and ko omit
/// them). The oci-spec crate wants `history`, so an absent one is read as
/// empty.
pub fn parse_config(raw: &[u8], what: &str) -> Result<ImageConfiguration> {
    let mut v: serde_json::Value = parse_json(raw, what)?;
    let Some(obj) = v.as_object_mut() else {
        bail!("{what} is not a JSON object");
    };
    for k in ["architecture", "os", "rootfs"] {
        if !obj.contains_key(k) {
            bail!(
                "{what} lacks `{k}`, which the OCI image spec requires (architecture, os, rootfs)"
            );
        }
    }
    if matches!(obj.get("history"), None | Some(serde_json::Value::Null)) {
        obj.insert("history".into(), serde_json::Value::Array(vec![]));
    }
    parse_json(&serde_json::to_vec(&v)?, what)
}

/// Local transports: fail early and clearly when the path is missing.
fn check_local(r: &ImageRef) -> Result<()> {
    match r {
        ImageRef::Oci { path, tag } => {
            if !path.join("index.json").is_file() {
                if path.exists() {
                    bail!(
                        "{r}: {} is not an OCI image layout (no index.json)",
                        path.display()
                    );
                }
                bail!(
                    "{r}: OCI layout directory {} does not exist",
                    path.display()
                );
            }
            if tag.is_none() {
                let (tags, n) = super::layout::tags_in_dir(path)?;
                if n > 1 {
                    bail!(
                        "{r}: the layout holds {n} images; name one with oci:{}:TAG (tags: {})",
                        path.display(),
                        tags.join(", ")
                    );
                }
            }
        }
        ImageRef::OciArchive { path, .. } | ImageRef::DockerArchive { path, .. } => {
            if !path.is_file() {
                bail!("{r}: archive {} does not exist", path.display());
            }
        }
        ImageRef::Docker(_) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    fn r() -> ImageRef {
        ImageRef::parse("127.0.0.1:5999/ocp/release:4.18").unwrap()
    }
    #[test]
    fn classifies_common_errors() {
        let o = FetchOptions {
            authfile: Some("/nonexistent".into()),
            ..Default::default()
        };
        let e = explain_error(&r(), "pinging container registry 127.0.0.1:5999: Get \"https://127.0.0.1:5999/v2/\": dial tcp 127.0.0.1:5999: connect: connection refused", &o);
        assert!(e.to_string().contains("not reachable"), "{e}");
        let e = explain_error(&r(), "reading manifest 4.18 in 127.0.0.1:5999/ocp/release: manifest unknown: manifest unknown", &o);
        assert!(e.to_string().contains("image not found"), "{e}");
        let e = explain_error(&r(), "http: server gave HTTP response to HTTPS client", &o);
        assert!(e.to_string().contains("--insecure"), "{e}");
        let e = explain_error(
            &r(),
            "reading manifest: unauthorized: authentication required",
            &o,
        );
        assert!(e.to_string().contains("requires authentication"), "{e}");
        let e = explain_error(&r(), "x509: certificate signed by unknown authority", &o);
        assert!(e.to_string().contains("--cert-dir"), "{e}");
        // skopeo failing on a local file is not a registry's 403.
        let e = explain_error(
            &r(),
            "open /run/containers/1000/auth.json: permission denied",
            &o,
        );
        assert!(
            e.to_string().contains("/run/containers/1000/auth.json"),
            "{e}"
        );
        assert!(!e.to_string().contains("403"), "{e}");
        let e = explain_error(
            &r(),
            "reading manifest 4.18: denied: requested access to the resource is denied",
            &o,
        );
        assert!(e.to_string().contains("403"), "{e}");
        // Digits inside a temporary name are no status code (the flake of
        // inspect's truncated_oci_archive: `/var/tmp/oci...401...`).
        let raw =
            "creating temp directory: untarring file \"/var/tmp/oci1793401859\": unexpected EOF";
        let e = explain_error(&r(), raw, &o);
        assert!(e.to_string().contains("truncated"), "{e}");
        assert!(!e.to_string().contains("unauthorized"), "{e}");
        assert!(has_status("unexpected status 401 unauthorized", "401"));
        assert!(has_status("(401)", "401"));
        assert!(!has_status("oci1793401859", "401"));
        assert!(!has_status("sha256:4039a", "403"));
        assert!(is_transient("registry said 429"));
        assert!(!is_transient("no such file /var/tmp/x14290"));
    }
    #[test]
    fn configs_without_optional_fields() {
        // OCI image-spec config.md: only architecture, os and rootfs are required.
        let c = parse_config(
            br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#,
            "c",
        )
        .unwrap();
        assert!(c.history().is_empty());
        assert!(c.config().is_none());
        let c = parse_config(br#"{"architecture":"arm64","os":"linux","rootfs":{"type":"layers","diff_ids":[]},"history":null,"config":{}}"#, "c").unwrap();
        assert_eq!(c.architecture().to_string(), "arm64");
        let e = format!(
            "{:#}",
            parse_config(
                br#"{"architecture":"amd64","os":"linux"}"#,
                "image X: config"
            )
            .unwrap_err()
        );
        assert!(e.contains("image X: config") && e.contains("rootfs"), "{e}");
        let e = format!("{:#}", parse_config(br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]},"history":[{"created":5}]}"#, "image X: config").unwrap_err());
        assert!(
            e.contains("image X: config") && e.contains("history[0].created"),
            "{e}"
        );
    }
}
