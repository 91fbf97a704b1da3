//! Manifest lists and OCI image indexes (the `-multi` release payloads and
//! their component images; OCI image-spec `image-index.md`, Docker manifest
//! list v2.2): read the top-level manifest of a reference without the image
//! proxy (which would pick this host's arch by itself), choose the entry
//! for an architecture, and name that entry as a reference the proxy and
//! ostree-ext can open.
use super::access::FetchOptions;
use super::imageref::ImageRef;
use super::layout::REF_NAME;
use crate::util::arch::Arch;
use anyhow::{bail, Context, Result};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Media types of a list of per-platform manifests.
pub const MT_OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MT_DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// Largest index read (real ones are a few KiB).
const MAX_INDEX: u64 = 4 << 20;

/// The entry chosen from an index.
#[derive(Debug, Clone, PartialEq)]
pub struct Chosen {
    /// Digest of the index itself (what a release pins for a `-multi` image).
    pub index_digest: String,
    /// The chosen manifest's descriptor.
    pub digest: String,
    pub media_type: String,
    pub size: u64,
    /// `os/architecture[/variant]` of the entry.
    pub platform: String,
}

fn is_index(media_type: Option<&str>, doc: &Value) -> bool {
    match media_type.or_else(|| doc.get("mediaType").and_then(|m| m.as_str())) {
        Some(MT_OCI_INDEX) | Some(MT_DOCKER_LIST) => true,
        // An index without a mediaType (allowed by the OCI spec) has
        // `manifests` and no `layers`.
        None => doc.get("manifests").is_some() && doc.get("layers").is_none(),
        Some(_) => false,
    }
}

/// Pick the entry of `index` for `arch` (linux only): the entry whose
/// `architecture` is its OCI name (entries of arches this tool does not
/// know are listed in the error, never refused).
pub fn choose(index: &Value, index_digest: &str, arch: Arch, what: &str) -> Result<Chosen> {
    let want = arch.oci_name();
    let entries = index
        .get("manifests")
        .and_then(|m| m.as_array())
        .with_context(|| format!("{what}: image index {index_digest} has no `manifests` list"))?;
    let mut have = Vec::new();
    for e in entries {
        let p = e.get("platform");
        let a = p
            .and_then(|p| p.get("architecture"))
            .and_then(|a| a.as_str());
        let os = p
            .and_then(|p| p.get("os"))
            .and_then(|a| a.as_str())
            .unwrap_or("linux");
        let Some(a) = a else { continue };
        let variant = p
            .and_then(|p| p.get("variant"))
            .and_then(|v| v.as_str())
            .map(|v| format!("/{v}"))
            .unwrap_or_default();
        have.push(format!("{os}/{a}{variant}"));
        if a == want && os == "linux" {
            let digest = e.get("digest").and_then(|d| d.as_str()).with_context(|| {
                format!("{what}: the {a} entry of index {index_digest} has no digest")
            })?;
            return Ok(Chosen {
                index_digest: index_digest.to_string(),
                digest: digest.to_string(),
                media_type: e
                    .get("mediaType")
                    .and_then(|m| m.as_str())
                    .unwrap_or("application/vnd.oci.image.manifest.v1+json")
                    .to_string(),
                size: e.get("size").and_then(|s| s.as_u64()).unwrap_or(0),
                platform: format!("linux/{a}{variant}"),
            });
        }
    }
    bail!(
        "{what} is a manifest list ({index_digest}) without an entry for {arch} (linux/{want}); it has: {}; pass --arch with one of those",
        if have.is_empty() { "no platforms".to_string() } else { have.join(", ") }
    )
}

fn sha256(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(b)))
}

/// The descriptor a layout's `index.json` holds for `tag` (or its only one).
fn layout_entry(index: &Value, tag: Option<&str>, what: &str) -> Result<Option<Value>> {
    let m = index
        .get("manifests")
        .and_then(|m| m.as_array())
        .with_context(|| format!("{what}: index.json has no `manifests` list"))?;
    Ok(match tag {
        Some(t) => m
            .iter()
            .find(|d| {
                d.get("annotations")
                    .and_then(|a| a.get(REF_NAME))
                    .and_then(|x| x.as_str())
                    == Some(t)
            })
            .cloned(),
        None if m.len() == 1 => Some(m[0].clone()),
        None => None,
    })
}

fn blob_name(digest: &str) -> Result<String> {
    match digest.split_once(':') {
        Some((alg, hex)) if !alg.is_empty() && !hex.is_empty() && !hex.contains('/') => {
            Ok(format!("blobs/{alg}/{hex}"))
        }
        _ => bail!("'{digest}' is not a digest"),
    }
}

/// Read one file of an oci-archive (an uncompressed tar of a layout).
fn archive_file(archive: &Path, name: &str, limit: u64) -> Result<Option<Vec<u8>>> {
    let f =
        std::fs::File::open(archive).with_context(|| format!("opening {}", archive.display()))?;
    let mut ar = tar::Archive::new(f);
    for e in ar.entries_with_seek()? {
        let e =
            e.with_context(|| format!("archive {} is truncated or corrupt", archive.display()))?;
        let p = e.path()?.into_owned();
        let p = p.to_string_lossy();
        if p.trim_start_matches("./") == name {
            let mut v = Vec::new();
            e.take(limit).read_to_end(&mut v)?;
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// The top-level manifest of `r` when it is an index: `(digest, document)`.
/// `None` for a single image (or a reference the layout does not hold:
/// opening it reports that in the usual way).
/// `scratch`: this run's private temporary directory (skopeo's files).
pub fn top_index(
    r: &ImageRef,
    opts: &FetchOptions,
    scratch: &Path,
) -> Result<Option<(String, Value)>> {
    let what = r.to_string();
    match r {
        ImageRef::Oci { path, tag } => {
            let p = path.join("index.json");
            let Ok(raw) = std::fs::read(&p) else {
                return Ok(None);
            };
            let index: Value = serde_json::from_slice(&raw)
                .with_context(|| format!("{} is not valid JSON", p.display()))?;
            let read = |name: &str| -> Result<Option<Vec<u8>>> {
                match std::fs::File::open(path.join(name)) {
                    Ok(f) => {
                        let mut v = Vec::new();
                        f.take(MAX_INDEX).read_to_end(&mut v)?;
                        Ok(Some(v))
                    }
                    Err(_) => Ok(None),
                }
            };
            layout_index(&index, tag.as_deref(), &what, &read)
        }
        ImageRef::OciArchive { path, tag } => {
            if !path.is_file() {
                return Ok(None);
            }
            let Some(raw) = archive_file(path, "index.json", MAX_INDEX)? else {
                return Ok(None);
            };
            let index: Value = serde_json::from_slice(&raw)
                .with_context(|| format!("index.json in {} is not valid JSON", path.display()))?;
            let read = |name: &str| archive_file(path, name, MAX_INDEX);
            layout_index(&index, tag.as_deref(), &what, &read)
        }
        ImageRef::Docker(_) => {
            let raw = opts.raw_manifest(r, scratch)?;
            let doc: Value = match serde_json::from_slice(&raw) {
                Ok(v) => v,
                Err(_) => return Ok(None),
            };
            Ok(is_index(None, &doc).then(|| (sha256(&raw), doc)))
        }
        ImageRef::DockerArchive { .. } => Ok(None),
    }
}

/// The index a layout's `tag` names, read through `read` (blob by path).
fn layout_index(
    index: &Value,
    tag: Option<&str>,
    what: &str,
    read: &dyn Fn(&str) -> Result<Option<Vec<u8>>>,
) -> Result<Option<(String, Value)>> {
    let Some(d) = layout_entry(index, tag, what)? else {
        return Ok(None);
    };
    let mt = d.get("mediaType").and_then(|m| m.as_str());
    if !matches!(mt, Some(MT_OCI_INDEX) | Some(MT_DOCKER_LIST)) {
        return Ok(None);
    }
    let digest = d
        .get("digest")
        .and_then(|x| x.as_str())
        .unwrap_or_default()
        .to_string();
    let raw = read(&blob_name(&digest)?)?
        .with_context(|| format!("{what}: the layout has no blob {digest}"))?;
    // The digest is what a signature names: it must be the bytes' (a blob
    // replaced under its old name would otherwise pass for the signed list).
    let got = sha256(&raw);
    if got != digest {
        bail!("{what}: the layout's index blob {digest} holds other bytes (their digest is {got}): the layout was changed after it was written; copy it again");
    }
    let doc: Value = serde_json::from_slice(&raw)
        .with_context(|| format!("{what}: index {digest} is not valid JSON"))?;
    Ok(Some((digest, doc)))
}

/// A reference to the chosen entry of the index at `r`, openable by the
/// image proxy and ostree-ext. Registries take `repo@digest`; a local layout
/// gets a one-entry layout under `scratch` whose blobs are the original's
/// (an oci-archive is unpacked there first, as containers/image does).
pub fn entry_ref(r: &ImageRef, c: &Chosen, scratch: &Path) -> Result<ImageRef> {
    let layout_dir: PathBuf = match r {
        ImageRef::Docker(d) => return Ok(ImageRef::Docker(d.with_digest(&c.digest))),
        ImageRef::DockerArchive { .. } => bail!("{r}: a docker-archive holds no manifest list"),
        ImageRef::Oci { path, .. } => {
            std::fs::canonicalize(path).with_context(|| format!("{}", path.display()))?
        }
        ImageRef::OciArchive { path, .. } => {
            let id: String = sha256(path.to_string_lossy().as_bytes())
                .chars()
                .skip(7)
                .take(12)
                .collect();
            let dir = scratch.join(format!("unpacked-{id}"));
            if !dir.join("index.json").is_file() {
                std::fs::create_dir_all(&dir)?;
                let f = std::fs::File::open(path)
                    .with_context(|| format!("opening {}", path.display()))?;
                tar::Archive::new(f).unpack(&dir).with_context(|| {
                    format!("unpacking {} into {}", path.display(), dir.display())
                })?;
            }
            dir
        }
    };
    let hex: String = c
        .digest
        .trim_start_matches("sha256:")
        .chars()
        .take(12)
        .collect();
    let dir = scratch.join(format!("entry-{hex}"));
    if !dir.exists() {
        std::fs::create_dir_all(&dir)?;
        std::os::unix::fs::symlink(layout_dir.join("blobs"), dir.join("blobs"))?;
        std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
        let index = serde_json::json!({
            "schemaVersion": 2,
            "manifests": [{
                "mediaType": c.media_type,
                "digest": c.digest,
                "size": c.size,
                "annotations": {REF_NAME: "entry"},
            }],
        });
        std::fs::write(dir.join("index.json"), serde_json::to_vec(&index)?)?;
    }
    Ok(ImageRef::Oci {
        path: dir,
        tag: Some("entry".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    fn idx() -> Value {
        json!({"schemaVersion": 2, "mediaType": MT_OCI_INDEX, "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:aa", "size": 10,
             "platform": {"architecture": "amd64", "os": "linux"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:bb", "size": 11,
             "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}}]})
    }
    #[test]
    fn chooses_by_coreos_arch() {
        let c = choose(&idx(), "sha256:ii", Arch::Aarch64, "release").unwrap();
        assert_eq!(c.digest, "sha256:bb");
        assert_eq!(c.platform, "linux/arm64/v8");
        assert_eq!(c.index_digest, "sha256:ii");
        assert_eq!(
            choose(&idx(), "sha256:ii", Arch::X86_64, "r").unwrap().size,
            10
        );
        let e = format!(
            "{:#}",
            choose(&idx(), "sha256:ii", Arch::S390x, "release X").unwrap_err()
        );
        assert!(
            e.contains("release X")
                && e.contains("linux/amd64, linux/arm64/v8")
                && e.contains("--arch"),
            "{e}"
        );
        // An arch this tool does not know is chosen like any other.
        let mut i = idx();
        i["manifests"][1]["platform"] = json!({"architecture": "riscv64", "os": "linux"});
        let c = choose(&i, "sha256:ii", Arch::RISCV64, "r").unwrap();
        assert_eq!(
            (c.digest.as_str(), c.platform.as_str()),
            ("sha256:bb", "linux/riscv64")
        );
    }
    #[test]
    fn tells_index_from_manifest() {
        assert!(is_index(None, &idx()));
        assert!(is_index(None, &json!({"manifests": []})));
        assert!(!is_index(
            None,
            &json!({"schemaVersion": 2, "layers": [], "config": {}})
        ));
        assert!(is_index(Some(MT_DOCKER_LIST), &json!({})));
    }
    #[test]
    fn layout_entry_for_an_index() {
        let d = tempfile::tempdir().unwrap();
        let raw = serde_json::to_vec(&idx()).unwrap();
        let digest = sha256(&raw);
        std::fs::create_dir_all(d.path().join("blobs/sha256")).unwrap();
        std::fs::write(d.path().join(blob_name(&digest).unwrap()), &raw).unwrap();
        std::fs::write(
            d.path().join("index.json"),
            serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": [
                {"mediaType": MT_OCI_INDEX, "digest": digest, "size": raw.len(), "annotations": {REF_NAME: "multi"}},
                {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:cc", "size": 1, "annotations": {REF_NAME: "single"}}]})).unwrap(),
        ).unwrap();
        let o = FetchOptions::default();
        let r = ImageRef::Oci {
            path: d.path().into(),
            tag: Some("multi".into()),
        };
        let scratch = tempfile::tempdir().unwrap();
        let (dg, doc) = top_index(&r, &o, scratch.path()).unwrap().unwrap();
        assert_eq!(dg, digest);
        let c = choose(&doc, &dg, Arch::Aarch64, "r").unwrap();
        let e = entry_ref(&r, &c, scratch.path()).unwrap();
        let ImageRef::Oci { path, tag } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(tag.as_deref(), Some("entry"));
        let i: Value =
            serde_json::from_slice(&std::fs::read(path.join("index.json")).unwrap()).unwrap();
        assert_eq!(i["manifests"][0]["digest"], "sha256:bb");
        assert!(path.join("blobs/sha256").is_dir());
        let single = ImageRef::Oci {
            path: d.path().into(),
            tag: Some("single".into()),
        };
        assert!(top_index(&single, &o, scratch.path()).unwrap().is_none());
    }
}
