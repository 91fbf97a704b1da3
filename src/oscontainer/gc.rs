//! `gc`'s pruning of cache entries: imported OS images (`os/<digest>/` and
//! their ref in the repo, whose objects `ostree prune` then frees) and VM
//! appliances (`appliance/<key>/`), least recently used first, by age and/or
//! until the cache fits a size. An entry a live run uses is never removed:
//! runs hold a shared lock on it (`locks/os-*.lock`,
//! `locks/appliance-*.lock`), and gc removes an entry only while holding
//! that lock exclusively (without waiting).
use super::repo::Repo;
use super::Cache;
use crate::util::cmd;
use crate::util::lock::Lock;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// What kind of cache entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Os,
    Appliance,
}

/// A cache entry gc may remove.
#[derive(Debug, Clone)]
pub struct Entry {
    pub kind: Kind,
    /// The OS image digest, or the appliance key.
    pub name: String,
    pub dir: PathBuf,
    pub lock: PathBuf,
    /// Last used (the record's or directory's mtime, set on each use).
    pub used: SystemTime,
}

/// The policy.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Remove entries unused for longer than this.
    pub max_age: Option<Duration>,
    /// Then remove the least recently used until the cache is this small.
    pub max_size: Option<u64>,
    /// Only say what would go.
    pub dry_run: bool,
}

/// What pruning did.
#[derive(Debug, Default)]
pub struct Pruned {
    pub removed: Vec<String>,
    /// Entries that matched the policy but are in use by a live run.
    pub in_use: Vec<String>,
    pub size_before: u64,
    pub size_after: u64,
    /// False when an import was running, so objects were not freed (the
    /// next gc frees them).
    pub pruned_objects: bool,
}

/// The entries of the cache at `dir`, least recently used first.
pub fn entries(dir: &Path) -> Vec<Entry> {
    let locks = dir.join("locks");
    let mut v = vec![];
    let mtime = |p: &Path| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH)
    };
    if let Ok(rd) = std::fs::read_dir(dir.join("os")) {
        for e in rd.flatten() {
            let d = e.path();
            let rec = d.join("import.json");
            let Ok(r) = std::fs::read(&rec) else { continue };
            let Ok(r) = serde_json::from_slice::<super::ImportRecord>(&r) else {
                continue;
            };
            v.push(Entry {
                kind: Kind::Os,
                lock: locks.join(format!("os-{}.lock", r.image_digest.replace(':', "-"))),
                name: r.image_digest,
                used: mtime(&rec),
                dir: d,
            });
        }
    }
    if let Ok(rd) = std::fs::read_dir(dir.join("appliance")) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            v.push(Entry {
                kind: Kind::Appliance,
                lock: locks.join(format!("appliance-{name}.lock")),
                used: mtime(&e.path()),
                dir: e.path(),
                name,
            });
        }
    }
    v.sort_by_key(|e| e.used);
    v
}

/// Bytes the cache occupies (repo, records, appliances, scratch).
pub fn size(dir: &Path) -> u64 {
    crate::sys::stale::du(dir)
}

fn describe(e: &Entry) -> String {
    let age = SystemTime::now()
        .duration_since(e.used)
        .unwrap_or_default()
        .as_secs();
    format!(
        "{} {} (unused for {})",
        match e.kind {
            Kind::Os => "OS image",
            Kind::Appliance => "VM appliance",
        },
        e.name,
        human_age(age)
    )
}

fn human_age(s: u64) -> String {
    match s {
        s if s >= 2 * 86400 => format!("{} days", s / 86400),
        s if s >= 2 * 3600 => format!("{} hours", s / 3600),
        s if s >= 120 => format!("{} minutes", s / 60),
        s => format!("{s} s"),
    }
}

/// Remove ostree-ext's image refs (`ostree/container/image/...`) whose
/// manifest is `digest`: they, not only our ref, keep the commit alive.
fn remove_container_images(repo: &Repo, digest: &str) -> Result<()> {
    use ostree_ext::container::{store, ImageReference};
    let r = ostree_ext::ostree::Repo::new_for_path(&repo.path);
    r.open(ostree_ext::gio::Cancellable::NONE)
        .with_context(|| format!("opening ostree repo {}", repo.path.display()))?;
    for name in store::list_images(&r)? {
        let Ok(ir) = ImageReference::try_from(name.as_str()) else {
            continue;
        };
        let Some(state) = store::query_image(&r, &ir)? else {
            continue;
        };
        if state.manifest_digest.to_string() == digest {
            store::remove_image(&r, &ir)?;
        }
    }
    Ok(())
}

/// The lock an import holds shared while it writes into the repo; gc frees
/// layers and objects only while it holds it exclusively (no import runs).
pub fn repo_write_lock(cache: &Path) -> PathBuf {
    cache.join("locks/repo-write.lock")
}

/// Remove one entry if no live run holds it; `Ok(false)` when in use.
fn remove(cache: &Path, repo: &Repo, e: &Entry) -> Result<bool> {
    let Some(_l) = Lock::try_exclusive(&e.lock)? else {
        return Ok(false);
    };
    if e.kind == Kind::Os && repo.path.join("config").is_file() {
        remove_container_images(repo, &e.name)
            .with_context(|| format!("removing OS image {} from the cache's repo", e.name))?;
        let r = Cache::image_ref(&e.name);
        // Absent already is fine: the record is what makes an entry.
        let _ = cmd::run(&mut cmd::new(
            "ostree",
            [
                format!("--repo={}", repo.path.display()),
                "refs".into(),
                "--delete".into(),
                r,
            ],
        ));
    }
    std::fs::remove_dir_all(&e.dir).with_context(|| {
        format!(
            "removing {} from cache {}",
            e.dir.display(),
            cache.display()
        )
    })?;
    Ok(true)
}

/// Free the layers no image uses and the objects no ref reaches; skipped
/// (`Ok(false)`) while an import writes into the repo.
fn ostree_prune(cache: &Path, repo: &Repo) -> Result<bool> {
    let Some(_l) = Lock::try_exclusive(&repo_write_lock(cache))? else {
        return Ok(false);
    };
    let r = ostree_ext::ostree::Repo::new_for_path(&repo.path);
    r.open(ostree_ext::gio::Cancellable::NONE)
        .with_context(|| format!("opening ostree repo {}", repo.path.display()))?;
    ostree_ext::container::store::gc_image_layers(&r)
        .with_context(|| format!("freeing unused layers in {}", repo.path.display()))?;
    cmd::run(&mut cmd::new(
        "ostree",
        [
            format!("--repo={}", repo.path.display()),
            "prune".into(),
            "--refs-only".into(),
        ],
    ))
    .with_context(|| format!("pruning ostree repo {}", repo.path.display()))?;
    // The OS buildroots hardlink objects: those of commits now gone go too,
    // or their files would keep the space.
    super::buildroot::prune(cache, repo)?;
    Ok(true)
}

/// Apply `policy` to the cache at `dir`.
pub fn prune(dir: &Path, policy: &Policy) -> Result<Pruned> {
    let mut p = Pruned {
        size_before: size(dir),
        pruned_objects: true,
        ..Default::default()
    };
    let repo = Repo {
        path: dir.join("repo"),
    };
    let have_repo = repo.path.join("config").is_file();
    let now = SystemTime::now();
    let mut left = entries(dir);
    let mut removed_os = false;
    // By age.
    if let Some(age) = policy.max_age {
        let (old, keep): (Vec<Entry>, Vec<Entry>) = left
            .into_iter()
            .partition(|e| now.duration_since(e.used).unwrap_or_default() > age);
        left = keep;
        for e in old {
            if policy.dry_run {
                p.removed.push(describe(&e));
            } else if remove(dir, &repo, &e)? {
                removed_os |= e.kind == Kind::Os;
                p.removed.push(describe(&e));
            } else {
                p.in_use.push(describe(&e));
            }
        }
    }
    if removed_os && have_repo {
        p.pruned_objects &= ostree_prune(dir, &repo)?;
        removed_os = false;
    }
    // By size: least recently used first, measuring after each removal.
    if let Some(max) = policy.max_size {
        let mut cur = size(dir);
        for e in left {
            if cur <= max {
                break;
            }
            if policy.dry_run {
                p.removed
                    .push(format!("{} (dry run: size not re-measured)", describe(&e)));
                continue;
            }
            if remove(dir, &repo, &e)? {
                if e.kind == Kind::Os && have_repo {
                    p.pruned_objects &= ostree_prune(dir, &repo)?;
                }
                p.removed.push(describe(&e));
                cur = size(dir);
            } else {
                p.in_use.push(describe(&e));
            }
        }
    }
    if removed_os && have_repo {
        p.pruned_objects &= ostree_prune(dir, &repo)?;
    }
    p.size_after = size(dir);
    Ok(p)
}
