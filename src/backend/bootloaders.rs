//! The bootloaders, from the deployed OS tree, as the arch boots: the ESP
//! (the OS's EFI GRUB with its stub config, and the 4K-sector ESP when
//! metal4k is planned), GRUB's BIOS boot code, the PReP partition, and
//! bootupd's state. In: the base disk being built, its layout, the
//! deployment and the mounted boot filesystem; out: [`Installed`].
use super::job::*;
use crate::disk::{bios, bootupd, derive, grubcfg, layout::Layout};
use crate::fs::fat as esp;
use anyhow::{Context, Result};
use std::fs::File;
use std::path::{Path, PathBuf};

/// The ESP's GRUB vendor directory and the files put beside the OS's EFI
/// tree (GRUB's stub config).
pub(super) type EspFiles = (String, Vec<(String, Vec<u8>)>);

/// What the bootloader step installed.
pub(super) struct Installed {
    /// The ESP's GRUB vendor directory and the files put beside the OS's
    /// EFI tree, on arches that boot EFI.
    pub(super) efi: Option<EspFiles>,
    /// The 4K-sector ESP, when asked for.
    pub(super) esp4k: Option<PathBuf>,
    /// bootupd's static GRUB configs of the OS, when it ships them.
    pub(super) static_grub: Option<bootupd::StaticGrub>,
}

impl DiskJob {
    /// Install the bootloaders on `file` (laid out as `layout`) from the
    /// deployment `tree`, with `/boot` mounted at `boot`.
    pub(super) fn install_bootloaders(
        &self,
        file: &File,
        layout: &Layout,
        tree: &Path,
        boot: &Path,
    ) -> Result<Installed> {
        let d = &self.disk;
        let boots_with = crate::platforms::arch_boot(d.arch);
        let efi_src = tree.join(OS_EFI_DIR);
        let static_grub = match &self.bootupd {
            Some(_) => bootupd::StaticGrub::read(tree)?,
            None => None,
        };
        let (efi, esp4k) = if boots_with.efi {
            self.install_esp(file, layout, &efi_src, static_grub.as_ref())?
        } else {
            (None, None)
        };
        if self.bios {
            let grub = tree.join(OS_GRUB_BIOS_DIR);
            bios::install_bios(file, layout, &grub, &self.work)?;
            bios::copy_modules(&grub, &boot.join(derive::GRUB_DIR).join("i386-pc"))?;
        }
        if boots_with.prep {
            // The same bytes serve 512- and 4096-byte-sector disks: PReP
            // sits at the same byte offset on both.
            let grub = tree.join(crate::disk::prep::OS_GRUB_OF_DIR);
            crate::disk::prep::install_prep(file, layout, &grub, &self.work)?;
            bios::copy_modules(
                &grub,
                &boot
                    .join(derive::GRUB_DIR)
                    .join(bios::POWERPC_IEEE1275.name),
            )?;
        }
        if let Some(bj) = &self.bootupd {
            let efi_tree = efi.as_ref().map(|_| efi_src.as_path());
            let bios = self.bios || boots_with.prep;
            self.write_bootupd(bj, tree, efi_tree, bios, boot, static_grub.is_some())?;
        }
        Ok(Installed {
            efi,
            esp4k,
            static_grub,
        })
    }

    /// The ESP in its partition of `file`, and the 4K-sector ESP image
    /// when metal4k is planned: the OS's EFI tree and GRUB's stub config
    /// next to the vendor GRUB.
    fn install_esp(
        &self,
        file: &File,
        layout: &Layout,
        efi_src: &Path,
        static_grub: Option<&bootupd::StaticGrub>,
    ) -> Result<(Option<EspFiles>, Option<PathBuf>)> {
        let vendor = crate::disk::efi::vendor_dir(efi_src).context("the OS's EFI GRUB")?;
        // bootupd copies grub-static-efi.cfg next to the vendor GRUB.
        let stub_cfg = match static_grub {
            Some(g) => g.efi.clone(),
            None => grubcfg::efi_stub_cfg().into_bytes(),
        };
        let stub = vec![(format!("EFI/{vendor}/grub.cfg"), stub_cfg)];
        let esp_p = layout.part("EFI-SYSTEM").clone();
        let esp_opts = esp::EspOptions {
            size: esp_p.size,
            sector_size: 512,
            volume_id: ESP_VOLUME_ID,
            label: "EFI-SYSTEM",
            efi_src,
            extra: &stub,
        };
        esp::build_esp(
            esp::EspTarget::Region {
                disk: file,
                offset: esp_p.start,
            },
            &esp_opts,
        )?;
        let esp4k = if self.esp4k {
            let p = self.work.join("esp4k.img");
            let opts = esp::EspOptions {
                sector_size: 4096,
                ..esp_opts
            };
            esp::build_esp(esp::EspTarget::Image(&p), &opts)?;
            Some(p)
        } else {
            None
        };
        Ok((Some((vendor, stub)), esp4k))
    }

    /// `/boot/bootupd-state.json` (and, with static configs, `grubenv`) as
    /// `bootupctl backend install [--with-static-configs]` writes them: EFI
    /// when the disk has an ESP (`efi_src`: the OS's EFI tree on it), BIOS
    /// when GRUB's BIOS or PReP boot code was installed (bootupd's BIOS
    /// component covers both). The metadata was checked before the build.
    fn write_bootupd(
        &self,
        bj: &BootupdJob,
        tree: &Path,
        efi_src: Option<&Path>,
        bios_installed: bool,
        boot: &Path,
        static_configs: bool,
    ) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let read = |rel: &str| -> Result<Option<serde_json::Value>> {
            let p = tree.join(rel);
            match std::fs::read(&p) {
                Ok(raw) => Ok(Some(bootupd::parse_metadata(&raw, &format!("/{rel}"))?)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
            }
        };
        let efi = match efi_src {
            Some(_) => read(bootupd::EFI_JSON)?,
            None => None,
        };
        let bios = if bios_installed {
            read(bootupd::BIOS_JSON)?
        } else {
            None
        };
        let efi = match (&efi, efi_src) {
            (Some(m), Some(src)) => Some((m, bootupd::filetree(src)?)),
            _ => None,
        };
        let state = bootupd::state_json(&bootupd::State {
            efi,
            bios: bios.as_ref(),
            static_configs: static_configs.then(|| bootupd::static_configs_meta(bj.timestamp)),
        });
        let p = boot.join(bootupd::STATE_FILE);
        std::fs::write(&p, state).with_context(|| format!("writing {}", p.display()))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644))?;
        if static_configs {
            let dir = boot.join(derive::GRUB_DIR);
            std::fs::create_dir_all(&dir)?;
            let env = dir.join("grubenv");
            if !env.exists() {
                std::fs::write(&env, bootupd::grubenv())
                    .with_context(|| format!("writing {}", env.display()))?;
                std::fs::set_permissions(
                    &env,
                    std::fs::Permissions::from_mode(bootupd::GRUB_FILE_MODE),
                )?;
            }
        }
        Ok(())
    }
}
