//! Tests of the OVA writer: archives built from sparse disks, extracted
//! with tar and read back with xmllint and qemu-img (member order and
//! padding, manifest digests, the disk, both descriptor templates, escaping
//! and refused parameters).
use super::descriptor::VBOX_DISK_UUID;
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
    let desc = String::from_utf8_lossy(&std::fs::read(b.x.join("disk.vmdk")).unwrap()[512..2048])
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
    assert_vmware_config(&ovf);
    assert_product_section(&ovf);
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

/// Firmware and secure boot, as `vmw:Config` keys of the hardware section.
fn assert_vmware_config(ovf: &Path) {
    let config = |key: &str| {
        xpath(
            ovf,
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
    assert_eq!(xpath(ovf, &format!("count({direct})")), "2");
    assert_eq!(
        xpath(
            ovf,
            &format!("string(({direct})[1]/@*[local-name()='key'])")
        ),
        "bootOptions.efiSecureBootEnabled"
    );
    assert_eq!(
        xpath(
            ovf,
            &format!("string(({direct})[2]/@*[local-name()='key'])")
        ),
        "firmware"
    );
}

/// The product section and the Ignition properties.
fn assert_product_section(ovf: &Path) {
    let product = |f: &str| {
        xpath(
            ovf,
            &format!("string(//*[local-name()='ProductSection']/*[local-name()='{f}'])"),
        )
    };
    assert_eq!(product("Version"), "418.94.202410090804-0");
    assert_eq!(product("Product"), "Red Hat Enterprise Linux CoreOS");
    assert_eq!(product("Vendor"), "rhcos");
    for key in [PROP_IGNITION_DATA, PROP_IGNITION_ENCODING] {
        let prop = |a: &str| {
            xpath(
                ovf,
                &format!("string(//*[local-name()='Property'][@*[local-name()='key']='{key}']/@*[local-name()='{a}'])"),
            )
        };
        assert_eq!(prop("userConfigurable"), "true", "{key}");
        assert_eq!(prop("type"), "string", "{key}");
        assert_eq!(prop("key"), key);
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
