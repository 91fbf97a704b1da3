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
//! - Descriptor content per SPEC 4: disk capacity in bytes, format
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
use super::vmdk::{write_vmdk, VmdkOptions, VmdkStats};
use super::OvfTemplate;
use crate::io::view::DiskView;
use crate::util::sha256::Sha256;
use crate::util::xml::esc;
use anyhow::{ensure, Context, Result};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;

/// Archive member names (cosa's), in archive order.
pub const OVF_NAME: &str = "coreos.ovf";
pub const VMDK_NAME: &str = "disk.vmdk";
/// The manifest takes the descriptor's base name (DSP0243).
pub const MANIFEST_NAME: &str = "coreos.mf";
/// OVF 1.x envelope namespace (DSP8023).
const NS_OVF: &str = "http://schemas.dmtf.org/ovf/envelope/1";
/// CIM resource allocation and virtual system setting data namespaces.
const NS_RASD: &str =
    "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData";
const NS_VSSD: &str =
    "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_VirtualSystemSettingData";
/// VMware's OVF extension namespace (`vmw:osType`, `vmw:Config`).
const NS_VMW: &str = "http://www.vmware.com/schema/ovf";
/// `ovf:format` of a streamOptimized VMDK.
const VMDK_FORMAT_URI: &str =
    "http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized";
/// OperatingSystemSection `ovf:id` (a CIM OSType code), per SPEC 4; VMware
/// goes by `vmw:osType`.
const OS_SECTION_ID: u32 = 100;
/// The logical network the NIC is attached to.
const NETWORK: &str = "VM Network";
/// The VMware guest info transport for ProductSection properties.
const TRANSPORT: &str = "com.vmware.guestInfo";
/// CIM resource types (CIM_ResourceAllocationSettingData.ResourceType).
const RT_PROCESSOR: u32 = 3;
const RT_MEMORY: u32 = 4;
const RT_SCSI_HBA: u32 = 6;
const RT_ETHERNET: u32 = 10;
const RT_DISK: u32 = 17;
/// Item instance IDs; the disk's `Parent` is the controller's.
const ID_CPU: u32 = 1;
const ID_MEMORY: u32 = 2;
const ID_SCSI: u32 = 3;
const ID_DISK: u32 = 4;
const ID_NIC: u32 = 5;
/// The Ignition properties (Ignition's VMware provider reads these
/// guestinfo keys).
pub const PROP_IGNITION_DATA: &str = "guestinfo.ignition.config.data";
pub const PROP_IGNITION_ENCODING: &str = "guestinfo.ignition.config.data.encoding";
/// tar block and record sizes (POSIX ustar: 512-byte blocks; tar pads the
/// archive to records of 20 blocks).
const BLOCK: u64 = 512;
const RECORD: u64 = 20 * BLOCK;
/// Largest member size the 11 octal digits of a ustar header can express.
const USTAR_MAX_SIZE: u64 = (1 << 33) - 1;
/// Copy buffer for the VMDK member.
const COPY_BUFFER: usize = 4 << 20;

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
    /// disk, members dated now.
    pub fn new(
        vm_name: impl Into<String>,
        os_type: impl Into<String>,
        hw_version: u32,
        secure_boot: bool,
        product_version: impl Into<String>,
    ) -> Self {
        let mtime = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
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
            mtime,
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
                adapter_type: super::vmdk::AdapterType::Ide,
                hw_version: 4,
                ..VmdkOptions::default()
            },
            ..OvaParams::new(vm_name, VBOX_OS_TYPE, 1, false, product_version)
        }
    }

    fn validate(&self) -> Result<()> {
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

/// What [`write_ova`] produced.
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

/// The OVF 1.x descriptor for `p` and a disk described by `disk`.
pub fn render_ovf(p: &OvaParams, disk: &OvfDisk) -> String {
    match p.template {
        OvfTemplate::Vmware => render_vmware(p, disk),
        OvfTemplate::Virtualbox => render_virtualbox(p, disk),
    }
}

/// VirtualBox's OVF extension namespace (cosa `virtualbox-template.xml`).
const NS_VBOX: &str = "http://www.virtualbox.org/ovf/machine";
/// The template's guest OS type, VirtualSystemType and fixed disk and
/// machine UUIDs (cosa `src/virtualbox-template.xml`).
pub const VBOX_OS_TYPE: &str = "Fedora_64";
pub const VBOX_SYSTEM_TYPE: &str = "virtualbox-2.2";
const VBOX_DISK_UUID: &str = "c7b8d618-f480-433e-b0c4-07b0d69d4918";
const VBOX_MACHINE_UUID: &str = "fdee0598-5b31-4597-a441-36575dda937a";
/// CIM resource types the virtualbox template uses beyond the vmware one's.
const RT_SATA: u32 = 20;
const RT_USB: u32 = 23;

/// The VM name and the optional `<Product>`/`<Vendor>` lines of the
/// ProductSection, escaped (both templates carry them alike).
fn names(p: &OvaParams) -> (String, String, String) {
    let line = |tag: &str, v: &Option<String>| {
        v.as_deref()
            .map(|s| format!("\n      <{tag}>{}</{tag}>", esc(s)))
            .unwrap_or_default()
    };
    (
        esc(&p.vm_name),
        line("Product", &p.product),
        line("Vendor", &p.vendor),
    )
}

/// cosa's `virtualbox-template.xml` filled in: an AHCI (SATA) controller
/// holding the disk, a USB controller, an E1000 NIC on NAT, and a
/// `vbox:Machine` section (EFI firmware, virtio NIC, the disk attached by
/// its UUID) that VirtualBox imports as is.
fn render_virtualbox(p: &OvaParams, disk: &OvfDisk) -> String {
    let (name, product, vendor) = names(p);
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<Envelope xmlns="{NS_OVF}" xmlns:ovf="{NS_OVF}" xmlns:rasd="{NS_RASD}" xmlns:vssd="{NS_VSSD}" xmlns:vbox="{NS_VBOX}">
  <References>
    <File ovf:href="{VMDK_NAME}" ovf:id="file1" ovf:size="{file_size}"/>
  </References>
  <DiskSection>
    <Info>Virtual disk information</Info>
    <Disk ovf:capacity="{capacity}" ovf:capacityAllocationUnits="byte" ovf:diskId="vmdisk1" ovf:fileRef="file1" ovf:format="{VMDK_FORMAT_URI}" ovf:populatedSize="{populated}" vbox:uuid="{VBOX_DISK_UUID}"/>
  </DiskSection>
  <NetworkSection>
    <Info>Logical networks</Info>
    <Network ovf:name="{network}">
      <Description>The {network} network</Description>
    </Network>
  </NetworkSection>
  <VirtualSystem ovf:id="{name}">
    <Info>A virtual machine</Info>
    <Name>{name}</Name>
    <OperatingSystemSection ovf:id="{OS_SECTION_ID}">
      <Info>Guest operating system</Info>
      <vbox:OSType ovf:required="false">{os_type}</vbox:OSType>
    </OperatingSystemSection>
    <VirtualHardwareSection>
      <Info>Virtual hardware requirements</Info>
      <System>
        <vssd:ElementName>Virtual Hardware Family</vssd:ElementName>
        <vssd:InstanceID>0</vssd:InstanceID>
        <vssd:VirtualSystemIdentifier>{name}</vssd:VirtualSystemIdentifier>
        <vssd:VirtualSystemType>{VBOX_SYSTEM_TYPE}</vssd:VirtualSystemType>
      </System>
      <Item>
        <rasd:AllocationUnits>hertz * 10^6</rasd:AllocationUnits>
        <rasd:Description>Number of virtual CPUs</rasd:Description>
        <rasd:ElementName>{cpus} virtual CPU(s)</rasd:ElementName>
        <rasd:InstanceID>1</rasd:InstanceID>
        <rasd:ResourceType>{RT_PROCESSOR}</rasd:ResourceType>
        <rasd:VirtualQuantity>{cpus}</rasd:VirtualQuantity>
      </Item>
      <Item>
        <rasd:AllocationUnits>byte * 2^20</rasd:AllocationUnits>
        <rasd:Description>Memory size</rasd:Description>
        <rasd:ElementName>{memory} MB of memory</rasd:ElementName>
        <rasd:InstanceID>2</rasd:InstanceID>
        <rasd:ResourceType>{RT_MEMORY}</rasd:ResourceType>
        <rasd:VirtualQuantity>{memory}</rasd:VirtualQuantity>
      </Item>
      <Item>
        <rasd:Address>0</rasd:Address>
        <rasd:Caption>sataController0</rasd:Caption>
        <rasd:Description>SATA Controller</rasd:Description>
        <rasd:ElementName>sataController0</rasd:ElementName>
        <rasd:InstanceID>3</rasd:InstanceID>
        <rasd:ResourceSubType>AHCI</rasd:ResourceSubType>
        <rasd:ResourceType>{RT_SATA}</rasd:ResourceType>
      </Item>
      <Item>
        <rasd:Address>0</rasd:Address>
        <rasd:Caption>usb</rasd:Caption>
        <rasd:Description>USB Controller</rasd:Description>
        <rasd:ElementName>usb</rasd:ElementName>
        <rasd:InstanceID>4</rasd:InstanceID>
        <rasd:ResourceType>{RT_USB}</rasd:ResourceType>
      </Item>
      <Item>
        <rasd:AddressOnParent>0</rasd:AddressOnParent>
        <rasd:Caption>disk1</rasd:Caption>
        <rasd:Description>Disk Image</rasd:Description>
        <rasd:ElementName>disk1</rasd:ElementName>
        <rasd:HostResource>/disk/vmdisk1</rasd:HostResource>
        <rasd:InstanceID>5</rasd:InstanceID>
        <rasd:Parent>3</rasd:Parent>
        <rasd:ResourceType>{RT_DISK}</rasd:ResourceType>
      </Item>
      <Item>
        <rasd:AutomaticAllocation>true</rasd:AutomaticAllocation>
        <rasd:Caption>Ethernet adapter on 'NAT'</rasd:Caption>
        <rasd:Connection>NAT</rasd:Connection>
        <rasd:ElementName>Ethernet adapter on 'NAT'</rasd:ElementName>
        <rasd:InstanceID>6</rasd:InstanceID>
        <rasd:ResourceSubType>E1000</rasd:ResourceSubType>
        <rasd:ResourceType>{RT_ETHERNET}</rasd:ResourceType>
      </Item>
    </VirtualHardwareSection>
    <vbox:Machine ovf:required="false" version="1.16-linux" uuid="{VBOX_MACHINE_UUID}" name="{name}" OSType="{os_type}">
      <ovf:Info>Complete VirtualBox machine configuration in VirtualBox format</ovf:Info>
      <Hardware>
        <CPU count="{cpus}">
          <PAE enabled="true"/>
          <LongMode enabled="true"/>
          <X2APIC enabled="true"/>
          <HardwareVirtExLargePages enabled="false"/>
        </CPU>
        <Memory RAMSize="{memory}"/>
        <Firmware type="EFI"/>
        <Display controller="VMSVGA" VRAMSize="36"/>
        <BIOS>
          <IOAPIC enabled="true"/>
          <SmbiosUuidLittleEndian enabled="true"/>
        </BIOS>
        <USB>
          <Controllers>
            <Controller name="OHCI" type="OHCI"/>
          </Controllers>
        </USB>
        <Network>
          <Adapter slot="0" enabled="true" type="virtio">
            <NAT/>
          </Adapter>
        </Network>
        <Clipboard mode="Disabled"/>
      </Hardware>
      <StorageControllers>
        <StorageController name="AHCI" type="AHCI" PortCount="1" useHostIOCache="false" Bootable="true" IDE0MasterEmulationPort="0" IDE0SlaveEmulationPort="1" IDE1MasterEmulationPort="2" IDE1SlaveEmulationPort="3">
          <AttachedDevice type="HardDisk" hotpluggable="false" port="0" device="0">
            <Image uuid="{VBOX_DISK_UUID}"/>
          </AttachedDevice>
        </StorageController>
      </StorageControllers>
    </vbox:Machine>
    <ProductSection>
      <Info>Installed software</Info>{product}{vendor}
      <Version>{version}</Version>
    </ProductSection>
  </VirtualSystem>
</Envelope>
"#,
        file_size = disk.file_size,
        capacity = disk.capacity,
        populated = disk.populated,
        network = esc(NETWORK),
        os_type = esc(&p.os_type),
        cpus = p.cpus,
        memory = p.memory_mib,
        version = esc(&p.product_version),
    )
}

/// cosa's `vmware-template.xml` filled in.
fn render_vmware(p: &OvaParams, disk: &OvfDisk) -> String {
    let (name, product, vendor) = names(p);
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<Envelope xmlns="{NS_OVF}" xmlns:ovf="{NS_OVF}" xmlns:rasd="{NS_RASD}" xmlns:vssd="{NS_VSSD}" xmlns:vmw="{NS_VMW}">
  <References>
    <File ovf:href="{VMDK_NAME}" ovf:id="file1" ovf:size="{file_size}"/>
  </References>
  <DiskSection>
    <Info>Virtual disk information</Info>
    <Disk ovf:capacity="{capacity}" ovf:capacityAllocationUnits="byte" ovf:diskId="vmdisk1" ovf:fileRef="file1" ovf:format="{VMDK_FORMAT_URI}" ovf:populatedSize="{populated}"/>
  </DiskSection>
  <NetworkSection>
    <Info>Logical networks</Info>
    <Network ovf:name="{network}">
      <Description>The {network} network</Description>
    </Network>
  </NetworkSection>
  <VirtualSystem ovf:id="{name}">
    <Info>A virtual machine</Info>
    <Name>{name}</Name>
    <OperatingSystemSection ovf:id="{OS_SECTION_ID}" vmw:osType="{os_type}">
      <Info>Guest operating system</Info>
    </OperatingSystemSection>
    <VirtualHardwareSection ovf:transport="{TRANSPORT}">
      <Info>Virtual hardware requirements</Info>
      <System>
        <vssd:ElementName>Virtual Hardware Family</vssd:ElementName>
        <vssd:InstanceID>0</vssd:InstanceID>
        <vssd:VirtualSystemIdentifier>{name}</vssd:VirtualSystemIdentifier>
        <vssd:VirtualSystemType>vmx-{hw}</vssd:VirtualSystemType>
      </System>
      <Item>
        <rasd:AllocationUnits>hertz * 10^6</rasd:AllocationUnits>
        <rasd:Description>Number of virtual CPUs</rasd:Description>
        <rasd:ElementName>{cpus} virtual CPU(s)</rasd:ElementName>
        <rasd:InstanceID>{ID_CPU}</rasd:InstanceID>
        <rasd:ResourceType>{RT_PROCESSOR}</rasd:ResourceType>
        <rasd:VirtualQuantity>{cpus}</rasd:VirtualQuantity>
      </Item>
      <Item>
        <rasd:AllocationUnits>byte * 2^20</rasd:AllocationUnits>
        <rasd:Description>Memory size</rasd:Description>
        <rasd:ElementName>{memory} MB of memory</rasd:ElementName>
        <rasd:InstanceID>{ID_MEMORY}</rasd:InstanceID>
        <rasd:ResourceType>{RT_MEMORY}</rasd:ResourceType>
        <rasd:VirtualQuantity>{memory}</rasd:VirtualQuantity>
      </Item>
      <Item>
        <rasd:Address>0</rasd:Address>
        <rasd:Description>SCSI controller</rasd:Description>
        <rasd:ElementName>SCSI controller 0</rasd:ElementName>
        <rasd:InstanceID>{ID_SCSI}</rasd:InstanceID>
        <rasd:ResourceSubType>VirtualSCSI</rasd:ResourceSubType>
        <rasd:ResourceType>{RT_SCSI_HBA}</rasd:ResourceType>
      </Item>
      <Item>
        <rasd:AddressOnParent>0</rasd:AddressOnParent>
        <rasd:ElementName>Hard disk 1</rasd:ElementName>
        <rasd:HostResource>ovf:/disk/vmdisk1</rasd:HostResource>
        <rasd:InstanceID>{ID_DISK}</rasd:InstanceID>
        <rasd:Parent>{ID_SCSI}</rasd:Parent>
        <rasd:ResourceType>{RT_DISK}</rasd:ResourceType>
        <vmw:Config ovf:required="false" vmw:key="backing.writeThrough" vmw:value="false"/>
      </Item>
      <Item>
        <rasd:AddressOnParent>7</rasd:AddressOnParent>
        <rasd:AutomaticAllocation>true</rasd:AutomaticAllocation>
        <rasd:Connection>{network}</rasd:Connection>
        <rasd:Description>VmxNet3 ethernet adapter on {network_q}</rasd:Description>
        <rasd:ElementName>Network adapter 1</rasd:ElementName>
        <rasd:InstanceID>{ID_NIC}</rasd:InstanceID>
        <rasd:ResourceSubType>VmxNet3</rasd:ResourceSubType>
        <rasd:ResourceType>{RT_ETHERNET}</rasd:ResourceType>
        <vmw:Config ovf:required="false" vmw:key="connectable.allowGuestControl" vmw:value="true"/>
        <vmw:Config ovf:required="false" vmw:key="wakeOnLanEnabled" vmw:value="false"/>
      </Item>
      <vmw:Config ovf:required="false" vmw:key="bootOptions.efiSecureBootEnabled" vmw:value="{secure_boot}"/>
      <vmw:Config ovf:required="false" vmw:key="firmware" vmw:value="efi"/>
    </VirtualHardwareSection>
    <ProductSection>
      <Info>Installed software</Info>{product}{vendor}
      <Version>{version}</Version>
      <Property ovf:key="{PROP_IGNITION_DATA}" ovf:type="string" ovf:userConfigurable="true" ovf:value="">
        <Label>Ignition config data</Label>
        <Description>The Ignition config, inline (see the encoding property)</Description>
      </Property>
      <Property ovf:key="{PROP_IGNITION_ENCODING}" ovf:type="string" ovf:userConfigurable="true" ovf:value="">
        <Label>Ignition config data encoding</Label>
        <Description>Encoding of the Ignition config data: empty for plain text, or base64</Description>
      </Property>
    </ProductSection>
  </VirtualSystem>
</Envelope>
"#,
        file_size = disk.file_size,
        capacity = disk.capacity,
        populated = disk.populated,
        network = esc(NETWORK),
        network_q = esc(&format!("\"{NETWORK}\"")),
        os_type = esc(&p.os_type),
        hw = p.hw_version,
        cpus = p.cpus,
        memory = p.memory_mib,
        secure_boot = p.secure_boot,
        version = esc(&p.product_version),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::sparse::test_support::{make_sparse, sha256sum, Fill};
    use crate::io::view::FileView;
    use crate::util::cmd;
    use std::path::PathBuf;
    use std::process::Command;

    const MIB: u64 = 1 << 20;

    fn run(prog: &str, args: &[&str]) -> String {
        String::from_utf8(cmd::run(&mut cmd::new(prog, args)).unwrap()).unwrap()
    }

    /// `xmllint --xpath` (namespaces matched by local-name()).
    fn xpath(file: &Path, expr: &str) -> String {
        run("xmllint", &["--xpath", expr, file.to_str().unwrap()])
            .trim()
            .to_string()
    }

    /// The value of `attr` on elements named `elem`, by local names.
    fn attr(file: &Path, elem: &str, attr: &str) -> String {
        xpath(
            file,
            &format!("string(//*[local-name()='{elem}']/@*[local-name()='{attr}'])"),
        )
    }

    fn params() -> OvaParams<'static> {
        let mut p = OvaParams::new(
            "rhcos-418.94.202410090804-0",
            "rhel9_64Guest",
            15,
            true,
            "418.94.202410090804-0",
        );
        p.product = Some("Red Hat Enterprise Linux CoreOS".into());
        p.vendor = Some("rhcos".into());
        p.mtime = 1_700_000_000;
        p
    }

    struct Built {
        _dir: tempfile::TempDir,
        raw: PathBuf,
        ova: PathBuf,
        x: PathBuf,
        stats: OvaStats,
        len: u64,
    }

    /// A sparse disk whose size is not a grain multiple, written as an OVA
    /// and extracted with tar.
    fn build(p: &OvaParams) -> Built {
        let dir = tempfile::tempdir().unwrap();
        let len = 48 * MIB + 3 * 512;
        let raw = dir.path().join("disk.raw");
        make_sparse(
            &raw,
            len,
            &[
                (0, MIB + 17, Fill::Text),
                (9 * MIB, 2 * MIB, Fill::Random),
                (20 * MIB, MIB, Fill::Zeros),
                (len - 700, 700, Fill::Text),
            ],
            21,
        );
        let out_dir = dir.path().join("out");
        std::fs::create_dir(&out_dir).unwrap();
        let ova = out_dir.join("rhcos-vmware.x86_64.ova");
        let mut p = p.clone();
        p.vmdk.threads = 2;
        let stats = write_ova(&FileView::open(&raw).unwrap(), &ova, &p, &|_| {}).unwrap();
        let x = dir.path().join("x");
        std::fs::create_dir(&x).unwrap();
        run(
            "tar",
            &["-xf", ova.to_str().unwrap(), "-C", x.to_str().unwrap()],
        );
        Built {
            _dir: dir,
            raw,
            ova,
            x,
            stats,
            len,
        }
    }

    #[test]
    fn archive_is_ustar_with_the_members_in_order() {
        let b = build(&params());
        let names = run("tar", &["-tf", b.ova.to_str().unwrap()]);
        assert_eq!(
            names.lines().collect::<Vec<_>>(),
            ["coreos.ovf", "disk.vmdk", "coreos.mf"]
        );
        let listing = run("tar", &["-tvf", b.ova.to_str().unwrap()]);
        assert_eq!(listing.lines().count(), 3, "{listing}");
        assert!(
            listing
                .lines()
                .all(|l| l.starts_with("-rw-r--r-- root/root")),
            "{listing}"
        );
        // `file` (when installed) agrees: POSIX ustar, not GNU tar.
        if cmd::have("file") {
            let ftype = run("file", &["-b", b.ova.to_str().unwrap()]);
            assert!(ftype.contains("POSIX tar archive"), "{ftype}");
            assert!(!ftype.contains("GNU"), "{ftype}");
        }
        // Every header block has the POSIX magic "ustar\0" "00".
        let bytes = std::fs::read(&b.ova).unwrap();
        let mut at = 0usize;
        for name in ["coreos.ovf", "disk.vmdk", "coreos.mf"] {
            let h = &bytes[at..at + 512];
            assert_eq!(&h[..name.len()], name.as_bytes());
            assert_eq!(&h[257..265], b"ustar\x0000", "{name}");
            let size = std::fs::metadata(b.x.join(name)).unwrap().len() as usize;
            at += 512 + size.next_multiple_of(512);
        }
        assert!(bytes[at..].iter().all(|&x| x == 0), "end of archive");
        assert!(bytes.len() - at >= 1024);
        assert_eq!(bytes.len() % 10240, 0, "whole records");
        assert_eq!(bytes.len() as u64, b.stats.ova_size);
        // The temporary VMDK is gone: only the OVA is left.
        let left: Vec<_> = std::fs::read_dir(b.ova.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, [b.ova.file_name().unwrap()]);
    }

    #[test]
    fn manifest_matches_sha256sum_of_the_members() {
        let b = build(&params());
        let mf = std::fs::read_to_string(b.x.join("coreos.mf")).unwrap();
        let want = format!(
            "SHA256(coreos.ovf)= {}\nSHA256(disk.vmdk)= {}\n",
            sha256sum(&b.x.join("coreos.ovf")),
            sha256sum(&b.x.join("disk.vmdk"))
        );
        assert_eq!(mf, want);
        assert_eq!(b.stats.vmdk_sha256, sha256sum(&b.x.join("disk.vmdk")));
    }

    #[test]
    fn disk_member_is_the_view() {
        let b = build(&params());
        let vmdk = b.x.join("disk.vmdk");
        assert_eq!(std::fs::metadata(&vmdk).unwrap().len(), b.stats.vmdk_size);
        assert_eq!(b.stats.capacity, b.len);
        run(
            "qemu-img",
            &[
                "compare",
                "-f",
                "vmdk",
                "-F",
                "raw",
                vmdk.to_str().unwrap(),
                b.raw.to_str().unwrap(),
            ],
        );
        let info: serde_json::Value = serde_json::from_str(&run(
            "qemu-img",
            &["info", "--output=json", vmdk.to_str().unwrap()],
        ))
        .unwrap();
        assert_eq!(
            info["format-specific"]["data"]["create-type"],
            "streamOptimized"
        );
        // The descriptor names the member, not the temporary file.
        let head = std::fs::read(&vmdk).unwrap()[512..2048].to_vec();
        assert!(String::from_utf8_lossy(&head).contains("RW 98307 SPARSE \"disk.vmdk\""));
        // 4 MiB of data in 49 MiB: a small file.
        assert!(b.stats.vmdk_size < 4 * MIB, "{:?}", b.stats);
    }

    /// The virtualbox OVA: well-formed, with its template's values (cosa
    /// `src/virtualbox-template.xml`) and an IDE streamOptimized disk.
    #[test]
    fn virtualbox_descriptor_carries_its_template() {
        let p = OvaParams::virtualbox("testos-1", "1");
        let b = build(&p);
        let ovf = b.x.join("coreos.ovf");
        run("xmllint", &["--noout", ovf.to_str().unwrap()]);
        assert_eq!(
            xpath(&ovf, "string(//*[local-name()='VirtualSystemType'])"),
            VBOX_SYSTEM_TYPE
        );
        assert_eq!(
            xpath(
                &ovf,
                "string(//*[local-name()='OperatingSystemSection']/*[local-name()='OSType'])"
            ),
            VBOX_OS_TYPE
        );
        assert_eq!(attr(&ovf, "Firmware", "type"), "EFI");
        assert_eq!(attr(&ovf, "File", "size"), b.stats.vmdk_size.to_string());
        assert_eq!(attr(&ovf, "Disk", "uuid"), VBOX_DISK_UUID);
        assert_eq!(attr(&ovf, "Image", "uuid"), VBOX_DISK_UUID);
        assert_eq!(
            xpath(&ovf, "string(//*[local-name()='Item'][*[local-name()='ResourceType']='17']/*[local-name()='Parent'])"),
            "3"
        );
        assert!(!std::fs::read_to_string(&ovf).unwrap().contains("vmw:"));
        let info = run(
            "qemu-img",
            &[
                "info",
                "--output=json",
                b.x.join("disk.vmdk").to_str().unwrap(),
            ],
        );
        let info: serde_json::Value = serde_json::from_str(&info).unwrap();
        assert_eq!(
            info["format-specific"]["data"]["create-type"],
            "streamOptimized"
        );
        let desc =
            String::from_utf8_lossy(&std::fs::read(b.x.join("disk.vmdk")).unwrap()[512..2048])
                .to_string();
        assert!(desc.contains("ddb.adapterType = \"ide\""), "{desc}");
    }

    #[test]
    fn descriptor_states_every_field() {
        let p = params();
        let b = build(&p);
        let ovf = b.x.join("coreos.ovf");
        run("xmllint", &["--noout", ovf.to_str().unwrap()]);
        let ns = xpath(&ovf, "namespace-uri(/*)");
        assert_eq!(ns, "http://schemas.dmtf.org/ovf/envelope/1");
        assert_eq!(xpath(&ovf, "local-name(/*)"), "Envelope");
        // References and disk.
        assert_eq!(attr(&ovf, "File", "href"), "disk.vmdk");
        assert_eq!(attr(&ovf, "File", "size"), b.stats.vmdk_size.to_string());
        assert_eq!(attr(&ovf, "Disk", "capacity"), b.len.to_string());
        assert_eq!(attr(&ovf, "Disk", "capacityAllocationUnits"), "byte");
        assert_eq!(
            attr(&ovf, "Disk", "populatedSize"),
            b.stats.vmdk_populated.to_string()
        );
        assert_eq!(attr(&ovf, "Disk", "fileRef"), attr(&ovf, "File", "id"));
        assert_eq!(
            attr(&ovf, "Disk", "format"),
            "http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized"
        );
        // Populated: 17 + 32 grains of 64 KiB, and the last grain's 3
        // sectors (the disk ends 3 sectors into it).
        assert_eq!(b.stats.vmdk_populated, 49 * 65536 + 3 * 512);
        // Network, OS, hardware family.
        assert_eq!(attr(&ovf, "Network", "name"), "VM Network");
        assert_eq!(attr(&ovf, "OperatingSystemSection", "id"), "100");
        assert_eq!(
            attr(&ovf, "OperatingSystemSection", "osType"),
            "rhel9_64Guest"
        );
        assert_eq!(
            xpath(&ovf, "string(//*[local-name()='VirtualSystemType'])"),
            "vmx-15"
        );
        assert_eq!(
            attr(&ovf, "VirtualHardwareSection", "transport"),
            "com.vmware.guestInfo"
        );
        assert_eq!(attr(&ovf, "VirtualSystem", "id"), p.vm_name);
        assert_eq!(
            xpath(
                &ovf,
                "string(//*[local-name()='VirtualSystem']/*[local-name()='Name'])"
            ),
            p.vm_name
        );
        // Items by resource type.
        let item = |rt: u32, field: &str| {
            xpath(
                &ovf,
                &format!(
                    "string(//*[local-name()='Item'][*[local-name()='ResourceType']='{rt}']/*[local-name()='{field}'])"
                ),
            )
        };
        assert_eq!(item(3, "VirtualQuantity"), "2");
        assert_eq!(item(4, "VirtualQuantity"), "4096");
        assert_eq!(item(4, "AllocationUnits"), "byte * 2^20");
        assert_eq!(item(6, "ResourceSubType"), "VirtualSCSI");
        assert_eq!(item(17, "Parent"), item(6, "InstanceID"));
        assert_eq!(
            item(17, "HostResource"),
            format!("ovf:/disk/{}", attr(&ovf, "Disk", "diskId"))
        );
        assert_eq!(item(10, "ResourceSubType"), "VmxNet3");
        assert_eq!(item(10, "Connection"), "VM Network");
        assert_eq!(xpath(&ovf, "count(//*[local-name()='Item'])"), "5");
        // Instance IDs are unique.
        let ids = xpath(&ovf, "count(//*[local-name()='Item']/*[local-name()='InstanceID'][. = preceding::*[local-name()='InstanceID']])");
        assert_eq!(ids, "0");
        // Firmware and secure boot.
        let config = |key: &str| {
            xpath(
                &ovf,
                &format!("string(//*[local-name()='Config'][@*[local-name()='key']='{key}']/@*[local-name()='value'])"),
            )
        };
        assert_eq!(config("firmware"), "efi");
        assert_eq!(config("bootOptions.efiSecureBootEnabled"), "true");
        assert_eq!(
            config("uefi.secureBoot.enabled"),
            "",
            "a VMX key is no ConfigSpec path"
        );
        // cosa's template: exactly these two directly in the section, in this order.
        let direct = "//*[local-name()='VirtualHardwareSection']/*[local-name()='Config']";
        assert_eq!(xpath(&ovf, &format!("count({direct})")), "2");
        assert_eq!(
            xpath(
                &ovf,
                &format!("string(({direct})[1]/@*[local-name()='key'])")
            ),
            "bootOptions.efiSecureBootEnabled"
        );
        assert_eq!(
            xpath(
                &ovf,
                &format!("string(({direct})[2]/@*[local-name()='key'])")
            ),
            "firmware"
        );
        // Product section and the Ignition properties.
        let product = |f: &str| {
            xpath(
                &ovf,
                &format!("string(//*[local-name()='ProductSection']/*[local-name()='{f}'])"),
            )
        };
        assert_eq!(product("Version"), "418.94.202410090804-0");
        assert_eq!(product("Product"), "Red Hat Enterprise Linux CoreOS");
        assert_eq!(product("Vendor"), "rhcos");
        for key in [PROP_IGNITION_DATA, PROP_IGNITION_ENCODING] {
            let prop = |a: &str| {
                xpath(
                    &ovf,
                    &format!("string(//*[local-name()='Property'][@*[local-name()='key']='{key}']/@*[local-name()='{a}'])"),
                )
            };
            assert_eq!(prop("userConfigurable"), "true", "{key}");
            assert_eq!(prop("type"), "string", "{key}");
            assert_eq!(prop("key"), key);
        }
        // An optional schema check when a DMTF DSP8023 schema is at hand.
        if let Some(xsd) = std::env::var_os("BOOTIMAGE_GEN_OVF_XSD") {
            let st = Command::new("xmllint")
                .args(["--noout", "--schema"])
                .arg(xsd)
                .arg(&ovf)
                .status()
                .unwrap();
            assert!(st.success(), "the OVF does not validate");
        }
    }

    #[test]
    fn values_are_escaped_and_options_honoured() {
        let mut p = params();
        p.vm_name = "a<b>&\"c\"'d".into();
        p.product_version = "1 & <2>".into();
        p.os_type = "other\"Guest".into();
        p.secure_boot = false;
        p.manifest = false;
        p.cpus = 4;
        p.memory_mib = 8192;
        p.product = None;
        p.vendor = None;
        let b = build(&p);
        let names = run("tar", &["-tf", b.ova.to_str().unwrap()]);
        assert_eq!(
            names.lines().collect::<Vec<_>>(),
            ["coreos.ovf", "disk.vmdk"]
        );
        let ovf = b.x.join("coreos.ovf");
        run("xmllint", &["--noout", ovf.to_str().unwrap()]);
        assert_eq!(attr(&ovf, "VirtualSystem", "id"), p.vm_name);
        assert_eq!(
            xpath(&ovf, "string(//*[local-name()='VirtualSystemIdentifier'])"),
            p.vm_name
        );
        assert_eq!(attr(&ovf, "OperatingSystemSection", "osType"), p.os_type);
        assert_eq!(
            xpath(
                &ovf,
                "string(//*[local-name()='ProductSection']/*[local-name()='Version'])"
            ),
            p.product_version
        );
        assert_eq!(xpath(&ovf, "count(//*[local-name()='Product'])"), "0");
        let sb = xpath(
            &ovf,
            "string(//*[local-name()='Config'][@*[local-name()='key']='bootOptions.efiSecureBootEnabled']/@*[local-name()='value'])",
        );
        assert_eq!(sb, "false");
        assert_eq!(
            xpath(&ovf, "string(//*[local-name()='Item'][*[local-name()='ResourceType']='3']/*[local-name()='VirtualQuantity'])"),
            "4"
        );
        assert_eq!(
            xpath(&ovf, "string(//*[local-name()='Item'][*[local-name()='ResourceType']='4']/*[local-name()='ElementName'])"),
            "8192 MB of memory"
        );
    }

    #[test]
    fn bad_params_are_refused_and_nothing_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("disk.raw");
        make_sparse(&raw, MIB, &[(0, 10, Fill::Text)], 1);
        let out = dir.path().join("x.ova");
        let mut p = params();
        p.os_type = " ".into();
        p.vmdk.threads = 1;
        let e = write_ova(&FileView::open(&raw).unwrap(), &out, &p, &|_| {}).unwrap_err();
        assert!(format!("{e:#}").contains("OS type"), "{e:#}");
        assert!(!out.exists());
        // An empty disk fails in the VMDK writer; its temporary file goes.
        let empty = dir.path().join("empty.raw");
        File::create(&empty).unwrap();
        let mut p = params();
        p.vmdk.threads = 1;
        let e = write_ova(&FileView::open(&empty).unwrap(), &out, &p, &|_| {}).unwrap_err();
        assert!(format!("{e:#}").contains("x.ova"), "{e:#}");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with(".ova-disk-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
