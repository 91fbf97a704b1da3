//! BIOS boot (docs/contract.md §2): install the OS's GRUB i386-pc on a GPT disk image
//! without grub-install / grub-bios-setup and without a block device.
//!
//! What grub-bios-setup does for a GPT disk with a BIOS boot partition, and
//! what we do the same way:
//! 1. The core image is `diskboot.img` (one sector) followed by the
//!    `grub-mkimage -O i386-pc` payload (lzma_decompress.img + compressed
//!    kernel.img + modules + embedded config). `grub-mkimage` already puts
//!    `diskboot.img` first and fills in its block-list length; we write the
//!    whole core image contiguously at the start of BIOS-BOOT.
//! 2. `boot.img` goes to MBR bytes 0..440 only: the disk signature and the
//!    protective partition table from byte 440 on are kept, and so is the
//!    BPB area of the existing sector (grub-bios-setup keeps both).
//! 3. Pointers are patched: in `boot.img` the 64-bit LBA of the core image's
//!    first sector; in the first core sector the block list entry that tells
//!    `diskboot.img` where the rest of the core image is.
//! 4. The drive check jump in `boot.img` becomes two NOPs, as for any hard
//!    disk: the boot drive number from buggy BIOSes is then forced to 0x80.
//!
//! Offsets are GRUB's (`include/grub/i386/pc/boot.h`, `boot/i386/pc/boot.S`,
//! `boot/i386/pc/diskboot.S`, `util/setup.c`); the modules come from the OS
//! tree so the bootloader matches the OS.
use super::layout::Layout;
use crate::util::cmd;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// BIOS sectors are 512 bytes (GRUB_DISK_SECTOR_SIZE).
pub const SECTOR: u64 = 512;
/// Bytes of the MBR that hold boot code; the NT disk signature
/// (GRUB_BOOT_MACHINE_WINDOWS_NT_MAGIC = 0x1b8) and the partition table follow.
pub const MBR_CODE_END: usize = 0x1b8;
/// BIOS parameter block range in boot.img (GRUB_BOOT_MACHINE_BPB_START/END),
/// preserved from the existing sector like grub-bios-setup does.
const BPB_START: usize = 0x03;
const BPB_END: usize = 0x5a;
/// boot.img: little-endian u64 LBA of the first core sector
/// (GRUB_BOOT_MACHINE_KERNEL_SECTOR; `kernel_sector` + `kernel_sector_high`).
pub const KERNEL_SECTOR_OFF: usize = 0x5c;
/// boot.img: boot drive, 0xff = use the drive the BIOS booted from in %dl
/// (GRUB_BOOT_MACHINE_BOOT_DRIVE). Left at 0xff.
pub const BOOT_DRIVE_OFF: usize = 0x64;
/// boot.img: a 2-byte short `jmp` over the %dl sanity check
/// (GRUB_BOOT_MACHINE_DRIVE_CHECK); grub-bios-setup turns it into two NOPs
/// for hard disks so a bogus %dl is replaced by 0x80.
pub const DRIVE_CHECK_OFF: usize = 0x66;
const JMP_SHORT: u8 = 0xeb;
const NOP: u8 = 0x90;
/// diskboot.img: block list entries (GRUB_BOOT_MACHINE_LIST_SIZE = 12 bytes:
/// u64 start LBA, u16 sector count, u16 load segment) grow downwards from the
/// end of the sector; the first one is at 0x200 - 12, a zero count ends the
/// list.
pub const BLOCKLIST_SIZE: usize = 12;
pub const BLOCKLIST_OFF: usize = 0x200 - BLOCKLIST_SIZE;
/// Load segment of the sectors after diskboot: GRUB_BOOT_I386_PC_KERNEL_SEG
/// (0x800) + one sector (0x200 >> 4), i.e. address 0x8200.
pub const BLOCKLIST_SEGMENT: u16 = 0x0800 + (0x200 >> 4);

/// Label of the boot filesystem the core image searches for, and the
/// directory of its GRUB config (shared with `grubcfg.rs`).
pub use super::grubcfg::{BOOT_LABEL, GRUB_DIR};
/// Modules built into the core image. The first four read the boot
/// filesystem (BIOS disks, GPT, ext2/3/4) and find it by label (`search`,
/// which needs `search_label`); the rest is what the GRUB config of the boot
/// filesystem uses (see `grubcfg.rs`), so booting does not depend on module
/// files under /boot/grub2/i386-pc: `normal` (menu and script engine),
/// `configfile` (`source`), `test` (`[`), `echo`, `linux`, `serial` and
/// `terminal` (console.cfg), `gzio` (compressed files), `halt`, `reboot`.
/// grub-mkimage adds their dependencies from moddep.lst.
pub const CORE_MODULES: &[&str] = &[
    "part_gpt",
    "ext2",
    "search",
    "search_label",
    "normal",
    "configfile",
    "test",
    "echo",
    "linux",
    "serial",
    "terminal",
    "gzio",
    "halt",
    "reboot",
];
/// Added when the OS's GRUB has them: `blscfg` (Fedora/RHEL GRUB boots the
/// BLS entries with it), `all_video` (`load_video` in blscfg entries).
/// Not `mdraid1x`: with it GRUB scans every disk, floppies included, for
/// RAID members when the config probes `(md/md-boot)`, and prints read
/// errors on machines with an empty floppy drive; a mirrored /boot (RAID1
/// superblock 1.0) is still found through a member, which reads as ext4.
pub const OPTIONAL_MODULES: &[&str] = &["blscfg", "all_video"];
/// A GRUB platform whose core image this tool builds from the OS's modules.
#[derive(Debug, Clone, Copy)]
pub struct GrubTarget {
    /// GRUB's platform name: grub-mkimage `-O` and the module directory.
    pub name: &'static str,
    /// The firmware's disk driver module, if not in the GRUB kernel.
    pub disk_module: Option<&'static str>,
    /// Image files grub-mkimage and we need besides the modules.
    pub images: &'static [&'static str],
    /// What boots with it, for messages.
    pub firmware: &'static str,
    /// The RPM that ships the modules on Fedora/RHEL, for messages.
    pub package: &'static str,
}

/// PC BIOS (`/usr/lib/grub/i386-pc`).
pub const I386_PC: GrubTarget = GrubTarget {
    name: "i386-pc",
    disk_module: Some("biosdisk"),
    images: &[
        "boot.img",
        "diskboot.img",
        "kernel.img",
        "lzma_decompress.img",
    ],
    firmware: "BIOS",
    package: "grub2-pc-modules",
};

/// Open Firmware on POWER (`/usr/lib/grub/powerpc-ieee1275`): disks are
/// read through the firmware's own driver, built into GRUB's kernel.
pub const POWERPC_IEEE1275: GrubTarget = GrubTarget {
    name: "powerpc-ieee1275",
    disk_module: None,
    images: &["kernel.img"],
    firmware: "Open Firmware (PReP)",
    package: "grub2-ppc64le-modules",
};

/// What was installed.
#[derive(Debug, Clone, Serialize)]
pub struct BiosStats {
    /// The grub-mkimage program used.
    pub mkimage: String,
    /// Modules requested (dependencies come on top).
    pub modules: Vec<String>,
    /// Core image size in bytes (diskboot sector included, unpadded).
    pub core_bytes: u64,
    /// Core image size in sectors, as written.
    pub core_sectors: u64,
    /// LBA of the core image's first sector (BIOS-BOOT start).
    pub core_lba: u64,
    /// Sectors available in BIOS-BOOT.
    pub capacity_sectors: u64,
}

/// The early config built into the core image: runs before `normal`, with
/// GRUB's simple (rescue) parser, one command per line. The kernel then
/// loads `normal` (built in) which reads `$prefix/grub.cfg`.
pub fn early_config() -> String {
    format!("search --no-floppy --label {BOOT_LABEL} --set root\nset prefix=($root)/{GRUB_DIR}\n")
}

fn missing(grub_dir: &Path, t: &GrubTarget, what: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{} has no {what}: {} boot needs the OS's GRUB {} modules \
         (/usr/lib/grub/{} in the OS tree, e.g. from {}); \
         this OS does not ship them",
        grub_dir.display(),
        t.firmware,
        t.name,
        t.name,
        t.package
    )
}

/// The module list of a core image for `t` from this GRUB directory;
/// errors name the first missing file.
pub fn core_modules(grub_dir: &Path, t: &GrubTarget) -> Result<Vec<String>> {
    if !grub_dir.is_dir() {
        return Err(missing(grub_dir, t, "directory"));
    }
    for f in t.images.iter().chain(&["moddep.lst"]) {
        if !grub_dir.join(f).is_file() {
            return Err(missing(grub_dir, t, f));
        }
    }
    let mut mods = Vec::new();
    for m in t.disk_module.iter().chain(CORE_MODULES) {
        if !grub_dir.join(format!("{m}.mod")).is_file() {
            return Err(missing(grub_dir, t, &format!("{m}.mod")));
        }
        mods.push(m.to_string());
    }
    for m in OPTIONAL_MODULES {
        if grub_dir.join(format!("{m}.mod")).is_file() {
            mods.push(m.to_string());
        }
    }
    Ok(mods)
}

/// The host's grub-mkimage (`grub2-mkimage` on Fedora/RHEL).
pub fn mkimage_program() -> Result<&'static str> {
    ["grub2-mkimage", "grub-mkimage"]
        .into_iter()
        .find(|p| cmd::have(p))
        .context("neither grub2-mkimage nor grub-mkimage is installed (package grub-common / grub2-tools-minimal)")
}

fn read_sector(path: &Path) -> Result<Vec<u8>> {
    let b = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if b.len() != SECTOR as usize {
        bail!(
            "{} is {} bytes, not one {SECTOR}-byte sector; not a GRUB i386-pc image",
            path.display(),
            b.len()
        );
    }
    Ok(b)
}

/// Make the core image: `diskboot.img` + mkimage payload, padded to whole
/// sectors, with the block list pointing at `core_lba + 1`.
fn make_core(mkimage_out: &[u8], diskboot: &[u8], core_lba: u64) -> Result<Vec<u8>> {
    // grub-mkimage -O i386-pc writes diskboot.img first (only its block-list
    // count differs); prepend it ourselves if some version does not.
    let mut core = if mkimage_out.len() > SECTOR as usize
        && mkimage_out[..BLOCKLIST_OFF] == diskboot[..BLOCKLIST_OFF]
    {
        mkimage_out.to_vec()
    } else {
        [diskboot, mkimage_out].concat()
    };
    let sectors = (core.len() as u64).div_ceil(SECTOR);
    core.resize((sectors * SECTOR) as usize, 0);
    let rest = sectors - 1;
    let rest = u16::try_from(rest).context("core image too large for one block list entry")?;
    // The entry below the first must end the list (count 0).
    let term = BLOCKLIST_OFF - BLOCKLIST_SIZE;
    if diskboot[term..BLOCKLIST_OFF].iter().any(|b| *b != 0) {
        bail!("unexpected diskboot.img: its block list area is not empty");
    }
    core[term..BLOCKLIST_OFF].fill(0);
    let b = &mut core[BLOCKLIST_OFF..SECTOR as usize];
    b[0..8].copy_from_slice(&(core_lba + 1).to_le_bytes());
    b[8..10].copy_from_slice(&rest.to_le_bytes());
    b[10..12].copy_from_slice(&BLOCKLIST_SEGMENT.to_le_bytes());
    Ok(core)
}

/// The new MBR boot code: `boot.img` bytes 0..440 with the BPB of the
/// existing sector, the core LBA and the drive-check NOPs.
fn make_boot_code(boot_img: &[u8], old_mbr: &[u8], core_lba: u64) -> Result<Vec<u8>> {
    let mut b = boot_img[..MBR_CODE_END].to_vec();
    if b[DRIVE_CHECK_OFF] != JMP_SHORT && b[DRIVE_CHECK_OFF..DRIVE_CHECK_OFF + 2] != [NOP, NOP] {
        bail!("unexpected boot.img: no short jump at the drive check offset {DRIVE_CHECK_OFF:#x}");
    }
    b[BPB_START..BPB_END].copy_from_slice(&old_mbr[BPB_START..BPB_END]);
    b[KERNEL_SECTOR_OFF..KERNEL_SECTOR_OFF + 8].copy_from_slice(&core_lba.to_le_bytes());
    b[DRIVE_CHECK_OFF] = NOP;
    b[DRIVE_CHECK_OFF + 1] = NOP;
    Ok(b)
}

/// Where a core image finds its config.
pub enum CoreConfig<'a> {
    /// [`early_config`]: the boot filesystem by label, then `/grub2/grub.cfg`.
    BootFs,
    /// A fixed prefix and no embedded config (`()/boot/grub`: the device
    /// GRUB was loaded from, as grub-mkrescue builds a CD's image), plus
    /// modules the device needs (`iso9660`).
    Prefix(&'a str, &'a [&'a str]),
}

/// Build the core image of `t` with the host's grub-mkimage from the OS's
/// modules in `grub_dir`, configured by `how`. Returns the program, the
/// modules asked for and the image.
pub fn make_core_image(
    grub_dir: &Path,
    t: &GrubTarget,
    how: CoreConfig,
    workdir: &Path,
) -> Result<(&'static str, Vec<String>, Vec<u8>)> {
    let mut modules = core_modules(grub_dir, t)?;
    let prog = mkimage_program()?;
    let out = workdir.join(format!("{}-core.img", t.name));
    let mut c = cmd::new(prog, ["-O", t.name, "-d"]);
    c.arg(grub_dir);
    match how {
        CoreConfig::BootFs => {
            let cfg = workdir.join(format!("{}-early.cfg", t.name));
            std::fs::write(&cfg, early_config())
                .with_context(|| format!("writing {}", cfg.display()))?;
            // -p is required by grub-mkimage; the embedded config replaces it.
            c.arg("-p").arg(format!("/{GRUB_DIR}")).arg("-c").arg(&cfg);
        }
        CoreConfig::Prefix(prefix, extra) => {
            for m in extra {
                if !grub_dir.join(format!("{m}.mod")).is_file() {
                    return Err(missing(grub_dir, t, &format!("{m}.mod")));
                }
                modules.push(m.to_string());
            }
            c.arg("-p").arg(prefix);
        }
    }
    c.arg("-o").arg(&out);
    c.args(&modules);
    cmd::run(&mut c).with_context(|| format!("building the GRUB {} core image", t.name))?;
    let payload = std::fs::read(&out).with_context(|| format!("reading {}", out.display()))?;
    Ok((prog, modules, payload))
}

/// Install GRUB for BIOS: core image into the BIOS-BOOT partition of
/// `layout`, `boot.img` into the MBR boot code area. The GPT (and its
/// protective MBR from byte 440 on) must already be written or be written
/// later; neither is touched. `grub_dir` is the OS's `/usr/lib/grub/i386-pc`,
/// `workdir` a scratch directory.
pub fn install_bios(
    disk: &File,
    layout: &Layout,
    grub_dir: &Path,
    workdir: &Path,
) -> Result<BiosStats> {
    if layout.sector_size != SECTOR {
        bail!(
            "BIOS boot needs 512-byte sectors; this disk has {}-byte sectors",
            layout.sector_size
        );
    }
    let part = layout
        .parts
        .iter()
        .find(|p| p.spec.label == "BIOS-BOOT")
        .context("the layout has no BIOS-BOOT partition")?;
    let (prog, modules, payload) =
        make_core_image(grub_dir, &I386_PC, CoreConfig::BootFs, workdir)?;
    let boot_img = read_sector(&grub_dir.join("boot.img"))?;
    let diskboot = read_sector(&grub_dir.join("diskboot.img"))?;

    let core_lba = part.start / SECTOR;
    let core = make_core(&payload, &diskboot, core_lba)?;
    let capacity = part.size / SECTOR;
    let core_sectors = core.len() as u64 / SECTOR;
    if core_sectors > capacity {
        bail!(
            "the GRUB core image is {} bytes ({core_sectors} sectors) and does not fit the \
             {capacity}-sector BIOS-BOOT partition",
            core.len()
        );
    }
    let mut old_mbr = vec![0u8; SECTOR as usize];
    disk.read_at(&mut old_mbr, 0)
        .context("reading the MBR of the disk")?;
    let code = make_boot_code(&boot_img, &old_mbr, core_lba)?;

    disk.write_at(&core, part.start)
        .and_then(|_| disk.write_at(&code, 0))
        .context("writing GRUB to the disk")?;
    let stats = BiosStats {
        mkimage: prog.to_string(),
        modules,
        core_bytes: payload.len() as u64,
        core_sectors,
        core_lba,
        capacity_sectors: capacity,
    };
    tracing::debug!("GRUB BIOS installed: {stats:?}");
    Ok(stats)
}

/// Copy the OS's GRUB modules and lists (`*.mod`, `*.lst`) to `dest`
/// (`<boot fs>/grub2/i386-pc`), as grub2-install does on CoreOS, so `insmod`
/// and command autoloading work for modules not built into the core image.
/// Returns the number of files copied.
pub fn copy_modules(grub_dir: &Path, dest: &Path) -> Result<usize> {
    std::fs::create_dir_all(dest).with_context(|| format!("creating {}", dest.display()))?;
    let mut n = 0;
    let mut ents: Vec<_> = std::fs::read_dir(grub_dir)
        .with_context(|| format!("reading {}", grub_dir.display()))?
        .filter_map(|e| e.ok())
        .collect();
    ents.sort_by_key(|e| e.file_name());
    for e in ents {
        let name = e.file_name();
        let s = name.to_string_lossy();
        if (s.ends_with(".mod") || s.ends_with(".lst")) && e.path().is_file() {
            std::fs::copy(e.path(), dest.join(&name))
                .with_context(|| format!("copying {} to {}", e.path().display(), dest.display()))?;
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
pub(crate) mod tests;
