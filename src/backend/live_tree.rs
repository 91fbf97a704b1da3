//! The live root tree (SPEC 5.1) staged from the base disk without
//! touching it, and the guards that unmount it.
use crate::disk::{derive, layout::Layout};
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

/// The live root tree as osbuild's `mkrootfs_metal` builds it (SPEC 5.1),
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
    use std::os::unix::fs::PermissionsExt;
    let boot_p = src.layout.part("boot").clone();
    let boot_img = dir.join("live-boot.img");
    let mut g = LiveTreeGuards {
        mounts: Vec::new(),
        boot: None,
        boot_img: boot_img.clone(),
    };
    let res = (|| -> Result<()> {
        g.mounts.push(Mount::new(src.root, stage, "none", "bind")?);
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
        drop(derive::copy_region(
            src.disk,
            boot_p.start,
            boot_p.size,
            &boot_img,
        )?);
        let dev = LoopDevice::attach(&boot_img, 0, boot_p.size, 512)?;
        let bm = Mounted::new(dev, &stage.join("boot"), "ext4", "rw")?;
        let boot = bm.path().to_path_buf();
        g.boot = Some(bm);
        // The kernel and its HMAC, hardlinked from /boot/ostree/<dir>/.
        let mut kernels = Vec::new();
        let mut hmacs = Vec::new();
        let ostree_boot = boot.join("ostree");
        for d in std::fs::read_dir(&ostree_boot)
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
        kernels.sort();
        hmacs.sort();
        let k = kernels.first().with_context(|| {
            format!(
                "the deployment put no vmlinuz* under /boot/ostree/*/ (in {})",
                ostree_boot.display()
            )
        })?;
        let link = |p: &Path| -> Result<()> {
            let to = boot.join(p.file_name().expect("name"));
            std::fs::hard_link(p, &to)
                .with_context(|| format!("linking {} to {}", p.display(), to.display()))
        };
        link(k)?;
        match hmacs.first() {
            Some(h) => link(h)?,
            None => notes.push("live: the OS's kernel has no .hmac (/usr/lib/modules/<kver>/.vmlinuz.hmac), so the live /boot has the kernel only; osbuild requires one (FIPS boots check it)".to_string()),
        }
        // /boot/efi: the ESP's files (arches without an ESP have none).
        let Some(esp) = &src.efi else {
            return Ok(());
        };
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
        let mut stack = vec![efi.clone()];
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
    })();
    match res {
        Ok(()) => Ok(g),
        Err(e) => {
            let _ = g.close();
            Err(e)
        }
    }
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
