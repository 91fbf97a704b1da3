//! Trust: the release checked as OpenShift checks it before anything is
//! built from it, and what we publish signed, with provenance
//! (docs/contract.md §8; UPSTREAM.md §29).
//! - `atomic`: GPG "atomic container signatures" of the release digest
//!   (library-go `pkg/verify`): keyrings and stores from a
//!   `release-verification` ConfigMap, signatures from stores and files;
//! - `sigstore`: cosign keys, signatures and attestations (the `.sig` and
//!   `.att` tag schemes, cosign 3 bundles), verified and written;
//! - `policy`: which releases must verify and by which keys; `lookup`:
//!   where their signatures are found and checked; `record`: what it gave;
//! - `provenance`: the SLSA statement of a build.
pub mod atomic;
pub mod lookup;
pub mod policy;
pub mod provenance;
pub mod record;
pub mod sigstore;
pub mod subject;
