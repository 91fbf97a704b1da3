//! The live files staged while the base disk's deployment is mounted:
//! kernel, the OS's initramfs, `coreos/features.json`, the ISO menus,
//! efiboot.img and the live root image (squashfs or EROFS) of the tree
//! [`live_tree`] lays out. In: the job's [`LiveJob`] and the mounted
//! deployment ([`LiveTreeSrc`]); out: a [`LiveStage`] in the work directory.
use super::job::*;
use super::live_tree::{live_tree, LiveTreeSrc};
use crate::fs::fat as esp;
use crate::live;
use crate::util::{cancel, progress::Reporter};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

impl DiskJob {
    /// Kernel, OS initramfs, features, menus, efiboot.img and the live root
    /// image, from the deployed metal tree (see [`LiveTreeSrc`]).
    pub(super) fn live_stage(
        &self,
        lj: &LiveJob,
        r: &Reporter,
        src: &LiveTreeSrc,
    ) -> Result<LiveStage> {
        let l = &lj.plan;
        let tree = src.tree;
        let dir = self.work.join("live");
        std::fs::create_dir_all(&dir)?;
        let kdir = tree.join("usr/lib/modules").join(&self.kernel_version);
        let mut notes = Vec::new();
        let kernel = self.live_kernel(&kdir, &dir, r)?;
        let os_initramfs = os_initramfs(&kdir, &dir)?;
        let features = features(tree, &mut notes)?;
        let open_firmware = crate::platforms::arch_boot(self.disk.arch).prep;
        let menus = menus(lj, src, open_firmware, r)?;
        let efiboot = match &src.efi {
            Some(e) => Some(self.efiboot(&dir, &l.volume_id, e.src, e.vendor)?),
            None => None,
        };
        let of_tree = if open_firmware {
            let d = dir.join("of-boot");
            let grub = tree.join(crate::disk::prep::OS_GRUB_OF_DIR);
            live::iso::of_boot_tree(&grub, &d, &self.work)
                .context("preparing the ISO's Open Firmware boot files")?;
            Some(d)
        } else {
            None
        };
        let img = root_image(lj, src, &dir, &mut notes, r)?;
        Ok(LiveStage {
            rootfs: dir.join("rootfs.img"),
            initramfs: dir.join("initrd.img"),
            dir,
            kernel,
            efiboot,
            of_tree,
            menus,
            root_image: img,
            os_initramfs,
            features,
            notes,
        })
    }

    /// The OS's kernel, copied from `kdir` (its modules directory) to `dir`.
    fn live_kernel(&self, kdir: &Path, dir: &Path, r: &Reporter) -> Result<PathBuf> {
        let step = r.step("live-kernel");
        let kernel = dir.join("vmlinuz");
        let ksrc = kdir.join(live::KERNEL_NAME);
        std::fs::copy(&ksrc, &kernel)
            .with_context(|| format!("copying the kernel {}", ksrc.display()))?;
        step.done(&format!(
            "usr/lib/modules/{}/{} ({} MiB)",
            self.kernel_version,
            live::KERNEL_NAME,
            std::fs::metadata(&kernel)?.len() >> 20
        ));
        Ok(kernel)
    }

    /// `efiboot.img`: the OS's EFI tree and a stub config that finds the ISO.
    fn efiboot(&self, dir: &Path, volid: &str, efi_src: &Path, vendor: &str) -> Result<PathBuf> {
        let stub = live::iso::efiboot_stub_cfg(volid, vendor);
        let efiboot = dir.join("efiboot.img");
        let efi_tree = dir.join("efi");
        live::iso::efiboot_tree(efi_src, vendor, &efi_tree)
            .context("preparing the EFI tree of efiboot.img")?;
        let size = live::iso::efiboot_size(&efi_tree, 2 * stub.len() as u64)?;
        let volid_hash = crate::util::sha256_hex(volid.as_bytes());
        let fat_id = u32::from_str_radix(&volid_hash[..8], 16).expect("hex");
        esp::build_esp(
            esp::EspTarget::Image(&efiboot),
            &esp::EspOptions {
                size,
                sector_size: 512,
                volume_id: fat_id,
                label: live::iso::EFIBOOT_LABEL,
                efi_src: &efi_tree,
                extra: &[
                    (format!("EFI/{vendor}/grub.cfg"), stub.clone().into_bytes()),
                    ("EFI/BOOT/grub.cfg".to_string(), stub.into_bytes()),
                ],
            },
        )?;
        std::fs::remove_dir_all(&efi_tree).ok();
        Ok(efiboot)
    }

    /// Where the ostree objects lie on the root and boot filesystems
    /// (the osmet files are packed from it), written to the work directory.
    pub(super) fn extent_map(
        &self,
        root: &Path,
        boot: &Path,
        r: &Reporter,
    ) -> Result<(PathBuf, live::osmet::ExtentMap)> {
        let step = r.step("osmet extents");
        let map = live::osmet::scan(root, boot)?;
        let p = self.work.join("live-extents.json");
        write_map(&p, &map)?;
        let kernel_files: Vec<&str> = map
            .boot_files
            .iter()
            .filter(|f| f.starts_with("/boot/ostree/"))
            .map(String::as_str)
            .collect();
        step.done(&format!(
            "{} root and {} boot extents of {} ostree objects ({} empty); {} boot files are objects ({})",
            map.root.len(),
            map.boot.len(),
            map.objects,
            map.empty_objects,
            map.boot_files.len(),
            kernel_files.join(", ")
        ));
        Ok((p, map))
    }
}

/// Write an extent map as JSON.
pub(super) fn write_map(p: &Path, map: &live::osmet::ExtentMap) -> Result<()> {
    std::fs::write(p, serde_json::to_vec(map)?).with_context(|| format!("writing {}", p.display()))
}

/// A copy of the OS's initramfs (checked usable), in `dir`: the live
/// files are appended to it.
fn os_initramfs(kdir: &Path, dir: &Path) -> Result<PathBuf> {
    let isrc = kdir.join(live::INITRAMFS_NAME);
    let os_initrd = std::fs::read(&isrc)
        .with_context(|| format!("reading the OS's initramfs {}", isrc.display()))?;
    live::check_initramfs(
        &os_initrd,
        &format!("the OS's initramfs {}", isrc.display()),
    )?;
    let os_initramfs = dir.join("os-initramfs.img");
    std::fs::write(&os_initramfs, &os_initrd)
        .with_context(|| format!("writing {}", os_initramfs.display()))?;
    Ok(os_initramfs)
}

/// features.json (osbuild get_os_features), from the deployment `tree`'s
/// example config; a note when the OS ships none.
fn features(tree: &Path, notes: &mut Vec<String>) -> Result<Vec<u8>> {
    let ex = tree.join(live::EXAMPLE_CONFIG);
    Ok(match std::fs::read(&ex) {
        Ok(y) => {
            let d = live::config_directives(&y, &format!("/{}", live::EXAMPLE_CONFIG))?;
            live::features_json(Some(&d))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            notes.push(format!("live: the OS ships no /{} (coreos-installer's example config), so features.json has no installer-config-directives (osbuild requires the file; this tool leaves the key out)", live::EXAMPLE_CONFIG));
            live::features_json(None)
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", ex.display())),
    })
}

/// The ISO menus: the OS's live templates (else the built-in ones),
/// placed for the firmware and rendered with the volume id, version and
/// kernel arguments.
fn menus(
    lj: &LiveJob,
    src: &LiveTreeSrc,
    open_firmware: bool,
    r: &Reporter,
) -> Result<live::Rendered> {
    let l = &lj.plan;
    // The vendor directory names the templates' EFI/<vendor>/ (moved to
    // boot/grub/ on Open Firmware, so any name does there).
    let vendor = src.efi.as_ref().map_or("BOOT-OF", |e| e.vendor);
    let live_dir = (src.tree).join(crate::oscontainer::config::LIVE_DIR.trim_start_matches('/'));
    let templates = if live_dir.is_dir() {
        live::read_templates(&live_dir, vendor).with_context(|| {
            format!(
                "reading the OS's live menu templates {}",
                live_dir.display()
            )
        })?
    } else {
        let title = &lj.title;
        r.note(&format!(
            "live: the OS ships no menu templates ({}); using the built-in menus",
            crate::oscontainer::config::LIVE_DIR
        ));
        live::builtin_templates(vendor, title)
    };
    let templates = live::place_templates(templates, open_firmware)?;
    live::render(&templates, &l.volume_id, &lj.version, &l.kargs)
}

/// The live root image (EROFS when the OS asks for it, else squashfs) of
/// the live tree staged from `src` in `dir`; the tree's mounts are closed
/// whatever the outcome.
fn root_image(
    lj: &LiveJob,
    src: &LiveTreeSrc,
    dir: &Path,
    notes: &mut Vec<String>,
    r: &Reporter,
) -> Result<PathBuf> {
    let step = r.step("live-rootfs");
    let threads = crate::util::threads(lj.threads);
    let started = std::time::Instant::now();
    let stage = dir.join("tree");
    let guards = live_tree(src, dir, &stage, notes)?;
    let made = match &lj.erofs {
        Some(o) => {
            let img = dir.join(live::erofs::ROOT_EROFS);
            cancel::pause_point("erofs")
                .and_then(|_| live::erofs::make_erofs(&stage, &img, o))
                .map(|_| (img, format!("erofs ({})", o.used())))
        }
        None => {
            let img = dir.join(live::ROOT_SQUASHFS);
            cancel::pause_point("squashfs")
                .and_then(|_| live::make_squashfs(&stage, &img, lj.timestamp, threads))
                .map(|_| (img, format!("squashfs (zstd, {threads} threads)")))
        }
    };
    let closed = guards.close();
    let (img, what) = made?;
    closed?;
    let secs = started.elapsed().as_secs_f64();
    step.done(&format!(
        "{what} of the metal root with /boot{} ({:.1} MiB, made in {secs:.1} s)",
        if src.efi.is_some() {
            " and /boot/efi"
        } else {
            ""
        },
        std::fs::metadata(&img)?.len() as f64 / (1u64 << 20) as f64
    ));
    Ok(img)
}
