//! Blobs out of the repository: the GET (redirects to storage followed
//! without our `Authorization`), streamed to a staged
//! `.<name>.<random>.partial` with its digest and size checked before the
//! file takes its final name; or, for a small document (a pushed
//! meta.json or stream.json the fan-in merges), read into memory with the
//! same checks. In: a digest, its size and a destination; out: the file
//! or the bytes.
use super::conn::Client;
use super::wire::{error_text, header, transient_status, Body, Fault};
use crate::util::http;
use crate::util::sha256::Sha256;
use anyhow::{anyhow, Result};
use std::io::{Read, Write};
use std::path::Path;

impl Client {
    /// Download a blob to `dest` (through a staged `.partial` file), its
    /// digest and size checked before it takes the final name.
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
            let mut r = self.open_blob(digest, &what)?;
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

    /// A small blob (at most `limit` bytes) in memory, its digest checked.
    pub fn blob_bytes(&self, digest: &str, limit: u64) -> Result<Vec<u8>> {
        let what = format!("registry {}: blob {digest}", self.host);
        self.retrying(&what, || {
            let mut r = self.open_blob(digest, &what)?;
            let bytes = r
                .body_mut()
                .with_config()
                .limit(limit)
                .read_to_vec()
                .map_err(|e| Fault::Transient(anyhow!("{what}: reading: {e}")))?;
            let d = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
            if d != digest {
                return Err(Fault::Fatal(anyhow!(
                    "{what}: the registry sent {} bytes with digest {d}",
                    bytes.len()
                )));
            }
            Ok(bytes)
        })
    }

    /// The GET of a blob, redirects to storage followed (without our
    /// Authorization), answered 200.
    fn open_blob(
        &self,
        digest: &str,
        what: &str,
    ) -> Result<ureq::http::Response<ureq::Body>, Fault> {
        let url = self.url(&format!("blobs/{digest}"));
        let mut r = self
            .send("GET", &url, &[], Body::Empty, true)
            .map_err(Fault::Transient)?;
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
            200 => Ok(r),
            404 => Err(Fault::Fatal(anyhow!(
                "{what}: the repository {} has no such blob",
                self.repo
            ))),
            s if transient_status(s) => Err(Fault::Transient(anyhow!("HTTP {s}"))),
            s => Err(Fault::Fatal(anyhow!(
                "{what}: HTTP {s}: {}",
                error_text(&mut r)
            ))),
        }
    }
}
