//! What a build record does: `Meta::new` as cosa import starts one, the
//! checks of cosa's schema the types do not express, its checksums, and
//! the fold of the meta.json already in the output directory into it;
//! `ImageEntry::for_file` for an artifact on disk. In: records and files;
//! out: records, or the error naming what the schema would refuse.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::util::arch::Arch;

use super::checks::{check_file_name, is_cosa_timestamp, is_sha256_hex};
use super::schema::{Ami, CosaInfo, Git, ImageEntry, Meta, OutputDirConflict, IMAGE_KEY_OSTREE};
use super::sums::sha256_file;

impl ImageEntry {
    /// An entry for an existing file: its name, SHA-256 and size.
    pub fn for_file(path: &Path) -> Result<Self> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .with_context(|| format!("artifact path {} has no UTF-8 file name", path.display()))?
            .to_string();
        let (sha256, size) = sha256_file(path)?;
        Ok(ImageEntry {
            path: name,
            sha256,
            size,
            uncompressed_sha256: None,
            uncompressed_size: None,
            skip_compression: None,
        })
    }
}

impl Meta {
    /// A new build record as cosa import would start it: `buildid` and
    /// `ostree-version` are the OS version, `coreos-assembler.oci-imported`
    /// is true, the build timestamp is now and this tool is recorded in
    /// `coreos-assembler.container-image-git`.
    pub fn new(
        name: &str,
        version: &str,
        ostree_commit: &str,
        ostree_timestamp: &str,
        basearch: Arch,
    ) -> Self {
        Meta {
            buildid: version.to_string(),
            name: name.to_string(),
            ostree_commit: ostree_commit.to_string(),
            ostree_timestamp: ostree_timestamp.to_string(),
            ostree_version: version.to_string(),
            ostree_content_checksum: None,
            coreos_assembler: CosaInfo {
                basearch,
                // The OS's time, not the run's (docs/contract.md §9): the
                // same release gives the same meta.json on any machine.
                build_timestamp: Some(ostree_timestamp.to_string()),
                oci_imported: Some(true),
                container_image_git: Some(Git::this_tool()),
                container_config_git: None,
            },
            base_oscontainer: None,
            release_payload: None,
            summary: None,
            images: BTreeMap::new(),
            amis: Vec::new(),
            extra: serde_json::Map::new(),
            image_details: BTreeMap::new(),
        }
    }

    /// Checks the constraints of cosa's schema that the types do not
    /// express (non-empty ids, 64-hex commit, timestamp form, file names).
    /// A missing `images.ostree` is not an error here: see
    /// [`Meta::lacks_ostree_image`].
    pub fn check(&self) -> Result<()> {
        let nonempty = [
            ("buildid", &self.buildid),
            ("name", &self.name),
            ("ostree-version", &self.ostree_version),
        ];
        for (key, v) in nonempty {
            if v.is_empty() {
                bail!("meta.json: {key} is empty");
            }
        }
        if !is_sha256_hex(&self.ostree_commit) {
            bail!(
                "meta.json: ostree-commit {:?} is not 64 hex characters",
                self.ostree_commit
            );
        }
        if let Some(c) = &self.ostree_content_checksum {
            if !is_sha256_hex(c) {
                bail!("meta.json: ostree-content-checksum {c:?} is not 64 hex characters");
            }
        }
        if !is_cosa_timestamp(&self.ostree_timestamp) {
            bail!(
                "meta.json: ostree-timestamp {:?} is not of the form YYYY-MM-DDT...Z",
                self.ostree_timestamp
            );
        }
        for (key, img) in &self.images {
            check_file_name(&img.path).with_context(|| format!("meta.json: images.{key}"))?;
            if !is_sha256_hex(&img.sha256) {
                bail!(
                    "meta.json: images.{key}.sha256 {:?} is not 64 hex characters",
                    img.sha256
                );
            }
            if let Some(u) = &img.uncompressed_sha256 {
                if !is_sha256_hex(u) {
                    bail!("meta.json: images.{key}.uncompressed-sha256 {u:?} is not 64 hex characters");
                }
            }
        }
        for git in [
            &self.coreos_assembler.container_image_git,
            &self.coreos_assembler.container_config_git,
        ]
        .into_iter()
        .flatten()
        {
            if git.commit.len() < 5 || git.origin.is_empty() {
                bail!("meta.json: git reference {git:?} needs a commit of 5+ characters and an origin");
            }
        }
        Ok(())
    }

    /// cosa's schema requires `images.ostree` whenever `images` is present.
    /// True when this record has images but no such entry, i.e. it would not
    /// validate against the upstream schema.
    pub fn lacks_ostree_image(&self) -> bool {
        !self.images.is_empty() && !self.images.contains_key(IMAGE_KEY_OSTREE)
    }

    /// Every artifact as `(file name, sha256)`, for
    /// [`write_sha256sums`](super::write_sha256sums).
    pub fn checksums(&self) -> Vec<(String, String)> {
        self.images
            .values()
            .map(|i| (i.path.clone(), i.sha256.clone()))
            .collect()
    }

    /// Whether `other` describes the same build (same OS, version, commit
    /// and architecture), so that their images may share one directory.
    pub fn same_build(&self, other: &Meta) -> bool {
        self.identity() == other.identity()
    }

    fn identity(&self) -> String {
        format!(
            "{} {} ({}, ostree commit {})",
            self.name, self.buildid, self.coreos_assembler.basearch, self.ostree_commit
        )
    }

    /// Folds `existing` (read from the output directory) into `self`.
    ///
    /// Both must describe the same build ([`Meta::same_build`]), else an
    /// [`OutputDirConflict`] naming `dir` is returned. Images and AMIs are
    /// united, entries of `self` replacing those of `existing` with the same
    /// key (image key, AMI region); optional facts `self` lacks are taken
    /// from `existing`; unmodelled keys are kept.
    pub fn merge_existing(&mut self, existing: Meta, dir: &Path) -> Result<()> {
        if !self.same_build(&existing) {
            return Err(OutputDirConflict {
                dir: dir.to_path_buf(),
                existing: existing.identity(),
                new: self.identity(),
            }
            .into());
        }
        let Meta {
            ostree_content_checksum,
            coreos_assembler,
            base_oscontainer,
            release_payload,
            summary,
            images,
            amis,
            extra,
            image_details,
            ..
        } = existing;
        for (k, v) in image_details {
            if !self.image_details.contains_key(&k) && !self.images.contains_key(&k) {
                self.image_details.insert(k, v);
            }
        }
        fill(&mut self.ostree_content_checksum, ostree_content_checksum);
        let ca = &mut self.coreos_assembler;
        fill(&mut ca.build_timestamp, coreos_assembler.build_timestamp);
        fill(&mut ca.oci_imported, coreos_assembler.oci_imported);
        fill(
            &mut ca.container_image_git,
            coreos_assembler.container_image_git,
        );
        fill(
            &mut ca.container_config_git,
            coreos_assembler.container_config_git,
        );
        fill(&mut self.base_oscontainer, base_oscontainer);
        fill(&mut self.release_payload, release_payload);
        fill(&mut self.summary, summary);
        for (k, v) in images {
            self.images.entry(k).or_insert(v);
        }
        let mut merged: Vec<Ami> = amis
            .into_iter()
            .filter(|old| !self.amis.iter().any(|new| new.name == old.name))
            .collect();
        merged.append(&mut self.amis);
        merged.sort_by(|a, b| a.name.cmp(&b.name));
        self.amis = merged;
        for (k, v) in extra {
            self.extra.entry(k).or_insert(v);
        }
        Ok(())
    }
}

fn fill<T>(slot: &mut Option<T>, old: Option<T>) {
    if slot.is_none() {
        *slot = old;
    }
}
