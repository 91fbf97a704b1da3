//! meta.json on disk: read back (with the `images` entries' keys beyond
//! cosa's artifact fields), written atomically after its checks in cosa's
//! four-space indentation, merged with the one already in the directory;
//! and the atomic write every publish file goes through. In: a directory
//! and a `Meta`; out: the file, or the record read.
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use super::schema::{Meta, ARTIFACT_FIELDS, IMAGE_KEY_OSTREE, META_JSON};

/// Reads `dir/meta.json`; `Ok(None)` when there is none.
pub fn read_meta(dir: &Path) -> Result<Option<Meta>> {
    let path = dir.join(META_JSON);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut meta: Meta =
        serde_json::from_slice(&data).with_context(|| format!("parsing {}", path.display()))?;
    // The entries' keys beyond cosa's artifact fields.
    let v: serde_json::Value = serde_json::from_slice(&data)?;
    if let Some(images) = v.get("images").and_then(|i| i.as_object()) {
        for (k, e) in images {
            let Some(e) = e.as_object() else { continue };
            let more: serde_json::Map<_, _> = e
                .iter()
                .filter(|(f, _)| !ARTIFACT_FIELDS.contains(&f.as_str()))
                .map(|(f, x)| (f.clone(), x.clone()))
                .collect();
            if !more.is_empty() {
                meta.image_details.insert(k.clone(), more);
            }
        }
    }
    Ok(Some(meta))
}

/// Writes `dir/meta.json` atomically, pretty-printed with four-space
/// indentation like cosa (`json.dump(..., indent=4)`), mode 0644.
pub fn write_meta(dir: &Path, meta: &Meta) -> Result<()> {
    meta.check()?;
    if meta.lacks_ostree_image() {
        tracing::warn!(
            "{META_JSON} has no images.{IMAGE_KEY_OSTREE} entry, which cosa's schema requires"
        );
    }
    let mut v = serde_json::to_value(meta).context("serialising meta.json")?;
    for (k, more) in &meta.image_details {
        if let Some(e) = v
            .get_mut("images")
            .and_then(|i| i.get_mut(k))
            .and_then(|e| e.as_object_mut())
        {
            for (f, x) in more {
                e.insert(f.clone(), x.clone());
            }
        }
    }
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    v.serialize(&mut ser).context("serialising meta.json")?;
    out.push(b'\n');
    write_atomic(dir, META_JSON, &out)
}

/// Merges `meta` with the meta.json already in `dir` (if any, see
/// [`Meta::merge_existing`]) and writes the result; returns what was
/// written. A meta.json of another build is an
/// [`OutputDirConflict`](super::OutputDirConflict).
pub fn write_merged_meta(dir: &Path, mut meta: Meta) -> Result<Meta> {
    if let Some(existing) = read_meta(dir)? {
        meta.merge_existing(existing, dir)?;
    }
    write_meta(dir, &meta)?;
    Ok(meta)
}

/// Write `dir/name` atomically (the staged path of [`crate::publish::staged`]).
pub(crate) fn write_atomic(dir: &Path, name: &str, data: &[u8]) -> Result<()> {
    crate::publish::staged::write_file(dir, name, data)
}
