//! The meta.json and stream.json of each (arch, stream) of the index:
//! [`Docs`] reads the parts' documents back and, when they differ, pushes
//! one merged from all of them ([`merge_meta`]: images united;
//! [`merge_stream`]: `merge::unite`, as `stream merge` merges directories).
use super::part::{prefix, META};
use crate::publish::registry::artifact::artifact;
use crate::publish::registry::client::Client;
use crate::publish::registry::layout::*;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::collections::HashMap;

/// The largest meta.json or stream.json read back for a merge.
const DOC_MAX: u64 = 16 << 20;

/// meta.json and stream.json of the parts, read back once each, and
/// those merged from several parts, pushed once each.
pub struct Docs {
    /// The parts' tag prefix (`<tag>.part.`): a merged document names its
    /// parts without it, so the same parts under another tag make the same
    /// index.
    prefix: String,
    read: HashMap<String, Vec<u8>>,
    merged: HashMap<String, Value>,
}

impl Docs {
    pub fn new(tag: &str) -> Docs {
        Docs {
            prefix: prefix(tag),
            read: HashMap::new(),
            merged: HashMap::new(),
        }
    }

    /// The document an entry names (its manifest's one layer).
    fn doc(&mut self, c: &Client, e: &Value) -> Result<Vec<u8>> {
        let d = e["digest"].as_str().unwrap_or("").to_string();
        if let Some(b) = self.read.get(&d) {
            return Ok(b.clone());
        }
        let m = c
            .get_manifest(&d)?
            .ok_or_else(|| anyhow!("manifest {d} is missing from the registry"))?;
        let mv: Value = serde_json::from_slice(&m.bytes)
            .with_context(|| format!("manifest {d} is not JSON"))?;
        let layer = mv["layers"][0]["digest"]
            .as_str()
            .ok_or_else(|| anyhow!("manifest {d} has no layer"))?;
        let b = c.blob_bytes(layer, DOC_MAX)?;
        self.read.insert(d, b.clone());
        Ok(b)
    }

    /// The entry of the `kind` document (meta, stream) of a pair whose
    /// parts hold `list`: the one document when all are the same, else
    /// the merge of all, pushed.
    pub(super) fn entry(
        &mut self,
        c: &Client,
        kind: &str,
        list: &[(String, Value)],
    ) -> Result<Value> {
        // One input per distinct document, in the parts' order.
        let mut distinct: Vec<&(String, Value)> = Vec::new();
        for x in list {
            if !distinct.iter().any(|y| y.1["digest"] == x.1["digest"]) {
                distinct.push(x);
            }
        }
        if distinct.len() == 1 {
            return Ok(distinct[0].1.clone());
        }
        let key: Vec<&str> = distinct
            .iter()
            .map(|x| x.1["digest"].as_str().unwrap_or(""))
            .collect();
        let key = format!("{kind} {}", key.join(" "));
        if let Some(e) = self.merged.get(&key) {
            return Ok(e.clone());
        }
        let mut inputs = Vec::new();
        for (t, e) in &distinct {
            let b = self
                .doc(c, e)
                .with_context(|| format!("the {kind} document of part {t}"))?;
            inputs.push((t.clone(), b));
        }
        let bytes = match kind {
            META => merge_meta(&inputs)?,
            _ => merge_stream(&inputs)?,
        };
        let tags: Vec<&str> = distinct
            .iter()
            .map(|x| x.0.strip_prefix(&self.prefix).unwrap_or(&x.0))
            .collect();
        let e = push_doc(c, &distinct[0].1, &bytes, &tags.join(","))?;
        self.merged.insert(key, e.clone());
        Ok(e)
    }
}

/// A merged document pushed as an artifact like the parts' own (their
/// type, platform and annotations, and the parts it was merged from).
fn push_doc(c: &Client, like: &Value, bytes: &[u8], from: &str) -> Result<Value> {
    let mut ann = like["annotations"].as_object().cloned().unwrap_or_default();
    ann.insert(A_MERGED_FROM.into(), from.into());
    let (digest, _) = c.push_bytes(bytes)?;
    artifact(
        c,
        &digest,
        bytes.len() as u64,
        like["artifactType"].as_str().unwrap_or(META_TYPE),
        like["platform"]["architecture"].as_str().unwrap_or(""),
        ann,
    )
}

/// meta.json of one build from its platform-split runs: the first
/// part's, with every other part's images (and AMIs) added and the keys
/// it lacks filled; an image or AMI that differs, or another OS commit, is
/// refused naming both parts. Images in key order, cosa's four-space
/// indentation.
pub fn merge_meta(inputs: &[(String, Vec<u8>)]) -> Result<Vec<u8>> {
    let mut docs = Vec::new();
    for (t, b) in inputs {
        let v: Value = serde_json::from_slice(b)
            .with_context(|| format!("meta.json of part {t}: not JSON"))?;
        if !v.is_object() {
            bail!("meta.json of part {t}: not an object");
        }
        docs.push((t.as_str(), v));
    }
    let (t0, first) = docs
        .first()
        .ok_or_else(|| anyhow!("no meta.json to merge"))?;
    let mut out = first.as_object().cloned().unwrap_or_default();
    for (t, m) in &docs[1..] {
        let commit = |v: &Value| v["ostree-commit"].as_str().unwrap_or("").to_string();
        if commit(first) != commit(m) {
            bail!(
                "meta.json of part {t0} is ostree commit {} but that of part {t} is {}: two builds of one stream and arch",
                commit(first),
                commit(m)
            );
        }
        for (k, v) in m.as_object().into_iter().flatten() {
            match (k.as_str(), out.get_mut(k)) {
                (_, None) => {
                    out.insert(k.clone(), v.clone());
                }
                ("images", Some(Value::Object(imgs))) => {
                    for (key, img) in v.as_object().into_iter().flatten() {
                        match imgs.get(key) {
                            None => {
                                imgs.insert(key.clone(), img.clone());
                            }
                            Some(x) if x["sha256"] == img["sha256"] => {}
                            Some(x) => bail!(
                                "images.{key} is {} (sha256 {}) in the meta.json of part {t0} but {} (sha256 {}) in that of part {t}: one platform from two builds",
                                x["path"],
                                x["sha256"],
                                img["path"],
                                img["sha256"]
                            ),
                        }
                    }
                }
                ("amis", Some(Value::Array(amis))) => {
                    for a in v.as_array().into_iter().flatten() {
                        match amis.iter().find(|x| x["name"] == a["name"]) {
                            None => amis.push(a.clone()),
                            Some(x) if x == a => {}
                            Some(x) => bail!(
                                "the AMI of region {} is {} in the meta.json of part {t0} but {} in that of part {t}",
                                a["name"],
                                x["hvm"],
                                a["hvm"]
                            ),
                        }
                    }
                }
                _ => {}
            }
        }
    }
    if let Some(Value::Object(imgs)) = out.get_mut("images") {
        let mut sorted: Vec<(String, Value)> = std::mem::take(imgs).into_iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        imgs.extend(sorted);
    }
    if let Some(Value::Array(amis)) = out.get_mut("amis") {
        amis.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    }
    let mut b = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut b, fmt);
    serde::Serialize::serialize(&Value::Object(out), &mut ser)?;
    b.push(b'\n');
    Ok(b)
}

/// stream.json of one (stream, arch) from its platform-split runs
/// (`merge::unite`): named as the first part's.
pub fn merge_stream(inputs: &[(String, Vec<u8>)]) -> Result<Vec<u8>> {
    let mut docs: Vec<(String, crate::publish::stream::Stream)> = Vec::new();
    for (t, b) in inputs {
        let label = format!("the stream.json of part {t}");
        let s = serde_json::from_slice(b)
            .with_context(|| format!("{label}: not a CoreOS stream document"))?;
        docs.push((label, s));
    }
    let name = docs
        .first()
        .map(|d| d.1.stream.clone())
        .ok_or_else(|| anyhow!("no stream.json to merge"))?;
    let refs: Vec<(&str, &crate::publish::stream::Stream)> =
        docs.iter().map(|(l, s)| (l.as_str(), s)).collect();
    let s = crate::publish::merge::unite(&refs, &name, None)?;
    let mut b = serde_json::to_vec_pretty(&s)?;
    b.push(b'\n');
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map};

    fn meta(images: &[(&str, &str)], stamp: &str) -> Vec<u8> {
        let imgs: Map<String, Value> = images
            .iter()
            .map(|(k, sha)| {
                (
                    k.to_string(),
                    json!({"path": format!("{k}.img"), "sha256": sha}),
                )
            })
            .collect();
        serde_json::to_vec(&json!({"buildid": "9.6", "ostree-commit": "c1",
            "coreos-assembler.build-timestamp": stamp, "images": imgs}))
        .unwrap()
    }

    #[test]
    fn meta_json_of_platform_split_runs_merges_in_one_way() {
        let a = (
            "t.part.a".to_string(),
            meta(&[("metal", "1"), ("live-iso", "2")], "T1"),
        );
        let b = ("t.part.b".to_string(), meta(&[("vmware", "3")], "T2"));
        let m = merge_meta(&[a.clone(), b.clone()]).unwrap();
        let v: Value = serde_json::from_slice(&m).unwrap();
        let keys: Vec<&String> = v["images"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["live-iso", "metal", "vmware"]);
        assert_eq!(v["coreos-assembler.build-timestamp"], "T1");
        assert!(m.starts_with(b"{\n    \""), "cosa's four-space indentation");
        // The parts come sorted by tag: the same inputs, the same bytes.
        assert_eq!(m, merge_meta(&[a.clone(), b]).unwrap());
        let c = ("t.part.c".to_string(), meta(&[("metal", "9")], "T3"));
        let e = merge_meta(&[a.clone(), c]).unwrap_err().to_string();
        assert!(
            e.contains("images.metal") && e.contains("t.part.a") && e.contains("t.part.c"),
            "{e}"
        );
        let mut other: Value = serde_json::from_slice(&meta(&[("qemu", "4")], "T")).unwrap();
        other["ostree-commit"] = "c2".into();
        let d = ("t.part.d".to_string(), serde_json::to_vec(&other).unwrap());
        let e = merge_meta(&[a, d]).unwrap_err().to_string();
        assert!(e.contains("two builds"), "{e}");
    }

    #[test]
    fn stream_json_of_platform_split_runs_merges_in_one_way() {
        let doc = |platform: &str, format: &str, stamp: &str| {
            let v = json!({"stream": "rhel-9", "metadata": {"last-modified": stamp, "generator": "g 1"},
                "architectures": {"x86_64": {"artifacts": {platform: {"release": "9.6",
                    "formats": {format: {"disk": {"location": format!("x.{format}"), "sha256": "ab"}}}}}}}});
            serde_json::to_vec(&v).unwrap()
        };
        let a = (
            "t.part.a".to_string(),
            doc("metal", "raw.gz", "2026-01-01T00:00:00Z"),
        );
        let b = (
            "t.part.b".to_string(),
            doc("vmware", "ova", "2026-01-02T00:00:00Z"),
        );
        let m = merge_stream(&[a.clone(), b.clone()]).unwrap();
        let s: crate::publish::stream::Stream = serde_json::from_slice(&m).unwrap();
        let platforms: Vec<&String> = s.architectures["x86_64"].artifacts.keys().collect();
        assert_eq!(platforms, ["metal", "vmware"]);
        assert_eq!(s.metadata.last_modified, "2026-01-02T00:00:00Z");
        assert_eq!(s.metadata.generator.as_deref(), Some("g 1"));
        assert_eq!(m, merge_stream(&[b, a]).unwrap());
    }
}
