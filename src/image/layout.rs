//! Reading the index of local OCI layouts (directories and archives) so that
//! a release's component images can be found next to it by digest.
use anyhow::{Context, Result};
use serde_json::Value;
use std::io::Read;
use std::path::Path;

/// Annotation holding a manifest's tag in an OCI layout index.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";

fn manifests(index: &Value) -> Vec<(String, Option<String>)> {
    index
        .get("manifests")
        .and_then(|m| m.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|d| {
                    let digest = d.get("digest")?.as_str()?.to_string();
                    let tag = d
                        .get("annotations")
                        .and_then(|x| x.get(REF_NAME))
                        .and_then(|x| x.as_str())
                        .map(String::from);
                    Some((digest, tag))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn read_dir_index(dir: &Path) -> Result<Value> {
    let p = dir.join("index.json");
    let t = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_slice(&t).with_context(|| format!("{} is not valid JSON", p.display()))
}

/// Read `index.json` from an oci-archive (an uncompressed tar of a layout).
fn read_archive_index(file: &Path) -> Result<Value> {
    let f = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let mut ar = tar::Archive::new(f);
    for e in ar
        .entries_with_seek()
        .with_context(|| format!("reading archive {}", file.display()))?
    {
        let mut e =
            e.with_context(|| format!("archive {} is truncated or corrupt", file.display()))?;
        let path = e.path()?.into_owned();
        let name = path.to_string_lossy();
        if name == "index.json" || name == "./index.json" {
            let mut s = Vec::new();
            e.read_to_end(&mut s)
                .with_context(|| format!("archive {} is truncated or corrupt", file.display()))?;
            return serde_json::from_slice(&s)
                .with_context(|| format!("index.json in {} is not valid JSON", file.display()));
        }
    }
    anyhow::bail!("{} is not an OCI archive (no index.json)", file.display())
}

/// Tags and number of manifests in a layout directory (one read of index.json).
pub fn tags_in_dir(dir: &Path) -> Result<(Vec<String>, usize)> {
    let m = manifests(&read_dir_index(dir)?);
    let n = m.len();
    Ok((m.into_iter().filter_map(|(_, t)| t).collect(), n))
}

/// The tag under which `digest` is stored in a layout directory or archive
/// (`Ok(None)` when it is not there, or is there without a tag).
pub fn tag_for_digest(path: &Path, archive: bool, digest: &str) -> Result<Option<String>> {
    let index = if archive {
        read_archive_index(path)?
    } else {
        read_dir_index(path)?
    };
    Ok(manifests(&index)
        .into_iter()
        .find(|(d, t)| d == digest && t.is_some())
        .and_then(|(_, t)| t))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn finds_tags_by_digest() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("index.json"),
            r#"{"schemaVersion":2,"manifests":[{"digest":"sha256:aa","size":1,"mediaType":"x","annotations":{"org.opencontainers.image.ref.name":"release"}},{"digest":"sha256:bb","size":1,"mediaType":"x"}]}"#,
        )
        .unwrap();
        assert_eq!(
            tag_for_digest(d.path(), false, "sha256:aa")
                .unwrap()
                .as_deref(),
            Some("release")
        );
        assert_eq!(tag_for_digest(d.path(), false, "sha256:bb").unwrap(), None);
        assert_eq!(
            tags_in_dir(d.path()).unwrap(),
            (vec!["release".to_string()], 2)
        );
        // And the same through an archive.
        let ar = d.path().join("a.tar");
        let mut b = tar::Builder::new(std::fs::File::create(&ar).unwrap());
        b.append_path_with_name(d.path().join("index.json"), "index.json")
            .unwrap();
        b.finish().unwrap();
        drop(b);
        assert_eq!(
            tag_for_digest(&ar, true, "sha256:aa").unwrap().as_deref(),
            Some("release")
        );
    }
}
