//! `--ostree-archive`: the OS container as an OCI archive beside the
//! disks (cosa's `images.ostree`), copied from where the release names it.
use super::build::{file_entry, Builder};
use crate::plan::input::Input;
use crate::publish::meta::{self, ImageEntry};
use crate::publish::staged::Staged;
use anyhow::Result;

impl Builder<'_> {
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
            &self.plan.os.source,
            tmp.path(),
            &scratch,
            (self.plan.os.multi_arch).then_some(self.plan.release.arch),
            self.plan.os.timestamp.max(0) as u64,
        )?;
        let entry = file_entry(&file, tmp.path(), Some(true))?;
        tmp.commit()?;
        step.done(&format!("{file} ({} MiB)", entry.size >> 20));
        Ok((meta::IMAGE_KEY_OSTREE.to_string(), entry))
    }
}
