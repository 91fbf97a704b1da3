//! The platforms of SPEC section 3: artifact, format, ignition platform id,
//! meta.json key. Source: fedora-coreos-config `platforms.yaml`, cosa
//! `src/cmd-osbuild`.
use serde::Serialize;

/// One platform the tool knows.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct PlatformSpec {
    pub name: &'static str,
    /// File suffix after `<name>-<version>-<platform>.<arch>.` (before compression).
    pub extension: &'static str,
    /// What the artifact is.
    pub format: &'static str,
    /// `ignition.platform.id` karg value.
    pub ignition_id: &'static str,
    /// Compressed with `image.json compressor` on release (SPEC 3).
    pub compressed: bool,
    /// Implemented by this version of the tool.
    pub built: bool,
    /// Console settings when the OS ships no `platforms.json` (SPEC 3):
    /// GRUB serial lines, and kernel arguments.
    pub default_serial: bool,
    pub default_kargs: &'static [&'static str],
}

/// The GRUB lines of a serial console (SPEC 3, "S").
pub const GRUB_SERIAL: [&str; 3] = [
    "serial --speed=115200",
    "terminal_input serial console",
    "terminal_output serial console",
];
const TTY0_FIRST: &[&str] = &["console=tty0", "console=ttyS0,115200n8"];
const TTYS0_FIRST: &[&str] = &["console=ttyS0,115200n8", "console=tty0"];

/// The platform table (x86_64).
pub const PLATFORMS: &[PlatformSpec] = &[
    PlatformSpec {
        name: "metal",
        extension: "raw",
        format: "raw disk, 512-byte sectors",
        ignition_id: "metal",
        compressed: true,
        built: true,
        default_serial: false,
        default_kargs: &[],
    },
    PlatformSpec {
        name: "metal4k",
        extension: "raw",
        format: "raw disk, 4096-byte sectors",
        ignition_id: "metal",
        compressed: true,
        built: true,
        default_serial: false,
        default_kargs: &[],
    },
    PlatformSpec {
        name: "qemu",
        extension: "qcow2",
        format: "qcow2 (compat 1.1)",
        ignition_id: "qemu",
        compressed: true,
        built: true,
        default_serial: true,
        default_kargs: TTY0_FIRST,
    },
    PlatformSpec {
        name: "openstack",
        extension: "qcow2",
        format: "qcow2 (compat 1.1)",
        ignition_id: "openstack",
        compressed: true,
        built: true,
        default_serial: true,
        default_kargs: TTYS0_FIRST,
    },
    PlatformSpec {
        name: "aws",
        extension: "vmdk",
        format: "VMDK streamOptimized (lsilogic, compat6)",
        ignition_id: "aws",
        compressed: true,
        built: true,
        default_serial: true,
        default_kargs: TTY0_FIRST,
    },
    PlatformSpec {
        name: "vmware",
        extension: "ova",
        format: "OVA (OVF + streamOptimized VMDK)",
        ignition_id: "vmware",
        compressed: false,
        built: true,
        default_serial: true,
        default_kargs: TTYS0_FIRST,
    },
    PlatformSpec {
        name: "azure",
        extension: "vhd",
        format: "fixed VHD",
        ignition_id: "azure",
        compressed: true,
        built: true,
        default_serial: false,
        default_kargs: TTY0_FIRST,
    },
    PlatformSpec {
        name: "gcp",
        extension: "tar.gz",
        format: "tar.gz with sparse disk.raw (oldgnu)",
        ignition_id: "gcp",
        compressed: false,
        built: true,
        default_serial: true,
        default_kargs: TTY0_FIRST,
    },
    PlatformSpec {
        name: "live",
        extension: "iso",
        format: "live ISO + PXE kernel/initramfs/rootfs",
        ignition_id: "metal",
        compressed: false,
        built: true,
        default_serial: false,
        default_kargs: &[],
    },
];

/// Look a platform up by name.
pub fn find(name: &str) -> Option<&'static PlatformSpec> {
    PLATFORMS.iter().find(|p| p.name == name)
}

/// Names of all platforms, for error messages.
pub fn names() -> Vec<&'static str> {
    PLATFORMS.iter().map(|p| p.name).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn table_is_consistent() {
        let names = super::names();
        assert_eq!(names.len(), 9);
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "duplicate platform names");
        assert_eq!(super::find("metal4k").unwrap().ignition_id, "metal");
        assert!(super::find("nope").is_none());
    }
}
