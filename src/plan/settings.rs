//! Settings: the raw `generate` flags, validated, before anything runs
//! (ripgrep's lowargs -> hiargs). Nothing here touches the network or disk
//! beyond reading the files the flags name.
use super::input::Input;
use super::preflight::{self, Named};
use crate::backend::{self, vm::VmArgs};
use crate::io::compress::Compressor;
use crate::platforms::{PlatformSpec, Upload};
use crate::publish::aws;
use crate::util::progress::Progress;
use anyhow::{bail, Result};
use std::path::PathBuf;

/// `generate`'s flags as given (plain types: the CLI converts its own).
pub struct Flags {
    pub platforms: Vec<String>,
    pub aws: aws::AwsArgs,
    pub compress: Option<String>,
    pub base_url: Option<String>,
    pub output: PathBuf,
    pub backend: backend::Backend,
    pub vm: VmArgs,
    pub progress: Progress,
    pub dry_run: bool,
    pub no_ostree_archive: bool,
    pub debug_raw_dir: Option<PathBuf>,
    /// Deploy with the OS's own ostree when it ships one.
    pub deploy_with_os: bool,
    pub threads: Option<usize>,
}

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
    pub vm: VmArgs,
    pub progress: Progress,
    pub dry_run: bool,
    pub ostree_archive: bool,
    pub debug_raw_dir: Option<PathBuf>,
    /// Deploy with the OS's own ostree when it ships one.
    pub deploy_with_os: bool,
    /// Worker threads (0: one per CPU).
    pub threads: usize,
}

impl Settings {
    /// Validate `f`; `input` turns the input flags into [`Input`] (after the
    /// other flags were checked, as before).
    pub fn new(f: Flags, input: impl FnOnce() -> Result<Input>) -> Result<Settings> {
        let named = Named::parse(&f.platforms)?;
        let aws_settings = aws::Settings::from_args(&f.aws)?;
        if aws_settings.is_some() && !named.upload_to(Upload::Aws) {
            bail!(
                "--aws-register registers the aws disk: add the aws platform (or all) to the platforms"
            );
        }
        let compressor = f.compress.as_deref().map(Compressor::parse).transpose()?;
        if let Some(u) = &f.base_url {
            preflight::check_base_url(u)?;
        }
        preflight::check_output_dir(&f.output)?;
        Ok(Settings {
            input: input()?,
            named: named.specs,
            all: named.all,
            aws: aws_settings,
            compressor,
            base_url: f.base_url,
            output: f.output,
            backend: f.backend,
            vm: f.vm,
            progress: f.progress,
            dry_run: f.dry_run,
            ostree_archive: !f.no_ostree_archive,
            debug_raw_dir: f.debug_raw_dir,
            deploy_with_os: f.deploy_with_os,
            threads: f.threads.unwrap_or(0),
        })
    }
}
