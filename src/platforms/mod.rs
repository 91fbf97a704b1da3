//! The platform table (docs/contract.md §3, §3.1): one typed row per platform, for every
//! architecture upstream builds it for. Everything that differs between
//! platforms is data here: the artifact suffix, the [`Format`] (which picks
//! the encoder), the disk size rule, the sector size, whether the release
//! compressor is applied, the meta.json key and the stream.json place. No
//! other module compares platform names.
//!
//! Sources (fixtures/UPSTREAM.md section 13): cosa `src/cmd-osbuild`
//! (`SUPPORTED_PLATFORMS`: the suffix; which platforms skip `cosa
//! compress`), `src/osbuild-manifests/platform.<p>.ipp.yaml` (conversion,
//! disk size), `coreos.osbuild.<arch>.mpp.yaml` (which arch imports which
//! platform), `src/cosalib/ova.py` + `*-template.xml` (the OVAs),
//! `src/cmd-generate-release-meta` (stream places), openshift/installer
//! `data/data/coreos/coreos-rhel-9.json` (what RHCOS ships per arch).
pub use crate::formats::{Format, OvfTemplate};
use crate::io::compress::Compressor;
use crate::util::arch::Arch;
use serde::Serialize;

mod table;
pub use table::{GRUB_SERIAL, PLATFORMS};

/// The platform `--aws-register` uploads (docs/contract.md §6.3).
pub const AWS: &str = "aws";

/// GiB, the unit of `image.json size` and of fixed disk sizes.
pub const GIB: u64 = 1 << 30;

/// The virtual size of a platform's disk.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", tag = "rule", content = "gib")]
pub enum SizeRule {
    /// Content estimate + 35 % + the fixed partitions (docs/contract.md §2).
    Metal,
    /// `image.json size` GiB (osbuild: `cloud_image_size_mb`), never less
    /// than the metal size.
    Cloud,
    /// A size the platform asks for, in GiB (ibmcloud: 100).
    Fixed(u64),
}

/// One platform the tool knows.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct PlatformSpec {
    pub name: &'static str,
    /// File suffix after `<name>-<version>-<platform>.<arch>.` (before compression).
    pub extension: &'static str,
    pub format: Format,
    /// `ignition.platform.id` karg value.
    pub ignition_id: &'static str,
    pub size: SizeRule,
    /// Logical sector size of the disk.
    pub sector_size: u64,
    /// Compressed with `image.json compressor` on release (cosa `compress`;
    /// false where cosa sets `skip-compression`).
    pub recompressed: bool,
    /// meta.json `images` key.
    pub meta_key: &'static str,
    /// stream.json `architectures.<arch>.artifacts` key.
    pub stream_platform: &'static str,
    /// Prefix of the stream format key (`4k.` for metal4k, cosa
    /// `cmd-generate-release-meta`); the key is prefix + suffix.
    pub stream_prefix: &'static str,
    /// Architectures upstream builds it for (cosa `coreos.osbuild.<arch>.mpp.yaml`).
    pub arches: &'static [Arch],
    /// Architectures RHCOS ships it for (installer `coreos-rhel-{9,10}.json`).
    pub rhcos_arches: &'static [Arch],
    /// Built by this version of the tool.
    pub built: bool,
    /// Console settings when the OS ships no `platforms.json` (docs/contract.md §3):
    /// GRUB serial lines, and kernel arguments.
    pub default_serial: bool,
    pub default_kargs: &'static [&'static str],
    /// Where `generate` can also publish this platform's disk besides the
    /// output directory (`--aws-register`, `--vsphere-template`), chosen
    /// here once.
    pub upload: Option<Upload>,
}

/// A publish target a platform's disk can go to from `generate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Upload {
    /// An EBS snapshot registered as an AMI (docs/contract.md §6.3, `--aws-register`).
    Aws,
    /// A vSphere template imported from the OVA (`--vsphere-template`).
    Vsphere,
}

impl std::fmt::Display for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Upload::Aws => "AWS (--aws-register)",
            Upload::Vsphere => "vSphere (--vsphere-template)",
        })
    }
}

impl PlatformSpec {
    /// Whether this platform's disk can go to `target`.
    pub fn uploads_to(&self, target: Upload) -> bool {
        self.upload == Some(target)
    }
}

impl PlatformSpec {
    /// Whether upstream builds this platform for `arch`.
    pub fn exists_for(&self, arch: Arch) -> bool {
        self.arches.contains(&arch)
    }

    /// The live ISO and PXE platform.
    pub fn is_live(&self) -> bool {
        self.format == Format::Live
    }

    /// A metal disk: what `coreos-installer install` writes (the live
    /// rootfs carries an osmet file for each, docs/contract.md §5).
    pub fn is_metal_disk(&self) -> bool {
        self.size == SizeRule::Metal && self.format == Format::Raw
    }

    /// Whether the disk boots with BIOS too: x86_64 only (docs/contract.md §3.2; the
    /// other arches boot EFI, PReP or zipl), 512-byte sectors, and not live
    /// (the live ISO boots BIOS with ISOLINUX, not the OS's GRUB).
    pub fn bios(&self, arch: Arch) -> bool {
        arch_has_bios(arch) && self.sector_size == 512 && !self.is_live()
    }

    /// The disk size for a metal size and a cloud size.
    pub fn disk_size(&self, metal: u64, cloud: u64) -> u64 {
        match self.size {
            SizeRule::Metal => metal,
            SizeRule::Cloud => cloud,
            SizeRule::Fixed(gib) => (gib * GIB).max(metal),
        }
    }

    /// Whether the release compressor `c` applies.
    pub fn compressed_with(&self, c: Compressor) -> bool {
        self.recompressed && c != Compressor::None
    }

    /// The artifact's file suffix after `<platform>.<arch>.`, with the
    /// compression extension when compressed: `qcow2.gz`, `ova`.
    pub fn suffix(&self, c: Compressor) -> String {
        match c.extension().filter(|_| self.compressed_with(c)) {
            Some(e) => format!("{}.{e}", self.extension),
            None => self.extension.to_string(),
        }
    }

    /// stream.json format key (cosa `cmd-generate-release-meta`: the
    /// suffix after `<platform>.<arch>.`, metal4k's prefixed `4k.`).
    pub fn stream_format(&self, c: Compressor) -> String {
        format!("{}{}", self.stream_prefix, self.suffix(c))
    }

    /// Artifact file name (docs/contract.md §3): `<name>-<version>-<platform>.<arch>.<suffix>`.
    pub fn file_name(&self, name: &str, version: &str, arch: Arch, c: Compressor) -> String {
        format!("{name}-{version}-{}.{arch}.{}", self.name, self.suffix(c))
    }
}

/// Look a platform up by name.
pub fn find(name: &str) -> Option<&'static PlatformSpec> {
    PLATFORMS.iter().find(|p| p.name == name)
}

/// Look a platform up by its meta.json key.
pub fn by_meta_key(key: &str) -> Option<&'static PlatformSpec> {
    PLATFORMS.iter().find(|p| p.meta_key == key)
}

/// Names of all platforms, for error messages.
pub fn names() -> Vec<&'static str> {
    PLATFORMS.iter().map(|p| p.name).collect()
}

/// How machines of an arch start the OS (docs/contract.md §3.2; cosa's
/// `build.raw-image.ipp.yaml`: bootupd installs EFI on x86_64, aarch64 and
/// riscv64, "BIOS" on x86_64 and on ppc64le into the PReP partition, and
/// s390x runs zipl instead of bootupd).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ArchBoot {
    /// An ESP with the OS's EFI tree.
    pub efi: bool,
    /// PC BIOS: GRUB i386-pc in BIOS-BOOT, boot code in the MBR.
    pub bios: bool,
    /// Open Firmware (SLOF, PowerVM): GRUB powerpc-ieee1275 raw in PReP.
    pub prep: bool,
    /// IPL from zipl's boot record and bootmap (s390x).
    pub zipl: bool,
}

/// The boot mechanisms of `arch` (the OS image's); none for an arch this tool does not know.
pub fn arch_boot(arch: Arch) -> ArchBoot {
    let none = ArchBoot::default();
    match arch {
        Arch::X86_64 => ArchBoot {
            efi: true,
            bios: true,
            ..none
        },
        Arch::Aarch64 | Arch::RISCV64 => ArchBoot { efi: true, ..none },
        Arch::Ppc64le => ArchBoot { prep: true, ..none },
        Arch::S390x => ArchBoot { zipl: true, ..none },
        Arch::Other(_) => none,
    }
}

/// Whether machines of `arch` boot with a PC BIOS (x86_64 only; docs/contract.md §3.2).
pub fn arch_has_bios(arch: Arch) -> bool {
    arch_boot(arch).bios
}

/// The platforms this tool builds for `arch`.
pub fn built_for(arch: Arch) -> impl Iterator<Item = &'static PlatformSpec> {
    PLATFORMS
        .iter()
        .filter(move |p| p.built && p.exists_for(arch))
}

/// The live artifacts' meta.json keys and their place in stream.json under
/// `metal` (format key, artifact kind), as cosa's release metadata lays
/// them out (stream-metadata-go fixtures: `iso` disk; `pxe` kernel,
/// initramfs, rootfs).
pub const LIVE_PLACES: &[(&str, &str, &str)] = &[
    ("live-iso", "iso", "disk"),
    ("live-kernel", "pxe", "kernel"),
    ("live-initramfs", "pxe", "initramfs"),
    ("live-rootfs", "pxe", "rootfs"),
];

/// Every meta.json `images` key of the built platforms (the live keys in
/// place of `live`).
pub fn meta_keys() -> Vec<&'static str> {
    let mut v = Vec::new();
    for p in PLATFORMS.iter().filter(|p| p.built) {
        if p.is_live() {
            v.extend(LIVE_PLACES.iter().map(|l| l.0));
        } else {
            v.push(p.meta_key);
        }
    }
    v
}

#[cfg(test)]
mod tests;
