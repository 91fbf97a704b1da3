//! The base disk's file, its GPT and its root and boot filesystems (made
//! with the OS's mkfs options for its kernel), mounted for the deploy, the
//! empty root labelled before the boot filesystem covers its mount point.
//! In: the job's sizes, the OS's labeller; out: the open disk file, its
//! layout and the mounts.
use super::job::*;
use crate::disk::selinux::Labeller;
use crate::disk::{
    gpt,
    layout::{Layout, Placed, DISK_GUID},
    mkfs, stage,
};
use crate::sys::loopback::{LoopDevice, Mounted};
use crate::util::{cancel, cmd};
use anyhow::{ensure, Context, Result};
use std::fs::File;
use std::path::{Path, PathBuf};

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
        let layout = Layout::new(d.arch, d.metal_size, 512)?;
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
        let (root_at, boot_at) = self.stage_backing(path, &root_p, &boot_p)?;
        let root_dev = LoopDevice::attach(&root_at.0, root_at.1, root_p.size, 512)?;
        cancel::pause_point("mkfs")?;
        cmd::run(&mut mkfs::command(&root_p.spec, root_dev.path(), kernel)?)
            .context("making the root filesystem")?;
        let boot_dev = LoopDevice::attach(&boot_at.0, boot_at.1, boot_p.size, 512)?;
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

    /// Where the OS is laid down (file, offset): with [`mkfs::Tools`], two
    /// stage files of the partitions' sizes in the work directory, the
    /// base disk's filesystems made from them afterwards
    /// ([`Self::final_filesystems`]); without, the base disk's own
    /// partitions, written by the kernel as the deploy runs.
    fn stage_backing(
        &self,
        disk: &Path,
        root_p: &Placed,
        boot_p: &Placed,
    ) -> Result<((PathBuf, u64), (PathBuf, u64))> {
        if self.mkfs.is_none() {
            return Ok((
                (disk.to_path_buf(), root_p.start),
                (disk.to_path_buf(), boot_p.start),
            ));
        }
        let root = self.stage_root();
        let boot = self.stage_boot();
        drop(crate::io::create_sized(&root, root_p.size)?);
        drop(crate::io::create_sized(&boot, boot_p.size)?);
        Ok(((root, 0), (boot, 0)))
    }

    /// The staged boot filesystem each platform's boot filesystem starts
    /// from (with [`mkfs::Tools`]), else the base disk's boot partition:
    /// (file, offset).
    pub(super) fn boot_source(&self, disk: &Path, layout: &Layout) -> (PathBuf, u64) {
        match &self.mkfs {
            Some(_) => (self.stage_boot(), 0),
            None => (disk.to_path_buf(), layout.part("boot").start),
        }
    }

    fn stage_boot(&self) -> PathBuf {
        self.stage_dir().join(STAGE_BOOT)
    }

    fn stage_root(&self) -> PathBuf {
        self.stage_dir().join(STAGE_ROOT)
    }

    /// The stage files' directory: the tmpfs when the pipeline mounted one.
    fn stage_dir(&self) -> &Path {
        self.stage_dir.as_deref().unwrap_or(&self.work)
    }

    /// The base disk's boot and root filesystems made from the finished
    /// stage (the mounts `root` and `boot`, closed here), in one pass each
    /// by the job's [`mkfs::Tools`] (docs/contract.md §9); without them the
    /// stage is the base disk itself, and the mounts are only closed.
    /// Returns what wrote them, for the console.
    pub(super) fn final_filesystems(
        &self,
        disk: &Path,
        layout: &Layout,
        root: Mounted,
        boot: Mounted,
    ) -> Result<String> {
        let Some(t) = &self.mkfs else {
            boot.close()?;
            root.close()?;
            return Ok("root and boot written by this machine's kernel through loop mounts (not reproducible: no mkfs that makes them from a tree)".into());
        };
        let boot_p = layout.part("boot");
        self.ext4_from(t, boot.path(), disk, boot_p)
            .context("making the boot filesystem from the staged /boot")?;
        boot.close()?;
        let sorted = stage::sorted_links(root.path(), SORTED, self.os_time)?;
        let root_p = layout.part("root");
        // Into a file of the partition's size, then placed into the disk:
        // on a block device mkfs.xfs writes with O_DIRECT, mostly 4 KiB at
        // a time, four times slower through a loop device than into a file
        // (2.7 GB: 24.7 s against 5.7 s).
        let img = self.stage_dir().join(ROOT_IMAGE);
        drop(crate::io::create_sized(&img, root_p.size)?);
        cancel::pause_point("mkfs-from-stage")?;
        cmd::run(&mut mkfs::xfs_from_dir(
            t,
            &root_p.spec,
            &img,
            &sorted.dir,
            &self.kernel_version,
            self.os_time,
        )?)
        .context("making the root filesystem from the staged tree")?;
        if !sorted.immutable.is_empty() {
            cmd::run(&mut mkfs::xfs_set_immutable(t, &img, &sorted.immutable)?)
                .context("setting the immutable flag on the root filesystem")?;
        }
        root.close()?;
        std::fs::remove_file(self.stage_root())
            .with_context(|| format!("removing {}", self.stage_root().display()))?;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(disk)
            .with_context(|| format!("opening {}", disk.display()))?;
        crate::io::place_file(&img, &file, root_p.start)
            .context("placing the root filesystem into the disk")?;
        std::fs::remove_file(&img).with_context(|| format!("removing {}", img.display()))?;
        Ok(format!(
            "root and boot made from the staged tree by {} ({}): {} entries, {} times clamped to the OS's, immutable: {}",
            t.versions,
            t.source,
            sorted.made.len(),
            sorted.clamped,
            match sorted.immutable.is_empty() {
                true => "none".to_string(),
                false => sorted
                    .immutable
                    .iter()
                    .map(|p| format!("/{}", p.display()))
                    .collect::<Vec<_>>()
                    .join(", "),
            }
        ))
    }

    /// `mke2fs -d tree` onto the region `p` of `disk` (or a whole file).
    pub(super) fn ext4_from(
        &self,
        t: &mkfs::Tools,
        tree: &Path,
        disk: &Path,
        p: &Placed,
    ) -> Result<()> {
        let conf = self.work.join("mke2fs.conf");
        std::fs::write(&conf, mkfs::MKE2FS_CONF)
            .with_context(|| format!("writing {}", conf.display()))?;
        let dev = LoopDevice::attach(disk, p.start, p.size, 512)?;
        cmd::run(&mut mkfs::ext4_from_dir(
            t,
            &p.spec,
            dev.path(),
            tree,
            &conf,
            self.os_time,
        )?)?;
        dev.close()
    }
}

/// The staged root and boot filesystems, in the work directory.
const STAGE_ROOT: &str = "stage-root.img";
const STAGE_BOOT: &str = "stage-boot.img";
/// The root filesystem mkfs makes from the staged tree, before it is
/// placed into the disk.
const ROOT_IMAGE: &str = "root.img";
/// The staged root rebuilt in sorted order, inside the staged root.
const SORTED: &str = ".bootimage-gen-sorted";
