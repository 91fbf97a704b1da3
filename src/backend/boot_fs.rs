//! Each platform's boot filesystem: a copy of the base disk's boot
//! partition with the platform's settings applied (its `ignition.platform.id`,
//! kernel arguments and GRUB console commands; on s390x zipl's bootmap
//! written by the OS's zipl), labelled like the rest. In: the base disk and
//! a [`BootSetting`]; out: the boot filesystem image (and zipl's boot record).
use super::job::*;
use crate::disk::selinux::Labeller;
use crate::disk::{derive, layout::Layout, zipl};
use crate::sys::loopback::{LoopDevice, Mounted};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

impl DiskJob {
    /// A copy of the base's boot partition with the platform setting `b`
    /// applied.
    /// On s390x zipl then writes its bootmap into it (for the sector size
    /// of `b`); its boot record for the disk's first sector is returned too.
    /// `sysroot` is the deployment zipl runs from (s390x).
    pub(super) fn boot_image(
        &self,
        base: &DiskOutput,
        b: &BootSetting,
        sysroot: Option<&Path>,
        labeller: Option<&Labeller>,
    ) -> Result<(PathBuf, Option<PathBuf>)> {
        let key = b.key();
        let img = self.work.join(format!("boot-{key}.img"));
        let layout = Layout::new(&self.disk.arch, self.disk.metal_size, 512)?;
        let boot_p = layout.part("boot");
        let part = self.work.join(format!("boot-{key}.img.partial"));
        let file = std::fs::File::open(&base.base)
            .with_context(|| format!("opening {}", base.base.display()))?;
        drop(derive::copy_region(
            &file,
            boot_p.start,
            boot_p.size,
            &part,
        )?);
        let dev = LoopDevice::attach(&part, 0, boot_p.size, 512)?;
        let m = Mounted::new(dev, &self.work.join(format!("mnt-{key}")), "ext4", "rw")?;
        let entries = derive::edit_boot(
            m.path(),
            &base.entries,
            &derive::BootEdit {
                platform_id: &b.platform_id,
                kargs: &b.kargs,
                grub_commands: &b.grub_commands,
                static_grub: base.static_grub.as_ref(),
                grub_script: self.grub_script.as_deref(),
                grub: b.zipl_block_size.is_none(),
            },
        )?;
        let ipl = match b.zipl_block_size {
            Some(bs) => {
                let rec = zipl::install(&zipl::Zipl {
                    sysroot: sysroot.context("zipl needs the deployment mounted")?,
                    boot: m.path(),
                    entries: &entries,
                    block_size: bs,
                    boot_start: boot_p.start,
                    workdir: &self.work,
                })?;
                let p = self.work.join(format!("boot-{key}.ipl"));
                std::fs::write(&p, rec).with_context(|| format!("writing {}", p.display()))?;
                Some(p)
            }
            None => None,
        };
        // The platform's edits are new files: labelled like the rest.
        if let Some(l) = labeller {
            l.label(m.path(), "/boot")?;
        }
        m.close()?;
        std::fs::rename(&part, &img).with_context(|| format!("renaming {}", img.display()))?;
        Ok((img, ipl))
    }
}
