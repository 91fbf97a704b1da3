//! The live product (docs/contract.md §5): the osmet file of each metal image, rootfs.img
//! and the live initramfs, the live ISO with its minimal ISO packed in, and
//! the PXE files, from the live files the disk job staged off the mounted
//! deployment. Its own stage: the per-artifact builder (`build.rs`) hands
//! it the base disk and the metal images it published.
use super::base::Base;
use super::build::{file_entry, Builder};
use crate::backend::job::{LiveStage, PlanLive};
use crate::io::view::{Composite, FileView};
use crate::live;
use crate::plan::PlanArtifact;
use crate::publish::meta::{self, ImageEntry};
use crate::publish::staged::Staged;
use crate::util::cancel;
use anyhow::{ensure, Context, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// An osmet file packed for a metal image (docs/contract.md §5.1).
pub(super) struct Osmet {
    /// Its name in rootfs.img and where it is.
    name: String,
    path: PathBuf,
    /// meta.json key of the image and that image's sha256.
    meta_key: String,
    sha256: String,
}

impl Builder<'_> {
    /// The live ISO (and its minimal ISO packed into it), staged.
    fn live_iso(
        &self,
        l: &PlanLive,
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
            mtime: self.plan.os.timestamp,
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
        done_images: &BTreeMap<String, ImageEntry>,
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
                syslinux: self.plan.facts.syslinux.as_ref(),
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

    /// The osmet file of each planned metal image (docs/contract.md §5.1), packed right
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
        let description = match osmet::description(&self.plan.os.os_release) {
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
            let patches = base.patches(self.plan, art, self.work)?;
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
                    mappings: map
                        .platform_boot
                        .get(&art.boot_setting(self.plan.disk.arch).key())
                        .unwrap_or(&map.boot),
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
                    os_architecture: self.plan.release.arch,
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
    /// rootfs's stream hash), docs/contract.md §5.1. Each osmet file must describe the
    /// metal image published in this run.
    pub(super) fn live_rootfs_and_initramfs(
        &self,
        st: &LiveStage,
        osmets: &[Osmet],
        done_images: &BTreeMap<String, ImageEntry>,
    ) -> Result<()> {
        let mtime = u32::try_from(self.plan.os.timestamp.max(0)).unwrap_or(u32::MAX);
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
        live::write_rootfs_img(
            &st.root_image,
            &self.plan.version,
            &extras,
            &st.rootfs,
            mtime,
        )?;
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
        let addon = live::live_initramfs_addon(&self.plan.version, &st.features, &want, mtime)?;
        std::fs::write(&st.initramfs, live::live_initramfs(&os_initrd, &addon))
            .with_context(|| format!("writing {}", st.initramfs.display()))?;
        Ok(())
    }
}
