//! The OVF 1.x descriptor (`coreos.ovf`): cosa's `vmware-template.xml`
//! or `virtualbox-template.xml` filled in from [`OvaParams`] and the
//! written disk's [`OvfDisk`] facts. Strings in, one XML document out; the
//! namespaces, CIM resource types and item ids the templates use are here.
use super::params::{OvaParams, OvfDisk, VMDK_NAME};
use crate::formats::OvfTemplate;
use crate::util::xml::esc;

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
/// OperatingSystemSection `ovf:id` (a CIM OSType code), per docs/contract.md §4; VMware
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

/// The OVF 1.x descriptor for `p` and a disk described by `disk`.
pub fn render_ovf(p: &OvaParams, disk: &OvfDisk) -> String {
    match p.template {
        OvfTemplate::Vmware => render_vmware(p, disk),
        OvfTemplate::Virtualbox => render_virtualbox(p, disk),
    }
}

/// VirtualBox's OVF extension namespace (cosa `virtualbox-template.xml`).
const NS_VBOX: &str = "http://www.virtualbox.org/ovf/machine";
/// The template's VirtualSystemType and fixed disk and machine UUIDs
/// (cosa `src/virtualbox-template.xml`; its guest OS type is
/// [`VBOX_OS_TYPE`](super::params::VBOX_OS_TYPE)).
pub const VBOX_SYSTEM_TYPE: &str = "virtualbox-2.2";
pub(super) const VBOX_DISK_UUID: &str = "c7b8d618-f480-433e-b0c4-07b0d69d4918";
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
    let os_type = esc(&p.os_type);
    [
        vbox_envelope_head(disk),
        vbox_system_head(&name, &os_type),
        vbox_hardware(p, &name),
        vbox_machine(p, &name, &os_type),
        vbox_product(&product, &vendor, &esc(&p.product_version)),
    ]
    .concat()
}

/// The envelope's start: the namespaces, the disk file, the DiskSection
/// (with the disk's VirtualBox UUID) and the NetworkSection.
fn vbox_envelope_head(disk: &OvfDisk) -> String {
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
"#,
        file_size = disk.file_size,
        capacity = disk.capacity,
        populated = disk.populated,
        network = esc(NETWORK),
    )
}

/// The VirtualSystem's start: its id and name, the guest OS type.
fn vbox_system_head(name: &str, os_type: &str) -> String {
    format!(
        r#"  <VirtualSystem ovf:id="{name}">
    <Info>A virtual machine</Info>
    <Name>{name}</Name>
    <OperatingSystemSection ovf:id="{OS_SECTION_ID}">
      <Info>Guest operating system</Info>
      <vbox:OSType ovf:required="false">{os_type}</vbox:OSType>
    </OperatingSystemSection>
"#,
    )
}

/// The VirtualHardwareSection: CPUs, memory, the SATA (AHCI) and USB
/// controllers, the disk on the SATA controller, the E1000 NIC on NAT.
fn vbox_hardware(p: &OvaParams, name: &str) -> String {
    format!(
        r#"    <VirtualHardwareSection>
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
"#,
        cpus = p.cpus,
        memory = p.memory_mib,
    )
}

/// The `vbox:Machine` section VirtualBox imports as is: EFI firmware, a
/// virtio NIC on NAT, the disk attached to the AHCI controller by its UUID.
fn vbox_machine(p: &OvaParams, name: &str, os_type: &str) -> String {
    format!(
        r#"    <vbox:Machine ovf:required="false" version="1.16-linux" uuid="{VBOX_MACHINE_UUID}" name="{name}" OSType="{os_type}">
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
"#,
        cpus = p.cpus,
        memory = p.memory_mib,
    )
}

/// The ProductSection (`product`, `vendor`: the optional lines from
/// [`names`]), then the VirtualSystem and the envelope closed.
fn vbox_product(product: &str, vendor: &str, version: &str) -> String {
    format!(
        r#"    <ProductSection>
      <Info>Installed software</Info>{product}{vendor}
      <Version>{version}</Version>
    </ProductSection>
  </VirtualSystem>
</Envelope>
"#,
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
