//! The disk job run right here, with loop devices and mounts: partition the
//! base disk, make its filesystems, deploy the OS through its own tools,
//! install the bootloaders, derive each boot setting's boot filesystem, and
//! stage the live files (`live_tree.rs`). The VM backends run this same code
//! inside their VM.
use super::job::*;
use super::live_tree::{live_tree, LiveEfi, LiveTreeSrc};
use crate::disk::selinux::Labeller;
use crate::disk::{
    bios, bootupd, deploy, derive, gpt, grubcfg,
    layout::{Layout, DISK_GUID},
    mkfs,
};
use crate::fs::fat as esp;
use crate::live;
use crate::sys::loopback::{LoopDevice, Mounted};
use crate::util::{cancel, progress::Reporter};
use anyhow::{ensure, Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

impl DiskJob {
    /// Run the job with loop devices and mounts on this machine.
    pub fn run(&self, r: &Reporter) -> Result<DiskOutput> {
        let labeller = self.labeller(r)?;
        let mut out = self.build_base(r, labeller.as_ref())?;
        // zipl (s390x) runs from the deployment: the base disk's root,
        // mounted read-only once for every boot setting.
        let root = match self.boots.iter().any(|b| b.zipl_block_size.is_some()) {
            true => Some(self.mount_base_root(&out)?),
            false => None,
        };
        let res = (|| -> Result<()> {
            let sysroot = match &root {
                Some(m) => Some(crate::disk::deploy::deployment_root(m.path())?),
                None => None,
            };
            for b in &self.boots {
                cancel::check()?;
                let (img, ipl) = self.boot_image(&out, b, sysroot.as_deref(), labeller.as_ref())?;
                out.boots.insert(b.key(), img);
                if let Some(p) = ipl {
                    out.ipls.insert(b.key(), p);
                }
            }
            Ok(())
        })();
        let closed = root.map_or(Ok(()), |m| m.close());
        res?;
        closed?;
        Ok(out)
    }

    /// The OS's SELinux labeller, when its own tools deploy it and it ships
    /// a policy and setfiles (else the run says why nothing is labelled).
    fn labeller(&self, r: &Reporter) -> Result<Option<Labeller<'_>>> {
        let Some(b) = &self.buildroot else {
            return Ok(None);
        };
        Ok(match Labeller::new(b)? {
            Ok(l) => Some(l),
            Err(why) => {
                r.note(&format!("SELinux: nothing labelled: {why}"));
                None
            }
        })
    }

    /// The base disk's root filesystem, read-only.
    fn mount_base_root(&self, base: &DiskOutput) -> Result<Mounted> {
        let layout = Layout::new(&self.disk.arch, self.disk.metal_size, 512)?;
        let root_p = layout.part("root");
        let dev = LoopDevice::attach(&base.base, root_p.start, root_p.size, 512)?;
        Mounted::new(dev, &self.work.join("base-root"), "xfs", "ro,nouuid")
    }

    /// GPT, filesystems, deployment, bootloaders.
    fn build_base(&self, r: &Reporter, labeller: Option<&Labeller>) -> Result<DiskOutput> {
        let d = &self.disk;
        let step = r.step("base disk");
        let path = self.work.join("base.raw");
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        file.set_len(d.metal_size)?;
        let layout = Layout::new(&d.arch, d.metal_size, 512)?;
        ensure!(
            layout.part("root").size == d.root_size,
            "root partition size differs from the plan"
        );
        gpt::write(&mut file, &layout, DISK_GUID)?;
        let root_p = layout.part("root").clone();
        let boot_p = layout.part("boot").clone();
        let kernel = &self.kernel_version;
        let root_dev = LoopDevice::attach(&path, root_p.start, root_p.size, 512)?;
        cancel::pause_point("mkfs")?;
        crate::util::cmd::run(&mut mkfs::command(&root_p.spec, root_dev.path(), kernel)?)
            .context("making the root filesystem")?;
        let boot_dev = LoopDevice::attach(&path, boot_p.start, boot_p.size, 512)?;
        crate::util::cmd::run(&mut mkfs::command(&boot_p.spec, boot_dev.path(), kernel)?)
            .context("making the boot filesystem")?;
        let mnt = self.work.join("mnt");
        let root_m = Mounted::new(root_dev, &mnt, "xfs", ROOT_MOUNT_OPTIONS)?;
        std::fs::create_dir_all(mnt.join("boot"))?;
        let boot_m = Mounted::new(boot_dev, &mnt.join("boot"), "ext4", "rw")?;
        let dep = deploy::deploy(
            root_m.path(),
            &deploy::Deploy {
                source_repo: &self.cache_repo,
                commit: &self.commit,
                osname: &self.osname,
                kargs: &d.kargs,
                origin: self.origin.clone(),
                aleph: self.aleph.clone(),
                platforms_json: self.platforms_json.as_deref(),
                zipl: crate::platforms::arch_boot(&d.arch).zipl,
                tool: match &self.buildroot {
                    Some(b) => deploy::Tool::Os(b),
                    None => deploy::Tool::Host,
                },
                labeller,
                image_refs: self.image_refs.as_ref(),
            },
        )?;
        cancel::check()?;
        let tree = root_m.path().join(&dep.deploy_dir);
        let boot = boot_m.path().to_path_buf();
        let entries = derive::read_entries(&boot, &dep.entries)?;
        // Bootloaders, from the OS tree, as the arch boots.
        let boots_with = crate::platforms::arch_boot(&d.arch);
        let efi_src = tree.join(OS_EFI_DIR);
        let static_grub = match &self.bootupd {
            Some(_) => bootupd::StaticGrub::read(&tree)?,
            None => None,
        };
        let (efi, esp4k) = if boots_with.efi {
            let vendor = crate::disk::efi::vendor_dir(&efi_src).context("the OS's EFI GRUB")?;
            // bootupd copies grub-static-efi.cfg next to the vendor GRUB.
            let stub_cfg = match &static_grub {
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
                efi_src: &efi_src,
                extra: &stub,
            };
            esp::build_esp(
                esp::EspTarget::Region {
                    disk: &file,
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
            (Some((vendor, stub)), esp4k)
        } else {
            (None, None)
        };
        if self.bios {
            let grub = tree.join(OS_GRUB_BIOS_DIR);
            bios::install_bios(&file, &layout, &grub, &self.work)?;
            bios::copy_modules(&grub, &boot.join(derive::GRUB_DIR).join("i386-pc"))?;
        }
        if boots_with.prep {
            // The same bytes serve 512- and 4096-byte-sector disks: PReP
            // sits at the same byte offset on both.
            let grub = tree.join(crate::disk::prep::OS_GRUB_OF_DIR);
            crate::disk::prep::install_prep(&file, &layout, &grub, &self.work)?;
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
            self.write_bootupd(bj, &tree, efi_tree, bios, &boot, static_grub.is_some())?;
        }
        // /boot last, once everything on it is written (osbuild's
        // org.osbuild.ostree.selinux labels /boot after the deploy).
        if let Some(l) = labeller {
            let n = l.label(&boot, "/boot")?;
            let mut done: Vec<String> = dep
                .labelled
                .iter()
                .map(|(at, n)| format!("{at} {n}"))
                .collect();
            done.push(format!("/boot {n}"));
            r.note(&format!(
                "SELinux: labelled with the OS's policy {} and setfiles (files per tree: {})",
                l.policy,
                done.join(", ")
            ));
        }
        // The extents of the ostree objects, now that nothing else writes
        // to root and boot (the osmet files are packed from them).
        let extent_map = match &self.live {
            Some(_) => {
                let step = r.step("osmet extents");
                let map = live::osmet::scan(root_m.path(), &boot)?;
                let p = self.work.join("live-extents.json");
                std::fs::write(&p, serde_json::to_vec(&map)?)
                    .with_context(|| format!("writing {}", p.display()))?;
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
                Some(p)
            }
            None => None,
        };
        boot_m.close()?;
        let live = match &self.live {
            Some(l) => Some(self.live_stage(
                l,
                r,
                &LiveTreeSrc {
                    disk: &file,
                    layout: &layout,
                    root: root_m.path(),
                    tree: &tree,
                    efi: efi.as_ref().map(|(vendor, stub)| LiveEfi {
                        src: &efi_src,
                        vendor,
                        esp_files: stub,
                    }),
                },
            )?),
            None => None,
        };
        root_m.close()?;
        file.sync_all()?;
        step.done(&format!(
            "{} MiB disk, {} MiB of OS content, kernel {}",
            d.metal_size >> 20,
            d.content_bytes >> 20,
            kernel
        ));
        Ok(DiskOutput {
            base: path,
            entries,
            esp4k,
            boots: BTreeMap::new(),
            ipls: BTreeMap::new(),
            live,
            static_grub,
            extent_map,
        })
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

    /// Kernel, OS initramfs, features, menus, efiboot.img and the live root
    /// image, from the deployed metal tree (see [`LiveTreeSrc`]).
    fn live_stage(&self, lj: &LiveJob, r: &Reporter, src: &LiveTreeSrc) -> Result<LiveStage> {
        let l = &lj.plan;
        let tree = src.tree;
        // The vendor directory names the templates' EFI/<vendor>/ (moved to
        // boot/grub/ on Open Firmware, so any name does there).
        let vendor = src.efi.as_ref().map_or("BOOT-OF", |e| e.vendor);
        let dir = self.work.join("live");
        std::fs::create_dir_all(&dir)?;
        let kdir = tree.join("usr/lib/modules").join(&self.kernel_version);
        let mib = |p: &Path| -> Result<u64> { Ok(std::fs::metadata(p)?.len() >> 20) };
        let mut notes = Vec::new();

        let step = r.step("live-kernel");
        let kernel = dir.join("vmlinuz");
        let ksrc = kdir.join(live::KERNEL_NAME);
        std::fs::copy(&ksrc, &kernel)
            .with_context(|| format!("copying the kernel {}", ksrc.display()))?;
        step.done(&format!(
            "usr/lib/modules/{}/{} ({} MiB)",
            self.kernel_version,
            live::KERNEL_NAME,
            mib(&kernel)?
        ));

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

        // features.json (osbuild get_os_features).
        let ex = tree.join(live::EXAMPLE_CONFIG);
        let features = match std::fs::read(&ex) {
            Ok(y) => {
                let d = live::config_directives(&y, &format!("/{}", live::EXAMPLE_CONFIG))?;
                live::features_json(Some(&d))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                notes.push(format!("live: the OS ships no /{} (coreos-installer's example config), so features.json has no installer-config-directives (osbuild requires the file; this tool leaves the key out)", live::EXAMPLE_CONFIG));
                live::features_json(None)
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", ex.display())),
        };

        let live_dir = tree.join(crate::oscontainer::config::LIVE_DIR.trim_start_matches('/'));
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
        let open_firmware = crate::platforms::arch_boot(&self.disk.arch).prep;
        let templates = live::place_templates(templates, open_firmware)?;
        let menus = live::render(&templates, &l.volume_id, &lj.version, &l.kargs)?;
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

        let step = r.step("live-rootfs");
        let threads = crate::util::threads(lj.threads);
        let started = std::time::Instant::now();
        let stage = dir.join("tree");
        let guards = live_tree(src, &dir, &stage, &mut notes)?;
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

    /// A copy of the base's boot partition with the platform setting `b`
    /// applied.
    /// On s390x zipl then writes its bootmap into it (for the sector size
    /// of `b`); its boot record for the disk's first sector is returned too.
    /// `sysroot` is the deployment zipl runs from (s390x).
    fn boot_image(
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
                let rec = crate::disk::zipl::install(&crate::disk::zipl::Zipl {
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
