//! The per-artifact stages over the base disk: derive (the platform's boot
//! filesystem and partition table over the shared base), encode, compress
//! and publish; the live files, the osmet files and the ostree archive.
use crate::backend::job::{BootSetting, BootupdJob, DiskJob, DiskOutput, LiveJob, LiveStage};
use crate::disk::{deploy, derive, layout::Layout};
use crate::io::compress::{self, Compressor};
use crate::io::view::{Composite, DiskView, FileView, Patch};
use crate::live::{self, iso::Syslinux};
use crate::oscontainer::{OsFormat, OsInfo};
use crate::plan::input::Input;
use crate::plan::preflight::BootupdInfo;
use crate::plan::{Plan, PlanArtifact};
use crate::platforms::{self, Format};
use crate::publish::meta::{self, ContainerImage, ImageEntry, Meta};
use crate::publish::staged::Staged;
use crate::util::{cancel, progress::Reporter};
use anyhow::{ensure, Context, Result};
use std::fs::File;
use std::path::{Path, PathBuf};

/// [`Composite::shared`] tag of the views over this run's base disk.
const BASE_TAG: u64 = 1;
/// meta.json of this build, before its images.
pub(super) fn start_meta(plan: &Plan, os: &OsInfo, r: &crate::release::resolve::Resolved) -> Meta {
    // cosa records the OS build's own commit (for an ostree-native image its
    // `ostree.commit` label; the commit deployed here is ostree-ext's local
    // merge commit over it, which differs per import).
    let commit = &os.image_commit;
    let mut m = Meta::new(
        &plan.name,
        &os.version,
        commit,
        &meta::rfc3339_utc(os.timestamp),
        &plan.release.arch,
    );
    m.base_oscontainer = Some(ContainerImage {
        image: r.os_pullspec.clone(),
        digest: Some(r.os_digest.clone()),
        tags: vec![r.os_tag.clone()],
        comment: None,
    });
    m.release_payload = Some(ContainerImage {
        image: r.release_ref.clone(),
        digest: Some(r.release_digest.clone()),
        tags: vec![r.release_version.clone()],
        comment: Some("OpenShift release image the OS was resolved from".into()),
    });
    m
}

/// An osmet file packed for a metal image (SPEC 5.1).
pub(super) struct Osmet {
    /// Its name in rootfs.img and where it is.
    name: String,
    path: PathBuf,
    /// meta.json key of the image and that image's sha256.
    meta_key: String,
    sha256: String,
}

/// The base disk, ready for deriving.
pub(super) struct Base {
    path: PathBuf,
    file: File,
    layout: Layout,
    /// The 4K-sector ESP, built when metal4k is planned.
    esp4k: Option<PathBuf>,
    /// Boot filesystem image per [`BootSetting::key`].
    boots: std::collections::BTreeMap<String, PathBuf>,
    /// zipl's boot record per [`BootSetting::key`] (s390x).
    ipls: std::collections::BTreeMap<String, PathBuf>,
    /// Live files made from the mounted deployment, when live is planned.
    live: Option<LiveStage>,
    /// The ostree objects' extents on the base disk (for osmet), with live.
    extent_map: Option<PathBuf>,
}

impl Base {
    pub(super) fn open(out: DiskOutput, arch: &str, metal_size: u64) -> Result<Self> {
        let file = File::open(&out.base)
            .with_context(|| format!("opening the base disk {}", out.base.display()))?;
        Ok(Base {
            path: out.base,
            file,
            layout: Layout::new(arch, metal_size, 512)?,
            esp4k: out.esp4k,
            boots: out.boots,
            ipls: out.ipls,
            live: out.live,
            extent_map: out.extent_map,
        })
    }
}

pub(super) struct Builder<'a> {
    pub(super) plan: &'a Plan,
    pub(super) os: &'a OsInfo,
    pub(super) resolved: &'a crate::release::resolve::Resolved,
    pub(super) cache_repo: &'a Path,
    pub(super) work: &'a Path,
    pub(super) out: &'a Path,
    pub(super) r: &'a Reporter,
    pub(super) threads: usize,
    pub(super) raw_dir: Option<&'a Path>,
    /// Compressed chunks of the base disk's unchanged ranges, shared by
    /// the platforms whose outputs lay the disk out at the same offsets.
    pub(super) chunks: compress::ChunkCache,
    /// The host's ISOLINUX, when live is planned.
    pub(super) syslinux: Option<Syslinux>,
    /// The mkfs.erofs options, when live is planned and the OS asks for EROFS.
    pub(super) erofs: Option<live::erofs::Options>,
    /// What the OS ships for bootupd, when it ships its metadata.
    pub(super) bootupd: Option<BootupdInfo>,
    /// The OS image's labels (for the aleph file).
    pub(super) image_labels: std::collections::BTreeMap<String, String>,
    /// `--aws-register`: where and what to register the aws disk as.
    pub(super) aws: Option<(
        &'a crate::publish::aws::Session,
        &'a crate::publish::aws::AmiSpec,
    )>,
}

impl Builder<'_> {
    pub(super) fn origin(&self) -> String {
        match self.resolved.os_format {
            OsFormat::OstreeNative => format!(
                "[origin]\ncontainer-image-reference=ostree-unverified-registry:{}\n",
                self.resolved.os_pullspec
            ),
            OsFormat::Legacy => format!("[origin]\nrefspec={}\n", self.os.commit),
        }
    }

    pub(super) fn aleph(&self) -> deploy::Aleph {
        deploy::Aleph {
            ref_: String::new(),
            version: self.os.version.clone(),
            ostree_commit: self.os.commit.clone(),
            container_image: (self.resolved.os_format == OsFormat::OstreeNative).then(|| {
                deploy::AlephImage {
                    image_name: self.resolved.os_pullspec.clone(),
                    image_digest: self.resolved.os_digest.clone(),
                    container_imgref: format!(
                        "ostree-unverified-registry:{}",
                        self.resolved.os_pullspec
                    ),
                    image_labels: self.image_labels.clone(),
                }
            }),
        }
    }

    /// The privileged part of the build, for a backend to run.
    pub(super) fn disk_job(&self) -> Result<DiskJob> {
        let mut boots: Vec<BootSetting> = Vec::new();
        for art in &self.plan.artifacts {
            let b = art.boot_setting(&self.plan.disk.arch);
            if !boots.iter().any(|x| x.key() == b.key()) {
                boots.push(b);
            }
        }
        Ok(DiskJob {
            work: self.work.to_path_buf(),
            cache_repo: self.cache_repo.to_path_buf(),
            disk: self.plan.disk.clone(),
            kernel_version: self.os.kernel_version.clone(),
            commit: self.os.commit.clone(),
            osname: self.os.osname.clone(),
            platforms_json: self
                .os
                .config
                .platforms
                .as_ref()
                .map(|p| p.boot_json(&self.plan.release.arch))
                .transpose()?,
            origin: self.origin(),
            aleph: self.aleph(),
            esp4k: self.plan.artifacts.iter().any(|x| x.sector_size == 4096),
            bios: self.plan.artifacts.iter().any(|x| x.bios),
            boots,
            live: self
                .plan
                .artifacts
                .iter()
                .find_map(|x| x.live.clone())
                .map(|plan| LiveJob {
                    plan,
                    version: self.os.version.clone(),
                    timestamp: self.os.timestamp,
                    title: self
                        .os
                        .os_release
                        .get("NAME")
                        .cloned()
                        .unwrap_or_else(|| self.os.osname.clone()),
                    threads: self.threads,
                    erofs: self.erofs.clone(),
                }),
            bootupd: self.bootupd.as_ref().map(|_| BootupdJob {
                timestamp: self.os.timestamp,
            }),
            grub_script: self.os.config.image.grub_script.clone(),
            buildroot: None,
            image_refs: match self.resolved.os_format {
                OsFormat::OstreeNative => Some(crate::oscontainer::image_refs(
                    self.cache_repo,
                    &self.os.commit,
                    &self.resolved.os_pullspec,
                )?),
                OsFormat::Legacy => None,
            },
        })
    }

    /// The live ISO (and its minimal ISO packed into it), staged.
    fn live_iso(
        &self,
        l: &crate::backend::job::PlanLive,
        st: &LiveStage,
        boot: live::iso::IsoBoot,
    ) -> Result<(String, ImageEntry, Staged)> {
        let step = self.r.step("live-iso");
        let iso_tmp = Staged::new(&self.out.join(&l.iso))?;
        let stage = st.dir.join("iso");
        cancel::pause_point("iso")?;
        let input = live::iso::IsoInput {
            volid: &l.volume_id,
            kernel: &st.kernel,
            initramfs: &st.initramfs,
            rootfs: &st.rootfs,
            menus: &st.menus,
            boot,
            mtime: self.os.timestamp,
            features: &st.features,
        };
        live::iso::build_iso(&stage, iso_tmp.path(), &input)?;
        let full_mib = std::fs::metadata(iso_tmp.path())?.len() >> 20;
        let minimal = st.dir.join("minimal.iso");
        let ms = live::iso::add_minimal_iso(
            &stage,
            iso_tmp.path(),
            &minimal,
            &input,
            &format!("bootimage-gen {}", env!("CARGO_PKG_VERSION")),
        )?;
        let minimal_mib = std::fs::metadata(&minimal)?.len() as f64 / (1u64 << 20) as f64;
        std::fs::remove_file(&minimal).ok();
        self.r.note(&format!(
            "live: minimal ISO (no rootfs.img; `coreos-installer iso extract minimal-iso` rebuilds it) {minimal_mib:.1} MiB against {full_mib} MiB; coreos/miniso.dat holds {} bytes ({} ranges matched, {} KiB of {} KiB packed)",
            ms.data_size,
            ms.entries,
            ms.packed_xz >> 10,
            ms.packed >> 10
        ));
        std::fs::remove_dir_all(&stage).ok();
        let entry = file_entry(&l.iso, iso_tmp.path(), Some(true))?;
        step.done(&format!(
            "{} (volume id {}, {} MiB)",
            l.iso,
            l.volume_id,
            entry.size >> 20
        ));
        Ok((meta::IMAGE_KEY_LIVE_ISO.to_string(), entry, iso_tmp))
    }

    /// The live ISO and the PXE files, published together.
    pub(super) fn live_artifacts(
        &self,
        base: &Base,
        art: &PlanArtifact,
        osmets: &[Osmet],
        done_images: &std::collections::BTreeMap<String, ImageEntry>,
    ) -> Result<Vec<(String, ImageEntry)>> {
        let l = art.live.as_ref().context("live plan")?;
        let st = base.live.as_ref().context("live files staged")?;
        for n in &st.notes {
            self.r.note(n);
        }
        self.live_rootfs_and_initramfs(st, osmets, done_images)?;
        let temp = |name: &str| Staged::new(&self.out.join(name));
        let boot = match (&st.efiboot, &st.of_tree) {
            (Some(efiboot), _) => Some(live::iso::IsoBoot::Efi {
                efiboot,
                syslinux: self.syslinux.as_ref(),
            }),
            (None, Some(tree)) => Some(live::iso::IsoBoot::OpenFirmware { tree }),
            (None, None) => None,
        };
        let mut done = Vec::new();
        match boot {
            Some(boot) => done.push(self.live_iso(l, st, boot)?),
            // s390x: its ISO boots El Torito from `images/cdboot.img`, which
            // lorax's mk-s390image makes (osbuild genisoargs_s390x); not
            // built here. The PXE files are the same on every arch.
            None => self.r.note(&format!(
                "live: no ISO for {} (its El Torito image images/cdboot.img is made by lorax's mk-s390image, which this tool does not have); the PXE kernel, initramfs and rootfs are built",
                self.plan.disk.arch
            )),
        }
        for (key, src, name) in [
            (meta::IMAGE_KEY_LIVE_KERNEL, &st.kernel, &l.kernel),
            (meta::IMAGE_KEY_LIVE_INITRAMFS, &st.initramfs, &l.initramfs),
            (meta::IMAGE_KEY_LIVE_ROOTFS, &st.rootfs, &l.rootfs),
        ] {
            cancel::check()?;
            let tmp = temp(name)?;
            // The staged file's last use (the ISO is written): move it when
            // the work and output dirs share a filesystem, else copy.
            if std::fs::rename(src, tmp.path()).is_err() {
                std::fs::copy(src, tmp.path()).with_context(|| {
                    format!("copying {} to {}", src.display(), tmp.path().display())
                })?;
            }
            let e = file_entry(name, tmp.path(), Some(true))?;
            done.push((key.to_string(), e, tmp));
        }
        cancel::check()?;
        let mut out = Vec::new();
        for (key, entry, tmp) in done {
            tmp.commit()?;
            out.push((key, entry));
        }
        Ok(out)
    }

    /// The osmet file of each planned metal image (SPEC 5.1), packed right
    /// after the disk job, before anything is published: a map that does
    /// not fit the image fails the run with nothing written.
    pub(super) fn pack_osmets(&self, base: &Base) -> Result<Vec<Osmet>> {
        use live::osmet;
        let Some(st) = base.live.as_ref() else {
            return Ok(Vec::new());
        };
        let map_path = base
            .extent_map
            .as_ref()
            .context("extent map of the base disk")?;
        let mut map: osmet::ExtentMap = serde_json::from_slice(
            &std::fs::read(map_path).with_context(|| format!("reading {}", map_path.display()))?,
        )
        .with_context(|| format!("parsing {}", map_path.display()))?;
        // Fault injection for the tests (a real filesystem does not give a
        // wrong map): point a root extent one block further into its object.
        if std::env::var(osmet::FAULT_ENV).is_ok_and(|v| v == osmet::FAULT_STALE_MAP) {
            if let Some(m) = map.root.iter_mut().find(|m| m.extent.length >= 8192) {
                m.extent.logical += 4096;
            }
        }
        let description = match osmet::description(&self.os.os_release) {
            Some(d) => d,
            None => {
                self.r.note(&format!(
                    "live: the OS's os-release has no PRETTY_NAME, which osbuild passes to `coreos-installer pack osmet --description`; the osmet files say {:?}, os-release(5)'s default",
                    osmet::PRETTY_NAME_DEFAULT
                ));
                osmet::PRETTY_NAME_DEFAULT.to_string()
            }
        };
        let app = format!("bootimage-gen {}", env!("CARGO_PKG_VERSION"));
        let metals: Vec<&PlanArtifact> = self
            .plan
            .artifacts
            .iter()
            .filter(|x| x.spec.is_metal_disk())
            .collect();
        if metals.is_empty() {
            self.r.note("live: neither metal nor metal4k is built in this run, so rootfs.img carries no osmet file and `coreos-installer install` from the live system needs the network");
        }
        let mut out = Vec::new();
        for art in metals {
            let step = self.r.step(format!("osmet {}", art.platform));
            let patches = self.disk_patches(base, art)?;
            let base_view = FileView::open(&base.path)?;
            let view = Composite::new(&base_view, art.disk_size, patches)?;
            let part = |name: &str| {
                let p = base.layout.part(name);
                (p.start, p.start + p.size)
            };
            let (bs, be) = part("boot");
            let (rs, re) = part("root");
            let parts = [
                osmet::Partition {
                    start: bs,
                    end: be,
                    mappings: &map.boot,
                },
                osmet::Partition {
                    start: rs,
                    end: re,
                    mappings: &map.root,
                },
            ];
            // cosa names it after the uncompressed image.
            let raw = self.uncompressed_name(art);
            let name = format!("{raw}.osmet");
            let path = st.dir.join(&name);
            let s = osmet::pack(
                &view,
                &parts,
                &self.cache_repo.join("objects"),
                &osmet::Header {
                    app_version: &app,
                    sector_size: art.sector_size as u32,
                    os_description: &description,
                    os_architecture: &self.plan.release.arch,
                },
                None,
                &path,
            )
            .with_context(|| format!("packing the osmet file of {}", art.platform))?;
            step.done(&format!(
                "{name}: {:.1} MiB ({} MiB of {} MiB from {} ostree extents, {} MiB xz'd to {:.1} MiB) in {:.1} s",
                s.file_size as f64 / (1u64 << 20) as f64,
                s.mapped >> 20,
                s.image_size >> 20,
                s.mappings,
                s.packed >> 20,
                s.packed_xz as f64 / (1u64 << 20) as f64,
                s.seconds
            ));
            out.push(Osmet {
                name,
                path,
                meta_key: art.meta_key.clone(),
                sha256: s.image_sha256,
            });
        }
        Ok(out)
    }

    /// rootfs.img (the root image, the version stamp and the osmet files)
    /// and the live initramfs (the OS's, then the live files with the
    /// rootfs's stream hash), SPEC 5.1. Each osmet file must describe the
    /// metal image published in this run.
    pub(super) fn live_rootfs_and_initramfs(
        &self,
        st: &LiveStage,
        osmets: &[Osmet],
        done_images: &std::collections::BTreeMap<String, ImageEntry>,
    ) -> Result<()> {
        let mtime = u32::try_from(self.os.timestamp.max(0)).unwrap_or(u32::MAX);
        for o in osmets {
            let e = done_images
                .get(&o.meta_key)
                .with_context(|| format!("{} was not published", o.meta_key))?;
            let published = e.uncompressed_sha256.as_ref().unwrap_or(&e.sha256);
            ensure!(
                *published == o.sha256,
                "{} describes an image with sha256 {}, but the published {} has {published}",
                o.name,
                o.sha256,
                o.meta_key
            );
        }
        let extras: Vec<(String, PathBuf)> = osmets
            .iter()
            .map(|o| (o.name.clone(), o.path.clone()))
            .collect();
        let step = self.r.step("live-rootfs.img");
        live::write_rootfs_img(&st.root_image, &self.os.version, &extras, &st.rootfs, mtime)?;
        for (_, p) in &extras {
            std::fs::remove_file(p).ok();
        }
        std::fs::remove_file(&st.root_image).ok();
        let want = live::stream_hash(&st.rootfs)?;
        step.done(&format!(
            "{} MiB; stream hash {} chunks of 2 MiB",
            std::fs::metadata(&st.rootfs)?.len() >> 20,
            want.iter().filter(|&&b| b == b'\n').count() - 1
        ));
        let os_initrd = std::fs::read(&st.os_initramfs)
            .with_context(|| format!("reading {}", st.os_initramfs.display()))?;
        let addon = live::live_initramfs_addon(&self.os.version, &st.features, &want, mtime)?;
        std::fs::write(&st.initramfs, live::live_initramfs(&os_initrd, &addon))
            .with_context(|| format!("writing {}", st.initramfs.display()))?;
        Ok(())
    }

    /// The patches over the base disk that make `art`'s disk: its
    /// partition tables, its boot filesystem, the 4K ESP for 4K sectors.
    pub(super) fn disk_patches(&self, base: &Base, art: &PlanArtifact) -> Result<Vec<Patch>> {
        let d = &self.plan.disk;
        let disk_size = art.disk_size;
        // The boot filesystem of this platform: derived once per distinct
        // boot setting (metal and metal4k share theirs) and kept for the run.
        let boot_p = base.layout.part("boot").clone();
        let key = art.boot_setting(&d.arch).key();
        let boot_img = base
            .boots
            .get(&key)
            .with_context(|| format!("no boot filesystem was derived for {}", art.platform))?;
        // The disk as this platform sees it.
        let layout = Layout::with_root(&d.arch, disk_size, art.sector_size, d.root_size)?;
        let ipl = match base.ipls.get(&key) {
            Some(p) => Some(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?),
            None => None,
        };
        let mut patches = derive::table_patches(
            &base.file,
            base.layout.disk_size,
            &layout,
            art.bios,
            ipl.as_deref(),
            &self.work.join(format!("table-{}.img", art.platform)),
        )?;
        patches.push(Patch::from_file(boot_img, boot_p.start, boot_p.size)?);
        // The ESP's FAT depends on the sector size (arches without an ESP
        // have nothing sector-size dependent outside the table).
        if let (4096, Some(esp_p)) = (art.sector_size, base.layout.find("EFI-SYSTEM")) {
            let p = base.esp4k.as_ref().context("4K ESP")?;
            patches.push(Patch::from_file(p, esp_p.start, esp_p.size)?);
        }
        Ok(patches)
    }

    /// Derive, encode, compress and publish one artifact.
    pub(super) fn artifact(&self, base: &Base, art: &PlanArtifact) -> Result<ImageEntry> {
        let step = self.r.step(art.platform.clone());
        let disk_size = art.disk_size;
        let patches = self.disk_patches(base, art)?;
        let base_view = FileView::open(&base.path)?;
        let view = Composite::new(&base_view, disk_size, patches)?.shared(BASE_TAG);
        if let Some(dir) = self.raw_dir {
            std::fs::create_dir_all(dir)?;
            let p = dir.join(format!("{}.raw", art.platform));
            crate::io::sparse::write_sparse_unhashed(&view, &p)?;
        }
        let tmp = Staged::new(&self.out.join(&art.file))?;
        let kind = if art.compressed {
            self.plan.compressor
        } else {
            Compressor::None
        };
        let level = self.plan.compression_level;
        let total = view.len();
        let prog = |done: u64| step.bytes(done, total);
        cancel::pause_point("encode")?;
        let entry = match art.spec.format {
            // Raw disks and fixed VHDs are compressed straight from the view.
            Format::Raw => {
                let w = compress::compress_view_cached(
                    kind,
                    level,
                    &view,
                    tmp.path(),
                    self.threads,
                    &prog,
                    Some(&self.chunks),
                )?;
                written_entry(&art.file, &w, art.compressed)
            }
            Format::Vhd if art.compressed => {
                let vhd = crate::formats::vhd::VhdView::new(&view)?;
                let w = compress::compress_view_cached(
                    kind,
                    level,
                    &vhd,
                    tmp.path(),
                    self.threads,
                    &prog,
                    Some(&self.chunks),
                )?;
                written_entry(&art.file, &w, true)
            }
            // Encoded, then compressed: qcow2, VMDK, VHDX.
            _ if art.compressed => {
                let enc = self.work.join(format!("{}.encoded", art.platform));
                let shared = self.encode(art, &view, &enc, &prog)?;
                let ev = FileView::open(&enc)?;
                // A qcow2 holds the base disk's chunks at chunk-aligned
                // offsets: their compressed forms are reused from the raw
                // disks' (and other qcow2s'). A VMDK's grains are already
                // compressed: no match search on them.
                let remapped = shared.as_ref().map(|s| crate::io::view::Remapped {
                    inner: &ev,
                    start: s.start,
                    align: s.align,
                    blocks: &s.blocks,
                });
                let pre = crate::io::view::Precompressed(&ev);
                let input: &dyn DiskView = match (&remapped, art.spec.format) {
                    (Some(r), _) => r,
                    (None, Format::Vmdk) => &pre,
                    _ => &ev,
                };
                let w = compress::compress_view_cached(
                    kind,
                    level,
                    input,
                    tmp.path(),
                    self.threads,
                    &|_| {},
                    Some(&self.chunks),
                )?;
                std::fs::remove_file(&enc).ok();
                written_entry(&art.file, &w, true)
            }
            // Never recompressed (SPEC 3): the file as encoded.
            _ => {
                self.encode(art, &view, tmp.path(), &prog)?;
                file_entry(
                    &art.file,
                    tmp.path(),
                    (!art.spec.recompressed).then_some(true),
                )?
            }
        };
        cancel::check()?;
        if let Some((aws, spec)) = self.aws.filter(|_| art.spec.name == platforms::AWS) {
            // The snapshot holds the same bytes the VMDK encodes.
            aws.register(&view, spec, self.r)?;
        }
        tmp.commit()?;
        step.done(&format!("{} ({} MiB)", art.file, entry.size >> 20));
        Ok(entry)
    }
}

impl Builder<'_> {
    /// The artifact's file name without the compression extension.
    pub(super) fn uncompressed_name(&self, art: &PlanArtifact) -> String {
        let p = &self.plan;
        art.spec
            .file_name(&p.name, &p.version, &p.release.arch, Compressor::None)
    }

    /// Write `view` in the artifact's format (uncompressed) to `out`
    /// ([`crate::formats::encode`]).
    pub(super) fn encode(
        &self,
        art: &PlanArtifact,
        view: &dyn DiskView,
        out: &Path,
        prog: &(dyn Fn(u64) + Sync),
    ) -> Result<Option<crate::formats::qcow2::SharedBlocks>> {
        let img = &self.os.config.image;
        let arch = &self.plan.release.arch;
        let summary = self
            .os
            .os_release
            .get("NAME")
            .map_or("Linux", String::as_str);
        let ctx = crate::formats::EncodeCtx {
            name: &self.plan.name,
            version: &self.plan.version,
            summary,
            file: &self.uncompressed_name(art),
            platform: &art.platform,
            arch,
            oci_arch: &crate::release::oci_arch(arch),
            mtime: self.os.timestamp.max(0) as u64,
            align: self.plan.compressor.chunk_size() as u64,
            threads: self.threads,
            chunks: Some(&self.chunks),
            work: self.work,
            vmware: crate::formats::VmwareSettings {
                os_type: img.vmware_os_type.value.clone(),
                hw_version: u32::try_from(img.vmware_hw_version.value)
                    .context("vmware-hw-version")?,
                secure_boot: img.vmware_secure_boot.value,
            },
        };
        crate::formats::encode(art.spec.format, view, out, &ctx, prog)
    }

    /// The OS container as an OCI archive (cosa's `images.ostree`).
    pub(super) fn ostree_archive(&self, input: &Input) -> Result<(String, ImageEntry)> {
        let file = format!(
            "{}-{}-ostree.{}.ociarchive",
            self.plan.name, self.plan.version, self.plan.release.arch
        );
        let step = self.r.step("ostree");
        let tmp = Staged::new(&self.out.join(&file))?;
        let scratch = self.work.join("skopeo");
        std::fs::create_dir_all(&scratch)?;
        input.fetch.copy_to_oci_archive(
            &self.resolved.os_source,
            tmp.path(),
            &scratch,
            self.resolved
                .os_index
                .as_ref()
                .map(|_| self.plan.release.arch.as_str()),
        )?;
        let entry = file_entry(&file, tmp.path(), Some(true))?;
        tmp.commit()?;
        step.done(&format!("{file} ({} MiB)", entry.size >> 20));
        Ok((meta::IMAGE_KEY_OSTREE.to_string(), entry))
    }
}

/// meta.json entry of a finished, uncompressed file published as `name`.
fn file_entry(name: &str, path: &Path, skip_compression: Option<bool>) -> Result<ImageEntry> {
    let (sha256, size) = meta::sha256_file(path)?;
    Ok(ImageEntry {
        path: name.to_string(),
        sha256,
        size,
        uncompressed_sha256: None,
        uncompressed_size: None,
        skip_compression,
    })
}

fn written_entry(file: &str, w: &compress::Written, compressed: bool) -> ImageEntry {
    ImageEntry {
        path: file.to_string(),
        sha256: w.sha256.clone(),
        size: w.size,
        uncompressed_sha256: compressed.then(|| w.uncompressed_sha256.clone()),
        uncompressed_size: compressed.then_some(w.uncompressed_size),
        skip_compression: None,
    }
}
