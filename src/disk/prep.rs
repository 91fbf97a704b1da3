//! Open Firmware boot on ppc64le (docs/contract.md §3.2): GRUB's powerpc-ieee1275 core
//! image, built from the OS's own modules, written raw into the PReP boot
//! partition, as bootupd's BIOS component does it on ppc64le
//! (`grub2-install --target=powerpc-ieee1275 --no-nvram <PReP partition>`,
//! which writes `core.elf` to the partition with `dd`). SLOF and PowerVM
//! find the PReP partition by its GPT type and load the ELF image from it.
//!
//! The core image carries the same early config as the BIOS one (the boot
//! filesystem by label, then `/grub2/grub.cfg`); the module files go to
//! `/grub2/powerpc-ieee1275` on the boot filesystem as grub2-install puts
//! them there.
use super::bios::{self, CoreConfig, POWERPC_IEEE1275};
use super::layout::{Layout, PREP_LABEL};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Where the OS ships the modules.
pub const OS_GRUB_OF_DIR: &str = "usr/lib/grub/powerpc-ieee1275";

/// What was installed.
#[derive(Debug, Clone, Serialize)]
pub struct PrepStats {
    pub mkimage: String,
    pub modules: Vec<String>,
    /// Core image (ELF) size in bytes.
    pub core_bytes: u64,
    /// Byte offset of the PReP partition.
    pub offset: u64,
    /// Bytes available in it.
    pub capacity: u64,
}

/// Write GRUB powerpc-ieee1275 into the PReP partition of `layout` on
/// `disk` (any sector size: the ELF image is read by byte offset). `disk`
/// is the new base disk, so the rest of the partition reads as zeros, as
/// grub2-install wants it.
pub fn install_prep(
    disk: &File,
    layout: &Layout,
    grub_dir: &Path,
    workdir: &Path,
) -> Result<PrepStats> {
    let part = layout
        .find(PREP_LABEL)
        .with_context(|| format!("the disk layout has no {PREP_LABEL} partition"))?;
    let (prog, modules, core) =
        bios::make_core_image(grub_dir, &POWERPC_IEEE1275, CoreConfig::BootFs, workdir)?;
    if !core.starts_with(b"\x7fELF") {
        bail!(
            "grub-mkimage -O {} did not produce an ELF image; cannot install it into PReP",
            POWERPC_IEEE1275.name
        );
    }
    if core.len() as u64 > part.size {
        bail!(
            "the GRUB core image is {} bytes and does not fit the {}-byte {PREP_LABEL} partition",
            core.len(),
            part.size
        );
    }
    disk.write_at(&core, part.start)
        .with_context(|| format!("writing GRUB into the {PREP_LABEL} partition"))?;
    let stats = PrepStats {
        mkimage: prog.to_string(),
        modules,
        core_bytes: core.len() as u64,
        offset: part.start,
        capacity: part.size,
    };
    tracing::debug!("GRUB powerpc-ieee1275 installed: {stats:?}");
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::gpt;
    use crate::disk::layout::{DISK_GUID, MIB};
    use crate::util::arch::Arch;

    /// Without the OS's modules the error names the directory, the target
    /// and where RHCOS ships it.
    #[test]
    fn refuses_an_os_without_powerpc_modules() {
        let work = tempfile::tempdir().unwrap();
        let f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().set_len(1 << 30).unwrap();
        let l = Layout::new(Arch::Ppc64le, 1 << 30, 512).unwrap();
        gpt::write(&mut f.as_file(), &l, DISK_GUID).unwrap();
        let e = format!(
            "{:#}",
            install_prep(f.as_file(), &l, &work.path().join("nope"), work.path()).unwrap_err()
        );
        assert!(
            e.contains("powerpc-ieee1275") && e.contains("grub2-ppc64le-modules"),
            "{e}"
        );
        let x = Layout::new(Arch::X86_64, 1 << 30, 512).unwrap();
        let e = format!(
            "{:#}",
            install_prep(f.as_file(), &x, work.path(), work.path()).unwrap_err()
        );
        assert!(e.contains("no PowerPC-PReP-boot partition"), "{e}");
        assert_eq!(l.part(PREP_LABEL).start, MIB);
    }
}
