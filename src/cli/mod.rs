//! Command-line types (clap derive) only; handlers live in `commands/`.
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

#[derive(Debug, Subcommand)]
pub enum StreamCommand {
    /// Merge the stream.json of runs on several machines (one per arch,
    /// or per arch and stream) into one document, as a CI matrix's last
    /// step: every arch of every input; the same arch twice only when both
    /// are the same build. streams.json files (`generate --os-stream all`)
    /// merge stream key by stream key into a streams.json.
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

#[derive(Debug, Subcommand)]
pub enum VsphereCommand {
    /// Import an OVA (from `generate … vmware`) into vCenter as a VM template,
    /// as openshift-install and the MCO do, then print the `oc patch` of the
    /// MachineSets and the MachineConfiguration skew record.
    ///
    /// vCenter and credentials come from govc's environment: GOVC_URL,
    /// GOVC_USERNAME, GOVC_PASSWORD (never a flag), GOVC_TLS_CA_CERTS,
    /// GOVC_INSECURE, or from --credentials FILE. A template of that name with the same RHCOS version is
    /// reused; a different one is refused unless --replace. On failure or
    /// Ctrl-C nothing is left in vCenter.
    ///
    /// Example: GOVC_URL=https://vc.example.com/sdk GOVC_USERNAME=admin GOVC_PASSWORD=... bootimage-gen vsphere import rhcos.ova --name rhcos-4.20
    Import(VsphereImportArgs),
}

#[derive(Debug, Args)]
pub struct VsphereImportArgs {
    /// The OVA.
    #[arg(value_name = "OVA")]
    pub ova: PathBuf,
    /// Name of the template.
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// Skip TLS verification of vCenter (test systems only; said on
    /// stderr). Also GOVC_INSECURE=1.
    #[arg(long)]
    pub insecure: bool,
    #[command(flatten)]
    pub target: VsphereTarget,
}

/// Where a vSphere template goes and what is printed about it (shared by
/// `vsphere import` and `generate … vmware --vsphere-template`).
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "vSphere")]
pub struct VsphereTarget {
    /// Datacenter (name or inventory path). Default: the only one.
    #[arg(long = "datacenter", env = "GOVC_DATACENTER", value_name = "DC")]
    pub datacenter: Option<String>,
    /// Datastore (name or inventory path). Default: the only one.
    #[arg(long = "datastore", env = "GOVC_DATASTORE", value_name = "DS")]
    pub datastore: Option<String>,
    /// Resource pool, e.g. CLUSTER/Resources (or an inventory path).
    /// Default: the only one.
    #[arg(
        long = "resource-pool",
        env = "GOVC_RESOURCE_POOL",
        value_name = "POOL"
    )]
    pub resource_pool: Option<String>,
    /// VM folder (name under the datacenter's vm folder, or an inventory
    /// path). Default: the datacenter's vm folder.
    #[arg(long = "folder", env = "GOVC_FOLDER", value_name = "FOLDER")]
    pub folder: Option<String>,
    /// Network the OVA's one network is mapped to. Default: the OVA's
    /// network name if it exists, else the only one.
    #[arg(long = "network", env = "GOVC_NETWORK", value_name = "NET")]
    pub network: Option<String>,
    /// Disk provisioning: thin, thick or eagerZeroedThick. Default: the
    /// datastore's.
    #[arg(long = "disk-provisioning", value_name = "TYPE", value_parser = ["thin", "thick", "eagerZeroedThick"])]
    pub disk_provisioning: Option<String>,
    /// vCenter credentials from a file instead of the environment: govc's
    /// GOVC_URL, GOVC_USERNAME, GOVC_PASSWORD, GOVC_TLS_CA_CERTS,
    /// GOVC_INSECURE as NAME=value lines, or the cluster's own Secret
    /// (oc get secret -n kube-system vsphere-creds -o yaml). Its values win
    /// over the environment. Keep it mode 600.
    #[arg(long = "credentials", value_name = "FILE")]
    pub credentials: Option<PathBuf>,
    /// Replace a template of that name holding another RHCOS version.
    #[arg(long = "replace")]
    pub replace: bool,
    /// MachineSet to print the `oc patch` for (repeat). Default: a loop over
    /// every MachineSet.
    #[arg(long = "machineset", value_name = "NAME")]
    pub machinesets: Vec<String>,
    /// Also write the patches as files into DIR.
    #[arg(long = "write-patches", value_name = "DIR")]
    pub write_patches: Option<PathBuf>,
}

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

#[derive(Debug, Args)]
pub struct VmJobArgs {
    /// The job file the host wrote.
    pub job: PathBuf,
    /// Where to write the result (JSON).
    pub result: PathBuf,
}

/// Where the privileged disk steps run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// loopback when running as root with loop devices, else kvm when
    /// /dev/kvm is usable, else nokvm.
    Auto,
    /// On this host, with loop devices and mounts (needs root).
    Loopback,
    /// Inside a throw-away VM with KVM acceleration (needs /dev/kvm, no root).
    Kvm,
    /// Inside a throw-away VM under pure emulation (TCG): slow, needs
    /// neither root nor KVM.
    Nokvm,
}

/// How progress is reported on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Progress {
    /// Bars on a terminal, plain lines otherwise.
    Auto,
    /// Progress bars.
    Tty,
    /// One line per step.
    Plain,
    /// JSON Lines (one object per event) for CI.
    Json,
}

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

/// Registering the aws disk as an AMI (SPEC 6.3), for regions the
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

/// Where the release comes from and how to reach it.
#[derive(Debug, Clone, Args)]
pub struct InputArgs {
    /// The release image: docker://HOST/REPO:TAG|@DIGEST (a bare HOST/REPO... means
    /// docker://), oci:DIR[:TAG], oci-archive:FILE[:TAG] or docker-archive:FILE.
    #[arg(value_name = "RELEASE")]
    pub release: String,
    /// Registry credentials (containers auth.json format). Default: $REGISTRY_AUTH_FILE,
    /// then the usual containers auth files.
    #[arg(long, value_name = "FILE")]
    pub registry_config: Option<PathBuf>,
    /// Allow plain HTTP and unverified TLS registries. Only when asked.
    #[arg(long)]
    pub insecure: bool,
    /// Directory of extra CA certificates (*.crt) to trust for registries.
    #[arg(long, value_name = "DIR")]
    pub cert_dir: Option<PathBuf>,
    /// ImageDigestMirrorSet (or ImageContentSourcePolicy) YAML: for references by
    /// digest, try these mirrors first, as `oc` does.
    #[arg(long, value_name = "FILE")]
    pub idms_file: Option<PathBuf>,
    /// The OS stream to use when the release carries more than one: a
    /// stream (rhel-9, rhel-10) or an OS tag (rhel-coreos-10). Default: the
    /// MCO's: the only stream, else rhel-9 for OCP 4.x and rhel-10 from 5.
    /// `generate --os-stream all` builds every stream, each in its own
    /// output directory (<output>/<stream>), plus <output>/streams.json.
    #[arg(long, value_name = "STREAM|TAG")]
    pub os_stream: Option<String>,
    /// Architecture to pick when the release (or its OS image) is a manifest
    /// list / OCI index, such as the `-multi` payloads: x86_64, aarch64,
    /// ppc64le or s390x (amd64 and arm64 are accepted too). Default: this
    /// host's. The chosen digest is printed by `inspect`.
    #[arg(long, value_name = "ARCH")]
    pub arch: Option<String>,
    /// Cache directory (imported OS commits). Default: $XDG_CACHE_HOME/bootimage-gen.
    #[arg(long, value_name = "DIR", env = "BOOTIMAGE_GEN_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
}

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

/// How `push` and `pull` reach a registry.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Registry")]
pub struct RegistryArgs {
    /// Credentials file (containers-auth.json, as `podman login` writes
    /// it). Default: REGISTRY_AUTH_FILE, else podman's and docker's files.
    #[arg(long, value_name = "FILE")]
    pub authfile: Option<PathBuf>,
    /// Plain HTTP, or HTTPS without verifying the certificate (test
    /// registries only).
    #[arg(long)]
    pub insecure: bool,
    /// A PEM file of CA certificates to trust besides the system's.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// A directory of CA certificates (*.crt) to trust besides the
    /// system's, as `generate --cert-dir` and skopeo take it.
    #[arg(long, value_name = "DIR", conflicts_with = "ca_file")]
    pub cert_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PushArgs {
    /// The output directory of `generate` (with meta.json, or one
    /// subdirectory per stream as `--os-stream all` writes them).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Where to: REGISTRY/REPOSITORY:TAG (docker:// accepted).
    #[arg(value_name = "REF")]
    pub reference: String,
    /// The stream name of a one-stream DIR. Default: its stream.json's
    /// `stream` (subdirectories are named after their stream).
    #[arg(long, value_name = "NAME")]
    pub stream: Option<String>,
    /// Upload chunk size in MiB (blobs up to it go in one request).
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub chunk_mib: u64,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Debug, Args)]
pub struct PullArgs {
    /// What to pull: REGISTRY/REPOSITORY:TAG or @sha256:… of an index
    /// made by `push`.
    #[arg(value_name = "REF")]
    pub reference: String,
    /// Output directory.
    #[arg(short, long, value_name = "DIR")]
    pub output: PathBuf,
    /// Only this architecture (x86_64, aarch64, ppc64le, s390x).
    #[arg(long, value_name = "ARCH")]
    pub arch: Option<String>,
    /// Only this stream (as pushed: rhel-9, rhel-10, or a stream.json's
    /// name).
    #[arg(long, value_name = "STREAM")]
    pub stream: Option<String>,
    /// Only these meta.json keys (metal, qemu, live-iso, ...; repeatable).
    /// meta.json and stream.json always come.
    #[arg(long = "platform", value_name = "KEY")]
    pub platforms: Vec<String>,
    /// Base URL that stream.json's locations get (where the directory
    /// will be served). Default: the bare file names.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Cache directory. Default: $XDG_CACHE_HOME/bootimage-gen.
    #[arg(long, value_name = "DIR", env = "BOOTIMAGE_GEN_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// An output directory to clear of `.partial` files left by a killed
    /// run (repeatable); skipped while a run writes there.
    #[arg(short, long, value_name = "DIR")]
    pub output: Vec<PathBuf>,
    /// Remove cache entries not used for longer than AGE: a number with s,
    /// m, h, d or w (e.g. 36h, 14d).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub max_age: Option<std::time::Duration>,
    /// Then remove the least recently used entries until the cache takes
    /// at most SIZE: bytes, or a number with K, M, G or T (powers of 1024;
    /// e.g. 500M, 20G). 0 removes every entry not in use.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_size: Option<u64>,
    /// Say what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `36h`, `14d`, `2w`, `90s`, `30m`.
pub fn parse_age(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let (n, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("'{s}' is not an age: use a number with s, m, h, d or w, e.g. 14d"))?;
    let mul = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        "w" => 7 * 86400,
        _ => {
            return Err(format!(
                "'{s}': the unit must be s, m, h, d or w (e.g. 14d)"
            ))
        }
    };
    Ok(std::time::Duration::from_secs(n * mul))
}

/// `1234`, `500M`, `20G` (powers of 1024; a trailing `B` or `iB` is allowed).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (n, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = n.parse().map_err(|_| {
        format!("'{s}' is not a size: use bytes or a number with K, M, G or T, e.g. 20G")
    })?;
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("'{s}': the unit must be K, M, G or T (e.g. 20G)")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("'{s}' is too large"))
}

#[derive(Debug, Args)]
pub struct PlatformsArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

// The layers below the CLI have their own plain types (nothing below imports
// clap); these turn the clap ones into them.

impl From<Progress> for crate::util::progress::Progress {
    fn from(p: Progress) -> Self {
        match p {
            Progress::Auto => Self::Auto,
            Progress::Tty => Self::Tty,
            Progress::Plain => Self::Plain,
            Progress::Json => Self::Json,
        }
    }
}

impl From<Backend> for crate::backend::Backend {
    fn from(b: Backend) -> Self {
        match b {
            Backend::Auto => Self::Auto,
            Backend::Loopback => Self::Loopback,
            Backend::Kvm => Self::Kvm,
            Backend::Nokvm => Self::Nokvm,
        }
    }
}

impl From<&VmArgs> for crate::backend::vm::VmArgs {
    fn from(a: &VmArgs) -> Self {
        Self {
            vm_memory: a.vm_memory,
            vm_cpus: a.vm_cpus,
            vm_watchdog: a.vm_watchdog,
        }
    }
}

impl From<&AwsArgs> for crate::publish::aws::AwsArgs {
    fn from(a: &AwsArgs) -> Self {
        Self {
            aws_register: a.aws_register,
            aws_region: a.aws_region.clone(),
            aws_endpoint_url: a.aws_endpoint_url.clone(),
            aws_ami_name: a.aws_ami_name.clone(),
        }
    }
}
