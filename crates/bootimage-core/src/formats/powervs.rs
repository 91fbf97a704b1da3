//! IBM Power Virtual Server image (cosa `src/cosalib/ibmcloud.py`, variant
//! `powervs`, and `src/powervs-template.xml`): a gzip'd tar whose members
//! are `coreos.ovf` (the template filled in) and `<name>-<version>-disk.raw`
//! (the raw disk, stored sparse as `tar -S` does), in that order ("OVF
//! descriptor must come first"). cosa writes the tar with `tar -Sch`
//! (GNU format, old GNU sparse headers) and compresses it with `gzip -6`;
//! the archive is streamed here as a view ([`super::gcp::TarView`]) into
//! the parallel gzip, never staged.
use super::gcp::{sparse_map, TarView};
use crate::io::compress::{compress_view, CompressOpts, Compressor, Written};
use crate::io::view::DiskView;
use anyhow::{Context, Result};
use std::path::Path;

/// gzip level (cosa `QemuVariantImage`: `gzip -6c` for `compression: gzip`).
pub const GZIP_LEVEL: u32 = 6;
/// The OVF descriptor's member name.
pub const OVF_NAME: &str = "coreos.ovf";
/// The disk capacity the template declares, in bytes (120 GiB, fixed in
/// cosa's template whatever the image's size).
pub const CAPACITY: u64 = 128_849_018_880;

/// What the OVF names.
pub struct PowerVs<'a> {
    /// `<name>-<ostree version>`: the VM name and the disk member's stem.
    pub image: &'a str,
    /// `<name> <summary> <ostree version>`.
    pub description: &'a str,
}

/// The disk member's name.
pub fn disk_name(image: &str) -> String {
    format!("{image}-disk.raw")
}

/// Escape text for XML element content and attribute values.
fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// cosa's `powervs-template.xml` with `image`, `image_size` (the raw
/// disk's size in bytes) and `image_description` filled in.
pub fn render_ovf(p: &PowerVs, image_size: u64) -> String {
    let image = xml(p.image);
    let description = xml(p.description);
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<ovf:Envelope xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1" xmlns:rasd="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
  <ovf:References>
    <ovf:File href="{image}-disk.raw" id="file1" size="{image_size}"/>
  </ovf:References>
  <ovf:DiskSection>
    <ovf:Info>Disk Section</ovf:Info>
    <ovf:Disk capacity="{CAPACITY}" capacityAllocationUnits="byte" diskId="disk1" fileRef="file1"/>
  </ovf:DiskSection>
  <ovf:VirtualSystemCollection>
    <ovf:VirtualSystem ovf:id="vs0">
      <ovf:Name>{image}</ovf:Name>
      <ovf:Info></ovf:Info>
      <ovf:ProductSection>
        <ovf:Info/>
        <ovf:Product/>
      </ovf:ProductSection>
      <ovf:OperatingSystemSection ovf:id="80">
        <ovf:Info/>
        <ovf:Description>{description}</ovf:Description>
        <ns0:architecture xmlns:ns0="ibmpvc">ppc64le</ns0:architecture>
      </ovf:OperatingSystemSection>
      <ovf:VirtualHardwareSection>
        <ovf:Info>Storage resources</ovf:Info>
        <ovf:Item>
          <rasd:Description>Temporary clone for export</rasd:Description>
          <rasd:ElementName>{image}-disk.raw</rasd:ElementName>
          <rasd:HostResource>ovf:/disk/disk1</rasd:HostResource>
          <rasd:InstanceID>1</rasd:InstanceID>
          <rasd:ResourceType>17</rasd:ResourceType>
          <ns1:boot xmlns:ns1="ibmpvc">True</ns1:boot>
        </ovf:Item>
      </ovf:VirtualHardwareSection>
    </ovf:VirtualSystem>
    <ovf:Info/>
    <ovf:Name>{image}</ovf:Name>
  </ovf:VirtualSystemCollection>
</ovf:Envelope>
"#
    )
}

/// Write `view` as a PowerVS `.ova.gz` at `out`, members dated `mtime`.
pub fn write_powervs_ova_gz(
    view: &dyn DiskView,
    out: &Path,
    p: &PowerVs,
    mtime: u64,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Written> {
    let ctx = || format!("writing PowerVS image {}", out.display());
    let ovf = render_ovf(p, view.len());
    let map = sparse_map(view).with_context(ctx)?;
    let disk = disk_name(p.image);
    let tar = TarView::with_members(view, map, mtime, &disk, &[(OVF_NAME, ovf.as_bytes())])
        .with_context(ctx)?;
    let total = tar.len();
    let disk_len = view.len();
    let prog = |n: u64| progress((n as u128 * disk_len as u128 / total.max(1) as u128) as u64);
    let opts = CompressOpts::new(Compressor::Gzip, GZIP_LEVEL, threads);
    compress_view(&tar, out, &opts, &prog).with_context(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::view::FileView;
    use std::os::unix::fs::FileExt;
    use std::process::Command;

    /// GNU tar lists and extracts both members in cosa's order; the disk
    /// comes back byte for byte with its holes, and the OVF names it.
    #[test]
    fn gnu_tar_reads_the_ova() {
        let d = tempfile::tempdir().unwrap();
        let raw = d.path().join("in.raw");
        let f = std::fs::File::create(&raw).unwrap();
        f.set_len(64 << 20).unwrap();
        f.write_at(b"PReP-ish header", 1 << 20).unwrap();
        f.write_at(&[7u8; 8192], 40 << 20).unwrap();
        drop(f);
        let view = FileView::open(&raw).unwrap();
        let out = d.path().join("x.ova.gz");
        let p = PowerVs {
            image: "rhcos-418.94.1-0",
            description: "rhcos Red Hat <CoreOS> 418.94.1-0",
        };
        let w = write_powervs_ova_gz(&view, &out, &p, 1_700_000_000, 2, &|_| {}).unwrap();
        assert!(w.size > 0);
        let list = Command::new("tar").arg("-tzvf").arg(&out).output().unwrap();
        assert!(list.status.success());
        let names: Vec<String> = String::from_utf8_lossy(&list.stdout)
            .lines()
            .map(|l| l.split_whitespace().last().unwrap().to_string())
            .collect();
        assert_eq!(names, [OVF_NAME, "rhcos-418.94.1-0-disk.raw"]);
        let x = d.path().join("x");
        std::fs::create_dir(&x).unwrap();
        let st = Command::new("tar")
            .arg("-xzSf")
            .arg(&out)
            .arg("-C")
            .arg(&x)
            .status()
            .unwrap();
        assert!(st.success());
        let back = std::fs::read(x.join("rhcos-418.94.1-0-disk.raw")).unwrap();
        assert_eq!(back, std::fs::read(&raw).unwrap());
        let ovf = std::fs::read_to_string(x.join(OVF_NAME)).unwrap();
        assert!(ovf.contains(
            r#"<ovf:File href="rhcos-418.94.1-0-disk.raw" id="file1" size="67108864"/>"#
        ));
        assert!(ovf.contains(
            "<ovf:Description>rhcos Red Hat &lt;CoreOS&gt; 418.94.1-0</ovf:Description>"
        ));
        assert!(ovf.contains(r#"capacity="128849018880""#));
        // gzip -6, not -9: the header's XFL byte is 2 for the slowest
        // level, 4 for the fastest, 0 otherwise (RFC 1952).
        let gz = std::fs::read(&out).unwrap();
        assert_eq!((&gz[..2], gz[8]), (&b"\x1f\x8b"[..], 0));
    }
}
