//! `InputArgs`: the release image and how to reach it (registry
//! credentials, TLS, mirrors, OS stream, arch, cache), flattened into both
//! `inspect` and `generate`; read by `commands::input_settings`.
use clap::Args;
use std::path::PathBuf;

/// Where the release comes from and how to reach it.
#[derive(Debug, Clone, Args)]
pub struct InputArgs {
    /// The release image: docker://HOST/REPO:TAG|@DIGEST (a bare HOST/REPO... means
    /// docker://), oci:DIR[:TAG], oci-archive:FILE[:TAG] or docker-archive:FILE.
    #[arg(value_name = "RELEASE")]
    pub release: String,
    /// Registry credentials (containers auth.json format). Default: $REGISTRY_AUTH_FILE,
    /// then the usual containers auth files.
    #[arg(long, value_name = "FILE")]
    pub registry_config: Option<PathBuf>,
    /// Allow plain HTTP and unverified TLS registries. Only when asked.
    #[arg(long)]
    pub insecure: bool,
    /// Directory of extra CA certificates (*.crt) to trust for registries.
    #[arg(long, value_name = "DIR")]
    pub cert_dir: Option<PathBuf>,
    /// ImageDigestMirrorSet (or ImageContentSourcePolicy) YAML: for references by
    /// digest, try these mirrors first, as `oc` does.
    #[arg(long, value_name = "FILE")]
    pub idms_file: Option<PathBuf>,
    /// The OS stream to use when the release carries more than one: a
    /// stream (rhel-9, rhel-10) or an OS tag (rhel-coreos-10). Default: the
    /// MCO's: the only stream, else rhel-9 for OCP 4.x and rhel-10 from 5.
    /// `generate --os-stream all` builds every stream, each in its own
    /// output directory (<output>/<stream>), plus <output>/streams.json.
    #[arg(long, value_name = "STREAM|TAG")]
    pub os_stream: Option<String>,
    /// Architecture to pick when the release (or its OS image) is a manifest
    /// list / OCI index, such as the `-multi` payloads: x86_64, aarch64,
    /// ppc64le or s390x (amd64 and arm64 are accepted too). Default: this
    /// host's. The chosen digest is printed by `inspect`.
    #[arg(long, value_name = "ARCH")]
    pub arch: Option<String>,
    /// Cache directory (imported OS commits). Default: $XDG_CACHE_HOME/bootimage-gen.
    #[arg(long, value_name = "DIR", env = "BOOTIMAGE_GEN_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    #[command(flatten)]
    pub trust: TrustArgs,
}

/// How the release's signature is checked before anything is built from
/// it, as OpenShift checks an update (docs/contract.md §8). An official release (its
/// pull spec, or the IDMS source it mirrors, is Red Hat's or OKD's) must
/// verify against the built-in keys (GPG or cosign, either); any release
/// must when keys are given or with --require-signature. Keys given
/// replace every built-in one, and each given must verify.
#[derive(clap::Args, Debug, Clone, Default)]
#[command(next_help_heading = "Release signatures")]
pub struct TrustArgs {
    /// A release-verification ConfigMap (YAML or JSON, as OpenShift ships
    /// it in openshift-config-managed): its `verifier-public-key-*`
    /// keyrings must each be satisfied by a GPG signature of the release,
    /// read from its `store-*` URLs and --signatures. Replaces the built-in
    /// keys. Repeatable: each ConfigMap must verify.
    #[arg(long, value_name = "FILE")]
    pub verification_config: Vec<PathBuf>,
    /// GPG release signatures: the ConfigMap `oc adm release mirror
    /// --release-image-signature-to-dir` writes, oc-mirror's
    /// signature-configmap.{json,yaml}, a directory of those, or a
    /// lookaside directory (sha256=HEX/signature-N). Repeatable. What a
    /// disconnected site uses when the stores are out of reach.
    #[arg(long, value_name = "FILE|DIR")]
    pub signatures: Vec<PathBuf>,
    /// A cosign public key (PEM): the release's per-arch manifest must
    /// carry a cosign signature by it (the `.sig` tag, or a cosign 3
    /// bundle). Replaces the built-in keys. Repeatable: a signature by any
    /// one of them verifies (and any --verification-config must too).
    #[arg(long, value_name = "FILE")]
    pub sigstore_key: Vec<PathBuf>,
    /// Verification is required for any release, not only official ones.
    #[arg(long, conflicts_with = "no_verify_signature")]
    pub require_signature: bool,
    /// Build from a release whose signature cannot be verified (recorded
    /// in meta.json as not verified).
    #[arg(long)]
    pub no_verify_signature: bool,
}
