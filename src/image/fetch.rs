//! Fetching images through containers/image (skopeo's image proxy, the same
//! path ostree-ext, rpm-ostree and bootc use): manifests, configs and blobs,
//! with every blob checked against its digest and errors that say what to do.
use super::imageref::ImageRef;
use anyhow::{anyhow, bail, Context, Result};
use ostree_ext::containers_image_proxy::{
    self as proxy, ImageProxy, ImageProxyConfig, OpenedImage,
};
use ostree_ext::oci_spec::image::{Descriptor, ImageConfiguration, ImageManifest};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use tokio::io::AsyncReadExt;

/// How to reach registries.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FetchOptions {
    /// Credentials file (containers auth.json format).
    pub authfile: Option<PathBuf>,
    /// Allow plain HTTP and unverified TLS.
    pub insecure: bool,
    /// Directory with extra CA certificates (`*.crt`), as containers' certs.d.
    pub cert_dir: Option<PathBuf>,
}

impl FetchOptions {
    /// Resolve the credentials file: the explicit one, else `REGISTRY_AUTH_FILE`,
    /// else the usual containers locations.
    pub fn resolve(
        authfile: Option<PathBuf>,
        insecure: bool,
        cert_dir: Option<PathBuf>,
    ) -> Result<Self> {
        let explicit =
            authfile.or_else(|| std::env::var_os("REGISTRY_AUTH_FILE").map(PathBuf::from));
        // Else the usual containers locations, resolved here so that every
        // reader (ours and ostree-ext's, which otherwise pulls anonymously)
        // uses the same credentials.
        let authfile = explicit
            .clone()
            .or_else(|| default_auth_files().into_iter().find(|p| p.is_file()));
        if let Some(a) = &explicit {
            let text = std::fs::read_to_string(a)
                .with_context(|| format!("registry config {}: cannot read it", a.display()))?;
            let v: serde_json::Value = serde_json::from_str(&text).with_context(|| {
                format!(
                    "registry config {}: not valid JSON (expected {{\"auths\": {{...}}}})",
                    a.display()
                )
            })?;
            if !v.get("auths").is_some_and(|x| x.is_object()) {
                bail!("registry config {}: no \"auths\" object (expected the containers auth.json / docker config.json format)", a.display());
            }
        }
        if let Some(d) = &cert_dir {
            if !d.is_dir() {
                bail!("--cert-dir {}: not a directory", d.display());
            }
        }
        Ok(FetchOptions {
            authfile,
            insecure,
            cert_dir,
        })
    }

    /// Hosts that have an entry in the credentials file.
    fn hosts_with_credentials(&self) -> Vec<String> {
        let files: Vec<PathBuf> = self.authfile.iter().cloned().collect();
        let mut hosts = Vec::new();
        for f in files {
            if let Ok(t) = std::fs::read_to_string(&f) {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&t) {
                    if let Some(m) = v.get("auths").and_then(|a| a.as_object()) {
                        hosts.extend(m.keys().cloned());
                    }
                }
            }
        }
        hosts
    }

    /// `skopeo copy` of `src` (a containers-transports reference) to an
    /// OCI archive at `dst`, with these credentials and TLS settings and
    /// skopeo's temporary files under `scratch`.
    pub fn copy_to_oci_archive(&self, src: &str, dst: &Path, scratch: &Path) -> Result<()> {
        let mut c = crate::util::cmd::new("skopeo", ["--tmpdir"]);
        c.arg(scratch).arg("copy").arg("--quiet");
        if let Some(a) = &self.authfile {
            c.arg("--src-authfile").arg(a);
        }
        if let Some(d) = &self.cert_dir {
            c.arg("--src-cert-dir").arg(d);
        }
        if self.insecure {
            c.arg("--src-tls-verify=false");
        }
        c.arg(src).arg(format!("oci-archive:{}", dst.display()));
        crate::util::cmd::run(&mut c)
            .with_context(|| format!("copying {src} to an OCI archive"))?;
        Ok(())
    }

    /// The proxy configuration. skopeo keeps its big temporary files (an
    /// extracted oci-archive, for one) under `scratch`, which the caller
    /// removes, so nothing is left in /var/tmp even when a run fails.
    pub fn proxy_config(&self, scratch: &Path) -> ImageProxyConfig {
        let mut c = std::process::Command::new("skopeo");
        // A global option: must come before the subcommand the library appends.
        c.arg("--tmpdir").arg(scratch);
        // Bind skopeo's life to ours, as containers-image-proxy does by default.
        unsafe {
            use std::os::unix::process::CommandExt;
            c.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        ImageProxyConfig {
            authfile: self.authfile.clone(),
            certificate_directory: self.cert_dir.clone(),
            insecure_skip_tls_verification: Some(self.insecure),
            skopeo_cmd: Some(c),
            ..Default::default()
        }
    }
}

/// The containers auth file locations, in the order containers/image reads them.
fn default_auth_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        files.push(PathBuf::from(d).join("containers/auth.json"));
    }
    if let Some(h) = dirs::home_dir() {
        files.push(h.join(".config/containers/auth.json"));
        files.push(h.join(".docker/config.json"));
    }
    files
}

/// An opened image: its manifest (as OCI), the digest of the manifest as
/// stored at the source, and its configuration.
pub struct Image {
    pub reference: ImageRef,
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

    /// The CoreOS architecture name of the image (`x86_64`, `aarch64`, ...).
    pub fn coreos_arch(&self) -> String {
        crate::release::coreos_arch(&self.config.architecture().to_string())
    }
}

/// A session with the image proxy.
pub struct Fetcher {
    proxy: ImageProxy,
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
            opts: opts.clone(),
            scratch: scratch.to_path_buf(),
        })
    }

    /// Open an image and read its manifest and configuration.
    pub async fn open(&self, r: &ImageRef) -> Result<Image> {
        check_local(r)?;
        let s = r.to_transport_string();
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
        let manifest: ImageManifest = serde_json::from_slice(&raw).with_context(|| {
            format!("image {r}: manifest is not a valid OCI/Docker image manifest")
        })?;
        let config = self
            .proxy
            .fetch_config(&handle)
            .await
            .map_err(|e| self.explain(r, e))?;
        Ok(Image {
            reference: r.clone(),
            digest,
            manifest,
            config,
            handle,
        })
    }

    /// Download a blob to `dest`, verifying its size and digest.
    pub async fn fetch_blob_to(&self, img: &Image, desc: &Descriptor, dest: &Path) -> Result<()> {
        let (mut reader, driver) = self
            .proxy
            .get_descriptor(&img.handle, desc)
            .await
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
                let k = reader.read(&mut buf).await?;
                if k == 0 {
                    break;
                }
                h.update(&buf[..k]);
                out.write_all(&buf[..k])?;
                n += k as u64;
            }
            anyhow::Ok((n, format!("sha256:{}", hex::encode(h.finalize()))))
        };
        let (copied, finished) = tokio::join!(copy, driver);
        let blob_err = |e: String| {
            anyhow!(
                "blob {digest} of {} is corrupt: {e}; the image was damaged or tampered with (fetch it again from a trusted source)",
                img.reference
            )
        };
        let (n, got) = match (copied, finished) {
            (Ok(v), Ok(())) => v,
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
        self.proxy
            .close_image(&img.handle)
            .await
            .context("closing image")?;
        Ok(())
    }

    /// Stop the proxy.
    pub async fn finish(self) -> Result<()> {
        self.proxy
            .finalize()
            .await
            .context("stopping the skopeo image proxy")?;
        Ok(())
    }

    /// Turn a proxy error into one line that names the object, the cause and
    /// the fix.
    fn explain(&self, r: &ImageRef, e: proxy::Error) -> anyhow::Error {
        explain_error(r, &e.to_string(), &self.opts)
    }
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

/// Strip containers/image's wrapping ("... : ..." chains) to the useful tail.
fn short_proxy_error(s: &str) -> String {
    let mut s = s.trim().lines().next().unwrap_or("").trim();
    // "failed to invoke method OpenImage: failed to invoke method OpenImage: X" -> "X"
    loop {
        let low = s.to_lowercase();
        let Some(rest) = low.strip_prefix("failed to invoke method ") else {
            break;
        };
        match rest.find(": ") {
            Some(i) => s = s["failed to invoke method ".len() + i + 2..].trim(),
            None => break,
        }
    }
    s.to_string()
}

/// Classify a containers/image error message for `r`.
pub fn explain_error(r: &ImageRef, raw: &str, opts: &FetchOptions) -> anyhow::Error {
    let low = raw.to_lowercase();
    let host = r.registry().unwrap_or("the registry").to_string();
    let detail = short_proxy_error(raw);
    let msg = if low.contains("connection refused") {
        format!("{r}: registry {host} is not reachable (connection refused): is it running, and are host and port right?")
    } else if low.contains("no such host")
        || low.contains("server misbehaving")
        || low.contains("name resolution")
    {
        format!("{r}: cannot resolve registry host {host}: check the name, or use --idms-file to point at a mirror")
    } else if low.contains("i/o timeout") || low.contains("deadline exceeded") {
        format!("{r}: registry {host} did not answer (timeout): check the network or use a mirror (--idms-file)")
    } else if low.contains("server gave http response to https client") {
        format!("{r}: registry {host} speaks plain HTTP: pass --insecure to allow it")
    } else if low.contains("x509") || low.contains("certificate") {
        format!("{r}: the TLS certificate of {host} is not trusted ({detail}): pass --cert-dir DIR holding its CA (*.crt), or --insecure to skip verification")
    } else if low.contains("unauthorized")
        || low.contains("authentication required")
        || low.contains("401")
    {
        let have = opts.hosts_with_credentials().iter().any(|h| {
            h.trim_start_matches("https://")
                .trim_start_matches("http://")
                .starts_with(&host)
        });
        if have {
            format!("{r}: registry {host} rejected the credentials (401 unauthorized): check the entry for {host} in the registry config")
        } else {
            format!("{r}: registry {host} requires authentication (401 unauthorized): pass --registry-config FILE (auth.json with an entry for {host}) or set REGISTRY_AUTH_FILE")
        }
    } else if low.contains("denied") || low.contains("403") {
        format!("{r}: access denied by {host} (403): the credentials lack pull rights on this repository")
    } else if low.contains("no descriptor found for reference") {
        let tags = match r {
            ImageRef::Oci { path, .. } => super::layout::tags_in_dir(path)
                .map(|(t, _)| t.join(", "))
                .unwrap_or_default(),
            _ => String::new(),
        };
        format!("{r}: image not found: no such tag in the layout (tags: {tags})")
    } else if low.contains("manifest unknown")
        || low.contains("name unknown")
        || low.contains("not found")
        || low.contains("no such file")
        || low.contains("does not exist")
    {
        format!("{r}: image not found ({detail})")
    } else if low.contains("unexpected eof")
        || low.contains("archive/tar")
        || low.contains("invalid tar")
        || low.contains("unexpected end")
    {
        format!("{r}: the archive is truncated or corrupt ({detail})")
    } else if low.contains("digest")
        && (low.contains("mismatch")
            || low.contains("did not match")
            || low.contains("does not match"))
    {
        format!("{r}: content does not match its digest ({detail}): the image is corrupt or was tampered with")
    } else {
        format!("{r}: {detail}")
    };
    anyhow!(msg)
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
    }
}
