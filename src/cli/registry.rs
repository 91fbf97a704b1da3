//! `push` and `pull` arguments, and `RegistryArgs`, how both reach a
//! registry (credentials, TLS). Handled by `commands::registry`.
use clap::Args;
use std::path::PathBuf;

/// How `push` and `pull` reach a registry.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Registry")]
pub struct RegistryArgs {
    /// Credentials file (containers-auth.json, as `podman login` writes
    /// it). Default: REGISTRY_AUTH_FILE, else podman's and docker's files.
    #[arg(long, value_name = "FILE")]
    pub authfile: Option<PathBuf>,
    /// Plain HTTP, or HTTPS without verifying the certificate (test
    /// registries only).
    #[arg(long)]
    pub insecure: bool,
    /// A PEM file of CA certificates to trust besides the system's.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// A directory of CA certificates (*.crt) to trust besides the
    /// system's, as `generate --cert-dir` and skopeo take it.
    #[arg(long, value_name = "DIR", conflicts_with = "ca_file")]
    pub cert_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PushArgs {
    /// The output directory of `generate` (with meta.json, or one
    /// subdirectory per stream as `--os-stream all` writes them).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Where to: REGISTRY/REPOSITORY:TAG (docker:// accepted).
    #[arg(value_name = "REF")]
    pub reference: String,
    /// The stream name of a one-stream DIR. Default: its stream.json's
    /// `stream` (subdirectories are named after their stream).
    #[arg(long, value_name = "NAME")]
    pub stream: Option<String>,
    /// Upload chunk size in MiB (blobs up to it go in one request).
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub chunk_mib: u64,
    /// Sign what is pushed with this cosign private key (its password in
    /// COSIGN_PASSWORD): the index and every manifest it lists, as `cosign
    /// sign --key` does, and a SLSA provenance v1 attestation on the index
    /// (`cosign verify-attestation --type slsaprovenance1` checks it).
    #[arg(long, value_name = "FILE")]
    pub sign_key: Option<PathBuf>,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Debug, Args)]
pub struct PullArgs {
    /// What to pull: REGISTRY/REPOSITORY:TAG or @sha256:… of an index
    /// made by `push`.
    #[arg(value_name = "REF")]
    pub reference: String,
    /// Output directory.
    #[arg(short, long, value_name = "DIR")]
    pub output: PathBuf,
    /// Only this architecture (x86_64, aarch64, ppc64le, s390x).
    #[arg(long, value_name = "ARCH")]
    pub arch: Option<String>,
    /// Only this stream (as pushed: rhel-9, rhel-10, or a stream.json's
    /// name).
    #[arg(long, value_name = "STREAM")]
    pub stream: Option<String>,
    /// Only these meta.json keys (metal, qemu, live-iso, ...; repeatable).
    /// meta.json and stream.json always come.
    #[arg(long = "platform", value_name = "KEY")]
    pub platforms: Vec<String>,
    /// Base URL that stream.json's locations get (where the directory
    /// will be served). Default: the bare file names.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Verify the index's cosign signature with this public key (PEM)
    /// before any file is written; repeatable (any one suffices).
    #[arg(long, value_name = "FILE")]
    pub sigstore_key: Vec<PathBuf>,
    #[command(flatten)]
    pub registry: RegistryArgs,
}
