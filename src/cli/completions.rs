//! `completions` and `man` arguments: the shell to write a completion
//! script for, and where man pages go. Handled by `commands::completions`.
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Shells `completions` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write bootimage-gen.1 and bootimage-gen-<command>.1 into DIR instead
    /// of printing bootimage-gen.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}
