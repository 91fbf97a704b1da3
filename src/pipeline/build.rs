//! The per-artifact stages over the base disk: derive (the platform's boot
//! filesystem and partition table over the shared base), encode, compress
//! and publish; the live files, the osmet files and the ostree archive.
use super::base::Base;
use crate::formats::{self, Produced};
use crate::io::compress::{self, Compressor};
use crate::io::view::{Composite, DiskView, FileView};
use crate::plan::{Plan, PlanArtifact};
use crate::platforms::Upload;
use crate::publish::meta::{self, ImageEntry};
use crate::publish::staged::Staged;
use crate::util::{cancel, progress::Reporter};
use anyhow::Result;
use std::path::Path;

/// [`Composite::shared`] tag of the views over this run's base disk.
const BASE_TAG: u64 = 1;

/// What the per-artifact stages share: the checked plan, where to work
/// and write, and the run's caches.
pub(super) struct Builder<'a> {
    pub(super) plan: &'a Plan,
    /// The OS's ostree repository (its objects make the osmet files).
    pub(super) cache_repo: &'a Path,
    pub(super) work: &'a Path,
    pub(super) out: &'a Path,
    pub(super) r: &'a Reporter,
    pub(super) threads: usize,
    pub(super) raw_dir: Option<&'a Path>,
    /// Compressed chunks of the base disk's unchanged ranges, shared by
    /// the platforms whose outputs lay the disk out at the same offsets.
    pub(super) chunks: compress::ChunkCache,
    /// `--aws-register`: the session the aws disk is registered with (what
    /// to register is in the plan's facts).
    pub(super) aws: Option<&'a crate::publish::aws::Session>,
    /// What the content manifests of the images share.
    pub(super) contents: super::contents::Contents,
}

impl Builder<'_> {
    /// Derive, encode, compress and publish one artifact, and its content
    /// manifest (what meta.json's image entry says of it).
    pub(super) fn artifact(
        &self,
        base: &Base,
        art: &PlanArtifact,
    ) -> Result<(ImageEntry, serde_json::Value)> {
        let step = self.r.step(art.platform.clone());
        let disk_size = art.disk_size;
        let patches = base.patches(self.plan, art, self.work)?;
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
            // Never recompressed (docs/contract.md §3): the file as encoded.
            Produced::Encoded => file_entry(
                &art.file,
                tmp.path(),
                (!art.spec.recompressed).then_some(true),
            )?,
        };
        cancel::check()?;
        let ami = self.plan.facts.ami_spec.as_ref();
        if let Some((aws, spec)) = self
            .aws
            .zip(ami)
            .filter(|_| art.spec.uploads_to(Upload::Aws))
        {
            // The snapshot holds the same bytes the VMDK encodes.
            aws.register(&view, spec, self.r)?;
        }
        tmp.commit()?;
        let contents = self.contents.write(
            base,
            self.plan,
            art,
            (self.out, &self.uncompressed_name(art)),
            &view,
        )?;
        step.done(&format!("{} ({} MiB)", art.file, entry.size >> 20));
        Ok((entry, contents))
    }
}

impl Builder<'_> {
    /// The artifact's file name without the compression extension.
    pub(super) fn uncompressed_name(&self, art: &PlanArtifact) -> String {
        let p = &self.plan;
        art.spec
            .file_name(&p.name, &p.version, p.release.arch, Compressor::None)
    }

    /// What every format's encoder gets besides the disk
    /// ([`formats::write`]), lent to `f`.
    fn with_encode_ctx<T>(
        &self,
        art: &PlanArtifact,
        f: impl FnOnce(&formats::EncodeCtx) -> Result<T>,
    ) -> Result<T> {
        let arch = self.plan.release.arch;
        let os = &self.plan.os;
        let ctx = formats::EncodeCtx {
            name: &self.plan.name,
            version: &self.plan.version,
            summary: os.name_or("Linux"),
            file: &self.uncompressed_name(art),
            platform: &art.platform,
            arch: arch.as_str(),
            oci_arch: arch.oci_name(),
            mtime: os.timestamp.max(0) as u64,
            align: self.plan.compressor.chunk_size() as u64,
            threads: self.threads,
            chunks: Some(&self.chunks),
            work: self.work,
            vmware: os.vmware()?,
        };
        f(&ctx)
    }
}

impl Builder<'_> {
    /// Say how much encoding the platforms shared (chunks of the base
    /// disk's unchanged ranges reused instead of encoded again).
    pub(super) fn note_shared_work(&self) {
        let (chunks, bytes) = self.chunks.reused();
        if chunks > 0 {
            let by: Vec<String> = (self.chunks.reused_by().iter())
                .map(|(what, n, bytes)| format!("{what} {n} ({} MiB)", bytes >> 20))
                .collect();
            self.r.note(&format!(
                "shared work: {chunks} encoded chunks ({} MiB of disk) reused between platforms instead of encoded again: {}",
                bytes >> 20,
                by.join(", ")
            ));
        }
    }
}

/// The run's cache of compressed chunks, in the work directory `work`.
pub(super) fn chunk_cache(work: &Path) -> Result<compress::ChunkCache> {
    compress::ChunkCache::new(&work.join("chunks.cache"))
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
