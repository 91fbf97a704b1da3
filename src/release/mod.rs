//! The OpenShift release payload: `image-references`, `release-metadata` and
//! the `coreos-bootimages` ConfigMap, read from the release image's last layer.
//! Upstream: openshift/oc `pkg/cli/admin/release/`, cluster-version-operator
//! `pkg/payload/payload.go`, installer `hack/build-coreos-manifest.go`.
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
pub mod osimages;
pub mod resolve;
use std::collections::BTreeMap;

/// Directory in the release image holding the manifests.
pub const MANIFESTS_DIR: &str = "release-manifests/";
/// The ImageStream naming every component image.
pub const IMAGE_REFERENCES: &str = "release-manifests/image-references";
/// Cincinnati metadata.
pub const RELEASE_METADATA: &str = "release-manifests/release-metadata";
/// The ConfigMap with the CoreOS stream (installer `data/data/coreos/`).
pub const BOOTIMAGES_CONFIGMAP: &str = "release-manifests/0000_50_installer_coreos-bootimages.yaml";

use crate::util::arch::Arch;

#[derive(Debug, Clone, Deserialize)]
struct ImageStream {
    kind: Option<String>,
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    metadata: Option<Meta>,
    spec: Option<IsSpec>,
}
#[derive(Debug, Clone, Deserialize)]
struct Meta {
    name: Option<String>,
}
#[derive(Debug, Clone, Deserialize)]
struct IsSpec {
    #[serde(default)]
    tags: Vec<Tag>,
}
#[derive(Debug, Clone, Deserialize)]
struct Tag {
    name: String,
    from: Option<From>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}
#[derive(Debug, Clone, Deserialize)]
struct From {
    kind: Option<String>,
    name: String,
}

/// One component image of the release.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Component {
    pub tag: String,
    pub pullspec: String,
    /// `machine-os=<v>` from `io.openshift.build.versions`, when present.
    pub machine_os: Option<String>,
    /// `io.openshift.build.source-location`, when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_location: Option<String>,
}

/// An AMI pinned by the release's stream.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PinnedAmi {
    pub region: String,
    pub image: String,
    pub release: String,
}

/// What the release payload says.
#[derive(Debug, Clone, Serialize)]
pub struct Payload {
    pub version: String,
    pub components: Vec<Component>,
    pub metadata: Option<serde_json::Value>,
    /// `data.stream` of the bootimages ConfigMap (a CoreOS stream JSON).
    pub stream: Option<serde_json::Value>,
    /// `data.streams` (newer payloads), keyed by stream name.
    pub streams: BTreeMap<String, serde_json::Value>,
}

impl Payload {
    /// Parse the files of `release-manifests/` (path → bytes).
    pub fn from_files(files: &BTreeMap<String, Vec<u8>>) -> Result<Self> {
        let raw = files.get(IMAGE_REFERENCES).ok_or_else(|| {
            anyhow!("not a release image: its last layer has no {IMAGE_REFERENCES} (is this an OpenShift release payload?)")
        })?;
        let is: ImageStream =
            crate::image::fetch::parse_json(raw, "release-manifests/image-references")?;
        if is.kind.as_deref() != Some("ImageStream") {
            bail!(
                "release-manifests/image-references has kind '{}', expected ImageStream (apiVersion image.openshift.io/v1)",
                is.kind.as_deref().unwrap_or("<none>")
            );
        }
        if let Some(v) = &is.api_version {
            if !v.starts_with("image.openshift.io/") && v != "v1" {
                bail!("release-manifests/image-references has apiVersion '{v}', expected image.openshift.io/v1");
            }
        }
        let version = is
            .metadata
            .and_then(|m| m.name)
            .filter(|n| !n.is_empty())
            .context(
                "release-manifests/image-references has no metadata.name (the release version)",
            )?;
        let mut components = Vec::new();
        for t in is.spec.map(|s| s.tags).unwrap_or_default() {
            let Some(from) = t.from else { continue };
            if from.kind.as_deref().is_some_and(|k| k != "DockerImage") {
                continue;
            }
            let machine_os = t
                .annotations
                .get("io.openshift.build.versions")
                .and_then(|v| {
                    v.split(',')
                        .find_map(|kv| kv.trim().strip_prefix("machine-os=").map(String::from))
                });
            let source_location = t.annotations.get(osimages::ANNOTATION_SOURCE).cloned();
            components.push(Component {
                tag: t.name,
                pullspec: from.name,
                machine_os,
                source_location,
            });
        }
        let metadata = match files.get(RELEASE_METADATA) {
            Some(b) => Some(crate::image::fetch::parse_json(
                b,
                "release-manifests/release-metadata",
            )?),
            None => None,
        };
        let (stream, streams) = match files.get(BOOTIMAGES_CONFIGMAP) {
            Some(b) => parse_bootimages(b)?,
            None => (None, BTreeMap::new()),
        };
        Ok(Payload {
            version,
            components,
            metadata,
            stream,
            streams,
        })
    }

    /// The tags to look at for OS images, as the MCO picks them
    /// (`imagestream_source.go` `filterImageTag`): tags matching its OS tag
    /// pattern or annotated as built from openshift/os; then the legacy
    /// `machine-os-content`, and the tag `want` names, if any.
    pub fn os_candidates(&self, want: Option<&str>) -> Vec<&Component> {
        self.components
            .iter()
            .filter(|c| {
                osimages::is_os_tag(&c.tag)
                    || c.source_location
                        .as_deref()
                        .is_some_and(|s| s.contains(osimages::OS_SOURCE_REPO))
                    || c.tag == osimages::LEGACY_TAG
                    || want == Some(c.tag.as_str())
            })
            .collect()
    }

    /// The stream JSON pinned for an OS of stream class `class`: its entry
    /// in `data.streams` (keyed by stream name; OKD's one key is `""`),
    /// else `data.stream` when the payload has no entry for any class
    /// (older payloads, OKD, an unclassified OS). `None` when `data.streams`
    /// lists other streams only: then `data.stream` is another stream's.
    pub fn stream_for(&self, class: Option<&str>) -> Option<&serde_json::Value> {
        if let Some(c) = class {
            if let Some(s) = self.streams.get(c) {
                return Some(s);
            }
            if self.streams.keys().any(|k| !k.is_empty()) {
                return None;
            }
        }
        self.stream.as_ref()
    }
}

/// The platforms a stream JSON lists for `arch`
/// (`architectures.<arch>.artifacts` keys, stream-metadata-go
/// `stream/stream.go`); `None` when it lists none for the arch.
pub fn stream_platforms(stream: &serde_json::Value, arch: Arch) -> Option<Vec<String>> {
    let a = stream
        .get("architectures")?
        .get(arch.as_str())?
        .get("artifacts")?
        .as_object()?;
    (!a.is_empty()).then(|| a.keys().cloned().collect())
}

fn parse_bootimages(
    raw: &[u8],
) -> Result<(
    Option<serde_json::Value>,
    BTreeMap<String, serde_json::Value>,
)> {
    let cm: serde_yaml_ng::Value =
        serde_yaml_ng::from_slice(raw).context("coreos-bootimages ConfigMap is not valid YAML")?;
    let data = cm.get("data");
    let stream = match data.and_then(|d| d.get("stream")).and_then(|s| s.as_str()) {
        Some(s) => Some(
            serde_json::from_str(s).map_err(|e| anyhow!("coreos-bootimages ConfigMap key data.stream is not valid JSON ({e}): it must be a CoreOS stream JSON (stream-metadata-go); fix {BOOTIMAGES_CONFIGMAP}"))?,
        ),
        None => None,
    };
    let mut streams = BTreeMap::new();
    if let Some(s) = data.and_then(|d| d.get("streams")) {
        let Some(s) = s.as_str() else {
            bail!("coreos-bootimages ConfigMap key data.streams is not a string: the installer (hack/build-coreos-manifest.go) writes it as a JSON text, {{\"rhel-9\": <stream>, ...}}; fix or drop that key of {BOOTIMAGES_CONFIGMAP}");
        };
        streams = serde_json::from_str::<BTreeMap<String, serde_json::Value>>(s).map_err(|e| {
            anyhow!("coreos-bootimages ConfigMap key data.streams is not a JSON object keyed by stream name ({e}): the installer (hack/build-coreos-manifest.go) writes {{\"rhel-9\": <stream>, ...}}; fix or drop that key of {BOOTIMAGES_CONFIGMAP}")
        })?;
    }
    Ok((stream, streams))
}

/// The AMIs a stream pins for `arch`.
pub fn pinned_amis(stream: &serde_json::Value, arch: Arch) -> Vec<PinnedAmi> {
    let Some(regions) = stream
        .pointer(&format!("/architectures/{arch}/images/aws/regions"))
        .and_then(|r| r.as_object())
    else {
        return Vec::new();
    };
    regions
        .iter()
        .filter_map(|(region, v)| {
            Some(PinnedAmi {
                region: region.clone(),
                image: v.get("image")?.as_str()?.to_string(),
                release: v
                    .get("release")
                    .and_then(|r| r.as_str())
                    .unwrap_or("")
                    .to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    fn files(refs: &str) -> BTreeMap<String, Vec<u8>> {
        let mut m = BTreeMap::new();
        m.insert(IMAGE_REFERENCES.to_string(), refs.as_bytes().to_vec());
        m
    }
    const REFS: &str = r#"{"kind":"ImageStream","apiVersion":"image.openshift.io/v1","metadata":{"name":"4.18.0"},
      "spec":{"tags":[{"name":"cli","from":{"kind":"DockerImage","name":"q.io/a/b@sha256:1"}},
      {"name":"machine-os-content","from":{"kind":"DockerImage","name":"q.io/a/b@sha256:2"}},
      {"name":"rhel-coreos","from":{"kind":"DockerImage","name":"q.io/a/b@sha256:3"},"annotations":{"io.openshift.build.versions":"machine-os=418.94.1"}},
      {"name":"rhel-coreos-10","from":{"kind":"DockerImage","name":"q.io/a/b@sha256:4"}}]}}"#;

    #[test]
    fn os_candidates_as_the_mco_filters() {
        let p = Payload::from_files(&files(REFS)).unwrap();
        assert_eq!(p.version, "4.18.0");
        let tags: Vec<&str> = p
            .os_candidates(None)
            .iter()
            .map(|c| c.tag.as_str())
            .collect();
        assert_eq!(
            tags,
            ["machine-os-content", "rhel-coreos", "rhel-coreos-10"]
        );
        let c = p.os_candidates(None)[1];
        assert_eq!(c.machine_os.as_deref(), Some("418.94.1"));
        // A tag named by --os-stream is looked at too.
        assert_eq!(p.os_candidates(Some("cli")).len(), 4);
        assert_eq!(p.os_candidates(Some("nope")).len(), 3);
        // Annotated as built from openshift/os, whatever its name.
        let refs = r#"{"kind":"ImageStream","metadata":{"name":"5.0.0"},"spec":{"tags":[
          {"name":"node","from":{"kind":"DockerImage","name":"q.io/a@sha256:1"},"annotations":{"io.openshift.build.source-location":"https://github.com/openshift/os"}},
          {"name":"stream-coreos","from":{"kind":"DockerImage","name":"q.io/a@sha256:2"}},
          {"name":"stream-coreos-extensions","from":{"kind":"DockerImage","name":"q.io/a@sha256:3"}}]}}"#;
        let p = Payload::from_files(&files(refs)).unwrap();
        assert_eq!(p.os_candidates(None).len(), 3);
    }

    #[test]
    fn stream_json_per_class() {
        let mut f = files(REFS);
        let cm = |stream: &str, streams: Option<&str>| {
            let mut y = format!("kind: ConfigMap\ndata:\n  stream: '{stream}'\n");
            if let Some(s) = streams {
                y.push_str(&format!("  streams: '{s}'\n"));
            }
            y.into_bytes()
        };
        f.insert(
            BOOTIMAGES_CONFIGMAP.into(),
            cm(
                r#"{"stream":"9"}"#,
                Some(r#"{"rhel-9":{"stream":"9"},"rhel-10":{"stream":"10"}}"#),
            ),
        );
        let p = Payload::from_files(&f).unwrap();
        assert_eq!(p.stream_for(Some("rhel-10")).unwrap()["stream"], "10");
        assert_eq!(p.stream_for(Some("rhel-9")).unwrap()["stream"], "9");
        assert!(p.stream_for(Some("rhel-11")).is_none());
        assert_eq!(p.stream_for(None).unwrap()["stream"], "9");
        // OKD: one stream keyed "".
        f.insert(
            BOOTIMAGES_CONFIGMAP.into(),
            cm(r#"{"stream":"scos"}"#, Some(r#"{"":{"stream":"scos"}}"#)),
        );
        let p = Payload::from_files(&f).unwrap();
        assert_eq!(p.stream_for(None).unwrap()["stream"], "scos");
        assert_eq!(p.stream_for(Some("c10")).unwrap()["stream"], "scos");
        // data.streams that is no JSON object: one line naming the key.
        for bad in ["not json", "[1]"] {
            f.insert(BOOTIMAGES_CONFIGMAP.into(), cm("{}", Some(bad)));
            let e = format!("{:#}", Payload::from_files(&f).unwrap_err());
            assert!(
                e.contains("data.streams") && e.contains("coreos-bootimages"),
                "{e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
        f.insert(
            BOOTIMAGES_CONFIGMAP.into(),
            b"kind: ConfigMap\ndata:\n  streams: {a: 1}\n".to_vec(),
        );
        let e = format!("{:#}", Payload::from_files(&f).unwrap_err());
        assert!(e.contains("data.streams is not a string"), "{e}");
        f.insert(BOOTIMAGES_CONFIGMAP.into(), cm("nope", None));
        let e = format!("{:#}", Payload::from_files(&f).unwrap_err());
        assert!(e.contains("data.stream is not valid JSON"), "{e}");
    }

    #[test]
    fn rejects_non_releases() {
        let e = Payload::from_files(&BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a release image"));
        let e = Payload::from_files(&files(r#"{"kind":"ConfigMap","metadata":{"name":"x"}}"#))
            .unwrap_err()
            .to_string();
        assert!(e.contains("kind 'ConfigMap'"), "{e}");
        let e = Payload::from_files(&files("not json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not valid JSON"));
        let p = Payload::from_files(&files(
            r#"{"kind":"ImageStream","metadata":{"name":"4.1"},"spec":{"tags":[]}}"#,
        ))
        .unwrap();
        assert!(p.os_candidates(None).is_empty());
    }

    #[test]
    fn stream_lists_platforms_per_arch() {
        let s: serde_json::Value = serde_json::from_str(
            r#"{"stream":"rhcos-4.18","architectures":{
              "x86_64":{"artifacts":{"metal":{},"qemu":{},"nutanix":{}}},
              "aarch64":{"artifacts":{}},"ppc64le":{}}}"#,
        )
        .unwrap();
        assert_eq!(
            stream_platforms(&s, Arch::X86_64).unwrap(),
            vec!["metal", "qemu", "nutanix"]
        );
        assert!(stream_platforms(&s, Arch::Aarch64).is_none());
        assert!(stream_platforms(&s, Arch::Ppc64le).is_none());
        assert!(stream_platforms(&s, Arch::S390x).is_none());
    }

    #[test]
    fn reads_pinned_amis() {
        let s: serde_json::Value = serde_json::from_str(
            r#"{"architectures":{"x86_64":{"images":{"aws":{"regions":{"us-east-1":{"release":"1","image":"ami-1"}}}}}}}"#,
        )
        .unwrap();
        let a = pinned_amis(&s, Arch::X86_64);
        assert_eq!(
            a,
            vec![PinnedAmi {
                region: "us-east-1".into(),
                image: "ami-1".into(),
                release: "1".into()
            }]
        );
        assert!(pinned_amis(&s, Arch::Aarch64).is_empty());
    }
}
