//! The base disk's file, its GPT and its root and boot filesystems (made
//! with the OS's mkfs options for its kernel), mounted for the deploy, the
//! empty root labelled before the boot filesystem covers its mount point.
//! In: the job's sizes, the OS's labeller; out: the open disk file, its
//! layout and the mounts.
use super::job::*;
use crate::disk::selinux::Labeller;
use crate::disk::{
    gpt,
    layout::{Layout, DISK_GUID},
    mkfs,
};
use crate::sys::loopback::{LoopDevice, Mounted};
use crate::util::{cancel, cmd};
use anyhow::{ensure, Context, Result};
use std::fs::File;
use std::path::Path;

impl DiskJob {
    /// The base disk file at `path`, its size the plan's, with its GPT.
    pub(super) fn partition(&self, path: &Path) -> Result<(File, Layout)> {
        let d = &self.disk;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .with_context(|| format!("creating {}", path.display()))?;
        file.set_len(d.metal_size)?;
        let layout = Layout::new(&d.arch, d.metal_size, 512)?;
        ensure!(
            layout.part("root").size == d.root_size,
            "root partition size differs from the plan"
        );
        gpt::write(&mut file, &layout, DISK_GUID)?;
        Ok((file, layout))
    }

    /// The root and boot filesystems made (the OS's mkfs options for its
    /// kernel) and mounted: root at `mnt`, boot at `mnt/boot`. With the
    /// OS's `labeller`, the empty root, its `/boot` directory included, is
    /// labelled in between (osbuild's `org.osbuild.selinux` on the tree
    /// before `ostree admin init-fs`; cosa labels the root filesystem with
    /// boot unmounted "because we want to label the directory mount
    /// point"): once boot is mounted, that directory is out of reach, and
    /// a node's `/sysroot/boot` would have no label. Returns the mounts and
    /// how many files were labelled.
    pub(super) fn make_filesystems(
        &self,
        path: &Path,
        layout: &Layout,
        labeller: Option<&Labeller>,
    ) -> Result<(Mounted, Mounted, usize)> {
        let root_p = layout.part("root").clone();
        let boot_p = layout.part("boot").clone();
        let kernel = &self.kernel_version;
        let root_dev = LoopDevice::attach(path, root_p.start, root_p.size, 512)?;
        cancel::pause_point("mkfs")?;
        cmd::run(&mut mkfs::command(&root_p.spec, root_dev.path(), kernel)?)
            .context("making the root filesystem")?;
        let boot_dev = LoopDevice::attach(path, boot_p.start, boot_p.size, 512)?;
        cmd::run(&mut mkfs::command(&boot_p.spec, boot_dev.path(), kernel)?)
            .context("making the boot filesystem")?;
        let mnt = self.work.join("mnt");
        let root_m = Mounted::new(root_dev, &mnt, "xfs", ROOT_MOUNT_OPTIONS)?;
        std::fs::create_dir_all(mnt.join("boot"))?;
        let labelled = match labeller {
            Some(l) => l.label(root_m.path(), "/")?,
            None => 0,
        };
        let boot_m = Mounted::new(boot_dev, &mnt.join("boot"), "ext4", "rw")?;
        Ok((root_m, boot_m, labelled))
    }
}
