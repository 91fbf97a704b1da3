//! Trust: the release checked as OpenShift checks it before anything is
//! built from it, and what we publish signed, with provenance
//! (SPEC §8; UPSTREAM.md §29).
//! - `atomic`: GPG "atomic container signatures" of the release digest
//!   (library-go `pkg/verify`): keyrings and stores from a
//!   `release-verification` ConfigMap, signatures from stores and files;
//! - `sigstore`: cosign keys, signatures and attestations (the `.sig` and
//!   `.att` tag schemes, cosign 3 bundles), verified and written.
pub mod atomic;
pub mod policy;
pub mod provenance;
pub mod sigstore;
