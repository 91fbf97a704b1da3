//! `bootimage-gen pull REF -o DIR`: the artifacts `push` put at REF back to
//! files, each blob checked against its digest and size before it takes
//! its final name; meta.json and stream.json as pushed (narrowed to what
//! was pulled), stream.json's locations under `--base-url`, and
//! SHA256SUMS.
use super::client::Client;
use super::layout::*;
use crate::image::imageref::DockerRef;
use crate::util::arch::Arch;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What to pull.
#[derive(Debug, Default, Clone)]
pub struct Selection {
    pub arch: Option<Arch>,
    pub stream: Option<String>,
    /// meta.json keys (`metal`, `live-iso`, ...); empty: all.
    pub platforms: Vec<String>,
}

/// What a pull wrote.
#[derive(Debug, Default)]
pub struct Pulled {
    /// (directory, files) per (arch, stream).
    pub dirs: Vec<(PathBuf, Vec<String>)>,
    pub bytes: u64,
    /// With several arches or streams: the merged stream.json (one
    /// stream) or streams.json (several) written at the top.
    pub merged: Option<PathBuf>,
}

fn ann<'a>(e: &'a Value, k: &str) -> &'a str {
    e["annotations"][k].as_str().unwrap_or("")
}

/// The file name a layer gives, refused when it would leave the directory.
fn title(layer: &Value, what: &str) -> Result<String> {
    let t = layer["annotations"][TITLE]
        .as_str()
        .ok_or_else(|| anyhow!("{what}: its layer has no {TITLE}"))?;
    if t.is_empty() || t.contains('/') || t == "." || t == ".." {
        bail!("{what}: its file name {t:?} is not a plain file name");
    }
    Ok(t.to_string())
}

/// Rewrite every `location` under `v` to `base/<prefix><file name>`, and
/// drop artifacts whose file is not in `kept`.
fn relocate(v: &mut Value, base: Option<&str>, prefix: &str, kept: &BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(loc)) = m.get("location") {
                let file = loc.rsplit('/').next().unwrap_or(loc).to_string();
                if let Some(b) = base {
                    m.insert(
                        "location".into(),
                        format!("{}/{prefix}{file}", b.trim_end_matches('/')).into(),
                    );
                }
                return;
            }
            // Drop artifacts (objects holding a location) not pulled.
            m.retain(|_, x| match x.get("location").and_then(|l| l.as_str()) {
                Some(loc) => kept.contains(loc.rsplit('/').next().unwrap_or(loc)),
                None => true,
            });
            for x in m.values_mut() {
                relocate(x, base, prefix, kept);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| relocate(x, base, prefix, kept)),
        _ => {}
    }
}

/// The pulled entries of one (arch, stream) group.
struct Fetched {
    /// (file, sha256 hex): a layer is the file, so its digest is the
    /// file's, checked as it was written.
    files: Vec<(String, String)>,
    /// meta.json and stream.json as pulled, by platform (`meta`, `stream`).
    docs: BTreeMap<&'static str, PathBuf>,
}

/// Pull `r` (a tag or digest of an index made by `push`) into `out`.
pub fn pull(
    c: &Client,
    r: &DockerRef,
    out: &Path,
    sel: &Selection,
    base_url: Option<&str>,
    progress: &dyn Fn(&str, u64, u64),
) -> Result<Pulled> {
    let reference = r
        .digest
        .clone()
        .or_else(|| r.tag.clone())
        .unwrap_or_else(|| "latest".into());
    let what = format!("{}/{}:{reference}", c.host, c.repo);
    let top = c
        .get_manifest(&reference)?
        .ok_or_else(|| anyhow!("{what}: no such tag or digest in the registry"))?;
    let entries = our_entries(&top.bytes, &what)?;
    let groups = select(&entries, sel, &what)?;
    let arches: BTreeSet<&String> = groups.keys().map(|k| &k.0).collect();
    let streams: BTreeSet<&String> = groups.keys().map(|k| &k.1).collect();
    let mut pulled = Pulled::default();
    // Each group's stream.json as written, for the merged document.
    let mut stream_docs: Vec<(String, crate::publish::merge::Input)> = Vec::new();
    for ((arch, stream), es) in &groups {
        let mut sub = PathBuf::new();
        if arches.len() > 1 {
            sub.push(arch);
        }
        if streams.len() > 1 {
            sub.push(stream);
        }
        let dir = out.join(&sub);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let _lock = crate::util::lock::DirLock::output(&dir)?;
        let Fetched { files, docs } = fetch_group(
            c,
            es,
            &what,
            (arch.as_str(), stream.as_str()),
            &dir,
            progress,
            &mut pulled.bytes,
        )?;
        let kept: BTreeSet<String> = files.iter().map(|f| f.0.clone()).collect();
        // meta.json: only the images pulled.
        if let Some(p) = docs.get("meta") {
            narrow_meta(p, &dir, &kept)?;
        }
        // stream.json: locations under the base URL, only what was pulled.
        if let Some(p) = docs.get("stream") {
            let input = write_stream(p, &dir, &sub, base_url, &kept)?;
            stream_docs.push((stream.clone(), input));
        }
        // SHA256SUMS of the artifacts, as generate writes it, from the
        // digests each file was checked against (no second read).
        let sums: String = files.iter().map(|(f, h)| format!("{h}  {f}\n")).collect();
        crate::publish::meta::write_atomic(&dir, "SHA256SUMS", sums.as_bytes())?;
        pulled
            .dirs
            .push((dir, files.into_iter().map(|f| f.0).collect()));
    }
    if groups.len() > 1 {
        pulled.merged = Some(merge_streams(out, stream_docs)?);
    }
    Ok(pulled)
}

/// The index entries `sel` asks for, grouped by (arch, stream), each
/// group's meta and stream documents with it; an error naming what the
/// index has when the selection finds nothing, or misses a platform.
fn select<'a>(
    entries: &'a [Value],
    sel: &Selection,
    what: &str,
) -> Result<BTreeMap<(String, String), Vec<&'a Value>>> {
    // Present (arch, stream) pairs and platforms, for the errors below.
    let present: BTreeSet<(String, String)> = entries
        .iter()
        .map(|e| (ann(e, A_ARCH).to_string(), ann(e, A_STREAM).to_string()))
        .collect();
    let list = || {
        present
            .iter()
            .map(|(a, s)| format!("{a}/{s}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let chosen: Vec<&Value> = entries
        .iter()
        .filter(|e| sel.arch.map_or(true, |a| ann(e, A_ARCH) == a))
        .filter(|e| {
            sel.stream
                .as_deref()
                .map_or(true, |s| ann(e, A_STREAM) == s)
        })
        .collect();
    if chosen.is_empty() {
        bail!(
            "{what} holds no {}{}: it has {} (arch/stream)",
            sel.arch.as_ref().map_or("arch", Arch::as_str),
            sel.stream
                .as_deref()
                .map(|s| format!(" of stream {s}"))
                .unwrap_or_default(),
            list()
        );
    }
    for p in &sel.platforms {
        if !chosen.iter().any(|e| ann(e, A_PLATFORM) == p) {
            let have: BTreeSet<&str> = chosen.iter().map(|e| ann(e, A_PLATFORM)).collect();
            bail!(
                "{what} has no {p} for the selection; it has {}",
                have.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
    }
    let mut groups: BTreeMap<(String, String), Vec<&Value>> = BTreeMap::new();
    for e in chosen {
        let p = ann(e, A_PLATFORM);
        if sel.platforms.is_empty()
            || sel.platforms.iter().any(|x| x == p)
            || p == "meta"
            || p == "stream"
        {
            groups
                .entry((ann(e, A_ARCH).to_string(), ann(e, A_STREAM).to_string()))
                .or_default()
                .push(e);
        }
    }
    Ok(groups)
}

/// Each entry of one group into `dir`: its manifest read, its one layer
/// downloaded unless `dir` has the file with that digest already (the
/// bytes downloaded added to `bytes`).
fn fetch_group(
    c: &Client,
    es: &[&Value],
    what: &str,
    (arch, stream): (&str, &str),
    dir: &Path,
    progress: &dyn Fn(&str, u64, u64),
    bytes: &mut u64,
) -> Result<Fetched> {
    let mut files: Vec<(String, String)> = Vec::new();
    let mut docs: BTreeMap<&'static str, PathBuf> = BTreeMap::new();
    for e in es {
        let d = e["digest"].as_str().unwrap_or("");
        let ewhat = format!("{what} entry {} ({arch}, {stream})", ann(e, A_PLATFORM));
        let m = c
            .get_manifest(d)?
            .ok_or_else(|| anyhow!("{ewhat}: manifest {d} is missing from the registry"))?;
        let mv: Value = serde_json::from_slice(&m.bytes)
            .with_context(|| format!("{ewhat}: manifest is not JSON"))?;
        let layer = mv["layers"]
            .get(0)
            .ok_or_else(|| anyhow!("{ewhat}: its manifest has no layer"))?;
        let name = title(layer, &ewhat)?;
        let ld = layer["digest"].as_str().unwrap_or("");
        let size = layer["size"].as_u64().unwrap_or(0);
        let dest = dir.join(&name);
        let already = std::fs::metadata(&dest).is_ok_and(|m| m.len() == size)
            && crate::publish::meta::sha256_file(&dest)
                .is_ok_and(|(h, _)| format!("sha256:{h}") == ld);
        if !already {
            c.pull_blob(ld, size, &dest, &|n| progress(&name, n, size))
                .with_context(|| format!("{ewhat}: {name}"))?;
            *bytes += size;
        }
        match ann(e, A_PLATFORM) {
            "meta" => {
                docs.insert("meta", dest);
            }
            "stream" => {
                docs.insert("stream", dest);
            }
            _ => files.push((name, ld.trim_start_matches("sha256:").to_string())),
        }
    }
    Ok(Fetched { files, docs })
}

/// Rewrite the pulled meta.json at `p` in `dir` to hold only the images
/// in `kept` (left as pushed when it has no others).
fn narrow_meta(p: &Path, dir: &Path, kept: &BTreeSet<String>) -> Result<()> {
    let mut m: Value = serde_json::from_slice(&std::fs::read(p)?)
        .with_context(|| format!("{}: not JSON", p.display()))?;
    if let Some(imgs) = m["images"].as_object_mut() {
        let before = imgs.len();
        imgs.retain(|_, v| v["path"].as_str().is_some_and(|f| kept.contains(f)));
        if imgs.len() != before {
            let mut b = serde_json::to_vec_pretty(&m)?;
            b.push(b'\n');
            crate::publish::meta::write_atomic(dir, "meta.json", &b)?;
        }
    }
    Ok(())
}

/// Write `dir/stream.json` from the pulled one at `p`: its locations under
/// `base_url` (`sub/` prefixed), only the artifacts in `kept`; the document
/// as written, for the merge of several groups.
fn write_stream(
    p: &Path,
    dir: &Path,
    sub: &Path,
    base_url: Option<&str>,
    kept: &BTreeSet<String>,
) -> Result<crate::publish::merge::Input> {
    let mut s: Value = serde_json::from_slice(&std::fs::read(p)?)
        .with_context(|| format!("{}: not JSON", p.display()))?;
    let prefix = if sub.as_os_str().is_empty() {
        String::new()
    } else {
        format!("{}/", sub.display())
    };
    relocate(&mut s, base_url, &prefix, kept);
    let mut b = serde_json::to_vec_pretty(&s)?;
    b.push(b'\n');
    crate::publish::meta::write_atomic(dir, "stream.json", &b)?;
    let path = dir.join("stream.json");
    let doc = serde_json::from_value(s)
        .with_context(|| format!("{}: not a CoreOS stream document", path.display()))?;
    Ok(crate::publish::merge::Input {
        path,
        doc: crate::publish::merge::Doc::One(doc),
    })
}

/// Several arches or streams pulled: one document at `out` for what an
/// installer reads, every arch in it: `stream.json` for one stream,
/// `streams.json` keyed by stream (as `generate --os-stream all` writes)
/// for several. Locations as seen from `out` (or the URLs already given).
fn merge_streams(out: &Path, docs: Vec<(String, crate::publish::merge::Input)>) -> Result<PathBuf> {
    use crate::publish::merge::{self, Doc};
    let mut by_stream: BTreeMap<String, Vec<merge::Input>> = BTreeMap::new();
    for (stream, input) in docs {
        by_stream.entry(stream).or_default().push(input);
    }
    let mut merged: BTreeMap<String, crate::publish::stream::Stream> = BTreeMap::new();
    for (stream, inputs) in by_stream {
        match merge::merge(&inputs, out, None, None)
            .with_context(|| format!("merging the pulled stream.json of stream {stream}"))?
        {
            Doc::One(s) => merged.insert(stream.clone(), s),
            Doc::Keyed(_) => bail!("stream {stream}: a pushed stream.json is a streams.json"),
        };
    }
    let (name, mut b) = if merged.len() == 1 {
        let s = merged.into_values().next().unwrap();
        (
            crate::publish::stream::STREAM_JSON,
            serde_json::to_vec_pretty(&s)?,
        )
    } else {
        (
            crate::publish::stream::STREAMS_JSON,
            serde_json::to_vec_pretty(&merged)?,
        )
    };
    b.push(b'\n');
    crate::publish::meta::write_atomic(out, name, &b)?;
    Ok(out.join(name))
}
