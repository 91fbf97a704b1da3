//! cosign-compatible keys, signatures and attestations, read and written
//! (docs/contract.md §8; UPSTREAM.md §29b). The judge is the real cosign CLI (2.5 and
//! 3.1, tests/trust/cosign.rs), both ways.
//!
//! In: PEM keys (cosign.pub, the encrypted cosign.key and its password, the
//! OpenShift ClusterImagePolicy's key built in), a registry `Client` and an
//! image digest. Out: whether and by what an image is signed (`Verified`),
//! signatures and in-toto attestations pushed as cosign pushes them, DSSE
//! envelopes and SLSA provenance statements.
//!
//! Where cosign keeps what (sigstore/cosign `specs/SIGNATURE_SPEC.md`,
//! `pkg/oci/static`, `pkg/oci/remote/write.go`):
//! - cosign 2 signatures: tag `sha256-<hex>.sig`, an OCI manifest whose
//!   layers are "simple signing" payloads, each signature base64 in the
//!   layer annotation `dev.cosignproject.cosign/signature`;
//! - cosign 2 attestations: tag `sha256-<hex>.att`, layers of DSSE
//!   envelopes (`application/vnd.dsse.envelope.v1+json`) with the layer
//!   annotation `predicateType`;
//! - cosign 3 (new bundle format, its default): a sigstore bundle v0.3 as
//!   the one layer of an OCI 1.1 referrer manifest (`subject` = the image),
//!   found through `GET /v2/<name>/referrers/<digest>` or, on registries
//!   without that API, the image index under the tag `sha256-<hex>`; a
//!   signature is a DSSE envelope of an in-toto statement with predicate
//!   type `https://sigstore.dev/cosign/sign/v1` whose subject is the digest.
//!
//! The parts:
//! - `der`: PEM armour and the few DER shapes keys need;
//! - `keys`: `PublicKey` (ECDSA P-256/P-384, RSA), `SigningKey`, the
//!   built-in OpenShift key;
//! - `encrypted`: cosign's encrypted private key (scrypt + secretbox);
//! - `dsse`: DSSE envelopes (PAE, sign, verify);
//! - `statement`: in-toto Statement v1 and SLSA provenance v1;
//! - `verify`: `verify_image` over `.sig` tags and bundles;
//! - `write`: `sign_image` and `attest_image`.
mod der;
mod dsse;
mod encrypted;
mod keys;
mod statement;
mod verify;
mod write;

pub use dsse::{dsse_sign, dsse_verify, pae};
pub use keys::{builtin_openshift_key, builtin_openshift_scopes, KeyKind, PublicKey, SigningKey};
pub use statement::{slsa_provenance, SLSA_BUILD_TYPE};
pub use verify::{verify_image, Verified};
pub use write::{attest_image, sign_image};

/// The media type of a cosign "simple signing" payload layer (cosign
/// `pkg/types/media.go` `SimpleSigningMediaType`).
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// `critical.type` of a cosign image signature (SIGNATURE_SPEC.md
/// "Simple Signing").
pub const COSIGN_SIGNATURE_TYPE: &str = "cosign container image signature";
/// The layer annotation holding a signature, base64 (cosign
/// `pkg/oci/static/signature.go` `SignatureAnnotationKey`).
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The layer media type of a DSSE envelope (cosign `pkg/types`
/// `DssePayloadType`).
pub const DSSE_MEDIA_TYPE: &str = "application/vnd.dsse.envelope.v1+json";
/// The DSSE payload type of an in-toto statement (cosign `pkg/types`
/// `IntotoPayloadType`).
pub const INTOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// The layer annotation naming an attestation's predicate type (cosign
/// `cmd/cosign/cli/attest/attest.go`).
pub const PREDICATE_TYPE_ANNOTATION: &str = "predicateType";
/// The predicate type of cosign 3's image signature statement (cosign
/// `pkg/types/predicate.go` `CosignSignPredicateType`).
pub const COSIGN_SIGN_PREDICATE_TYPE: &str = "https://sigstore.dev/cosign/sign/v1";
/// The media type prefix of a sigstore bundle layer (cosign
/// `pkg/oci/remote/signatures.go` `Bundle`; v0.3 is
/// `application/vnd.dev.sigstore.bundle.v0.3+json`).
pub const BUNDLE_MEDIA_TYPE_PREFIX: &str = "application/vnd.dev.sigstore.bundle";

/// The tag cosign derives from a digest: `sha256:<hex>` → `sha256-<hex>`
/// plus `suffix` (".sig", ".att", or "" for the referrers tag schema).
pub fn digest_tag(digest: &str, suffix: &str) -> String {
    format!("{}{suffix}", digest.replacen(':', "-", 1))
}

#[cfg(test)]
mod tests;
