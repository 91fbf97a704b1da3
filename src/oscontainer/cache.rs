//! The cache: one ostree repo plus a record per imported image digest
//! ([`ImportRecord`], `<cache>/os/<digest>/import.json`), with the locks that
//! keep runs and `gc` apart. In: a cache directory; out: the repo, the
//! records of earlier imports, scratch dirs on the cache's filesystem.
use super::format::OsFormat;
use super::repo::Repo;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

    pub(super) fn store(&self, rec: &ImportRecord) -> Result<()> {
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
