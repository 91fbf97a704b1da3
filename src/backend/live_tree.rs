//! The live root tree (docs/contract.md §5.1) staged from the base disk without
//! touching it, and the guards that unmount it.
use crate::disk::{
    derive,
    layout::{Layout, Placed},
};
use crate::sys::loopback::{LoopDevice, Mount, Mounted};
use crate::util::cancel;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Where the live root tree comes from: the base disk (its boot partition
/// is copied), the mounted root filesystem and the deployment in it, and
/// the ESP's files (the OS's EFI tree and the stub configs).
pub(super) struct LiveTreeSrc<'a> {
    pub(super) disk: &'a std::fs::File,
    pub(super) layout: &'a Layout,
    pub(super) root: &'a Path,
    pub(super) tree: &'a Path,
    /// The ESP's content, on arches that boot EFI.
    pub(super) efi: Option<LiveEfi<'a>>,
}

/// The ESP of the base disk: the OS's EFI tree, its vendor directory and
/// the stub configs added to it.
pub(super) struct LiveEfi<'a> {
    pub(super) src: &'a Path,
    pub(super) vendor: &'a str,
    pub(super) esp_files: &'a [(String, Vec<u8>)],
}

/// The mounts that make the live root tree; closed in reverse order.
pub(super) struct LiveTreeGuards {
    mounts: Vec<Mount>,
    boot: Option<Mounted>,
    boot_img: PathBuf,
}

impl LiveTreeGuards {
    /// Unmount and detach, reporting errors. After a signal the command
    /// wrapper refuses to run: the guards' own best-effort drops do it.
    pub(super) fn close(mut self) -> Result<()> {
        if cancel::pending().is_some() {
            return Ok(()); // Drop below
        }
        let mut first: Option<anyhow::Error> = None;
        if let Some(b) = self.boot.take() {
            if let Err(e) = b.close() {
                first.get_or_insert(e);
            }
        }
        while let Some(m) = self.mounts.pop() {
            if let Err(e) = m.close() {
                first.get_or_insert(e);
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for LiveTreeGuards {
    /// Innermost first: the boot copy, then the repo config, then the tree.
    fn drop(&mut self) {
        drop(self.boot.take());
        while let Some(m) = self.mounts.pop() {
            drop(m);
        }
        std::fs::remove_file(&self.boot_img).ok();
    }
}

/// The live root tree as osbuild's `mkrootfs_metal` builds it (docs/contract.md §5.1),
/// in `stage`, without touching the base disk: the root filesystem
/// (bind-mounted), `ostree/repo/config` without `readonly=true` (a copy
/// bind-mounted over it), a copy of the boot partition on `/boot` with the
/// kernel and its `.hmac` hardlinked into its top (FIPS boots look there),
/// and the ESP's files in `/boot/efi` (this host's kernel may have no vfat,
/// so they are copied from where the ESP got them).
pub(super) fn live_tree(
    src: &LiveTreeSrc,
    dir: &Path,
    stage: &Path,
    notes: &mut Vec<String>,
) -> Result<LiveTreeGuards> {
    let boot_p = src.layout.part("boot").clone();
    let boot_img = dir.join("live-boot.img");
    let mut g = LiveTreeGuards {
        mounts: Vec::new(),
        boot: None,
        boot_img: boot_img.clone(),
    };
    let res = stage_live_tree(src, dir, stage, &boot_p, &boot_img, &mut g, notes);
    match res {
        Ok(()) => Ok(g),
        Err(e) => {
            let _ = g.close();
            Err(e)
        }
    }
}

/// Make the live root tree in `stage`, each mount kept in `g` as it is made
/// (the caller closes them on an error).
fn stage_live_tree(
    src: &LiveTreeSrc,
    dir: &Path,
    stage: &Path,
    boot_p: &Placed,
    boot_img: &Path,
    g: &mut LiveTreeGuards,
    notes: &mut Vec<String>,
) -> Result<()> {
    mount_root(src.root, dir, stage, g)?;
    let boot = mount_boot_copy(src.disk, boot_p, boot_img, stage, g)?;
    link_kernel(&boot, notes)?;
    // /boot/efi: the ESP's files (arches without an ESP have none).
    let Some(esp) = &src.efi else {
        return Ok(());
    };
    copy_esp(&boot, esp)
}

/// Bind-mount the root filesystem on `stage`, and over its
/// `ostree/repo/config` a copy (in `dir`) without `readonly=true`.
fn mount_root(root: &Path, dir: &Path, stage: &Path, g: &mut LiveTreeGuards) -> Result<()> {
    g.mounts.push(Mount::new(root, stage, "none", "bind")?);
    let cfg = stage.join("ostree/repo/config");
    let text =
        std::fs::read_to_string(&cfg).with_context(|| format!("reading {}", cfg.display()))?;
    if text.lines().any(|l| l.trim() == "readonly=true") {
        let copy = dir.join("repo-config");
        let kept: String = text
            .lines()
            .filter(|l| l.trim() != "readonly=true")
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&copy, kept).with_context(|| format!("writing {}", copy.display()))?;
        g.mounts.push(Mount::new(&copy, &cfg, "none", "bind")?);
    }
    Ok(())
}

/// Copy the base disk's boot partition to `boot_img` and mount the copy on
/// `stage`'s `/boot`; returns where it is mounted.
fn mount_boot_copy(
    disk: &std::fs::File,
    boot_p: &Placed,
    boot_img: &Path,
    stage: &Path,
    g: &mut LiveTreeGuards,
) -> Result<PathBuf> {
    drop(derive::copy_region(
        disk,
        boot_p.start,
        boot_p.size,
        boot_img,
    )?);
    let dev = LoopDevice::attach(boot_img, 0, boot_p.size, 512)?;
    let bm = Mounted::new(dev, &stage.join("boot"), "ext4", "rw")?;
    let boot = bm.path().to_path_buf();
    g.boot = Some(bm);
    Ok(boot)
}

/// Hardlink the deployment's kernel and its `.hmac` into the top of `boot`
/// (a note when there is no `.hmac`).
fn link_kernel(boot: &Path, notes: &mut Vec<String>) -> Result<()> {
    // The kernel and its HMAC, hardlinked from /boot/ostree/<dir>/.
    let ostree_boot = boot.join("ostree");
    let (mut kernels, mut hmacs) = kernel_files(&ostree_boot)?;
    kernels.sort();
    hmacs.sort();
    let k = kernels.first().with_context(|| {
        format!(
            "the deployment put no vmlinuz* under /boot/ostree/*/ (in {})",
            ostree_boot.display()
        )
    })?;
    link_into(boot, k)?;
    match hmacs.first() {
        Some(h) => link_into(boot, h)?,
        None => notes.push("live: the OS's kernel has no .hmac (/usr/lib/modules/<kver>/.vmlinuz.hmac), so the live /boot has the kernel only; osbuild requires one (FIPS boots check it)".to_string()),
    }
    Ok(())
}

/// The `vmlinuz*` and `.*.hmac` files of the directories under
/// `ostree_boot`, unsorted.
fn kernel_files(ostree_boot: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let mut kernels = Vec::new();
    let mut hmacs = Vec::new();
    for d in std::fs::read_dir(ostree_boot)
        .with_context(|| format!("reading {}", ostree_boot.display()))?
    {
        let d = d?.path();
        if !d.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&d)? {
            let f = f?;
            let n = f.file_name().to_string_lossy().into_owned();
            if n.starts_with("vmlinuz") {
                kernels.push(f.path());
            } else if n.starts_with('.') && n.ends_with(".hmac") {
                hmacs.push(f.path());
            }
        }
    }
    Ok((kernels, hmacs))
}

/// Hardlink `p` into `boot` under its own name.
fn link_into(boot: &Path, p: &Path) -> Result<()> {
    let to = boot.join(p.file_name().expect("name"));
    std::fs::hard_link(p, &to)
        .with_context(|| format!("linking {} to {}", p.display(), to.display()))
}

/// Fill `boot`'s `efi/` with the ESP's files: the OS's EFI tree and the
/// stub configs, all mode 0755.
fn copy_esp(boot: &Path, esp: &LiveEfi) -> Result<()> {
    let efi = boot.join("efi");
    std::fs::create_dir_all(efi.join("EFI"))?;
    copy_tree(esp.src, &efi.join("EFI"))?;
    for (rel, data) in esp.esp_files {
        let p = efi.join(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(&p, data).with_context(|| format!("writing {}", p.display()))?;
    }
    open_modes(&efi)
}

/// Set mode 0755 on `top` and everything under it.
fn open_modes(top: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut stack = vec![top.to_path_buf()];
    while let Some(d) = stack.pop() {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755))?;
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                stack.push(e.path());
            } else {
                std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(0o755))?;
            }
        }
    }
    Ok(())
}

/// Copy the regular files and directories of `from` into `to`.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let e = e?;
        let ft = e.file_type()?;
        let dst = to.join(e.file_name());
        if ft.is_dir() {
            copy_tree(&e.path(), &dst)?;
        } else if ft.is_file() {
            std::fs::copy(e.path(), &dst)
                .with_context(|| format!("copying {}", e.path().display()))?;
        }
    }
    Ok(())
}
