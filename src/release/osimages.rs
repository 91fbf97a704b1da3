//! Finding a release's OS images the way the machine-config-operator does
//! (`pkg/osimagestream/`): image-references tags matching its OS tag pattern
//! (or annotated as built from openshift/os), classified by their labels
//! (`io.openshift.os.streamclass`, `containers.bootc`,
//! `io.openshift.os.extensions`); extensions images are not bootable. The
//! default stream is the MCO's: the only one, else `rhel-9` for OCP 4.x and
//! `rhel-10` from OCP 5 (`streams.go`). `machine-os-content` (payloads up
//! to 4.11) is used only when no CoreOS tag is there. UPSTREAM.md §16.
use crate::oscontainer::{detect_format, OsFormat};
use anyhow::{bail, Result};
use serde::Serialize;
use std::collections::BTreeMap;

/// Image label naming the OS stream (MCO `image_data.go`).
pub const LABEL_STREAMCLASS: &str = "io.openshift.os.streamclass";
/// Image label of an extensions image (MCO `image_data.go`), value `true`.
pub const LABEL_EXTENSIONS: &str = "io.openshift.os.extensions";
/// Tag annotation the MCO also accepts: built from openshift/os
/// (`imagestream_source.go` `filterImageTag`).
pub const ANNOTATION_SOURCE: &str = "io.openshift.build.source-location";
pub const OS_SOURCE_REPO: &str = "github.com/openshift/os";
/// The legacy OS tag (payloads up to 4.11).
pub const LEGACY_TAG: &str = "machine-os-content";
/// Stream names (MCO `streams.go`, installer `types.OSImageStream`).
pub const STREAM_RHEL9: &str = "rhel-9";
pub const STREAM_RHEL10: &str = "rhel-10";
/// The installer's payload tag of each stream (`pkg/rhcos`
/// `GetPayloadImageStreamTag`): `rhel-9` → `rhel-coreos`, `rhel-10` and its
/// variants → `rhel-coreos-10`.
pub const TAG_RHEL9: &str = "rhel-coreos";
pub const TAG_RHEL10: &str = "rhel-coreos-10";

/// The MCO's OS tag pattern,
/// `^(rhel|stream)[a-zA-Z0-9.-]*-coreos[a-zA-Z0-9.-]*(-extensions[a-zA-Z0-9.-]*)?$`.
/// Its character class holds `-`, so the optional extensions group adds
/// nothing: a name of those characters, starting `rhel` or `stream`,
/// with `-coreos` after that prefix.
pub fn is_os_tag(name: &str) -> bool {
    let rest = match name
        .strip_prefix("rhel")
        .or_else(|| name.strip_prefix("stream"))
    {
        Some(r) => r,
        None => return false,
    };
    name.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        && rest.contains("-coreos")
}

/// The stream the installer pairs with a payload tag, if any.
pub fn installer_stream_for_tag(tag: &str) -> Option<&'static str> {
    match tag {
        TAG_RHEL9 => Some(STREAM_RHEL9),
        TAG_RHEL10 => Some(STREAM_RHEL10),
        _ => None,
    }
}

/// The installer's payload tag for a stream name.
pub fn installer_tag_for_stream(stream: &str) -> Option<&'static str> {
    if stream == STREAM_RHEL9 {
        Some(TAG_RHEL9)
    } else if stream.starts_with(STREAM_RHEL10) {
        Some(TAG_RHEL10)
    } else {
        None
    }
}

/// The MCO's built-in default stream for a release version
/// (`GetBuiltinDefaultStreamName`: major 4 → rhel-9, else rhel-10), with
/// the major version read.
pub fn default_stream(version: &str) -> Result<(&'static str, u64)> {
    let digits: String = version
        .trim_start_matches('v')
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let Ok(major) = digits.parse::<u64>() else {
        bail!("release version '{version}' does not start with a version number, so the MCO's default OS stream (rhel-9 for 4.x, rhel-10 from 5) cannot be told");
    };
    Ok((
        if major == 4 {
            STREAM_RHEL9
        } else {
            STREAM_RHEL10
        },
        major,
    ))
}

/// What an image found under an OS tag is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A bootable OS image (ostree-native / bootc, or legacy).
    Os,
    /// An extensions image: RPMs for the OS, not bootable.
    Extensions,
    /// Neither OS nor extensions labels.
    NotOs,
    /// The image could not be read.
    Unreadable,
}

/// One image found under an OS tag of the release.
#[derive(Debug, Clone, Serialize)]
pub struct Found {
    pub tag: String,
    pub pullspec: String,
    pub digest: Option<String>,
    pub kind: Kind,
    pub bootable: bool,
    pub format: Option<OsFormat>,
    /// `rhel-9`, `rhel-10`, ... (None: OKD's single stream, or unknown).
    #[serde(rename = "stream-class")]
    pub stream_class: Option<String>,
    /// Where the stream class came from.
    #[serde(rename = "stream-class-source")]
    pub stream_class_source: Option<String>,
    /// The legacy machine-os-content tag.
    pub legacy: bool,
    /// Why it is not bootable (or what it is).
    pub note: String,
}

/// The key of an OS stream: its class (`rhel-9`, `rhel-10`), else its
/// release tag (OKD's `stream-coreos`). `--os-stream all` names the
/// stream's directory with it, and `push` the stream's part of an index.
pub fn stream_key(class: Option<&str>, tag: &str) -> String {
    class.unwrap_or(tag).to_string()
}

impl Found {
    /// Classify the image under `tag` from its labels (`Err`: it could not
    /// be opened, with the reason).
    pub fn classify(
        tag: &str,
        pullspec: &str,
        opened: std::result::Result<(&str, &BTreeMap<String, String>), String>,
    ) -> Found {
        let legacy = tag == LEGACY_TAG;
        let mut f = Found {
            tag: tag.to_string(),
            pullspec: pullspec.to_string(),
            digest: None,
            kind: Kind::Unreadable,
            bootable: false,
            format: None,
            stream_class: installer_stream_for_tag(tag).map(String::from),
            stream_class_source: installer_stream_for_tag(tag)
                .map(|_| "the installer's tag for it (pkg/rhcos)".to_string()),
            legacy,
            note: String::new(),
        };
        let (digest, labels) = match opened {
            Ok(x) => x,
            Err(e) => {
                f.note = format!("could not be read: {e}");
                return f;
            }
        };
        f.digest = Some(digest.to_string());
        if let Some(c) = labels.get(LABEL_STREAMCLASS).filter(|c| !c.is_empty()) {
            f.stream_class = Some(c.clone());
            f.stream_class_source = Some(format!("label {LABEL_STREAMCLASS}"));
        }
        let label_true = |k: &str| {
            labels
                .get(k)
                .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        };
        if label_true(LABEL_EXTENSIONS) {
            f.kind = Kind::Extensions;
            f.note = format!("an extensions image (label {LABEL_EXTENSIONS}=true): RPMs for the OS, not bootable");
            return f;
        }
        match detect_format(labels, tag) {
            Ok(fmt) => {
                f.kind = Kind::Os;
                f.bootable = true;
                f.format = Some(fmt);
                f.note = match fmt {
                    OsFormat::Legacy => "legacy machine-os-content (OCP 4.11 and older)".into(),
                    OsFormat::OstreeNative => "bootable OS image".into(),
                };
            }
            Err(_) if tag.contains("-extensions") => {
                f.kind = Kind::Extensions;
                f.note = "an extensions image (tag name; no OS labels): not bootable".into();
            }
            Err(_) => {
                f.kind = Kind::NotOs;
                f.note = format!(
                    "not an OS image: none of the labels {}, {}, {}, {}",
                    crate::oscontainer::LABEL_BOOTC,
                    crate::oscontainer::LABEL_OSTREE_BOOTABLE,
                    crate::oscontainer::LABEL_OSTREE_COMMIT,
                    crate::oscontainer::LABEL_LEGACY_COMMIT
                );
            }
        }
        f
    }

    /// `rhel-coreos (rhel-9)` for messages.
    pub fn describe(&self) -> String {
        match &self.stream_class {
            Some(c) => format!("{} (stream {c})", self.tag),
            None => self.tag.clone(),
        }
    }

    /// Bootable or not known yet (unreadable): an image the default choice
    /// must not pass over silently.
    fn may_boot(&self) -> bool {
        self.bootable || self.kind == Kind::Unreadable
    }
}

/// The image chosen and why.
#[derive(Debug, Clone, Serialize)]
pub struct Choice {
    pub index: usize,
    pub reason: String,
}

fn listing(found: &[Found]) -> String {
    found
        .iter()
        .map(|f| {
            if f.bootable {
                format!("{}: bootable", f.describe())
            } else {
                format!("{}: skipped, {}", f.describe(), f.note)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn bootable_listing(found: &[Found]) -> String {
    let b: Vec<String> = found
        .iter()
        .filter(|f| f.bootable)
        .map(|f| f.describe())
        .collect();
    if b.is_empty() {
        "none".into()
    } else {
        b.join(", ")
    }
}

/// The chosen entry, or its own error when it could not be read.
fn take(found: &[Found], i: usize, reason: String) -> Result<Choice> {
    let f = &found[i];
    if f.kind == Kind::Unreadable {
        bail!("OS image {} (release tag {}) {}", f.pullspec, f.tag, f.note);
    }
    if !f.bootable {
        bail!(
            "release tag {} is not bootable: {}; its bootable OS images: {}",
            f.tag,
            f.note,
            bootable_listing(found)
        );
    }
    Ok(Choice { index: i, reason })
}

/// Choose the OS image: `want` is a stream (`rhel-9`, `rhel-10`) or a tag;
/// without it, the MCO's default for the release `version`.
pub fn choose(found: &[Found], version: &str, want: Option<&str>) -> Result<Choice> {
    if let Some(w) = want {
        if let Some(i) = found
            .iter()
            .rposition(|f| f.bootable && f.stream_class.as_deref() == Some(w))
        {
            let f = &found[i];
            return take(
                found,
                i,
                format!(
                    "--os-stream {w}: the OS image of stream {w} is tag {} ({})",
                    f.tag,
                    f.stream_class_source.as_deref().unwrap_or("")
                ),
            );
        }
        if let Some(i) = found.iter().position(|f| f.tag == w) {
            return take(found, i, format!("--os-stream {w}: the release tag {w}"));
        }
        if let Some(t) = installer_tag_for_stream(w) {
            if let Some(i) = found.iter().position(|f| f.tag == t) {
                return take(
                    found,
                    i,
                    format!("--os-stream {w}: the installer's tag for {w} is {t} (pkg/rhcos)"),
                );
            }
        }
        bail!(
            "release {version} has no OS stream '{w}' (its bootable OS images: {}); pass one of those streams or tags to --os-stream",
            bootable_listing(found)
        );
    }
    if found.is_empty() {
        bail!("release {version} has no OS image: no tag of its image-references matches the MCO's OS tag pattern (rhel-coreos, rhel-coreos-10, OKD's stream-coreos, ...) nor is {LEGACY_TAG}; is this an OpenShift release payload?");
    }
    // CoreOS tags first; machine-os-content only without them.
    let current: Vec<usize> = (0..found.len())
        .filter(|&i| !found[i].legacy && found[i].may_boot())
        .collect();
    let pool = if current.is_empty() {
        (0..found.len())
            .filter(|&i| found[i].legacy && found[i].may_boot())
            .collect()
    } else {
        current
    };
    if pool.is_empty() {
        bail!(
            "release {version} has no bootable OS image; found: {}. Use a release whose OS tag names a bootable ostree/bootc image",
            listing(found)
        );
    }
    // One entry per stream (the MCO keys streams by class; the last wins).
    let mut streams: BTreeMap<String, usize> = BTreeMap::new();
    for &i in &pool {
        let key = found[i]
            .stream_class
            .clone()
            .unwrap_or_else(|| format!("tag:{}", found[i].tag));
        streams.insert(key, i);
    }
    if streams.len() == 1 {
        let i = *streams.values().next().unwrap_or(&pool[0]);
        let why = if found[i].legacy {
            format!("the release's only OS image is the legacy {LEGACY_TAG}")
        } else {
            format!(
                "{} is the release's only OS stream (the MCO's default then)",
                found[i].describe()
            )
        };
        return take(found, i, why);
    }
    let (d, major) = default_stream(version).map_err(|e| {
        anyhow::anyhow!(
            "{e}; the release has several OS streams ({}): pass one to --os-stream",
            bootable_listing(found)
        )
    })?;
    match streams.get(d) {
        Some(&i) => take(
            found,
            i,
            format!(
                "the MCO's default stream for OCP {major}.x is {d} (machine-config-operator pkg/osimagestream/streams.go); its image is tag {} ({})",
                found[i].tag,
                found[i].stream_class_source.as_deref().unwrap_or("")
            ),
        ),
        None => bail!(
            "release {version} has several OS streams ({}) and none is {d}, the MCO's default for OCP {major}.x; pass one to --os-stream",
            bootable_listing(found)
        ),
    }
}

/// Every bootable OS stream of the release, one image each (the MCO's
/// grouping; machine-os-content only when there is no CoreOS tag): for
/// `--os-stream all`.
/// An unreadable image is kept (its run then fails with its error).
pub fn all_streams(found: &[Found]) -> Vec<usize> {
    let current: Vec<usize> = (0..found.len())
        .filter(|&i| !found[i].legacy && found[i].may_boot())
        .collect();
    let pool: Vec<usize> = if current.is_empty() {
        (0..found.len())
            .filter(|&i| found[i].legacy && found[i].may_boot())
            .collect()
    } else {
        current
    };
    let mut streams: BTreeMap<String, usize> = BTreeMap::new();
    for i in pool {
        let key = found[i]
            .stream_class
            .clone()
            .unwrap_or_else(|| format!("tag:{}", found[i].tag));
        streams.insert(key, i);
    }
    let mut v: Vec<usize> = streams.into_values().collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
    fn os(tag: &str, class: Option<&str>) -> Found {
        let mut l = labels(&[("containers.bootc", "1"), ("ostree.bootable", "true")]);
        if let Some(c) = class {
            l.insert(LABEL_STREAMCLASS.into(), c.into());
        }
        Found::classify(tag, &format!("q.io/x@sha256:{tag}"), Ok(("sha256:1", &l)))
    }

    #[test]
    fn mco_tag_pattern() {
        // imagestream_source_test.go's names, and what it leaves out.
        for t in [
            "rhel-coreos",
            "rhel-coreos-10",
            "rhel-coreos-extensions",
            "rhel-coreos-10-extensions",
            "stream-coreos",
            "stream-coreos-extensions",
            "rhel-9-coreos",
            "rhel10-coreos",
            "rhel-coreos-9.6",
        ] {
            assert!(is_os_tag(t), "{t}");
        }
        for t in [
            "machine-os-content",
            "cli",
            "coreos",
            "rhel-coreo",
            "fedora-coreos",
            "rhel_coreos",
            "rhelcoreos",
            "rhel-coreos ",
            "streamcoreos",
        ] {
            assert!(!is_os_tag(t), "{t}");
        }
    }

    #[test]
    fn default_stream_by_major_version() {
        assert_eq!(default_stream("4.18.0").unwrap(), (STREAM_RHEL9, 4));
        assert_eq!(default_stream("4.22.0-ec.1").unwrap(), (STREAM_RHEL9, 4));
        assert_eq!(
            default_stream("5.0.0-0.nightly").unwrap(),
            (STREAM_RHEL10, 5)
        );
        assert_eq!(default_stream("v5.1.2").unwrap(), (STREAM_RHEL10, 5));
        assert!(default_stream("latest").is_err());
    }

    #[test]
    fn classifies_by_labels() {
        let f = os("rhel-coreos-10", Some("rhel-10"));
        assert!(f.bootable);
        assert_eq!(f.stream_class.as_deref(), Some("rhel-10"));
        assert!(f.stream_class_source.unwrap().contains("label"));
        // Without the label, the installer's tag name says the stream.
        let f = os("rhel-coreos", None);
        assert_eq!(f.stream_class.as_deref(), Some("rhel-9"));
        // OKD: no class at all.
        assert_eq!(os("stream-coreos", None).stream_class, None);
        let l = labels(&[(LABEL_EXTENSIONS, "TRUE"), (LABEL_STREAMCLASS, "rhel-9")]);
        let f = Found::classify("rhel-coreos-extensions", "p", Ok(("d", &l)));
        assert_eq!(f.kind, Kind::Extensions);
        assert!(!f.bootable);
        let f = Found::classify("rhel-coreos-extensions", "p", Ok(("d", &labels(&[]))));
        assert_eq!(f.kind, Kind::Extensions);
        let f = Found::classify("rhel-coreos-x", "p", Ok(("d", &labels(&[]))));
        assert_eq!(f.kind, Kind::NotOs);
        assert!(f.note.contains("containers.bootc"), "{}", f.note);
        let f = Found::classify("rhel-coreos", "p", Err("gone".into()));
        assert_eq!(f.kind, Kind::Unreadable);
        assert!(f.note.contains("gone"));
    }

    #[test]
    fn default_is_the_mcos() {
        let dual = vec![
            os("rhel-coreos", Some("rhel-9")),
            os("rhel-coreos-10", Some("rhel-10")),
        ];
        let c = choose(&dual, "4.22.0", None).unwrap();
        assert_eq!(dual[c.index].tag, "rhel-coreos");
        assert!(c.reason.contains("OCP 4.x is rhel-9"), "{}", c.reason);
        let c = choose(&dual, "5.0.0", None).unwrap();
        assert_eq!(dual[c.index].tag, "rhel-coreos-10");
        assert!(c.reason.contains("OCP 5.x is rhel-10"), "{}", c.reason);
        // An unreadable default is an error, never a silent fallback.
        let mut broken = dual.clone();
        broken[1] = Found::classify(
            "rhel-coreos-10",
            "q.io/x@sha256:b",
            Err("was not found".into()),
        );
        let e = choose(&broken, "5.0.0", None).unwrap_err().to_string();
        assert!(
            e.contains("was not found") && e.contains("rhel-coreos-10"),
            "{e}"
        );
        // OKD: the only stream, whatever the version.
        let okd = vec![os("stream-coreos", None)];
        let c = choose(&okd, "4.19.0-okd-scos.1", None).unwrap();
        assert_eq!(c.index, 0);
        assert!(c.reason.contains("only OS stream"), "{}", c.reason);
        // Legacy only without CoreOS tags.
        let mut l = labels(&[("com.coreos.ostree-commit", "x")]);
        let legacy = Found::classify(LEGACY_TAG, "p", Ok(("d", &l)));
        let both = vec![legacy.clone(), os("rhel-coreos", None)];
        assert_eq!(
            both[choose(&both, "4.12.0", None).unwrap().index].tag,
            "rhel-coreos"
        );
        let only = vec![legacy];
        let c = choose(&only, "4.11.0", None).unwrap();
        assert!(c.reason.contains("legacy"), "{}", c.reason);
        l.clear();
        // Extensions are skipped; nothing bootable is an error listing why.
        let ext = labels(&[(LABEL_EXTENSIONS, "true")]);
        let none = vec![
            Found::classify("rhel-coreos-extensions", "p", Ok(("d", &ext))),
            Found::classify("rhel-coreos", "p", Ok(("d", &l))),
        ];
        let e = choose(&none, "4.18.0", None).unwrap_err().to_string();
        assert!(e.contains("no bootable OS image"), "{e}");
        assert!(
            e.contains("rhel-coreos-extensions") && e.contains("extensions image"),
            "{e}"
        );
        assert!(e.contains("not an OS image"), "{e}");
        let e = choose(&[], "4.18.0", None).unwrap_err().to_string();
        assert!(e.contains("has no OS image"), "{e}");
        // Two streams, neither the default, unparseable version.
        let odd = vec![
            os("rhel-coreos-a", Some("a")),
            os("rhel-coreos-b", Some("b")),
        ];
        let e = choose(&odd, "4.18.0", None).unwrap_err().to_string();
        assert!(
            e.contains("none is rhel-9") && e.contains("--os-stream"),
            "{e}"
        );
        let e = choose(&dual, "nightly", None).unwrap_err().to_string();
        assert!(e.contains("--os-stream") && e.contains("nightly"), "{e}");
    }

    #[test]
    fn os_stream_takes_a_stream_or_a_tag() {
        let dual = vec![
            os("rhel-coreos", Some("rhel-9")),
            os("rhel-coreos-10", Some("rhel-10")),
        ];
        let c = choose(&dual, "4.22.0", Some("rhel-10")).unwrap();
        assert_eq!(dual[c.index].tag, "rhel-coreos-10");
        assert!(c.reason.contains("stream rhel-10"), "{}", c.reason);
        let c = choose(&dual, "5.0.0", Some("rhel-coreos")).unwrap();
        assert_eq!(dual[c.index].tag, "rhel-coreos");
        // A stream the payload lacks: the error lists what it has.
        let e = choose(&dual, "4.22.0", Some("rhel-11"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no OS stream 'rhel-11'"), "{e}");
        assert!(
            e.contains("rhel-coreos (stream rhel-9), rhel-coreos-10 (stream rhel-10)"),
            "{e}"
        );
        // A tag that is not bootable.
        let ext = labels(&[(LABEL_EXTENSIONS, "true")]);
        let mut v = dual.clone();
        v.push(Found::classify(
            "rhel-coreos-extensions",
            "p",
            Ok(("d", &ext)),
        ));
        let e = choose(&v, "4.22.0", Some("rhel-coreos-extensions"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not bootable") && e.contains("extensions"),
            "{e}"
        );
        assert_eq!(all_streams(&v), vec![0, 1]);
    }
}
