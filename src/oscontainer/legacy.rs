//! Importing a legacy machine-os-content image: its layers' `/srv/repo` and
//! `/bootimage.json` extracted, the commit its label names verified there and
//! pulled into the cache repo. In: the cache, the fetcher and the image;
//! out: the [`ImportRecord`] (with the image's `bootimage.json`, if any).
use super::cache::{Cache, ImportRecord};
use super::format::{is_checksum, OsFormat, LABEL_LEGACY_COMMIT, LEGACY_REPO_DIR};
use super::repo::Repo;
use crate::image::fetch::{Fetcher, Image};
use crate::image::layers;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

pub(super) async fn import_legacy(
    cache: &Cache,
    fetcher: &Fetcher,
    img: &Image,
    labels: BTreeMap<String, String>,
) -> Result<ImportRecord> {
    let what = img.reference.to_string();
    let commit = labels.get(LABEL_LEGACY_COMMIT).cloned().unwrap_or_default();
    if !is_checksum(&commit) {
        bail!("legacy OS image {what}: label {LABEL_LEGACY_COMMIT}='{commit}' is not an ostree commit checksum");
    }
    let work = cache.tempdir()?;
    let root = work.path().join("root");
    std::fs::create_dir_all(&root)?;
    let keep = |p: &Path| {
        p.starts_with(LEGACY_REPO_DIR) || p == Path::new("bootimage.json") || p == Path::new("srv")
    };
    for (i, layer) in img.manifest.layers().iter().enumerate() {
        let blob = work.path().join(format!("layer-{i}"));
        fetcher.fetch_blob_to(img, layer, &blob).await?;
        let r = root.clone();
        let b = blob.clone();
        tokio::task::spawn_blocking(move || layers::extract(&b, &r, &keep))
            .await?
            .with_context(|| {
                format!(
                    "legacy OS image {what}: layer {} is unsafe or unreadable",
                    layer.digest()
                )
            })?;
        std::fs::remove_file(&blob).ok();
    }
    let srcrepo = root.join(LEGACY_REPO_DIR);
    if !srcrepo.join("config").is_file() {
        bail!("legacy OS image {what} has no ostree repo at /{LEGACY_REPO_DIR}");
    }
    let src = Repo {
        path: srcrepo.clone(),
    };
    if !src.has_commit(&commit) {
        bail!("legacy OS image {what}: its label says commit {commit}, but /{LEGACY_REPO_DIR} does not contain that commit");
    }
    cache.repo.pull_local(&srcrepo, &commit)?;
    let bootimage_json = std::fs::read_to_string(root.join("bootimage.json")).ok();
    Ok(ImportRecord {
        image_digest: img.digest.clone(),
        image: what,
        format: OsFormat::Legacy,
        commit,
        base_commit: None,
        dropped: Vec::new(),
        labels,
        bootimage_json,
        committed_by: None,
    })
}
