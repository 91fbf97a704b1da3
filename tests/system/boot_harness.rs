//! The boot harness (tests/system/common/boot.rs) against the test OS of the
//! fixture release, before bootimage-gen writes any bootable artifact:
//!
//! * direct kernel boots (`Media::Kernel`) in live-PXE mode under SeaBIOS and
//!   OVMF, with several initrds concatenated and an Ignition config;
//! * a root filesystem disk (the tree deployed with `ostree admin deploy`,
//!   like fixtures/os/test-disk-boot.sh, kept as an ext4 image) in every
//!   format, on every bus, with 512- and 4096-byte sectors, never modified;
//! * a GPT disk with GRUB for BIOS and UEFI (built here from the tree's own
//!   GRUB) booted by the firmware alone;
//! * a live ISO on a CD-ROM and as a USB stick (iPXE over TFTP is
//!   generate_live's, with the tool's own PXE files);
//! * failures: a FAIL line, a timeout (no qemu left behind), qemu itself
//!   failing, bad media.
//!
//! Needs root (ostree deploy), qemu-system-x86_64, OVMF, ostree, mksquashfs,
//! xorriso, mtools, sgdisk, grub-mkimage. Built assets are cached in
//! boot-harness/<key>/ under the suite's cache root ([`cache_root`]).
use crate::common::boot::*;
use crate::common::*;
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const ISO_LABEL: &str = "TESTOS_LIVE";

/// Everything the tests boot, built once per fixture commit.
struct Assets {
    version: String,
    /// The tree's kernel and initramfs.
    kernel: PathBuf,
    initramfs: PathBuf,
    /// The live rootfs: newc cpio with root.squashfs at byte 124.
    rootfs: PathBuf,
    /// ISO9660 labelled ISO_LABEL with images/pxeboot/rootfs.img.
    iso: PathBuf,
    /// ext4 labelled `root` holding the deployed sysroot, and its formats.
    root_raw: PathBuf,
    root_qcow2: PathBuf,
    root_vmdk: PathBuf,
    root_vhd: PathBuf,
    /// The deployment's kernel/initramfs and its `ostree=` karg.
    deploy_kernel: PathBuf,
    deploy_initramfs: PathBuf,
    ostree_karg: String,
    /// GPT: BIOS boot (GRUB core.img), ESP (GRUB EFI + grub.cfg), root.
    gpt: PathBuf,
}

/// Builds the assets in $OUT (see Assets); $TREE is an ostree checkout of
/// $COMMIT from $REPO. The deployment goes to a plain directory that
/// `mkfs.ext4 -d` turns into the image: no loop device, no mount.
const BUILD_SH: &str = r#"
set -euo pipefail
cd "$OUT"
# ostree marks the deployment immutable: let a failed build be removed.
trap 'chattr -R -i "$OUT/sysroot" 2>/dev/null || true' EXIT
k=$(ls "$TREE"/usr/lib/modules/*/vmlinuz)
cp "$k" vmlinuz
cp "$(dirname "$k")/initramfs.img" initramfs.img

# live rootfs (as smoke-boot.sh builds it)
mkdir sq
mksquashfs "$TREE" sq/root.squashfs -comp zstd -noappend -all-root -quiet -no-progress >/dev/null
(cd sq && echo root.squashfs | cpio -o -H newc -R 0:0 --quiet) > rootfs.img
rm -rf sq
[ "$(dd if=rootfs.img bs=1 skip=124 count=4 2>/dev/null)" = hsqs ]

# live ISO
mkdir -p isoroot/images/pxeboot
cp rootfs.img isoroot/images/pxeboot/rootfs.img
xorriso -as mkisofs -quiet -V "$ISO_LABEL" -r -J -o live.iso isoroot
rm -rf isoroot

# deployed sysroot -> ext4 labelled root (4 KiB blocks: mounts on 4Kn disks too)
sr=$OUT/sysroot
mkdir "$sr"
ostree admin init-fs "$sr" >/dev/null
ostree admin os-init --sysroot="$sr" "$OSNAME" >/dev/null
ostree config --repo="$sr/ostree/repo" set sysroot.bootloader none
ostree --repo="$sr/ostree/repo" pull-local "$REPO" "$COMMIT" >/dev/null
ostree admin deploy --sysroot="$sr" --os="$OSNAME" --karg=rw "$COMMIT" >/dev/null
entry=$(ls "$sr"/boot/loader/entries/*.conf)
sed -n 's/^options .*\(ostree=[^ ]*\).*/\1/p' "$entry" > ostree-karg
linux=$(sed -n 's/^linux //p' "$entry")
initrd=$(sed -n 's/^initrd //p' "$entry")
cp "$sr/boot$linux" deploy-vmlinuz
cp "$sr/boot$initrd" deploy-initramfs.img
truncate -s 256M root.raw
mkfs.ext4 -q -b 4096 -L root -d "$sr" root.raw
chattr -R -i "$sr" 2>/dev/null || true
rm -rf "$sr"
qemu-img convert -f raw -O qcow2 root.raw root.qcow2
qemu-img convert -f raw -O vmdk -o subformat=streamOptimized root.raw root.vmdk
qemu-img convert -f raw -O vpc -o subformat=fixed,force_size=on root.raw root.vhd

# GRUB config for the GPT disk (the same file for BIOS and UEFI GRUB)
cat > grub.cfg <<EOF
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
set timeout=0
search --no-floppy --label root --set root
linux /boot$linux $(cat ostree-karg) rw console=ttyS0 ignition.platform.id=qemu ignition.firstboot
initrd /boot$initrd
boot
EOF
# ESP
efi=$TREE/usr/lib/bootupd/updates/EFI
mkfs.vfat -n EFI-SYSTEM -C esp.img 65536 >/dev/null
# The OS's whole EFI tree (RHCOS layout: shim in BOOT/, vendor dir $VENDOR)
mcopy -s -i esp.img "$efi" ::/EFI
mcopy -o -i esp.img grub.cfg "::/EFI/$VENDOR/"
# BIOS GRUB core image, reading grub.cfg from the ESP
grub-mkimage -O i386-pc -d "$TREE/usr/lib/grub/i386-pc" -p "(hd0,gpt2)/EFI/$VENDOR" -o core.img \
    biosdisk part_gpt fat ext2 normal linux search search_label configfile echo test serial terminal gzio boot
cp "$TREE/usr/lib/grub/i386-pc/boot.img" boot.img
# GPT: 1 BIOS boot 2048-4095, 2 ESP 64 MiB, 3 root 256 MiB
truncate -s $(( (135168 + 524288 + 2048) * 512 )) gpt.raw
sgdisk -n 1:2048:4095 -t 1:ef02 -n 2:4096:135167 -t 2:ef00 -n 3:135168:659455 -t 3:8300 gpt.raw >/dev/null
dd if=esp.img of=gpt.raw bs=512 seek=4096 conv=notrunc,sparse status=none
dd if=root.raw of=gpt.raw bs=512 seek=135168 conv=notrunc,sparse status=none
rm -f esp.img
"#;

fn assets() -> &'static Assets {
    static A: OnceLock<Assets> = OnceLock::new();
    A.get_or_init(build_assets)
}

fn build_assets() -> Assets {
    let f = fx();
    let commit = f["rhel_coreos"]["commit"].as_str().unwrap().to_string();
    let version = f["rhel_coreos"]["version"].as_str().unwrap().to_string();
    let osname = f["osname"].as_str().unwrap_or("testos").to_string();
    let key = hex::encode(&Sha256::digest(format!("{BUILD_SH}\n{commit}\n{osname}"))[..8]);
    let base = cache_root().join("boot-harness");
    let dir = base.join(&key);
    if !dir.join("done").exists() {
        fs::create_dir_all(&base).unwrap();
        let work = tempfile::Builder::new()
            .prefix(".build-")
            .tempdir_in(&base)
            .unwrap();
        let out = work.path().join("out");
        let tree = work.path().join("tree");
        fs::create_dir(&out).unwrap();
        let t = Instant::now();
        must(Command::new("ostree").args([
            "checkout",
            "--repo",
            fixture_dir().join("repo").to_str().unwrap(),
            &commit,
            tree.to_str().unwrap(),
        ]));
        must(
            Command::new("bash")
                .args(["-c", BUILD_SH])
                .env("OUT", &out)
                .env("TREE", &tree)
                .env("REPO", fixture_dir().join("repo"))
                .env("COMMIT", &commit)
                .env("OSNAME", &osname)
                .env("VENDOR", fx()["efi_vendor"].as_str().unwrap())
                .env("ISO_LABEL", ISO_LABEL),
        );
        install_bios_grub(
            &out.join("gpt.raw"),
            &out.join("boot.img"),
            &out.join("core.img"),
        );
        fs::write(out.join("done"), "").unwrap();
        eprintln!(
            "boot-harness assets built in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        // Another process may have won the race: then use its copy.
        if fs::rename(&out, &dir).is_err() {
            assert!(dir.join("done").exists(), "cannot move assets to {dir:?}");
        }
        // Assets of other fixture commits or older versions of this file.
        for e in fs::read_dir(&base).unwrap().flatten() {
            if e.file_name() != key.as_str() && e.path().join("done").exists() {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    let p = |n: &str| dir.join(n);
    Assets {
        version,
        kernel: p("vmlinuz"),
        initramfs: p("initramfs.img"),
        rootfs: p("rootfs.img"),
        iso: p("live.iso"),
        root_raw: p("root.raw"),
        root_qcow2: p("root.qcow2"),
        root_vmdk: p("root.vmdk"),
        root_vhd: p("root.vhd"),
        deploy_kernel: p("deploy-vmlinuz"),
        deploy_initramfs: p("deploy-initramfs.img"),
        ostree_karg: fs::read_to_string(p("ostree-karg"))
            .unwrap()
            .trim()
            .to_string(),
        gpt: p("gpt.raw"),
    }
}

/// What grub-bios-setup does for a GPT disk with a BIOS boot partition at
/// sector 2048: boot.img's code into the MBR (partition table kept) pointing
/// at core.img, core.img into the partition with its block list filled in.
fn install_bios_grub(disk: &Path, boot_img: &Path, core_img: &Path) {
    const CORE_LBA: u64 = 2048;
    let boot = fs::read(boot_img).unwrap();
    let mut core = fs::read(core_img).unwrap();
    core.resize(core.len().div_ceil(512) * 512, 0);
    let nsec = (core.len() / 512) as u16;
    assert!(
        nsec <= 2048,
        "core.img does not fit the BIOS boot partition"
    );
    // diskboot.img's block list (last 12 bytes of its sector): start, len, segment.
    core[500..508].copy_from_slice(&(CORE_LBA + 1).to_le_bytes());
    core[508..510].copy_from_slice(&(nsec - 1).to_le_bytes());
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(disk)
        .unwrap();
    let mut mbr = [0u8; 512];
    f.read_exact(&mut mbr).unwrap();
    mbr[..0x1b8].copy_from_slice(&boot[..0x1b8]);
    mbr[0x5c..0x64].copy_from_slice(&CORE_LBA.to_le_bytes()); // kernel sector
    mbr[0x66] = 0x90; // hard disk: no boot drive check
    mbr[0x67] = 0x90;
    f.seek(SeekFrom::Start(0)).unwrap();
    f.write_all(&mbr).unwrap();
    f.seek(SeekFrom::Start(CORE_LBA * 512)).unwrap();
    f.write_all(&core).unwrap();
}

fn t() -> Duration {
    default_timeout()
}

fn report(what: &str, r: &BootResult) {
    eprintln!(
        "boot time {what}: {:.1} s ({})",
        r.duration.as_secs_f64(),
        r.marker
    );
}

/// Live-PXE kernel boot of the tree's kernel with the rootfs appended.
fn pxe_kernel(append: &str, extra_initrds: &[&Path]) -> Media {
    let a = assets();
    let mut initrds = vec![a.initramfs.as_path(), a.rootfs.as_path()];
    initrds.extend_from_slice(extra_initrds);
    Media::kernel(&a.kernel, &initrds, append)
}

/// Kernel boot of the deployment on the root disk.
fn disk_kernel(extra: &str) -> Media {
    let a = assets();
    Media::kernel(
        &a.deploy_kernel,
        &[&a.deploy_initramfs],
        &format!(
            "{} rw console=ttyS0 ignition.platform.id=qemu{extra}",
            a.ostree_karg
        ),
    )
}

fn no_qemu_named(name: &str) -> bool {
    !Command::new("pgrep")
        .args(["-f", name])
        .status()
        .unwrap()
        .success()
}

// ---------------------------------------------------------------- parsing

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn marker_lines_parse_strictly() {
    let m = Marker::parse(
        "BOOTIMAGE-TEST-OS ok version=418.94.1-0 platform=qemu firstboot=1 mode=live-iso ignition=none",
    )
    .unwrap();
    assert_eq!(m.version, "418.94.1-0");
    assert_eq!(m.platform, "qemu");
    assert!(m.firstboot);
    assert_eq!(m.mode, Mode::LiveIso);
    assert_eq!(m.ignition, None);
    let h = "ab".repeat(32);
    let m = Marker::parse(&format!(
        "BOOTIMAGE-TEST-OS ok version=1 platform=metal firstboot=0 mode=disk ignition={h}"
    ))
    .unwrap();
    assert_eq!(m.ignition.as_deref(), Some(h.as_str()));
    assert!(!m.firstboot);
    assert_eq!(m.composefs, None);
    let m = Marker::parse(
        "BOOTIMAGE-TEST-OS ok version=1 platform=metal firstboot=0 mode=disk ignition=none arch=x86_64 composefs=1",
    )
    .unwrap();
    assert_eq!(m.composefs, Some(true));
    for bad in [
        "BOOTIMAGE-TEST-OS ok version=1 platform=metal firstboot=2 mode=disk ignition=none",
        "BOOTIMAGE-TEST-OS ok version=1 platform=metal firstboot=0 mode=floppy ignition=none",
        "BOOTIMAGE-TEST-OS ok version=1 platform=metal firstboot=0 mode=disk ignition=abc",
        "BOOTIMAGE-TEST-OS ok version=1 platform=metal firstboot=0 mode=disk",
        "BOOTIMAGE-TEST-OS ok version=1 version=2 platform=metal firstboot=0 mode=disk ignition=none",
        "BOOTIMAGE-TEST-OS ok version=1 platform=metal firstboot=0 mode=disk ignition=none composefs=yes",
        "BOOTIMAGE-TEST-OS FAIL no root",
    ] {
        assert!(Marker::parse(bad).is_err(), "accepted: {bad}");
    }
    assert_eq!(
        clean(b"\x1b[2J\x1b[01;01H\x1b[=3hBdsDxe: loading\r\nok\x1b(B\r\n"),
        "BdsDxe: loading\nok\n"
    );
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn bad_media_are_refused_without_starting_qemu() {
    let a = assets();
    let t0 = Instant::now();
    let e = boot(&[Media::disk("/nonexistent/disk.raw")], Firmware::Bios, t()).unwrap_err();
    assert!(e.contains("/nonexistent/disk.raw"), "{e}");
    let e = boot(
        &[
            pxe_kernel("console=ttyS0", &[]),
            pxe_kernel("console=ttyS0", &[]),
        ],
        Firmware::Bios,
        t(),
    )
    .unwrap_err();
    assert!(e.contains("more than one Media::Kernel"), "{e}");
    let e = boot(
        &[Media::Disk {
            path: a.root_raw.clone(),
            format: DiskFormat::Raw,
            logical_block_size: 4096,
            bus: Bus::Ide,
        }],
        Firmware::Bios,
        t(),
    )
    .unwrap_err();
    assert!(e.contains("512-byte sectors only"), "{e}");
    assert!(boot(&[], Firmware::Uefi, t()).is_err());
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(
        DiskFormat::detect(&a.root_qcow2).unwrap(),
        DiskFormat::Qcow2
    );
    assert_eq!(DiskFormat::detect(&a.root_vmdk).unwrap(), DiskFormat::Vmdk);
    assert_eq!(DiskFormat::detect(&a.root_vhd).unwrap(), DiskFormat::Vpc);
}

// ---------------------------------------------------------- kernel boots

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn kernel_boot_live_pxe_bios_with_ignition() {
    let d = tempfile::tempdir().unwrap();
    // A third initrd: a gzip cpio holding config.ign (like `pxe customize`).
    let ign = br#"{"ignition":{"version":"3.4.0"}}"#;
    fs::create_dir(d.path().join("ign")).unwrap();
    fs::write(d.path().join("ign/config.ign"), ign).unwrap();
    let cpio = d.path().join("ign.img");
    must(Command::new("sh").arg("-c").arg(format!(
        "cd {}/ign && echo config.ign | cpio -o -H newc -R 0:0 --quiet | gzip -n > {}",
        d.path().display(),
        cpio.display()
    )));
    let append = "console=ttyS0 ignition.platform.id=metal ignition.firstboot";
    let r = assert_boots(&[pxe_kernel(append, &[&cpio])], Firmware::Bios, t());
    report("kernel live-pxe bios", &r);
    let a = assets();
    assert_eq!(r.marker.version, a.version);
    assert_eq!(r.marker.platform, "metal");
    assert_eq!(r.marker.mode, Mode::LivePxe);
    assert!(r.marker.firstboot);
    assert_eq!(
        r.marker.ignition.as_deref(),
        Some(hex::encode(Sha256::digest(ign)).as_str())
    );
    assert_eq!(r.cmdline.as_deref(), Some(append));
    assert!(r.has_karg("ignition.firstboot"));
    assert!(r.has_karg("ignition.platform.id"));
    assert!(r.has_karg("ignition.platform.id=metal"));
    assert!(!r.has_karg("ignition.platform.id=qemu"));
    assert_eq!(r.marker_count(), 1, "{}", r.log);
    assert!(r.command.contains("-accel") && r.command.contains("-no-reboot"));
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn kernel_boot_live_pxe_uefi() {
    let r = assert_boots(
        &[pxe_kernel("console=ttyS0 ignition.platform.id=qemu", &[])],
        Firmware::Uefi,
        t(),
    );
    report("kernel live-pxe uefi", &r);
    assert_eq!(r.marker.mode, Mode::LivePxe);
    assert_eq!(r.marker.platform, "qemu");
    assert!(!r.marker.firstboot);
    assert_eq!(r.marker.ignition, None);
    assert!(r.command.contains("OVMF"), "{}", r.command);
    // OVMF's own messages went through the escape-sequence filter.
    assert!(!r.log.contains('\x1b'));
}

// ----------------------------------------------------------------- failures

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn fail_line_is_an_error_with_the_log_at_once() {
    // Disk mode (ostree= karg) with no disk, waiting 1 s for it.
    // no_timer_check: the guest is the vehicle of the FAIL line; the x86
    // timer check a loaded host fails is an emulator fault of its own.
    let r = boot(
        &[pxe_kernel_without_rootfs(
            "console=ttyS0 ostree=/ostree/boot.1/x/y/0 bootimage.wait=1 no_timer_check",
        )],
        Firmware::Bios,
        t(),
    );
    let e = r.unwrap_err();
    assert!(
        e.contains("the test OS failed: no filesystem labelled root"),
        "{e}"
    );
    assert!(e.contains("qemu: qemu-system-x86_64 "), "{e}");
    assert!(e.contains("-no-reboot"), "{e}");
    assert!(e.contains("--- console log (last 60 lines) ---"), "{e}");
    assert!(
        e.contains("initramfs: disk: waiting for the filesystem labelled 'root'"),
        "{e}"
    );
    // "At once": the FAIL line stopped the boot, not the timeout (which
    // check stopped it, not how long it took: a loaded host stretches
    // every boot; the guide keeps speed in `make bench`).
    assert!(
        e.contains("the test OS failed") && !e.contains("timed out after"),
        "{e}"
    );
    let console = e.split("--- console log").nth(1).unwrap();
    assert!(console.lines().count() <= 63, "{console}");
}

fn pxe_kernel_without_rootfs(append: &str) -> Media {
    let a = assets();
    Media::kernel(&a.kernel, &[&a.initramfs], append)
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn timeout_is_an_error_and_leaves_no_qemu() {
    let name = format!("bootimage-harness-timeout-{}", std::process::id());
    let t0 = Instant::now();
    let e = Vm::new(Firmware::Bios)
        .medium(pxe_kernel("console=ttyS0", &[]))
        .timeout(Duration::from_secs(2))
        .name(&name)
        .boot()
        .unwrap_err();
    let took = t0.elapsed();
    assert!(e.contains("timed out after 2 s"), "{e}");
    assert!(e.contains(&format!("-name {name}")), "{e}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(no_qemu_named(&name), "qemu {name} still running");
}

/// A guest that goes silent mid-boot (here a shell waiting on the
/// console: rdinit=/bin/sh) is stalled: booted once more (an emulator
/// fault would pass then), and when the second is silent too, an error
/// saying both, long before the timeout; no qemu left.
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn a_silent_guest_is_booted_once_more_then_an_error() {
    let name = format!("bootimage-harness-stall-{}", std::process::id());
    let e = Vm::new(Firmware::Bios)
        // no_timer_check: the guest is the vehicle of the stall check, so
        // the x86 timer check a loaded host fails (its own emulator fault,
        // retried as well) must not stand in for the silence (seen in a
        // suite run: first boot "IO-APIC + timer doesn't work", second
        // silent).
        .medium(pxe_kernel_without_rootfs(
            "console=ttyS0 rdinit=/bin/sh no_timer_check",
        ))
        .timeout(Duration::from_secs(120))
        .stall(Duration::from_secs(4))
        .name(&name)
        .boot()
        .unwrap_err();
    assert!(e.contains("the console went silent at"), "{e}");
    // Both boots stopped by the stall check, neither by the timeout
    // (what the clock says depends on the machine's load).
    let (second, first) = e
        .split_once("the first boot failed too")
        .unwrap_or((&e, ""));
    assert!(first.contains("the console went silent at"), "{e}");
    assert!(second.contains("the console went silent at"), "{e}");
    assert!(!e.contains("timed out after"), "{e}");
    assert!(no_qemu_named(&name), "qemu {name} still running");
}

/// A boot loader that says nothing after the firmware hands over (here a
/// boot sector that loops for ever: SeaBIOS jumps to it, then silence) is
/// stalled `stall` after the hand-over, not left to the timeout: booted
/// once more (an emulator fault would pass then), and when the second is
/// silent too, an error saying both; no qemu left. Seen in a suite run:
/// a metal disk under SeaBIOS, "Booting from 0000:7c00", then an empty
/// console for 300 s; the same disk booted in 25 s the next time.
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn a_boot_loader_silent_after_the_hand_over_is_booted_once_more_then_an_error() {
    let name = format!("bootimage-harness-silent-loader-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let disk = boot_sector_disk(&dir.path().join("loop.raw"), &[0xEB, 0xFE]); // jmp $
    let e = Vm::new(Firmware::Bios)
        .medium(Media::disk(&disk))
        .timeout(Duration::from_secs(240))
        .stall(Duration::from_secs(4))
        .name(&name)
        .boot()
        .unwrap_err();
    let said = "the console stayed empty after the firmware handed over to the boot sector at";
    assert!(e.contains("and the guest used no disk for 4 s"), "{e}");
    let (second, first) = e
        .split_once("the first boot failed too")
        .unwrap_or((&e, ""));
    assert!(first.contains(said), "{e}");
    assert!(second.contains(said), "{e}");
    assert!(!e.contains("timed out after"), "{e}");
    assert!(no_qemu_named(&name), "qemu {name} still running");
}

/// A 1 MiB disk at `path` whose MBR boot code is `code` (signed 55 AA).
fn boot_sector_disk(path: &Path, code: &[u8]) -> PathBuf {
    let mut mbr = vec![0u8; 1 << 20];
    mbr[..code.len()].copy_from_slice(code);
    mbr[510] = 0x55;
    mbr[511] = 0xAA;
    std::fs::write(path, &mbr).unwrap();
    path.to_path_buf()
}

/// The other side of the rule above: a boot loader that prints nothing
/// but keeps reading its disk (here a boot sector reading sector 2 with
/// INT 13h in a loop) is slow, not stalled: the stall check (4 s) must
/// not stop it, only the timeout. Seen on CI: a metal disk under SeaBIOS
/// on a loaded host, silent for 150 s while GRUB read its kernel and
/// initramfs, called stalled twice and failed.
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn a_silent_boot_loader_that_reads_its_disk_is_not_stalled() {
    let name = format!("bootimage-harness-reading-loader-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    #[rustfmt::skip]
    let code = [
        0x31, 0xC0,       // xor ax, ax
        0x8E, 0xC0,       // mov es, ax
        0xB8, 0x01, 0x02, // again: mov ax, 0x0201 (read 1 sector)
        0xB9, 0x02, 0x00, // mov cx, 2 (cylinder 0, sector 2)
        0xB6, 0x00,       // mov dh, 0 (dl: the boot drive, from SeaBIOS)
        0xBB, 0x00, 0x80, // mov bx, 0x8000
        0xCD, 0x13,       // int 0x13
        0xEB, 0xF1,       // jmp again
    ];
    let disk = boot_sector_disk(&dir.path().join("reads.raw"), &code);
    let e = Vm::new(Firmware::Bios)
        .medium(Media::disk(&disk))
        .timeout(Duration::from_secs(30))
        .stall(Duration::from_secs(4))
        .name(&name)
        .boot()
        .unwrap_err();
    assert!(
        e.contains("timed out after 30 s") && e.contains("the console stayed empty"),
        "{e}"
    );
    assert!(!e.contains("used no disk"), "{e}");
    // A timeout is the image's verdict: not booted once more.
    assert!(!e.contains("the first boot failed too"), "{e}");
    assert!(no_qemu_named(&name), "qemu {name} still running");
}

/// A guest that powered off in order with not one line of its programs on
/// the console lost them in the emulated UART (seen on CI): recognised as
/// such, and only then; a log with any program line, or no orderly power
/// off, or no init, is not.
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn a_console_with_only_kernel_lines_up_to_power_down_is_lost_output() {
    let kernel = "[    2.3] Run /init as init process\n[    2.4] SCSI subsystem initialized\n";
    let lost = format!("[    0.0] Linux version 6.1\n{kernel}[   24.2] reboot: Power down\n");
    assert!(boot::lost_program_output(&lost));
    let printed = format!(
        "{kernel}initramfs: starting\nBOOTIMAGE-TEST-OS ok version=1\n[   24.2] reboot: Power down\n"
    );
    assert!(!boot::lost_program_output(&printed));
    let failed = format!("{kernel}BOOTIMAGE-TEST-OS FAIL no root\n[    5.0] reboot: Power down\n");
    assert!(!boot::lost_program_output(&failed));
    assert!(!boot::lost_program_output(kernel), "no power off");
    assert!(
        !boot::lost_program_output("[    1.0] reboot: Power down\n"),
        "no init"
    );
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn kernel_panic_is_an_error_without_waiting_for_the_timeout() {
    // No initramfs: the kernel cannot mount a root and panics (and, with
    // panic=0, would hang forever).
    let a = assets();
    let e = boot(
        &[Media::kernel(&a.kernel, &[], "console=ttyS0")],
        Firmware::Bios,
        t(),
    )
    .unwrap_err();
    assert!(e.contains("kernel panic"), "{e}");
    assert!(e.contains("VFS: Unable to mount root fs"), "{e}");
    // The image's fault: not booted once more (unlike a timer check that
    // an overloaded emulator fails).
    assert!(!e.contains("the first boot failed too"), "{e}");
    assert!(!e.contains("timed out after"), "{e}");
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn only_emulation_panics_are_booted_once_more() {
    assert!(emulation_panic(
        "[    0.040000] Kernel panic - not syncing: IO-APIC + timer doesn't work!  Boot with apic=debug and send a report.  Then try booting with the 'noapic' option."
    ));
    for image_fault in [
        "Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)",
        "Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100",
        "Kernel panic - not syncing: No working init found.",
    ] {
        assert!(!emulation_panic(image_fault), "{image_fault}");
    }
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn nothing_bootable_is_an_error_under_both_firmwares() {
    // The root filesystem image has no boot loader.
    let a = assets();
    for fw in [Firmware::Bios, Firmware::Uefi] {
        let t0 = Instant::now();
        let e = boot(&[Media::disk(&a.root_raw)], fw, t()).unwrap_err();
        eprintln!(
            "no bootable device noticed under {fw} in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        assert!(e.contains("nothing booted"), "{e}");
        match fw {
            Firmware::Bios => {
                assert!(e.contains("SeaBIOS: No bootable device"), "{e}");
                assert!(e.contains("--- firmware debug log"), "{e}");
            }
            Firmware::Uefi | Firmware::Aavmf => assert!(e.contains("UEFI shell"), "{e}"),
            Firmware::Slof | Firmware::S390Ccw => unreachable!("not in this loop"),
        }
        assert!(!e.contains("timed out after"), "{e}");
    }
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn qemu_failing_to_start_is_an_error_with_its_output() {
    let e = Vm::new(Firmware::Bios)
        .medium(pxe_kernel("console=ttyS0", &[]))
        .arg("-no-such-option")
        .boot()
        .unwrap_err();
    assert!(e.contains("qemu exited"), "{e}");
    assert!(e.contains("--- qemu output ---"), "{e}");
    assert!(e.contains("no-such-option"), "{e}");
}

// ------------------------------------------------------------------ disks

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn root_disk_in_every_format_is_never_modified() {
    let a = assets();
    let before = sha256_file(&a.root_raw);
    for (path, format) in [
        (&a.root_raw, DiskFormat::Raw),
        (&a.root_qcow2, DiskFormat::Qcow2),
        (&a.root_vmdk, DiskFormat::Vmdk),
        (&a.root_vhd, DiskFormat::Vpc),
    ] {
        let r = assert_boots(
            &[
                disk_kernel(" ignition.firstboot"),
                Media::disk_as(path, format),
            ],
            Firmware::Bios,
            t(),
        );
        report(&format!("kernel + {format} disk bios"), &r);
        assert_eq!(r.marker.mode, Mode::Disk);
        assert!(r.marker.firstboot);
        assert_eq!(r.marker.platform, "qemu");
        assert_eq!(r.marker.version, a.version);
        assert!(r.has_karg(&a.ostree_karg));
    }
    // Booted twice (raw, and raw under every other format's snapshot):
    // the initramfs mounted it read-write, yet it is unchanged.
    let r = assert_boots(
        &[disk_kernel(""), Media::disk(&a.root_raw)],
        Firmware::Uefi,
        t(),
    );
    report("kernel + raw disk uefi", &r);
    assert!(!r.marker.firstboot);
    assert_eq!(sha256_file(&a.root_raw), before, "root.raw was modified");
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn root_disk_on_every_bus_and_4k() {
    let a = assets();
    for (bus, lbs) in [
        (Bus::Ide, 512),
        (Bus::Scsi, 512),
        (Bus::Nvme, 512),
        (Bus::Virtio, 4096),
        (Bus::Scsi, 4096),
        (Bus::Nvme, 4096),
    ] {
        let r = assert_boots(
            &[
                disk_kernel(""),
                Media::Disk {
                    path: a.root_qcow2.clone(),
                    format: DiskFormat::Qcow2,
                    logical_block_size: lbs,
                    bus,
                },
            ],
            Firmware::Bios,
            t(),
        );
        report(&format!("kernel + qcow2 {bus:?} {lbs} bios"), &r);
        assert_eq!(r.marker.mode, Mode::Disk);
        if lbs == 4096 {
            assert!(
                r.command
                    .contains("logical_block_size=4096,physical_block_size=4096"),
                "{}",
                r.command
            );
        }
    }
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn gpt_disk_boots_from_firmware_bios() {
    let a = assets();
    let r = assert_boots(&[Media::disk(&a.gpt)], Firmware::Bios, t());
    report("gpt disk (grub) bios q35", &r);
    assert_eq!(r.marker.mode, Mode::Disk);
    assert!(r.marker.firstboot);
    assert!(r.has_karg("BOOT_IMAGE"), "{:?}", r.cmdline);
    let r = Vm::new(Firmware::Bios)
        .machine("pc")
        .medium(Media::disk(&a.gpt))
        .assert_boots();
    report("gpt disk (grub) bios pc", &r);
    assert_eq!(r.marker.mode, Mode::Disk);
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn gpt_disk_boots_from_firmware_uefi() {
    let a = assets();
    let r = assert_boots(&[Media::disk(&a.gpt)], Firmware::Uefi, t());
    report("gpt disk (grub) uefi q35", &r);
    assert_eq!(r.marker.mode, Mode::Disk);
    assert!(r.has_karg("BOOT_IMAGE"), "{:?}", r.cmdline);
}

// ------------------------------------------------------------- live media

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn live_iso_on_cdrom_and_usb() {
    let a = assets();
    let append = format!("console=ttyS0 coreos.liveiso={ISO_LABEL} ignition.platform.id=metal");
    for (what, medium) in [
        ("cdrom", Media::Cdrom(a.iso.clone())),
        ("usb", Media::UsbDisk(a.iso.clone())),
    ] {
        let r = assert_boots(
            &[pxe_kernel_without_rootfs(&append), medium],
            Firmware::Bios,
            t(),
        );
        report(&format!("kernel + iso on {what} bios"), &r);
        assert_eq!(r.marker.mode, Mode::LiveIso);
        assert_eq!(r.marker.platform, "metal");
        assert_eq!(r.marker.version, a.version);
    }
}
