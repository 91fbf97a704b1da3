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
}
