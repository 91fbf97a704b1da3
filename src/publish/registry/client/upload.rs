//! Blobs into the repository: the HEAD that finds one already there, the
//! small push in one request, and the upload session of a large one in
//! chunks (PATCH with Content-Range), a failed chunk resumed from the offset
//! the registry reports. In: a file range or bytes and their digest; out:
//! whether the blob was uploaded or existed.
use super::conn::Client;
use super::wire::{
    error_text, header, range_end, sleep, transient_status, with_digest, Body, Fault,
};
use crate::util::sha256::Sha256;
use anyhow::{anyhow, Result};
use std::path::Path;

/// A blob push's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// The registry had it already.
    Existed,
    Uploaded,
}

impl Client {
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
}
