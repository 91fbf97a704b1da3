//! The privileged job, made from the checked plan alone: what the base
//! disk holds (sizes, kernel arguments, the commit and how a node names
//! it), which boot filesystems to derive, and the live files to stage. In:
//! a [`Plan`] that went through [`super::facts::check`]; out: a
//! [`DiskJob`] for a backend to run.
use super::Plan;
use crate::backend::job::{BootSetting, BootupdJob, DiskJob, LiveJob};
use crate::disk::deploy;
use crate::oscontainer::OsFormat;
use std::path::Path;

impl Plan {
    /// The deployment's origin file: the image a node follows
    /// (ostree-native), else the commit's ref.
    pub fn origin(&self) -> String {
        match self.os.os_format {
            OsFormat::OstreeNative => format!(
                "[origin]\ncontainer-image-reference=ostree-unverified-registry:{}\n",
                self.os.pullspec
            ),
            OsFormat::Legacy => format!("[origin]\nrefspec={}\n", self.os.commit),
        }
    }

    /// The aleph file (what the disk was built from).
    pub fn aleph(&self) -> deploy::Aleph {
        let os = &self.os;
        deploy::Aleph {
            ref_: String::new(),
            version: self.version.clone(),
            ostree_commit: os.commit.clone(),
            container_image: (os.os_format == OsFormat::OstreeNative).then(|| deploy::AlephImage {
                image_name: os.pullspec.clone(),
                image_digest: os.digest.clone(),
                container_imgref: format!("ostree-unverified-registry:{}", os.pullspec),
                image_labels: os.image_labels.clone(),
            }),
        }
    }

    /// The distinct boot settings of the planned platforms (platforms with
    /// equal settings share one boot filesystem).
    pub fn boot_settings(&self) -> Vec<BootSetting> {
        let mut boots: Vec<BootSetting> = Vec::new();
        for art in &self.artifacts {
            let b = art.boot_setting(self.disk.arch);
            match boots.iter_mut().find(|x| x.key() == b.key()) {
                Some(x) => x.osmet |= b.osmet,
                None => boots.push(b),
            }
        }
        boots
    }

    /// The privileged part of the build, for a backend to run in `work`
    /// over the OS's cache repo `cache_repo`; `threads` for mksquashfs.
    pub fn disk_job(&self, work: &Path, cache_repo: &Path, threads: usize) -> DiskJob {
        let os = &self.os;
        DiskJob {
            work: work.to_path_buf(),
            cache_repo: cache_repo.to_path_buf(),
            disk: self.disk.clone(),
            kernel_version: os.kernel.clone(),
            commit: os.commit.clone(),
            osname: self.name.clone(),
            platforms_json: os.platforms_json.clone(),
            origin: self.origin(),
            aleph: self.aleph(),
            esp4k: self.artifacts.iter().any(|x| x.sector_size == 4096),
            bios: self.artifacts.iter().any(|x| x.bios),
            boots: self.boot_settings(),
            live: self
                .artifacts
                .iter()
                .find_map(|x| x.live.clone())
                .map(|plan| LiveJob {
                    plan,
                    version: self.version.clone(),
                    timestamp: os.timestamp,
                    title: os.name_or(&self.name).to_string(),
                    threads,
                    erofs: self.facts.erofs.clone(),
                }),
            bootupd: self.facts.bootupd.as_ref().map(|_| BootupdJob {
                timestamp: os.timestamp,
            }),
            grub_script: os.grub_script.clone(),
            buildroot: None,
            image_refs: self.facts.image_refs.clone(),
            mkfs: None,
            stage_dir: None,
            os_time: os.timestamp,
        }
    }
}
