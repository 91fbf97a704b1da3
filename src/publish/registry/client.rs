//! A client of the OCI distribution API (opencontainers/distribution-spec
//! v1.1, spec.md; UPSTREAM.md section 23): blobs checked with HEAD, pushed
//! in one request when small and in chunks (PATCH with Content-Range) when
//! large, a failed chunk resumed from the offset the registry reports
//! (GET on the upload URL, its `Range`), manifests by tag or digest, and
//! the tag list. Authentication as registries ask for it
//! (`WWW-Authenticate`): Basic with the user's credentials, or a Bearer
//! token from the realm the registry names (docker's token protocol).
//!
//! This file only names the parts; `Client` and what it answers are
//! re-exported from them:
//! - `conn`: `Options`, the `Client`, its connection, requests and retries;
//! - `challenge`: the answer to a `WWW-Authenticate` challenge;
//! - `upload`: blobs pushed (`Pushed`);
//! - `download`: blobs pulled to a file;
//! - `manifests`: manifests read and written (`Manifest`), the tag list;
//! - `referrers`: the referrers API (`GET /v2/<name>/referrers/<digest>`);
//! - `wire`: the request body, header and error-body helpers, `Fault`.
mod challenge;
mod conn;
mod download;
mod manifests;
mod referrers;
mod upload;
mod wire;

pub use conn::{Client, Options, DEFAULT_CHUNK};
pub use manifests::{Manifest, INDEX_OCI, MANIFEST_OCI};
pub use upload::Pushed;

#[cfg(test)]
mod tests;
