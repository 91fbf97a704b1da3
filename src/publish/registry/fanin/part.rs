//! A run's part of the fan-in: its tag (`<tag>.part.<arch>.<stream>.<platforms>`,
//! or a hash of the platform keys past the registry's 128 characters), the
//! [`Part`] itself (its entries and the annotations naming its build), and
//! the parts under a tag read back from the registry.
use crate::publish::registry::client::Client;
use crate::publish::registry::layout::*;
use crate::util::arch::Arch;
use crate::util::sha256::Sha256;
use anyhow::{bail, Result};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// The longest tag (distribution-spec: at most 128 characters).
const TAG_MAX: usize = 128;

/// The `platform` annotations of the two documents of a run.
pub(super) const META: &str = "meta";
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

pub(super) fn prefix(tag: &str) -> String {
    format!("{tag}.part.")
}

/// The part tag of a run of `platforms` (its meta.json image keys) for
/// (arch, stream) under `tag`.
pub fn part_tag(tag: &str, arch: Arch, stream: &str, platforms: &[&str]) -> Result<String> {
    let keys: BTreeSet<String> = platforms.iter().map(|p| tag_part(p)).collect();
    let keys: Vec<String> = keys.into_iter().collect();
    let base = format!(
        "{}{}.{}",
        prefix(tag),
        tag_part(arch.as_str()),
        tag_part(stream)
    );
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
        (arch, stream): (Arch, &str),
        platforms: &[&str],
        meta: &Value,
    ) -> Part {
        let s = |k: &str| meta[k].as_str().unwrap_or("").to_string();
        let commit = s("ostree-commit");
        let mut ann = Map::new();
        ann.insert(INDEX_MARK.into(), INDEX_VERSION.into());
        ann.insert(A_ARCH.into(), arch.as_str().into());
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

    pub(super) fn ann(&self, k: &str) -> Option<&str> {
        self.annotations
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }

    pub(super) fn withdrawn(&self) -> bool {
        self.ann(A_WITHDRAWN).is_some()
    }

    /// The build in words, for messages.
    pub(super) fn build(&self) -> String {
        match (self.ann(A_BUILD), self.ann(A_COMMIT)) {
            (Some(b), _) => b.to_string(),
            (None, Some(c)) => format!("ostree commit {}", short(c)),
            (None, None) => "its build not recorded".into(),
        }
    }

    /// The (arch, stream) pairs it holds.
    pub(super) fn pairs(&self) -> BTreeSet<(String, String)> {
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
    pub(super) fn withdrawal(&self, why: &str) -> Part {
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

pub(super) fn platform_of(e: &Value) -> &str {
    e["annotations"][A_PLATFORM].as_str().unwrap_or("")
}

pub(super) fn is_doc(e: &Value) -> bool {
    matches!(platform_of(e), META | STREAM)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_tags_keep_platform_groups_apart() {
        let t = |p: &[&str]| part_tag("4.18", Arch::X86_64, "rhel-9", p).unwrap();
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
        let e = part_tag(&"t".repeat(120), Arch::X86_64, "rhel-9", &["metal"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("choose a shorter tag"), "{e}");
    }
}
