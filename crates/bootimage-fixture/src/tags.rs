//! Subcommands over manifests already stored: `index` (an OCI image index
//! of several, one per arch) and `merge` (one layout's tagged image, blobs
//! and all, copied into another under a new tag).
use crate::layout::{find_tag, init_layout, read_blob, set_tag, write_blob, MT_INDEX, MT_MANIFEST};
use crate::opts::Opts;
use anyhow::{Context, Result};
use serde_json::{json, Value};

/// An OCI image index of manifests already in the layout, one per arch.
pub(crate) fn index(args: &[String]) -> Result<()> {
    let o = Opts::parse(args, &["--layout", "--tag", "--entry"], &[]);
    let (layout, tag, entries) = (o.path("--layout"), o.need("--tag"), o.all("--entry"));
    let mut manifests = Vec::new();
    for e in entries {
        let (arch, digest) = e.split_once('=').context("--entry ARCH=DIGEST")?;
        let blob = read_blob(&layout, digest)?;
        let m: Value = serde_json::from_slice(&blob)?;
        let mt = m["mediaType"].as_str().unwrap_or(MT_MANIFEST).to_string();
        let mut platform = json!({"architecture": arch, "os": "linux"});
        if arch == "arm64" {
            platform["variant"] = json!("v8");
        }
        manifests.push(
            json!({"mediaType": mt, "digest": digest, "size": blob.len(), "platform": platform}),
        );
    }
    let idx = json!({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": manifests});
    let (d, n) = write_blob(&layout, &serde_json::to_vec(&idx)?)?;
    set_tag(
        &layout,
        &tag,
        json!({"mediaType": MT_INDEX, "digest": d, "size": n}),
    )?;
    println!("{d}");
    Ok(())
}

pub(crate) fn merge(args: &[String]) -> Result<()> {
    let o = Opts::parse(args, &["--from", "--from-tag", "--layout", "--tag"], &[]);
    let (from, from_tag, layout, tag) = (
        o.path("--from"),
        o.need("--from-tag"),
        o.path("--layout"),
        o.need("--tag"),
    );
    init_layout(&layout)?;
    for e in std::fs::read_dir(from.join("blobs/sha256"))? {
        let e = e?;
        let dest = layout.join("blobs/sha256").join(e.file_name());
        if !dest.exists() {
            std::fs::copy(e.path(), &dest)?;
        }
    }
    let mut d = find_tag(&from, &from_tag)?;
    if let Some(o) = d.as_object_mut() {
        o.remove("annotations");
    }
    println!("{}", d["digest"].as_str().unwrap_or(""));
    set_tag(&layout, &tag, d)
}
