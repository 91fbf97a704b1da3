//! The pipeline's first stage, shared by `inspect` and `generate`: resolve
//! the release to its OS image and import that image into the cache (or
//! reuse an import of the same digest). Every side effect of reading the
//! input happens here, not in the plan.
use crate::image::fetch::Fetcher;
use crate::oscontainer::{self, Cache, ImportRecord, OsInfo};
use crate::plan::input::{short, Input};
use crate::release::resolve::{self, Resolved};
use crate::util::ui;
use anyhow::{Context, Result};
use std::time::Instant;

/// The outcome of resolving (and maybe importing).
pub struct Loaded {
    pub resolved: Resolved,
    /// What verified the release (or why nothing had to).
    pub trust: crate::trust::policy::Record,
    pub import: Option<(ImportRecord, bool)>,
    pub os: Option<OsInfo>,
    pub cache: Cache,
}

impl Loaded {
    /// The OS stream this run builds from
    /// ([`crate::release::osimages::stream_key`]).
    pub fn stream_key(&self) -> String {
        crate::release::osimages::stream_key(
            self.resolved.os_stream_class.as_deref(),
            &self.resolved.os_tag,
        )
    }
}

/// Resolve the release; import the OS when `import` (or reuse a cached
/// import of the same digest when one exists).
pub async fn load(input: &Input, import: bool) -> Result<Loaded> {
    for note in &input.fetch.skipped_auth {
        ui::status(note);
    }
    let cache = Cache::open(&input.cache_dir)?;
    let tmp = cache.tempdir()?;
    let scratch = tmp.path().join("skopeo");
    std::fs::create_dir_all(&scratch)?;
    let fetcher = Fetcher::new(&input.fetch, &scratch).await?;
    let t = Instant::now();
    // The release's signature, checked before anything its payload names
    // is read.
    let mut trust = None;
    let mut on_release = |img: &crate::image::fetch::Image| -> Result<()> {
        trust = Some(check_release(input, img)?);
        Ok(())
    };
    let (resolved, os_img) = resolve::resolve(
        &fetcher,
        &input.release,
        input.mirrors.as_ref(),
        input.os_stream.as_deref(),
        tmp.path(),
        &mut on_release,
    )
    .await?;
    let mut trust = trust.context("the release was checked")?;
    check_os(input, &resolved, &mut trust);
    ui::status(format!(
        "OS image: release tag {}{}: {}",
        resolved.os_tag,
        resolved
            .os_stream_class
            .as_deref()
            .map(|c| format!(" (stream {c})"))
            .unwrap_or_default(),
        resolved.os_choice
    ));
    tracing::info!(
        "resolved release {} in {:.1?}",
        resolved.release_version,
        t.elapsed()
    );
    let mut rec = None;
    if let Some(r) = cache.lookup_for_use(&resolved.os_digest)? {
        ui::status(format!(
            "OS image {}: reusing the cached import (commit {})",
            short(&resolved.os_digest),
            short(&r.commit)
        ));
        rec = Some((r, true));
    } else if import {
        ui::status(format!(
            "OS image {}: importing {} ({} layers)",
            short(&resolved.os_digest),
            resolved.os_format,
            os_img.manifest.layers().len()
        ));
        let t = Instant::now();
        let (r, cached) =
            oscontainer::import(&cache, &fetcher, &os_img, resolved.os_format).await?;
        ui::status(format!(
            "OS image {}: {} commit {} in {:.1?}",
            short(&resolved.os_digest),
            if cached {
                "another run imported"
            } else {
                "imported"
            },
            short(&r.commit),
            t.elapsed()
        ));
        rec = Some((r, cached));
    }
    fetcher.close(os_img).await.ok();
    fetcher.finish().await.ok();
    let os = match &rec {
        Some((r, _)) => Some(oscontainer::read_os_info(&cache.repo, r)?),
        None => None,
    };
    Ok(Loaded {
        resolved,
        trust,
        import: rec,
        os,
        cache,
    })
}

/// The release's signature checked before anything is imported or built
/// (`trust::policy`); said in one line.
fn check_release(
    input: &Input,
    img: &crate::image::fetch::Image,
) -> Result<crate::trust::policy::Record> {
    let digest = img
        .index
        .as_ref()
        .map_or(img.digest.as_str(), |i| i.index_digest.as_str());
    let rec = crate::trust::policy::check(
        &input.trust,
        &crate::trust::policy::Subject {
            release: &input.release,
            mirrors: input.mirrors.as_ref(),
            fetch: &input.fetch,
            digest,
            arch_digest: &img.digest,
        },
    )?;
    ui::status(format!("release {}: {}", short(digest), rec.console()));
    Ok(rec)
}

/// The OS image's own cosign signature, where a key applies and it has one.
fn check_os(input: &Input, r: &Resolved, rec: &mut crate::trust::policy::Record) {
    crate::trust::policy::check_os(&input.trust, rec, &input.fetch, &r.os_source, &r.os_digest);
    if let Some(os) = &rec.os {
        ui::status(format!("OS image {}: {os}", short(&r.os_digest)));
    }
}
