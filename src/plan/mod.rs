//! The build plan, in two types: [`DryPlan`], decided before the first side
//! effect (before the OS is imported: sizes and the live kernel arguments
//! may be unknown) and printed by `--dry-run`; [`Plan`], everything the job
//! needs, with nothing left to be known later: what the OS says about
//! itself, and the [`facts`] the checks found (what the OS ships for
//! bootupd and live, the host's ISOLINUX, the AMI to register); the jobs
//! are made from it alone ([`job`]). Also: [`settings`] (flags -> validated
//! settings), [`preflight`] checks of the settings, [`space`], [`input`].
pub mod facts;
pub mod input;
pub mod job;
pub mod preflight;
pub mod settings;
pub mod space;

use crate::backend::job::BootSetting;
pub use crate::backend::job::{PlanDisk, PlanLive};
use crate::backend::Chosen;
use crate::disk::layout::{Layout, MIB};
use crate::formats::VmwareSettings;
use crate::io::compress::Compressor;
use crate::oscontainer::{OsFormat, OsInfo};
use crate::platforms::{PlatformSpec, GIB, GRUB_SERIAL};
use crate::release::resolve::Resolved;
use crate::util::arch::Arch;
use anyhow::{Context, Result};
use facts::Facts;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Root filesystem headroom over the content (docs/contract.md §2: + 35 %).
pub const ROOT_HEADROOM_PERCENT: u64 = 35;
/// Smallest root partition: mkfs.xfs refuses filesystems under 300 MB.
pub const MIN_ROOT: u64 = 512 * MIB;

/// The plan before the OS is imported (`--dry-run` prints it).
#[derive(Debug, Clone, Serialize)]
pub struct DryPlan {
    pub schema: &'static str,
    pub release: PlanRelease,
    pub os: PlanOs,
    /// Artifact name prefix (the OS's osname, `rhcos` for RHCOS).
    pub name: String,
    /// OS version, used in artifact names.
    pub version: String,
    pub backend: Chosen,
    pub compressor: Compressor,
    pub compression_level: u32,
    pub compressor_source: String,
    pub output_dir: PathBuf,
    /// Known once the OS is imported.
    pub disk: Option<PlanDisk>,
    pub artifacts: Vec<PlanArtifact<Option<u64>>>,
}

/// The executable plan: the dry plan once the OS is imported, with the
/// commit, kernel, disk sizes and every artifact's disk size known, what
/// the OS says about itself, and (once checked) the [`Facts`].
#[derive(Debug, Clone)]
pub struct Plan {
    pub release: PlanRelease,
    pub os: ImportedOs,
    pub name: String,
    pub version: String,
    pub backend: Chosen,
    pub compressor: Compressor,
    pub compression_level: u32,
    pub compressor_source: String,
    pub output_dir: PathBuf,
    pub disk: PlanDisk,
    pub artifacts: Vec<PlanArtifact<u64>>,
    /// What the checks found ([`facts::check`]); empty until then.
    pub facts: Facts,
}

/// The OS image, imported: what the job, the encoders and meta.json read
/// of it.
#[derive(Debug, Clone)]
pub struct ImportedOs {
    pub tag: String,
    pub pullspec: String,
    pub source: String,
    pub digest: String,
    pub format: String,
    /// The commit deployed (ostree-ext's merge commit for an image).
    pub commit: String,
    /// The kernel version of the tree.
    pub kernel: String,
    /// ostree-native (a node follows the image) or legacy (a ref).
    pub os_format: OsFormat,
    /// The OS build's own commit, which meta.json records (cosa).
    pub image_commit: String,
    /// The commit time: every time stamp written.
    pub timestamp: i64,
    /// The tree's os-release (menus, summaries, descriptions).
    pub os_release: BTreeMap<String, String>,
    /// The OS image's labels (the aleph file).
    pub image_labels: BTreeMap<String, String>,
    /// The release names the OS by a manifest list: copies pick the arch.
    pub multi_arch: bool,
    /// The OS's platforms.json as the boot filesystem gets it, for the arch.
    pub platforms_json: Option<Vec<u8>>,
    /// image.json `grub-script` of a cosa-era OS (4.16, 4.17).
    pub grub_script: Option<String>,
    /// image.json's VMware values, as read (checked when a VMware
    /// descriptor is written: [`ImportedOs::vmware`]).
    pub vmware_os_type: String,
    pub vmware_hw_version: u64,
    pub vmware_secure_boot: bool,
}

impl ImportedOs {
    /// image.json's VMware values for an OVA's descriptor.
    pub fn vmware(&self) -> Result<VmwareSettings> {
        Ok(VmwareSettings {
            os_type: self.vmware_os_type.clone(),
            hw_version: u32::try_from(self.vmware_hw_version).context("vmware-hw-version")?,
            secure_boot: self.vmware_secure_boot,
        })
    }

    /// os-release `NAME`, else `fallback`.
    pub fn name_or<'a>(&'a self, fallback: &'a str) -> &'a str {
        self.os_release.get("NAME").map_or(fallback, String::as_str)
    }
}

impl Plan {
    /// The executable plan from a dry plan made with the imported OS `os`
    /// (resolved as `r`, its image's labels `image_labels`).
    pub fn executable(
        d: DryPlan,
        os: &OsInfo,
        r: &Resolved,
        image_labels: BTreeMap<String, String>,
    ) -> Result<Plan> {
        let platforms_json = (os.config.platforms.as_ref())
            .map(|p| p.boot_json(d.release.arch))
            .transpose()?;
        let not_yet = || anyhow::anyhow!("the plan was made before the OS was imported");
        let disk = d.disk.ok_or_else(not_yet)?;
        let artifacts = d
            .artifacts
            .into_iter()
            .map(|a| {
                let size = a.disk_size.ok_or_else(not_yet)?;
                Ok(a.with_disk_size(size))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Plan {
            release: d.release,
            os: ImportedOs {
                tag: d.os.tag,
                pullspec: d.os.pullspec,
                source: d.os.source,
                digest: d.os.digest,
                format: d.os.format,
                commit: os.commit.clone(),
                kernel: d.os.kernel.ok_or_else(not_yet)?,
                os_format: r.os_format,
                image_commit: d.os.commit.ok_or_else(not_yet)?,
                timestamp: os.timestamp,
                os_release: os.os_release.clone(),
                image_labels,
                multi_arch: r.os_index.is_some(),
                platforms_json,
                grub_script: os.config.image.grub_script.clone(),
                vmware_os_type: os.config.image.vmware_os_type.value.clone(),
                vmware_hw_version: os.config.image.vmware_hw_version.value,
                vmware_secure_boot: os.config.image.vmware_secure_boot.value,
            },
            name: d.name,
            version: d.version,
            backend: d.backend,
            compressor: d.compressor,
            compression_level: d.compression_level,
            compressor_source: d.compressor_source,
            output_dir: d.output_dir,
            disk,
            artifacts,
            facts: Facts::default(),
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PlanRelease {
    pub reference: String,
    pub digest: String,
    pub version: String,
    pub arch: Arch,
    /// What verified its signature, in one line (`trust::policy`).
    pub signature: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlanOs {
    pub tag: String,
    /// The OS stream (`rhel-9`, `rhel-10`; null for OKD's one stream).
    pub stream: Option<String>,
    /// Why this OS image (the MCO's default, `--os-stream`, the only one).
    pub chosen_because: String,
    /// Where each platform's `/boot/grub2/grub.cfg` comes from (known once
    /// imported): the OS's image.json `grub-script` (cosa 4.16/4.17), its
    /// bootupd static configs, or this tool's.
    pub grub_cfg: Option<String>,
    pub pullspec: String,
    pub source: String,
    pub digest: String,
    pub format: String,
    pub imported: bool,
    pub commit: Option<String>,
    pub kernel: Option<String>,
}

/// One artifact of the plan; `S` is its disk size: `Option<u64>` in the
/// dry plan (unknown before import), `u64` in the executable one.
#[derive(Debug, Clone, Serialize)]
pub struct PlanArtifact<S = u64> {
    /// The platform's row of the table.
    #[serde(skip)]
    pub spec: &'static PlatformSpec,
    pub platform: String,
    pub ignition_platform_id: String,
    /// meta.json `images` key.
    pub meta_key: String,
    /// Final file name in the output directory.
    pub file: String,
    pub format: String,
    /// stream.json place: `artifacts.<stream_platform>.formats.<stream_format>`.
    pub stream_platform: String,
    pub stream_format: String,
    pub sector_size: u64,
    pub bios: bool,
    pub disk_size: S,
    /// The platform's own kernel arguments (after `ignition.platform.id`).
    pub kargs: Vec<String>,
    pub grub_commands: Vec<String>,
    /// Where the console settings came from.
    pub console_source: String,
    pub compressed: bool,
    /// Platform `live`: volume id, kernel arguments and the four files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<PlanLive>,
}

impl<S> PlanArtifact<S> {
    fn with_disk_size<T>(self, disk_size: T) -> PlanArtifact<T> {
        PlanArtifact {
            spec: self.spec,
            platform: self.platform,
            ignition_platform_id: self.ignition_platform_id,
            meta_key: self.meta_key,
            file: self.file,
            format: self.format,
            stream_platform: self.stream_platform,
            stream_format: self.stream_format,
            sector_size: self.sector_size,
            bios: self.bios,
            disk_size,
            kargs: self.kargs,
            grub_commands: self.grub_commands,
            console_source: self.console_source,
            compressed: self.compressed,
            live: self.live,
        }
    }

    /// What this platform changes on the boot filesystem.
    /// What the platform changes on the boot filesystem of an `arch` disk
    /// (zipl's bootmap depends on the sector size too).
    pub fn boot_setting(&self, arch: Arch) -> BootSetting {
        BootSetting {
            platform_id: self.ignition_platform_id.clone(),
            kargs: self.kargs.clone(),
            grub_commands: self.grub_commands.clone(),
            zipl_block_size: crate::platforms::arch_boot(arch)
                .zipl
                .then_some(self.sector_size),
            osmet: self.spec.is_metal_disk(),
        }
    }
}

impl PlanArtifact<Option<u64>> {
    /// One platform's artifact: its names, console settings, boot setting
    /// and (once the OS is imported, `disk` known) disk size.
    fn planned(
        spec: &'static PlatformSpec,
        os: Option<&OsInfo>,
        disk: Option<&PlanDisk>,
        name: &str,
        version: &str,
        arch: Arch,
        compressor: Compressor,
    ) -> Result<Self> {
        let (kargs, grub_commands, console_source) = console(spec, os, arch)?;
        let sector_size = spec.sector_size;
        let disk_size = disk.map(|d| spec.disk_size(d.metal_size, d.cloud_size));
        let live = if spec.is_live() {
            let [iso, kernel, initramfs, rootfs] = live_names(name, version, arch);
            let volume_id = crate::live::volume_id(name, version);
            let kargs = match disk {
                Some(d) => {
                    let mut metal = d.kargs.clone();
                    metal.push(format!("ignition.platform.id={}", spec.ignition_id));
                    metal.extend(kargs.iter().cloned());
                    crate::live::live_kargs(&metal, &volume_id)?
                }
                None => Vec::new(),
            };
            Some(PlanLive {
                volume_id,
                kargs,
                iso,
                kernel,
                initramfs,
                rootfs,
            })
        } else {
            None
        };
        Ok(PlanArtifact {
            spec,
            platform: spec.name.to_string(),
            ignition_platform_id: spec.ignition_id.to_string(),
            meta_key: spec.meta_key.to_string(),
            file: match &live {
                Some(l) => l.iso.clone(),
                None => spec.file_name(name, version, arch, compressor),
            },
            format: spec.format.describe().to_string(),
            stream_platform: spec.stream_platform.to_string(),
            stream_format: spec.stream_format(compressor),
            sector_size,
            bios: spec.bios(arch),
            disk_size,
            kargs,
            grub_commands,
            console_source,
            compressed: spec.compressed_with(compressor),
            live,
        })
    }
}

/// Live artifact names (cosa): `<name>-<version>-live-iso.<arch>.iso`,
/// `-live-kernel.<arch>`, `-live-initramfs.<arch>.img`, `-live-rootfs.<arch>.img`.
pub fn live_names(name: &str, version: &str, arch: Arch) -> [String; 4] {
    [
        format!("{name}-{version}-live-iso.{arch}.iso"),
        format!("{name}-{version}-live-kernel.{arch}"),
        format!("{name}-{version}-live-initramfs.{arch}.img"),
        format!("{name}-{version}-live-rootfs.{arch}.img"),
    ]
}

/// Kernel arguments common to every platform (docs/contract.md §2). GRUB expands
/// `$ignition_firstboot`; zipl has no variables, so s390x disks get
/// `ignition.firstboot` from zipl's parameters instead (cosa
/// `build.common.ipp.yaml` leaves the variable out on s390x).
pub fn base_kargs(os: &OsInfo, arch: Arch) -> Vec<String> {
    let mut k = vec!["rw".to_string()];
    if !crate::platforms::arch_boot(arch).zipl {
        k.push("$ignition_firstboot".to_string());
    }
    k.extend(os.config.image.extra_kargs.value.iter().cloned());
    k
}

/// Disk sizes for a commit of `content` bytes.
pub fn disk_sizes(arch: Arch, content: u64, image_size_gib: u64) -> Result<(u64, u64, u64)> {
    let root = (content + content * ROOT_HEADROOM_PERCENT / 100)
        .max(MIN_ROOT)
        .div_ceil(MIB)
        * MIB;
    let metal = Layout::disk_size_for_root(arch, root)?;
    let cloud = (image_size_gib * GIB).max(metal);
    Ok((root, metal, cloud))
}

/// Console settings of a platform (docs/contract.md §1.3): its entry in the OS's
/// platforms.json; none when the file does not list it (upstream never lists
/// metal: such a platform gets `ignition.platform.id` only); docs/contract.md §3's table
/// only when the OS ships no platforms.json at all.
pub fn console(
    spec: &PlatformSpec,
    os: Option<&OsInfo>,
    arch: Arch,
) -> Result<(Vec<String>, Vec<String>, String)> {
    if let Some(p) = os.and_then(|o| o.config.platforms.as_ref()) {
        let table = p.for_arch(arch)?;
        return Ok(match table.get(spec.ignition_id) {
            Some(c) => (
                c.kernel_arguments.clone(),
                c.grub_commands.clone(),
                format!("{} entry {}", p.source, spec.ignition_id),
            ),
            None => (
                vec![],
                vec![],
                format!(
                    "none: {} does not list {} (ignition.platform.id only, as upstream)",
                    p.source, spec.ignition_id
                ),
            ),
        });
    }
    let grub = if spec.default_serial {
        GRUB_SERIAL.iter().map(|s| s.to_string()).collect()
    } else {
        vec![]
    };
    Ok((
        spec.default_kargs.iter().map(|s| s.to_string()).collect(),
        grub,
        "built-in table (the OS ships no platforms.json)".into(),
    ))
}

/// Everything needed to build the plan.
pub struct PlanInput<'a> {
    pub resolved: &'a Resolved,
    pub os: Option<&'a OsInfo>,
    pub content_bytes: Option<u64>,
    pub platforms: &'a [&'static PlatformSpec],
    pub compressor: Option<Compressor>,
    pub backend: Chosen,
    pub output_dir: PathBuf,
    /// What verified the release's signature, in one line.
    pub signature: &'a str,
}

impl DryPlan {
    pub fn build(i: PlanInput) -> Result<DryPlan> {
        let r = i.resolved;
        let arch = r.arch;
        let name = match i.os {
            Some(o) => o.osname.clone(),
            None => r
                .os_labels
                .get(crate::oscontainer::LABEL_OSNAME)
                .cloned()
                .unwrap_or_else(|| "<osname after import>".into()),
        };
        let version = match i.os {
            Some(o) => o.version.clone(),
            None => r
                .os_labels
                .get("org.opencontainers.image.version")
                .or(r.os_labels.get("version"))
                .cloned()
                .unwrap_or_else(|| "<version after import>".into()),
        };
        let (compressor, compressor_source) = match (i.compressor, i.os) {
            (Some(c), _) => (c, "--compress".to_string()),
            (None, Some(o)) => (
                Compressor::parse(&o.config.image.compressor.value)?,
                format!("{} compressor", o.config.image.compressor.source),
            ),
            (None, None) => (
                Compressor::Gzip,
                "RHCOS default (OS not imported yet)".into(),
            ),
        };
        let disk = match (i.os, i.content_bytes) {
            (Some(o), Some(content)) => {
                let (root_size, metal_size, cloud_size) =
                    disk_sizes(arch, content, o.config.image.size.value)?;
                Some(PlanDisk {
                    arch,
                    content_bytes: content,
                    root_size,
                    metal_size,
                    cloud_size,
                    kargs: base_kargs(o, arch),
                })
            }
            _ => None,
        };
        let artifacts = (i.platforms.iter())
            .map(|&spec| {
                PlanArtifact::planned(spec, i.os, disk.as_ref(), &name, &version, arch, compressor)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(DryPlan {
            schema: "bootimage-gen/plan/v1",
            release: PlanRelease {
                reference: r.release_ref.clone(),
                digest: r.release_digest.clone(),
                version: r.release_version.clone(),
                arch,
                signature: i.signature.to_string(),
            },
            os: PlanOs {
                tag: r.os_tag.clone(),
                stream: r.os_stream_class.clone(),
                chosen_because: r.os_choice.clone(),
                grub_cfg: i.os.map(grub_cfg_source),
                pullspec: r.os_pullspec.clone(),
                source: r.os_source.clone(),
                digest: r.os_digest.clone(),
                format: r.os_format.to_string(),
                imported: i.os.is_some(),
                commit: i.os.map(|o| o.image_commit.clone()),
                kernel: i.os.map(|o| o.kernel_version.clone()),
            },
            name,
            version,
            backend: i.backend,
            compression_level: compressor.default_level(),
            compressor,
            compressor_source,
            output_dir: i.output_dir,
            disk,
            artifacts,
        })
    }
}

/// Where the disk's grub.cfg comes from, said by `--dry-run`.
fn grub_cfg_source(o: &crate::oscontainer::OsInfo) -> String {
    match &o.config.image.grub_script {
        Some(s) => format!(
            "image.json grub-script ({} bytes, cosa era) with each platform's console commands after its '# CONSOLE-SETTINGS-START' line, as cosa's create_disk.sh wrote it; bootupd's static configs take precedence when the OS ships them",
            s.len()
        ),
        None => "bootimage-gen's (blscfg, else menu entries from the BLS entries), or the OS's bootupd static configs when it ships them".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sizes_follow_spec() {
        let (root, metal, cloud) = disk_sizes(Arch::X86_64, 2 << 30, 16).unwrap();
        assert_eq!(root, ((2u64 << 30) * 135 / 100).div_ceil(MIB) * MIB);
        assert_eq!(metal, root + 513 * MIB + MIB);
        assert_eq!(cloud, 16 * GIB);
        let (root, metal, cloud) = disk_sizes(Arch::X86_64, 10 << 20, 1).unwrap();
        assert_eq!(root, MIN_ROOT);
        assert_eq!(cloud, GIB.max(metal));
        let (_, metal, cloud) = disk_sizes(Arch::X86_64, 20 << 30, 16).unwrap();
        assert_eq!(cloud, metal, "a cloud disk never shrinks below the content");
    }
}
