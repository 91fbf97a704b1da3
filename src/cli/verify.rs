//! `verify` arguments. Handled by `commands::verify`.
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// A `generate` output directory (its meta.json, stream.json and
    /// SHA256SUMS).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// The release to rebuild from. Default: meta.json's
    /// `release-payload.image`, and its digest must match.
    #[arg(value_name = "RELEASE")]
    pub release: Option<String>,
    /// Where the rebuild is written (kept when it differs, for a closer
    /// look). Default: a directory beside DIR, removed when all match.
    #[arg(long, value_name = "DIR")]
    pub rebuild_dir: Option<PathBuf>,
    /// Do not rebuild: check each disk image against the content manifest
    /// beside it (`*.contents.json.gz`, named with its sha256 in
    /// meta.json): the disk's size and every partition's digest, without
    /// privileges; as root also the paths of a differing filesystem
    /// (mounted read-only). Exit 0: all match; 1: one differs (named, with
    /// its partition and paths); 2: one could not be read.
    #[arg(long, conflicts_with_all = ["release", "rebuild_dir", "generate_flags"])]
    pub manifest_only: bool,
    /// More `generate` flags for the rebuild, after `--` (--os-stream,
    /// --cache-dir, --backend, --registry-config, --mkfs-tools...). The
    /// platforms, --arch, --compress, --base-url and --no-ostree-archive
    /// are read from DIR.
    #[arg(last = true, value_name = "GENERATE-FLAGS")]
    pub generate_flags: Vec<String>,
}
