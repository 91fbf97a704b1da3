//! Boot harness for the tier-3 tests: boot media under qemu-system-x86_64
//! (SeaBIOS or OVMF) and read the test OS marker from the serial console.
//!
//! The test OS (docs/test-os.md) prints on the serial console
//!
//! ```text
//! BOOTIMAGE-TEST-OS ok version=<v> platform=<p> firstboot=<0|1> mode=<disk|live-iso|live-pxe> ignition=<sha256|none>
//! BOOTIMAGE-TEST-OS cmdline=<the kernel command line>
//! ```
//!
//! or `BOOTIMAGE-TEST-OS FAIL <reason>`, and powers off. [`boot`] starts
//! qemu as a child, watches the serial log, and stops qemu as soon as the
//! marker (and the cmdline line) or a FAIL line shows up, a kernel panic has
//! printed its trace, the firmware gives up (SeaBIOS's "No bootable device"
//! on its debug port, OVMF starting its shell), qemu exits, or the timeout
//! passes. qemu is always killed and reaped, also when the calling test
//! panics (a guard with `Drop`, plus `PR_SET_PDEATHSIG`).
//!
//! * TCG by default (nested KVM can hang on the CI machines);
//!   `BOOTIMAGE_TEST_KVM=1` uses KVM.
//! * Disks and USB disks are attached with `snapshot=on` and CD-ROMs
//!   read-only: a boot never changes the artifact, which can be booted again
//!   (also by two tests at the same time).
//! * UEFI gets a fresh copy of the OVMF variable store for every boot.
//! * `BOOTIMAGE_TEST_BOOT_LOGS=DIR` keeps every serial log as `DIR/<name>.log`.
//! * `SUITE_BOOT_RECORD=FILE` (set by scripts/suite.py) appends one JSON
//!   line per boot: the test, firmware, media and what booted, so the
//!   suite can print which (arch, firmware, medium, format) each boot
//!   covered and which were booted more than once.
//! * `-machine q35` unless [`Vm::machine`] says otherwise; `-nodefaults`, so
//!   a VM has only the devices its media need (no NIC without `Media::Pxe`).
//! * Errors carry the reason, the qemu command line, qemu's own output, the
//!   SeaBIOS debug log and the last 60 lines of the console log.
//!
//! ```ignore
//! let r = assert_boots(
//!     &[Media::Disk { path, format: DiskFormat::Qcow2, logical_block_size: 4096, bus: Bus::Virtio }],
//!     Firmware::Uefi,
//!     default_timeout(),
//! );
//! assert_eq!(r.marker.mode, Mode::Disk);
//! ```
#![allow(dead_code)]

use super::guards::ChildGuard;
use super::qmp::Qmp;
use std::fmt;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Prefix of every line the test OS prints for the harness.
pub const MARKER_PREFIX: &str = "BOOTIMAGE-TEST-OS";

/// OVMF code/vars pairs, in order of preference. The 4 MiB pair is what
/// Debian 12's qemu 7.2 uses by default; the 2 MiB pair is the fallback.
/// Both work with `-machine q35` and `pc` without secure boot (the
/// `.secboot`/`.ms` variants need SMM and are not used here).
pub const OVMF_PAIRS: &[(&str, &str)] = &[
    (
        "/usr/share/OVMF/OVMF_CODE_4M.fd",
        "/usr/share/OVMF/OVMF_VARS_4M.fd",
    ),
    (
        "/usr/share/OVMF/OVMF_CODE.fd",
        "/usr/share/OVMF/OVMF_VARS.fd",
    ),
];

/// Lines of console log attached to an error.
const LOG_TAIL_LINES: usize = 60;
/// After the `ok` marker, how long to wait for the `cmdline=` line.
const CMDLINE_GRACE: Duration = Duration::from_secs(10);
/// After a kernel panic, how long to keep collecting the trace.
const PANIC_GRACE: Duration = Duration::from_secs(3);
/// After a kernel oops (the kernel may carry on), how long to wait for the
/// marker before calling the attempt failed.
const OOPS_GRACE: Duration = Duration::from_secs(30);
/// Console silence with no disk request that ends an attempt as stalled:
/// longer than any phase of a good boot here that neither prints nor
/// reads (GRUB reading a live initramfs from an emulated USB disk took
/// 40 s on CI's machine, reads included). Disk requests count as life:
/// SeaBIOS and GRUB on a metal disk print nothing at all before the
/// test OS's marker, and under a loaded CI host (several TCG guests on 2
/// cores) that took over 150 s, so the console alone called a slow boot
/// stalled (CI, stop 49: twice in a row).
const STALL: Duration = Duration::from_secs(150);
const POLL: Duration = Duration::from_millis(50);
/// How often the disks' request counts are read (QMP); also how long an
/// answer may take.
const DISK_POLL: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Firmware {
    /// SeaBIOS (qemu's default firmware).
    Bios,
    /// OVMF from /usr/share/OVMF, with a per-boot copy of the vars store.
    Uefi,
    /// An aarch64 machine (`qemu-system-aarch64 -M virt`, TCG, Cortex-A57)
    /// with AAVMF (Debian `qemu-efi-aarch64`), the arm64 build of EDK II,
    /// and a per-boot copy of its vars store.
    Aavmf,
    /// A POWER machine (`qemu-system-ppc64 -M pseries`, TCG) with SLOF,
    /// qemu's Open Firmware: it boots GRUB from a disk's PReP partition or
    /// a CD's `ppc/bootinfo.txt`; the console is the hypervisor's hvc0.
    Slof,
    /// An s390x machine (`qemu-system-s390x -M s390-ccw-virtio`, TCG): its
    /// firmware IPLs a disk through zipl's boot record; the console is the
    /// SCLP line console (ttysclp0).
    S390Ccw,
}

/// AAVMF's code and vars (Debian `qemu-efi-aarch64`), padded to the 64 MiB
/// pflash size `-M virt` wants.
pub const AAVMF_PAIR: (&str, &str) = (
    "/usr/share/AAVMF/AAVMF_CODE.fd",
    "/usr/share/AAVMF/AAVMF_VARS.fd",
);

impl fmt::Display for Firmware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Firmware::Bios => "bios",
            Firmware::Uefi => "uefi",
            Firmware::Aavmf => "aavmf",
            Firmware::Slof => "slof",
            Firmware::S390Ccw => "s390-ccw",
        })
    }
}

/// A disk image format, as qemu names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskFormat {
    Raw,
    Qcow2,
    Vmdk,
    /// VHD (fixed or dynamic), e.g. Azure's fixed VHD.
    Vpc,
    /// VHDX, e.g. Hyper-V's.
    Vhdx,
}

impl DiskFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            DiskFormat::Raw => "raw",
            DiskFormat::Qcow2 => "qcow2",
            DiskFormat::Vmdk => "vmdk",
            DiskFormat::Vpc => "vpc",
            DiskFormat::Vhdx => "vhdx",
        }
    }

    /// `raw`, `qcow2`, `vmdk`, `vpc` (also `vhd`), `vhdx`.
    pub fn parse(s: &str) -> Option<DiskFormat> {
        Some(match s {
            "raw" => DiskFormat::Raw,
            "qcow2" => DiskFormat::Qcow2,
            "vmdk" => DiskFormat::Vmdk,
            "vpc" | "vhd" => DiskFormat::Vpc,
            "vhdx" => DiskFormat::Vhdx,
            _ => return None,
        })
    }

    /// The format `qemu-img info` sees in `path`.
    pub fn detect(path: &Path) -> Result<DiskFormat, String> {
        let o = Command::new("qemu-img")
            .args(["info", "--output=json"])
            .arg(path)
            .output()
            .map_err(|e| format!("running qemu-img info: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "qemu-img info {}: {}",
                path.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .map_err(|e| format!("qemu-img info {}: {e}", path.display()))?;
        let name = v["format"].as_str().unwrap_or_default();
        // qemu probes a fixed VHD as raw: its only header is the footer.
        if name == "raw" && has_vhd_footer(path) {
            return Ok(DiskFormat::Vpc);
        }
        DiskFormat::parse(name)
            .ok_or_else(|| format!("{}: unsupported format {name:?}", path.display()))
    }
}

/// Whether the last 512 bytes of `path` are a VHD footer (`conectix` cookie).
fn has_vhd_footer(path: &Path) -> bool {
    use std::io::{Seek, SeekFrom};
    let mut cookie = [0u8; 8];
    File::open(path)
        .and_then(|mut f| {
            f.seek(SeekFrom::End(-512))?;
            f.read_exact(&mut cookie)
        })
        .is_ok()
        && &cookie == b"conectix"
}

impl fmt::Display for DiskFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The controller a disk hangs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bus {
    /// virtio-blk-pci (`/dev/vda`).
    Virtio,
    /// IDE on `-machine pc`, AHCI/SATA on `q35` (512-byte sectors only).
    Ide,
    /// scsi-hd on virtio-scsi-pci.
    Scsi,
    /// An NVMe controller with one namespace.
    Nvme,
}

/// What the VM boots from. Disks, CD-ROMs, USB disks and the PXE NIC get
/// boot indexes in the order given; `Kernel` (qemu's `-kernel`) bypasses
/// the firmware's boot order, and the other media are then only attached.
#[derive(Clone, Debug)]
pub enum Media {
    /// A disk image, attached with `snapshot=on`.
    Disk {
        path: PathBuf,
        format: DiskFormat,
        /// 512 or 4096 (logical = physical block size).
        logical_block_size: u32,
        bus: Bus,
    },
    /// An ISO on an IDE/SATA CD-ROM drive, read-only.
    Cdrom(PathBuf),
    /// A raw image (e.g. the hybrid ISO) as a USB stick on an xHCI
    /// controller, `snapshot=on`.
    UsbDisk(PathBuf),
    /// Direct kernel boot (`-kernel`, `-initrd`, `-append`). Several initrds
    /// are concatenated (each padded to 4 bytes), as a boot loader would.
    Kernel {
        kernel: PathBuf,
        initrds: Vec<PathBuf>,
        append: String,
    },
    /// Network boot: a virtio NIC on a restricted user-mode network whose
    /// TFTP server serves `tftp_dir`; DHCP hands out `boot_file` (a name in
    /// `tftp_dir`), here an iPXE script run by qemu's iPXE option ROM.
    /// Under UEFI that iPXE passes the kernel's own file name as the first
    /// word of the command line, and needs `initrd=<name>` on the `kernel`
    /// line to hand the initrd over.
    Pxe {
        tftp_dir: PathBuf,
        boot_file: String,
    },
}

impl Media {
    /// A raw disk, 512-byte sectors, virtio.
    pub fn disk(path: impl Into<PathBuf>) -> Media {
        Media::Disk {
            path: path.into(),
            format: DiskFormat::Raw,
            logical_block_size: 512,
            bus: Bus::Virtio,
        }
    }

    /// A disk of the given format, 512-byte sectors, virtio.
    pub fn disk_as(path: impl Into<PathBuf>, format: DiskFormat) -> Media {
        Media::Disk {
            path: path.into(),
            format,
            logical_block_size: 512,
            bus: Bus::Virtio,
        }
    }

    /// A disk of the given format with 4096-byte logical sectors, virtio.
    pub fn disk_4k(path: impl Into<PathBuf>, format: DiskFormat) -> Media {
        Media::Disk {
            path: path.into(),
            format,
            logical_block_size: 4096,
            bus: Bus::Virtio,
        }
    }

    pub fn kernel(kernel: impl Into<PathBuf>, initrds: &[&Path], append: &str) -> Media {
        Media::Kernel {
            kernel: kernel.into(),
            initrds: initrds.iter().map(|p| p.to_path_buf()).collect(),
            append: append.to_string(),
        }
    }
}

/// `mode=` of the marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Disk,
    LiveIso,
    LivePxe,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "disk" => Mode::Disk,
            "live-iso" => Mode::LiveIso,
            "live-pxe" => Mode::LivePxe,
            _ => return None,
        })
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Disk => "disk",
            Mode::LiveIso => "live-iso",
            Mode::LivePxe => "live-pxe",
        })
    }
}

/// The parsed `BOOTIMAGE-TEST-OS ok ...` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marker {
    pub version: String,
    /// `ignition.platform.id` (`none` when the karg is missing).
    pub platform: String,
    pub firstboot: bool,
    pub mode: Mode,
    /// sha256 of the Ignition config, `None` for `ignition=none`.
    pub ignition: Option<String>,
    /// `uname -m` of the booted OS (`arch=`; test OSes built before it
    /// was added print none: `None`).
    pub arch: Option<String>,
    /// Whether `/` is composefs (`composefs=`; `None` from test OSes built
    /// before it was added).
    pub composefs: Option<bool>,
    /// The whole line, from `BOOTIMAGE-TEST-OS` on.
    pub line: String,
}

impl Marker {
    /// Parse `BOOTIMAGE-TEST-OS ok version=... platform=... firstboot=...
    /// mode=... ignition=...` (fields in any order, all required).
    pub fn parse(line: &str) -> Result<Marker, String> {
        let bad = |why: &str| format!("bad marker line ({why}): {line}");
        let rest = line
            .trim()
            .strip_prefix(MARKER_PREFIX)
            .and_then(|r| r.strip_prefix(" ok "))
            .ok_or_else(|| bad("no 'BOOTIMAGE-TEST-OS ok' prefix"))?;
        let (mut version, mut platform, mut firstboot, mut mode, mut ignition, mut arch) =
            (None, None, None, None, None, None);
        let mut composefs = None;
        for field in rest.split_whitespace() {
            let (k, v) = field
                .split_once('=')
                .ok_or_else(|| bad(&format!("field {field:?} is not key=value")))?;
            let slot = match k {
                "version" => &mut version,
                "platform" => &mut platform,
                "firstboot" => &mut firstboot,
                "mode" => &mut mode,
                "ignition" => &mut ignition,
                "arch" => &mut arch,
                "composefs" => &mut composefs,
                _ => return Err(bad(&format!("unknown field {k:?}"))),
            };
            if slot.replace(v.to_string()).is_some() {
                return Err(bad(&format!("field {k:?} twice")));
            }
        }
        let need = |v: Option<String>, k: &str| v.ok_or_else(|| bad(&format!("no {k}=")));
        let version = need(version, "version")?;
        let platform = need(platform, "platform")?;
        let firstboot = match need(firstboot, "firstboot")?.as_str() {
            "0" => false,
            "1" => true,
            _ => return Err(bad("firstboot is not 0 or 1")),
        };
        let mode = Mode::parse(&need(mode, "mode")?).ok_or_else(|| bad("unknown mode"))?;
        let ignition = match need(ignition, "ignition")?.as_str() {
            "none" => None,
            h if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => Some(h.to_string()),
            _ => return Err(bad("ignition is neither a sha256 nor none")),
        };
        let composefs = match composefs.as_deref() {
            None => None,
            Some("0") => Some(false),
            Some("1") => Some(true),
            Some(_) => return Err(bad("composefs is not 0 or 1")),
        };
        if version.is_empty() || platform.is_empty() {
            return Err(bad("empty version or platform"));
        }
        Ok(Marker {
            version,
            platform,
            firstboot,
            mode,
            ignition,
            arch,
            composefs,
            line: line.trim().to_string(),
        })
    }
}

impl fmt::Display for Marker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line)
    }
}

/// A successful boot.
#[derive(Clone, Debug)]
pub struct BootResult {
    pub marker: Marker,
    /// The `BOOTIMAGE-TEST-OS cmdline=` line's value (`None` if the guest
    /// powered off without printing it).
    pub cmdline: Option<String>,
    /// The serial console log, `\r` and terminal escapes removed.
    pub log: String,
    /// From starting qemu to seeing the marker.
    pub duration: Duration,
    /// The qemu command line (shell-quoted).
    pub command: String,
}

impl BootResult {
    /// The kernel arguments (empty without a cmdline line).
    pub fn kargs(&self) -> Vec<&str> {
        self.cmdline
            .as_deref()
            .map(|c| c.split_whitespace().collect())
            .unwrap_or_default()
    }

    /// Whether `karg` (`name` or `name=value`) is on the command line; a bare
    /// `name` also matches `name=anything`.
    pub fn has_karg(&self, karg: &str) -> bool {
        self.kargs().iter().any(|k| {
            *k == karg || (!karg.contains('=') && k.split_once('=').map(|(n, _)| n) == Some(karg))
        })
    }

    /// How many `BOOTIMAGE-TEST-OS ok` lines the log holds (the test OS
    /// prints exactly one on the serial console).
    pub fn marker_count(&self) -> usize {
        self.log
            .lines()
            .filter(|l| l.contains(&format!("{MARKER_PREFIX} ok ")))
            .count()
    }
}

/// Whether `BOOTIMAGE_TEST_KVM=1` asks for KVM instead of TCG.
pub fn kvm_enabled() -> bool {
    std::env::var("BOOTIMAGE_TEST_KVM").is_ok_and(|v| v == "1")
}

/// `BOOTIMAGE_TEST_BOOT_TIMEOUT` seconds, or 300 (TCG on a loaded 2-core
/// machine: a disk boot takes 10-30 s, UEFI adds a few seconds).
pub fn default_timeout() -> Duration {
    let secs = std::env::var("BOOTIMAGE_TEST_BOOT_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(300);
    Duration::from_secs(secs)
}

/// The first OVMF code/vars pair present on this machine.
pub fn ovmf() -> Result<(PathBuf, PathBuf), String> {
    OVMF_PAIRS
        .iter()
        .map(|(c, v)| (PathBuf::from(c), PathBuf::from(v)))
        .find(|(c, v)| c.is_file() && v.is_file())
        .ok_or_else(|| {
            format!("no OVMF firmware (apt-get install ovmf); looked for {OVMF_PAIRS:?}")
        })
}

/// Boot `media` under `fw` with the default settings (see [`Vm`]).
pub fn boot(media: &[Media], fw: Firmware, timeout: Duration) -> Result<BootResult, String> {
    Vm::new(fw).media(media).timeout(timeout).boot()
}

/// [`boot`], panicking with the error (reason, command, console log) on failure.
pub fn assert_boots(media: &[Media], fw: Firmware, timeout: Duration) -> BootResult {
    Vm::new(fw).media(media).timeout(timeout).assert_boots()
}

/// A VM to boot, with the less common knobs.
#[derive(Clone, Debug)]
pub struct Vm {
    pub media: Vec<Media>,
    pub firmware: Firmware,
    pub timeout: Duration,
    pub memory_mib: u32,
    /// `-machine` type: `q35` (default) or `pc`.
    pub machine: String,
    /// `-name`; unique per boot unless set (handy for `pgrep -f`).
    pub name: Option<String>,
    /// Extra qemu arguments, appended last.
    pub extra_args: Vec<String>,
    /// Console silence that ends an attempt as stalled (STALL).
    pub stall: Duration,
}

impl Vm {
    pub fn new(firmware: Firmware) -> Vm {
        Vm {
            media: Vec::new(),
            firmware,
            timeout: default_timeout(),
            memory_mib: 1024,
            machine: "q35".to_string(),
            name: None,
            extra_args: Vec::new(),
            stall: STALL,
        }
    }
    pub fn stall(mut self, t: Duration) -> Vm {
        self.stall = t;
        self
    }
    pub fn media(mut self, media: &[Media]) -> Vm {
        self.media.extend_from_slice(media);
        self
    }
    pub fn medium(mut self, m: Media) -> Vm {
        self.media.push(m);
        self
    }
    pub fn timeout(mut self, t: Duration) -> Vm {
        self.timeout = t;
        self
    }
    pub fn memory_mib(mut self, m: u32) -> Vm {
        self.memory_mib = m;
        self
    }
    pub fn machine(mut self, m: &str) -> Vm {
        self.machine = m.to_string();
        self
    }
    pub fn name(mut self, n: &str) -> Vm {
        self.name = Some(n.to_string());
        self
    }
    pub fn arg(mut self, a: &str) -> Vm {
        self.extra_args.push(a.to_string());
        self
    }

    pub fn assert_boots(&self) -> BootResult {
        match self.boot() {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        }
    }

    /// Boot and wait for the marker. `Err` holds the reason, the qemu
    /// command line, qemu's output and the console log's last lines. A
    /// failure an emulator fault can cause (a guest kernel oops, a silent
    /// console; [`Outcome::emulator_fault`]) gets one more boot, said on
    /// stderr and in the boot record; a bad image fails both.
    pub fn boot(&self) -> Result<BootResult, String> {
        assert_boot_gated();
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let name = self.name.clone().unwrap_or_else(|| {
            format!(
                "bootimage-test-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::SeqCst)
            )
        });
        match self.attempt(&name, None) {
            Err(Retry(why, first)) if !why.is_empty() => {
                eprintln!("boot {name}: {why}: an emulator fault rather than the image? booting it once more");
                self.attempt(&name, Some(&why)).map_err(|Retry(_, second)| {
                    format!("{second}\n(the first boot failed too: {why}; its error:\n{first})")
                })
            }
            ok => ok.map_err(|Retry(_, e)| e),
        }
    }

    /// One boot. `Err(Retry(why, error))` with `why` non-empty when an
    /// emulator fault may explain it; `retry_of` names the first attempt's
    /// fault on the second.
    fn attempt(&self, name: &str, retry_of: Option<&str>) -> Result<BootResult, Retry> {
        let name = name.to_string();
        let plain = |e: String| Retry(String::new(), e);
        let tmp = tempfile::Builder::new()
            .prefix("bootimage-boot-")
            .tempdir()
            .map_err(|e| plain(format!("creating a temp dir: {e}")))?;
        let files = BootFiles::in_dir(tmp.path());
        let args = self
            .qemu_args(&name, tmp.path(), &files)
            .map_err(|e| plain(format!("boot {name}: {e}")))?;
        let bin = qemu_binary(self.firmware);
        let command = shell_join(&bin, &args);
        let run = run_qemu(&bin, &args, &files, self.timeout, self.stall);
        if let Ok(dir) = std::env::var("BOOTIMAGE_TEST_BOOT_LOGS") {
            let _ = fs::create_dir_all(&dir);
            let _ = fs::copy(&files.serial, Path::new(&dir).join(format!("{name}.log")));
            let _ = fs::copy(
                &files.fw_log,
                Path::new(&dir).join(format!("{name}.firmware.log")),
            );
        }
        let Run {
            outcome,
            log,
            elapsed,
        } = match run {
            Ok(r) => r,
            Err(e) => return Err(plain(format!("boot {name}: {e}\nqemu: {command}"))),
        };
        self.record(&outcome, elapsed, retry_of);
        let fault = outcome.emulator_fault().filter(|_| retry_of.is_none());
        if fault.is_some() {
            keep_for_the_suite(&name, &files);
        }
        let fail = |reason: String| {
            let out = fs::read_to_string(&files.qemu_out).unwrap_or_default();
            let fw = fs::read(&files.fw_log)
                .map(|b| clean(&b))
                .unwrap_or_default();
            Retry(
                fault.clone().unwrap_or_default(),
                failure_text(
                    &name,
                    self.firmware,
                    &reason,
                    elapsed,
                    &command,
                    &out,
                    &fw,
                    &log,
                ),
            )
        };
        match outcome {
            Outcome::Ok { marker, cmdline } => match Marker::parse(&marker) {
                Ok(marker) => Ok(BootResult {
                    marker,
                    cmdline,
                    log,
                    duration: elapsed,
                    command,
                }),
                Err(e) => Err(fail(e)),
            },
            Outcome::Fail(reason) => Err(fail(format!("the test OS failed: {reason}"))),
            Outcome::Panic(line) => Err(fail(format!("kernel panic ({line})"))),
            Outcome::NoBoot(why) => Err(fail(format!("nothing booted: {why}"))),
            Outcome::Exited(st) => Err(fail(format!(
                "qemu exited ({st}) without a BOOTIMAGE-TEST-OS marker"
            ))),
            Outcome::Timeout { last_output } => Err(fail(format!(
                "timed out after {:.0} s without a BOOTIMAGE-TEST-OS marker ({})",
                self.timeout.as_secs_f64(),
                match last_output {
                    Some(t) => format!("the console last wrote at {:.0} s", t.as_secs_f64()),
                    None => "the console stayed empty".to_string(),
                }
            ))),
            o @ (Outcome::Oops(_)
            | Outcome::Stalled { .. }
            | Outcome::SilentLoader { .. }
            | Outcome::LostOutput) => Err(fail(format!(
                "{} without a BOOTIMAGE-TEST-OS marker",
                o.emulator_fault().unwrap_or_default()
            ))),
        }
    }

    /// One line of `SUITE_BOOT_RECORD` (when set) for this boot
    /// (`retry_of`: the fault that made it a second attempt).
    fn record(&self, outcome: &Outcome, elapsed: Duration, retry_of: Option<&str>) {
        let Some(file) = std::env::var_os("SUITE_BOOT_RECORD") else {
            return;
        };
        let media: Vec<serde_json::Value> = self
            .media
            .iter()
            .map(|m| match m {
                Media::Disk {
                    path,
                    format,
                    logical_block_size,
                    bus,
                } => serde_json::json!({"medium": "disk", "format": format.as_str(),
                    "sector": logical_block_size, "bus": format!("{bus:?}").to_lowercase(),
                    "file": base_name(path)}),
                Media::Cdrom(p) => serde_json::json!({"medium": "cdrom", "file": base_name(p)}),
                Media::UsbDisk(p) => serde_json::json!({"medium": "usb", "file": base_name(p)}),
                Media::Kernel { kernel, .. } => {
                    serde_json::json!({"medium": "kernel", "file": base_name(kernel)})
                }
                Media::Pxe { boot_file, .. } => {
                    serde_json::json!({"medium": "pxe", "file": boot_file})
                }
            })
            .collect();
        let (ok, platform, mode) = match outcome {
            Outcome::Ok { marker, .. } => match Marker::parse(marker) {
                Ok(m) => (true, m.platform, m.mode.to_string()),
                Err(_) => (false, String::new(), String::new()),
            },
            _ => (false, String::new(), String::new()),
        };
        // scripts/suite.py names the target, the test's module (the test
        // named within it); run by hand, the module the test's name starts
        // with.
        let (target, test) = target_and_test(
            std::thread::current().name().unwrap_or(""),
            std::env::var("SUITE_TARGET").ok(),
        );
        let line = serde_json::json!({
            "target": target,
            "test": test,
            "firmware": self.firmware.to_string(),
            "machine": self.machine,
            "media": media,
            "ok": ok,
            "platform": platform,
            "mode": mode,
            "secs": (elapsed.as_secs_f64() * 10.0).round() / 10.0,
            "retry_of": retry_of,
        });
        if let Ok(mut f) = fs::OpenOptions::new().create(true).append(true).open(file) {
            // One write(2) of a short line to an O_APPEND file: whole lines
            // even with several test binaries appending at once.
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }

    /// The qemu arguments (without the binary). Files the VM needs (OVMF
    /// vars, a concatenated initrd) are written to `tmp`.
    fn qemu_args(&self, name: &str, tmp: &Path, files: &BootFiles) -> Result<Vec<String>, String> {
        let (serial, fw_log) = (&files.serial, &files.fw_log);
        let mut a: Vec<String> = Vec::new();
        let mut push = |v: &[&str]| a.extend(v.iter().map(|s| s.to_string()));
        let arm = self.firmware == Firmware::Aavmf;
        let power = self.firmware == Firmware::Slof;
        let z = self.firmware == Firmware::S390Ccw;
        let machine = match self.firmware {
            Firmware::Aavmf => "virt",
            Firmware::Slof => "pseries",
            Firmware::S390Ccw => "s390-ccw-virtio",
            _ => self.machine.as_str(),
        };
        push(&["-name", name, "-machine", machine]);
        if arm {
            // Another arch: always emulated.
            push(&["-accel", "tcg", "-cpu", "cortex-a57"]);
        } else if power || z {
            push(&["-accel", "tcg"]);
        } else if kvm_enabled() {
            push(&["-accel", "kvm", "-cpu", "host"]);
        } else {
            push(&["-accel", "tcg"]);
        }
        push(&[
            "-m",
            &self.memory_mib.to_string(),
            "-smp",
            "1",
            "-nodefaults",
            "-display",
            "none",
            "-no-reboot",
        ]);
        // The disks' request counts, for the stall checks (run_qemu).
        push(&[
            "-qmp",
            &format!("unix:{},server=on,wait=off", qemu_path(&files.qmp)?),
        ]);
        if z {
            // No serial port on s390x: the SCLP console into the log.
            push(&[
                "-chardev",
                &format!("file,id=con0,path={}", qemu_path(serial)?),
                "-device",
                "sclpconsole,chardev=con0",
            ]);
        } else {
            push(&["-serial", &format!("file:{}", path_str(serial)?)]);
        }
        if self.firmware == Firmware::Bios {
            // SeaBIOS logs to the debug port, not the serial console.
            push(&[
                "-chardev",
                &format!("file,id=fwlog,path={}", qemu_path(fw_log)?),
                "-device",
                "isa-debugcon,iobase=0x402,chardev=fwlog",
            ]);
        }
        if matches!(self.firmware, Firmware::Uefi | Firmware::Aavmf) {
            let (code, vars) = match self.firmware {
                Firmware::Aavmf => {
                    let (c, v) = (PathBuf::from(AAVMF_PAIR.0), PathBuf::from(AAVMF_PAIR.1));
                    if !c.is_file() || !v.is_file() {
                        return Err(format!(
                            "no AAVMF firmware (apt-get install qemu-efi-aarch64); looked for {AAVMF_PAIR:?}"
                        ));
                    }
                    (c, v)
                }
                _ => ovmf()?,
            };
            let vars_copy = tmp.join("VARS.fd");
            fs::copy(&vars, &vars_copy).map_err(|e| format!("copying {}: {e}", vars.display()))?;
            push(&[
                "-drive",
                &format!(
                    "if=pflash,unit=0,format=raw,readonly=on,file={}",
                    qemu_path(&code)?
                ),
                "-drive",
                &format!(
                    "if=pflash,unit=1,format=raw,file={}",
                    qemu_path(&vars_copy)?
                ),
            ]);
        }
        if self.media.is_empty() {
            return Err("no media to boot".to_string());
        }
        let mut bootindex = 0;
        let mut next_index = || {
            bootindex += 1;
            bootindex
        };
        let (mut scsi, mut xhci, mut kernel, mut pxe) = (false, false, false, false);
        for (i, m) in self.media.iter().enumerate() {
            match m {
                Media::Disk {
                    path,
                    format,
                    logical_block_size: lbs,
                    bus,
                } => {
                    check_file(path)?;
                    if *lbs != 512 && *lbs != 4096 {
                        return Err(format!("logical_block_size {lbs}: want 512 or 4096"));
                    }
                    let id = format!("disk{i}");
                    push(&[
                        "-drive",
                        &format!(
                            "if=none,id={id},format={format},snapshot=on,file={}",
                            qemu_path(path)?
                        ),
                    ]);
                    let bi = next_index();
                    let sizes = format!("logical_block_size={lbs},physical_block_size={lbs}");
                    let dev = match bus {
                        // s390x has no PCI by default: virtio over CCW.
                        Bus::Virtio if z => {
                            format!("virtio-blk-ccw,drive={id},bootindex={bi},{sizes}")
                        }
                        Bus::Virtio => format!("virtio-blk-pci,drive={id},bootindex={bi},{sizes}"),
                        Bus::Ide => {
                            if *lbs != 512 {
                                return Err("IDE/SATA disks have 512-byte sectors only".into());
                            }
                            format!("ide-hd,drive={id},bootindex={bi}")
                        }
                        Bus::Scsi => {
                            if !scsi {
                                scsi = true;
                                push(&["-device", "virtio-scsi-pci,id=scsi0"]);
                            }
                            format!("scsi-hd,bus=scsi0.0,drive={id},bootindex={bi},{sizes}")
                        }
                        Bus::Nvme => {
                            format!("nvme,drive={id},serial=bootimage{i},bootindex={bi},{sizes}")
                        }
                    };
                    push(&["-device", &dev]);
                }
                Media::Cdrom(path) => {
                    check_file(path)?;
                    let id = format!("cd{i}");
                    push(&[
                        "-drive",
                        &format!(
                            "if=none,id={id},media=cdrom,format=raw,readonly=on,file={}",
                            qemu_path(path)?
                        ),
                    ]);
                    let bi = next_index();
                    if arm || power {
                        // `-M virt` and pseries have no IDE: a SCSI CD-ROM.
                        if !scsi {
                            scsi = true;
                            push(&["-device", "virtio-scsi-pci,id=scsi0"]);
                        }
                        push(&[
                            "-device",
                            &format!("scsi-cd,bus=scsi0.0,drive={id},bootindex={bi}"),
                        ]);
                    } else {
                        push(&["-device", &format!("ide-cd,drive={id},bootindex={bi}")]);
                    }
                }
                Media::UsbDisk(path) => {
                    check_file(path)?;
                    if !xhci {
                        xhci = true;
                        push(&["-device", "qemu-xhci,id=xhci"]);
                    }
                    let id = format!("usb{i}");
                    push(&[
                        "-drive",
                        &format!(
                            "if=none,id={id},format=raw,snapshot=on,file={}",
                            qemu_path(path)?
                        ),
                        "-device",
                        &format!(
                            "usb-storage,bus=xhci.0,drive={id},removable=on,bootindex={}",
                            next_index()
                        ),
                    ]);
                }
                Media::Kernel {
                    kernel: k,
                    initrds,
                    append,
                } => {
                    if std::mem::replace(&mut kernel, true) {
                        return Err("more than one Media::Kernel".into());
                    }
                    check_file(k)?;
                    push(&["-kernel", path_str(k)?, "-append", append]);
                    match initrds.as_slice() {
                        [] => {}
                        [one] => {
                            check_file(one)?;
                            push(&["-initrd", path_str(one)?]);
                        }
                        many => {
                            let cat = tmp.join("initrd.img");
                            concat_initrds(many, &cat)?;
                            push(&["-initrd", path_str(&cat)?]);
                        }
                    }
                }
                Media::Pxe {
                    tftp_dir,
                    boot_file,
                } => {
                    if std::mem::replace(&mut pxe, true) {
                        return Err("more than one Media::Pxe".into());
                    }
                    check_file(&tftp_dir.join(boot_file))?;
                    if boot_file.contains(',') {
                        return Err(format!("boot file name {boot_file:?} has a comma"));
                    }
                    // restrict=on: the guest reaches qemu's DHCP/TFTP and nothing else.
                    push(&[
                        "-netdev",
                        &format!(
                            "user,id=net0,restrict=on,tftp={},bootfile={boot_file}",
                            qemu_path(tftp_dir)?
                        ),
                        "-device",
                        &format!("virtio-net-pci,netdev=net0,bootindex={}", next_index()),
                    ]);
                }
            }
        }
        a.extend(self.extra_args.iter().cloned());
        Ok(a)
    }
}

fn base_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn qemu_binary(fw: Firmware) -> String {
    match fw {
        Firmware::Aavmf => return "qemu-system-aarch64".to_string(),
        Firmware::Slof => return "qemu-system-ppc64".to_string(),
        Firmware::S390Ccw => return "qemu-system-s390x".to_string(),
        _ => {}
    }
    std::env::var("BOOTIMAGE_TEST_QEMU").unwrap_or_else(|_| "qemu-system-x86_64".to_string())
}

fn check_file(p: &Path) -> Result<(), String> {
    if p.is_file() {
        Ok(())
    } else {
        Err(format!("{}: no such file", p.display()))
    }
}

fn path_str(p: &Path) -> Result<&str, String> {
    p.to_str()
        .ok_or_else(|| format!("{}: path is not UTF-8", p.display()))
}

/// A path inside a qemu `key=value,...` option: commas doubled.
fn qemu_path(p: &Path) -> Result<String, String> {
    Ok(path_str(p)?.replace(',', ",,"))
}

/// Concatenate initrds, padding each to a multiple of 4 bytes (the kernel
/// reads concatenated cpio archives on 4-byte boundaries).
fn concat_initrds(parts: &[PathBuf], dest: &Path) -> Result<(), String> {
    let mut out = File::create(dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    let mut len = 0u64;
    for p in parts {
        let pad = (4 - len % 4) % 4;
        out.write_all(&vec![0u8; pad as usize])
            .map_err(|e| e.to_string())?;
        len += pad;
        let mut f = File::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
        len += std::io::copy(&mut f, &mut out).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

fn shell_join(bin: &str, args: &[String]) -> String {
    let q = |s: &str| {
        if !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
        {
            s.to_string()
        } else {
            format!("'{}'", s.replace('\'', r"'\''"))
        }
    };
    std::iter::once(bin)
        .chain(args.iter().map(String::as_str))
        .map(q)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Kills and reaps qemu when dropped (normal return, error or panic: its
/// [`ChildGuard`]); `stop` does so at once and keeps the exit status.
struct QemuGuard {
    child: ChildGuard,
    status: Option<ExitStatus>,
}

impl QemuGuard {
    fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }
    fn stop(&mut self) {
        if self.try_wait().is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }
}

#[derive(Debug)]
enum Outcome {
    Ok {
        marker: String,
        cmdline: Option<String>,
    },
    Fail(String),
    /// The guest kernel panicked (its `Kernel panic` line).
    Panic(String),
    /// The firmware found nothing to boot.
    NoBoot(String),
    Exited(ExitStatus),
    /// The guest ran its init and powered off in order, but not one line
    /// its programs wrote reached the serial console (the kernel's did):
    /// [`lost_program_output`].
    LostOutput,
    /// No marker in time; when the console last grew, from qemu's start.
    Timeout {
        last_output: Option<Duration>,
    },
    /// The guest kernel oopsed (its line) and no marker followed.
    Oops(String),
    /// The console said nothing and the guest made no disk request for
    /// `quiet`, from when the console last grew (`last_output`) or a disk
    /// was last used (`last_io`), whichever was later.
    Stalled {
        last_output: Duration,
        last_io: Option<Duration>,
        quiet: Duration,
    },
    /// The console stayed empty after SeaBIOS handed over to a boot
    /// sector at `handed_over` (from qemu's start), and the guest made no
    /// disk request for `quiet` from then or from `last_io`.
    SilentLoader {
        handed_over: Duration,
        last_io: Option<Duration>,
        quiet: Duration,
    },
}

impl Outcome {
    /// A failure an emulator fault can cause (a TCG guest's kernel oopsing
    /// in a random place, a guest going silent mid-boot: both seen on CI
    /// for boots that pass on the next try), as opposed to a verdict on
    /// the image: worth one more boot.
    fn emulator_fault(&self) -> Option<String> {
        match self {
            Outcome::Oops(line) => Some(format!("the guest kernel oopsed ({line})")),
            Outcome::Panic(line) if emulation_panic(line) => Some(format!(
                "the guest kernel's timer check failed under emulation ({line})"
            )),
            Outcome::Stalled {
                last_output,
                last_io,
                quiet,
            } => Some(format!(
                "the console went silent at {:.0} s and the guest used no disk for {:.0} s{}",
                last_output.as_secs_f64(),
                quiet.as_secs_f64(),
                last_disk_use(*last_io)
            )),
            Outcome::LostOutput => Some(
                "the guest powered off in order, but no line its programs wrote reached the serial console (the kernel's did): the emulated UART lost them".to_string(),
            ),
            Outcome::SilentLoader {
                handed_over,
                last_io,
                quiet,
            } => Some(format!(
                "the console stayed empty after the firmware handed over to the boot sector at {:.0} s, and the guest used no disk for {:.0} s{}",
                handed_over.as_secs_f64(),
                quiet.as_secs_f64(),
                last_disk_use(*last_io)
            )),
            _ => None,
        }
    }
}

/// Whether a console log is that of a guest whose programs' output was
/// lost: the kernel ran init ("Run /init" or "Run /sbin/init") and later
/// powered off in order ("reboot: Power down"), yet no line after init
/// started is anything but a kernel message (`[   …]`). The test OS powers
/// off only after printing its marker or a FAIL line, so such a log means
/// the serial port dropped what userspace wrote (seen on CI: a live PXE
/// boot, every initramfs and marker line missing, the kernel's all there;
/// the same boot passed alone). An emulator fault, worth one more boot.
pub fn lost_program_output(console: &str) -> bool {
    let Some(i) = console
        .find("Run /init as init process")
        .or_else(|| console.find("Run /sbin/init as init process"))
    else {
        return false;
    };
    let after = &console[i..];
    after.contains("reboot: Power down")
        && after
            .lines()
            .skip(1)
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('['))
}

/// " (last at N s)", or nothing when the guest was not seen using a disk.
fn last_disk_use(t: Option<Duration>) -> String {
    t.map(|t| format!(" (last at {:.0} s)", t.as_secs_f64()))
        .unwrap_or_default()
}

/// The files of one boot attempt, in its temp dir.
struct BootFiles {
    /// The guest's serial console.
    serial: PathBuf,
    /// SeaBIOS's debug port.
    fw_log: PathBuf,
    /// qemu's own stdout and stderr.
    qemu_out: PathBuf,
    /// qemu's QMP socket.
    qmp: PathBuf,
}

impl BootFiles {
    fn in_dir(tmp: &Path) -> BootFiles {
        BootFiles {
            serial: tmp.join("serial.log"),
            fw_log: tmp.join("firmware.log"),
            qemu_out: tmp.join("qemu.out"),
            qmp: tmp.join("qmp.sock"),
        }
    }
}

/// A failed attempt: why one more may pass (empty: it would not), and
/// the error.
struct Retry(String, String);

struct Run {
    outcome: Outcome,
    log: String,
    elapsed: Duration,
}

/// What the console and firmware logs said so far.
#[derive(Default)]
struct Scan {
    marker: Option<String>,
    cmdline: Option<String>,
    fail: Option<String>,
    panic: Option<String>,
    oops: Option<String>,
    no_boot: Option<String>,
    /// SeaBIOS jumped to a boot sector (a disk's or a CD's): from here on
    /// the boot loader runs (and may print nothing: GRUB on a metal disk
    /// does not).
    handed_over: bool,
}

/// Kernel lines of an oops (x86, arm64, ppc64, s390x).
/// Kernel panics that say the emulated machine was too slow, not that the
/// image is wrong: x86's check that the timer ticks through the IO-APIC
/// (`check_timer`) gives up when a loaded TCG host delays the ticks.
const EMULATION_PANICS: &[&str] = &["IO-APIC + timer doesn't work"];

/// Whether the kernel panic line `line` is one an emulator fault causes
/// ([`EMULATION_PANICS`]): such a boot gets one more try.
pub fn emulation_panic(line: &str) -> bool {
    EMULATION_PANICS.iter().any(|p| line.contains(p))
}

const OOPS_SIGNS: &[&str] = &[
    "Oops:",
    "illegal operation:",
    "invalid opcode:",
    "general protection fault",
    "BUG: unable to handle",
    "Internal error: Oops",
];

impl Scan {
    /// Take in complete, cleaned console lines.
    fn console(&mut self, text: &str) {
        for line in text.lines() {
            if let Some(i) = line.find(MARKER_PREFIX) {
                let l = &line[i..];
                let rest = l[MARKER_PREFIX.len()..].trim_start();
                if rest.starts_with("ok ") {
                    self.marker.get_or_insert_with(|| l.trim().to_string());
                } else if let Some(c) = rest.strip_prefix("cmdline=") {
                    self.cmdline.get_or_insert_with(|| c.trim_end().to_string());
                } else if let Some(r) = rest.strip_prefix("FAIL") {
                    self.fail.get_or_insert_with(|| r.trim().to_string());
                }
            }
            if line.contains("Kernel panic - not syncing") {
                self.panic.get_or_insert_with(|| line.trim().to_string());
            }
            if OOPS_SIGNS.iter().any(|o| line.contains(o)) {
                self.oops.get_or_insert_with(|| line.trim().to_string());
            }
            // OVMF falls back to its shell when no boot option worked.
            if line.contains("UEFI Interactive Shell")
                || (line.contains("BdsDxe: starting") && line.contains("EFI Internal Shell"))
            {
                self.no_boot.get_or_insert_with(|| {
                    "OVMF found no bootable device and started the UEFI shell".to_string()
                });
            }
        }
    }

    /// Take in complete, cleaned SeaBIOS debug-port lines.
    fn firmware(&mut self, text: &str) {
        if text.contains("No bootable device") {
            self.no_boot
                .get_or_insert_with(|| "SeaBIOS: No bootable device".to_string());
        }
        // SeaBIOS's last line before it jumps to a boot sector (`-kernel`
        // boots go through an option ROM and never print it).
        if text.contains("Booting from 0000:7c00") {
            self.handed_over = true;
        }
    }
}

/// A file qemu appends to, read as complete lines.
struct Tail {
    file: Option<File>,
    path: PathBuf,
    raw: Vec<u8>,
    done: usize,
}

impl Tail {
    fn new(path: &Path) -> Tail {
        Tail {
            file: None,
            path: path.to_path_buf(),
            raw: Vec::new(),
            done: 0,
        }
    }

    /// The cleaned text of the lines completed since the last call.
    fn new_lines(&mut self) -> Option<String> {
        if self.file.is_none() {
            self.file = File::open(&self.path).ok();
        }
        let _ = self.file.as_mut()?.read_to_end(&mut self.raw);
        let nl = self.raw[self.done..].iter().rposition(|&b| b == b'\n')?;
        let text = clean(&self.raw[self.done..self.done + nl + 1]);
        self.done += nl + 1;
        Some(text)
    }

    fn all(&mut self) -> String {
        let _ = self.new_lines();
        clean(&self.raw)
    }
}

fn run_qemu(
    bin: &str,
    args: &[String],
    files: &BootFiles,
    timeout: Duration,
    stall: Duration,
) -> Result<Run, String> {
    let (serial, fw_log, qemu_out) = (&files.serial, &files.fw_log, &files.qemu_out);
    File::create(serial).map_err(|e| format!("{}: {e}", serial.display()))?;
    let out = File::create(qemu_out).map_err(|e| format!("{}: {e}", qemu_out.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(bin);
    cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
    // If the test process dies without unwinding (SIGKILL, abort), the
    // kernel kills qemu too. (The signal follows the spawning *thread*:
    // boot() waits in the thread that spawned qemu, so that is fine.)
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let start = Instant::now();
    let child = cmd.spawn().map_err(|e| format!("starting {bin}: {e}"))?;
    let mut guard = QemuGuard {
        child: ChildGuard(child),
        status: None,
    };
    let mut console = Tail::new(serial);
    let mut firmware = Tail::new(fw_log);
    let mut s = Scan::default();
    let mut marker_at: Option<Instant> = None;
    let mut panic_at: Option<Instant> = None;
    let mut oops_at: Option<Instant> = None;
    let mut last_output: Option<Duration> = None;
    let mut handed_over: Option<Duration> = None;
    let mut qmp: Option<Qmp> = None;
    let mut disk_requests: Option<u64> = None;
    let mut last_io: Option<Duration> = None;
    let mut last_ask = start;
    let outcome = loop {
        let exited = guard.try_wait();
        // Read after try_wait: once qemu has exited, everything it wrote is in.
        if let Some(text) = console.new_lines() {
            last_output = Some(start.elapsed());
            s.console(&text);
        }
        if let Some(text) = firmware.new_lines() {
            s.firmware(&text);
            if s.handed_over {
                handed_over.get_or_insert(start.elapsed());
            }
        }
        let now = Instant::now();
        if now - last_ask >= DISK_POLL {
            last_ask = now;
            if qmp.is_none() {
                qmp = Qmp::connect(&files.qmp, DISK_POLL);
            }
            match qmp.as_mut().map(Qmp::disk_requests) {
                Some(Some(n)) => {
                    if disk_requests.is_some_and(|m| m != n) {
                        last_io = Some(start.elapsed());
                    }
                    disk_requests = Some(n);
                }
                Some(None) => qmp = None,
                None => {}
            }
        }
        // Quiet: no console output and no disk request since `t`.
        let quiet_since = |t: Duration| now - start > t.max(last_io.unwrap_or_default()) + stall;
        if let Some(reason) = &s.fail {
            break Outcome::Fail(reason.clone());
        }
        if let Some(marker) = &s.marker {
            let seen = *marker_at.get_or_insert(now);
            if s.cmdline.is_some() || exited.is_some() || now - seen > CMDLINE_GRACE {
                break Outcome::Ok {
                    marker: marker.clone(),
                    cmdline: s.cmdline.clone(),
                };
            }
        } else if let Some(st) = exited {
            break match lost_program_output(&console.all()) {
                true => Outcome::LostOutput,
                false => Outcome::Exited(st),
            };
        } else if let Some(why) = &s.no_boot {
            break Outcome::NoBoot(why.clone());
        } else if let Some(line) = &s.panic {
            let seen = *panic_at.get_or_insert(now);
            if now - seen > PANIC_GRACE {
                break Outcome::Panic(line.clone());
            }
        } else if let Some(line) = &s.oops {
            let seen = *oops_at.get_or_insert(now);
            if now - seen > OOPS_GRACE {
                break Outcome::Oops(line.clone());
            }
        } else if let Some(t) = last_output {
            if quiet_since(t) {
                break Outcome::Stalled {
                    last_output: t,
                    last_io,
                    quiet: stall,
                };
            }
        } else if let Some(t) = handed_over {
            if quiet_since(t) {
                break Outcome::SilentLoader {
                    handed_over: t,
                    last_io,
                    quiet: stall,
                };
            }
        }
        if now - start > timeout {
            break Outcome::Timeout { last_output };
        }
        std::thread::sleep(POLL);
    };
    let elapsed = marker_at.unwrap_or_else(Instant::now) - start;
    guard.stop();
    Ok(Run {
        outcome,
        log: console.all(),
        elapsed,
    })
}

/// The console log as text: `\r` and terminal escape sequences (OVMF and
/// GRUB draw with them) removed.
pub fn clean(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let mut out = String::with_capacity(text.len());
    let mut it = text.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\r' => {}
            '\x1b' => match it.peek() {
                Some('[') => {
                    it.next();
                    // CSI: parameters and intermediates up to a final byte.
                    for c in it.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                Some('(') | Some(')') => {
                    it.next();
                    it.next();
                }
                Some(_) => {
                    it.next();
                }
                None => {}
            },
            c if c.is_control() && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[allow(clippy::too_many_arguments)]
fn failure_text(
    name: &str,
    fw: Firmware,
    reason: &str,
    elapsed: Duration,
    command: &str,
    qemu_out: &str,
    fw_log: &str,
    log: &str,
) -> String {
    let mut s = format!(
        "boot {name} ({fw}) failed after {:.1} s: {reason}\nqemu: {command}\n",
        elapsed.as_secs_f64()
    );
    if !qemu_out.trim().is_empty() {
        s.push_str("--- qemu output ---\n");
        s.push_str(&tail(qemu_out, 20));
        s.push('\n');
    }
    if !fw_log.trim().is_empty() {
        s.push_str("--- firmware debug log (last 20 lines) ---\n");
        s.push_str(&tail(fw_log, 20));
        s.push('\n');
    }
    s.push_str(&format!(
        "--- console log (last {LOG_TAIL_LINES} lines) ---\n{}\n--- end of console log ---",
        tail(log, LOG_TAIL_LINES)
    ));
    s
}

/// The boot record's target and test of the test thread `thread`
/// (libtest names it `module::test`): the target is `suite_target` (set by
/// scripts/suite.py) or else the first module of the name, the test its
/// name within that module.
fn target_and_test(thread: &str, suite_target: Option<String>) -> (String, String) {
    let module = thread.split_once("::").map_or("", |(m, _)| m);
    let target = suite_target.unwrap_or_else(|| module.to_string());
    let test = thread
        .strip_prefix(&format!("{target}::"))
        .unwrap_or(thread)
        .to_string();
    (target, test)
}

/// The boot tier's gate, checked where every boot starts: the running
/// test must carry `#[cfg_attr(not(feature = "boot"), ignore = "needs
/// --features boot")]` (or an `#[ignore = "boot tier..."]`), so a
/// test that boots cannot sit in the privileged tier (docs/testing.md
/// "Tiers"). The test is found by its thread's name (`module::test`, as
/// libtest names it) in tests/system/MODULE.rs; a boot from a thread of
/// the test's own (no test name) is not checked.
fn assert_boot_gated() {
    let Some(thread) = std::thread::current().name().map(str::to_string) else {
        return;
    };
    let parts: Vec<&str> = thread.split("::").collect();
    let Some((test, modules)) = parts.split_last() else {
        return;
    };
    let dir = super::top().join("tests/system");
    // `a::b::t`: tests/system/a/b.rs, else tests/system/a.rs (an inline `mod b`).
    let Some(src) = (1..=modules.len())
        .rev()
        .map(|k| dir.join(format!("{}.rs", modules[..k].join("/"))))
        .find_map(|p| fs::read_to_string(p).ok())
    else {
        return;
    };
    let lines: Vec<&str> = src.lines().collect();
    let Some(at) = lines
        .iter()
        .position(|l| l.trim_start().starts_with(&format!("fn {test}(")))
    else {
        return;
    };
    let mut above: Vec<&str> = lines[..at]
        .iter()
        .rev()
        .map(|l| l.trim())
        .take_while(|l| !l.is_empty() && !l.ends_with('}') && !l.ends_with(';'))
        .collect();
    above.reverse();
    let attrs: String = above
        .concat()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let gate = r#"cfg_attr(not(feature="boot"),ignore="needs--featuresboot")"#;
    assert!(
        attrs.contains(gate) || attrs.contains(r#"#[ignore="boottier"#),
        "{thread} boots qemu but is not in the boot tier: give it \
         #[cfg_attr(not(feature = \"boot\"), ignore = \"needs --features boot\")] \
         (docs/testing.md \"Tiers\")"
    );
}

/// A boot that gets a second attempt (an emulator fault?) passes or fails
/// on that attempt, and a passing test's stderr is not kept: its whole
/// console, firmware log and qemu output go next to the suite's boot record
/// (`<dir>/retried/<name>.{serial,firmware,qemu}.log`), so what the guest
/// did is there to read after the run.
fn keep_for_the_suite(name: &str, files: &BootFiles) {
    let Some(record) = std::env::var_os("SUITE_BOOT_RECORD") else {
        return;
    };
    let Some(dir) = Path::new(&record).parent().map(|d| d.join("retried")) else {
        return;
    };
    let _ = fs::create_dir_all(&dir);
    for (from, what) in [
        (&files.serial, "serial"),
        (&files.fw_log, "firmware"),
        (&files.qemu_out, "qemu"),
    ] {
        let _ = fs::copy(from, dir.join(format!("{name}.{what}.log")));
    }
    eprintln!("boot {name}: its logs are kept in {}", dir.display());
}
