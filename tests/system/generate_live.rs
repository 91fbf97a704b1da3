//! `generate ... live` (docs/contract.md §5): the live ISO and PXE files of the test OS,
//! checked with tools we did not write (isoinfo, xorriso, sgdisk, fdisk,
//! unsquashfs, cpio, gzip, the real coreos-installer) and booted under TCG:
//! the ISO as a CD-ROM and as a USB disk under SeaBIOS and OVMF, PXE by
//! `-kernel/-initrd` and by iPXE over qemu's TFTP, and customised by
//! coreos-installer (Ignition embedded, kargs added). Bad input: an OS
//! without live templates (built-in menus), one without what those need,
//! one whose initramfs is no cpio.
use crate::common::boot::{self, BootResult, Firmware, Media, Mode};
use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn generate_into(root: &Path, release: &str) -> (PathBuf, Value, String) {
    generate_logged(root, &[&oci(release), "live"])
}

/// One `generate <release> live` run shared by every test here.
fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    built_once(&B, "generate-live", &[&oci("release"), "live"], false)
}

fn artifact(key: &str) -> PathBuf {
    let b = built();
    image_file(&b.meta, &b.out, key)
}

/// A file of the fixture OS commit.
fn os_file(path: &str) -> Vec<u8> {
    fixture_os_file(fx()["rhel_coreos"]["commit"].as_str().unwrap(), path)
}

fn kdir() -> String {
    format!("/usr/lib/modules/{}", fx()["kernel"].as_str().unwrap())
}

fn osname() -> String {
    fx()["osname"].as_str().unwrap().to_string()
}

/// The OS's EFI vendor directory (RHCOS: `redhat`, not the osname).
fn vendor() -> String {
    fx()["efi_vendor"].as_str().unwrap().to_string()
}

fn version() -> String {
    fx()["rhel_coreos"]["version"].as_str().unwrap().to_string()
}

/// The volume id docs/contract.md §5 asks for, computed here from the fixture's facts.
fn want_volid() -> String {
    format!("{}-{}", osname(), version())
        .chars()
        .take(32)
        .collect()
}

/// The live kernel arguments docs/contract.md §5 asks for, from the OS's own image.json
/// and platforms.json (metal's kargs minus the disk-only ones, plus the
/// live ones).
fn want_kargs() -> String {
    let image: Value =
        serde_json::from_slice(&os_file("/usr/share/coreos-assembler/image.json")).unwrap();
    let platforms: Value =
        serde_json::from_slice(&os_file("/usr/share/coreos-assembler/platforms.json")).unwrap();
    let mut k = vec!["rw".to_string()];
    for a in image["extra-kargs"].as_array().into_iter().flatten() {
        k.push(a.as_str().unwrap().to_string());
    }
    // Keyed by platform (upstream's shape); metal is normally not listed.
    for a in platforms["metal"]["kernel_arguments"]
        .as_array()
        .into_iter()
        .flatten()
    {
        k.push(a.as_str().unwrap().to_string());
    }
    k.retain(|a| !a.starts_with("console=") && !a.starts_with("ignition.platform.id="));
    k.push(format!("coreos.liveiso={}", want_volid()));
    k.push("ignition.firstboot".into());
    k.push("ignition.platform.id=metal".into());
    k.join(" ")
}

/// Extract `path` (Rock Ridge name) from an ISO with xorriso.
fn iso_extract(iso: &Path, path: &str) -> Vec<u8> {
    let d = tempfile::tempdir().unwrap();
    let dst = d.path().join("f");
    must(
        Command::new("xorriso")
            .args(["-osirrox", "on", "-indev"])
            .arg(iso)
            .args(["-extract", path])
            .arg(&dst),
    );
    read(&dst)
}

/// A private copy of the ISO (for coreos-installer to modify).
fn iso_copy(name: &str) -> PathBuf {
    let dir = built().root.join("copies");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::copy(artifact("live-iso"), &p).unwrap();
    p
}

fn ci(args: &[&str], files: &[&Path]) -> String {
    let mut c = Command::new("coreos-installer");
    c.args(args);
    for f in files {
        c.arg(f);
    }
    must(&mut c)
}

/// `coreos-installer pxe customize --live-ignition ign -o out` of our
/// live initramfs.
fn pxe_customize(ign: &Path, out: &Path) {
    ci(
        &[
            "pxe",
            "customize",
            "--live-ignition",
            ign.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        &[&artifact("live-initramfs")],
    );
}

fn report(what: &str, r: &BootResult) {
    eprintln!(
        "boot time {what}: {:.1} s ({})",
        r.duration.as_secs_f64(),
        r.marker
    );
}

fn check_live_marker(r: &BootResult, mode: Mode) {
    assert_eq!(r.marker.mode, mode, "{}", r.marker);
    assert_eq!(r.marker.platform, "metal", "{}", r.marker);
    assert_eq!(r.marker.version, version(), "{}", r.marker);
    assert!(r.marker.firstboot, "{}", r.marker);
    assert_eq!(r.marker_count(), 1);
}

// ------------------------------------------------------------ outputs

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn meta_sums_and_stream() {
    let b = built();
    let name = format!("{}-{}", osname(), version());
    for (key, file) in [
        ("live-iso", format!("{name}-live-iso.x86_64.iso")),
        ("live-kernel", format!("{name}-live-kernel.x86_64")),
        (
            "live-initramfs",
            format!("{name}-live-initramfs.x86_64.img"),
        ),
        ("live-rootfs", format!("{name}-live-rootfs.x86_64.img")),
    ] {
        let e = &b.meta["images"][key];
        assert_eq!(e["path"], file.as_str(), "{key}");
        let p = b.out.join(&file);
        assert_eq!(e["size"], std::fs::metadata(&p).unwrap().len(), "{key}");
        assert_eq!(e["sha256"], sha256_file(&p).as_str(), "{key}");
        assert_eq!(e["skip-compression"], true, "{key}");
    }
    must(
        Command::new("sha256sum")
            .args(["-c", "--strict", "SHA256SUMS"])
            .current_dir(&b.out),
    );
    let sums = std::fs::read_to_string(b.out.join("SHA256SUMS")).unwrap();
    assert_eq!(sums.lines().filter(|l| l.contains("-live-")).count(), 4);
    let st: Value = serde_json::from_slice(&read(&b.out.join("stream.json"))).unwrap();
    let metal = &st["architectures"]["x86_64"]["artifacts"]["metal"];
    assert_eq!(metal["release"], version().as_str());
    let f = &metal["formats"];
    assert_eq!(
        f["iso"]["disk"]["sha256"],
        b.meta["images"]["live-iso"]["sha256"]
    );
    for (kind, key) in [
        ("kernel", "live-kernel"),
        ("initramfs", "live-initramfs"),
        ("rootfs", "live-rootfs"),
    ] {
        assert_eq!(f["pxe"][kind]["sha256"], b.meta["images"][key]["sha256"]);
        assert_eq!(
            f["pxe"][kind]["location"], b.meta["images"][key]["path"],
            "{kind}"
        );
    }
    // The same, read by the coreos-stream-metadata crate.
    let text = std::fs::read_to_string(b.out.join("stream.json")).unwrap();
    let parsed: coreos_stream_metadata::Stream = serde_json::from_str(&text).unwrap();
    let formats = &parsed.architectures["x86_64"].artifacts["metal"].formats;
    assert_eq!(
        formats["iso"]["disk"].location,
        b.meta["images"]["live-iso"]["path"].as_str().unwrap()
    );
    for kind in ["kernel", "initramfs", "rootfs"] {
        assert!(formats["pxe"].contains_key(kind), "pxe {kind}");
    }
    // Nothing but the artifacts, the three descriptions and the two files
    // of the run (the release's verification record, the provenance).
    let mut names: Vec<String> = std::fs::read_dir(&b.out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 10, "{names:?}");
    for f in ["release-verification.json", "provenance.intoto.json"] {
        assert!(names.iter().any(|n| n == f), "{f}: {names:?}");
    }
    assert!(names
        .iter()
        .any(|n| n.ends_with("-ostree.x86_64.ociarchive")));
    // meta.json against coreos-assembler's own schema.
    let schema: Value =
        serde_json::from_slice(&read(&top().join("tests/data/cosa-meta-v1.schema.json"))).unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    let errs: Vec<String> = v.iter_errors(&b.meta).map(|e| e.to_string()).collect();
    assert!(errs.is_empty(), "{errs:?}");
    assert!(b.log.contains("live-rootfs: squashfs"), "{}", b.log);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn pxe_kernel_and_initramfs_are_the_os_ones() {
    let kernel = read(&artifact("live-kernel"));
    assert_eq!(kernel, os_file(&format!("{}/vmlinuz", kdir())));
    let initrd = read(&artifact("live-initramfs"));
    let os = os_file(&format!("{}/initramfs.img", kdir()));
    assert_eq!(&initrd[..os.len()], &os[..], "starts with the OS initramfs");
    // NUL padding to 4 bytes between and after the archives, so that an
    // uncompressed cpio appended by a loader (rootfs.img) is aligned.
    let at = os.len().next_multiple_of(4);
    assert!(initrd[os.len()..at].iter().all(|&b| b == 0));
    assert_eq!(
        initrd.len() % 4,
        0,
        "live initramfs ends on a 4-byte boundary"
    );
    assert_eq!(&initrd[at..at + 2], &[0x1f, 0x8b], "gzip addon at {at}");
    // The addon, read by gzip and GNU cpio.
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("addon.gz"), &initrd[at..]).unwrap();
    let list = must(
        Command::new("sh")
            .arg("-c")
            .arg("gzip -dc addon.gz | cpio -idv --quiet 2>&1")
            .current_dir(d.path()),
    );
    for n in [
        "etc/coreos-live-initramfs",
        "etc/coreos/features.json",
        "etc/coreos-live-want-rootfs",
    ] {
        assert!(list.lines().any(|l| l == n), "{n} not in {list}");
    }
    let features: Value =
        serde_json::from_slice(&read(&d.path().join("etc/coreos/features.json"))).unwrap();
    assert_eq!(features["installer-config"], true);
    assert_eq!(features["live-initrd-network"], true);
    let stamp = std::fs::read_to_string(d.path().join("etc/coreos-live-initramfs")).unwrap();
    assert_eq!(stamp.trim(), version());
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn rootfs_is_a_cpio_with_the_deployed_tree_in_a_zstd_squashfs() {
    let rootfs = artifact("live-rootfs");
    let data = read(&rootfs);
    assert_eq!(&data[..6], b"070701", "newc cpio");
    assert_eq!(&data[110..124], b"root.squashfs\0", "first entry");
    assert_eq!(&data[124..128], b"hsqs", "squashfs magic at byte 124");
    // GNU cpio lists root.squashfs, then the version stamp (docs/contract.md §5.1; this
    // run builds no metal image, so there is no osmet file: see
    // tests/system/live_offline.rs).
    let names = must(
        Command::new("sh")
            .arg("-c")
            .arg(format!("cpio -it --quiet < '{}'", rootfs.display())),
    );
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        ["root.squashfs", "etc", "etc/coreos-live-rootfs"]
    );
    let d = tempfile::tempdir().unwrap();
    let sq = d.path().join("root.squashfs");
    must(
        Command::new("sh")
            .arg("-c")
            .arg(format!("cpio -i --quiet < '{}'", rootfs.display()))
            .current_dir(d.path()),
    );
    let stat = must(Command::new("unsquashfs").arg("-s").arg(&sq));
    assert!(stat.contains("Compression zstd"), "{stat}");
    let ls = must(Command::new("unsquashfs").args(["-l", "-d", ""]).arg(&sq));
    // The deployed metal tree: a sysroot with the ostree deployment of the
    // OS commit, the aleph file and /boot's loader entries.
    let prefix = format!("/ostree/deploy/{}/deploy/", osname());
    let dep: Vec<&str> = ls
        .lines()
        .filter(|l| l.starts_with(&prefix) && l.ends_with("/usr/lib/os-release"))
        .collect();
    assert_eq!(dep.len(), 1, "one deployment:\n{dep:?}");
    assert!(ls.lines().any(|l| l == "/.coreos-aleph-version.json"));
    assert!(ls.lines().any(|l| l.starts_with("/boot/loader")
        && l.contains("/entries/ostree-")
        && l.ends_with(".conf")));
    // Same bytes as in the OS commit.
    must(
        Command::new("unsquashfs")
            .args(["-q", "-n", "-d"])
            .arg(d.path().join("x"))
            .arg(&sq)
            .arg(dep[0].trim_start_matches('/')),
    );
    assert_eq!(
        read(&d.path().join("x").join(dep[0].trim_start_matches('/'))),
        os_file("/usr/lib/os-release")
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn iso_layout_seen_by_isoinfo_xorriso_sgdisk_fdisk() {
    let iso = artifact("live-iso");
    let info = must(Command::new("isoinfo").arg("-d").arg("-i").arg(&iso));
    assert!(
        info.contains(&format!("Volume id: {}\n", want_volid())),
        "{info}"
    );
    let names = must(Command::new("isoinfo").arg("-f").arg("-i").arg(&iso));
    for n in [
        "/COREOS/IGNINFO.JSO;1",
        "/COREOS/KARGS.JSO;1",
        "/COREOS/FEATURES.JSO;1",
        "/IMAGES/IGNITION.IMG;1",
        "/IMAGES/EFIBOOT.IMG;1",
        "/IMAGES/PXEBOOT/ROOTFS.IMG;1",
        "/IMAGES/PXEBOOT/INITRD.IMG;1",
        "/IMAGES/PXEBOOT/VMLINUZ.;1",
        "/ISOLINUX/ISOLINUX.BIN;1",
        "/ISOLINUX/LDLINUX.C32;1",
        "/ISOLINUX/ISOLINUX.CFG;1",
        "/ISOLINUX/BOOT.CAT;1",
    ] {
        assert!(names.lines().any(|l| l == n), "{n} not in\n{names}");
    }
    let et = must(
        Command::new("xorriso")
            .arg("-indev")
            .arg(&iso)
            .args(["-report_el_torito", "plain"]),
    );
    assert!(
        et.contains("El Torito boot img :   1  BIOS  y   none"),
        "{et}"
    );
    assert!(
        et.contains("El Torito boot img :   2  UEFI  y   none"),
        "{et}"
    );
    assert!(
        et.contains("El Torito img path :   1  /isolinux/isolinux.bin"),
        "{et}"
    );
    assert!(
        et.contains("El Torito img path :   2  /images/efiboot.img"),
        "{et}"
    );
    let gpt = must(Command::new("sgdisk").arg("-p").arg(&iso));
    assert!(gpt.contains(" EF00 "), "{gpt}");
    assert!(gpt.contains(" 0700 "), "{gpt}");
    let mbr = must(Command::new("fdisk").arg("-l").arg(&iso));
    assert!(mbr.contains("Disklabel type: dos"), "{mbr}");
    assert!(mbr.contains("EFI (FAT-12/16/32)"), "{mbr}");
    // The files docs/contract.md §5 describes.
    assert_eq!(iso_extract(&iso, "/images/ignition.img"), vec![0u8; 262144]);
    let ign: Value = serde_json::from_slice(&iso_extract(&iso, "/coreos/igninfo.json")).unwrap();
    assert_eq!(ign, serde_json::json!({"file": "images/ignition.img"}));
    let feat: Value = serde_json::from_slice(&iso_extract(&iso, "/coreos/features.json")).unwrap();
    assert_eq!(feat["installer-config"], true);
    assert_eq!(feat["live-initrd-network"], true);
    // docs/contract.md §5.1: a directive per key of the OS's example config (checked
    // key by key in tests/system/live_offline.rs).
    assert!(
        feat["installer-config-directives"]["dest-device"] == true,
        "{feat}"
    );
    for (inner, key) in [
        ("/images/pxeboot/vmlinuz", "live-kernel"),
        ("/images/pxeboot/initrd.img", "live-initramfs"),
        ("/images/pxeboot/rootfs.img", "live-rootfs"),
    ] {
        assert!(iso_extract(&iso, inner) == read(&artifact(key)), "{inner}");
    }
    // kargs.json: the default kargs, and at each file's offset the kargs,
    // a newline and the '#' pad; a line of 1024 '#' + marker follows.
    let k: Value = serde_json::from_slice(&iso_extract(&iso, "/coreos/kargs.json")).unwrap();
    let want = want_kargs();
    assert_eq!(k["default"], want.as_str());
    assert_eq!(k["size"], want.len() + 1 + 1023);
    let files = k["files"].as_array().unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        [
            format!("EFI/{}/grub.cfg", vendor()).as_str(),
            "isolinux/isolinux.cfg"
        ]
    );
    for f in files {
        assert_eq!(f["pad"], "#");
        assert_eq!(f["end"], "\n");
        let body = iso_extract(&iso, &format!("/{}", f["path"].as_str().unwrap()));
        let at = f["offset"].as_u64().unwrap() as usize;
        let region = format!("{want}\n{}# COREOS_KARG_EMBED_AREA", "#".repeat(1023));
        assert_eq!(
            &body[at..at + region.len()],
            region.as_bytes(),
            "{}",
            f["path"]
        );
    }
    // The menus came from the OS's templates (their own text is kept).
    let grub = iso_extract(&iso, &format!("/EFI/{}/grub.cfg", vendor()));
    let grub = String::from_utf8(grub).unwrap();
    assert!(grub.contains("menuentry 'Test OS CoreOS (Live)'"), "{grub}");
    // Upstream's menu has no volume label of its own (the efiboot.img stub
    // finds the medium by label); every placeholder is filled in.
    assert!(!grub.contains("@@"), "{grub}");
    assert!(
        grub.contains(&format!("coreos.liveiso={}", want_volid())),
        "{grub}"
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn coreos_installer_extracts_and_customises() {
    let b = built();
    // iso extract pxe: byte-identical to our PXE files.
    let iso = artifact("live-iso");
    let d = b.root.join("extract");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    must(
        Command::new("coreos-installer")
            .args(["iso", "extract", "pxe", "-o"])
            .arg(&d)
            .arg(&iso),
    );
    let stem = iso.file_stem().unwrap().to_string_lossy().into_owned();
    for (suffix, key) in [
        ("vmlinuz", "live-kernel"),
        ("initrd.img", "live-initramfs"),
        ("rootfs.img", "live-rootfs"),
    ] {
        let p = d.join(format!("{stem}-{suffix}"));
        assert!(read(&p) == read(&artifact(key)), "{}", p.display());
    }
    // Ignition embed / show.
    let copy = iso_copy("ign.iso");
    let ign = b.root.join("embed.ign");
    std::fs::write(&ign, br#"{"ignition":{"version":"3.4.0"},"passwd":{}}"#).unwrap();
    ci(
        &["iso", "ignition", "embed", "-i", ign.to_str().unwrap()],
        &[&copy],
    );
    assert_eq!(
        ci(&["iso", "ignition", "show"], &[&copy]).as_bytes(),
        read(&ign).as_slice()
    );
    // kargs modify / show / reset.
    let want = want_kargs();
    assert_eq!(ci(&["iso", "kargs", "show"], &[&copy]), want);
    ci(&["iso", "kargs", "modify", "-a", "foo=bar"], &[&copy]);
    assert_eq!(
        ci(&["iso", "kargs", "show"], &[&copy]),
        format!("{want} foo=bar")
    );
    assert_eq!(ci(&["iso", "kargs", "show", "--default"], &[&copy]), want);
    ci(&["iso", "kargs", "reset"], &[&copy]);
    assert_eq!(ci(&["iso", "kargs", "show"], &[&copy]), want);
    // pxe customize accepts our initramfs.
    let out = b.root.join("customized-initramfs.img");
    let _ = std::fs::remove_file(&out);
    pxe_customize(&ign, &out);
    let c = read(&out);
    let orig = read(&artifact("live-initramfs"));
    assert!(c.len() > orig.len());
    assert!(c[..orig.len()] == orig[..], "customised = ours + appended");
}

// -------------------------------------------------------------- boots

fn boot_iso(media: Media, fw: Firmware, what: &str) -> BootResult {
    let r = boot::assert_boots(&[media], fw, boot::default_timeout());
    report(what, &r);
    check_live_marker(&r, Mode::LiveIso);
    assert!(r.marker.ignition.is_none(), "{}", r.marker);
    assert!(
        r.has_karg(&format!("coreos.liveiso={}", want_volid())),
        "{:?}",
        r.cmdline
    );
    r
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boots_as_cdrom_bios() {
    boot_iso(
        Media::Cdrom(artifact("live-iso")),
        Firmware::Bios,
        "cdrom bios",
    );
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boots_as_cdrom_uefi() {
    boot_iso(
        Media::Cdrom(artifact("live-iso")),
        Firmware::Uefi,
        "cdrom uefi",
    );
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boots_as_usb_disk_bios() {
    boot_iso(
        Media::UsbDisk(artifact("live-iso")),
        Firmware::Bios,
        "usb bios",
    );
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boots_as_usb_disk_uefi() {
    boot_iso(
        Media::UsbDisk(artifact("live-iso")),
        Firmware::Uefi,
        "usb uefi",
    );
}

/// The PXE kernel arguments: the ISO's minus `coreos.liveiso=`.
fn pxe_kargs() -> String {
    want_kargs()
        .split_whitespace()
        .filter(|k| !k.starts_with("coreos.liveiso="))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boots_pxe_by_kernel_and_initrds() {
    let r = boot::assert_boots(
        &[Media::kernel(
            artifact("live-kernel"),
            &[&artifact("live-initramfs"), &artifact("live-rootfs")],
            &format!("{} console=ttyS0", pxe_kargs()),
        )],
        Firmware::Bios,
        boot::default_timeout(),
    );
    report("pxe -kernel/-initrd", &r);
    check_live_marker(&r, Mode::LivePxe);
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boots_pxe_over_tftp_with_ipxe() {
    let tftp = built().root.join("tftp");
    let _ = std::fs::remove_dir_all(&tftp);
    std::fs::create_dir_all(&tftp).unwrap();
    for (n, key) in [
        ("kernel", "live-kernel"),
        ("initramfs.img", "live-initramfs"),
        ("rootfs.img", "live-rootfs"),
    ] {
        std::fs::copy(artifact(key), tftp.join(n)).unwrap();
    }
    // The script is the test's (a user writes their own): it adds
    // no_timer_check, so the x86 timer check a loaded host fails under
    // emulation (a fault of the emulator, seen in a suite run) does not
    // cost a boot whose TFTP transfer alone takes minutes then.
    let script = format!(
        "#!ipxe\nkernel kernel initrd=initramfs.img initrd=rootfs.img {} no_timer_check\ninitrd initramfs.img\ninitrd rootfs.img\nboot\n",
        pxe_kargs()
    );
    std::fs::write(tftp.join("boot.ipxe"), script).unwrap();
    for fw in [Firmware::Bios, Firmware::Uefi] {
        let r = boot::assert_boots(
            &[Media::Pxe {
                tftp_dir: tftp.clone(),
                boot_file: "boot.ipxe".into(),
            }],
            fw,
            // The kernel, initramfs and rootfs come over slirp's TFTP,
            // whose speed is the loaded host's: twice a disk boot's time.
            boot::default_timeout() * 2,
        );
        report(&format!("ipxe tftp {fw}"), &r);
        check_live_marker(&r, Mode::LivePxe);
        // The kernel got the script's command line (iPXE under SeaBIOS
        // prints on the screen, not on the serial console).
        assert!(r.has_karg("initrd=rootfs.img"), "{:?}", r.cmdline);
        assert!(!r.has_karg("coreos.liveiso"), "{:?}", r.cmdline);
        if fw == Firmware::Uefi {
            // OVMF's console is the serial port, so iPXE shows up in the
            // log, and iPXE under UEFI puts the image name first. (The
            // harness's own iPXE test was this boot twice: issue 27.)
            assert!(r.log.contains("iPXE"), "{}", r.log);
            assert_eq!(r.kargs().first(), Some(&"kernel"), "{:?}", r.cmdline);
        }
    }
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn customised_iso_boots_with_its_ignition_and_kargs() {
    let copy = iso_copy("custom.iso");
    let ign = built().root.join("custom.ign");
    std::fs::write(&ign, br#"{"ignition":{"version":"3.4.0"},"storage":{}}"#).unwrap();
    ci(
        &["iso", "ignition", "embed", "-i", ign.to_str().unwrap()],
        &[&copy],
    );
    ci(&["iso", "kargs", "modify", "-a", "foo=bar"], &[&copy]);
    let want_ign = sha256_file(&ign);
    for fw in [Firmware::Bios, Firmware::Uefi] {
        let r = boot::assert_boots(&[Media::Cdrom(copy.clone())], fw, boot::default_timeout());
        report(&format!("customised iso {fw}"), &r);
        check_live_marker(&r, Mode::LiveIso);
        assert_eq!(r.marker.ignition.as_deref(), Some(want_ign.as_str()));
        assert!(r.has_karg("foo=bar"), "{:?}", r.cmdline);
    }
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn pxe_customized_initramfs_boots_with_its_ignition() {
    let b = built();
    let ign = b.root.join("pxe.ign");
    std::fs::write(&ign, br#"{"ignition":{"version":"3.4.0"},"systemd":{}}"#).unwrap();
    let out = b.root.join("pxe-custom-initramfs.img");
    let _ = std::fs::remove_file(&out);
    pxe_customize(&ign, &out);
    let r = boot::assert_boots(
        &[Media::kernel(
            artifact("live-kernel"),
            &[&out, &artifact("live-rootfs")],
            &format!("{} console=ttyS0", pxe_kargs()),
        )],
        Firmware::Bios,
        boot::default_timeout(),
    );
    report("pxe customized", &r);
    check_live_marker(&r, Mode::LivePxe);
    // `--live-ignition` wraps the config into one that merges it: the
    // booted config is the one coreos-installer reads back from the image.
    let o = Command::new("coreos-installer")
        .args(["pxe", "ignition", "unwrap"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success());
    let embedded: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        embedded["ignition"]["config"]["merge"].is_array(),
        "{embedded}"
    );
    let want = bootimage_gen::util::sha256_hex(&o.stdout);
    assert_eq!(r.marker.ignition.as_deref(), Some(want.as_str()));
}

// ---------------------------------------------------------- bad input

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn os_without_templates_gets_builtin_menus_that_boot() {
    let root = scratch("generate-live-nolive");
    let _ = std::fs::remove_dir_all(&root);
    let (out, meta, log) = generate_into(&root, "release-nolive");
    assert!(log.contains("using the built-in menus"), "{log}");
    let iso = out.join(meta["images"]["live-iso"]["path"].as_str().unwrap());
    let k: Value = serde_json::from_slice(&iso_extract(&iso, "/coreos/kargs.json")).unwrap();
    assert_eq!(k["default"], want_kargs().as_str());
    assert_eq!(k["files"].as_array().unwrap().len(), 2);
    let grub =
        String::from_utf8(iso_extract(&iso, &format!("/EFI/{}/grub.cfg", vendor()))).unwrap();
    assert!(grub.contains("built in to bootimage-gen"), "{grub}");
    assert_eq!(ci(&["iso", "kargs", "show"], &[&iso]), want_kargs());
    let r = boot::assert_boots(
        &[Media::Cdrom(iso)],
        Firmware::Uefi,
        boot::default_timeout(),
    );
    report("builtin menus cdrom uefi", &r);
    check_live_marker(&r, Mode::LiveIso);
}

fn refused(release: &str, words: &[&str]) {
    let root = scratch(&format!("generate-live-{release}"));
    let _ = std::fs::remove_dir_all(&root);
    let out = root.join("out");
    let line = expect_error(
        &root.join("cache"),
        &[
            "generate",
            &oci(release),
            "live",
            "-o",
            out.to_str().unwrap(),
        ],
        words[0],
    );
    for w in words {
        assert!(line.contains(w), "'{w}' not in: {line}");
    }
    // Refused before anything was written.
    assert!(!out.exists(), "output directory created");
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn os_without_templates_nor_efi_vendor_dir_is_refused() {
    refused(
        "release-noliveefi",
        &[
            "no live ISO menu templates",
            "/usr/share/coreos-assembler/live",
            "built-in menus",
            "/usr/lib/bootupd/updates/EFI/<vendor>/grub*.efi",
            "no vendor directory",
        ],
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn os_initramfs_not_a_cpio_is_refused() {
    refused(
        "release-badinitrd",
        &[
            "initramfs",
            "not a cpio archive",
            "gzip-, xz- or zstd-compressed",
            "initramfs.img",
        ],
    );
}

fn dry_run_all(release: &str) -> (Vec<String>, String) {
    let root = scratch(&format!("generate-live-all-{release}"));
    let _ = std::fs::remove_dir_all(&root);
    let cache = root.join("cache");
    ok_json(&cache, &["inspect", &oci(release), "--import"]);
    let o = run(
        &cache,
        &[
            "generate",
            &oci(release),
            "all",
            "--dry-run",
            "-o",
            root.join("out").to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let plan: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let names = plan["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["platform"].as_str().unwrap().to_string())
        .collect();
    (names, stderr(&o))
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn all_includes_live_when_the_os_has_what_it_needs() {
    let (names, _) = dry_run_all("release");
    assert!(names.iter().any(|n| n == "live"), "{names:?}");
    let (names, err) = dry_run_all("release-noliveefi");
    assert!(!names.iter().any(|n| n == "live"), "{names:?}");
    assert!(names.iter().any(|n| n == "metal"), "{names:?}");
    assert!(
        err.contains("all: leaving the live ISO and PXE files out"),
        "{err}"
    );
    assert!(err.contains("no vendor directory"), "{err}");
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn dry_run_shows_the_live_plan() {
    let root = scratch("generate-live-dry");
    let _ = std::fs::remove_dir_all(&root);
    let cache = root.join("cache");
    ok_json(&cache, &["inspect", &oci("release"), "--import"]);
    let o = run(
        &cache,
        &[
            "generate",
            &oci("release"),
            "live",
            "--dry-run",
            "-o",
            root.join("out").to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let plan: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let l = &plan["artifacts"][0]["live"];
    assert_eq!(l["volume_id"], want_volid().as_str());
    assert_eq!(
        l["kargs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect::<Vec<_>>()
            .join(" "),
        want_kargs()
    );
    assert_eq!(plan["artifacts"][0]["meta_key"], "live-iso");
    assert!(!root.join("out").exists());
}

// ------------------------------------------------------------ interrupts

/// `generate live` paused at `point` (`BOOTIMAGE_GEN_PAUSE_AT`), checked
/// with `during`, then sent `signal`: nothing may be left behind (loop
/// devices, mounts, work files, partial outputs).
fn interrupt_live_at(point: &str, signal: i32, code: i32, during: impl Fn(&Path, &Path)) {
    use std::io::{BufRead, BufReader};
    let root = scratch("generate-live-interrupt").join(point);
    let _ = std::fs::remove_dir_all(&root);
    let (out, cache) = (root.join("out"), root.join("cache"));
    std::fs::create_dir_all(&root).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bootimage-gen"))
        .args([
            "generate",
            &oci("release"),
            "live",
            "--no-ostree-archive",
            "--progress",
            "plain",
            "-o",
        ])
        .arg(&out)
        .arg("--cache-dir")
        .arg(&cache)
        .env("BOOTIMAGE_GEN_PAUSE_AT", point)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut log = String::new();
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            panic!("generate ended before pausing at {point}:\n{log}");
        }
        log.push_str(&line);
        if line.contains(&format!("paused at {point}")) {
            break;
        }
    }
    // A failed check still interrupts the paused run (and reads its
    // stderr), so that it cleans up instead of waiting for ever.
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| during(&out, &cache)));
    send_signal(&child, signal);
    std::io::Read::read_to_string(&mut err, &mut log).unwrap();
    if let Err(p) = checked {
        let _ = child.wait();
        std::panic::resume_unwind(p);
    }
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(code), "{log}");
    assert!(log.contains("interrupted"), "{log}");
    let r = root.to_string_lossy().to_string();
    let loops = must(Command::new("losetup").args(["-l", "-n", "-O", "NAME,BACK-FILE"]));
    assert!(!loops.contains(&r), "loop devices left: {loops}");
    let mounts = must(Command::new("findmnt").args(["-rn", "-o", "TARGET"]));
    assert!(
        !mounts.lines().any(|l| l.starts_with(&r)),
        "mounts left: {mounts}"
    );
    let names = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d)
            .map(|rd| {
                rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(names(&out).is_empty(), "output dir holds {:?}", names(&out));
    assert!(
        names(&cache.join("tmp")).is_empty(),
        "cache tmp holds {:?}",
        names(&cache.join("tmp"))
    );
    std::fs::remove_dir_all(&root).ok();
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn sigint_while_squashing_leaves_nothing() {
    interrupt_live_at("squashfs", libc::SIGINT, 130, |_, cache| {
        let mounts = must(Command::new("findmnt").args(["-rn", "-o", "TARGET"]));
        let c = cache.to_string_lossy().to_string();
        // The live root tree (docs/contract.md §5.1): the base root, its bind mount,
        // the repo config without readonly=true over it, and a copy of the
        // boot filesystem on its /boot (the base's boot is unmounted); and
        // the stage's tmpfs (`--stage-in` auto: memory here), which holds
        // the staged boot filesystem every platform's starts from.
        let under: Vec<&str> = mounts.lines().filter(|l| l.starts_with(&c)).collect();
        assert_eq!(
            under.iter().filter(|l| l.ends_with("/stage")).count(),
            1,
            "the stage's tmpfs is mounted:\n{mounts}"
        );
        assert_eq!(
            under.len(),
            5,
            "root, the live tree, its repo config, its /boot and the stage are mounted while the squashfs is made:\n{mounts}"
        );
    });
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn sigterm_while_writing_the_iso_leaves_nothing() {
    interrupt_live_at("iso", libc::SIGTERM, 143, |out, _| {
        let n: Vec<String> = std::fs::read_dir(out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(n.iter().any(|x| x.ends_with(".partial")), "{n:?}");
    });
}
