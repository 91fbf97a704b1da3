//! The privileged part of a build, as one serialisable job: partition the
//! base disk, make its filesystems, deploy the OS, install the bootloaders,
//! and derive each distinct platform's boot filesystem. A backend runs it:
//! `loopback` right here with loop devices and mounts, `kvm`/`nokvm` inside
//! a throw-away VM that runs this same binary over the same job (see
//! `backend::vm`). Everything else (fetching, importing, encoding,
//! compressing, describing) stays on the host and needs no privileges.
//!
//! This file is the job's shape; `loopback.rs` runs it, `live_tree.rs`
//! stages the live root tree from the deployment.
use crate::disk::{bootupd, deploy, grubcfg};
use crate::live;
use crate::util::arch::Arch;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// FAT volume id of the ESP (docs/contract.md §2; cosa `coreos.osbuild.x86_64.mpp.yaml`).
pub const ESP_VOLUME_ID: u32 = 0x7B77_95E7;
/// Where the OS ships its EFI binaries and its BIOS GRUB modules (docs/contract.md §2).
pub const OS_EFI_DIR: &str = "usr/lib/bootupd/updates/EFI";
pub const OS_GRUB_BIOS_DIR: &str = "usr/lib/grub/i386-pc";
/// Every disk has the same fixed root UUID (docs/contract.md §2) and XFS refuses to
/// mount a second filesystem with a UUID already mounted: `nouuid` lets
/// several builds (or a build next to a test) run at once.
pub(super) const ROOT_MOUNT_OPTIONS: &str = "rw,nouuid";

/// Everything the privileged steps need, with paths that are the same on
/// the host and inside the VM (the VM mounts them at the same places).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiskJob {
    /// The run's work directory: the base disk and boot images go here.
    pub work: PathBuf,
    /// The imported OS's ostree repository (read only).
    pub cache_repo: PathBuf,
    pub disk: PlanDisk,
    /// The OS's kernel version (gates filesystem features).
    pub kernel_version: String,
    pub commit: String,
    pub osname: String,
    /// The OS's `platforms.json`, verbatim.
    pub platforms_json: Option<Vec<u8>>,
    /// Content of the deployment's origin file.
    pub origin: String,
    pub aleph: deploy::Aleph,
    /// Build the 4K-sector ESP (metal4k planned).
    pub esp4k: bool,
    /// Install BIOS boot code (a BIOS-booting platform planned).
    pub bios: bool,
    /// The distinct platform boot settings to derive.
    pub boots: Vec<BootSetting>,
    /// The live files to make from the deployment, when live is planned.
    pub live: Option<LiveJob>,
    /// Write bootupd's state (and its static GRUB configs, when the OS ships
    /// them), when the OS ships bootupd metadata.
    #[serde(default)]
    pub bootupd: Option<BootupdJob>,
    /// image.json `grub-script` of a cosa-era OS (4.16, 4.17): each
    /// platform's grub.cfg, unless bootupd's static configs make it.
    #[serde(default)]
    pub grub_script: Option<String>,
    /// The OS's own tools, when a buildroot of its tree runs here: its
    /// setfiles labels the disk, and its ostree lays the OS down unless
    /// this machine's (or the VM's) does.
    #[serde(default)]
    pub buildroot: Option<OsTools>,
    /// The image and layer refs to give the sysroot repo (ostree-native).
    #[serde(default)]
    pub image_refs: Option<crate::oscontainer::ImageRefs>,
    /// The mkfs that makes the root and boot filesystems from the staged
    /// tree, reproducibly (docs/contract.md §9); without it the kernel
    /// writes them through loop mounts, as the deploy runs.
    #[serde(default)]
    pub mkfs: Option<crate::disk::mkfs::Tools>,
    /// Where the stage files go (with `mkfs`): a tmpfs the pipeline
    /// mounted ([`crate::sys::ramstage`]), else `work`.
    #[serde(default)]
    pub stage_dir: Option<PathBuf>,
    /// The OS's time (its commit's): every time the filesystems carry is
    /// at most this (`SOURCE_DATE_EPOCH`).
    pub os_time: i64,
}

/// The OS's programs the job runs, from a buildroot of the OS tree.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OsTools {
    pub buildroot: crate::oscontainer::buildroot::Buildroot,
    /// Its ostree lays the OS down (`--deploy-ostree os`); else this
    /// machine's (the VM's) does, and the buildroot serves its setfiles.
    pub deploys: bool,
}

/// bootupd's part of the job (see [`bootupd`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BootupdJob {
    /// The OS's time stamp, for `static-configs`.
    pub timestamp: i64,
}

/// What the live files need besides the deployment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LiveJob {
    pub plan: PlanLive,
    /// OS version and commit time (the live files' time stamps).
    pub version: String,
    pub timestamp: i64,
    /// The OS's name for the built-in menus.
    pub title: String,
    /// mksquashfs threads (0: all cores).
    pub threads: usize,
    /// The EROFS options, when the OS asks for an EROFS rootfs (else squashfs).
    #[serde(default)]
    pub erofs: Option<live::erofs::Options>,
}

/// The live files made while the deployment is mounted (in the work dir).
/// `initramfs` and `rootfs` are where the host writes them: the rootfs
/// holds the osmet files of the metal images (made after this job) and the
/// initramfs the rootfs's stream hash (docs/contract.md §5.1).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LiveStage {
    pub dir: PathBuf,
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    pub rootfs: PathBuf,
    /// `images/efiboot.img`, on arches that boot EFI.
    #[serde(default)]
    pub efiboot: Option<PathBuf>,
    /// The Open Firmware boot files (ppc64le), see [`live::iso::of_boot_tree`].
    #[serde(default)]
    pub of_tree: Option<PathBuf>,
    pub menus: live::Rendered,
    /// `root.squashfs` or `root.erofs`, the live root tree.
    pub root_image: PathBuf,
    /// A copy of the OS's initramfs (the live files are appended to it).
    pub os_initramfs: PathBuf,
    /// `coreos/features.json` (directives from the OS's example config).
    pub features: Vec<u8>,
    /// What was noted while making the live tree (shown by the host).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The base disk's sizes and kernel arguments (part of the plan).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanDisk {
    /// The OS image's architecture: it picks the partition table.
    pub arch: Arch,
    /// Bytes the deployed tree takes (4 KiB blocks, hardlinks once).
    pub content_bytes: u64,
    pub root_size: u64,
    /// metal / metal4k disk size: content + 35 % + the fixed partitions.
    pub metal_size: u64,
    /// Cloud and virtualisation disks: `image.json size` GiB (never less
    /// than the metal size).
    pub cloud_size: u64,
    /// Kernel arguments of every platform, before the platform's own.
    pub kargs: Vec<String>,
}

/// The live ISO and PXE artifacts (docs/contract.md §5).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanLive {
    pub volume_id: String,
    /// Kernel arguments of the ISO menus (the default of `kargs.json`).
    pub kargs: Vec<String>,
    pub iso: String,
    pub kernel: String,
    pub initramfs: String,
    pub rootfs: String,
}

/// What a platform changes on the boot filesystem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootSetting {
    pub platform_id: String,
    pub kargs: Vec<String>,
    pub grub_commands: Vec<String>,
    /// zipl's block size (the disk's sector size) on s390x, which IPLs
    /// through a bootmap on the boot filesystem instead of GRUB.
    #[serde(default)]
    pub zipl_block_size: Option<u64>,
    /// A metal image boots from it: its osmet file maps this boot
    /// filesystem's extents (not part of the key).
    #[serde(default)]
    pub osmet: bool,
}

impl BootSetting {
    /// Platforms with equal keys share one boot filesystem image.
    pub fn key(&self) -> String {
        let zipl = self
            .zipl_block_size
            .map_or(String::new(), |b| format!("\0zipl{b}"));
        let id = crate::util::sha256_hex(
            format!(
                "{}\0{}\0{}{zipl}",
                self.platform_id,
                self.kargs.join("\x01"),
                self.grub_commands.join("\x01")
            )
            .as_bytes(),
        );
        id[..16].to_string()
    }
}

/// What the job made, in the work directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiskOutput {
    /// The base disk (metal size, 512-byte sectors).
    pub base: PathBuf,
    /// The BLS entries ostree wrote, relative to the boot filesystem.
    pub entries: Vec<(PathBuf, grubcfg::BlsEntry)>,
    /// The 4K-sector ESP, when asked for.
    pub esp4k: Option<PathBuf>,
    /// Boot filesystem image per [`BootSetting::key`].
    pub boots: BTreeMap<String, PathBuf>,
    /// zipl's boot record (the MBR code area) per [`BootSetting::key`], on s390x.
    #[serde(default)]
    pub ipls: BTreeMap<String, PathBuf>,
    /// The live files, when asked for.
    pub live: Option<LiveStage>,
    /// bootupd's static GRUB configs of the OS (they make each platform's
    /// grub.cfg), when it ships them and bootupd is installed.
    #[serde(default)]
    pub static_grub: Option<bootupd::StaticGrub>,
    /// Where the ostree objects of the base disk's root and boot
    /// filesystems lie ([`live::osmet::ExtentMap`], JSON), when live is
    /// planned: the osmet files are packed from it.
    #[serde(default)]
    pub extent_map: Option<PathBuf>,
    /// The content manifest's filesystems ([`crate::disk::manifest`]), by
    /// key: a [`crate::disk::manifest::Filesystem`] as JSON, in the work
    /// directory.
    #[serde(default)]
    pub contents: BTreeMap<String, PathBuf>,
}

/// Read a job file (written by the host for the VM).
pub fn read(path: &Path) -> Result<DiskJob> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))
}
