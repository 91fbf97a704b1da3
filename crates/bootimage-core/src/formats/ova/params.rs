//! What an OVA is made of: the archive's member names, the parameters of
//! the descriptor and the disk ([`OvaParams`], cosa's vmware and virtualbox
//! defaults), the disk facts the descriptor states ([`OvfDisk`]) and what
//! the writer reports ([`OvaStats`]). Plain data: the descriptor renderer
//! and the archive writer read it.
use crate::formats::vmdk::{VmdkOptions, VmdkStats};
use crate::formats::OvfTemplate;
use anyhow::{ensure, Result};

/// Archive member names (cosa's), in archive order.
pub const OVF_NAME: &str = "coreos.ovf";
pub const VMDK_NAME: &str = "disk.vmdk";
/// The manifest takes the descriptor's base name (DSP0243).
pub const MANIFEST_NAME: &str = "coreos.mf";
/// The virtualbox template's guest OS type (cosa
/// `src/virtualbox-template.xml`).
pub const VBOX_OS_TYPE: &str = "Fedora_64";

/// What goes into the OVF descriptor and the archive, and how the disk is
/// encoded.
#[derive(Debug, Clone)]
pub struct OvaParams<'a> {
    /// VirtualSystem id and name, e.g. `rhcos-<version>`.
    pub vm_name: String,
    /// `vmw:osType`, image.json `vmware-os-type` (e.g. `rhel9_64Guest`).
    pub os_type: String,
    /// image.json `vmware-hw-version`: VirtualSystemType `vmx-<n>`.
    pub hw_version: u32,
    /// image.json `vmware-secure-boot`: `vmw:Config` key
    /// `bootOptions.efiSecureBootEnabled` (cosa `src/vmware-template.xml`;
    /// keys are vSphere VirtualMachineConfigSpec property paths).
    pub secure_boot: bool,
    /// ProductSection `Version`: the OS version.
    pub product_version: String,
    /// ProductSection `Product` and `Vendor`, omitted when `None`.
    pub product: Option<String>,
    pub vendor: Option<String>,
    pub cpus: u32,
    pub memory_mib: u64,
    /// Modification time of the archive members, seconds since the epoch.
    pub mtime: u64,
    /// Add `coreos.mf` (SHA-256 of the descriptor and the disk).
    pub manifest: bool,
    /// How the disk is encoded (cosa: lsilogic, compat6), with how many
    /// workers and which chunk cache; the extent name is always
    /// `disk.vmdk`.
    pub vmdk: VmdkOptions<'a>,
    /// Which descriptor: cosa's vmware or virtualbox template.
    pub template: OvfTemplate,
}

impl OvaParams<'_> {
    /// cosa's defaults: 2 vCPU, 4096 MiB, a manifest, lsilogic/compat6
    /// disk, members dated the epoch (the caller sets [`OvaParams::mtime`]
    /// to the OS's time: never the clock, so the bytes are reproducible).
    pub fn new(
        vm_name: impl Into<String>,
        os_type: impl Into<String>,
        hw_version: u32,
        secure_boot: bool,
        product_version: impl Into<String>,
    ) -> Self {
        OvaParams {
            vm_name: vm_name.into(),
            os_type: os_type.into(),
            hw_version,
            secure_boot,
            product_version: product_version.into(),
            product: None,
            vendor: None,
            cpus: 2,
            memory_mib: 4096,
            mtime: 0,
            manifest: true,
            vmdk: VmdkOptions::default(),
            template: OvfTemplate::Vmware,
        }
    }

    /// cosa's virtualbox OVA (`src/cosalib/ova.py` VARIANTS `virtualbox`):
    /// `virtualbox-template.xml`, its disk converted with `-o
    /// subformat=streamOptimized` alone, i.e. qemu-img's defaults: adapter
    /// ide, virtual hardware version 4.
    pub fn virtualbox(vm_name: impl Into<String>, product_version: impl Into<String>) -> Self {
        OvaParams {
            template: OvfTemplate::Virtualbox,
            vmdk: VmdkOptions {
                adapter_type: crate::formats::vmdk::AdapterType::Ide,
                hw_version: 4,
                ..VmdkOptions::default()
            },
            ..OvaParams::new(vm_name, VBOX_OS_TYPE, 1, false, product_version)
        }
    }

    pub(super) fn validate(&self) -> Result<()> {
        ensure!(!self.vm_name.trim().is_empty(), "OVA VM name is empty");
        ensure!(!self.os_type.trim().is_empty(), "VMware OS type is empty");
        ensure!(
            self.hw_version > 0,
            "VMware hardware version must be positive"
        );
        ensure!(self.cpus > 0, "an OVA VM needs at least one CPU");
        ensure!(self.memory_mib > 0, "an OVA VM needs memory");
        Ok(())
    }
}

/// What [`write_ova`](super::write_ova) produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OvaStats {
    /// Size of the `.ova` file.
    pub ova_size: u64,
    /// Size of the `disk.vmdk` member (OVF `ovf:size`).
    pub vmdk_size: u64,
    /// OVF `ovf:populatedSize`: guest bytes in stored grains.
    pub vmdk_populated: u64,
    /// Disk capacity in bytes (OVF `ovf:capacity`).
    pub capacity: u64,
    /// SHA-256 (hex) of the `disk.vmdk` member, as in the manifest.
    pub vmdk_sha256: String,
}

/// The disk facts the descriptor states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OvfDisk {
    pub file_size: u64,
    pub capacity: u64,
    pub populated: u64,
}

impl From<&VmdkStats> for OvfDisk {
    fn from(s: &VmdkStats) -> Self {
        OvfDisk {
            file_size: s.file_size,
            capacity: s.capacity_bytes,
            populated: s.populated_bytes,
        }
    }
}
