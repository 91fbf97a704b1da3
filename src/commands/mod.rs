//! Command handlers, named after the CLI path.
mod all_streams;
pub mod completions;
pub mod gc;
pub mod generate;
pub mod inspect;
pub mod platforms;
pub mod publish;
pub mod registry;
pub mod stream;
pub mod verify;
mod verify_manifest;
pub mod vsphere;

use crate::cli::{Cli, Command, InputArgs};
use crate::image::fetch::FetchOptions;
use crate::image::idms::Mirrors;
use crate::image::imageref::ImageRef;
use crate::oscontainer::Cache;
use crate::plan::input::Input;
use anyhow::Result;

/// Run a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Inspect(a) => inspect::run(a),
        Command::Generate(mut a) => {
            // In the tool's image: -o defaults to the /out volume, and the
            // output must be a writable volume (said in podman's terms).
            a.output = crate::util::container::output_dir(&a.output);
            if !a.dry_run {
                crate::util::container::check_output(&a.output)?;
            }
            generate::run(a)
        }
        Command::Verify(a) if a.manifest_only => verify_manifest::run(&a.dir),
        Command::Verify(a) => verify::run(a),
        Command::Platforms(a) => platforms::run(a),
        Command::Gc(a) => gc::run(a),
        Command::Vsphere(c) => vsphere::run(c),
        Command::Push(a) => registry::push(a),
        Command::Pull(a) => registry::pull(a),
        Command::Stream(crate::cli::StreamCommand::Merge(a)) => stream::merge(a),
        Command::VmJob(a) => crate::backend::vm::job_main(&a.job, &a.result),
        Command::Completions(a) => completions::completions(a),
        Command::Man(a) => completions::man(a),
    }
}

/// The input options shared by `inspect` and `generate`, validated before
/// any side effect.
pub fn input_settings(a: &InputArgs) -> Result<Input> {
    let release = ImageRef::parse(&a.release)?;
    let mut fetch =
        FetchOptions::resolve(a.registry_config.clone(), a.insecure, a.cert_dir.clone())?;
    fetch.arch = a
        .arch
        .as_deref()
        .map(crate::util::arch::parse_known)
        .transpose()?;
    let mirrors = a.idms_file.as_deref().map(Mirrors::from_file).transpose()?;
    Ok(Input {
        release,
        fetch,
        mirrors,
        os_stream: a.os_stream.clone(),
        cache_dir: a.cache_dir.clone().unwrap_or_else(Cache::default_dir),
        trust: crate::trust::policy::Options {
            verification_configs: a.trust.verification_config.clone(),
            signatures: a.trust.signatures.clone(),
            sigstore_keys: a.trust.sigstore_key.clone(),
            require: a.trust.require_signature,
            skip: a.trust.no_verify_signature,
        },
    })
}

pub use crate::util::cancel::block_on;

pub use crate::util::cancel::Interrupted;
