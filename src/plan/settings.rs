//! Settings: `generate`'s flags, validated, before anything runs
//! (ripgrep's low args -> high args: each flag is declared once, in
//! `cli::GenerateArgs`, and read once into [`Settings`] by
//! `commands::generate::settings`). Nothing here touches the network or
//! disk beyond reading the files the flags name.
use super::input::Input;
use super::preflight::{self, Named};
use crate::backend::{self, vm::VmSettings};
use crate::io::compress::Compressor;
use crate::platforms::{PlatformSpec, Upload};
use crate::publish::aws;
use crate::util::progress::Progress;
use anyhow::{bail, Result};
use std::path::PathBuf;

/// Validated settings of one `generate` run.
pub struct Settings {
    pub input: Input,
    /// The platforms named explicitly (`all` is expanded once the release's
    /// stream is known).
    pub named: Vec<&'static PlatformSpec>,
    /// `all` was named.
    pub all: bool,
    pub aws: Option<aws::Settings>,
    pub compressor: Option<Compressor>,
    pub base_url: Option<String>,
    pub output: PathBuf,
    pub backend: backend::Backend,
    pub vm: VmSettings,
    pub progress: Progress,
    pub dry_run: bool,
    pub ostree_archive: bool,
    pub debug_raw_dir: Option<PathBuf>,
    /// Deploy with the OS's own ostree when it ships one.
    pub deploy_with_os: bool,
    /// Worker threads (0: one per CPU).
    pub threads: usize,
    /// `--mkfs-tools` (else found, see `disk::mkfs::find_tools`).
    pub mkfs_tools: Option<PathBuf>,
    /// `--stage-in`: where the OS is staged before mkfs.
    pub stage_in: crate::sys::ramstage::StageIn,
}

/// The checks of `generate`'s flags that need more than one of them, or
/// the platform table: `--aws-register` needs the aws platform.
pub fn check_uploads(named: &Named, aws: Option<&aws::Settings>) -> Result<()> {
    if aws.is_some() && !named.upload_to(Upload::Aws) {
        bail!(
            "--aws-register registers the aws disk: add the aws platform (or all) to the platforms"
        );
    }
    Ok(())
}

/// `--base-url` and `-o`, checked before anything runs.
pub fn check_output(base_url: Option<&str>, output: &std::path::Path) -> Result<()> {
    if let Some(u) = base_url {
        preflight::check_base_url(u)?;
    }
    preflight::check_output_dir(output)
}
