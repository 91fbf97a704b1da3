//! Disk image encoders: each reads a [`crate::io::view::DiskView`] and
//! streams one platform's format.
pub mod gcp;
pub mod oci;
pub mod ova;
pub mod qcow2;
pub mod vhd;
pub mod vhdx;
pub mod vmdk;

use serde::Serialize;

/// How an artifact is encoded. The encoder is chosen by this, never by a
/// file name.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Format {
    /// The disk as is (sparse).
    Raw,
    /// qcow2 version 3 (compat 1.1); `compressed`: every cluster deflated
    /// inside the file (osbuild `org.osbuild.qemu` `compression: true`).
    Qcow2 { compressed: bool },
    /// VMDK streamOptimized, adapter lsilogic, compat6 (cosa's aws).
    Vmdk,
    /// OVA: an OVF descriptor from `template` plus a streamOptimized VMDK.
    Ova { template: OvfTemplate },
    /// Fixed VHD, size forced to whole MiB (qemu-img `vpc`
    /// `force_size,subformat=fixed`).
    Vhd,
    /// VHDX, dynamic (qemu-img `vhdx` defaults).
    Vhdx,
    /// GCP: oldgnu tar holding a sparse `disk.raw`, gzip'd.
    GcpTar,
    /// An OCI image archive whose one layer holds `/disk/<artifact>.qcow2`
    /// (a KubeVirt containerDisk).
    OciArchive,
    /// Live ISO and PXE files (SPEC 5).
    Live,
}

/// The OVF descriptor template of an OVA (cosa `src/<name>-template.xml`).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum OvfTemplate {
    Vmware,
    Virtualbox,
}

impl Format {
    /// One line for humans (`platforms`, `--dry-run`).
    pub fn describe(self) -> &'static str {
        match self {
            Format::Raw => "raw disk",
            Format::Qcow2 { compressed: false } => "qcow2 (compat 1.1)",
            Format::Qcow2 { compressed: true } => "qcow2 (compat 1.1), clusters deflated",
            Format::Vmdk => "VMDK streamOptimized (lsilogic, compat6)",
            Format::Ova {
                template: OvfTemplate::Vmware,
            } => "OVA (vmware template + streamOptimized VMDK)",
            Format::Ova {
                template: OvfTemplate::Virtualbox,
            } => "OVA (virtualbox template + streamOptimized VMDK)",
            Format::Vhd => "fixed VHD",
            Format::Vhdx => "VHDX (dynamic)",
            Format::GcpTar => "tar.gz with sparse disk.raw (oldgnu)",
            Format::OciArchive => "OCI archive, layer /disk/<name>.qcow2 (containerDisk)",
            Format::Live => "live ISO + PXE kernel/initramfs/rootfs",
        }
    }
}
