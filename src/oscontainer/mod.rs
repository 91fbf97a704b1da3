//! The OS image: tell its format from its labels, import its commit into the
//! cache repo (ostree-native through ostree-ext; legacy machine-os-content by
//! a verified local pull from `/srv/repo`), and read what the OS says about
//! itself (version, kernel, osname, bootimage configuration).
pub mod buildroot;
pub mod config;
pub mod gc;
pub mod nonostree;
pub mod repo;

use crate::image::fetch::{Fetcher, Image};
use crate::image::layers;
use crate::oscontainer::config::{self as osconfig, OsBootConfig};
use anyhow::{anyhow, bail, Context, Result};
use repo::Repo;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Labels of an ostree-native container (ostree-ext encapsulation, bootc).
pub const LABEL_OSTREE_COMMIT: &str = "ostree.commit";
pub const LABEL_OSTREE_BOOTABLE: &str = "ostree.bootable";
pub const LABEL_BOOTC: &str = "containers.bootc";
pub const LABEL_OSTREE_LINUX: &str = "ostree.linux";
pub const LABEL_OSNAME: &str = "com.coreos.osname";
/// Label of a legacy machine-os-content image.
pub const LABEL_LEGACY_COMMIT: &str = "com.coreos.ostree-commit";
/// Where a legacy image keeps its repo.
pub const LEGACY_REPO_DIR: &str = "srv/repo";

/// How the OS travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OsFormat {
    OstreeNative,
    Legacy,
}

impl std::fmt::Display for OsFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OsFormat::OstreeNative => "ostree-native",
            OsFormat::Legacy => "legacy",
        })
    }
}

/// Tell the format from the image labels.
pub fn detect_format(labels: &BTreeMap<String, String>, what: &str) -> Result<OsFormat> {
    if labels.contains_key(LABEL_OSTREE_COMMIT)
        || labels.contains_key(LABEL_OSTREE_BOOTABLE)
        || labels.contains_key(LABEL_BOOTC)
    {
        return Ok(OsFormat::OstreeNative);
    }
    if labels.contains_key(LABEL_LEGACY_COMMIT) {
        return Ok(OsFormat::Legacy);
    }
    bail!(
        "{what} is not an OS image: it has neither the ostree-native labels ({LABEL_OSTREE_COMMIT}, {LABEL_BOOTC}) nor the machine-os-content label {LABEL_LEGACY_COMMIT}"
    )
}

/// The cache: one ostree repo plus a record per imported image digest.
pub struct Cache {
    pub dir: PathBuf,
    pub repo: Repo,
    /// Shared locks on the entries this run uses (`gc` leaves them alone).
    uses: std::sync::Mutex<Vec<crate::util::lock::Lock>>,
}

/// What an import left in the cache (`<cache>/os/<digest>/import.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImportRecord {
    pub image_digest: String,
    pub image: String,
    pub format: OsFormat,
    pub commit: String,
    /// ostree-native images: the base ostree commit under any derived
    /// layers (ostree-ext's `base_commit`); absent in older records.
    #[serde(default)]
    pub base_commit: Option<String>,
    /// Files of derived layers that ostree-ext dropped on import because
    /// they lie outside /usr, /etc and /var: `<layer> /<toplevel>: <n>`.
    #[serde(default)]
    pub dropped: Vec<String>,
    pub labels: BTreeMap<String, String>,
    /// Legacy images: the `/bootimage.json` found at the image root.
    pub bootimage_json: Option<String>,
    /// Images with no ostree commit (chunkah's): whose ostree wrote the
    /// merge commit from their layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_by: Option<String>,
}

impl Cache {
    /// Default location: `$XDG_CACHE_HOME/bootimage-gen` (or `~/.cache/...`).
    pub fn default_dir() -> PathBuf {
        dirs::cache_dir()
            .unwrap_or_else(|| PathBuf::from("/var/tmp"))
            .join("bootimage-gen")
    }

    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating cache dir {}", dir.display()))?;
        // Runs starting together on an empty cache create the repo once
        // (and none opens it half-created).
        let _lock = crate::util::lock::Lock::wait(
            &dir.join("locks/repo.lock"),
            "creating the cache's ostree repo",
        )
        .map_err(|e| tracing::warn!("{e:#}; opening the cache unlocked"))
        .ok();
        let repo = Repo::open_or_create(&dir.join("repo"), "bare-user")?;
        Ok(Cache {
            dir: dir.to_path_buf(),
            repo,
            uses: Default::default(),
        })
    }

    /// A scratch dir inside the cache (same filesystem), removed on drop.
    /// Its name records its owner (`work-PID.START.BOOT-…`) so that a later
    /// run can remove it if this one is killed (`sys::stale`).
    pub fn tempdir(&self) -> Result<tempfile::TempDir> {
        let t = self.dir.join("tmp");
        std::fs::create_dir_all(&t)
            .with_context(|| format!("creating the cache's scratch area {}", t.display()))?;
        tempfile::Builder::new()
            .prefix(&crate::sys::stale::work_prefix())
            .tempdir_in(&t)
            .map_err(|e| crate::util::space::explain(e, &t, 0))
            .context("creating a scratch dir in the cache")
    }

    /// The lock file of the OS entry for `digest`: held exclusively while
    /// importing, shared while a run uses the entry, exclusively by `gc`.
    pub fn os_lock_path(&self, digest: &str) -> PathBuf {
        self.dir
            .join("locks")
            .join(format!("os-{}.lock", digest.replace(':', "-")))
    }

    /// [`Cache::lookup`] for a run that goes on to use the entry: holds a
    /// shared lock on it (until the cache is dropped) so `gc` cannot remove
    /// it meanwhile, and marks it used now (`gc --max-age`).
    pub fn lookup_for_use(&self, digest: &str) -> Result<Option<ImportRecord>> {
        let l = crate::util::lock::Lock::shared(
            &self.os_lock_path(digest),
            &format!("using OS image {digest} from this cache"),
        )?;
        let Some(rec) = self.lookup(digest) else {
            return Ok(None);
        };
        let _ = std::fs::File::options()
            .write(true)
            .open(self.record_path(digest))
            .and_then(|f| f.set_modified(std::time::SystemTime::now()));
        self.uses.lock().expect("cache locks").push(l);
        Ok(Some(rec))
    }

    fn record_path(&self, digest: &str) -> PathBuf {
        self.dir
            .join("os")
            .join(digest.replace(':', "-"))
            .join("import.json")
    }

    /// The ref that keeps an imported image's commit alive.
    pub fn image_ref(digest: &str) -> String {
        format!("bootimage-gen/os/{}", digest.replace(':', "-"))
    }

    /// A previous import of this digest whose commit is still present.
    pub fn lookup(&self, digest: &str) -> Option<ImportRecord> {
        let t = std::fs::read(self.record_path(digest)).ok()?;
        let r: ImportRecord = serde_json::from_slice(&t).ok()?;
        self.repo.has_commit(&r.commit).then_some(r)
    }

    fn store(&self, rec: &ImportRecord) -> Result<()> {
        self.repo
            .set_ref(&Self::image_ref(&rec.image_digest), &rec.commit)?;
        let p = self.record_path(&rec.image_digest);
        std::fs::create_dir_all(p.parent().unwrap_or(&self.dir))?;
        let tmp = p.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(rec)?)?;
        std::fs::rename(&tmp, &p)?;
        Ok(())
    }
}

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
                nonostree::Imported {
                    dropped: dropped_by_import(&repo, &state.merge_commit)?,
                    merge_commit: state.merge_commit,
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
    if nonostree::is_root() {
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
    Ok(nonostree::Imported {
        dropped: dropped_by_import(repo, &state.merge_commit)?,
        merge_commit: state.merge_commit,
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
    let arch = crate::util::arch::coreos_arch(&img.config.architecture().to_string());
    let b = match Buildroot::prepare(&cache.dir, &cache.repo, commit, &arch) {
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

/// The refs a node's ostree-ext leaves in its repo for a pulled image
/// (bootc `crates/ostree-ext/src/container/store.rs`: `ref_for_image`,
/// `ref_for_layer`): one per layer of the manifest and one for the image.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ImageRefs {
    /// `ostree/container/blob/<escaped layer digest>`, in manifest order,
    /// as the cache repo holds them (copied with their commits).
    pub layers: Vec<String>,
    /// `ostree/container/image/<escaped imgref>` for the image reference a
    /// node's origin names, pointing at the merge commit.
    pub image: String,
}

/// The image and layer refs of the merge commit `commit` in `repo` (the
/// cache's), with the image ref under the registry pullspec a node's
/// origin names (`ostree-unverified-registry:<pullspec>`).
pub fn image_refs(repo: &Path, commit: &str, pullspec: &str) -> Result<ImageRefs> {
    use ostree_ext::container::{store, ImageReference, Transport};
    use ostree_ext::refescape::prefix_escape_for_ref;
    let r = ostree_ext::ostree::Repo::new_for_path(repo);
    r.open(ostree_ext::gio::Cancellable::NONE)
        .with_context(|| format!("opening the cache repo {}", repo.display()))?;
    // What bootc's query_image_commit reads: the manifest in the merge
    // commit's metadata, and a commit behind the base layer's ref.
    let state = store::query_image_commit(&r, commit)
        .with_context(|| format!("reading the image metadata of merge commit {commit}"))?;
    let mut layers = Vec::new();
    for l in state.manifest.layers() {
        let name = prefix_escape_for_ref(LAYER_REF_PREFIX, l.digest().as_ref())?;
        if r.resolve_rev(&name, true)?.is_none() {
            bail!(
                "the cache repo {} lacks the layer ref {name} of merge commit {commit} (an interrupted import or gc?): run `bootimage-gen gc` and again",
                repo.display()
            );
        }
        layers.push(name);
    }
    let imgref = ImageReference {
        transport: Transport::Registry,
        name: pullspec.to_string(),
    };
    Ok(ImageRefs {
        layers,
        image: prefix_escape_for_ref(IMAGE_REF_PREFIX, &imgref.to_string())?,
    })
}

/// ostree-ext's ref prefixes (`store.rs` `LAYER_PREFIX`, `IMAGE_PREFIX`).
pub const LAYER_REF_PREFIX: &str = "ostree/container/blob";
pub const IMAGE_REF_PREFIX: &str = "ostree/container/image";

/// Top-level directories ostree-ext drops without their being content
/// (`tar/write.rs` `EXCLUDED_TOPLEVEL_PATHS`): a container build leaves
/// files there routinely.
const IGNORED_TOPLEVELS: [&str; 5] = ["run", "tmp", "proc", "sys", "dev"];

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

fn is_checksum(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

async fn import_legacy(
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

/// What the imported OS says about itself.
#[derive(Debug, Clone, Serialize)]
pub struct OsInfo {
    /// The commit deployed: the import's (for ostree-native images,
    /// ostree-ext's merge commit, which differs per import).
    pub commit: String,
    /// The OS's own commit, the same whatever the cache holds: the image's
    /// `ostree.commit` label, else the import's base commit (ostree-native);
    /// the verified commit of a legacy image.
    pub image_commit: String,
    pub version: String,
    pub timestamp: i64,
    pub kernel_version: String,
    pub osname: String,
    /// Where `osname` came from (label, commit metadata or os-release).
    pub osname_source: String,
    pub os_release: BTreeMap<String, String>,
    pub config: OsBootConfig,
}

/// Parse os-release text.
pub fn parse_os_release(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            if l.starts_with('#') {
                return None;
            }
            let (k, v) = l.split_once('=')?;
            Some((
                k.to_string(),
                v.trim_matches(|c| c == '"' || c == '\'').to_string(),
            ))
        })
        .collect()
}

/// Read the OS's identity and configuration from the imported commit.
pub fn read_os_info(repo: &Repo, rec: &ImportRecord) -> Result<OsInfo> {
    let c = &rec.commit;
    let what = &rec.image;
    let mods = repo.list_dir(c, "/usr/lib/modules")?.ok_or_else(|| {
        anyhow!("OS image {what} has no /usr/lib/modules: it is not a bootable OS (no kernel)")
    })?;
    let mut kernels = Vec::new();
    for (_, name) in mods.iter().filter(|(is_dir, _)| *is_dir) {
        if repo
            .read_file(c, &format!("/usr/lib/modules/{name}/vmlinuz"))?
            .is_some()
        {
            kernels.push(name.clone());
        }
    }
    let kernel_version = match kernels.len() {
        0 => bail!("OS image {what} has no kernel: no /usr/lib/modules/<version>/vmlinuz"),
        1 => kernels.remove(0),
        _ => bail!(
            "OS image {what} has {} kernels in /usr/lib/modules ({}); expected one",
            kernels.len(),
            kernels.join(", ")
        ),
    };
    let os_release = repo
        .read_file(c, "/usr/lib/os-release")?
        .or(repo.read_file(c, "/usr/etc/os-release")?)
        .map(|b| parse_os_release(&String::from_utf8_lossy(&b)))
        .unwrap_or_default();
    let version = repo
        .metadata_string(c, "version")?
        .or_else(|| rec.labels.get("org.opencontainers.image.version").cloned())
        .or_else(|| rec.labels.get("version").cloned())
        .or_else(|| os_release.get("OSTREE_VERSION").cloned())
        .ok_or_else(|| anyhow!("OS image {what}: cannot tell its version (no 'version' in the commit metadata or labels)"))?;
    let (osname, osname_source) = if let Some(n) = rec.labels.get(LABEL_OSNAME) {
        (n.clone(), format!("label {LABEL_OSNAME}"))
    } else if let Some(n) = repo.metadata_string(c, "coreos-assembler.osname")? {
        (n, "commit metadata coreos-assembler.osname".into())
    } else if let Some(n) = os_release.get("ID") {
        (n.clone(), "os-release ID".into())
    } else {
        bail!("OS image {what}: cannot tell its osname (no {LABEL_OSNAME} label and no os-release ID)")
    };
    if osname.is_empty() || osname.contains('/') || osname.contains(char::is_whitespace) {
        bail!("OS image {what}: osname '{osname}' is not usable as an ostree stateroot");
    }
    let image_json = repo.read_file(c, osconfig::IMAGE_JSON)?;
    let platforms_json = repo.read_file(c, osconfig::PLATFORMS_JSON)?;
    let has_live = repo
        .list_dir(c, osconfig::LIVE_DIR)?
        .is_some_and(|v| !v.is_empty());
    let config = OsBootConfig::from_files(
        image_json.as_deref(),
        platforms_json.as_deref(),
        rec.bootimage_json.as_deref().map(str::as_bytes),
        has_live,
    )
    .with_context(|| format!("bootimage configuration of OS image {what}"))?;
    let image_commit = match rec.format {
        OsFormat::Legacy => c.clone(),
        OsFormat::OstreeNative => rec
            .labels
            .get(LABEL_OSTREE_COMMIT)
            .filter(|x| is_checksum(x))
            .or(rec.base_commit.as_ref())
            .unwrap_or(c)
            .clone(),
    };
    Ok(OsInfo {
        commit: c.clone(),
        image_commit,
        version,
        timestamp: repo.timestamp(c)?,
        kernel_version,
        osname,
        osname_source,
        os_release,
        config,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn formats_from_labels() {
        let mut l = BTreeMap::new();
        assert!(detect_format(&l, "x").is_err());
        l.insert(LABEL_LEGACY_COMMIT.to_string(), "a".repeat(64));
        assert_eq!(detect_format(&l, "x").unwrap(), OsFormat::Legacy);
        l.insert(LABEL_BOOTC.to_string(), "1".into());
        assert_eq!(detect_format(&l, "x").unwrap(), OsFormat::OstreeNative);
    }
    #[test]
    fn os_release() {
        let m = parse_os_release("NAME=\"Test OS\"\nID=testos\n# c\nVERSION_ID='1.2'\n");
        assert_eq!(m["NAME"], "Test OS");
        assert_eq!(m["VERSION_ID"], "1.2");
    }
}
