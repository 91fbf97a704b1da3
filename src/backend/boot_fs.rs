//! Each platform's boot filesystem: a copy of the base disk's boot
//! partition with the platform's settings applied (its `ignition.platform.id`,
//! kernel arguments and GRUB console commands; on s390x zipl's bootmap
//! written by the OS's zipl), labelled like the rest. In: the base disk and
//! a [`BootSetting`]; out: the boot filesystem image (and zipl's boot record).
use super::job::*;
use crate::disk::selinux::Labeller;
use crate::disk::{
    derive,
    layout::{Layout, Placed},
    zipl,
};
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
        let layout = Layout::new(self.disk.arch, self.disk.metal_size, 512)?;
        let boot_p = layout.part("boot");
        let part = self.work.join(format!("boot-{key}.img.partial"));
        // The platform's edits go to a copy of the staged boot filesystem
        // (of the base disk's, without mkfs tools).
        let stage = match &self.mkfs {
            Some(_) => self.work.join(format!("boot-{key}.stage")),
            None => part.clone(),
        };
        let (src, offset) = self.boot_source(&base.base, &layout);
        let file =
            std::fs::File::open(&src).with_context(|| format!("opening {}", src.display()))?;
        drop(derive::copy_region(&file, offset, boot_p.size, &stage)?);
        let dev = LoopDevice::attach(&stage, 0, boot_p.size, 512)?;
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
        // The platform's edits are new files: labelled like the rest.
        if let Some(l) = labeller {
            l.label(m.path(), "/boot")?;
        }
        // With mkfs tools, the boot filesystem is made from the edited
        // stage in one pass, and zipl (below) writes into that.
        let m = match &self.mkfs {
            Some(t) => {
                drop(crate::io::create_sized(&part, boot_p.size)?);
                let whole = Placed {
                    spec: boot_p.spec,
                    start: 0,
                    size: boot_p.size,
                };
                self.ext4_from(t, m.path(), &part, &whole)
                    .context("making a platform's boot filesystem from its stage")?;
                m.close()?;
                std::fs::remove_file(&stage)
                    .with_context(|| format!("removing {}", stage.display()))?;
                if b.zipl_block_size.is_none() {
                    std::fs::rename(&part, &img)
                        .with_context(|| format!("renaming {}", img.display()))?;
                    return Ok((img, None));
                }
                // zipl's bootmap lists blocks of this filesystem: written
                // into it by the kernel (the one step left not reproducible).
                let dev = LoopDevice::attach(&part, 0, boot_p.size, 512)?;
                Mounted::new(dev, &self.work.join(format!("mnt-{key}")), "ext4", "rw")?
            }
            None => m,
        };
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
        // zipl's bootmap is a new file: labelled like the rest.
        if let (Some(l), Some(_)) = (labeller, b.zipl_block_size) {
            l.label(m.path(), "/boot")?;
        }
        m.close()?;
        std::fs::rename(&part, &img).with_context(|| format!("renaming {}", img.display()))?;
        Ok((img, ipl))
    }
}
