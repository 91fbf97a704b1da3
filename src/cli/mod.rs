//! Command-line types (clap derive) only; handlers live in `commands/`.
//!
//! This file holds the top-level `Cli` and its `Command`s; each command's
//! argument types live in a file named after it (as `commands/` is laid
//! out) and are re-exported here, so they are all `crate::cli::X`.
mod completions;
mod gc;
mod generate;
mod input;
mod inspect;
mod platforms;
mod registry;
mod stream;
mod verify;
mod vsphere;

pub use completions::{CompletionsArgs, ManArgs, Shell};
pub use gc::{parse_age, parse_size, GcArgs};
pub use generate::{AwsArgs, Backend, DeployOstree, GenerateArgs, Progress, VmArgs};
pub use input::InputArgs;
pub use inspect::InspectArgs;
pub use platforms::PlatformsArgs;
pub use registry::{PullArgs, PushArgs, RegistryArgs};
pub use stream::{StreamCommand, StreamMergeArgs};
pub use verify::VerifyArgs;
pub use vsphere::{VsphereCommand, VsphereImportArgs, VsphereTarget};

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Turn an OpenShift release image into bootable CoreOS disk images.
///
/// The OS travels inside the release image (`rhel-coreos`, formerly
/// `machine-os-content`); bootimage-gen resolves the release, imports that
/// OS, reads the bootimage configuration shipped with it, and writes what
/// coreos-assembler would have published for each platform.
#[derive(Debug, Parser)]
#[command(
    name = "bootimage-gen",
    version = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("BOOTIMAGE_GEN_GIT_COMMIT"), ")"),
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// More log output on stderr (-v: info, -vv: debug, -vvv: trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Print only errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per run: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what a release image holds: version, OS image, OS format, commit,
    /// kernel, bootimage configuration and pinned AMIs.
    ///
    /// Example: bootimage-gen inspect quay.io/openshift-release-dev/ocp-release:4.18.0-x86_64 --import
    Inspect(InspectArgs),
    /// Build the bootimages of one or more platforms from a release image.
    ///
    /// Resolves the release, imports its OS (cached by digest), builds one
    /// base disk with the OS deployed, and derives each platform from it by
    /// changing only the boot filesystem. Artifacts, meta.json and SHA256SUMS
    /// go to the output directory; files appear under their final names only
    /// when complete.
    ///
    /// Example: bootimage-gen generate quay.io/openshift-release-dev/ocp-release:4.18.0-x86_64 metal qemu -o ./out
    Generate(GenerateArgs),
    /// List the platforms, their artifacts and formats.
    Platforms(PlatformsArgs),
    /// Clean up after killed runs and prune the cache.
    ///
    /// Always: removes what runs that were killed (SIGKILL, OOM, a lost
    /// machine) left in the cache — their work directories, and with them
    /// the VM, mounts and loop devices they had — and the `.partial` files
    /// in each --output directory. Only what is provably stale goes: a work
    /// directory's name records its owner (PID, start time, boot), and it is
    /// removed only when that process is gone. `generate` does the same
    /// sweep when it starts.
    ///
    /// With --max-age and/or --max-size: also removes cache entries
    /// (imported OS images, VM appliances), least recently used first; an
    /// entry that a running `generate` or `inspect` uses is never removed.
    ///
    /// Examples:
    ///   bootimage-gen gc
    ///   bootimage-gen gc --max-age 14d --max-size 20G
    ///   bootimage-gen gc --max-size 0 --dry-run
    #[command(verbatim_doc_comment)]
    Gc(GcArgs),
    /// vSphere: import an OVA into vCenter as a VM template.
    #[command(subcommand)]
    Vsphere(VsphereCommand),
    /// Push a `generate` output to a registry as OCI artifacts.
    ///
    /// Every published file becomes an OCI artifact (artifact type
    /// application/vnd.diskimage.<format>[.<compression>], a config with
    /// the architecture and os, the file as its one layer titled with its
    /// name), meta.json and stream.json too; OCI archives (the kubevirt
    /// containerDisk, the OS container) are also pushed as the images they
    /// hold, for an ordinary pull. The index at REPO:TAG lists them all,
    /// each with its platform: pushes of other arches or streams into the
    /// same REPO:TAG (from other machines, at the same time) add to it.
    /// Blobs the registry has are not sent again; large ones go in chunks,
    /// resumed where a failed chunk stopped.
    ///
    /// Example: bootimage-gen push ./out registry.example.com:5000/ocp/bootimages:4.18.0
    Push(PushArgs),
    /// Pull bootimages that `push` put in a registry back to files.
    ///
    /// Every blob is checked against its digest and size before it takes
    /// its final name. meta.json and stream.json come back narrowed to what
    /// was pulled, stream.json's locations under --base-url (the web server
    /// that will serve the directory), and SHA256SUMS is written. Several
    /// arches or streams go to <DIR>/<arch> and <DIR>/<stream>.
    ///
    /// Example: bootimage-gen pull registry.example.com:5000/ocp/bootimages:4.18.0 -o /srv/www/rhcos --arch x86_64 --platform metal --platform live-iso --base-url http://mirror.example/rhcos
    Pull(PullArgs),
    /// Rebuild a `generate` output from its release and compare byte for
    /// byte.
    ///
    /// Reads what DIR holds (meta.json: the release, arch and platforms;
    /// the file names: the compression; stream.json: the base URL), runs
    /// `generate` again into a directory of its own, and compares every
    /// file SHA256SUMS lists, and meta.json, stream.json and SHA256SUMS
    /// themselves. Exit status: 0 when all match; 1 when a file differs
    /// (each named); 2 when the rebuild could not be made (its error said).
    /// Bytes match when the same mkfs makes the filesystems
    /// (docs/contract.md §9): the run says which.
    ///
    /// Example: bootimage-gen verify ./out -- --cache-dir /var/tmp/verify-cache
    Verify(VerifyArgs),
    /// Stream metadata: merge the stream.json of several runs.
    #[command(subcommand)]
    Stream(StreamCommand),
    /// Run a disk job inside the backend VM (internal).
    #[command(hide = true)]
    VmJob(VmJobArgs),
    /// Print the shell completion script for bash, zsh or fish.
    ///
    /// Example: bootimage-gen completions bash > /etc/bash_completion.d/bootimage-gen
    Completions(CompletionsArgs),
    /// Print the man page (roff), or write one page per command to a
    /// directory.
    ///
    /// Example: bootimage-gen man | man -l -
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub struct VmJobArgs {
    /// The job file the host wrote.
    pub job: PathBuf,
    /// Where to write the result (JSON).
    pub result: PathBuf,
}
