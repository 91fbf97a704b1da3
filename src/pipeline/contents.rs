//! The content manifest beside each disk image ([`manifest`],
//! docs/contract.md §9): the disk's partitions (place and digest, hashed
//! from the same view the encoders read) and the entries of the
//! filesystems they hold (listed by the privileged job). Written as
//! `<image file, uncompressed name>.contents.json.gz`; meta.json's image
//! entry names it with its sha256 (`content-manifest`).
use super::base::Base;
use crate::disk::layout::Layout;
use crate::disk::manifest::{self, Filesystem, Image, Manifest, Partition};
use crate::io::view::DiskView;
use crate::plan::{Plan, PlanArtifact};
use crate::publish::staged::Staged;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

/// meta.json image-entry key naming the content manifest.
pub const DETAILS_KEY: &str = "content-manifest";

/// The file name of the content manifest of the image file `uncompressed`.
pub fn file_name(uncompressed: &str) -> String {
    format!("{uncompressed}.contents.json.gz")
}

/// What the images of one run share: the filesystems' entries (read once
/// from the job's lists) and the digests of partitions that are the base
/// disk's bytes, unchanged.
#[derive(Default)]
pub(super) struct Contents {
    filesystems: Mutex<BTreeMap<String, Filesystem>>,
    /// By where the bytes come from: the base disk's unchanged ranges, a
    /// boot setting's boot filesystem image.
    digests: Mutex<BTreeMap<String, String>>,
}

impl Contents {
    /// The filesystem listed as `key`, from the job's list file.
    fn filesystem(&self, base: &Base, key: &str) -> Result<Option<Filesystem>> {
        let mut fs = self.filesystems.lock().expect("not poisoned");
        if let Some(f) = fs.get(key) {
            return Ok(Some(f.clone()));
        }
        let Some(p) = base.contents.get(key) else {
            return Ok(None);
        };
        let b = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
        let f: Filesystem =
            serde_json::from_slice(&b).with_context(|| format!("parsing {}", p.display()))?;
        fs.insert(key.to_string(), f.clone());
        Ok(Some(f))
    }

    /// The [`manifest::blocks_digest`] of `view`'s bytes `start..start+size` (reused when they
    /// are the base disk's, unchanged, or `source`'s: the same bytes in
    /// every image).
    fn digest(
        &self,
        view: &dyn DiskView,
        start: u64,
        size: u64,
        source: Option<String>,
    ) -> Result<String> {
        let shared = source.or_else(|| {
            view.shared_source(start..start + size)
                .map(|(tag, off)| format!("base {tag} {off} {size}"))
        });
        if let Some(k) = &shared {
            if let Some(d) = self.digests.lock().expect("not poisoned").get(k) {
                return Ok(d.clone());
            }
        }
        let d = manifest::blocks_digest(view, start, size)?;
        if let Some(k) = shared {
            self.digests
                .lock()
                .expect("not poisoned")
                .insert(k, d.clone());
        }
        Ok(d)
    }

    /// Write the content manifest of `art` (its disk's bytes `view`) into
    /// the output directory as `file_name(uncompressed)`; what meta.json's
    /// image entry says of it (file, sha256, size).
    pub(super) fn write(
        &self,
        base: &Base,
        plan: &Plan,
        art: &PlanArtifact,
        (out, uncompressed): (&Path, &str),
        view: &dyn DiskView,
    ) -> Result<serde_json::Value> {
        let d = &plan.disk;
        let layout = Layout::with_root(d.arch, art.disk_size, art.sector_size, d.root_size)?;
        let boot_key = art.boot_setting(d.arch).key();
        let (key, file) = (&art.meta_key, &art.file);
        let mut m = Manifest::new();
        let mut partitions = Vec::new();
        for p in &layout.parts {
            let fs_key = match p.spec.label {
                "root" => Some(manifest::ROOT_KEY.to_string()),
                "boot" => Some(manifest::boot_key(&boot_key)),
                _ => None,
            };
            let mut filesystem = None;
            if let Some(k) = fs_key {
                if let Some(f) = self.filesystem(base, &k)? {
                    m.filesystems.insert(k.clone(), f);
                    filesystem = Some(k);
                }
            }
            let hashed = match p.spec.label {
                "root" => p.size.min(base.layout.part("root").size),
                _ => p.size,
            };
            partitions.push(Partition {
                label: p.spec.label.to_string(),
                start: p.start,
                size: p.size,
                hashed,
                // The boot partition is the boot setting's image, whole.
                digest: self.digest(
                    view,
                    p.start,
                    hashed,
                    (p.spec.label == "boot").then(|| format!("boot {boot_key} {}", p.size)),
                )?,
                filesystem,
            });
        }
        m.images.insert(
            key.to_string(),
            Image {
                file: file.to_string(),
                size: view.len(),
                partitions,
            },
        );
        let name = file_name(uncompressed);
        let bytes = m.to_bytes()?;
        let tmp = Staged::new(&out.join(&name))?;
        std::fs::write(tmp.path(), &bytes)
            .with_context(|| format!("writing {}", tmp.path().display()))?;
        tmp.commit()?;
        Ok(serde_json::json!({
            "path": name,
            "sha256": crate::util::sha256_hex(&bytes),
            "size": bytes.len(),
        }))
    }
}
