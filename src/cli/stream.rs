//! `stream` arguments: the `stream merge` subcommand and its inputs,
//! output and base URL. Handled by `commands::stream`.
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum StreamCommand {
    /// Merge the stream.json of runs on several machines (one per arch,
    /// per arch and stream, or per platform group) into one document, as a
    /// CI matrix's last step: every arch of every input; an arch in several
    /// inputs only when they are one build (runs split by platform: their
    /// platforms united, each file once), else both inputs are named.
    /// streams.json files (`generate --os-stream all`) merge stream key by
    /// stream key into a streams.json.
    ///
    /// Locations relative to an input's directory are rewritten relative
    /// to the output's directory (or put under --base-url), so each still
    /// names its file; URLs are kept.
    ///
    /// Example: bootimage-gen stream merge out/x86_64 out/aarch64 -o out/stream.json --base-url http://mirror.example/rhcos
    #[command(verbatim_doc_comment)]
    Merge(StreamMergeArgs),
}

#[derive(Debug, Args)]
pub struct StreamMergeArgs {
    /// stream.json or streams.json files, or generate output directories
    /// (their stream.json, else streams.json).
    #[arg(value_name = "INPUT", required = true)]
    pub inputs: Vec<PathBuf>,
    /// The merged document: a FILE.json, or a directory that gets
    /// stream.json (or streams.json).
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    /// Where the output's directory will be served: locations become
    /// URL/PATH (PATH relative to the output's directory).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The merged stream's name, when the inputs name theirs differently.
    #[arg(long, value_name = "NAME")]
    pub stream: Option<String>,
}
