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
//!
//! Its files: `unite.rs` (the union of stream documents, shared with the
//! fan-in), `locate.rs` (locations as seen from the output); this one,
//! reading the inputs and merging them per stream key.
mod locate;
mod unite;

pub use locate::{located, rebase};
pub use unite::unite;

use super::stream::{Stream, GENERATOR};
use anyhow::{bail, Context, Result};
use locate::relocate;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::stream::{self, Artifact, Metadata, PlatformArtifacts};
    use crate::util::arch::Arch;

    pub(super) fn stream(name: &str, arch: Arch, loc: &str, release: &str, stamp: &str) -> Stream {
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
                arch,
                stream::Arch {
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

    pub(super) fn one(path: &str, s: Stream) -> Input {
        Input {
            path: PathBuf::from(path),
            doc: Doc::One(s),
        }
    }

    fn loc(s: &Stream, arch: Arch) -> String {
        s.architectures[&arch].artifacts["metal"].formats["raw.gz"]["disk"]
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
                        Arch::X86_64,
                        "m.x86_64.raw.gz",
                        "1",
                        "2026-01-01T00:00:00Z",
                    ),
                ),
                one(
                    "/w/arm/stream.json",
                    stream(
                        "s",
                        Arch::Aarch64,
                        "m.aarch64.raw.gz",
                        "1",
                        "2026-01-02T00:00:00Z",
                    ),
                ),
                one(
                    "/w/p/stream.json",
                    stream(
                        "s",
                        Arch::Ppc64le,
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
        assert_eq!(loc(&s, Arch::X86_64), "x86/m.x86_64.raw.gz");
        assert_eq!(loc(&s, Arch::Aarch64), "arm/m.aarch64.raw.gz");
        assert_eq!(loc(&s, Arch::Ppc64le), "https://h/p.raw.gz");
        assert_eq!(s.metadata.last_modified, "2026-01-02T00:00:00Z");
        assert_eq!(s.metadata.generator.as_deref(), Some(GENERATOR));
        // An output beside the inputs: `..`; under a base URL: the URL.
        let d = merge(
            &[one(
                "/w/x86/stream.json",
                stream("s", Arch::X86_64, "m.raw.gz", "1", "t"),
            )],
            Path::new("/w/all"),
            None,
            None,
        )
        .unwrap();
        let Doc::One(s) = d else { panic!() };
        assert_eq!(loc(&s, Arch::X86_64), "../x86/m.raw.gz");
        let d = merge(
            &[one(
                "/w/x86/stream.json",
                stream("s", Arch::X86_64, "m.raw.gz", "1", "t"),
            )],
            Path::new("/w"),
            Some("http://mirror/rhcos/"),
            None,
        )
        .unwrap();
        let Doc::One(s) = d else { panic!() };
        assert_eq!(loc(&s, Arch::X86_64), "http://mirror/rhcos/x86/m.raw.gz");
    }

    /// The error of merging `inputs` for `out`.
    pub(super) fn refusal(inputs: &[Input], out: &str, base: Option<&str>) -> String {
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
                stream(name, Arch::X86_64, "m.raw.gz", release, "t"),
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
            stream("s10", Arch::Aarch64, "m.raw.gz", "1", "t"),
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
    fn keyed_documents_merge_per_key() {
        let k = |p: &str, arch: Arch| Input {
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
                k("/w/x/streams.json", Arch::X86_64),
                k("/w/a/streams.json", Arch::Aarch64),
            ],
            Path::new("/w"),
            None,
            None,
        )
        .unwrap();
        let Doc::Keyed(m) = d else { panic!() };
        assert_eq!(m.len(), 2);
        assert_eq!(m["rhel-10"].stream, "r10");
        assert_eq!(loc(&m["rhel-10"], Arch::Aarch64), "a/rhel-10/m.raw.gz");
        assert_eq!(loc(&m["rhel-9"], Arch::X86_64), "x/rhel-9/m.raw.gz");
    }
}
