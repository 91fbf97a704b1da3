//! The BIOS installer's tests, and the boot check the EFI tests share:
//! a GPT test disk ([`gpt_disk`]), its boot filesystem written through a
//! loop device ([`write_boot_fs`]), and qemu booting it until the test
//! kernel's command line shows ([`boot_and_check`]).
use super::*;
use crate::disk::gpt;
use crate::disk::layout::DISK_GUID;
use crate::sys::loopback::{self, LoopDevice};
use crate::util::arch::Arch;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const HOST_GRUB: &str = "/usr/lib/grub/i386-pc";

/// The host's BIOS GRUB modules and grub-mkimage, which these tests
/// need (grub-pc-bin and grub-common, as in the test container): a
/// precondition, so a host without them fails the test instead of
/// passing it without asserting anything.
pub(crate) fn host_grub() -> PathBuf {
    let p = PathBuf::from(HOST_GRUB);
    assert!(
        p.join("boot.img").is_file(),
        "{HOST_GRUB}/boot.img missing: install grub-pc-bin to run this test"
    );
    if let Err(e) = mkimage_program() {
        panic!("grub-mkimage missing ({e:#}): install grub-common to run this test");
    }
    p
}

pub(crate) fn gpt_disk(size: u64, ss: u64) -> (tempfile::NamedTempFile, Layout) {
    let f = tempfile::NamedTempFile::new().unwrap();
    f.as_file().set_len(size).unwrap();
    let l = Layout::new(Arch::X86_64, size, ss).unwrap();
    gpt::write(&mut f.as_file(), &l, DISK_GUID).unwrap();
    (f, l)
}

#[test]
fn refuses_4k_disks_and_os_without_grub() {
    let work = tempfile::tempdir().unwrap();
    let (f, l) = gpt_disk(3 << 30, 4096);
    let e = install_bios(f.as_file(), &l, Path::new(HOST_GRUB), work.path()).unwrap_err();
    assert!(format!("{e:#}").contains("512-byte sectors"), "{e:#}");

    let (f, l) = gpt_disk(3 << 30, 512);
    let empty = tempfile::tempdir().unwrap();
    std::fs::write(empty.path().join("boot.img"), [0u8; 512]).unwrap();
    let e = format!(
        "{:#}",
        install_bios(f.as_file(), &l, empty.path(), work.path()).unwrap_err()
    );
    assert!(e.contains("has no diskboot.img"), "{e}");
    assert!(e.contains("i386-pc"), "{e}");
    let e = format!(
        "{:#}",
        install_bios(f.as_file(), &l, &empty.path().join("nope"), work.path()).unwrap_err()
    );
    assert!(e.contains("BIOS boot needs the OS's GRUB"), "{e}");
    // A directory with the images but without a needed module.
    let g = host_grub();
    let partial = tempfile::tempdir().unwrap();
    for f in I386_PC.images.iter().chain(&["moddep.lst", "biosdisk.mod"]) {
        std::fs::copy(g.join(f), partial.path().join(f)).unwrap();
    }
    let e = format!("{:#}", core_modules(partial.path(), &I386_PC).unwrap_err());
    assert!(e.contains("has no part_gpt.mod"), "{e}");
}

#[test]
fn install_writes_core_and_pointers() {
    let grub = host_grub();
    let work = tempfile::tempdir().unwrap();
    let (f, l) = gpt_disk(3 << 30, 512);
    let disk = f.as_file();
    let mut before = vec![0u8; 512];
    disk.read_at(&mut before, 0).unwrap();
    let st = install_bios(disk, &l, &grub, work.path()).unwrap();
    assert_eq!(st.core_lba, 2048);
    assert_eq!(st.capacity_sectors, 2048);
    assert!(st.core_sectors > 1 && st.core_sectors < 2048, "{st:?}");
    assert_eq!(st.core_sectors, st.core_bytes.div_ceil(512));

    let mut mbr = vec![0u8; 512];
    disk.read_at(&mut mbr, 0).unwrap();
    // Disk signature, partition table and 0x55AA untouched.
    assert_eq!(mbr[MBR_CODE_END..], before[MBR_CODE_END..]);
    // boot.img code with the patched fields.
    let boot_img = std::fs::read(grub.join("boot.img")).unwrap();
    assert_eq!(mbr[0..BPB_START], boot_img[0..BPB_START]);
    assert_eq!(
        mbr[BOOT_DRIVE_OFF..DRIVE_CHECK_OFF],
        boot_img[BOOT_DRIVE_OFF..DRIVE_CHECK_OFF]
    );
    assert_eq!(mbr[BOOT_DRIVE_OFF], 0xff);
    assert_eq!(mbr[DRIVE_CHECK_OFF..DRIVE_CHECK_OFF + 2], [NOP, NOP]);
    assert_eq!(
        mbr[DRIVE_CHECK_OFF + 2..MBR_CODE_END],
        boot_img[DRIVE_CHECK_OFF + 2..MBR_CODE_END]
    );
    let kernel_sector = u64::from_le_bytes(mbr[0x5c..0x64].try_into().unwrap());
    assert_eq!(kernel_sector, 2048);

    // The core: diskboot sector with one block-list entry, then the rest.
    let mut core = vec![0u8; (st.core_sectors * 512) as usize];
    disk.read_at(&mut core, 2048 * 512).unwrap();
    let diskboot = std::fs::read(grub.join("diskboot.img")).unwrap();
    assert_eq!(core[..BLOCKLIST_OFF], diskboot[..BLOCKLIST_OFF]);
    let e = &core[0x1f4..0x200];
    assert_eq!(u64::from_le_bytes(e[0..8].try_into().unwrap()), 2049);
    assert_eq!(
        u16::from_le_bytes(e[8..10].try_into().unwrap()) as u64,
        st.core_sectors - 1
    );
    assert_eq!(u16::from_le_bytes(e[10..12].try_into().unwrap()), 0x820);
    assert!(core[0x1e8..0x1f4].iter().all(|b| *b == 0));
    let payload = std::fs::read(work.path().join("i386-pc-core.img")).unwrap();
    assert_eq!(core[512..payload.len()], payload[512..]);

    // Independent readers still see the GPT, and file(1) a GRUB MBR.
    let o = Command::new("sfdisk")
        .arg("-J")
        .arg(f.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["partitiontable"]["label"], "gpt");
    assert_eq!(
        j["partitiontable"]["partitions"].as_array().unwrap().len(),
        4
    );
    let o = Command::new("sgdisk")
        .arg("-v")
        .arg(f.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("No problems found"), "{out}");
    let o = Command::new("file")
        .arg("-s")
        .arg(f.path())
        .output()
        .unwrap();
    // file(1) 5.44 knows no GRUB 2 signature; it must still see an MBR
    // boot sector, and GRUB's message strings are in the boot code.
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("DOS/MBR boot sector"), "{out}");
    assert_eq!(&mbr[0x180..0x185], b"GRUB ");
}

#[test]
fn early_config_and_module_copy() {
    assert_eq!(
        early_config(),
        "search --no-floppy --label boot --set root\nset prefix=($root)/grub2\n"
    );
    let grub = host_grub();
    let d = tempfile::tempdir().unwrap();
    let dest = d.path().join("grub2/i386-pc");
    let n = copy_modules(&grub, &dest).unwrap();
    assert!(n > 100, "{n}");
    assert!(dest.join("normal.mod").is_file() && dest.join("command.lst").is_file());
    assert!(!dest.join("boot.img").exists());
}

#[test]
fn core_too_big_is_an_error() {
    let diskboot = std::fs::read(format!("{HOST_GRUB}/diskboot.img")).unwrap_or(vec![0; 512]);
    let core = make_core(&vec![1u8; 3 * 512 + 7], &diskboot, 2048).unwrap();
    assert_eq!(core.len(), 5 * 512); // diskboot prepended, padded
    assert!(make_core(&vec![1u8; 70_000 * 512], &diskboot, 2048).is_err());
}

// ---- boot check: SeaBIOS boots the disk and GRUB runs our configs -----

/// Loop device + mount guard for the boot filesystem: the crate's own
/// guards ([`loopback::Mounted`]), closed on drop as mount, then device.
pub(crate) struct Mounted {
    pub(crate) dir: tempfile::TempDir,
    mounted: Option<loopback::Mounted>,
}
impl Mounted {
    /// Loop device over `disk[off..off+size)`, ext4 labelled `boot`
    /// (with `mkfs_args`), mounted on a temporary directory.
    pub(crate) fn new(disk: &Path, off: u64, size: u64, mkfs_args: &[&str]) -> Self {
        let dev = LoopDevice::attach(disk, off, size, SECTOR)
            .unwrap_or_else(|e| panic!("losetup: {e:#}"));
        let dir = tempfile::tempdir().unwrap();
        let st = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-L", "boot"])
            .args(mkfs_args)
            .arg(dev.path())
            .status()
            .unwrap();
        assert!(st.success());
        let mounted = loopback::Mounted::new(dev, dir.path(), "ext4", "rw").unwrap();
        Mounted {
            dir,
            mounted: Some(mounted),
        }
    }
}
impl Drop for Mounted {
    fn drop(&mut self) {
        // A failure here is said: a mount left behind once (run A of
        // stop 40, beside a flaky GRUB boot) and nothing told why.
        if let Some(m) = self.mounted.take() {
            if let Err(e) = m.close() {
                eprintln!("test disk: {e:#}");
            }
        }
    }
}

/// Run qemu until `want` shows on the serial console (true) or timeout.
pub(crate) fn qemu_until(args: &[&str], want: &str, secs: u64) -> (bool, String) {
    use std::io::Read;
    let mut child = Command::new("qemu-system-x86_64")
        .args(["-nographic", "-accel", "tcg", "-m", "512", "-no-reboot"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("qemu-system-x86_64");
    let mut out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let mut log = Vec::new();
    let mut found = false;
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(b) => {
                log.extend(b);
                if String::from_utf8_lossy(&log).contains(want) {
                    found = true;
                    break;
                }
            }
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    record_boot(args, want, found);
    (found, String::from_utf8_lossy(&log).into_owned())
}

/// One line for the suite's boot table (scripts/suite.py, the format of
/// tests/common/boot.rs) when SUITE_BOOT_RECORD names the file.
fn record_boot(args: &[&str], want: &str, ok: bool) {
    use std::io::Write;
    let Some(file) = std::env::var_os("SUITE_BOOT_RECORD") else {
        return;
    };
    let firmware = match args.iter().position(|a| *a == "-bios") {
        Some(i) if args.get(i + 1).is_some_and(|b| b.contains("OVMF")) => "uefi",
        _ => "bios",
    };
    let media: Vec<serde_json::Value> = args
        .windows(2)
        .filter(|w| w[0] == "-drive")
        .map(|w| {
            let format = w[1]
                .split(',')
                .find_map(|kv| kv.strip_prefix("format="))
                .unwrap_or("raw");
            serde_json::json!({"medium": "disk", "format": format, "sector": 512, "bus": "ide"})
        })
        .collect();
    let line = serde_json::json!({
        "target": std::env::var("SUITE_TARGET").unwrap_or_else(|_| "lib".into()),
        "test": std::thread::current().name().unwrap_or(""),
        "firmware": firmware,
        "machine": "pc",
        "media": media,
        "ok": ok,
        "platform": "-",
        "mode": if ok { want } else { "" },
    });
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
    {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// The host's kernel, booted by the boot checks.
pub(crate) fn host_kernel() -> PathBuf {
    std::fs::read_dir("/boot")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("vmlinuz-")
        })
        .expect("a host kernel in /boot")
}

/// Make the boot filesystem of a test disk like the OS deployment
/// would: ext4 labelled `boot` with the `boot -> .` symlink, a kernel at
/// an ostree-like path, grub2/grub.cfg from `boot_grub_cfg` for one BLS
/// entry, grub2/console.cfg with serial settings and an `echo` of
/// `hello`, and the first-boot stamp with network kargs.
pub(crate) fn write_boot_fs(disk: &Path, l: &Layout, mkfs_args: &[&str], hello: &str) {
    use crate::disk::grubcfg::{boot_grub_cfg, console_cfg, BlsEntry};
    // One at a time: the SeaBIOS and OVMF tests write their boot
    // filesystems through loop devices at once, and one of those runs
    // once booted a disk whose boot filesystem GRUB found without our
    // files while an empty one stayed mounted (stop 40, not yet
    // explained); serialising rules the concurrency out.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let boot = l.part("boot");
    let m = Mounted::new(disk, boot.start, boot.size, mkfs_args);
    let root = m.dir.path();
    std::fs::create_dir_all(root.join("grub2")).unwrap();
    std::fs::create_dir_all(root.join("ostree/testos-0123")).unwrap();
    std::os::unix::fs::symlink(".", root.join("boot")).unwrap();
    std::fs::copy(host_kernel(), root.join("ostree/testos-0123/vmlinuz")).unwrap();
    let e = BlsEntry::parse(
        "title Test OS (ostree:0)\nversion 1\n\
         options rw $ignition_firstboot console=ttyS0,115200n8 panic=-1 bootimage.marker=1\n\
         linux /boot/ostree/testos-0123/vmlinuz\n",
    )
    .unwrap();
    std::fs::write(root.join("grub2/grub.cfg"), boot_grub_cfg(&[e])).unwrap();
    let console: Vec<String> = [
        "serial --speed=115200",
        "terminal_input serial console",
        "terminal_output serial console",
        &format!("echo {hello}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    std::fs::write(root.join("grub2/console.cfg"), console_cfg(&console)).unwrap();
    std::fs::write(
        root.join("ignition.firstboot"),
        "set ignition_network_kcmdline=\"rd.neednet=1 ip=dhcp\"\n",
    )
    .unwrap();
}

/// Boot with qemu until the test kernel's command line shows up, and
/// check GRUB ran console.cfg, reported no errors and expanded
/// `$ignition_firstboot` from the stamp file.
pub(crate) fn boot_and_check(qemu_args: &[&str], hello: &str) {
    let (ok, log) = qemu_until(qemu_args, "bootimage.marker=1", 180);
    if std::env::var_os("BOOTIMAGE_SHOW_LOG").is_some() {
        eprintln!("{log}");
    }
    assert!(ok, "no kernel command line on the console:\n{log}");
    assert!(log.contains(hello), "{log}");
    assert!(!log.contains("error:"), "GRUB reported errors:\n{log}");
    let line = log
        .lines()
        .find(|l| l.contains("Command line:"))
        .unwrap_or_default();
    assert!(
        line.contains("rw ignition.firstboot rd.neednet=1 ip=dhcp console=ttyS0"),
        "{line}"
    );
}

/// Boots a disk with SeaBIOS under TCG: our MBR + core image find the
/// `boot` filesystem, read grub.cfg from boot_grub_cfg (console.cfg for
/// serial, the first-boot stamp with network kargs, a menu entry), and
/// boot the host kernel whose command line shows the expanded
/// `$ignition_firstboot`. Needs root, qemu and a host kernel.
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "boots qemu as root (--features boot)")]
fn seabios_boots_grub_to_the_kernel() {
    let grub = host_grub();
    let work = tempfile::tempdir().unwrap();
    let (f, l) = gpt_disk(1 << 30, 512);
    install_bios(f.as_file(), &l, &grub, work.path()).unwrap();
    write_boot_fs(f.path(), &l, &[], "BIOS-GRUB-CONSOLE-OK");
    let drive = format!("file={},format=raw", f.path().display());
    boot_and_check(&["-drive", &drive], "BIOS-GRUB-CONSOLE-OK");
}
