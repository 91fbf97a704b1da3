//! The SLSA provenance of a build: what `generate` made (each artifact of
//! meta.json and its sha256), from what (the release and the OS image, by
//! digest), by what (this tool and its version) and how (the release as
//! named, the platforms, arch and stream). Written beside meta.json
//! (`provenance.intoto.json`, and `provenance.dsse.json` signed when a key
//! is given) and attached to a pushed index as a cosign attestation.
//! In: meta.json documents; out: an in-toto Statement v1 (SLSA v1).
use super::sigstore;
use anyhow::{anyhow, Context, Result};
use serde_json::{json, Value};

/// The statement's file beside meta.json.
pub const STATEMENT_FILE: &str = "provenance.intoto.json";
/// The DSSE envelope of the statement, when a key signs it.
pub const ENVELOPE_FILE: &str = "provenance.dsse.json";
/// The in-toto payload type of a DSSE envelope.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// What built it: this tool, named by its project and version.
pub const BUILDER: &str = "urn:bootimage-gen:builder";

/// The statement for the builds of `metas` (one per arch and stream).
pub fn statement(metas: &[&Value]) -> Result<Value> {
    let mut subjects = Vec::new();
    let mut deps = Vec::new();
    let mut runs = Vec::new();
    for m in metas {
        let images = m["images"]
            .as_object()
            .ok_or_else(|| anyhow!("meta.json has no images"))?;
        for img in images.values() {
            if let (Some(p), Some(h)) = (img["path"].as_str(), img["sha256"].as_str()) {
                let s = (p.to_string(), h.to_string());
                if !subjects.contains(&s) {
                    subjects.push(s);
                }
            }
        }
        for key in ["release-payload", "base-oscontainer"] {
            let (Some(image), Some(digest)) = (m[key]["image"].as_str(), m[key]["digest"].as_str())
            else {
                continue;
            };
            let image = image.split('@').next().unwrap_or(image);
            let d = (format!("{image}@{digest}"), digest.to_string());
            if !deps.contains(&d) {
                deps.push(d);
            }
        }
        runs.push(json!({
            "release": m["release-payload"]["image"],
            "release-version": m["release-payload"]["tags"][0],
            "arch": m["coreos-assembler.basearch"],
            "os-version": m["ostree-version"],
            "ostree-commit": m["ostree-commit"],
            "platforms": images.keys().collect::<Vec<_>>(),
        }));
    }
    Ok(sigstore::slsa_provenance(
        &subjects,
        &deps,
        &format!("{BUILDER}:{}", env!("CARGO_PKG_VERSION")),
        json!({ "builds": runs }),
    ))
}

/// The statement of the build in `dir` beside its meta.json, and with
/// `key` its DSSE envelope too.
pub fn write(dir: &std::path::Path, key: Option<&sigstore::SigningKey>) -> Result<()> {
    let meta: Value = serde_json::from_slice(
        &std::fs::read(dir.join(crate::publish::meta::META_JSON))
            .with_context(|| format!("{}: reading meta.json", dir.display()))?,
    )
    .with_context(|| format!("{}/meta.json", dir.display()))?;
    let st = statement(&[&meta])?;
    let mut bytes = serde_json::to_vec_pretty(&st)?;
    bytes.push(b'\n');
    crate::publish::meta::write_atomic(dir, STATEMENT_FILE, &bytes)?;
    if let Some(k) = key {
        let env = sigstore::dsse_sign(PAYLOAD_TYPE, &serde_json::to_vec(&st)?, k);
        let mut bytes = serde_json::to_vec_pretty(&env)?;
        bytes.push(b'\n');
        crate::publish::meta::write_atomic(dir, ENVELOPE_FILE, &bytes)?;
        crate::util::ui::status(format!(
            "provenance: {} signed by key {} ({})",
            ENVELOPE_FILE,
            k.public().id(),
            k.public().origin()
        ));
    }
    Ok(())
}
