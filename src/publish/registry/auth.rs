//! Credentials as podman and skopeo keep them (containers-auth.json(5)):
//! `--authfile`, else `REGISTRY_AUTH_FILE`, else the default files in the
//! order containers/image reads them; in a file, the most specific key
//! wins (`host/ns/repo`, then `host/ns`, then `host`), and docker's
//! `https://host/v1/` form of a key matches its host.
use anyhow::{anyhow, bail, Context, Result};
use base64::Engine as _;
use std::path::{Path, PathBuf};

/// A user name and password for one registry, and the file they came from.
#[derive(Clone)]
pub struct Credentials {
    pub user: String,
    pub password: String,
    pub from: PathBuf,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (from {})", self.user, self.from.display())
    }
}

impl Credentials {
    /// The `Authorization: Basic` value.
    pub fn basic(&self) -> String {
        let raw = format!("{}:{}", self.user, self.password);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }
}

/// The files to read, first match wins: an explicit file alone (it must
/// exist); else `REGISTRY_AUTH_FILE` alone; else the default locations.
pub fn auth_files(explicit: Option<&Path>) -> Result<Vec<PathBuf>> {
    if let Some(f) = explicit {
        if !f.is_file() {
            bail!(
                "credentials file {}: no such file (podman login --authfile {} HOST writes one)",
                f.display(),
                f.display()
            );
        }
        return Ok(vec![f.to_path_buf()]);
    }
    if let Some(f) = std::env::var_os("REGISTRY_AUTH_FILE").filter(|v| !v.is_empty()) {
        return Ok(vec![PathBuf::from(f)]);
    }
    Ok(crate::image::access::default_auth_files())
}

/// The key forms of `host/repo`, most specific first.
fn keys(host: &str, repo: &str) -> Vec<String> {
    let mut v = Vec::new();
    let parts: Vec<&str> = repo.split('/').collect();
    for n in (1..=parts.len()).rev() {
        v.push(format!("{host}/{}", parts[..n].join("/")));
    }
    v.push(host.to_string());
    v
}

/// A key as written in a file, normalised: docker's `https://host/v1/`
/// (or `http://`) is its host.
fn normalise(key: &str) -> &str {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"));
    match k {
        Some(rest) => rest.split('/').next().unwrap_or(rest),
        None => key.trim_end_matches('/'),
    }
}

/// The credentials for `host/repo` from the first file that has an entry
/// for it; `None` when no file does (anonymous access).
pub fn lookup(files: &[PathBuf], host: &str, repo: &str) -> Result<Option<Credentials>> {
    let wanted = keys(host, repo);
    for f in files {
        let text = match std::fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(anyhow!(e)).with_context(|| {
                    format!(
                    "credentials file {}: cannot read it; fix its permissions or pass --authfile",
                    f.display()
                )
                })
            }
        };
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            anyhow!(
                "credentials file {}: not valid JSON ({e}); expected {{\"auths\": {{\"{host}\": {{\"auth\": \"<base64 of user:password>\"}}}}}}",
                f.display()
            )
        })?;
        let Some(auths) = v.get("auths").and_then(|a| a.as_object()) else {
            continue;
        };
        for k in &wanted {
            let Some(entry) = auths.iter().find(|(key, _)| normalise(key) == k) else {
                continue;
            };
            let auth = entry.1.get("auth").and_then(|a| a.as_str()).unwrap_or("");
            if auth.is_empty() {
                // A credential helper's entry (credHelpers) or an empty one.
                bail!(
                    "credentials file {}: the entry {} has no \"auth\" (credential helpers are not read); podman login {host} writes one",
                    f.display(),
                    entry.0
                );
            }
            let raw = base64::engine::general_purpose::STANDARD
                .decode(auth.trim())
                .map_err(|e| {
                    anyhow!(
                        "credentials file {}: auths.{}.auth is not base64 ({e})",
                        f.display(),
                        entry.0
                    )
                })?;
            let raw = String::from_utf8(raw).map_err(|_| {
                anyhow!(
                    "credentials file {}: auths.{}.auth is not UTF-8 user:password",
                    f.display(),
                    entry.0
                )
            })?;
            let Some((user, password)) = raw.split_once(':') else {
                bail!(
                    "credentials file {}: auths.{}.auth is not user:password",
                    f.display(),
                    entry.0
                );
            };
            return Ok(Some(Credentials {
                user: user.to_string(),
                password: password.to_string(),
                from: f.clone(),
            }));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn most_specific_key_wins_and_docker_keys_match_their_host() {
        let d = tempfile::tempdir().unwrap();
        let f = file(
            d.path(),
            "auth.json",
            &format!(
                r#"{{"auths": {{"reg.example:5000": {{"auth": "{}"}}, "reg.example:5000/ocp": {{"auth": "{}"}}, "https://docker.example/v1/": {{"auth": "{}"}}}}}}"#,
                b64("host:h"),
                b64("ns:n"),
                b64("dock:d:with:colons")
            ),
        );
        let files = vec![f];
        let c = lookup(&files, "reg.example:5000", "ocp/bootimages")
            .unwrap()
            .unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("ns", "n"));
        let c = lookup(&files, "reg.example:5000", "other/x")
            .unwrap()
            .unwrap();
        assert_eq!(c.user, "host");
        let c = lookup(&files, "docker.example", "a/b").unwrap().unwrap();
        assert_eq!(
            (c.user.as_str(), c.password.as_str()),
            ("dock", "d:with:colons")
        );
        assert!(lookup(&files, "elsewhere", "a").unwrap().is_none());
        assert!(
            !format!("{c:?}").contains("colons"),
            "the password is never printed"
        );
    }

    #[test]
    fn bad_files_are_named() {
        let d = tempfile::tempdir().unwrap();
        let bad = file(d.path(), "bad.json", "{");
        let e = lookup(std::slice::from_ref(&bad), "h", "r")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("bad.json") && e.contains("not valid JSON"),
            "{e}"
        );
        let nob64 = file(d.path(), "n.json", r#"{"auths": {"h": {"auth": "%%%"}}}"#);
        let e = lookup(&[nob64], "h", "r").unwrap_err().to_string();
        assert!(e.contains("not base64"), "{e}");
        let helper = file(d.path(), "c.json", r#"{"auths": {"h": {}}}"#);
        let e = lookup(&[helper], "h", "r").unwrap_err().to_string();
        assert!(e.contains("no \"auth\""), "{e}");
        // A missing default file is skipped.
        assert!(lookup(&[d.path().join("absent")], "h", "r")
            .unwrap()
            .is_none());
        let e = auth_files(Some(&d.path().join("absent")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no such file"), "{e}");
    }
}
