//! The referrers of a manifest (opencontainers/distribution-spec v1.1,
//! "Listing Referrers": `GET /v2/<name>/referrers/<digest>`, an image
//! index of the manifests whose `subject` is that digest). In: a digest;
//! out: the index, or `None` where the registry has no such API (404, 400
//! or 406, or an answer that is not an image index, as go-containerregistry
//! reads it): the caller then reads the tag schema `sha256-<hex>`.
use super::conn::Client;
use super::manifests::INDEX_OCI;
use super::wire::{error_text, header, json_body, transient_status, Body, Fault};
use anyhow::{anyhow, Result};

impl Client {
    /// The referrers index of `digest`, `None` without the API.
    pub fn referrers(&self, digest: &str) -> Result<Option<serde_json::Value>> {
        let url = self.url(&format!("referrers/{digest}"));
        let what = format!("registry {}: referrers of {digest}", self.host);
        self.retrying(&what, || {
            let mut r = self
                .send(
                    "GET",
                    &url,
                    &[("Accept", INDEX_OCI.into())],
                    Body::Empty,
                    true,
                )
                .map_err(Fault::Transient)?;
            match r.status().as_u16() {
                200 => {
                    let ct = header(&r, "Content-Type").unwrap_or_default();
                    if !ct.starts_with(INDEX_OCI) {
                        return Ok(None);
                    }
                    json_body(&mut r, 4 << 20, "a referrers index")
                        .map(Some)
                        .map_err(Fault::Transient)
                }
                400 | 404 | 406 => Ok(None),
                s if transient_status(s) => Err(Fault::Transient(anyhow!("HTTP {s}"))),
                s => Err(Fault::Fatal(anyhow!(
                    "{what}: HTTP {s}: {}",
                    error_text(&mut r)
                ))),
            }
        })
    }
}
