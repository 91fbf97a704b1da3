//! The live ISO (docs/contract.md §5): the tree in a staging directory, then xorriso
//! (ISO9660 with Rock Ridge and Joliet; primary names in uppercase 8.3 form,
//! which coreos-installer reads), BIOS El Torito with ISOLINUX (no-emul,
//! load size 4, boot-info-table; x86_64 only), EFI El Torito with
//! `images/efiboot.img`, and the isohybrid MBR + GPT so the file also boots
//! as a USB disk. aarch64 (osbuild `org.osbuild.coreos.live-artifacts.mono`
//! `gen_live_artifacts`): EFI El Torito alone, no ISOLINUX binaries (the
//! menu templates, isolinux.cfg included, are copied as on every arch).
use super::{Rendered, IGNITION_IMG_SIZE};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Where syslinux packages put their BIOS files: Debian (`isolinux`,
/// `syslinux-common`) and Fedora/RHEL (`syslinux`).
const SYSLINUX_DIRS: &[&str] = &[
    "/usr/lib/ISOLINUX",
    "/usr/lib/syslinux/modules/bios",
    "/usr/lib/syslinux/bios",
    "/usr/share/syslinux",
    "/usr/lib/syslinux",
];
pub const ISOLINUX_BIN: &str = "isolinux.bin";
pub const LDLINUX_C32: &str = "ldlinux.c32";
pub const ISOHDPFX_BIN: &str = "isohdpfx.bin";
/// COM32 libraries the menu modules load.
const C32_LIBS: &[&str] = &["libcom32.c32", "libutil.c32"];
/// El Torito boot catalog and images, in the ISO.
pub const BOOT_CAT: &str = "isolinux/boot.cat";
/// The catalog of an EFI-only ISO: genisoimage's default name, as upstream
/// leaves it.
pub const BOOT_CAT_EFI_ONLY: &str = "boot.catalog";

pub const ISOLINUX_IN_ISO: &str = "isolinux/isolinux.bin";
pub const EFIBOOT_IN_ISO: &str = "images/efiboot.img";
/// FAT label of efiboot.img (not the ISO's volume id, so that a search by
/// the volume id finds the ISO, not this image).
pub const EFIBOOT_LABEL: &str = "EFIBOOT";

/// The host's ISOLINUX files.
#[derive(Debug, Clone)]
pub struct Syslinux {
    pub isolinux_bin: PathBuf,
    pub ldlinux_c32: PathBuf,
    pub isohdpfx_bin: PathBuf,
}

fn find_host_file(name: &str) -> Option<PathBuf> {
    SYSLINUX_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

impl Syslinux {
    /// Find isolinux.bin, ldlinux.c32 and isohdpfx.bin on the host.
    pub fn find() -> Result<Syslinux> {
        let mut missing = Vec::new();
        let mut get = |n: &str| {
            let p = find_host_file(n);
            if p.is_none() {
                missing.push(n.to_string());
            }
            p.unwrap_or_default()
        };
        let s = Syslinux {
            isolinux_bin: get(ISOLINUX_BIN),
            ldlinux_c32: get(LDLINUX_C32),
            isohdpfx_bin: get(ISOHDPFX_BIN),
        };
        if !missing.is_empty() {
            bail!(
                "the live ISO boots BIOS machines with ISOLINUX, but {} not found on this host (looked in {}); install the syslinux packages (Debian: isolinux syslinux-common; Fedora: syslinux)",
                missing.join(", "),
                SYSLINUX_DIRS.join(", ")
            );
        }
        Ok(s)
    }

    /// COM32 modules an isolinux.cfg names (`ui vesamenu.c32`, ...), with
    /// the libraries they need; `Err` names a module the host lacks.
    pub fn modules_for(&self, cfg: &str) -> Result<Vec<PathBuf>> {
        let mut names: Vec<String> = cfg
            .split_whitespace()
            .filter(|w| w.ends_with(".c32") && !w.contains('/'))
            .map(|w| w.to_ascii_lowercase())
            .filter(|w| w != LDLINUX_C32)
            .collect();
        if !names.is_empty() {
            names.extend(C32_LIBS.iter().map(|s| s.to_string()));
        }
        names.sort();
        names.dedup();
        names
            .iter()
            .map(|n| {
                find_host_file(n).with_context(|| {
                    format!(
                        "the ISOLINUX menu uses {n}, which is not on this host (looked in {}); install syslinux-common / syslinux",
                        SYSLINUX_DIRS.join(", ")
                    )
                })
            })
            .collect()
    }
}

/// What goes into the ISO.
pub struct IsoInput<'a> {
    pub volid: &'a str,
    pub kernel: &'a Path,
    pub initramfs: &'a Path,
    pub rootfs: &'a Path,
    pub menus: &'a Rendered,
    /// How machines boot the ISO.
    pub boot: IsoBoot<'a>,
    /// Seconds since the epoch for the volume dates (reproducible output).
    pub mtime: i64,
    /// `coreos/features.json`.
    pub features: &'a [u8],
}

/// How the ISO boots.
pub enum IsoBoot<'a> {
    /// UEFI from `images/efiboot.img` (El Torito), plus BIOS with ISOLINUX
    /// when given (x86_64; every other EFI arch boots EFI only).
    Efi {
        efiboot: &'a Path,
        syslinux: Option<&'a Syslinux>,
    },
    /// Open Firmware (ppc64le: SLOF, PowerVM): the CHRP boot files made by
    /// [`of_boot_tree`] in this directory, merged into the ISO's root.
    OpenFirmware { tree: &'a Path },
}

impl IsoBoot<'_> {
    fn syslinux(&self) -> Option<&Syslinux> {
        match self {
            IsoBoot::Efi { syslinux, .. } => *syslinux,
            IsoBoot::OpenFirmware { .. } => None,
        }
    }
}

/// Where Open Firmware finds the CHRP boot script and GRUB (the paths
/// grub-mkrescue uses for powerpc-ieee1275, which osbuild runs for ppc64le).
pub const OF_BOOTINFO: &str = "ppc/bootinfo.txt";
pub const OF_GRUB_ELF: &str = "boot/grub/powerpc.elf";
const OF_MODULE_DIR: &str = "boot/grub/powerpc-ieee1275";
/// The prefix of the CD's core image: the device GRUB was loaded from.
const OF_PREFIX: &str = "()/boot/grub";
/// What the CD's core image reads besides the disk modules.
const OF_CD_MODULES: &[&str] = &["iso9660", "part_msdos", "part_apple"];

/// The Open Firmware boot files of the ISO, as grub-mkrescue lays them out
/// for powerpc-ieee1275 (GRUB `util/grub-mkrescue.c`), from the OS's GRUB
/// modules in `grub_dir`, into `dst`: `boot/grub/powerpc.elf` (a core image
/// with prefix `()/boot/grub`), the modules in `boot/grub/powerpc-ieee1275/`,
/// `ppc/bootinfo.txt` (the OS's, whose boot script loads powerpc.elf) and
/// the empty `ppc/chrp/`. grub-mkrescue's HFS+/Apple Partition Map parts
/// (for PowerMacs) are left out: POWER firmware reads ISO 9660.
pub fn of_boot_tree(grub_dir: &Path, dst: &Path, workdir: &Path) -> Result<()> {
    use crate::disk::bios::{self, CoreConfig, POWERPC_IEEE1275};
    let (_, _, core) = bios::make_core_image(
        grub_dir,
        &POWERPC_IEEE1275,
        CoreConfig::Prefix(OF_PREFIX, OF_CD_MODULES),
        workdir,
    )?;
    put(dst, OF_GRUB_ELF, &core)?;
    bios::copy_modules(grub_dir, &dst.join(OF_MODULE_DIR))?;
    let info = grub_dir.join("bootinfo.txt");
    let text = std::fs::read(&info).with_context(|| {
        format!(
            "reading {} (GRUB's CHRP boot script, shipped with the powerpc-ieee1275 modules)",
            info.display()
        )
    })?;
    let want = OF_GRUB_ELF.replace('/', "\\");
    if !String::from_utf8_lossy(&text).contains(&format!("\\{want}")) {
        bail!(
            "{}: its boot-script does not load \\{want}, where the ISO's GRUB is",
            info.display()
        );
    }
    put(dst, OF_BOOTINFO, &text)?;
    std::fs::create_dir_all(dst.join("ppc/chrp"))?;
    Ok(())
}

/// Hard-link `src` to `dst` (same filesystem), else copy it.
fn link_or_copy(src: &Path, dst: &Path) -> Result<()> {
    if std::fs::hard_link(src, dst).is_err() {
        std::fs::copy(src, dst)
            .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
    }
    Ok(())
}

fn put(root: &Path, rel: &str, data: &[u8]) -> Result<()> {
    let p = root.join(rel);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    std::fs::write(&p, data).with_context(|| format!("writing {}", p.display()))
}

/// Lay the ISO tree (docs/contract.md §5) out in `stage` (an empty directory).
pub fn stage_tree(stage: &Path, i: &IsoInput) -> Result<()> {
    for d in ["images/pxeboot", "coreos"] {
        std::fs::create_dir_all(stage.join(d))?;
    }
    link_or_copy(i.kernel, &stage.join("images/pxeboot/vmlinuz"))?;
    link_or_copy(i.initramfs, &stage.join("images/pxeboot/initrd.img"))?;
    link_or_copy(i.rootfs, &stage.join("images/pxeboot/rootfs.img"))?;
    match &i.boot {
        IsoBoot::Efi { efiboot, .. } => {
            for d in ["isolinux", "EFI"] {
                std::fs::create_dir_all(stage.join(d))?;
            }
            link_or_copy(efiboot, &stage.join(EFIBOOT_IN_ISO))?;
        }
        IsoBoot::OpenFirmware { tree } => copy_into(tree, stage)?,
    }
    let ign = crate::io::create_sized(&stage.join("images/ignition.img"), IGNITION_IMG_SIZE)?;
    drop(ign);
    for f in &i.menus.files {
        put(stage, &f.path, &f.data)?;
    }
    if let Some(sys) = i.boot.syslinux() {
        stage_isolinux(stage, i, sys)?;
    }
    put(stage, "coreos/igninfo.json", &super::igninfo_json())?;
    put(stage, "coreos/kargs.json", &i.menus.kargs_json())?;
    put(stage, "coreos/features.json", i.features)?;
    let md = crate::io::create_sized(
        &stage.join(super::miniso::DATA_FILE),
        super::miniso::DATA_FILE_SIZE,
    )?;
    drop(md);
    Ok(())
}

/// Copy the files and directories of `from` into `to` (merged).
fn copy_into(from: &Path, to: &Path) -> Result<()> {
    for e in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let e = e?;
        let dst = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            std::fs::create_dir_all(&dst)?;
            copy_into(&e.path(), &dst)?;
        } else {
            link_or_copy(&e.path(), &dst)?;
        }
    }
    Ok(())
}

/// ISOLINUX and the COM32 modules its menu names, from the host.
fn stage_isolinux(stage: &Path, i: &IsoInput, sys: &Syslinux) -> Result<()> {
    std::fs::copy(&sys.isolinux_bin, stage.join(ISOLINUX_IN_ISO))
        .context("copying isolinux.bin")?;
    std::fs::copy(
        &sys.ldlinux_c32,
        stage.join("isolinux").join(super::iso::LDLINUX_C32),
    )
    .context("copying ldlinux.c32")?;
    let cfg = i
        .menus
        .files
        .iter()
        .find(|f| f.path == super::ISOLINUX_CFG)
        .with_context(|| {
            format!(
                "the live menu templates have no {} (the BIOS boot menu)",
                super::ISOLINUX_CFG
            )
        })?;
    for m in sys.modules_for(&String::from_utf8_lossy(&cfg.data))? {
        let name = m.file_name().expect("file name");
        let dst = stage.join("isolinux").join(name);
        if !dst.exists() {
            std::fs::copy(&m, &dst).with_context(|| format!("copying {}", m.display()))?;
        }
    }
    Ok(())
}

/// xorriso's arguments for the staged tree.
pub fn xorriso_args(stage: &Path, out: &Path, i: &IsoInput) -> Vec<std::ffi::OsString> {
    let date = chrono::DateTime::from_timestamp(i.mtime.max(0), 0)
        .unwrap_or_default()
        .format("%Y%m%d%H%M%S00")
        .to_string();
    let mut a: Vec<std::ffi::OsString> = Vec::new();
    let s = |a: &mut Vec<std::ffi::OsString>, v: &[&str]| a.extend(v.iter().map(|x| x.into()));
    s(&mut a, &["-as", "mkisofs", "-quiet"]);
    s(&mut a, &["-V", i.volid, "-volset", i.volid]);
    // Every date the ISO records is the OS's: the volume's, and every
    // file's and directory's (else the staged tree's, written by the
    // clock; xorriso writes them in the local time zone, which TZ=UTC
    // below pins too).
    s(&mut a, &[&format!("--modification-date={date}")]);
    s(&mut a, &["--set_all_file_dates", &date]);
    let (efiboot, syslinux) = match &i.boot {
        IsoBoot::Efi { efiboot, syslinux } => (efiboot, syslinux),
        // grub-mkrescue's ISO for powerpc-ieee1275 (osbuild ppc64le):
        // Rock Ridge with rationalised modes, no Joliet, system id PPC, and
        // a protective MBR; Open Firmware runs ppc/bootinfo.txt.
        IsoBoot::OpenFirmware { .. } => {
            s(
                &mut a,
                &["-r", "-sysid", "PPC", "--protective-msdos-label", "-o"],
            );
            a.push(out.as_os_str().to_owned());
            a.push(stage.as_os_str().to_owned());
            return a;
        }
    };
    s(&mut a, &["-R", "-J", "-joliet-long"]);
    match syslinux {
        Some(sys) => {
            s(
                &mut a,
                &[
                    "-b",
                    ISOLINUX_IN_ISO,
                    "-c",
                    BOOT_CAT,
                    "-no-emul-boot",
                    "-boot-load-size",
                    "4",
                    "-boot-info-table",
                ],
            );
            // Hybrid: ISOLINUX's MBR code, the ISO as partition 1 from 32
            // KiB on (past the GPT), and a copy of efiboot.img appended as
            // partition 2 of type EFI in both the MBR and the GPT.
            // (`-isohybrid-gpt-basdat` would nest the EFI partition inside
            // the ISO one, which sgdisk rejects as overlapping.)
            a.push("-isohybrid-mbr".into());
            a.push(sys.isohdpfx_bin.clone().into_os_string());
        }
        // EFI only: efiboot.img is the one El Torito image. It is also
        // appended as an MBR partition of type EFI (as on x86_64, where the
        // minimal ISO's packer finds it), so that firmware that boots a USB
        // disk only from an ESP finds one. Upstream's aarch64 ISO has no
        // partition table; EDK II boots El Torito from a disk either way.
        None => s(&mut a, &["-c", BOOT_CAT_EFI_ONLY]),
    }
    s(
        &mut a,
        &["-partition_offset", "16", "-append_partition", "2", "0xef"],
    );
    let _ = efiboot;
    a.push(stage.join(EFIBOOT_IN_ISO).into_os_string());
    if syslinux.is_some() {
        a.push("-eltorito-alt-boot".into());
    }
    s(&mut a, &["-e", EFIBOOT_IN_ISO, "-no-emul-boot", "-o"]);
    a.push(out.as_os_str().to_owned());
    a.push(stage.as_os_str().to_owned());
    a
}

/// Stage the tree in `stage` and write the ISO to `out` (an existing,
/// empty file or a new path). `coreos/miniso.dat` is reserved, empty.
pub fn build_iso(stage: &Path, out: &Path, i: &IsoInput) -> Result<()> {
    stage_tree(stage, i).context("laying out the ISO tree")?;
    xorriso(stage, out, i)
}

fn xorriso(stage: &Path, out: &Path, i: &IsoInput) -> Result<()> {
    let mut c = crate::util::cmd::new("xorriso", xorriso_args(stage, out, i));
    c.env("TZ", "UTC");
    crate::util::cmd::run(&mut c)
        .with_context(|| format!("writing the live ISO {}", out.display()))?;
    Ok(())
}

/// The minimal ISO and `coreos/miniso.dat` (docs/contract.md §5.1, osbuild
/// `gen_live_artifacts`): after [`build_iso`] wrote `full` from `stage`,
/// write the same tree without `images/pxeboot/rootfs.img` and
/// `coreos/miniso.dat` to `minimal` (same options, hybrid the same way),
/// then fill `full`'s miniso.dat so that `coreos-installer iso extract
/// minimal-iso` rebuilds `minimal`. `minimal` is left for the caller.
pub fn add_minimal_iso(
    stage: &Path,
    full: &Path,
    minimal: &Path,
    i: &IsoInput,
    app_version: &str,
) -> Result<super::miniso::Stats> {
    for rel in ["images/pxeboot/rootfs.img", super::miniso::DATA_FILE] {
        let p = stage.join(rel);
        std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
    }
    xorriso(stage, minimal, i).context("writing the minimal ISO")?;
    let (data, st) = super::miniso::pack(full, minimal, app_version)
        .context("packing the minimal ISO into coreos/miniso.dat")?;
    super::miniso::embed(full, &data)?;
    Ok(st)
}

/// Size for the FAT `efiboot.img` holding `efi_src` and `extra` bytes:
/// every file rounded up to 32 KiB clusters, plus 1 MiB, in whole MiB.
pub fn efiboot_size(efi_src: &Path, extra: u64) -> Result<u64> {
    const ROUND: u64 = 32 << 10;
    let mut total = extra.div_ceil(ROUND) * ROUND;
    let mut stack = vec![efi_src.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let e = e?;
            let md = e.metadata()?;
            if md.is_dir() {
                stack.push(e.path());
            }
            total += md.len().div_ceil(ROUND) * ROUND + ROUND;
        }
    }
    Ok((total + (1 << 20)).div_ceil(1 << 20) * (1 << 20))
}

/// The EFI tree for `efiboot.img`, copied from the OS's `efi_src` into
/// `dst`: as booted from removable media, firmware runs `EFI/BOOT/BOOTX64.EFI`
/// (GRUB itself, or shim, which loads `grubx64.efi` from its own directory).
/// When `EFI/BOOT` has no GRUB of its own (a shim layout, as on RHCOS) the
/// vendor directory's `grub*.efi` and `mm*.efi` are copied next to shim, and
/// shim's fallback `fb*.efi` is left out (it would register boot entries
/// and reboot instead of booting the ISO).
pub fn efiboot_tree(efi_src: &Path, vendor: &str, dst: &Path) -> Result<()> {
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let from = efi_src.join(&rel);
        std::fs::create_dir_all(dst.join(&rel))?;
        for e in std::fs::read_dir(&from).with_context(|| format!("reading {}", from.display()))? {
            let e = e?;
            let r = rel.join(e.file_name());
            let ft = e.file_type()?;
            if ft.is_dir() {
                stack.push(r);
            } else if ft.is_file() {
                let name = e.file_name().to_string_lossy().to_ascii_lowercase();
                let in_boot = rel.to_str().is_some_and(|d| d.eq_ignore_ascii_case("BOOT"));
                if in_boot && name.starts_with("fb") && name.ends_with(".efi") {
                    continue;
                }
                std::fs::copy(e.path(), dst.join(&r))
                    .with_context(|| format!("copying {}", e.path().display()))?;
            }
        }
    }
    let boot = std::fs::read_dir(dst)?
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().eq_ignore_ascii_case("BOOT"))
        .map(|e| e.path())
        .unwrap_or_else(|| dst.join("BOOT"));
    std::fs::create_dir_all(&boot)?;
    let is_efi = |n: &str, prefix: &str| {
        let n = n.to_ascii_lowercase();
        n.starts_with(prefix) && n.ends_with(".efi")
    };
    let has_grub = std::fs::read_dir(&boot)?
        .filter_map(|e| e.ok())
        .any(|e| is_efi(&e.file_name().to_string_lossy(), "grub"));
    if !has_grub {
        for e in std::fs::read_dir(dst.join(vendor))? {
            let e = e?;
            let n = e.file_name().to_string_lossy().into_owned();
            if e.file_type()?.is_file() && (is_efi(&n, "grub") || is_efi(&n, "mm")) {
                std::fs::copy(e.path(), boot.join(&n))?;
            }
        }
    }
    Ok(())
}

/// The `grub.cfg` in `efiboot.img` next to the OS's EFI GRUB: find the ISO
/// by its volume id and continue with the ISO's own menu (which holds the
/// karg embed area that coreos-installer edits).
pub fn efiboot_stub_cfg(volid: &str, vendor: &str) -> String {
    format!(
        "\
# Live ISO EFI stub (written by bootimage-gen): find the ISO by its volume id
# and continue with its menu.
search --no-floppy --set=root --label '{volid}'
set prefix=($root)/EFI/{vendor}
configfile $prefix/grub.cfg
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn efiboot_tree_for_a_shim_layout() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        for f in [
            "BOOT/BOOTX64.EFI",
            "BOOT/fbx64.efi",
            "redhat/shimx64.efi",
            "redhat/grubx64.efi",
            "redhat/mmx64.efi",
            "redhat/BOOTX64.CSV",
        ] {
            let p = src.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, f).unwrap();
        }
        let dst = d.path().join("dst");
        efiboot_tree(&src, "redhat", &dst).unwrap();
        let mut got: Vec<String> = Vec::new();
        for sub in ["BOOT", "redhat"] {
            for e in std::fs::read_dir(dst.join(sub)).unwrap() {
                got.push(format!(
                    "{sub}/{}",
                    e.unwrap().file_name().to_string_lossy()
                ));
            }
        }
        got.sort();
        assert_eq!(
            got,
            [
                "BOOT/BOOTX64.EFI",
                "BOOT/grubx64.efi",
                "BOOT/mmx64.efi",
                "redhat/BOOTX64.CSV",
                "redhat/grubx64.efi",
                "redhat/mmx64.efi",
                "redhat/shimx64.efi"
            ]
        );
        assert_eq!(
            std::fs::read(dst.join("BOOT/grubx64.efi")).unwrap(),
            b"redhat/grubx64.efi"
        );
    }

    fn out(c: &mut Command) -> String {
        let o = c.output().unwrap();
        assert!(
            o.status.success(),
            "{:?}: {}",
            c,
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// A small ISO from fake payloads, checked with xorriso, isoinfo, sgdisk
    /// and the real coreos-installer (kargs and Ignition embedding).
    #[test]
    fn tiny_iso_is_what_coreos_installer_expects() {
        let Ok(sys) = Syslinux::find() else {
            panic!("syslinux packages missing: run scripts/install-deps.sh");
        };
        let d = tempfile::tempdir().unwrap();
        let p = |n: &str| d.path().join(n);
        std::fs::write(p("vmlinuz"), b"kernel").unwrap();
        std::fs::write(p("initrd"), b"initrd").unwrap();
        std::fs::write(p("rootfs"), b"rootfs").unwrap();
        let efi = p("efi");
        std::fs::create_dir_all(efi.join("BOOT")).unwrap();
        std::fs::create_dir_all(efi.join("vendor")).unwrap();
        std::fs::write(efi.join("BOOT/BOOTX64.EFI"), b"MZ fake").unwrap();
        std::fs::write(efi.join("vendor/grubx64.efi"), b"MZ fake").unwrap();
        // A volume id longer than 32 characters is cut, and the ISO is valid.
        let volid = super::super::volume_id("someos", "1.2.3-a-rather-long-version-string");
        assert_eq!(volid.len(), 32);
        let stub = efiboot_stub_cfg(&volid, "vendor");
        let size = efiboot_size(&efi, stub.len() as u64).unwrap();
        crate::fs::fat::build_esp(
            crate::fs::fat::EspTarget::Image(&p("efiboot.img")),
            &crate::fs::fat::EspOptions {
                size,
                sector_size: 512,
                volume_id: 0x1234_5678,
                label: "EFIBOOT",
                efi_src: &efi,
                extra: &[("EFI/vendor/grub.cfg".into(), stub.into_bytes())],
            },
        )
        .unwrap();
        let kargs = super::super::live_kargs(&["rw".to_string()], &volid).unwrap();
        let menus = super::super::render(
            &super::super::builtin_templates("vendor", "Some OS"),
            &volid,
            "1.2.3",
            &kargs,
        )
        .unwrap();
        let efiboot = p("efiboot.img");
        let i = IsoInput {
            volid: &volid,
            kernel: &p("vmlinuz"),
            initramfs: &p("initrd"),
            rootfs: &p("rootfs"),
            menus: &menus,
            boot: IsoBoot::Efi {
                efiboot: &efiboot,
                syslinux: Some(&sys),
            },
            mtime: 1_700_000_000,
            features: &crate::live::features_json(None),
        };
        let iso = p("live.iso");
        build_iso(&p("stage"), &iso, &i).unwrap();
        // The minimal ISO, packed into coreos/miniso.dat and rebuilt by the
        // real coreos-installer: the same tree without rootfs.img and
        // miniso.dat, kargs without coreos.liveiso (plus the rootfs URL).
        let minimal = p("minimal.iso");
        let st = add_minimal_iso(&p("stage"), &iso, &minimal, &i, "test").unwrap();
        assert!(
            st.data_size <= super::super::miniso::DATA_FILE_SIZE,
            "{st:?}"
        );
        assert!(st.entries >= 8, "{st:?}");
        let extracted = p("extracted.iso");
        out(Command::new("coreos-installer")
            .args([
                "iso",
                "extract",
                "minimal-iso",
                "--rootfs-url",
                "http://10.0.2.2:8080/rootfs.img",
            ])
            .arg(&iso)
            .arg(&extracted));
        let mnames = out(Command::new("isoinfo").arg("-f").arg("-i").arg(&extracted));
        assert!(!mnames.contains("ROOTFS.IMG"), "{mnames}");
        assert!(!mnames.contains("MINISO.DAT"), "{mnames}");
        assert!(mnames.contains("/IMAGES/EFIBOOT.IMG;1"), "{mnames}");
        let k = out(Command::new("coreos-installer")
            .args(["iso", "kargs", "show"])
            .arg(&extracted));
        assert!(!k.contains("coreos.liveiso="), "{k}");
        assert!(
            k.contains("coreos.live.rootfs_url=http://10.0.2.2:8080/rootfs.img"),
            "{k}"
        );
        // Apart from the kargs, the extracted ISO is the minimal one.
        assert_eq!(
            std::fs::metadata(&extracted).unwrap().len(),
            std::fs::metadata(&minimal).unwrap().len()
        );
        let info = out(Command::new("isoinfo").arg("-d").arg("-i").arg(&iso));
        assert!(info.contains(&format!("Volume id: {volid}\n")), "{info}");
        let names = out(Command::new("isoinfo").arg("-f").arg("-i").arg(&iso));
        for n in [
            "/COREOS/IGNINFO.JSO;1",
            "/COREOS/KARGS.JSO;1",
            "/COREOS/FEATURES.JSO;1",
            "/IMAGES/IGNITION.IMG;1",
            "/IMAGES/EFIBOOT.IMG;1",
            "/IMAGES/PXEBOOT/ROOTFS.IMG;1",
            "/IMAGES/PXEBOOT/VMLINUZ.;1",
            "/ISOLINUX/ISOLINUX.BIN;1",
            "/ISOLINUX/LDLINUX.C32;1",
            "/ISOLINUX/ISOLINUX.CFG;1",
        ] {
            assert!(names.lines().any(|l| l == n), "{n} not in\n{names}");
        }
        let et = out(Command::new("xorriso")
            .args(["-indev"])
            .arg(&iso)
            .args(["-report_el_torito", "plain"]));
        assert!(et.contains("El Torito boot img :   1  BIOS"), "{et}");
        assert!(et.contains("El Torito boot img :   2  UEFI"), "{et}");
        let gpt = out(Command::new("sgdisk").arg("-p").arg(&iso));
        assert!(gpt.contains(" EF00 "), "{gpt}");
        let mbr = out(Command::new("fdisk").arg("-l").arg(&iso));
        assert!(mbr.contains("Disklabel type: dos"), "{mbr}");
        // coreos-installer reads the kargs and the Ignition area.
        let ci = "coreos-installer";
        let shown = out(Command::new(ci).args(["iso", "kargs", "show"]).arg(&iso));
        assert_eq!(shown.trim(), menus.kargs);
        out(Command::new(ci)
            .args(["iso", "kargs", "modify", "-a", "foo=bar"])
            .arg(&iso));
        let shown = out(Command::new(ci).args(["iso", "kargs", "show"]).arg(&iso));
        assert_eq!(shown.trim(), format!("{} foo=bar", menus.kargs));
        let def = out(Command::new(ci)
            .args(["iso", "kargs", "show", "--default"])
            .arg(&iso));
        assert_eq!(def.trim(), menus.kargs);
        out(Command::new(ci).args(["iso", "kargs", "reset"]).arg(&iso));
        let shown = out(Command::new(ci).args(["iso", "kargs", "show"]).arg(&iso));
        assert_eq!(shown.trim(), menus.kargs);
        let ign = p("config.ign");
        std::fs::write(&ign, br#"{"ignition":{"version":"3.4.0"}}"#).unwrap();
        out(Command::new(ci)
            .args(["iso", "ignition", "embed", "-i"])
            .arg(&ign)
            .arg(&iso));
        let shown = out(Command::new(ci).args(["iso", "ignition", "show"]).arg(&iso));
        assert_eq!(shown.as_bytes(), std::fs::read(&ign).unwrap());
    }
}
