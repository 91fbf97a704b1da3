//! Images made from one already in the layout, as a build `FROM` it
//! writes them: `derive` (one layer more), `relabel` (labels set or
//! removed) and `set-arch` (another architecture). Each loads the base's
//! manifest and config, edits them, and stores the result under a tag.
use crate::layer::{layer_from_dir, put_layer};
use crate::layout::{load_image, sha256, store_image, CREATED};
use crate::opts::Opts;
use anyhow::{Context, Result};
use serde_json::{json, Value};

/// FROM-TAG plus one layer, as `podman build` writes a `FROM base` + `COPY`
/// image: the base manifest's layers kept, one appended; the base config
/// with its labels (and everything else) kept, `rootfs.diff_ids` and
/// `history` extended, `created` updated.
pub(crate) fn derive(args: &[String]) -> Result<()> {
    let o = Opts::parse(
        args,
        &[
            "--layout",
            "--from-tag",
            "--tag",
            "--layer-dir",
            "--created-by",
        ],
        &["--zstd"],
    );
    let (layout, from, tag, dir) = (
        o.path("--layout"),
        o.need("--from-tag"),
        o.need("--tag"),
        o.path("--layer-dir"),
    );
    let zstd = o.has("--zstd");
    let created_by = o
        .get("--created-by")
        .unwrap_or_else(|| "/bin/sh -c #(nop) COPY dir:layer in / ".into());
    let (mut manifest, mut config) = load_image(&layout, &from)?;
    let tar = layer_from_dir(&dir)?;
    config["rootfs"]["diff_ids"]
        .as_array_mut()
        .context("diff_ids")?
        .push(json!(sha256(&tar)));
    config["created"] = json!(CREATED);
    push_history(
        &mut config,
        json!({"created": CREATED, "created_by": created_by}),
    );
    let mut layers = manifest["layers"].as_array().cloned().context("layers")?;
    layers.push(put_layer(&layout, &tar, zstd, false)?);
    // Keep the base manifest's annotations (ostree-ext writes some), drop none.
    manifest["layers"] = json!(layers);
    store_image(&layout, &tag, manifest, &config)
}

/// FROM-TAG with labels set (`--label K=V`) or removed (`--unlabel K`), as
/// `podman build` writes `FROM base` + `LABEL ...`: layers kept, only the
/// config's `config.Labels` changed (and an empty-layer history entry).
pub(crate) fn relabel(args: &[String]) -> Result<()> {
    let o = Opts::parse(
        args,
        &["--layout", "--from-tag", "--tag", "--label", "--unlabel"],
        &[],
    );
    let (layout, from, tag) = (o.path("--layout"), o.need("--from-tag"), o.need("--tag"));
    let (set, unset) = (o.labels()?, o.all("--unlabel"));
    let (manifest, mut config) = load_image(&layout, &from)?;
    if !config["config"].is_object() {
        config["config"] = json!({});
    }
    if !config["config"]["Labels"].is_object() {
        config["config"]["Labels"] = json!({});
    }
    let labels = config["config"]["Labels"]
        .as_object_mut()
        .context("labels")?;
    for k in &unset {
        labels.remove(k);
    }
    for (k, v) in &set {
        labels.insert(k.clone(), json!(v));
    }
    let what: Vec<String> = set.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let entry = json!({"created": CREATED, "created_by": format!("/bin/sh -c #(nop) LABEL {}", what.join(" ")), "empty_layer": true});
    push_history(&mut config, entry);
    store_image(&layout, &tag, manifest, &config)
}

/// Append `entry` to the image config's `history` (made if absent).
fn push_history(config: &mut Value, entry: Value) {
    match config["history"].as_array_mut() {
        Some(h) => h.push(entry),
        None => config["history"] = json!([entry]),
    }
}

/// TAG's image with its config's architecture set to ARCH (OCI names:
/// arm64 gets variant v8), as a build on that arch writes it. ostree-ext's
/// encapsulate records the host's arch; the test OS of another arch is
/// encapsulated on this host, then relabelled.
pub(crate) fn set_arch(args: &[String]) -> Result<()> {
    let o = Opts::parse(args, &["--layout", "--tag", "--arch"], &[]);
    let (layout, tag, arch) = (o.path("--layout"), o.need("--tag"), o.need("--arch"));
    let (manifest, mut config) = load_image(&layout, &tag)?;
    config["architecture"] = json!(arch);
    match arch.as_str() {
        "arm64" => config["variant"] = json!("v8"),
        _ => {
            config.as_object_mut().context("config")?.remove("variant");
        }
    }
    store_image(&layout, &tag, manifest, &config)
}
