//! The base disk the privileged job made, opened for deriving, and the
//! patches over it that make each platform's disk (its partition tables,
//! its boot filesystem, the 4K-sector ESP). In: the job's [`DiskOutput`]
//! and the plan; out: [`Patch`]es for a [`crate::io::view::Composite`].
use crate::backend::job::{DiskOutput, LiveStage};
use crate::disk::{derive, layout::Layout};
use crate::io::view::Patch;
use crate::plan::{Plan, PlanArtifact};
use crate::util::arch::Arch;
use anyhow::{Context, Result};
use std::fs::File;
use std::path::{Path, PathBuf};

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
    /// The job's lists of the filesystems' entries, by content-manifest key.
    pub(super) contents: std::collections::BTreeMap<String, PathBuf>,
}

impl Base {
    /// `arch` by reference: `pipeline/mod.rs` passes `&job.disk.arch`.
    pub(super) fn open(out: DiskOutput, arch: Arch, metal_size: u64) -> Result<Self> {
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
            contents: out.contents,
        })
    }

    /// The patches over the base disk that make `art`'s disk: its
    /// partition tables, its boot filesystem, the 4K ESP for 4K sectors
    /// (made in the work directory `work`).
    pub(super) fn patches(
        &self,
        plan: &Plan,
        art: &PlanArtifact,
        work: &Path,
    ) -> Result<Vec<Patch>> {
        let d = &plan.disk;
        let disk_size = art.disk_size;
        // The boot filesystem of this platform: derived once per distinct
        // boot setting (metal and metal4k share theirs) and kept for the run.
        let boot_p = self.layout.part("boot").clone();
        let key = art.boot_setting(d.arch).key();
        let boot_img = self
            .boots
            .get(&key)
            .with_context(|| format!("no boot filesystem was derived for {}", art.platform))?;
        // The disk as this platform sees it.
        let layout = Layout::with_root(d.arch, disk_size, art.sector_size, d.root_size)?;
        let ipl = match self.ipls.get(&key) {
            Some(p) => Some(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?),
            None => None,
        };
        let mut patches = derive::table_patches(
            &self.file,
            self.layout.disk_size,
            &layout,
            art.bios,
            ipl.as_deref(),
            &work.join(format!("table-{}.img", art.platform)),
        )?;
        patches.push(Patch::from_file(boot_img, boot_p.start, boot_p.size)?);
        // The ESP's FAT depends on the sector size (arches without an ESP
        // have nothing sector-size dependent outside the table).
        if let (4096, Some(esp_p)) = (art.sector_size, self.layout.find("EFI-SYSTEM")) {
            let p = self.esp4k.as_ref().context("4K ESP")?;
            patches.push(Patch::from_file(p, esp_p.start, esp_p.size)?);
        }
        Ok(patches)
    }
}
