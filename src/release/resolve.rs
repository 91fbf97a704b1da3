//! From a release reference to the OS image: read the payload from the last
//! layer, pick the OS tag, and find the OS image by digest — through IDMS
//! mirrors first, then next to the release itself (same repository or same
//! local layout, as `oc adm release mirror` leaves it), then at its pullspec.
use super::osimages::{self, Found};
use super::{pinned_amis, Component, Payload, PinnedAmi, MANIFESTS_DIR};
use crate::image::fetch::{Fetcher, Image};
use crate::image::idms::Mirrors;
use crate::image::imageref::{DockerRef, ImageRef};
use crate::image::{layers, layout};
use crate::oscontainer::{detect_format, OsFormat};
use crate::util::arch::Arch;
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::path::Path;

/// Largest manifest file read from the release layer.
const MAX_MANIFEST_FILE: u64 = 64 << 20;

/// The resolved release and OS image.
#[derive(Debug, Clone, Serialize)]
pub struct Resolved {
    pub release_ref: String,
    pub release_digest: String,
    pub release_version: String,
    pub arch: Arch,
    pub os_tag: String,
    /// The OS stream (`rhel-9`, `rhel-10`; `None`: OKD's one stream or unknown).
    pub os_stream_class: Option<String>,
    /// Why this OS image was chosen (said by the run).
    pub os_choice: String,
    /// Every image found under an OS tag of the release, as the MCO finds
    /// them, with its stream class and whether it boots.
    pub os_images: Vec<Found>,
    /// The pullspec the release names.
    pub os_pullspec: String,
    /// Where the OS image was actually read from.
    pub os_source: String,
    pub os_digest: String,
    pub os_format: OsFormat,
    pub os_labels: std::collections::BTreeMap<String, String>,
    /// The release named a manifest list: its digest and the entry chosen.
    pub release_index: Option<IndexChoice>,
    /// The OS pullspec named a manifest list: its digest and the entry chosen.
    pub os_index: Option<IndexChoice>,
    /// Ordinary container layers on top of the ostree commit (a derived
    /// image, ostree-ext's layout: layers after `ostree.final-diffid`);
    /// `None` for legacy images and when it cannot be told.
    pub os_derived_layers: Option<usize>,
    /// `machine-os` of the tag's build versions annotation.
    pub os_release_annotation: Option<String>,
    pub pinned_amis: Vec<PinnedAmi>,
    /// The stream JSON pinned by the release for the chosen OS (if any).
    #[serde(skip)]
    pub stream: Option<serde_json::Value>,
    #[serde(skip)]
    pub payload: Option<Payload>,
}

/// A manifest list resolved to one of its entries.
#[derive(Debug, Clone, Serialize)]
pub struct IndexChoice {
    /// Digest of the list itself.
    pub index_digest: String,
    /// The entry chosen for the arch.
    pub digest: String,
    pub platform: String,
}

impl From<&crate::image::index::Chosen> for IndexChoice {
    fn from(c: &crate::image::index::Chosen) -> Self {
        IndexChoice {
            index_digest: c.index_digest.clone(),
            digest: c.digest.clone(),
            platform: c.platform.clone(),
        }
    }
}

/// Layers an ostree-native image carries on top of its ostree commit: those
/// after the layer whose diff id is the `ostree.final-diffid` label
/// (ostree-ext `container/store.rs`, `parse_manifest_layout`).
pub fn derived_layers(img: &Image) -> Option<usize> {
    let labels = img.labels();
    let final_diffid = labels.get("ostree.final-diffid")?;
    let ids = img.config.rootfs().diff_ids();
    let i = ids.iter().position(|d| d == final_diffid)?;
    Some(img.manifest.layers().len().saturating_sub(i + 1))
}

/// What is done with the release's manifest before anything it names is
/// read (its signature checked): called with the opened release.
pub type OnRelease<'a> = &'a mut (dyn FnMut(&Image) -> Result<()> + Send);

/// Open the release, hand it to `on_release` (which may refuse it), and
/// only then read its payload.
pub async fn read_release(
    fetcher: &Fetcher,
    r: &ImageRef,
    tmp: &Path,
    on_release: OnRelease<'_>,
) -> Result<(Image, Payload)> {
    let img = fetcher
        .open(r)
        .await
        .with_context(|| "reading the release image".to_string())?;
    if let Err(e) = on_release(&img) {
        fetcher.close(img).await.ok();
        return Err(e);
    }
    let last = img
        .manifest
        .layers()
        .last()
        .cloned()
        .ok_or_else(|| anyhow!("{r} is not a release image: it has no layers"))?;
    let blob = tmp.join("release-layer");
    fetcher.fetch_blob_to(&img, &last, &blob).await?;
    let files = layers::read_files(&blob, MANIFESTS_DIR, MAX_MANIFEST_FILE)
        .with_context(|| format!("{r}: reading release-manifests/ from its last layer"))?;
    std::fs::remove_file(&blob).ok();
    let payload = Payload::from_files(&files).with_context(|| format!("{r}"))?;
    Ok((img, payload))
}

/// The places to look for a component, in order.
fn candidates(
    release: &ImageRef,
    comp: &DockerRef,
    mirrors: Option<&Mirrors>,
) -> Result<Vec<ImageRef>> {
    let digest = comp.digest.clone();
    let mut out = Vec::new();
    let mut contact_source = true;
    if let Some(m) = mirrors {
        let (c, src) = m.candidates(comp);
        out.extend(c.into_iter().map(ImageRef::Docker));
        contact_source = src;
    }
    if let Some(d) = &digest {
        match release {
            ImageRef::Docker(rel) => out.push(ImageRef::Docker(rel.with_digest(d))),
            ImageRef::Oci { path, .. } => {
                if let Some(tag) = layout::tag_for_digest(path, false, d)? {
                    out.push(ImageRef::Oci {
                        path: path.clone(),
                        tag: Some(tag),
                    });
                }
            }
            ImageRef::OciArchive { path, .. } => {
                if let Some(tag) = layout::tag_for_digest(path, true, d)? {
                    out.push(ImageRef::OciArchive {
                        path: path.clone(),
                        tag: Some(tag),
                    });
                }
            }
            ImageRef::DockerArchive { .. } => {}
        }
    }
    if contact_source {
        out.push(ImageRef::Docker(comp.clone()));
    }
    let mut dedup = Vec::new();
    for c in out {
        if !dedup.contains(&c) {
            dedup.push(c);
        }
    }
    Ok(dedup)
}

/// Find and open the OS image of a release.
pub async fn open_component(
    fetcher: &Fetcher,
    release: &ImageRef,
    comp: &Component,
    mirrors: Option<&Mirrors>,
    arch: Arch,
) -> Result<Image> {
    let pull = DockerRef::parse(&comp.pullspec)
        .with_context(|| format!("release tag {} has an invalid pullspec", comp.tag))?;
    let Some(want) = pull.digest.clone() else {
        bail!("release tag {} names {} by tag, not by digest: a release must pin its images by digest", comp.tag, comp.pullspec);
    };
    let mut tried = Vec::new();
    for cand in candidates(release, &pull, mirrors)? {
        match fetcher.open_arch(&cand, arch).await {
            Ok(img) => {
                // A `-multi` payload pins the list; the entry for the arch is opened.
                let pinned_list = img.index.as_ref().is_some_and(|c| c.index_digest == want);
                if img.digest != want && !pinned_list {
                    tried.push(format!(
                        "{cand}: has digest {} instead of {want}",
                        img.digest
                    ));
                    continue;
                }
                return Ok(img);
            }
            Err(e) => {
                tracing::debug!("OS image not at {cand}: {e:#}");
                tried.push(format!("{e:#}"));
            }
        }
    }
    bail!(
        "OS image {} (release tag {}) was not found; tried: {}",
        comp.pullspec,
        comp.tag,
        tried.join("; ")
    )
}

/// A release opened once: its payload read and every OS image it names
/// opened and classified (as the MCO finds them), so that one read of the
/// release serves each OS stream chosen from it ([`Opened::choose`]).
pub struct Opened {
    release: Image,
    release_ref: String,
    payload: Payload,
    arch: Arch,
    candidates: Vec<Component>,
    found: Vec<Found>,
    images: Vec<Option<Image>>,
}

/// Open the release and every OS image candidate for `os_stream` (all of
/// them for `None`); `on_release` sees the release before its payload is
/// read ([`read_release`]).
pub async fn open(
    fetcher: &Fetcher,
    r: &ImageRef,
    mirrors: Option<&Mirrors>,
    os_stream: Option<&str>,
    tmp: &Path,
    on_release: OnRelease<'_>,
) -> Result<Opened> {
    let (rel, payload) = read_release(fetcher, r, tmp, on_release).await?;
    let arch = match rel.arch() {
        Ok(a) => a,
        Err(e) => {
            fetcher.close(rel).await.ok();
            return Err(e.context(format!("{r}: reading the release's architecture")));
        }
    };
    if let Some(want) = fetcher.opts.arch {
        if rel.index.is_none() && arch != want {
            fetcher.close(rel).await.ok();
            bail!(
                "{r} is a single-architecture release for {arch}, not {want}: drop --arch {want}, or use the {want} (or -multi) release image"
            );
        }
    }
    // Open every OS candidate (its labels say what it is), as the MCO does.
    let candidates: Vec<Component> = payload
        .os_candidates(os_stream)
        .into_iter()
        .cloned()
        .collect();
    let mut found = Vec::new();
    let mut images = Vec::new();
    for c in &candidates {
        match open_component(fetcher, r, c, mirrors, arch).await {
            Ok(img) => {
                let labels = img.labels();
                found.push(Found::classify(
                    &c.tag,
                    &c.pullspec,
                    Ok((img.digest.as_str(), &labels)),
                ));
                images.push(Some(img));
            }
            Err(e) => {
                found.push(Found::classify(&c.tag, &c.pullspec, Err(format!("{e:#}"))));
                images.push(None);
            }
        }
    }
    Ok(Opened {
        release: rel,
        release_ref: r.to_string(),
        payload,
        arch,
        candidates,
        found,
        images,
    })
}

impl Opened {
    /// Every image found under an OS tag of the release.
    pub fn found(&self) -> &[Found] {
        &self.found
    }

    /// The release's version.
    pub fn version(&self) -> &str {
        &self.payload.version
    }

    /// The OS image of `os_stream` (the MCO's choice for `None`), resolved,
    /// and that image, open.
    pub fn choose(&self, os_stream: Option<&str>) -> Result<(Resolved, &Image)> {
        let choice = osimages::choose(&self.found, &self.payload.version, os_stream)?;
        let os = self.images[choice.index]
            .as_ref()
            .context("the chosen OS image is open")?;
        let comp = &self.candidates[choice.index];
        let stream_class = self.found[choice.index].stream_class.clone();
        let labels = os.labels();
        let format = detect_format(
            &labels,
            &format!("OS image {} (release tag {})", comp.pullspec, comp.tag),
        )?;
        let stream = self.payload.stream_for(stream_class.as_deref()).cloned();
        let amis = stream
            .as_ref()
            .map(|s| pinned_amis(s, self.arch))
            .unwrap_or_default();
        let resolved = Resolved {
            release_ref: self.release_ref.clone(),
            release_digest: self.release.digest.clone(),
            release_version: self.payload.version.clone(),
            arch: self.arch,
            os_tag: comp.tag.clone(),
            os_stream_class: stream_class,
            os_choice: choice.reason,
            os_images: self.found.clone(),
            os_pullspec: comp.pullspec.clone(),
            os_source: os.reference.to_string(),
            os_digest: os.digest.clone(),
            os_format: format,
            os_labels: labels,
            release_index: self.release.index.as_ref().map(IndexChoice::from),
            os_index: os.index.as_ref().map(IndexChoice::from),
            os_derived_layers: (format == OsFormat::OstreeNative)
                .then(|| derived_layers(os))
                .flatten(),
            os_release_annotation: comp.machine_os.clone(),
            pinned_amis: amis,
            stream,
            payload: Some(self.payload.clone()),
        };
        Ok((resolved, os))
    }

    /// Close the release and every OS image opened.
    pub async fn close(self, fetcher: &Fetcher) {
        for img in self.images.into_iter().flatten() {
            fetcher.close(img).await.ok();
        }
        fetcher.close(self.release).await.ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    #[test]
    fn candidate_order() {
        let rel = ImageRef::parse("127.0.0.1:5000/ocp/release:4.18").unwrap();
        let comp = DockerRef::parse(&format!(
            "quay.io/openshift-release-dev/ocp-v4.0-art-dev@{D}"
        ))
        .unwrap();
        let m = Mirrors::parse("kind: ImageDigestMirrorSet\nspec:\n  imageDigestMirrors:\n  - source: quay.io/openshift-release-dev/ocp-v4.0-art-dev\n    mirrors: [mirror.local/art]\n").unwrap();
        let c: Vec<String> = candidates(&rel, &comp, Some(&m))
            .unwrap()
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(
            c,
            vec![
                format!("docker://mirror.local/art@{D}"),
                format!("docker://127.0.0.1:5000/ocp/release@{D}"),
                format!("docker://quay.io/openshift-release-dev/ocp-v4.0-art-dev@{D}"),
            ]
        );
    }
}
