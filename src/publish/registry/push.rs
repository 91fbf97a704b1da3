//! `bootimage-gen push DIR REF`: a `generate` output as OCI artifacts in a
//! registry (layout.rs), and the index at REF made the union of every
//! run pushed there (fanin.rs: each run tags its part, keyed by arch,
//! stream and platform group, then the index is written from all parts
//! and read back until it holds them).
use super::artifact::artifact;
use super::client::{Client, Pushed, INDEX_OCI, MANIFEST_OCI};
use super::fanin::{self, Part};
use super::layout::{self, *};
use crate::image::imageref::DockerRef;
use crate::util::arch::Arch;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{Map, Value};
use std::io::Read;
use std::path::{Path, PathBuf};

/// One run's output: a directory with meta.json (and stream.json).
pub struct Run {
    pub dir: PathBuf,
    pub stream: String,
    pub arch: Arch,
    pub meta: Value,
}

/// The runs under `dir`: `dir` itself when it holds meta.json, and each
/// subdirectory that does (`--os-stream all` writes `<dir>/<stream>`).
/// The stream of a run is its subdirectory's name; for `dir` itself,
/// `stream` if given, else its stream.json's `stream`.
pub fn runs(dir: &Path, stream: Option<&str>) -> Result<Vec<Run>> {
    let read_meta = |d: &Path| -> Result<Option<Value>> {
        let p = d.join("meta.json");
        match std::fs::read(&p) {
            Ok(b) => Ok(Some(serde_json::from_slice(&b).with_context(|| {
                format!(
                    "{}: not valid JSON (a generate output's meta.json?)",
                    p.display()
                )
            })?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(anyhow!(e)).with_context(|| format!("reading {}", p.display())),
        }
    };
    let arch_of = |m: &Value, d: &Path| -> Result<Arch> {
        let a = m["coreos-assembler.basearch"]
            .as_str()
            .ok_or_else(|| anyhow!("{}/meta.json has no coreos-assembler.basearch", d.display()))?;
        Arch::parse(a)
            .with_context(|| format!("{}/meta.json: coreos-assembler.basearch", d.display()))
    };
    let mut v = Vec::new();
    if let Some(meta) = read_meta(dir)? {
        let s = match stream {
            Some(s) => s.to_string(),
            None => {
                let p = dir.join("stream.json");
                let st: Value = serde_json::from_slice(
                    &std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?,
                )
                .with_context(|| format!("{}: not valid JSON", p.display()))?;
                st["stream"].as_str().unwrap_or("default").to_string()
            }
        };
        v.push(Run {
            arch: arch_of(&meta, dir)?,
            dir: dir.to_path_buf(),
            stream: s,
            meta,
        });
    }
    let mut subs: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    subs.sort();
    for d in subs {
        if let Some(meta) = read_meta(&d)? {
            v.push(Run {
                arch: arch_of(&meta, &d)?,
                stream: d.file_name().unwrap().to_string_lossy().into_owned(),
                dir: d,
                meta,
            });
        }
    }
    if v.is_empty() {
        bail!(
            "{}: no meta.json in it or its subdirectories: give the output directory of `bootimage-gen generate`",
            dir.display()
        );
    }
    Ok(v)
}

/// What a push did.
#[derive(Debug, Default)]
pub struct Summary {
    pub artifacts: usize,
    pub uploaded: u64,
    pub existed: u64,
    pub index_digest: String,
    pub index_entries: usize,
    pub images: Vec<String>,
    /// The digests of the images inside the OCI archives (listed by the
    /// index only through an annotation).
    pub image_digests: Vec<String>,
    /// The digests of this push's own entries (its files, meta.json and
    /// stream.json), not those of other runs in the same index.
    pub entry_digests: Vec<String>,
}

/// The blob of an OCI archive member: (offset in the archive, size).
fn archive_members(path: &Path) -> Result<Vec<(String, u64, u64)>> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut a = tar::Archive::new(f);
    let mut v = Vec::new();
    for e in a
        .entries()
        .with_context(|| format!("reading {}", path.display()))?
    {
        let e = e.with_context(|| format!("reading {}", path.display()))?;
        let name = e
            .path()?
            .to_string_lossy()
            .trim_start_matches("./")
            .to_string();
        v.push((name, e.raw_file_position(), e.size()));
    }
    Ok(v)
}

fn archive_file(path: &Path, members: &[(String, u64, u64)], name: &str) -> Result<Vec<u8>> {
    let (_, at, len) = members
        .iter()
        .find(|m| m.0 == name)
        .ok_or_else(|| anyhow!("{}: no {name} in it (not an OCI archive?)", path.display()))?;
    let mut f = std::fs::File::open(path)?;
    use std::io::Seek;
    f.seek(std::io::SeekFrom::Start(*at))?;
    let mut buf = vec![0u8; *len as usize];
    f.read_exact(&mut buf)?;
    Ok(buf)
}

/// Push an OCI archive's image (its one manifest and the blobs it names)
/// into the repository: the image an ordinary pull (KubeVirt's
/// containerDisk) takes. Its manifest descriptor.
fn push_archive_image(c: &Client, path: &Path, s: &mut Summary) -> Result<Value> {
    let members = archive_members(path)?;
    let index: Value = serde_json::from_slice(&archive_file(path, &members, "index.json")?)
        .with_context(|| format!("{}: index.json is not JSON", path.display()))?;
    let desc = index["manifests"]
        .as_array()
        .and_then(|a| a.first())
        .cloned()
        .ok_or_else(|| anyhow!("{}: its index.json lists no manifest", path.display()))?;
    let mdigest = desc["digest"].as_str().unwrap_or("").to_string();
    let blob_name = |d: &str| format!("blobs/{}", d.replacen(':', "/", 1));
    let mbytes = archive_file(path, &members, &blob_name(&mdigest))?;
    let m: Value = serde_json::from_slice(&mbytes)
        .with_context(|| format!("{}: manifest {mdigest} is not JSON", path.display()))?;
    let mut blobs = vec![m["config"].clone()];
    blobs.extend(m["layers"].as_array().cloned().unwrap_or_default());
    for b in blobs {
        let d = b["digest"].as_str().unwrap_or("");
        let (_, at, len) = members
            .iter()
            .find(|x| x.0 == blob_name(d))
            .ok_or_else(|| anyhow!("{}: blob {d} is missing from it", path.display()))?;
        match c.push_blob(path, *at, d, *len, &|_| {})? {
            Pushed::Uploaded => s.uploaded += len,
            Pushed::Existed => s.existed += len,
        }
    }
    let mt = m["mediaType"].as_str().unwrap_or(MANIFEST_OCI).to_string();
    let got = c.put_manifest(&mdigest, &mt, &mbytes)?;
    if got != mdigest {
        bail!(
            "{}: its manifest's digest is {got}, its index says {mdigest}",
            path.display()
        );
    }
    Ok(layout::descriptor(&mt, &mdigest, mbytes.len() as u64))
}

/// Push one file as an artifact; the index entry for it.
#[allow(clippy::too_many_arguments)]
fn push_file(
    c: &Client,
    run: &Run,
    key: &str,
    file: &Path,
    sha256: Option<&str>,
    extra: &Map<String, Value>,
    common: &Map<String, Value>,
    s: &mut Summary,
    progress: &dyn Fn(&str, u64, u64),
) -> Result<Value> {
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let size = std::fs::metadata(file)
        .with_context(|| {
            format!(
                "{}: listed in meta.json, but it cannot be read",
                file.display()
            )
        })?
        .len();
    let digest = match sha256 {
        Some(h) => format!("sha256:{h}"),
        None => format!("sha256:{}", crate::publish::meta::sha256_file(file)?.0),
    };
    let atype = artifact_type(key, &name);
    match c.push_blob(file, 0, &digest, size, &|n| progress(&name, n, size))? {
        Pushed::Uploaded => s.uploaded += size,
        Pushed::Existed => s.existed += size,
    }
    let mut ann = common.clone();
    ann.insert(A_PLATFORM.into(), key.into());
    ann.insert(A_FILE.into(), name.clone().into());
    ann.extend(extra.clone());
    s.artifacts += 1;
    artifact(c, &digest, size, &atype, run.arch.oci_name(), ann)
}

/// The tag a push writes: REF must name one, and no digest.
pub fn tag_of(r: &DockerRef) -> Result<String> {
    if r.digest.is_some() {
        bail!("{r}: push takes a tag, not a digest");
    }
    r.tag.clone().ok_or_else(|| {
        anyhow!("{r}: push needs a tag (REPO:TAG): the index of the release lives there")
    })
}

/// Push every run under `dir` to `r` (a tag); the index at the tag then
/// holds every entry of every run pushed there (fanin.rs).
pub fn push(
    c: &Client,
    r: &DockerRef,
    dir: &Path,
    stream: Option<&str>,
    progress: &dyn Fn(&str, u64, u64),
) -> Result<Summary> {
    let tag = tag_of(r)?;
    let what = format!("{}/{}:{tag}", c.host, c.repo);
    // The tag must be free or ours before anything is sent.
    if let Some(cur) = c.get_manifest(&tag)? {
        our_entries(&cur.bytes, &what)?;
    }
    let runs = runs(dir, stream)?;
    // Each run's part (its tag from its platforms, no entries yet): its
    // build against those of the parts there, so another OS commit of an
    // (arch, stream) is refused before any upload.
    let mut planned = Vec::new();
    for run in &runs {
        let images = run.meta["images"]
            .as_object()
            .ok_or_else(|| anyhow!("{}/meta.json has no images", run.dir.display()))?;
        let keys: Vec<&str> = images.keys().map(String::as_str).collect();
        planned.push(Part::new(
            fanin::part_tag(&tag, run.arch, &run.stream, &keys)?,
            Vec::new(),
            (run.arch, &run.stream),
            &keys,
            &run.meta,
        ));
    }
    fanin::check(&fanin::read_parts(c, &tag, &what)?, &planned, &what)?;
    let mut s = Summary::default();
    let mut ours = Vec::new();
    for (run, p) in runs.iter().zip(&planned) {
        let entries = push_run(c, r, run, &mut s, progress)?;
        s.entry_digests.extend(
            entries
                .iter()
                .filter_map(|e| e["digest"].as_str().map(String::from)),
        );
        ours.push(p.with_entries(entries));
    }
    // Checked again with the files (one platform, two files) and the
    // parts tagged meanwhile; then tagged, and the index written.
    fanin::wait_for_test_instant()?;
    fanin::check(&fanin::read_parts(c, &tag, &what)?, &ours, &what)?;
    for p in &ours {
        c.put_manifest(&p.tag, INDEX_OCI, &p.bytes)?;
    }
    let (digest, n) = fanin::publish(c, &tag, &ours)?;
    s.index_digest = digest;
    s.index_entries = n;
    Ok(s)
}

/// Push one run's files, meta.json and stream.json; their index entries.
fn push_run(
    c: &Client,
    r: &DockerRef,
    run: &Run,
    s: &mut Summary,
    progress: &dyn Fn(&str, u64, u64),
) -> Result<Vec<Value>> {
    let m = &run.meta;
    let mut common = Map::new();
    common.insert(A_ARCH.into(), run.arch.as_str().into());
    common.insert(A_STREAM.into(), run.stream.clone().into());
    for (k, src) in [
        (A_VERSION, "ostree-version"),
        (A_RELEASE, "release-payload"),
    ] {
        let v = if src == "release-payload" {
            m[src]["tags"][0]
                .as_str()
                .or_else(|| m[src]["image"].as_str())
        } else {
            m[src].as_str()
        };
        if let Some(v) = v {
            common.insert(k.into(), v.into());
        }
    }
    let images = m["images"]
        .as_object()
        .ok_or_else(|| anyhow!("{}/meta.json has no images", run.dir.display()))?;
    let mut entries = Vec::new();
    for (key, img) in images {
        let rel = img["path"]
            .as_str()
            .ok_or_else(|| anyhow!("{}/meta.json: images.{key} has no path", run.dir.display()))?;
        let file = run.dir.join(rel);
        let mut extra = Map::new();
        if let Some(u) = img["uncompressed-sha256"].as_str() {
            extra.insert(A_UNCOMPRESSED_SHA256.into(), u.into());
        }
        if let Some(u) = img["uncompressed-size"].as_u64() {
            extra.insert(A_UNCOMPRESSED_SIZE.into(), u.to_string().into());
        }
        let mut e = push_file(
            c,
            run,
            key,
            &file,
            img["sha256"].as_str(),
            &extra,
            &common,
            s,
            progress,
        )?;
        if rel.ends_with(".ociarchive") {
            // The image inside, as an ordinary pull takes it.
            let d = push_archive_image(c, &file, s)?;
            let image = format!(
                "{}/{}@{}",
                r.registry,
                r.repository,
                d["digest"].as_str().unwrap()
            );
            e["annotations"]["io.bootimage-gen.image"] = image.clone().into();
            s.image_digests
                .push(d["digest"].as_str().unwrap_or_default().to_string());
            s.images
                .push(format!("{key} ({}, {}): {image}", run.arch, run.stream));
        }
        entries.push(e);
    }
    for (key, name) in [("meta", "meta.json"), ("stream", "stream.json")] {
        let f = run.dir.join(name);
        if f.is_file() {
            entries.push(push_file(
                c,
                run,
                key,
                &f,
                None,
                &Map::new(),
                &common,
                s,
                progress,
            )?);
        }
    }
    Ok(entries)
}
