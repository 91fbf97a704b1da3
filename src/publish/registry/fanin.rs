//! The fan-in of `push`: the index at a tag as the union of every run
//! pushed there, whatever the order or timing of the pushes (UPSTREAM.md
//! sections 23 and 28).
//!
//! Each run first tags its own index, its part:
//! `<tag>.part.<arch>.<stream>.<platforms>`, the platform keys of the run
//! `_`-joined (a hash of them when the tag would pass the registry's 128
//! characters), so runs split by arch, by stream or by platform group never
//! share a part; a run pushed again replaces its own. The index at `<tag>`
//! is then a function of the set of parts alone ([`plan`], [`Docs`]):
//! - every part's artifacts, each (arch, stream, platform) once;
//! - per (arch, stream), one meta.json and one stream.json: a part's own
//!   when all parts of the pair have the same one, else merged from all of
//!   them (meta.json: images united; stream.json: `merge::unite`, as
//!   `stream merge` merges directories) and pushed as artifacts of their
//!   own.
//!
//! A real conflict is refused naming both parts and their builds: two
//! builds (OS commits) of one (arch, stream), or one platform of a pair
//! with two different files. A run checks for one before it uploads
//! anything and again before it tags its part; one found only later (two
//! conflicting runs at once) withdraws the run's part (tagged again with no
//! entries) and rewrites the index from the parts left.
//!
//! The registry offers no conditional PUT (distribution 2.8 has no
//! If-Match). So each run writes the index, pauses, reads the parts and the
//! index back, and writes again until the index is what the parts make and
//! holds the run's own entries. The last writer verifies after its own
//! write and lists every part tagged before that: the index ends up
//! holding them all.
use super::client::{Client, INDEX_OCI};
use super::layout::*;
use crate::util::sha256::Sha256;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Rounds of write and read-back before giving up.
const ROUNDS: u64 = 20;
/// The longest tag (distribution-spec: at most 128 characters).
const TAG_MAX: usize = 128;
/// The largest meta.json or stream.json read back for a merge.
const DOC_MAX: u64 = 16 << 20;

/// The `platform` annotations of the two documents of a run.
const META: &str = "meta";
const STREAM: &str = "stream";

/// A tag-safe form of `s` (`[A-Za-z0-9_.-]`, others as `_`; empty: `default`).
fn tag_part(s: &str) -> String {
    if s.is_empty() {
        return "default".into();
    }
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn prefix(tag: &str) -> String {
    format!("{tag}.part.")
}

/// The part tag of a run of `platforms` (its meta.json image keys) for
/// (arch, stream) under `tag`.
pub fn part_tag(tag: &str, arch: &str, stream: &str, platforms: &[&str]) -> Result<String> {
    let keys: BTreeSet<String> = platforms.iter().map(|p| tag_part(p)).collect();
    let keys: Vec<String> = keys.into_iter().collect();
    let base = format!("{}{}.{}", prefix(tag), tag_part(arch), tag_part(stream));
    let plain = if keys.is_empty() {
        format!("{base}.none")
    } else {
        format!("{base}.{}", keys.join("_"))
    };
    if plain.len() <= TAG_MAX {
        return Ok(plain);
    }
    let h = hex::encode(Sha256::digest(keys.join(",").as_bytes()));
    let hashed = format!("{base}.g{}", &h[..16]);
    if hashed.len() > TAG_MAX {
        bail!(
            "{tag}: too long for the part tags push writes beside it ({hashed} passes the registry's {TAG_MAX} characters): choose a shorter tag"
        );
    }
    Ok(hashed)
}

/// A run's part: its tag, and the index there.
#[derive(Debug, Clone)]
pub struct Part {
    pub tag: String,
    pub digest: String,
    pub bytes: Vec<u8>,
    pub entries: Vec<Value>,
    pub annotations: Map<String, Value>,
}

impl Part {
    /// The part a run tags: `entries` (its artifacts, meta.json and
    /// stream.json) with the run's (arch, stream), platforms and build.
    pub fn new(
        tag: String,
        entries: Vec<Value>,
        (arch, stream): (&str, &str),
        platforms: &[&str],
        meta: &Value,
    ) -> Part {
        let s = |k: &str| meta[k].as_str().unwrap_or("").to_string();
        let commit = s("ostree-commit");
        let mut ann = Map::new();
        ann.insert(INDEX_MARK.into(), INDEX_VERSION.into());
        ann.insert(A_ARCH.into(), arch.into());
        ann.insert(A_STREAM.into(), stream.into());
        let mut sorted = platforms.to_vec();
        sorted.sort_unstable();
        ann.insert(A_PART_PLATFORMS.into(), sorted.join(",").into());
        if !commit.is_empty() {
            ann.insert(A_COMMIT.into(), commit.clone().into());
        }
        ann.insert(
            A_BUILD.into(),
            format!(
                "{} {} ({arch}, ostree commit {})",
                s("name"),
                s("buildid"),
                short(&commit)
            )
            .into(),
        );
        Part::of(tag, entries, ann)
    }

    /// The same part holding `entries`.
    pub fn with_entries(&self, entries: Vec<Value>) -> Part {
        Part::of(self.tag.clone(), entries, self.annotations.clone())
    }

    fn of(tag: String, entries: Vec<Value>, annotations: Map<String, Value>) -> Part {
        let bytes = index(&entries, &annotations);
        Part {
            tag,
            digest: digest_of(&bytes),
            bytes,
            entries,
            annotations,
        }
    }

    /// A part as read from the registry.
    fn read(tag: &str, bytes: Vec<u8>, digest: String, what: &str) -> Result<Part> {
        let what = format!("{what} part {tag}");
        let entries = our_entries(&bytes, &what)?;
        let v: Value = serde_json::from_slice(&bytes)?;
        Ok(Part {
            tag: tag.to_string(),
            digest,
            bytes,
            entries,
            annotations: v["annotations"].as_object().cloned().unwrap_or_default(),
        })
    }

    fn ann(&self, k: &str) -> Option<&str> {
        self.annotations
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }

    fn withdrawn(&self) -> bool {
        self.ann(A_WITHDRAWN).is_some()
    }

    /// The build in words, for messages.
    fn build(&self) -> String {
        match (self.ann(A_BUILD), self.ann(A_COMMIT)) {
            (Some(b), _) => b.to_string(),
            (None, Some(c)) => format!("ostree commit {}", short(c)),
            (None, None) => "its build not recorded".into(),
        }
    }

    /// The (arch, stream) pairs it holds.
    fn pairs(&self) -> BTreeSet<(String, String)> {
        let mut v: BTreeSet<(String, String)> = self
            .entries
            .iter()
            .map(|e| {
                let (a, s, _) = entry_key(e);
                (a, s)
            })
            .collect();
        if let (Some(a), Some(s)) = (self.ann(A_ARCH), self.annotations.get(A_STREAM)) {
            v.insert((a.to_string(), s.as_str().unwrap_or("").to_string()));
        }
        v
    }

    /// The part with no entries that a run leaves when it loses a
    /// conflict: its tag then adds nothing to the index.
    fn withdrawal(&self, why: &str) -> Part {
        let mut ann = self.annotations.clone();
        ann.insert(A_WITHDRAWN.into(), why.into());
        Part::of(self.tag.clone(), Vec::new(), ann)
    }
}

/// The first 12 characters of a commit (all of a shorter one).
fn short(c: &str) -> &str {
    c.get(..12).unwrap_or(c)
}

fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn platform_of(e: &Value) -> &str {
    e["annotations"][A_PLATFORM].as_str().unwrap_or("")
}

fn is_doc(e: &Value) -> bool {
    matches!(platform_of(e), META | STREAM)
}

/// Two parts that cannot be one index, and why (one line naming both).
#[derive(Debug)]
pub struct Conflict {
    pub parts: [String; 2],
    pub message: String,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Conflict {}

/// One (arch, stream) of the index: its artifacts by platform (with the
/// part each came from first), and the meta.json and stream.json entries of
/// its parts (part tag, entry), in the parts' order.
#[derive(Debug, Default)]
pub struct Group {
    pub artifacts: BTreeMap<String, (String, Value)>,
    pub docs: BTreeMap<String, Vec<(String, Value)>>,
}

/// What the index at `what` is made of, from its parts (withdrawn ones
/// left out), by (arch, stream); a conflict between two parts, named.
pub fn plan(parts: &[Part], what: &str) -> Result<BTreeMap<(String, String), Group>, Conflict> {
    let live: Vec<&Part> = parts.iter().filter(|p| !p.withdrawn()).collect();
    let mut builds: BTreeMap<(String, String), (&str, &Part)> = BTreeMap::new();
    for p in &live {
        let Some(commit) = p.ann(A_COMMIT) else {
            continue;
        };
        for pair in p.pairs() {
            match builds.get(&pair) {
                Some((c0, p0)) if *c0 != commit => {
                    return Err(Conflict {
                        parts: [p0.tag.clone(), p.tag.clone()],
                        message: format!(
                            "{what}: {}/{} would hold two builds: part {} ({}) and part {} ({}); a tag holds one build per stream and arch: push the other build to a tag of its own",
                            pair.0,
                            pair.1,
                            p0.tag,
                            p0.build(),
                            p.tag,
                            p.build()
                        ),
                    })
                }
                Some(_) => {}
                None => {
                    builds.insert(pair, (commit, p));
                }
            }
        }
    }
    let by_tag: HashMap<&str, &Part> = live.iter().map(|p| (p.tag.as_str(), *p)).collect();
    let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
    for p in &live {
        for e in &p.entries {
            let (arch, stream, platform) = entry_key(e);
            let g = groups.entry((arch.clone(), stream.clone())).or_default();
            if is_doc(e) {
                g.docs
                    .entry(platform)
                    .or_default()
                    .push((p.tag.clone(), e.clone()));
                continue;
            }
            match g.artifacts.get(&platform) {
                None => {
                    g.artifacts.insert(platform, (p.tag.clone(), e.clone()));
                }
                Some((_, e0)) if e0["digest"] == e["digest"] => {}
                Some((t0, e0)) => {
                    let file = |e: &Value| {
                        let d = e["digest"].as_str().unwrap_or("?");
                        format!(
                            "{}, manifest {}",
                            e["annotations"][A_FILE].as_str().unwrap_or("?"),
                            d.get(..19).unwrap_or(d)
                        )
                    };
                    return Err(Conflict {
                        parts: [t0.clone(), p.tag.clone()],
                        message: format!(
                            "{what}: {platform} of {arch}/{stream} is two different files: {} in part {t0} ({}) and {} in part {} ({}); one platform from two builds: push one of them to a tag of its own",
                            file(e0),
                            by_tag.get(t0.as_str()).map(|p| p.build()).unwrap_or_default(),
                            file(e),
                            p.tag,
                            p.build()
                        ),
                    });
                }
            }
        }
    }
    Ok(groups)
}

/// Tests: with `$BOOTIMAGE_GEN_FANIN_AT` (a time in milliseconds since
/// the epoch), wait until then before the last check and the part's tag,
/// so that racing pushes enter the fan-in at the moments a test chose.
pub const FANIN_AT_ENV: &str = "BOOTIMAGE_GEN_FANIN_AT";

pub fn wait_for_test_instant() -> Result<()> {
    let Some(at) = std::env::var(FANIN_AT_ENV)
        .ok()
        .and_then(|v| v.parse::<u128>().ok())
    else {
        return Ok(());
    };
    loop {
        crate::util::cancel::check()?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        if now >= at {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis((at - now).min(50) as u64));
    }
}

/// Tests: with `$BOOTIMAGE_GEN_PAUSE_AT=push-merge-hold`, say so and wait
/// in the merge until the file `$BOOTIMAGE_GEN_FANIN_RESUME` exists (or a
/// signal arrives), then go on.
fn hold_point() -> Result<()> {
    use crate::util::cancel;
    if !std::env::var(cancel::PAUSE_ENV).is_ok_and(|p| p == "push-merge-hold") {
        return Ok(());
    }
    let resume = std::env::var_os("BOOTIMAGE_GEN_FANIN_RESUME")
        .ok_or_else(|| anyhow!("push-merge-hold needs BOOTIMAGE_GEN_FANIN_RESUME"))?;
    eprintln!("bootimage-gen: paused at push-merge-hold");
    while !std::path::Path::new(&resume).exists() {
        cancel::check()?;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

/// The parts under `tag`, in the order of their tags.
pub fn read_parts(c: &Client, tag: &str, what: &str) -> Result<Vec<Part>> {
    let prefix = prefix(tag);
    let mut tags: Vec<String> = c
        .tags()?
        .into_iter()
        .filter(|t| t.starts_with(&prefix))
        .collect();
    tags.sort();
    let mut parts = Vec::new();
    for t in tags {
        if let Some(m) = c.get_manifest(&t)? {
            parts.push(Part::read(&t, m.bytes, m.digest, what)?);
        }
    }
    Ok(parts)
}

/// Refuse `ours` (parts about to be tagged, or only their builds when
/// their entries are still empty) when they conflict with the parts
/// `there`, or with each other; a part of `there` with a tag of ours is
/// the one ours replaces.
pub fn check(there: &[Part], ours: &[Part], what: &str) -> Result<()> {
    let mut all: Vec<Part> = there
        .iter()
        .filter(|p| !ours.iter().any(|o| o.tag == p.tag))
        .cloned()
        .collect();
    all.extend(ours.iter().cloned());
    all.sort_by(|a, b| a.tag.cmp(&b.tag));
    plan(&all, what).map(|_| ()).map_err(|c| anyhow!(c))
}

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
    fn entry(&mut self, c: &Client, kind: &str, list: &[(String, Value)]) -> Result<Value> {
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
    super::push::artifact(
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

/// The index entries the parts make (pushing merged documents as needed),
/// in (arch, stream, platform) order.
fn entries(
    c: &Client,
    groups: &BTreeMap<(String, String), Group>,
    docs: &mut Docs,
) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for ((arch, stream), g) in groups {
        out.extend(g.artifacts.values().map(|(_, e)| e.clone()));
        for (kind, list) in &g.docs {
            out.push(
                docs.entry(c, kind, list)
                    .with_context(|| format!("merging the {kind} documents of {arch}/{stream}"))?,
            );
        }
    }
    out.sort_by_key(entry_key);
    Ok(out)
}

/// The index at `tag` (its entries and digest), or none.
fn current(c: &Client, tag: &str, what: &str) -> Result<(Vec<Value>, String)> {
    Ok(match c.get_manifest(tag)? {
        Some(m) => (our_entries(&m.bytes, what)?, m.digest),
        None => (Vec::new(), String::new()),
    })
}

/// Whether the index entries `cur` hold every entry of the part `p`: each
/// artifact by digest, and a meta.json and stream.json for its pair.
fn holds(cur: &[Value], p: &Part) -> bool {
    p.entries.iter().all(|e| {
        if is_doc(e) {
            cur.iter().any(|x| entry_key(x) == entry_key(e))
        } else {
            cur.iter().any(|x| x["digest"] == e["digest"])
        }
    })
}

/// Whether `other` (found at the tag of our part `ours`: a run of the same
/// arch, stream and platforms pushed since) holds the same files.
fn same_files(ours: &Part, other: &Part) -> bool {
    ours.entries
        .iter()
        .filter(|e| !is_doc(e))
        .all(|e| other.entries.iter().any(|x| x["digest"] == e["digest"]))
}

/// Write the index at `tag` as the parts make it, and again until a
/// read-back finds it so with every entry of `ours` (the parts this run
/// tagged) in it (see the module's comment). Its digest and entry count.
pub fn publish(c: &Client, tag: &str, ours: &[Part]) -> Result<(String, usize)> {
    let what = format!("{}/{}:{tag}", c.host, c.repo);
    let mut docs = Docs::new(tag);
    for round in 0..ROUNDS {
        let parts = read_parts(c, tag, &what)?;
        let mut retag = false;
        for o in ours {
            match parts.iter().find(|p| p.tag == o.tag) {
                Some(p) if p.digest == o.digest => {}
                Some(p) if same_files(o, p) => {}
                Some(p) => bail!(
                    "{what}: part {} was pushed again by another run at the same time, with other files ({} and {}): push one of them to a tag of its own",
                    o.tag,
                    o.build(),
                    p.build()
                ),
                None => {
                    c.put_manifest(&o.tag, INDEX_OCI, &o.bytes)?;
                    retag = true;
                }
            }
        }
        if retag {
            std::thread::sleep(std::time::Duration::from_millis(200));
            continue;
        }
        let groups = match plan(&parts, &what) {
            Ok(g) => g,
            Err(conflict) => return Err(withdraw(c, tag, ours, conflict)),
        };
        let want = entries(c, &groups, &mut docs)?;
        let (cur, cur_digest) = current(c, tag, &what)?;
        if !cur_digest.is_empty() && cur == want && ours.iter().all(|o| holds(&cur, o)) {
            return Ok((cur_digest, cur.len()));
        }
        if round == 0 && !ours.is_empty() {
            // Tests: a push killed during its merge (parts tagged, merged
            // documents pushed, the index not yet written), or held there
            // while another pushes, to write a stale index after it.
            crate::util::cancel::pause_point("push-merge")?;
            hold_point()?;
        }
        let mut ann = Map::new();
        ann.insert(INDEX_MARK.into(), INDEX_VERSION.into());
        c.put_manifest(tag, INDEX_OCI, &index(&want, &ann))?;
        // Another run may be writing too: look again after a moment.
        let jitter = (u64::from(std::process::id()) * 37 + round * 91) % 400;
        std::thread::sleep(std::time::Duration::from_millis(200 + jitter));
    }
    bail!(
        "{what}: the index kept changing under {ROUNDS} rounds of writes: too many pushes at once?"
    )
}

/// A conflict found while merging: when one of the two parts is ours,
/// ours are withdrawn (so the tag is not left unmergeable) and the index
/// is rewritten from the parts left; the error either way.
fn withdraw(c: &Client, tag: &str, ours: &[Part], conflict: Conflict) -> anyhow::Error {
    if !ours.iter().any(|o| conflict.parts.contains(&o.tag)) {
        return anyhow!(conflict);
    }
    for o in ours {
        let w = o.withdrawal(&conflict.message);
        if let Err(e) = c.put_manifest(&w.tag, INDEX_OCI, &w.bytes) {
            return anyhow!(conflict).context(format!("withdrawing part {}: {e:#}", o.tag));
        }
    }
    if let Err(e) = publish(c, tag, &[]) {
        tracing::warn!("rewriting the index after withdrawing this run's part: {e:#}");
    }
    anyhow!(conflict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn part_tags_keep_platform_groups_apart() {
        let t = |p: &[&str]| part_tag("4.18", "x86_64", "rhel-9", p).unwrap();
        assert_eq!(t(&["metal"]), "4.18.part.x86_64.rhel-9.metal");
        assert_eq!(
            t(&["vmware", "live-iso", "metal"]),
            "4.18.part.x86_64.rhel-9.live-iso_metal_vmware"
        );
        assert_ne!(t(&["metal"]), t(&["vmware"]));
        // Too long for a tag: a hash of the platforms, still per group.
        let many: Vec<String> = (0..40).map(|i| format!("platform{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let h = t(&many);
        assert!(
            h.len() <= TAG_MAX && h.starts_with("4.18.part.x86_64.rhel-9.g"),
            "{h}"
        );
        assert_ne!(h, t(&many[1..]));
        let e = part_tag(&"t".repeat(120), "x86_64", "rhel-9", &["metal"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("choose a shorter tag"), "{e}");
    }

    fn entry(arch: &str, platform: &str, digest: &str) -> Value {
        json!({"digest": digest, "annotations": {A_ARCH: arch, A_STREAM: "s", A_PLATFORM: platform, A_FILE: format!("{platform}.file")}})
    }

    fn part(tag: &str, commit: &str, entries: Vec<Value>) -> Part {
        let platforms: Vec<&str> = entries.iter().map(platform_of).collect();
        let meta = json!({"name": "rhcos", "buildid": "9.6", "ostree-commit": commit});
        Part::new(
            tag.into(),
            entries.clone(),
            ("x86_64", "s"),
            &platforms,
            &meta,
        )
    }

    #[test]
    fn plan_unites_parts_and_names_both_sides_of_a_conflict() {
        let metal = part(
            "t.part.a",
            "c1",
            vec![
                entry("x86_64", "metal", "d1"),
                entry("x86_64", "meta", "m1"),
            ],
        );
        let vmware = part(
            "t.part.b",
            "c1",
            vec![
                entry("x86_64", "vmware", "d2"),
                entry("x86_64", "meta", "m2"),
            ],
        );
        // The same file in two parts is one entry.
        let again = part("t.part.c", "c1", vec![entry("x86_64", "metal", "d1")]);
        let g = plan(&[metal.clone(), vmware.clone(), again], "r:t").unwrap();
        let g = &g[&("x86_64".to_string(), "s".to_string())];
        let platforms: Vec<&String> = g.artifacts.keys().collect();
        assert_eq!(platforms, ["metal", "vmware"]);
        assert_eq!(g.docs["meta"].len(), 2);
        // Another OS commit of the pair: both parts and builds named.
        let other = part("t.part.b", "c2", vec![entry("x86_64", "vmware", "d2")]);
        let c = plan(&[metal.clone(), other.clone()], "r:t").unwrap_err();
        assert_eq!(c.parts, ["t.part.a", "t.part.b"]);
        assert!(c.message.contains("x86_64/s would hold two builds"), "{c}");
        assert!(
            c.message.contains("ostree commit c1") && c.message.contains("ostree commit c2"),
            "{c}"
        );
        // Another arch of another commit is no conflict.
        let arm = Part::new(
            "t.part.z".into(),
            vec![entry("aarch64", "metal", "d9")],
            ("aarch64", "s"),
            &["metal"],
            &json!({"ostree-commit": "c3"}),
        );
        assert!(plan(&[metal.clone(), arm], "r:t").is_ok());
        // One platform, two files.
        let clash = part("t.part.d", "c1", vec![entry("x86_64", "metal", "d3")]);
        let c = plan(&[metal.clone(), clash.clone()], "r:t").unwrap_err();
        assert!(
            c.message
                .contains("metal of x86_64/s is two different files"),
            "{c}"
        );
        assert!(
            c.message.contains("manifest d1 in part t.part.a")
                && c.message.contains("manifest d3 in part t.part.d"),
            "{c}"
        );
        // A withdrawn part adds nothing and conflicts with nothing.
        let w = clash.withdrawal("lost");
        assert!(w.entries.is_empty() && w.withdrawn());
        assert!(plan(&[metal.clone(), w], "r:t").is_ok());
        // check: ours against the parts there, ours replacing its own tag.
        let metal = std::slice::from_ref(&metal);
        assert!(check(metal, &[other.withdrawal("x")], "r:t").is_ok());
        assert!(check(metal, std::slice::from_ref(&clash), "r:t").is_err());
        assert!(check(&[clash], metal, "r:t").is_err());
    }

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
