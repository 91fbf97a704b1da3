//! Authentication as the registry asks for it (`WWW-Authenticate`): Basic
//! with the user's credentials, or a Bearer token from the realm the
//! registry names (docker's token protocol), and the message for a refusal.
//! In: the challenge of a 401; out: the client's `Authorization` value.
use super::conn::Client;
use super::wire::{enc, error_text, json_body};
use crate::util::http;
use anyhow::{anyhow, bail, Context, Result};

/// `key="value"` pairs of a `WWW-Authenticate` challenge after its scheme.
pub(super) fn challenge_params(s: &str) -> Vec<(String, String)> {
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

impl Client {
    pub(super) fn refused(&self) -> String {
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
    pub(super) fn authenticate(&self, challenge: &str) -> Result<()> {
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
}
