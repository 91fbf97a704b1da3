//! Importing the OS image into the cache repo: an ostree-native image
//! through ostree-ext (its derived layers as the OS's own ostree would
//! write them, an image with no ostree commit through `nonostree`), a
//! legacy one through `legacy`. In: the cache, the fetcher and the
//! image; out: the [`ImportRecord`] of the commit it left in the repo.
use super::buildroot;
use super::cache::{Cache, ImportRecord};
use super::canonical;
use super::format::OsFormat;
use super::gc;
use super::legacy::import_legacy;
use super::nonostree;
use super::refs::IMAGE_REF_PREFIX;
use crate::image::fetch::{Fetcher, Image};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;

/// Import the OS image (or reuse a previous import of the same digest).
/// Returns the record and whether it came from the cache.
pub async fn import(
    cache: &Cache,
    fetcher: &Fetcher,
    img: &Image,
    format: OsFormat,
) -> Result<(ImportRecord, bool)> {
    if let Some(rec) = cache.lookup_for_use(&img.digest)? {
        return Ok((rec, true));
    }
    // One import per digest at a time; a run that waited finds the other's.
    let lock = crate::util::lock::Lock::wait(
        &cache.os_lock_path(&img.digest),
        &format!("importing OS image {} into this cache", img.digest),
    )?;
    let cached = match cache.lookup(&img.digest) {
        Some(_) => true,
        None => {
            // gc frees layers and objects only while no import writes.
            let _writing = crate::util::lock::Lock::shared(
                &gc::repo_write_lock(&cache.dir),
                "writing into the cache's ostree repo",
            )?;
            let labels = img.labels();
            let rec = match format {
                OsFormat::OstreeNative => import_native(cache, fetcher, img, labels).await?,
                OsFormat::Legacy => import_legacy(cache, fetcher, img, labels).await?,
            };
            cache.store(&rec)?;
            false
        }
    };
    // From making the entry to using it: exclusive, then shared.
    drop(lock);
    match cache.lookup_for_use(&img.digest)? {
        Some(rec) => Ok((rec, cached)),
        None => bail!(
            "OS image {}: its import in cache {} vanished right after it was made (removed by `bootimage-gen gc`?); run again",
            img.digest,
            cache.dir.display()
        ),
    }
}

async fn import_native(
    cache: &Cache,
    fetcher: &Fetcher,
    img: &Image,
    labels: BTreeMap<String, String>,
) -> Result<ImportRecord> {
    use ostree_ext::container::OstreeImageReference;
    let imgref = OstreeImageReference::try_from(
        format!(
            "ostree-unverified-image:{}",
            img.opened.to_transport_string()
        )
        .as_str(),
    )
    .with_context(|| format!("OS image reference {}", img.reference))?;
    let done = if nonostree::is_nonostree(&labels) {
        let image_ref = ostree_ext::refescape::prefix_escape_for_ref(
            IMAGE_REF_PREFIX,
            &imgref.imgref.to_string(),
        )?;
        nonostree::import(cache, fetcher, img, &image_ref).await?
    } else {
        import_ostree_native(cache, fetcher, img, &imgref).await?
    };
    Ok(ImportRecord {
        image_digest: img.digest.clone(),
        image: img.reference.to_string(),
        format: OsFormat::OstreeNative,
        commit: done.merge_commit,
        base_commit: Some(done.base_commit),
        dropped: done.dropped,
        labels,
        bootimage_json: None,
        committed_by: Some(done.committed_by).filter(|s| !s.is_empty()),
    })
}

/// An image with an ostree commit: through ostree-ext, its derived layers
/// (if any) through [`import_derived`].
async fn import_ostree_native(
    cache: &Cache,
    fetcher: &Fetcher,
    img: &Image,
    imgref: &ostree_ext::container::OstreeImageReference,
) -> Result<nonostree::Imported> {
    use ostree_ext::container::store;
    let repo = ostree_ext::ostree::Repo::new_for_path(&cache.repo.path);
    repo.open(ostree_ext::gio::Cancellable::NONE)
        .context("opening the cache repo")?;
    let cfg = fetcher.opts.proxy_config(&fetcher.scratch);
    let mut imp = store::ImageImporter::new(&repo, imgref, cfg)
        .await
        .with_context(|| format!("importing OS image {}", img.reference))?;
    imp.disable_gc();
    Ok(
        match imp
            .prepare()
            .await
            .with_context(|| format!("importing OS image {}", img.reference))?
        {
            store::PrepareResult::Ready(p) if !p.layers.is_empty() => {
                import_derived(cache, &repo, imgref, fetcher, img, imp, p).await?
            }
            prep => {
                let state = match prep {
                    store::PrepareResult::AlreadyPresent(s) => s,
                    store::PrepareResult::Ready(p) => {
                        tracing::info!(
                            "importing {} layer(s) of {}",
                            p.layers_to_fetch().count(),
                            img.reference
                        );
                        imp.import(p)
                            .await
                            .map_err(|e| anyhow!("importing OS image {}: {e:#}", img.reference))?
                    }
                };
                if state.manifest_digest.to_string() != img.digest {
                    bail!(
                        "OS image {} changed while importing (digest {} then {}): retry",
                        img.reference,
                        img.digest,
                        state.manifest_digest
                    );
                }
                let merge_commit = canonical_merge(&repo, imgref, &state.merge_commit)?;
                nonostree::Imported {
                    dropped: dropped_by_import(&repo, &merge_commit)?,
                    merge_commit,
                    base_commit: state.base_commit,
                    committed_by: String::new(),
                }
            }
        },
    )
}

/// A derived image (layers over the OS build's commit), imported as the
/// OS's own ostree-ext would. How a derived layer's `/var` is written
/// depends on the libostree doing it (ostree-ext `tar/write.rs`: before
/// 2024.3 it is moved to `/usr/share/factory/var`; from 2024.3 it stays,
/// and the deploy seeds the stateroot's `/var` from it), and today's
/// ostree-ext labels the merged tree with the merged tree's SELinux policy
/// (ostree-ext 0.15: the base's). So the base is imported first, then the
/// derived layers by our own importer (`nonostree::import_derived`), which
/// merges them and has the OS's ostree commit and label the result. Not
/// as root, ostree-ext 0.15 imports them for the OS's ostree version, with
/// the base's labels, and the run says so.
async fn import_derived(
    cache: &Cache,
    repo: &ostree_ext::ostree::Repo,
    imgref: &ostree_ext::container::OstreeImageReference,
    fetcher: &Fetcher,
    img: &Image,
    imp: ostree_ext::container::store::ImageImporter,
    mut p: Box<ostree_ext::container::store::PreparedImport>,
) -> Result<nonostree::Imported> {
    use ostree_ext::container::store;
    let what = || format!("importing OS image {}", img.reference);
    // The base alone (its merge commit and image ref are dropped below).
    let derived = std::mem::take(&mut p.layers);
    tracing::info!(
        "importing the base of {} ({} derived layer(s) follow)",
        img.reference,
        derived.len()
    );
    let base = imp
        .import(p)
        .await
        .map_err(|e| anyhow!("{}: {e:#}", what()))?;
    store::remove_image(repo, &imgref.imgref).with_context(what)?;
    if base.manifest_digest.to_string() != img.digest {
        bail!(
            "OS image {} changed while importing (digest {} then {}): retry",
            img.reference,
            img.digest,
            base.manifest_digest
        );
    }
    if crate::util::owner::is_root() {
        let image_ref = ostree_ext::refescape::prefix_escape_for_ref(
            IMAGE_REF_PREFIX,
            &imgref.imgref.to_string(),
        )?;
        let descs: Vec<_> = derived.iter().map(|l| l.layer().clone()).collect();
        return nonostree::import_derived(
            cache,
            fetcher,
            img,
            &image_ref,
            &base.base_commit,
            &descs,
        )
        .await;
    }
    let version = os_ostree_version(cache, &base.base_commit, img)?;
    let cfg = fetcher.opts.proxy_config(&fetcher.scratch);
    let mut imp = store::ImageImporter::new(repo, imgref, cfg)
        .await
        .with_context(what)?;
    imp.disable_gc();
    if let Some((y, m)) = version {
        imp.set_ostree_version(y, m);
    }
    let state = match imp.prepare().await.with_context(what)? {
        store::PrepareResult::AlreadyPresent(s) => s,
        store::PrepareResult::Ready(p) => {
            tracing::info!(
                "importing {} derived layer(s) of {} as the OS's ostree {} would",
                p.layers_to_fetch().count(),
                img.reference,
                version.map_or("(none: the host's)".to_string(), |(y, m)| format!(
                    "{y}.{m}"
                ))
            );
            imp.import(p)
                .await
                .map_err(|e| anyhow!("{}: {e:#}", what()))?
        }
    };
    let merge_commit = canonical_merge(repo, imgref, &state.merge_commit)?;
    Ok(nonostree::Imported {
        dropped: dropped_by_import(repo, &merge_commit)?,
        merge_commit,
        base_commit: state.base_commit,
        committed_by: "ostree-ext 0.15 with this host's libostree, the derived layers labelled with the base's policy (the merged tree's, as today's ostree-ext does, needs root here)".into(),
    })
}

/// The version of the ostree the OS build `commit` ships, as (year,
/// release), run from its buildroot; `None` when it ships none or this host
/// cannot run it (the host's libostree decides then, as before).
fn os_ostree_version(cache: &Cache, commit: &str, img: &Image) -> Result<Option<(u32, u32)>> {
    use buildroot::Buildroot;
    if !buildroot::os_has_ostree(&cache.repo, commit)? {
        return Ok(None);
    }
    let b = match Buildroot::prepare(&cache.dir, &cache.repo, commit, img.arch()?) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!("the OS's ostree cannot run here ({e:#}): its derived layers are imported as this host's libostree would");
            return Ok(None);
        }
    };
    let mut it = b.ostree_version.split('.');
    let (Some(Ok(y)), Some(Ok(m))) = (
        it.next().map(str::parse::<u32>),
        it.next().map(str::parse::<u32>),
    ) else {
        return Ok(None);
    };
    Ok(Some((y, m)))
}

/// ostree-ext's merge commit for `imgref`, rewritten canonically (see
/// [`canonical`]), its image ref moved to it.
fn canonical_merge(
    repo: &ostree_ext::ostree::Repo,
    imgref: &ostree_ext::container::OstreeImageReference,
    commit: &str,
) -> Result<String> {
    let image_ref =
        ostree_ext::refescape::prefix_escape_for_ref(IMAGE_REF_PREFIX, &imgref.imgref.to_string())?;
    canonical::canonical_commit(repo, commit, &image_ref)
}

/// Top-level directories ostree-ext drops without their being content
/// (`tar/write.rs` `EXCLUDED_TOPLEVEL_PATHS`): a container build leaves
/// files there routinely.
pub(super) const IGNORED_TOPLEVELS: [&str; 5] = ["run", "tmp", "proc", "sys", "dev"];

/// What ostree-ext filtered out of the image's layers on import: it keeps
/// only /usr, /etc (as /usr/etc) and /var, and records the rest in the
/// merge commit's `ostree.tar-filtered` metadata (`a{sa{su}}`: layer →
/// top-level directory → files).
fn dropped_by_import(repo: &ostree_ext::ostree::Repo, commit: &str) -> Result<Vec<String>> {
    use ostree_ext::container::store::{MetaFilteredData, META_FILTERED};
    use ostree_ext::glib;
    let (v, _) = repo
        .load_commit(commit)
        .with_context(|| format!("reading commit {commit}"))?;
    let dict = glib::VariantDict::new(Some(&v.child_value(0)));
    let filtered: Option<MetaFilteredData> = dict
        .lookup(META_FILTERED)
        .map_err(|e| anyhow!("commit {commit}: {META_FILTERED}: {e}"))?;
    let mut out = Vec::new();
    for (layer, dirs) in filtered.unwrap_or_default() {
        for (dir, n) in dirs {
            if !IGNORED_TOPLEVELS.contains(&dir.as_str()) {
                out.push(format!("{layer} /{dir}: {n} file(s)"));
            }
        }
    }
    out.sort();
    Ok(out)
}
