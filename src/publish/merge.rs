//! `bootimage-gen stream merge`: one stream document from the runs of
//! several machines (one per arch, per arch and stream, or per platform
//! group of one build), as the fan-in of a CI matrix; the directory twin
//! of `push`'s index union, which merges the pushed stream.json of one
//! (stream, arch) with [`unite`] too.
//!
//! Inputs are stream.json documents (one build per arch each, as
//! `generate` writes them) or streams.json documents (`--os-stream all`:
//! the ConfigMap's `data.streams`, stream key to stream document). The
//! result holds every arch of every input. A stream names one build per
//! arch (stream-metadata-go `stream.go`: `Architectures map[string]Arch`,
//! each `Artifacts map[string]PlatformArtifacts` with its `Release`): the
//! same arch in several inputs is united platform by platform, format by
//! format, when they are one build (runs split by platform: `metal` on
//! one machine, `vmware` on another); two releases of one arch, or one
//! file that differs, is refused naming both inputs.
//!
//! A location relative to its input's directory is rewritten relative to
//! the output's directory (or put under `--base-url`), so every location
//! still names its file; URLs and absolute paths are kept.
use super::stream::{Arch, Stream, GENERATOR};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// One document to merge: where it was read (for messages and relative
/// locations) and what it holds.
pub struct Input {
    pub path: PathBuf,
    pub doc: Doc,
}

/// A stream.json or a streams.json.
pub enum Doc {
    One(Stream),
    /// Stream key (`rhel-9`, `rhel-10`, `""` for a stream without class)
    /// to stream document, as `generate --os-stream all` writes it.
    Keyed(BTreeMap<String, Stream>),
}

/// Read a stream.json or streams.json (told apart by shape: a stream
/// document has `architectures`).
pub fn read(path: &Path) -> Result<Input> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).with_context(|| format!("{}: not JSON", path.display()))?;
    let doc = if v.get("architectures").is_some() {
        Doc::One(
            serde_json::from_value(v)
                .with_context(|| format!("{}: not a CoreOS stream document", path.display()))?,
        )
    } else if v.is_object() {
        Doc::Keyed(serde_json::from_value(v).with_context(|| {
            format!(
                "{}: neither a stream document (no `architectures`) nor a streams.json (stream key to stream document)",
                path.display()
            )
        })?)
    } else {
        bail!("{}: not a stream document", path.display());
    };
    Ok(Input {
        path: path.to_path_buf(),
        doc,
    })
}

/// Merge the inputs for an output written in `out_dir`. `name` sets the
/// merged stream's `stream` (otherwise every input must agree on it).
pub fn merge(
    inputs: &[Input],
    out_dir: &Path,
    base_url: Option<&str>,
    name: Option<&str>,
) -> Result<Doc> {
    if inputs.is_empty() {
        bail!("nothing to merge: give the stream.json files (or generate output directories)");
    }
    let keyed = matches!(inputs[0].doc, Doc::Keyed(_));
    if let Some(i) = inputs
        .iter()
        .find(|i| matches!(i.doc, Doc::Keyed(_)) != keyed)
    {
        bail!(
            "{} and {} are different kinds (a stream.json and a streams.json): merge stream.json files together, or streams.json files together",
            inputs[0].path.display(),
            i.path.display()
        );
    }
    if !keyed {
        let parts: Vec<(&Path, &Stream)> = inputs
            .iter()
            .map(|i| match &i.doc {
                Doc::One(s) => (i.path.as_path(), s),
                Doc::Keyed(_) => unreachable!(),
            })
            .collect();
        return Ok(Doc::One(merge_one(&parts, out_dir, base_url, name)?));
    }
    let mut by_key: BTreeMap<&str, Vec<(&Path, &Stream)>> = BTreeMap::new();
    for i in inputs {
        if let Doc::Keyed(m) = &i.doc {
            for (k, s) in m {
                by_key
                    .entry(k.as_str())
                    .or_default()
                    .push((i.path.as_path(), s));
            }
        }
    }
    let mut out = BTreeMap::new();
    for (k, parts) in by_key {
        let s = merge_one(&parts, out_dir, base_url, name)
            .with_context(|| format!("stream key {k:?}"))?;
        out.insert(k.to_string(), s);
    }
    Ok(Doc::Keyed(out))
}

fn merge_one(
    parts: &[(&Path, &Stream)],
    out_dir: &Path,
    base_url: Option<&str>,
    name: Option<&str>,
) -> Result<Stream> {
    let stream = match name {
        Some(n) => n.to_string(),
        None => {
            let first = parts[0];
            if let Some(other) = parts.iter().find(|p| p.1.stream != first.1.stream) {
                bail!(
                    "{} is stream {:?} but {} is stream {:?}: give --stream NAME to merge them under one name",
                    first.0.display(),
                    first.1.stream,
                    other.0.display(),
                    other.1.stream
                );
            }
            first.1.stream.clone()
        }
    };
    let mut located = Vec::with_capacity(parts.len());
    for (path, s) in parts {
        let from = path.parent().unwrap_or(Path::new("."));
        let mut s = (*s).clone();
        for a in s.architectures.values_mut() {
            *a = relocate(a, from, out_dir, base_url)?;
        }
        located.push((path.display().to_string(), s));
    }
    let refs: Vec<(&str, &Stream)> = located.iter().map(|(l, s)| (l.as_str(), s)).collect();
    unite(&refs, &stream, Some(GENERATOR))
}

/// Several stream documents (each named by its label in errors) as one
/// named `stream`: every arch of every part; an arch in several parts
/// (runs split by platform) when they are one build: the same `release`,
/// platforms, formats and files united, each file once. Two builds of one
/// arch, or one file that differs between parts, is refused naming both.
/// The result does not depend on the parts' order: `last-modified` is the
/// latest, `generator` the one given, else the greatest of the parts'.
pub fn unite(parts: &[(&str, &Stream)], stream: &str, generator: Option<&str>) -> Result<Stream> {
    let mut arches: BTreeMap<String, (String, Arch)> = BTreeMap::new();
    let mut last_modified = String::new();
    let mut generators: Vec<&str> = Vec::new();
    for (label, s) in parts {
        // RFC 3339 UTC stamps of one shape compare as text.
        if s.metadata.last_modified > last_modified {
            last_modified = s.metadata.last_modified.clone();
        }
        generators.extend(s.metadata.generator.as_deref());
        for (arch, a) in &s.architectures {
            match arches.get_mut(arch) {
                None => {
                    arches.insert(arch.clone(), (label.to_string(), a.clone()));
                }
                Some((l0, a0)) => join_arch(arch, (l0.as_str(), a0), (label, a))?,
            }
        }
    }
    let generator = match generator {
        Some(g) => Some(g.to_string()),
        None => generators.into_iter().max().map(String::from),
    };
    Ok(Stream {
        stream: stream.to_string(),
        metadata: super::stream::Metadata {
            last_modified,
            generator,
        },
        architectures: arches.into_iter().map(|(k, (_, a))| (k, a)).collect(),
    })
}

/// `add` (from `l1`) joined into `a0` (from `l0`), both arch `arch`.
fn join_arch(arch: &str, (l0, a0): (&str, &mut Arch), (l1, add): (&str, &Arch)) -> Result<()> {
    if *a0 == *add {
        return Ok(());
    }
    let (r0, r1) = (release_of(a0), release_of(add));
    if r0 != "-" && r1 != "-" && r0 != r1 {
        bail!(
            "arch {arch} is in both {l0} and {l1} from two builds (release {r0} and {r1}): a stream holds one build per arch; merge the runs of one build"
        );
    }
    let clash = |what: String, x: String, y: String| {
        anyhow::anyhow!(
            "arch {arch}: {what} is in both {l0} and {l1} with different contents ({x} and {y}): two builds of one file; merge the runs of one build"
        )
    };
    // A file as a message names it: its name and the start of its digest.
    let file = |a: &super::stream::Artifact| {
        let name = a.location.rsplit('/').next().unwrap_or(&a.location);
        format!("{name} sha256 {}", a.sha256.get(..12).unwrap_or(&a.sha256))
    };
    for (platform, pa) in &add.artifacts {
        let Some(p0) = a0.artifacts.get_mut(platform) else {
            a0.artifacts.insert(platform.clone(), pa.clone());
            continue;
        };
        if p0.release != pa.release {
            bail!(
                "arch {arch} is in both {l0} and {l1} from two builds (release {} and {}): a stream holds one build per arch; merge the runs of one build",
                p0.release,
                pa.release
            );
        }
        for (format, kinds) in &pa.formats {
            let f0 = p0.formats.entry(format.clone()).or_default();
            for (kind, art) in kinds {
                match f0.get(kind) {
                    None => {
                        f0.insert(kind.clone(), art.clone());
                    }
                    Some(x) if x == art => {}
                    Some(x) => {
                        return Err(clash(
                            format!("platform {platform} format {format} {kind}"),
                            file(x),
                            file(art),
                        ))
                    }
                }
            }
        }
    }
    match (&mut a0.images, &add.images) {
        (_, None) => {}
        (slot @ None, Some(i)) => *slot = Some(i.clone()),
        (Some(i0), Some(i)) => {
            if let Some(aws) = &i.aws {
                let r0 = &mut i0.aws.get_or_insert_with(Default::default).regions;
                for (region, img) in &aws.regions {
                    match r0.get(region) {
                        None => {
                            r0.insert(region.clone(), img.clone());
                        }
                        Some(x) if x == img => {}
                        Some(x) => {
                            return Err(clash(
                                format!("the aws image of region {region}"),
                                format!("{} of release {}", x.image, x.release),
                                format!("{} of release {}", img.image, img.release),
                            ))
                        }
                    }
                }
            }
            for (cloud, v) in &i.other {
                match i0.other.get(cloud) {
                    None => {
                        i0.other.insert(cloud.clone(), v.clone());
                    }
                    Some(x) if x == v => {}
                    Some(x) => {
                        return Err(clash(
                            format!("the {cloud} images"),
                            x.to_string(),
                            v.to_string(),
                        ))
                    }
                }
            }
        }
    }
    match (&mut a0.rhel_coreos_extensions, &add.rhel_coreos_extensions) {
        (_, None) => {}
        (slot @ None, Some(x)) => *slot = Some(x.clone()),
        (Some(x0), Some(x)) if *x0 == *x => {}
        (Some(x0), Some(x)) => {
            return Err(clash(
                "rhel-coreos-extensions".into(),
                x0.to_string(),
                x.to_string(),
            ));
        }
    }
    Ok(())
}

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

fn release_of(a: &Arch) -> &str {
    a.artifacts
        .values()
        .next()
        .map(|p| p.release.as_str())
        .unwrap_or("-")
}

/// `a` with each relative location moved from `from` to `out_dir`.
fn relocate(a: &Arch, from: &Path, out_dir: &Path, base_url: Option<&str>) -> Result<Arch> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::stream::{Artifact, Metadata, PlatformArtifacts};

    fn stream(name: &str, arch: &str, loc: &str, release: &str, stamp: &str) -> Stream {
        let art = Artifact {
            location: loc.into(),
            signature: None,
            sha256: "a".repeat(64),
            uncompressed_sha256: None,
        };
        Stream {
            stream: name.into(),
            metadata: Metadata {
                last_modified: stamp.into(),
                generator: None,
            },
            architectures: BTreeMap::from([(
                arch.to_string(),
                Arch {
                    artifacts: BTreeMap::from([(
                        "metal".to_string(),
                        PlatformArtifacts {
                            release: release.into(),
                            formats: BTreeMap::from([(
                                "raw.gz".to_string(),
                                BTreeMap::from([("disk".to_string(), art)]),
                            )]),
                        },
                    )]),
                    images: None,
                    rhel_coreos_extensions: None,
                },
            )]),
        }
    }

    fn one(path: &str, s: Stream) -> Input {
        Input {
            path: PathBuf::from(path),
            doc: Doc::One(s),
        }
    }

    fn loc(s: &Stream, arch: &str) -> String {
        s.architectures[arch].artifacts["metal"].formats["raw.gz"]["disk"]
            .location
            .clone()
    }

    #[test]
    fn arches_join_and_locations_follow_the_output() {
        let d = merge(
            &[
                one(
                    "/w/x86/stream.json",
                    stream(
                        "s",
                        "x86_64",
                        "m.x86_64.raw.gz",
                        "1",
                        "2026-01-01T00:00:00Z",
                    ),
                ),
                one(
                    "/w/arm/stream.json",
                    stream(
                        "s",
                        "aarch64",
                        "m.aarch64.raw.gz",
                        "1",
                        "2026-01-02T00:00:00Z",
                    ),
                ),
                one(
                    "/w/p/stream.json",
                    stream(
                        "s",
                        "ppc64le",
                        "https://h/p.raw.gz",
                        "1",
                        "2025-01-01T00:00:00Z",
                    ),
                ),
            ],
            Path::new("/w"),
            None,
            None,
        )
        .unwrap();
        let Doc::One(s) = d else { panic!() };
        assert_eq!(s.architectures.len(), 3);
        assert_eq!(loc(&s, "x86_64"), "x86/m.x86_64.raw.gz");
        assert_eq!(loc(&s, "aarch64"), "arm/m.aarch64.raw.gz");
        assert_eq!(loc(&s, "ppc64le"), "https://h/p.raw.gz");
        assert_eq!(s.metadata.last_modified, "2026-01-02T00:00:00Z");
        assert_eq!(s.metadata.generator.as_deref(), Some(GENERATOR));
        // An output beside the inputs: `..`; under a base URL: the URL.
        let d = merge(
            &[one(
                "/w/x86/stream.json",
                stream("s", "x86_64", "m.raw.gz", "1", "t"),
            )],
            Path::new("/w/all"),
            None,
            None,
        )
        .unwrap();
        let Doc::One(s) = d else { panic!() };
        assert_eq!(loc(&s, "x86_64"), "../x86/m.raw.gz");
        let d = merge(
            &[one(
                "/w/x86/stream.json",
                stream("s", "x86_64", "m.raw.gz", "1", "t"),
            )],
            Path::new("/w"),
            Some("http://mirror/rhcos/"),
            None,
        )
        .unwrap();
        let Doc::One(s) = d else { panic!() };
        assert_eq!(loc(&s, "x86_64"), "http://mirror/rhcos/x86/m.raw.gz");
    }

    /// The error of merging `inputs` for `out`.
    fn refusal(inputs: &[Input], out: &str, base: Option<&str>) -> String {
        format!(
            "{:#}",
            merge(inputs, Path::new(out), base, None).err().unwrap()
        )
    }

    #[test]
    fn conflicts_and_mixtures_are_named() {
        let x86 = |dir: &str, name: &str, release: &str| {
            one(
                &format!("/w/{dir}/stream.json"),
                stream(name, "x86_64", "m.raw.gz", release, "t"),
            )
        };
        let e = refusal(&[x86("a", "s", "1"), x86("b", "s", "2")], "/w/a", None);
        assert!(
            e.contains("arch x86_64 is in both /w/a/stream.json and /w/b/stream.json"),
            "{e}"
        );
        assert!(e.contains("release 1 and 2"), "{e}");
        // The same build twice is one.
        let same = [x86("a", "s", "1"), x86("a", "s", "1")];
        assert!(merge(&same, Path::new("/w"), None, None).is_ok());
        let arm = one(
            "/w/b/stream.json",
            stream("s10", "aarch64", "m.raw.gz", "1", "t"),
        );
        let e = refusal(&[x86("a", "s9", "1"), arm], "/w", None);
        assert!(e.contains("give --stream NAME"), "{e}");
        let k = Input {
            path: "/w/b/streams.json".into(),
            doc: Doc::Keyed(BTreeMap::new()),
        };
        let e = refusal(&[x86("a", "s9", "1"), k], "/w", None);
        assert!(e.contains("different kinds"), "{e}");
        // A base URL cannot name a file outside the output directory.
        let e = refusal(&[x86("a", "s", "1")], "/w/b", Some("http://m"));
        assert!(e.contains("outside the output directory"), "{e}");
    }

    #[test]
    fn platform_split_runs_of_one_build_unite() {
        // One build, three runs: metal's disk, the live ISO (also under
        // metal), and vmware; stamped a minute apart.
        let run = |dir: &str, platform: &str, format: &str, file: &str, sha: char, stamp: &str| {
            let mut s = stream("s", "x86_64", file, "9.6", stamp);
            let a = s.architectures.get_mut("x86_64").unwrap();
            let mut p = a.artifacts.remove("metal").unwrap();
            let art = p.formats.remove("raw.gz").unwrap().remove("disk").unwrap();
            let art = Artifact {
                sha256: sha.to_string().repeat(64),
                ..art
            };
            p.formats = BTreeMap::from([(
                format.to_string(),
                BTreeMap::from([("disk".to_string(), art)]),
            )]);
            a.artifacts.insert(platform.to_string(), p);
            one(&format!("/w/{dir}/stream.json"), s)
        };
        let metal = || {
            run(
                "m",
                "metal",
                "raw.gz",
                "m.raw.gz",
                'a',
                "2026-01-01T00:00:00Z",
            )
        };
        let iso = || run("i", "metal", "iso", "l.iso", 'b', "2026-01-01T00:02:00Z");
        let vmware = || run("v", "vmware", "ova", "v.ova", 'c', "2026-01-01T00:01:00Z");
        let d = merge(&[metal(), iso(), vmware()], Path::new("/w"), None, None).unwrap();
        let Doc::One(s) = d else { panic!() };
        let a = &s.architectures["x86_64"];
        let platforms: Vec<&String> = a.artifacts.keys().collect();
        assert_eq!(platforms, ["metal", "vmware"]);
        let formats: Vec<&String> = a.artifacts["metal"].formats.keys().collect();
        assert_eq!(formats, ["iso", "raw.gz"]);
        assert_eq!(
            a.artifacts["metal"].formats["iso"]["disk"].location,
            "i/l.iso"
        );
        assert_eq!(s.metadata.last_modified, "2026-01-01T00:02:00Z");
        // Whatever the order, the same document.
        let d2 = merge(&[vmware(), iso(), metal()], Path::new("/w"), None, None).unwrap();
        let Doc::One(s2) = d2 else { panic!() };
        assert_eq!(s, s2);
        // The same run twice is one.
        assert!(merge(&[metal(), metal()], Path::new("/w"), None, None).is_ok());
        // One file of one platform that differs: both inputs named.
        let other = run("o", "metal", "raw.gz", "m.raw.gz", 'd', "t");
        let e = refusal(&[metal(), other], "/w", None);
        assert!(
            e.contains("platform metal format raw.gz disk is in both /w/m/stream.json and /w/o/stream.json"),
            "{e}"
        );
        // Another release of the arch on another platform: two builds.
        let mut later = vmware();
        if let Doc::One(s) = &mut later.doc {
            for p in s
                .architectures
                .get_mut("x86_64")
                .unwrap()
                .artifacts
                .values_mut()
            {
                p.release = "9.7".into();
            }
        }
        let e = refusal(&[metal(), later], "/w", None);
        assert!(e.contains("from two builds (release 9.6 and 9.7)"), "{e}");
        assert!(e.contains("/w/m/stream.json and /w/v/stream.json"), "{e}");
    }

    #[test]
    fn keyed_documents_merge_per_key() {
        let k = |p: &str, arch: &str| Input {
            path: PathBuf::from(p),
            doc: Doc::Keyed(BTreeMap::from([
                (
                    "rhel-9".to_string(),
                    stream("r9", arch, "rhel-9/m.raw.gz", "9", "t"),
                ),
                (
                    "rhel-10".to_string(),
                    stream("r10", arch, "rhel-10/m.raw.gz", "10", "t"),
                ),
            ])),
        };
        let d = merge(
            &[
                k("/w/x/streams.json", "x86_64"),
                k("/w/a/streams.json", "aarch64"),
            ],
            Path::new("/w"),
            None,
            None,
        )
        .unwrap();
        let Doc::Keyed(m) = d else { panic!() };
        assert_eq!(m.len(), 2);
        assert_eq!(m["rhel-10"].stream, "r10");
        assert_eq!(loc(&m["rhel-10"], "aarch64"), "a/rhel-10/m.raw.gz");
        assert_eq!(loc(&m["rhel-9"], "x86_64"), "x/rhel-9/m.raw.gz");
    }
}
