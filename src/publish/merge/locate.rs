//! Locations as seen from the output: a location relative to its input's
//! directory rewritten relative to the output's directory (or put under
//! `--base-url`); URLs and absolute paths kept.
use crate::publish::stream::{Arch, Stream};
use anyhow::{bail, Context, Result};
use std::path::{Component, Path, PathBuf};

/// `s`, read from `doc_path`, with its relative locations as seen from
/// `out_dir` (streams.json beside the per-stream directories).
pub fn located(s: &Stream, doc_path: &Path, out_dir: &Path) -> Result<Stream> {
    let from = doc_path.parent().unwrap_or(Path::new("."));
    let mut m = s.clone();
    for a in m.architectures.values_mut() {
        *a = relocate(a, from, out_dir, None)?;
    }
    Ok(m)
}

/// `a` with each relative location moved from `from` to `out_dir`.
pub(super) fn relocate(
    a: &Arch,
    from: &Path,
    out_dir: &Path,
    base_url: Option<&str>,
) -> Result<Arch> {
    let mut a = a.clone();
    for p in a.artifacts.values_mut() {
        for kinds in p.formats.values_mut() {
            for art in kinds.values_mut() {
                art.location = rebase(&art.location, from, out_dir, base_url)?;
            }
        }
    }
    Ok(a)
}

/// A location as seen from `out_dir` (under `base_url` when given) when
/// it is relative to `from`; a URL or an absolute path as it is.
pub fn rebase(loc: &str, from: &Path, out_dir: &Path, base_url: Option<&str>) -> Result<String> {
    if loc.contains("://") || loc.starts_with('/') {
        return Ok(loc.to_string());
    }
    let target = std::path::absolute(from.join(loc))
        .with_context(|| format!("resolving {loc} under {}", from.display()))?;
    let out =
        std::path::absolute(out_dir).with_context(|| format!("resolving {}", out_dir.display()))?;
    let rel = relative(&normal(&target), &normal(&out));
    let rel = rel.to_string_lossy().into_owned();
    Ok(match base_url {
        Some(b) if !b.is_empty() => {
            if rel.starts_with("../") {
                bail!(
                    "{loc} (in {}) lies outside the output directory {}: --base-url can only name files under it",
                    from.display(),
                    out_dir.display()
                );
            }
            format!("{}/{rel}", b.trim_end_matches('/'))
        }
        _ => rel,
    })
}

/// `p` without `.` and with `..` applied (no symlinks followed).
fn normal(p: &Path) -> PathBuf {
    let mut v = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                v.pop();
            }
            c => v.push(c),
        }
    }
    v
}

/// `target` relative to the directory `base` (both absolute, normal).
fn relative(target: &Path, base: &Path) -> PathBuf {
    let t: Vec<_> = target.components().collect();
    let b: Vec<_> = base.components().collect();
    let common = t.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut r = PathBuf::new();
    for _ in common..b.len() {
        r.push("..");
    }
    for c in &t[common..] {
        r.push(c);
    }
    r
}
