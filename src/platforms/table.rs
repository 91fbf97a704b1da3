//! The platform table's rows (fixtures/UPSTREAM.md section 13; the sources
//! are named in the module above).
use super::{Format, OvfTemplate, PlatformSpec, SizeRule, Upload, AWS};
use crate::util::arch::Arch;

/// Architectures: all of them (the one list, [`Arch::KNOWN`]), and the
/// subsets platforms are built for.
const ALL_ARCHES: &[Arch] = &Arch::KNOWN;
const X86: &[Arch] = &[Arch::X86_64];
const X86_ARM: &[Arch] = &[Arch::X86_64, Arch::Aarch64];
const X86_S390: &[Arch] = &[Arch::X86_64, Arch::S390x];
const PPC: &[Arch] = &[Arch::Ppc64le];
const S390: &[Arch] = &[Arch::S390x];
const ARM: &[Arch] = &[Arch::Aarch64];

/// The GRUB lines of a serial console (docs/contract.md §3, "S").
pub const GRUB_SERIAL: [&str; 3] = [
    "serial --speed=115200",
    "terminal_input serial console",
    "terminal_output serial console",
];
const TTY0_FIRST: &[&str] = &["console=tty0", "console=ttyS0,115200n8"];
const TTYS0_FIRST: &[&str] = &["console=ttyS0,115200n8", "console=tty0"];

/// A row of the platform table, by field name: a disk platform's own
/// values; the rest of its [`PlatformSpec`] follows ([`DiskRow::spec`]).
struct DiskRow {
    name: &'static str,
    extension: &'static str,
    format: Format,
    /// Compressed again after the build (false where cosa sets
    /// `skip-compression`).
    recompressed: bool,
    arches: &'static [Arch],
    rhcos_arches: &'static [Arch],
    default_serial: bool,
    default_kargs: &'static [&'static str],
}

impl DiskRow {
    /// The platform: its Ignition id, meta.json key and stream.json
    /// platform are its name; a cloud-sized 512-byte-sector disk, built,
    /// uploaded nowhere.
    const fn spec(self) -> PlatformSpec {
        let name = self.name;
        PlatformSpec {
            name,
            extension: self.extension,
            format: self.format,
            ignition_id: name,
            size: SizeRule::Cloud,
            sector_size: 512,
            recompressed: self.recompressed,
            meta_key: name,
            stream_platform: name,
            stream_prefix: "",
            arches: self.arches,
            rhcos_arches: self.rhcos_arches,
            built: true,
            default_serial: self.default_serial,
            default_kargs: self.default_kargs,
            upload: None,
        }
    }
}

const QCOW2: Format = Format::Qcow2 { compressed: false };

/// The platform table.
pub const PLATFORMS: &[PlatformSpec] = &[
    PlatformSpec {
        size: SizeRule::Metal,
        ..DiskRow {
            name: "metal",
            extension: "raw",
            format: Format::Raw,
            recompressed: true,
            arches: ALL_ARCHES,
            rhcos_arches: ALL_ARCHES,
            default_serial: false,
            default_kargs: &[],
        }
        .spec()
    },
    PlatformSpec {
        size: SizeRule::Metal,
        sector_size: 4096,
        ignition_id: "metal",
        stream_platform: "metal",
        stream_prefix: "4k.",
        ..DiskRow {
            name: "metal4k",
            extension: "raw",
            format: Format::Raw,
            recompressed: true,
            arches: ALL_ARCHES,
            rhcos_arches: ALL_ARCHES,
            default_serial: false,
            default_kargs: &[],
        }
        .spec()
    },
    DiskRow {
        name: "qemu",
        extension: "qcow2",
        format: QCOW2,
        recompressed: true,
        arches: ALL_ARCHES,
        rhcos_arches: ALL_ARCHES,
        default_serial: true,
        default_kargs: TTY0_FIRST,
    }
    .spec(),
    DiskRow {
        name: "openstack",
        extension: "qcow2",
        format: QCOW2,
        recompressed: true,
        arches: ALL_ARCHES,
        rhcos_arches: ALL_ARCHES,
        default_serial: true,
        default_kargs: TTYS0_FIRST,
    }
    .spec(),
    PlatformSpec {
        upload: Some(Upload::Aws),
        ..DiskRow {
            name: AWS,
            extension: "vmdk",
            format: Format::Vmdk,
            recompressed: true,
            arches: X86_ARM,
            rhcos_arches: X86_ARM,
            default_serial: true,
            default_kargs: TTY0_FIRST,
        }
        .spec()
    },
    PlatformSpec {
        upload: Some(Upload::Vsphere),
        ..DiskRow {
            name: "vmware",
            extension: "ova",
            format: Format::Ova {
                template: OvfTemplate::Vmware,
            },
            recompressed: false,
            arches: X86,
            rhcos_arches: X86,
            default_serial: true,
            default_kargs: TTYS0_FIRST,
        }
        .spec()
    },
    DiskRow {
        name: "azure",
        extension: "vhd",
        format: Format::Vhd,
        recompressed: true,
        arches: X86_ARM,
        rhcos_arches: X86_ARM,
        default_serial: false,
        default_kargs: TTY0_FIRST,
    }
    .spec(),
    DiskRow {
        name: "gcp",
        extension: "tar.gz",
        format: Format::GcpTar,
        recompressed: false,
        arches: X86_ARM,
        rhcos_arches: X86_ARM,
        default_serial: true,
        default_kargs: TTY0_FIRST,
    }
    .spec(),
    // The rest of what RHCOS ships (docs/contract.md §3.1).
    DiskRow {
        name: "azurestack",
        extension: "vhd",
        format: Format::Vhd,
        recompressed: true,
        arches: X86,
        rhcos_arches: X86,
        default_serial: false,
        default_kargs: TTY0_FIRST,
    }
    .spec(),
    PlatformSpec {
        // platform.ibmcloud.ipp.yaml: "IBM Cloud has requested virtual size
        // of images to be 100G" (coreos-assembler#2041).
        size: SizeRule::Fixed(100),
        ..DiskRow {
            name: "ibmcloud",
            extension: "qcow2",
            format: QCOW2,
            recompressed: true,
            arches: X86_S390,
            rhcos_arches: X86_S390,
            default_serial: true,
            default_kargs: TTY0_FIRST,
        }
        .spec()
    },
    DiskRow {
        name: "kubevirt",
        extension: "ociarchive",
        format: Format::OciArchive,
        recompressed: false,
        arches: X86_S390,
        rhcos_arches: X86_S390,
        default_serial: true,
        default_kargs: TTYS0_FIRST,
    }
    .spec(),
    DiskRow {
        name: "nutanix",
        extension: "qcow2",
        format: Format::Qcow2 { compressed: true },
        recompressed: false,
        arches: X86,
        rhcos_arches: X86,
        default_serial: false,
        default_kargs: &[],
    }
    .spec(),
    DiskRow {
        name: "oraclecloud",
        extension: "qcow2",
        format: QCOW2,
        recompressed: true,
        arches: X86_ARM,
        rhcos_arches: X86_ARM,
        default_serial: false,
        default_kargs: &[],
    }
    .spec(),
    // cosa builds these; RHCOS does not ship them.
    DiskRow {
        name: "hyperv",
        extension: "vhdx",
        format: Format::Vhdx,
        recompressed: true,
        arches: X86_ARM,
        rhcos_arches: &[],
        default_serial: false,
        default_kargs: &[],
    }
    .spec(),
    DiskRow {
        name: "virtualbox",
        extension: "ova",
        format: Format::Ova {
            template: OvfTemplate::Virtualbox,
        },
        recompressed: false,
        arches: X86,
        rhcos_arches: &[],
        default_serial: true,
        default_kargs: TTYS0_FIRST,
    }
    .spec(),
    DiskRow {
        name: "aliyun",
        extension: "qcow2",
        format: QCOW2,
        recompressed: true,
        arches: X86,
        rhcos_arches: &[],
        default_serial: false,
        default_kargs: &[],
    }
    .spec(),
    DiskRow {
        name: "digitalocean",
        extension: "qcow2",
        format: QCOW2,
        recompressed: true,
        arches: X86,
        rhcos_arches: &[],
        default_serial: false,
        default_kargs: &[],
    }
    .spec(),
    DiskRow {
        name: "exoscale",
        extension: "qcow2",
        format: QCOW2,
        recompressed: true,
        arches: X86,
        rhcos_arches: &[],
        default_serial: false,
        default_kargs: &[],
    }
    .spec(),
    DiskRow {
        name: "proxmoxve",
        extension: "qcow2",
        format: QCOW2,
        recompressed: true,
        arches: X86,
        rhcos_arches: &[],
        default_serial: false,
        default_kargs: &[],
    }
    .spec(),
    DiskRow {
        name: "applehv",
        extension: "raw",
        format: Format::Raw,
        recompressed: true,
        arches: X86_ARM,
        rhcos_arches: &[],
        default_serial: false,
        default_kargs: &[],
    }
    .spec(),
    DiskRow {
        name: "hetzner",
        extension: "raw",
        format: Format::Raw,
        recompressed: true,
        arches: X86_ARM,
        rhcos_arches: &[],
        default_serial: false,
        default_kargs: &[],
    }
    .spec(),
    DiskRow {
        name: "vultr",
        extension: "raw",
        format: Format::Raw,
        recompressed: true,
        arches: X86,
        rhcos_arches: &[],
        default_serial: false,
        default_kargs: &[],
    }
    .spec(),
    // Known, not built: other architectures' own platforms.
    // cosa cmd-buildextend-powervs (cosalib/ibmcloud.py): the qemu disk's
    // size, its own gzip (`skip-compression`).
    DiskRow {
        name: "powervs",
        extension: "ova.gz",
        format: Format::PowerVsOva,
        recompressed: false,
        arches: PPC,
        rhcos_arches: PPC,
        default_serial: false,
        default_kargs: &[],
    }
    .spec(),
    PlatformSpec {
        built: false,
        ..DiskRow {
            name: "qemu-secex",
            extension: "qcow2",
            format: QCOW2,
            recompressed: true,
            arches: S390,
            rhcos_arches: S390,
            default_serial: false,
            default_kargs: &[],
        }
        .spec()
    },
    PlatformSpec {
        built: false,
        ..DiskRow {
            name: "nvidiabluefield",
            extension: "bfb",
            format: Format::Raw,
            recompressed: false,
            arches: ARM,
            rhcos_arches: ARM,
            default_serial: false,
            default_kargs: &[],
        }
        .spec()
    },
    PlatformSpec {
        size: SizeRule::Metal,
        ignition_id: "metal",
        meta_key: "live-iso",
        stream_platform: "metal",
        ..DiskRow {
            name: "live",
            extension: "iso",
            format: Format::Live,
            recompressed: false,
            arches: ALL_ARCHES,
            rhcos_arches: ALL_ARCHES,
            default_serial: false,
            default_kargs: &[],
        }
        .spec()
    },
];
