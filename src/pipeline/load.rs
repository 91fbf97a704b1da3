//! The pipeline's first stage, shared by `inspect` and `generate`: resolve
//! the release to its OS image and import that image into the cache (or
//! reuse an import of the same digest). Every side effect of reading the
//! input happens here, not in the plan.
use crate::image::fetch::Fetcher;
use crate::oscontainer::{self, Cache, ImportRecord, OsInfo};
use crate::plan::input::{short, Input};
use crate::release::osimages;
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
    let mut one = load_streams(input, false, import).await?;
    one.pop().context("one OS stream was loaded")
}

/// `--os-stream all`: one [`Loaded`] per OS stream of the release
/// ([`osimages::all_streams`]), from one read of the release and one check
/// of its signature; each OS image imported when `import`. None when the
/// release has no OS stream but its default image boots (as `load` would
/// build it); an error saying why when nothing boots.
pub async fn load_all(input: &Input, import: bool) -> Result<Vec<Loaded>> {
    load_streams(input, true, import).await
}

async fn load_streams(input: &Input, all: bool, import: bool) -> Result<Vec<Loaded>> {
    for note in &input.fetch.skipped_auth {
        ui::status(note);
    }
    let tmp = Cache::open(&input.cache_dir)?.tempdir()?;
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
    let opened = resolve::open(
        &fetcher,
        &input.release,
        input.mirrors.as_ref(),
        if all {
            None
        } else {
            input.os_stream.as_deref()
        },
        tmp.path(),
        &mut on_release,
    )
    .await;
    let opened = match opened {
        Ok(o) => o,
        Err(e) => {
            fetcher.finish().await.ok();
            return Err(e);
        }
    };
    tracing::info!(
        "resolved release {} in {:.1?}",
        opened.version(),
        t.elapsed()
    );
    let loaded = match trust.context("the release was checked") {
        Ok(trust) => each_stream(input, &opened, &fetcher, &trust, all, import).await,
        Err(e) => Err(e),
    };
    opened.close(&fetcher).await;
    fetcher.finish().await.ok();
    loaded
}

/// The OS stream asked for (every stream when `all`), each chosen from the
/// one opened release, its signature checked, imported or found in the
/// cache.
async fn each_stream(
    input: &Input,
    opened: &resolve::Opened,
    fetcher: &Fetcher,
    trust: &crate::trust::policy::Record,
    all: bool,
    import: bool,
) -> Result<Vec<Loaded>> {
    let wants: Vec<Option<String>> = if all {
        let found = opened.found();
        let picks = osimages::all_streams(found);
        if picks.is_empty() {
            // Says why: each image found and why it does not boot.
            osimages::choose(found, opened.version(), None)?;
        }
        picks.iter().map(|&i| Some(found[i].tag.clone())).collect()
    } else {
        vec![input.os_stream.clone()]
    };
    let mut out = Vec::new();
    for want in &wants {
        let (resolved, os_img) = opened.choose(want.as_deref())?;
        let mut trust = trust.clone();
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
        // A cache handle per stream: it holds the locks on the entries
        // this stream's run uses.
        let cache = Cache::open(&input.cache_dir)?;
        let rec = import_os(&cache, fetcher, &resolved, os_img, import).await?;
        let os = match &rec {
            Some((r, _)) => Some(oscontainer::read_os_info(&cache.repo, r)?),
            None => None,
        };
        out.push(Loaded {
            resolved,
            trust,
            import: rec,
            os,
            cache,
        });
    }
    Ok(out)
}

/// The OS image's import in the cache: reused when one of the same digest
/// is there, else made when `import`.
async fn import_os(
    cache: &Cache,
    fetcher: &Fetcher,
    resolved: &Resolved,
    os_img: &crate::image::fetch::Image,
    import: bool,
) -> Result<Option<(ImportRecord, bool)>> {
    if let Some(r) = cache.lookup_for_use(&resolved.os_digest)? {
        ui::status(format!(
            "OS image {}: reusing the cached import (commit {})",
            short(&resolved.os_digest),
            short(&r.commit)
        ));
        return Ok(Some((r, true)));
    }
    if !import {
        return Ok(None);
    }
    ui::status(format!(
        "OS image {}: importing {} ({} layers)",
        short(&resolved.os_digest),
        resolved.os_format,
        os_img.manifest.layers().len()
    ));
    let t = Instant::now();
    let (r, cached) = oscontainer::import(cache, fetcher, os_img, resolved.os_format).await?;
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
    Ok(Some((r, cached)))
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
