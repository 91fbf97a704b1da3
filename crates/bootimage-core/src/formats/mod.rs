//! Disk image encoders: each reads a [`crate::io::view::DiskView`] and
//! streams one platform's format.
pub mod gcp;
pub mod oci;
pub mod ova;
pub mod powervs;
pub mod qcow2;
pub mod vhd;
pub mod vhdx;
pub mod vmdk;

use crate::io::compress::{self, ChunkCache, Compressor, Written};
use crate::io::view::{DiskView, FileView, Precompressed, Remapped};
use anyhow::{bail, Result};
use serde::Serialize;
use std::path::Path;

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
    /// PowerVS: oldgnu tar of `coreos.ovf` and a sparse raw disk, gzip'd.
    PowerVsOva,
    /// An OCI image archive whose one layer holds `/disk/<artifact>.qcow2`
    /// (a KubeVirt containerDisk).
    OciArchive,
    /// Live ISO and PXE files (docs/contract.md §5).
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
    /// Whether [`write`] encodes this format to a work file first (before
    /// compressing it, or packing it into an archive), when its output is
    /// `compressed`: a disk's worth of work space (the free-space check).
    pub fn staged(self, compressed: bool) -> bool {
        match self {
            Format::OciArchive => true,
            Format::Qcow2 { .. } | Format::Vmdk | Format::Vhdx => compressed,
            _ => false,
        }
    }

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
            Format::PowerVsOva => "ova.gz: tar of coreos.ovf and a sparse raw disk (cosa powervs)",
            Format::OciArchive => "OCI archive, layer /disk/<name>.qcow2 (containerDisk)",
            Format::Live => "live ISO + PXE kernel/initramfs/rootfs",
        }
    }
}

/// zlib level of compressed qcow2 clusters (QEMU's `Z_DEFAULT_COMPRESSION`,
/// `block/qcow2-threads.c`).
const QCOW2_DEFLATE_LEVEL: u32 = 6;

/// image.json's VMware values (docs/contract.md §1.2), for the vmware OVA.
#[derive(Debug, Clone)]
pub struct VmwareSettings {
    pub os_type: String,
    pub hw_version: u32,
    pub secure_boot: bool,
}

/// What an encoder needs besides the disk.
pub struct EncodeCtx<'a> {
    /// OS name and version (`rhcos`, `418.94...`).
    pub name: &'a str,
    pub version: &'a str,
    /// What the OS is, in words (cosa's `summary`; here os-release `NAME`).
    pub summary: &'a str,
    /// The artifact's file name without a compression extension (a VMDK's
    /// extent name).
    pub file: &'a str,
    pub platform: &'a str,
    /// CoreOS and OCI architecture names.
    pub arch: &'a str,
    pub oci_arch: &'a str,
    /// Time stamp of archive members, Unix seconds.
    pub mtime: u64,
    /// qcow2 shared-block alignment: the compressor's chunk (0: none).
    pub align: u64,
    pub threads: usize,
    pub chunks: Option<&'a ChunkCache>,
    /// Scratch space for intermediate files.
    pub work: &'a Path,
    pub vmware: VmwareSettings,
}

impl EncodeCtx<'_> {
    /// The VHD footer's unique id: derived from what the disk is (OS,
    /// version, platform, arch), the same for every build of it.
    fn vhd_id(&self) -> [u8; 16] {
        crate::util::derived_uuid(&["vhd", self.name, self.version, self.platform, self.arch])
    }

    /// The VHD footer's time stamp: the OS's ([`EncodeCtx::mtime`]).
    fn vhd_time(&self) -> u32 {
        vhd::vhd_timestamp(self.mtime.min(i64::MAX as u64) as i64)
    }
}

/// The one entry point of the encoders: write `view` as `format` to `out`
/// (uncompressed). Returns the bytes of the output that other platforms'
/// outputs share, if the format places them at fixed offsets (qcow2).
/// Raw disks and the live files are not encoded here (they are compressed
/// or assembled by their own stages).
pub fn encode(
    format: Format,
    view: &dyn DiskView,
    out: &Path,
    c: &EncodeCtx,
    prog: &(dyn Fn(u64) + Sync),
) -> Result<Option<qcow2::SharedBlocks>> {
    match format {
        Format::Qcow2 { compressed: false } => {
            let align = match c.align {
                0 => qcow2::CLUSTER_SIZE,
                a => a,
            };
            let stats = qcow2::write_qcow2_file(view, out, align)?;
            prog(view.len());
            return Ok(stats.shared);
        }
        Format::Qcow2 { compressed: true } => {
            qcow2::write_qcow2_compressed_file(view, out, QCOW2_DEFLATE_LEVEL, c.threads, prog)?;
        }
        Format::Vmdk => {
            let opts = vmdk::VmdkOptions {
                extent_name: Some(c.file.to_string()),
                threads: c.threads,
                cache: c.chunks,
                ..Default::default()
            };
            vmdk::write_vmdk(view, out, &opts, prog)?;
        }
        Format::Vhd => {
            vhd::write_vhd(view, out, c.vhd_id(), c.vhd_time(), prog)?;
        }
        Format::Vhdx => {
            vhdx::write_vhdx(view, out, prog)?;
        }
        Format::Ova { template } => {
            let vm_name = format!("{}-{}", c.name, c.version);
            let mut p = match template {
                OvfTemplate::Vmware => ova::OvaParams::new(
                    vm_name,
                    c.vmware.os_type.clone(),
                    c.vmware.hw_version,
                    c.vmware.secure_boot,
                    c.version,
                ),
                OvfTemplate::Virtualbox => ova::OvaParams::virtualbox(vm_name, c.version),
            };
            p.mtime = c.mtime;
            p.vmdk.threads = c.threads;
            p.vmdk.cache = c.chunks;
            ova::write_ova(view, out, &p, prog)?;
        }
        Format::GcpTar => {
            gcp::write_gcp_tar_gz(view, out, c.mtime, c.threads, prog)?;
        }
        Format::PowerVsOva => {
            let image = format!("{}-{}", c.name, c.version);
            let description = format!("{} {} {}", c.name, c.summary, c.version);
            let p = powervs::PowerVs {
                image: &image,
                description: &description,
            };
            powervs::write_powervs_ova_gz(view, out, &p, c.mtime, c.threads, prog)?;
        }
        Format::OciArchive => {
            // The qcow2 (uncompressed, as osbuild writes it) inside the
            // image's /disk/.
            let qcow2 = tempfile::Builder::new()
                .prefix(&format!(".{}-", c.platform))
                .suffix(".qcow2")
                .tempfile_in(c.work)?;
            qcow2::write_qcow2_file(view, qcow2.path(), qcow2::CLUSTER_SIZE)?;
            prog(view.len());
            let disk_name = format!("{}-{}-{}.{}.qcow2", c.name, c.version, c.platform, c.arch);
            oci::write_containerdisk(
                qcow2.path(),
                out,
                c.work,
                &oci::OciDisk {
                    disk_name: &disk_name,
                    architecture: c.oci_arch,
                    version: c.version,
                    mtime: c.mtime,
                },
                c.threads,
            )?;
        }
        Format::Raw | Format::Live => {
            bail!("{} is not encoded from a disk view", format.describe())
        }
    }
    Ok(None)
}

/// What [`write`] produced.
#[derive(Debug)]
pub enum Produced {
    /// A compressed stream, or a raw disk written sparse: the output's and
    /// the content's sizes and hashes.
    Stream(Written),
    /// The format's file as encoded (never compressed again; docs/contract.md §3): its
    /// hash is the file's.
    Encoded,
}

/// The one entry of every disk format: encode `view` as `format` and
/// compress the result with `kind` at `level` into `out`. Raw disks and
/// fixed VHDs are compressed straight from the view; qcow2, VMDK and VHDX
/// are encoded to a scratch file under `c.work`, then compressed (a qcow2's
/// base chunks reuse the raw disks' compressed forms through `c.chunks`, a
/// VMDK's grains are already deflated, so no match search on them).
/// `Compressor::None` gives the file as encoded (a raw disk: sparse).
pub fn write(
    format: Format,
    view: &dyn DiskView,
    out: &Path,
    c: &EncodeCtx,
    kind: Compressor,
    level: u32,
    prog: &(dyn Fn(u64) + Sync),
) -> Result<Produced> {
    let compressed = kind != Compressor::None;
    let stream = |input: &dyn DiskView, prog: &(dyn Fn(u64) + Sync)| {
        let opts = compress::CompressOpts::new(kind, level, c.threads).with_cache(c.chunks);
        compress::compress_view(input, out, &opts, prog)
    };
    Ok(match format {
        Format::Raw => Produced::Stream(stream(view, prog)?),
        Format::Vhd if compressed => Produced::Stream(stream(
            &vhd::VhdView::new(view, c.vhd_id(), c.vhd_time())?,
            prog,
        )?),
        _ if compressed => {
            let enc = c.work.join(format!("{}.encoded", c.platform));
            let shared = encode(format, view, &enc, c, prog)?;
            let ev = FileView::open(&enc)?;
            let remapped = shared.as_ref().map(|s| Remapped {
                inner: &ev,
                start: s.start,
                align: s.align,
                blocks: &s.blocks,
            });
            let pre = Precompressed(&ev);
            let input: &dyn DiskView = match (&remapped, format) {
                (Some(r), _) => r,
                (None, Format::Vmdk) => &pre,
                _ => &ev,
            };
            let w = stream(input, &|_| {});
            std::fs::remove_file(&enc).ok();
            Produced::Stream(w?)
        }
        _ => {
            encode(format, view, out, c, prog)?;
            Produced::Encoded
        }
    })
}

#[cfg(test)]
mod reproducible_tests {
    use super::*;
    use crate::io::view::FileView;

    /// Every format we write ourselves, from one disk, written twice a
    /// second apart (another clock) and with another thread count: the
    /// same bytes. Another OS time changes them (the
    /// time is read from the context, not the clock).
    #[test]
    fn every_format_depends_on_the_disk_and_the_os_time_only() {
        let d = tempfile::tempdir().unwrap();
        let raw = d.path().join("disk.raw");
        let mut data = vec![0u8; 8 << 20];
        for (i, b) in data.iter_mut().enumerate().step_by(4093) {
            *b = (i % 251) as u8;
        }
        std::fs::write(&raw, &data).unwrap();
        let view = FileView::open(&raw).unwrap();
        let formats = [
            (Format::Qcow2 { compressed: false }, Compressor::None),
            (Format::Qcow2 { compressed: true }, Compressor::None),
            (Format::Vmdk, Compressor::Gzip),
            (
                Format::Ova {
                    template: OvfTemplate::Vmware,
                },
                Compressor::None,
            ),
            (
                Format::Ova {
                    template: OvfTemplate::Virtualbox,
                },
                Compressor::None,
            ),
            (Format::Vhd, Compressor::None),
            (Format::Vhd, Compressor::Gzip),
            (Format::Vhdx, Compressor::None),
            (Format::GcpTar, Compressor::None),
            (Format::PowerVsOva, Compressor::None),
            (Format::OciArchive, Compressor::None),
        ];
        let write_all = |tag: &str, mtime: u64, threads: usize| -> Vec<Vec<u8>> {
            formats
                .iter()
                .enumerate()
                .map(|(i, (f, kind))| {
                    let work = d.path().join(format!("work-{tag}-{i}"));
                    std::fs::create_dir_all(&work).unwrap();
                    let c = EncodeCtx {
                        name: "testos",
                        version: "1.2",
                        summary: "Test OS",
                        file: "testos-1.2-x.x86_64.img",
                        platform: "x",
                        arch: "x86_64",
                        oci_arch: "amd64",
                        mtime,
                        align: 0,
                        threads,
                        chunks: None,
                        work: &work,
                        vmware: VmwareSettings {
                            os_type: "rhel9_64Guest".into(),
                            hw_version: 17,
                            secure_boot: false,
                        },
                    };
                    let out = d.path().join(format!("{tag}-{i}"));
                    write(*f, &view, &out, &c, *kind, 6, &|_| {})
                        .unwrap_or_else(|e| panic!("{f:?}: {e:#}"));
                    std::fs::read(&out).unwrap()
                })
                .collect()
        };
        let a = write_all("a", 1_700_000_000, 1);
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let b = write_all("b", 1_700_000_000, 4);
        let c = write_all("c", 1_800_000_000, 2);
        for (i, (f, kind)) in formats.iter().enumerate() {
            assert!(a[i] == b[i], "{f:?} ({kind:?}): two writes differ");
            // Formats that date their members or footer: the OS time shows.
            if !matches!(f, Format::Qcow2 { .. } | Format::Vmdk | Format::Vhdx) {
                assert!(a[i] != c[i], "{f:?} ({kind:?}): the OS time is not in it");
            }
        }
    }
}
