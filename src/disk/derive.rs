//! Deriving a platform from the base disk: only the boot filesystem changes
//! (kernel arguments in the BLS entries, `console.cfg`, the GRUB menu), plus
//! the partition table when the platform's disk has another size or sector
//! size. Everything else is read from the base disk as it is.
use super::grubcfg::{self, BlsEntry};
use super::layout::{Layout, MIB, TAIL};
use crate::io::view::{file_extents, read_file_at, Patch};
use anyhow::{Context, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// GRUB's directory on the boot filesystem.
pub const GRUB_DIR: &str = "grub2";

/// A platform's boot settings.
pub struct BootEdit<'a> {
    /// `ignition.platform.id` value.
    pub platform_id: &'a str,
    /// The platform's kernel arguments (console etc.).
    pub kargs: &'a [String],
    /// GRUB console commands for `console.cfg`.
    pub grub_commands: &'a [String],
    /// bootupd's static GRUB configs of the OS, when it ships them: they
    /// make `grub.cfg` instead of ours.
    pub static_grub: Option<&'a super::bootupd::StaticGrub>,
    /// image.json `grub-script` (cosa-era OS): the grub.cfg, the console
    /// commands inserted after its console marker, when no static configs.
    pub grub_script: Option<&'a str>,
    /// The disk boots GRUB (every arch but s390x, which IPLs through
    /// zipl): then `console.cfg` and `grub.cfg` are written (osbuild's
    /// `coreos.platform` writes console.cfg only where /boot/grub2 exists).
    pub grub: bool,
}

/// Write a file through a temporary name in the same directory.
fn replace(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().context("path has a parent")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = path.with_extension("tmp-bootimage-gen");
    std::fs::write(&tmp, data).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {}", path.display()))
}

/// Read the BLS entries (relative paths under `boot`).
pub fn read_entries(boot: &Path, entries: &[PathBuf]) -> Result<Vec<(PathBuf, BlsEntry)>> {
    entries
        .iter()
        .map(|p| {
            let full = boot.join(p);
            let text = std::fs::read_to_string(&full)
                .with_context(|| format!("reading {}", full.display()))?;
            let e =
                BlsEntry::parse(&text).with_context(|| format!("parsing {}", full.display()))?;
            Ok((p.clone(), e))
        })
        .collect()
}

/// Apply a platform to the mounted boot filesystem at `boot`. `base` holds
/// the entries as the deployment wrote them (no platform kargs yet).
pub fn edit_boot(boot: &Path, base: &[(PathBuf, BlsEntry)], p: &BootEdit) -> Result<Vec<BlsEntry>> {
    let mut out = Vec::new();
    for (rel, e) in base {
        let mut e = e.clone();
        let mut opts = vec![
            e.options.trim().to_string(),
            format!("ignition.platform.id={}", p.platform_id),
        ];
        opts.extend(p.kargs.iter().cloned());
        e.options = opts
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        replace(&boot.join(rel), e.render().as_bytes())?;
        out.push(e);
    }
    if !p.grub {
        return Ok(out);
    }
    replace(
        &boot.join(GRUB_DIR).join("console.cfg"),
        grubcfg::console_cfg(p.grub_commands).as_bytes(),
    )?;
    let cfg = boot.join(GRUB_DIR).join("grub.cfg");
    match p.static_grub {
        Some(g) => {
            replace(&cfg, g.grub_cfg(&out).as_bytes())?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                &cfg,
                std::fs::Permissions::from_mode(super::bootupd::GRUB_FILE_MODE),
            )?;
        }
        None => match p.grub_script {
            Some(script) => replace(
                &cfg,
                grubcfg::from_script(script, p.grub_commands).as_bytes(),
            )?,
            None => replace(&cfg, grubcfg::boot_grub_cfg(&out).as_bytes())?,
        },
    }
    Ok(out)
}

/// Copy `[offset, offset+len)` of `src` into a new sparse file `dst`
/// (holes stay holes).
pub fn copy_region(src: &File, offset: u64, len: u64, dst: &Path) -> Result<File> {
    let out = crate::io::create_sized(dst, len)?;
    let mut buf = vec![0u8; 4 * MIB as usize];
    for r in file_extents(src, offset..offset + len)? {
        let mut pos = r.start;
        while pos < r.end {
            crate::util::cancel::check()?;
            let n = (r.end - pos).min(buf.len() as u64) as usize;
            read_file_at(src, &mut buf[..n], pos)?;
            out.write_all_at(&buf[..n], pos - offset)
                .with_context(|| format!("writing {}", dst.display()))?;
            pos += n as u64;
        }
    }
    Ok(out)
}

/// The partition-table patches of a platform disk: a sparse file of the
/// platform's disk size holding the protective MBR (with the base's boot
/// code when `bios`), the primary GPT, the backup GPT, and zeros where the
/// base disk's own backup GPT was. `base` is the base disk, `base_len` its
/// size.
pub fn table_patches(
    base: &File,
    base_len: u64,
    layout: &Layout,
    bios: bool,
    ipl: Option<&[u8]>,
    path: &Path,
) -> Result<Vec<Patch>> {
    let disk = layout.disk_size;
    let mut f = crate::io::create_sized(path, disk)?;
    // The head: MBR + GPT up to the first partition; on disks that do not
    // boot BIOS also BIOS-BOOT (if the arch has one), zeroed. The first
    // partitions of other arches (PReP with GRUB, reserved) come from the
    // base disk as they are.
    let first = layout.parts.iter().map(|p| p.start).min().unwrap_or(MIB);
    let head = match layout.find("BIOS-BOOT") {
        Some(b) if !bios => b.start + b.size,
        _ => first,
    };
    if bios {
        let mut b = vec![0u8; head as usize];
        read_file_at(base, &mut b, 0)?;
        f.write_all_at(&b, 0)?;
    }
    // zipl's SCSI boot record (s390x): the MBR's code area, before the
    // partition table (zipl keeps a PC partition table it finds there).
    if let Some(rec) = ipl {
        anyhow::ensure!(
            rec.len() <= super::bios::MBR_CODE_END,
            "zipl's boot record is {} bytes; the MBR holds {}",
            rec.len(),
            super::bios::MBR_CODE_END
        );
        f.write_all_at(rec, 0)?;
    }
    super::gpt::write(&mut f, layout, super::layout::DISK_GUID)
        .with_context(|| format!("writing the partition table to {}", path.display()))?;
    let open = || File::open(path).with_context(|| format!("opening {}", path.display()));
    let mut v = vec![Patch {
        at: 0,
        len: head,
        file: open()?,
        file_offset: 0,
        what: format!("{} (head)", path.display()),
    }];
    let tail_at = disk - TAIL;
    let old_tail = base_len - TAIL;
    if old_tail != tail_at && old_tail < disk {
        v.push(Patch {
            at: old_tail,
            len: TAIL.min(disk - old_tail),
            file: open()?,
            file_offset: old_tail,
            what: format!("{} (old tail)", path.display()),
        });
    }
    v.push(Patch {
        at: tail_at,
        len: TAIL,
        file: open()?,
        file_offset: tail_at,
        what: format!("{} (tail)", path.display()),
    });
    Ok(v)
}
