//! `generate` arguments: `GenerateArgs` and the option groups and value
//! enums only it takes (backend, progress, VM, AWS registration, whose
//! ostree deploys); each flag declared once, here, and read once into
//! the settings (`commands::generate::settings`). The release input (`input`) and vSphere placement
//! (`vsphere`) are shared and come from their own files. Handled by
//! `commands::generate`.
use super::input::InputArgs;
use super::vsphere::VsphereTarget;
pub use crate::backend::Backend;
pub use crate::sys::ramstage::StageIn;
pub use crate::util::progress::Progress;
use clap::builder::PossibleValue;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// Platforms to build (see `bootimage-gen platforms`).
    #[arg(value_name = "PLATFORM", required = true)]
    pub platforms: Vec<String>,
    /// Output directory (created if missing).
    #[arg(short, long, value_name = "DIR", default_value = "bootimages")]
    pub output: PathBuf,
    /// Where the privileged disk steps run (partitioning, mkfs, deployment,
    /// bootloaders, boot filesystem edits). Fetching, importing, encoding
    /// and compressing always run on this host, unprivileged.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    #[command(flatten)]
    pub vm: VmArgs,
    /// Compression of the metal and qemu artifacts: none, gzip, xz or zstd.
    /// Default: the OS's image.json `compressor` (gzip for RHCOS).
    #[arg(long, value_name = "KIND")]
    pub compress: Option<String>,
    /// Print the validated plan as JSON and stop; nothing is written.
    #[arg(long)]
    pub dry_run: bool,
    /// Progress reporting on stderr.
    #[arg(long, value_enum, default_value_t = Progress::Auto)]
    pub progress: Progress,
    /// Base URL where the output directory will be served (e.g. an internal
    /// web server in a disconnected site): stream.json locations become
    /// URL/FILE instead of FILE.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Do not write the OS container as `<name>-<version>-ostree.<arch>.ociarchive`
    /// (cosa publishes it as meta.json `images.ostree`, which cosa's schema
    /// requires; skipping it saves a second read of the OS image).
    #[arg(long)]
    pub no_ostree_archive: bool,
    /// Also write each platform's uncompressed raw disk as `<platform>.raw`
    /// (sparse) in DIR, for checks with independent tools.
    #[arg(long, value_name = "DIR", hide = true)]
    pub debug_raw_dir: Option<PathBuf>,
    /// Whose ostree deploys the OS: `os` runs the OS image's own
    /// /usr/bin/ostree in a buildroot made of the OS tree (as
    /// coreos-assembler does), so the composefs image, /var and labels are
    /// what that OS's ostree writes; an OS that ships no ostree CLI is
    /// deployed by this machine's, and the run says so. `host` always uses
    /// this machine's ostree (an OS that requires composefs then fails to
    /// boot when this ostree writes no composefs image).
    #[arg(long, value_name = "WHO", value_enum, default_value_t = DeployOstree::Os)]
    pub deploy_ostree: DeployOstree,
    /// The mkfs that makes the root and boot filesystems in one pass from
    /// the staged tree, so that the same release gives the same bytes
    /// anywhere (mkfs.xfs -p of xfsprogs 6.19 or later, mke2fs -d of
    /// e2fsprogs 1.47.3 or later, and xfs_db): an entry of
    /// scripts/mkfs-root.sh (Debian's newer xfsprogs and e2fsprogs, run by
    /// their own loader), its cache directory, or a directory holding the
    /// three. Default: this host's when new enough, else the newest entry
    /// under /usr/lib/bootimage-gen/mkfs-root (this tool's image),
    /// $BOOTIMAGE_CACHE/mkfs-root (as root /var/cache/bootimage-gen/mkfs-root),
    /// ~/.cache/bootimage-gen/mkfs-root or <cache-dir>/mkfs-root. Without
    /// one, this machine's kernel writes the filesystems as the OS is
    /// deployed, and the run says they are not reproducible. The run says
    /// which mkfs wrote them.
    #[arg(long, value_name = "DIR", env = "BOOTIMAGE_GEN_MKFS_TOOLS")]
    pub mkfs_tools: Option<PathBuf>,
    /// Where the OS is staged before mkfs makes the filesystems from it
    /// (with a mkfs from --mkfs-tools and the loopback backend). In memory
    /// the staged data never reaches a disk, so the OS's bytes are written
    /// once; the run says where it staged and why.
    #[arg(long, value_name = "WHERE", value_enum, default_value_t = StageIn::Auto, env = "BOOTIMAGE_GEN_STAGE_IN")]
    pub stage_in: StageIn,
    /// Worker threads for encoding and compression (default: all cores).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub aws: AwsArgs,
    /// After the build, push the output to a registry as `bootimage-gen
    /// push` does (REGISTRY/REPOSITORY:TAG). The registry is reached before
    /// the build, with the release's --registry-config, --insecure and
    /// --cert-dir; runs of other arches or streams pushing to the same REF
    /// add to its index.
    #[arg(long, value_name = "REF", help_heading = "Registry")]
    pub push: Option<String>,
    /// Sign with this cosign private key (its password in
    /// COSIGN_PASSWORD): the provenance beside meta.json as a DSSE
    /// envelope (provenance.dsse.json), and with --push what is pushed, as
    /// `push --sign-key` does.
    #[arg(long, value_name = "FILE", help_heading = "Registry")]
    pub sign_key: Option<PathBuf>,
    /// After the build, import the vmware OVA into vCenter as the template
    /// NAME, as `vsphere import` does (vCenter and credentials from GOVC_URL,
    /// GOVC_USERNAME, GOVC_PASSWORD; placement from the vSphere flags or
    /// GOVC_*). Needs the vmware platform.
    #[arg(long, value_name = "NAME", help_heading = "vSphere")]
    pub vsphere_template: Option<String>,
    /// Skip TLS verification of vCenter (test systems only; said on stderr).
    #[arg(long, requires = "vsphere_template", help_heading = "vSphere")]
    pub vsphere_insecure: bool,
    #[command(flatten)]
    pub vsphere: VsphereTarget,
}

/// Registering the aws disk as an AMI (docs/contract.md §6.3), for regions the
/// release's pinned AMIs do not cover.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "AWS")]
pub struct AwsArgs {
    /// Upload the aws disk as an EBS snapshot (EBS direct API, all-zero
    /// blocks skipped) and register it as an AMI in each --aws-region; an
    /// AMI of the same name already there is reused. Credentials, profile
    /// and default region come from the standard AWS chain (AWS_* variables,
    /// ~/.aws/config and ~/.aws/credentials, AWS_PROFILE). The AMIs go to
    /// meta.json `amis` and stream.json `images.aws.regions`. Needs the aws
    /// platform.
    #[arg(long)]
    pub aws_register: bool,
    /// Region to register the AMI in (repeat for several, e.g. us-iso-east-1).
    /// Default: the region of the AWS configuration (AWS_REGION, profile).
    #[arg(long, value_name = "REGION", requires = "aws_register")]
    pub aws_region: Vec<String>,
    /// Endpoint URL of the EC2 and EBS APIs (private or disconnected regions,
    /// or a local test endpoint), for every region. Per-service URLs can be
    /// set with AWS_ENDPOINT_URL_EC2 and AWS_ENDPOINT_URL_EBS instead; a
    /// private CA with AWS_CA_BUNDLE.
    #[arg(long, value_name = "URL", requires = "aws_register")]
    pub aws_endpoint_url: Option<String>,
    /// Name of the AMI. Default: `<name>-<version>-<arch>`
    /// (e.g. rhcos-418.94.202501221327-0-x86_64).
    #[arg(long, value_name = "NAME", requires = "aws_register")]
    pub aws_ami_name: Option<String>,
}

/// The VM of the kvm and nokvm backends.
#[derive(Debug, Clone, Args)]
pub struct VmArgs {
    /// Memory of the backend VM, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 2048)]
    pub vm_memory: u32,
    /// CPUs of the backend VM (default: this host's, at most 4).
    #[arg(long, value_name = "N")]
    pub vm_cpus: Option<u32>,
    /// Stop the backend VM when it shows no sign of life for this many
    /// seconds (nested KVM can start and then hang); while it boots, before
    /// its first sign of life, it gets at least 120 s.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub vm_watchdog: u64,
}

/// Whose ostree deploys the OS (`--deploy-ostree`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DeployOstree {
    /// The OS image's own ostree, when it ships one.
    Os,
    /// This machine's ostree.
    Host,
}

// The values of --backend and --progress are the layers' own enums (nothing
// below imports clap); clap learns their names and help here.

impl clap::ValueEnum for Backend {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            Backend::Auto,
            Backend::Loopback,
            Backend::Kvm,
            Backend::Nokvm,
        ]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Backend::Auto => PossibleValue::new("auto").help(
                "loopback when running as root with loop devices, else kvm when /dev/kvm is usable, else nokvm",
            ),
            Backend::Loopback => PossibleValue::new("loopback")
                .help("On this host, with loop devices and mounts (needs root)"),
            Backend::Kvm => PossibleValue::new("kvm")
                .help("Inside a throw-away VM with KVM acceleration (needs /dev/kvm, no root)"),
            Backend::Nokvm => PossibleValue::new("nokvm").help(
                "Inside a throw-away VM under pure emulation (TCG): slow, needs neither root nor KVM",
            ),
        })
    }
}

impl clap::ValueEnum for StageIn {
    fn value_variants<'a>() -> &'a [Self] {
        &[StageIn::Auto, StageIn::Memory, StageIn::Disk]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            StageIn::Auto => PossibleValue::new("auto").help(
                "memory (a tmpfs in the work directory) when the staged data takes at most half of the available memory, else disk",
            ),
            StageIn::Memory => PossibleValue::new("memory")
                .help("a tmpfs in the work directory, or an error when it does not fit"),
            StageIn::Disk => PossibleValue::new("disk").help("files in the work directory"),
        })
    }
}

impl clap::ValueEnum for Progress {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            Progress::Auto,
            Progress::Tty,
            Progress::Plain,
            Progress::Json,
        ]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Progress::Auto => {
                PossibleValue::new("auto").help("Bars on a terminal, plain lines otherwise")
            }
            Progress::Tty => PossibleValue::new("tty").help("Progress bars"),
            Progress::Plain => PossibleValue::new("plain").help("One line per step"),
            Progress::Json => {
                PossibleValue::new("json").help("JSON Lines (one object per event) for CI")
            }
        })
    }
}
