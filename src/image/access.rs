//! How to reach registries: the options every reader takes (credentials,
//! TLS, the arch to pick), the credentials files containers/image reads, and
//! the one place a containers/image error becomes a sentence that says what
//! to do. Fetching (`fetch.rs`) and manifest-list choice (`index.rs`) both
//! build on this file, which imports neither.
use super::imageref::ImageRef;
use crate::util::arch::Arch;
use anyhow::{anyhow, bail, Context, Result};
use ostree_ext::containers_image_proxy::ImageProxyConfig;
use std::path::{Path, PathBuf};

/// How to reach registries.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FetchOptions {
    /// Credentials file (containers auth.json format).
    pub authfile: Option<PathBuf>,
    /// Allow plain HTTP and unverified TLS.
    pub insecure: bool,
    /// Directory with extra CA certificates (`*.crt`), as containers' certs.d.
    pub cert_dir: Option<PathBuf>,
    /// The architecture to pick from manifest lists; `None`: this host's.
    pub arch: Option<Arch>,
    /// Default credential files that exist but could not be read (skipped:
    /// the pull goes on anonymously), with the reason.
    pub skipped_auth: Vec<String>,
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
        let mut skipped_auth = Vec::new();
        let authfile = match &explicit {
            Some(a) => {
                check_auth_file(a)?;
                Some(a.clone())
            }
            // Else the usual containers locations, resolved here so that
            // every reader (ours and ostree-ext's) uses the same
            // credentials. One that exists but cannot be read (a root-only
            // /run/containers, say) is skipped with a note, never fatal:
            // a pull that needs no credentials must still work.
            None => default_auth_files().into_iter().find(|p| {
                match std::fs::read(p) {
                    Ok(_) => true,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
                    Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => false,
                    Err(e) => {
                        skipped_auth.push(format!(
                            "default registry credentials {} cannot be read ({e}); skipped, pulling without them (pass --registry-config FILE to use a readable one)",
                            p.display()
                        ));
                        false
                    }
                }
            }),
        };
        if let Some(d) = &cert_dir {
            if !d.is_dir() {
                bail!("--cert-dir {}: not a directory", d.display());
            }
        }
        Ok(FetchOptions {
            authfile,
            insecure,
            cert_dir,
            arch: None,
            skipped_auth,
        })
    }

    /// The architecture to pick from manifest lists.
    pub fn arch_choice(&self) -> Arch {
        self.arch.unwrap_or_else(Arch::host)
    }

    /// The credentials file every reader gets: the resolved one, else an
    /// empty one under `scratch`, so that skopeo does not fall back to
    /// default locations this process may not be able to read
    /// (containers/image fails on an unreadable default auth file instead
    /// of pulling anonymously).
    fn effective_authfile(&self, scratch: &Path) -> Option<PathBuf> {
        if self.authfile.is_some() {
            return self.authfile.clone();
        }
        let p = scratch.join("anonymous-auth.json");
        if p.is_file() || std::fs::write(&p, b"{\"auths\":{}}\n").is_ok() {
            Some(p)
        } else {
            None
        }
    }

    /// The raw top-level manifest of a registry image (`skopeo inspect
    /// --raw`: a manifest list stays a list, where the image proxy would
    /// pick this host's entry).
    pub fn raw_manifest(&self, r: &ImageRef, scratch: &Path) -> Result<Vec<u8>> {
        let mut c = crate::util::cmd::new("skopeo", ["inspect", "--raw"]);
        if let Some(a) = self.effective_authfile(scratch) {
            c.arg("--authfile").arg(a);
        }
        if let Some(d) = &self.cert_dir {
            c.arg("--cert-dir").arg(d);
        }
        if self.insecure {
            c.arg("--tls-verify=false");
        }
        c.arg(r.to_transport_string());
        let out = c
            .output()
            .with_context(|| format!("{r}: running skopeo inspect --raw"))?;
        if !out.status.success() {
            return Err(explain_error(
                r,
                &String::from_utf8_lossy(&out.stderr),
                self,
            ));
        }
        Ok(out.stdout)
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
    /// `arch`: the entry to copy when `src` is a manifest
    /// list (skopeo would pick this host's). Every member dated `mtime`.
    pub fn copy_to_oci_archive(
        &self,
        src: &str,
        dst: &Path,
        scratch: &Path,
        arch: Option<Arch>,
        mtime: u64,
    ) -> Result<()> {
        let mut c = crate::util::cmd::new("skopeo", ["--tmpdir"]);
        c.arg(scratch);
        if let Some(a) = arch {
            c.arg("--override-os")
                .arg("linux")
                .arg("--override-arch")
                .arg(a.oci_name());
        }
        c.arg("copy").arg("--quiet");
        if let Some(a) = &self.effective_authfile(scratch) {
            c.arg("--src-authfile").arg(a);
        }
        if let Some(d) = &self.cert_dir {
            c.arg("--src-cert-dir").arg(d);
        }
        if self.insecure {
            c.arg("--src-tls-verify=false");
        }
        // skopeo's own oci-archive dates its members now; the layout it
        // writes is tarred here the same way every time (docs/contract.md §9).
        let layout = scratch.join("oci-layout");
        let _ = std::fs::remove_dir_all(&layout);
        c.arg(src).arg(format!("oci:{}", layout.display()));
        crate::util::cmd::run(&mut c).with_context(|| format!("copying {src} to an OCI layout"))?;
        bootimage_core::formats::oci::write_layout_archive(&layout, dst, mtime)
            .with_context(|| format!("writing {}", dst.display()))?;
        std::fs::remove_dir_all(&layout)
            .with_context(|| format!("removing {}", layout.display()))?;
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
        // SAFETY: the closure runs between fork and exec and only calls
        // prctl(2), which is async-signal-safe.
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
            authfile: self.effective_authfile(scratch),
            certificate_directory: self.cert_dir.clone(),
            insecure_skip_tls_verification: Some(self.insecure),
            skopeo_cmd: Some(c),
            ..Default::default()
        }
    }
}

/// An explicitly named credentials file must be readable and hold `auths`.
fn check_auth_file(a: &Path) -> Result<()> {
    let text = std::fs::read_to_string(a).map_err(|e| {
        anyhow!(
            "registry config {}: cannot read it: {e}; fix its permissions or pass another file with --registry-config",
            a.display()
        )
    })?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        anyhow!(
            "registry config {}: not valid JSON ({e}); expected {{\"auths\": {{...}}}}",
            a.display()
        )
    })?;
    if !v.get("auths").is_some_and(|x| x.is_object()) {
        bail!("registry config {}: no \"auths\" object (expected the containers auth.json / docker config.json format)", a.display());
    }
    Ok(())
}

/// The containers auth file locations, in the order containers/image reads them.
pub(crate) fn default_auth_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    // containers-auth.json(5): ${XDG_RUNTIME_DIR}/containers/auth.json, or
    // /run/containers/<uid>/auth.json when XDG_RUNTIME_DIR is unset.
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) => files.push(PathBuf::from(d).join("containers/auth.json")),
        None => files.push(PathBuf::from(format!(
            "/run/containers/{}/auth.json",
            // SAFETY: getuid has no preconditions and cannot fail.
            unsafe { libc::getuid() }
        ))),
    }
    if let Some(h) = dirs::home_dir() {
        files.push(h.join(".config/containers/auth.json"));
        files.push(h.join(".docker/config.json"));
    }
    files
}

/// Strip containers/image's wrapping ("... : ..." chains) to the useful tail.
pub(super) fn short_proxy_error(s: &str) -> String {
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
        || has_status(&low, "401")
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
    } else if low.contains("permission denied") || low.contains("operation not permitted") {
        // A local file (credentials, certificates, a layout), not the registry.
        format!("{r}: a local file could not be read ({detail}): fix its permissions, or pass --registry-config / --cert-dir with readable files")
    } else if low.contains("denied") || has_status(&low, "403") {
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

/// True when `msg` holds the HTTP status `code` as a word of its own, not
/// as digits inside a longer name or number (a temporary directory such as
/// `/var/tmp/oci1793401859` is no 401).
pub(super) fn has_status(msg: &str, code: &str) -> bool {
    msg.match_indices(code).any(|(i, _)| {
        let before = msg[..i].chars().next_back();
        let after = msg[i + code.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric())
            && !after.is_some_and(|c| c.is_ascii_alphanumeric())
    })
}
