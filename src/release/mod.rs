//! The OpenShift release payload: `image-references`, `release-metadata` and
//! the `coreos-bootimages` ConfigMap, read from the release image's last layer.
//! Upstream: openshift/oc `pkg/cli/admin/release/`, cluster-version-operator
//! `pkg/payload/payload.go`, installer `hack/build-coreos-manifest.go`.
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
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
/// OS tags, in the order they are looked for (SPEC 1.1).
pub const OS_TAGS: [&str; 3] = ["rhel-coreos", "rhel-coreos-10", "machine-os-content"];

/// Arch names live below every stage (the image layer needs them too).
pub use crate::util::arch::{coreos_arch, host_arch, oci_arch, parse_arch, ARCHES};

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
            components.push(Component {
                tag: t.name,
                pullspec: from.name,
                machine_os,
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

    /// The OS component: the named stream tag if given, else the first of
    /// [`OS_TAGS`] present.
    pub fn os_component(&self, os_stream: Option<&str>) -> Result<&Component> {
        let tags: Vec<&str> = self.components.iter().map(|c| c.tag.as_str()).collect();
        if let Some(want) = os_stream {
            return self
                .components
                .iter()
                .find(|c| c.tag == want)
                .ok_or_else(|| {
                    let os: Vec<&str> = tags
                        .iter()
                        .copied()
                        .filter(|t| OS_TAGS.contains(t))
                        .collect();
                    anyhow!(
                        "release {} has no OS stream '{want}' (OS tags it carries: {})",
                        self.version,
                        if os.is_empty() {
                            "none".into()
                        } else {
                            os.join(", ")
                        }
                    )
                });
        }
        for t in OS_TAGS {
            if let Some(c) = self.components.iter().find(|c| c.tag == t) {
                return Ok(c);
            }
        }
        bail!(
            "release {} has no OS image: none of the tags {} is in image-references ({} tags)",
            self.version,
            OS_TAGS.join(", "),
            tags.len()
        )
    }

    /// The stream JSON matching the chosen OS tag (`rhel-coreos-10` → `rhel-10`).
    pub fn stream_for(&self, os_tag: &str) -> Option<&serde_json::Value> {
        if let Some(suffix) = os_tag.strip_prefix("rhel-coreos-") {
            if let Some(s) = self.streams.get(&format!("rhel-{suffix}")) {
                return Some(s);
            }
        }
        self.stream.as_ref()
    }
}

/// The platforms a stream JSON lists for `arch`
/// (`architectures.<arch>.artifacts` keys, stream-metadata-go
/// `stream/stream.go`); `None` when it lists none for the arch.
pub fn stream_platforms(stream: &serde_json::Value, arch: &str) -> Option<Vec<String>> {
    let a = stream
        .get("architectures")?
        .get(arch)?
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
    let cm: serde_yaml::Value =
        serde_yaml::from_slice(raw).context("coreos-bootimages ConfigMap is not valid YAML")?;
    let data = cm.get("data");
    let stream = match data.and_then(|d| d.get("stream")).and_then(|s| s.as_str()) {
        Some(s) => Some(
            serde_json::from_str(s).context("coreos-bootimages data.stream is not valid JSON")?,
        ),
        None => None,
    };
    let mut streams = BTreeMap::new();
    if let Some(s) = data.and_then(|d| d.get("streams")).and_then(|s| s.as_str()) {
        let v: BTreeMap<String, serde_json::Value> = serde_json::from_str(s)
            .context("coreos-bootimages data.streams is not a JSON object")?;
        streams = v;
    }
    Ok((stream, streams))
}

/// The AMIs a stream pins for `arch`.
pub fn pinned_amis(stream: &serde_json::Value, arch: &str) -> Vec<PinnedAmi> {
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
    fn picks_os_tag_in_order() {
        let p = Payload::from_files(&files(REFS)).unwrap();
        assert_eq!(p.version, "4.18.0");
        let c = p.os_component(None).unwrap();
        assert_eq!(c.tag, "rhel-coreos");
        assert_eq!(c.machine_os.as_deref(), Some("418.94.1"));
        assert_eq!(
            p.os_component(Some("rhel-coreos-10")).unwrap().pullspec,
            "q.io/a/b@sha256:4"
        );
        let e = p.os_component(Some("nope")).unwrap_err().to_string();
        assert!(
            e.contains("rhel-coreos, machine-os-content, rhel-coreos-10") || e.contains("OS tags"),
            "{e}"
        );
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
        assert!(p
            .os_component(None)
            .unwrap_err()
            .to_string()
            .contains("has no OS image"));
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
            stream_platforms(&s, "x86_64").unwrap(),
            vec!["metal", "qemu", "nutanix"]
        );
        assert!(stream_platforms(&s, "aarch64").is_none());
        assert!(stream_platforms(&s, "ppc64le").is_none());
        assert!(stream_platforms(&s, "s390x").is_none());
    }

    #[test]
    fn reads_pinned_amis() {
        let s: serde_json::Value = serde_json::from_str(
            r#"{"architectures":{"x86_64":{"images":{"aws":{"regions":{"us-east-1":{"release":"1","image":"ami-1"}}}}}}}"#,
        )
        .unwrap();
        let a = pinned_amis(&s, "x86_64");
        assert_eq!(
            a,
            vec![PinnedAmi {
                region: "us-east-1".into(),
                image: "ami-1".into(),
                release: "1".into()
            }]
        );
        assert!(pinned_amis(&s, "aarch64").is_empty());
    }
}
