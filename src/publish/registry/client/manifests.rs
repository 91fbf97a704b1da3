//! Manifests by tag or digest (their digest checked when asked for by
//! digest), the PUT of one, and the repository's tag list followed through
//! its `Link` pages. In: references and manifest bytes; out: `Manifest`s,
//! digests and tags.
use super::conn::Client;
use super::wire::{error_text, header, json_body, transient_status, Body, Fault};
use crate::util::sha256::Sha256;
use anyhow::{anyhow, Result};

pub const MANIFEST_OCI: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX_OCI: &str = "application/vnd.oci.image.index.v1+json";
const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";

/// A manifest as the registry holds it.
pub struct Manifest {
    pub media_type: String,
    pub bytes: Vec<u8>,
    pub digest: String,
}

impl Client {
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
        if reference.starts_with("sha256:") && reference != digest {
            anyhow::bail!("manifest {reference}: its bytes have digest {digest}");
        }
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
                    s => Err(put_refused(
                        &self.host,
                        reference,
                        media_type,
                        s,
                        &error_text(&mut r),
                    )),
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
}

/// What a refused manifest PUT means. `DIGEST_INVALID` can only be the
/// registry's own fault here: the reference is a tag or the digest of the
/// very bytes sent. distribution 2.8's filesystem driver rewrites a link
/// file in place (truncate, then write), so a push checking an index's
/// children while another push links the same manifest reads an empty
/// link, and its digest parse fails as DIGEST_INVALID (UPSTREAM.md §28;
/// fixed upstream by distribution PR #4624). Another attempt reads the
/// whole link. A registry that takes images only gets the fix named;
/// every other refusal is final.
pub(super) fn put_refused(
    host: &str,
    reference: &str,
    media_type: &str,
    status: u16,
    why: &str,
) -> Fault {
    if status == 400 && why.starts_with("DIGEST_INVALID") {
        return Fault::Transient(anyhow!(
            "registry {host} answered the manifest {reference} HTTP 400 {why}, though it is the digest of the bytes sent: a concurrent write of the same manifest in the registry's storage"
        ));
    }
    // A registry that takes images only: the manifest (artifactType, a
    // non-image layer) is what it refuses, not its bytes; say what would
    // take it.
    let fix = if matches!(status, 400 | 415)
        && (why.contains("MANIFEST_INVALID")
            || why.contains("UNSUPPORTED")
            || why.to_lowercase().contains("media type"))
    {
        ": it does not take OCI artifacts (a manifest with an artifactType and a disk image as its layer); push to a registry that implements the OCI distribution spec 1.1 (docker-registry/distribution 2.8 and later, Quay, Harbor, Zot do)"
    } else {
        ""
    };
    Fault::Fatal(anyhow!(
        "registry {host} refused the manifest {reference} ({media_type}): HTTP {status}: {why}{fix}"
    ))
}
