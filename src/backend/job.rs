//! The privileged part of a build, as one serialisable job: partition the
//! base disk, make its filesystems, deploy the OS, install the bootloaders,
//! and derive each distinct platform's boot filesystem. A backend runs it:
//! `loopback` right here with loop devices and mounts, `kvm`/`nokvm` inside
//! a throw-away VM that runs this same binary over the same job (see
//! `backend::vm`). Everything else (fetching, importing, encoding,
//! compressing, describing) stays on the host and needs no privileges.
use crate::disk::selinux::Labeller;
use crate::disk::{
    bios, bootupd, deploy, derive, gpt, grubcfg,
    layout::{Layout, DISK_GUID},
    mkfs,
};
use crate::fs::fat as esp;
use crate::live;
use crate::sys::loopback::{LoopDevice, Mount, Mounted};
use crate::util::{cancel, progress::Reporter};
use anyhow::{ensure, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// FAT volume id of the ESP (SPEC 2; cosa `coreos.osbuild.x86_64.mpp.yaml`).
pub const ESP_VOLUME_ID: u32 = 0x7B77_95E7;
/// Where the OS ships its EFI binaries and its BIOS GRUB modules (SPEC 2).
pub const OS_EFI_DIR: &str = "usr/lib/bootupd/updates/EFI";
pub const OS_GRUB_BIOS_DIR: &str = "usr/lib/grub/i386-pc";
/// Every disk has the same fixed root UUID (SPEC 2) and XFS refuses to
/// mount a second filesystem with a UUID already mounted: `nouuid` lets
/// several builds (or a build next to a test) run at once.
const ROOT_MOUNT_OPTIONS: &str = "rw,nouuid";

/// Everything the privileged steps need, with paths that are the same on
/// the host and inside the VM (the VM mounts them at the same places).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiskJob {
    /// The run's work directory: the base disk and boot images go here.
    pub work: PathBuf,
    /// The imported OS's ostree repository (read only).
    pub cache_repo: PathBuf,
    pub disk: PlanDisk,
    /// The OS's kernel version (gates filesystem features).
    pub kernel_version: String,
    pub commit: String,
    pub osname: String,
    /// The OS's `platforms.json`, verbatim.
    pub platforms_json: Option<Vec<u8>>,
    /// Content of the deployment's origin file.
    pub origin: String,
    pub aleph: deploy::Aleph,
    /// Build the 4K-sector ESP (metal4k planned).
    pub esp4k: bool,
    /// Install BIOS boot code (a BIOS-booting platform planned).
    pub bios: bool,
    /// The distinct platform boot settings to derive.
    pub boots: Vec<BootSetting>,
    /// The live files to make from the deployment, when live is planned.
    pub live: Option<LiveJob>,
    /// Write bootupd's state (and its static GRUB configs, when the OS ships
    /// them), when the OS ships bootupd metadata.
    #[serde(default)]
    pub bootupd: Option<BootupdJob>,
    /// image.json `grub-script` of a cosa-era OS (4.16, 4.17): each
    /// platform's grub.cfg, unless bootupd's static configs make it.
    #[serde(default)]
    pub grub_script: Option<String>,
    /// The OS's buildroot, when its own ostree deploys it.
    #[serde(default)]
    pub buildroot: Option<crate::oscontainer::buildroot::Buildroot>,
    /// The image and layer refs to give the sysroot repo (ostree-native).
    #[serde(default)]
    pub image_refs: Option<crate::oscontainer::ImageRefs>,
}

/// bootupd's part of the job (see [`bootupd`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BootupdJob {
    /// The OS's time stamp, for `static-configs`.
    pub timestamp: i64,
}

/// What the live files need besides the deployment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LiveJob {
    pub plan: PlanLive,
    /// OS version and commit time (the live files' time stamps).
    pub version: String,
    pub timestamp: i64,
    /// The OS's name for the built-in menus.
    pub title: String,
    /// mksquashfs threads (0: all cores).
    pub threads: usize,
    /// The EROFS options, when the OS asks for an EROFS rootfs (else squashfs).
    #[serde(default)]
    pub erofs: Option<live::erofs::Options>,
}

/// The live files made while the deployment is mounted (in the work dir).
/// `initramfs` and `rootfs` are where the host writes them: the rootfs
/// holds the osmet files of the metal images (made after this job) and the
/// initramfs the rootfs's stream hash (SPEC 5.1).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LiveStage {
    pub dir: PathBuf,
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    pub rootfs: PathBuf,
    /// `images/efiboot.img`, on arches that boot EFI.
    #[serde(default)]
    pub efiboot: Option<PathBuf>,
    /// The Open Firmware boot files (ppc64le), see [`live::iso::of_boot_tree`].
    #[serde(default)]
    pub of_tree: Option<PathBuf>,
    pub menus: live::Rendered,
    /// `root.squashfs` or `root.erofs`, the live root tree.
    pub root_image: PathBuf,
    /// A copy of the OS's initramfs (the live files are appended to it).
    pub os_initramfs: PathBuf,
    /// `coreos/features.json` (directives from the OS's example config).
    pub features: Vec<u8>,
    /// What was noted while making the live tree (shown by the host).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The base disk's sizes and kernel arguments (part of the plan).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanDisk {
    /// The OS image's architecture: it picks the partition table.
    pub arch: String,
    /// Bytes the deployed tree takes (4 KiB blocks, hardlinks once).
    pub content_bytes: u64,
    pub root_size: u64,
    /// metal / metal4k disk size: content + 35 % + the fixed partitions.
    pub metal_size: u64,
    /// Cloud and virtualisation disks: `image.json size` GiB (never less
    /// than the metal size).
    pub cloud_size: u64,
    /// Kernel arguments of every platform, before the platform's own.
    pub kargs: Vec<String>,
}

/// The live ISO and PXE artifacts (SPEC 5).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanLive {
    pub volume_id: String,
    /// Kernel arguments of the ISO menus (the default of `kargs.json`).
    pub kargs: Vec<String>,
    pub iso: String,
    pub kernel: String,
    pub initramfs: String,
    pub rootfs: String,
}

/// What a platform changes on the boot filesystem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootSetting {
    pub platform_id: String,
    pub kargs: Vec<String>,
    pub grub_commands: Vec<String>,
    /// zipl's block size (the disk's sector size) on s390x, which IPLs
    /// through a bootmap on the boot filesystem instead of GRUB.
    #[serde(default)]
    pub zipl_block_size: Option<u64>,
}

impl BootSetting {
    /// Platforms with equal keys share one boot filesystem image.
    pub fn key(&self) -> String {
        let zipl = self
            .zipl_block_size
            .map_or(String::new(), |b| format!("\0zipl{b}"));
        let id = crate::util::sha256_hex(
            format!(
                "{}\0{}\0{}{zipl}",
                self.platform_id,
                self.kargs.join("\x01"),
                self.grub_commands.join("\x01")
            )
            .as_bytes(),
        );
        id[..16].to_string()
    }
}

/// What the job made, in the work directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiskOutput {
    /// The base disk (metal size, 512-byte sectors).
    pub base: PathBuf,
    /// The BLS entries ostree wrote, relative to the boot filesystem.
    pub entries: Vec<(PathBuf, grubcfg::BlsEntry)>,
    /// The 4K-sector ESP, when asked for.
    pub esp4k: Option<PathBuf>,
    /// Boot filesystem image per [`BootSetting::key`].
    pub boots: BTreeMap<String, PathBuf>,
    /// zipl's boot record (the MBR code area) per [`BootSetting::key`], on s390x.
    #[serde(default)]
    pub ipls: BTreeMap<String, PathBuf>,
    /// The live files, when asked for.
    pub live: Option<LiveStage>,
    /// bootupd's static GRUB configs of the OS (they make each platform's
    /// grub.cfg), when it ships them and bootupd is installed.
    #[serde(default)]
    pub static_grub: Option<bootupd::StaticGrub>,
    /// Where the ostree objects of the base disk's root and boot
    /// filesystems lie ([`live::osmet::ExtentMap`], JSON), when live is
    /// planned: the osmet files are packed from it.
    #[serde(default)]
    pub extent_map: Option<PathBuf>,
}

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
            esp::build_esp(
                &file,
                esp_p.start,
                esp_p.size,
                512,
                ESP_VOLUME_ID,
                "EFI-SYSTEM",
                &efi_src,
                &stub,
            )?;
            let esp4k = if self.esp4k {
                let p = self.work.join("esp4k.img");
                esp::build_esp_file(
                    &p,
                    esp_p.size,
                    4096,
                    ESP_VOLUME_ID,
                    "EFI-SYSTEM",
                    &efi_src,
                    &stub,
                )?;
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
        esp::build_esp_file(
            &efiboot,
            size,
            512,
            fat_id,
            live::iso::EFIBOOT_LABEL,
            &efi_tree,
            &[
                (format!("EFI/{vendor}/grub.cfg"), stub.clone().into_bytes()),
                ("EFI/BOOT/grub.cfg".to_string(), stub.into_bytes()),
            ],
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

/// Where the live root tree comes from: the base disk (its boot partition
/// is copied), the mounted root filesystem and the deployment in it, and
/// the ESP's files (the OS's EFI tree and the stub configs).
struct LiveTreeSrc<'a> {
    disk: &'a std::fs::File,
    layout: &'a Layout,
    root: &'a Path,
    tree: &'a Path,
    /// The ESP's content, on arches that boot EFI.
    efi: Option<LiveEfi<'a>>,
}

/// The ESP of the base disk: the OS's EFI tree, its vendor directory and
/// the stub configs added to it.
struct LiveEfi<'a> {
    src: &'a Path,
    vendor: &'a str,
    esp_files: &'a [(String, Vec<u8>)],
}

/// The mounts that make the live root tree; closed in reverse order.
struct LiveTreeGuards {
    mounts: Vec<Mount>,
    boot: Option<Mounted>,
    boot_img: PathBuf,
}

impl LiveTreeGuards {
    /// Unmount and detach, reporting errors. After a signal the command
    /// wrapper refuses to run: the guards' own best-effort drops do it.
    fn close(mut self) -> Result<()> {
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
fn live_tree(
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

/// Read a job file (written by the host for the VM).
pub fn read(path: &Path) -> Result<DiskJob> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))
}
