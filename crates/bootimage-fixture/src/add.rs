//! `add-image`: an image from directories or tars as layers, with labels,
//! an architecture, and OCI or Docker media types, stored and tagged.
use crate::layer::{layer_from_dir, put_layer};
use crate::layout::{init_layout, put_image, sha256, CREATED};
use crate::opts::Opts;
use anyhow::{bail, Result};
use serde_json::json;
use std::path::Path;

pub(crate) fn add_image(args: &[String]) -> Result<()> {
    let o = Opts::parse(
        args,
        &[
            "--layout",
            "--tag",
            "--layer-dir",
            "--layer-tar",
            "--label",
            "--arch",
        ],
        &["--zstd", "--docker", "--minimal-config"],
    );
    let (layout, tag) = (o.path("--layout"), o.need("--tag"));
    let mut layers: Vec<Vec<u8>> = Vec::new();
    for (k, v) in &o.values {
        match *k {
            "--layer-dir" => layers.push(layer_from_dir(Path::new(v))?),
            "--layer-tar" => layers.push(std::fs::read(v)?),
            _ => {}
        }
    }
    let mut labels = serde_json::Map::new();
    for (k, v) in o.labels()? {
        labels.insert(k, v.into());
    }
    let arch = o.get("--arch").unwrap_or_else(|| "amd64".into());
    let (zstd, docker, minimal) = (
        o.has("--zstd"),
        o.has("--docker"),
        o.has("--minimal-config"),
    );
    if zstd && docker {
        bail!("--zstd and --docker: Docker schema 2 has no zstd layer type");
    }
    init_layout(&layout)?;
    let mut diff_ids = Vec::new();
    let mut descs = Vec::new();
    for l in &layers {
        diff_ids.push(sha256(l));
        descs.push(put_layer(&layout, l, zstd, docker)?);
    }
    let mut config = if minimal {
        // image-spec config.md: only these three are required.
        json!({"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": diff_ids}})
    } else {
        json!({
            "architecture": arch, "os": "linux",
            "created": CREATED,
            "config": {"Labels": labels},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": layers.iter().map(|_| json!({"created": CREATED, "created_by": "bootimage-fixture"})).collect::<Vec<_>>(),
        })
    };
    if arch == "arm64" && !minimal {
        config["variant"] = json!("v8");
    }
    put_image(&layout, &tag, &config, descs, docker)?;
    Ok(())
}
