//! `platforms` arguments. Handled by `commands::platforms`.
use clap::Args;

#[derive(Debug, Args)]
pub struct PlatformsArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}
