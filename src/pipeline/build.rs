//! The per-artifact stages over the base disk: derive (the platform's boot
//! filesystem and partition table over the shared base), encode, compress
//! and publish; the live files, the osmet files and the ostree archive.
use crate::backend::job::{BootSetting, BootupdJob, DiskJob, DiskOutput, LiveJob, LiveStage};
use crate::disk::{deploy, derive, layout::Layout};
use crate::formats::{self, Produced};
use crate::io::compress::{self, Compressor};
use crate::io::view::{Composite, DiskView, FileView, Patch};
use crate::live::{self, iso::Syslinux};
use crate::oscontainer::{OsFormat, OsInfo};
use crate::plan::input::Input;
use crate::plan::preflight::BootupdInfo;
use crate::plan::{Plan, PlanArtifact};
use crate::platforms::Upload;
use crate::publish::meta::{self, ContainerImage, ImageEntry, Meta};
use crate::publish::staged::Staged;
use crate::util::{cancel, progress::Reporter};
use anyhow::{Context, Result};
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

/// The base disk, ready for deriving.
pub(super) struct Base {
    pub(super) path: PathBuf,
    pub(super) file: File,
    pub(super) layout: Layout,
    /// The 4K-sector ESP, built when metal4k is planned.
    pub(super) esp4k: Option<PathBuf>,
    /// Boot filesystem image per [`BootSetting::key`].
    pub(super) boots: std::collections::BTreeMap<String, PathBuf>,
    /// zipl's boot record per [`BootSetting::key`] (s390x).
    pub(super) ipls: std::collections::BTreeMap<String, PathBuf>,
    /// Live files made from the mounted deployment, when live is planned.
    pub(super) live: Option<LiveStage>,
    /// The ostree objects' extents on the base disk (for osmet), with live.
    pub(super) extent_map: Option<PathBuf>,
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
        let produced = self.with_encode_ctx(art, |ctx| {
            formats::write(art.spec.format, &view, tmp.path(), ctx, kind, level, &prog)
        })?;
        let entry = match produced {
            Produced::Stream(w) => written_entry(&art.file, &w, art.compressed),
            // Never recompressed (SPEC 3): the file as encoded.
            Produced::Encoded => file_entry(
                &art.file,
                tmp.path(),
                (!art.spec.recompressed).then_some(true),
            )?,
        };
        cancel::check()?;
        if let Some((aws, spec)) = self.aws.filter(|_| art.spec.uploads_to(Upload::Aws)) {
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

    /// What every format's encoder gets besides the disk
    /// ([`formats::write`]), lent to `f`.
    fn with_encode_ctx<T>(
        &self,
        art: &PlanArtifact,
        f: impl FnOnce(&formats::EncodeCtx) -> Result<T>,
    ) -> Result<T> {
        let img = &self.os.config.image;
        let arch = &self.plan.release.arch;
        let summary = self
            .os
            .os_release
            .get("NAME")
            .map_or("Linux", String::as_str);
        let ctx = formats::EncodeCtx {
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
            vmware: formats::VmwareSettings {
                os_type: img.vmware_os_type.value.clone(),
                hw_version: u32::try_from(img.vmware_hw_version.value)
                    .context("vmware-hw-version")?,
                secure_boot: img.vmware_secure_boot.value,
            },
        };
        f(&ctx)
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
pub(super) fn file_entry(
    name: &str,
    path: &Path,
    skip_compression: Option<bool>,
) -> Result<ImageEntry> {
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
