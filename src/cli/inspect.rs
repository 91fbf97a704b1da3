//! `inspect` arguments: the release input plus output and import
//! switches. Handled by `commands::inspect`.
use super::input::InputArgs;
use clap::Args;

#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// Print one JSON document (schema: docs/inspect-json.md).
    #[arg(long)]
    pub json: bool,
    /// Pull the OS image and import its commit into the cache (needed to read
    /// the kernel, osname and bootimage configuration from the OS itself).
    #[arg(long)]
    pub import: bool,
}
