//! VMware OVA writer: a ustar archive holding an OVF 1.x descriptor
//! (`coreos.ovf`), the disk as a streamOptimized VMDK (`disk.vmdk`) and a
//! SHA-256 manifest (`coreos.mf`), in that order, like cosa's `vmware`
//! artifact (`src/cosalib/vmware.py`, `src/vmware-template.xml`).
//!
//! Facts relied on:
//! - DMTF DSP0243 (OVF 1.x): an OVA is a ustar (POSIX.1-1988) archive whose
//!   first member is the descriptor; the manifest and certificate may come
//!   right after it or at the end of the archive; the manifest has the
//!   descriptor's base name with `.mf`, one `ALG(file)= hex` line per file.
//!   It is written last here because the VMDK's digest is known only once
//!   the VMDK has been written.
//! - The OVF needs the VMDK's file size and populated size, so the VMDK is
//!   written first to a temporary file next to the output (deleted at the
//!   end, also on error), then copied into the archive. Memory stays
//!   bounded; disk use peaks at twice the VMDK.
//! - Descriptor content per docs/contract.md §4: disk capacity in bytes, format
//!   `vmdk.html#streamOptimized`, `ovf:populatedSize` = guest bytes in
//!   stored grains (cosa puts the VMDK file size there; the OVF field is
//!   the disk's used size, which [`super::vmdk::VmdkStats::populated_bytes`]
//!   is), OperatingSystemSection id 100 with `vmw:osType`, `vmx-<n>`,
//!   2 vCPU / 4096 MB, a VirtualSCSI controller parenting the disk, a
//!   VmxNet3 NIC on "VM Network", EFI firmware, secure boot as configured,
//!   a ProductSection with the OS version and the two user-configurable
//!   Ignition properties read through the `com.vmware.guestInfo` transport.
//!   Within each `Item` the `rasd:` elements are in the alphabetical order
//!   the CIM RASD schema's sequence requires.
use super::vmdk::{write_vmdk, VmdkOptions};
use crate::io::view::DiskView;
use crate::util::sha256::Sha256;
use anyhow::{ensure, Context, Result};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;

mod descriptor;
mod params;
pub use descriptor::{render_ovf, PROP_IGNITION_DATA, PROP_IGNITION_ENCODING, VBOX_SYSTEM_TYPE};
pub use params::{OvaParams, OvaStats, OvfDisk, MANIFEST_NAME, OVF_NAME, VBOX_OS_TYPE, VMDK_NAME};

/// tar block and record sizes (POSIX ustar: 512-byte blocks; tar pads the
/// archive to records of 20 blocks).
const BLOCK: u64 = 512;
const RECORD: u64 = 20 * BLOCK;
/// Largest member size the 11 octal digits of a ustar header can express.
const USTAR_MAX_SIZE: u64 = (1 << 33) - 1;
/// Copy buffer for the VMDK member.
const COPY_BUFFER: usize = 4 << 20;

/// Write `view` as an OVA to `out` (created or truncated, then fsynced;
/// the caller renames). The disk is encoded as `p.vmdk` says (workers,
/// chunk cache; see [`write_vmdk`]); `progress` counts input bytes encoded
/// into the VMDK.
pub fn write_ova(
    view: &dyn DiskView,
    out: &Path,
    p: &OvaParams,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<OvaStats> {
    p.validate()?;
    write(view, out, p, progress).with_context(|| format!("writing OVA {}", out.display()))
}

fn write(
    view: &dyn DiskView,
    out: &Path,
    p: &OvaParams,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<OvaStats> {
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // Deleted when dropped, whatever happens below.
    let tmp = tempfile::Builder::new()
        .prefix(".ova-disk-")
        .suffix(".vmdk")
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary VMDK in {}", dir.display()))?;
    let vmdk_opts = VmdkOptions {
        extent_name: Some(VMDK_NAME.into()),
        ..p.vmdk.clone()
    };
    let vs = write_vmdk(view, tmp.path(), &vmdk_opts, progress)?;
    ensure!(
        vs.file_size <= USTAR_MAX_SIZE,
        "the VMDK is {} bytes, more than a ustar member can hold",
        vs.file_size
    );
    let ovf = render_ovf(p, &OvfDisk::from(&vs));

    let file = crate::io::create_sized(out, 0)?;
    let mut w = Archive {
        w: BufWriter::with_capacity(1 << 20, &file),
        size: 0,
        mtime: p.mtime,
    };
    let ovf_sha = w.member(OVF_NAME, ovf.as_bytes())?;
    let mut disk = File::open(tmp.path()).context("reopening the temporary VMDK")?;
    let vmdk_sha = w.member_from(VMDK_NAME, &mut disk, vs.file_size)?;
    if p.manifest {
        let mf = format!("SHA256({OVF_NAME})= {ovf_sha}\nSHA256({VMDK_NAME})= {vmdk_sha}\n");
        w.member(MANIFEST_NAME, mf.as_bytes())?;
    }
    let ova_size = w.finish()?;
    file.sync_all().context("syncing the output file")?;
    drop(disk);
    tmp.close().context("removing the temporary VMDK")?;
    Ok(OvaStats {
        ova_size,
        vmdk_size: vs.file_size,
        vmdk_populated: vs.populated_bytes,
        capacity: vs.capacity_bytes,
        vmdk_sha256: vmdk_sha,
    })
}

/// A ustar archive being written: headers, data padded to blocks, and the
/// end-of-archive blocks padded to a record.
struct Archive<'f> {
    w: BufWriter<&'f File>,
    size: u64,
    mtime: u64,
}

impl Archive<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.w.write_all(bytes).context("writing the OVA")?;
        self.size += bytes.len() as u64;
        Ok(())
    }

    fn header(&mut self, name: &str, size: u64) -> Result<()> {
        let mut h = tar::Header::new_ustar();
        h.set_path(name)?;
        h.set_size(size);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_username("root")?;
        h.set_groupname("root")?;
        h.set_mtime(self.mtime);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        self.put(h.as_bytes())
    }

    fn pad(&mut self) -> Result<()> {
        let n = self.size.next_multiple_of(BLOCK) - self.size;
        self.put(&vec![0u8; n as usize])
    }

    /// Add a member from memory; returns its SHA-256.
    fn member(&mut self, name: &str, data: &[u8]) -> Result<String> {
        self.header(name, data.len() as u64)?;
        self.put(data)?;
        self.pad()?;
        Ok(hex::encode(Sha256::digest(data)))
    }

    /// Add `len` bytes from `r` as a member; returns their SHA-256.
    fn member_from(&mut self, name: &str, r: &mut dyn Read, len: u64) -> Result<String> {
        self.header(name, len)?;
        let mut hash = Sha256::new();
        let mut buf = vec![0u8; COPY_BUFFER];
        let mut left = len;
        while left > 0 {
            crate::util::cancel::check()?;
            let n = (left.min(buf.len() as u64)) as usize;
            r.read_exact(&mut buf[..n])
                .with_context(|| format!("reading {name} for the archive"))?;
            hash.update(&buf[..n]);
            self.put(&buf[..n])?;
            left -= n as u64;
        }
        self.pad()?;
        Ok(hex::encode(hash.finalize()))
    }

    /// Two zero blocks, then zeros up to a whole record, as tar writes.
    fn finish(mut self) -> Result<u64> {
        self.put(&[0u8; 2 * BLOCK as usize])?;
        let n = self.size.next_multiple_of(RECORD) - self.size;
        self.put(&vec![0u8; n as usize])?;
        self.w.flush().context("writing the OVA")?;
        Ok(self.size)
    }
}

#[cfg(test)]
mod tests;
