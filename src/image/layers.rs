//! Reading container layers safely: decompression by magic number, path
//! checks that reject `..`, absolute paths and escaping links, whiteouts, and
//! extraction that never writes through a symlink.
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};

/// Open a layer blob as a (decompressed) tar stream.
pub fn open_layer(blob: &Path) -> Result<tar::Archive<Box<dyn Read>>> {
    let f =
        std::fs::File::open(blob).with_context(|| format!("opening layer {}", blob.display()))?;
    let mut r = BufReader::with_capacity(1 << 20, f);
    let magic = r
        .fill_buf()?
        .get(..4)
        .map(|m| m.to_vec())
        .unwrap_or_default();
    let inner: Box<dyn Read> = if magic.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::bufread::MultiGzDecoder::new(r))
    } else if magic == [0x28, 0xb5, 0x2f, 0xfd] {
        Box::new(zstd::stream::read::Decoder::with_buffer(r)?)
    } else {
        Box::new(r)
    };
    Ok(tar::Archive::new(inner))
}

/// Normalise a path from a layer: strip `./`, reject absolute paths and `..`.
/// `Ok(None)` for the layer root itself.
pub fn safe_rel_path(raw: &Path) -> Result<Option<PathBuf>> {
    let mut out = PathBuf::new();
    for c in raw.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                bail!("absolute path '{}' in layer", raw.display())
            }
            Component::ParentDir => bail!("path '{}' in layer climbs out with '..'", raw.display()),
        }
    }
    Ok(if out.as_os_str().is_empty() {
        None
    } else {
        Some(out)
    })
}

/// Check that a link target stays inside the root, resolved lexically from
/// the link's own directory (absolute targets are refused).
fn check_link_target(link: &Path, target: &Path, hard: bool) -> Result<()> {
    if target.is_absolute() {
        if hard {
            return Ok(()); // hard link targets are archive paths; checked by safe_rel_path
        }
        bail!(
            "symlink '{}' points to absolute path '{}', outside the extraction root",
            link.display(),
            target.display()
        );
    }
    let mut depth: i64 = if hard {
        0
    } else {
        link.components().count() as i64 - 1
    };
    for c in target.components() {
        match c {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            bail!(
                "link '{}' points to '{}', outside the extraction root",
                link.display(),
                target.display()
            );
        }
    }
    Ok(())
}

/// Read the regular files under `prefix` of a layer into memory (at most
/// `max_size` bytes each). Every entry's path is checked.
pub fn read_files(blob: &Path, prefix: &str, max_size: u64) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut ar = open_layer(blob)?;
    let mut out = BTreeMap::new();
    for e in ar.entries().context("reading layer")? {
        let mut e = e.context("layer is truncated or not a tar archive")?;
        let raw = e.path()?.into_owned();
        let Some(p) = safe_rel_path(&raw)? else {
            continue;
        };
        let name = p.to_string_lossy().into_owned();
        if !name.starts_with(prefix) {
            continue;
        }
        if !e.header().entry_type().is_file() {
            continue;
        }
        if e.size() > max_size {
            bail!(
                "{name} in layer is {} bytes, more than the {max_size} allowed",
                e.size()
            );
        }
        let mut buf = Vec::with_capacity(e.size() as usize);
        e.read_to_end(&mut buf).context("layer is truncated")?;
        out.insert(name, buf);
    }
    Ok(out)
}

/// Refuse to create anything under a symlink: walk `rel` from `root`.
fn ensure_no_symlink_parents(root: &Path, rel: &Path) -> Result<()> {
    let mut cur = root.to_path_buf();
    if let Some(parent) = rel.parent() {
        for c in parent.components() {
            cur.push(c);
            match std::fs::symlink_metadata(&cur) {
                Ok(m) if m.file_type().is_symlink() => bail!(
                    "layer entry '{}' would be written through symlink '{}'",
                    rel.display(),
                    cur.display()
                ),
                Ok(m) if !m.is_dir() => {
                    std::fs::remove_file(&cur)?;
                    std::fs::create_dir(&cur)?;
                }
                Ok(_) => {}
                Err(_) => std::fs::create_dir(&cur)
                    .with_context(|| format!("creating {}", cur.display()))?,
            }
        }
    }
    Ok(())
}

fn remove_any(p: &Path) -> Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p)?,
        Ok(_) => std::fs::remove_file(p)?,
        Err(_) => {}
    }
    Ok(())
}

/// Extract the entries of a layer for which `keep(path)` is true into `root`,
/// applying whiteouts. Every entry of the layer is checked, kept or not.
pub fn extract(blob: &Path, root: &Path, keep: &dyn Fn(&Path) -> bool) -> Result<u64> {
    let mut ar = open_layer(blob)?;
    ar.set_preserve_permissions(true);
    ar.set_unpack_xattrs(false);
    let mut count = 0;
    for e in ar.entries().context("reading layer")? {
        let mut e = e.context("layer is truncated or not a tar archive")?;
        let raw = e.path()?.into_owned();
        let Some(rel) = safe_rel_path(&raw)? else {
            continue;
        };
        let kind = e.header().entry_type();
        if let Some(target) = e.link_name()? {
            let hard = kind.is_hard_link();
            check_link_target(&rel, &target, hard)?;
            if hard {
                safe_rel_path(&target)?;
            }
        }
        let fname = rel
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(victim) = fname.strip_prefix(".wh.") {
            let dir = rel.parent().unwrap_or(Path::new(""));
            if !keep(dir) && !keep(&dir.join(victim)) {
                continue;
            }
            ensure_no_symlink_parents(root, &rel)?;
            if victim == ".wh..opq" {
                let d = root.join(dir);
                if d.is_dir() {
                    for c in std::fs::read_dir(&d)? {
                        remove_any(&c?.path())?;
                    }
                }
            } else {
                remove_any(&root.join(dir).join(victim))?;
            }
            continue;
        }
        if !keep(&rel) {
            continue;
        }
        ensure_no_symlink_parents(root, &rel)?;
        let dest = root.join(&rel);
        if kind.is_dir() {
            if std::fs::symlink_metadata(&dest)
                .map(|m| !m.is_dir())
                .unwrap_or(false)
            {
                remove_any(&dest)?;
            }
            std::fs::create_dir_all(&dest)?;
            continue;
        }
        remove_any(&dest)?;
        if kind.is_hard_link() {
            let target = safe_rel_path(&e.link_name()?.unwrap_or_default())?.unwrap_or_default();
            std::fs::hard_link(root.join(&target), &dest)
                .with_context(|| format!("hard link {} -> {}", rel.display(), target.display()))?;
        } else if kind.is_file() || kind.is_symlink() {
            e.unpack(&dest)
                .with_context(|| format!("extracting {}", rel.display()))?;
        } else {
            // devices, fifos: not needed for what we extract
            continue;
        }
        count += 1;
    }
    Ok(count)
}

/// One tar entry for [`raw_tar`]: path, kind, contents (link target for links).
pub type RawEntry<'a> = (&'a str, tar::EntryType, &'a str);

/// Tar bytes with the names written exactly as given, unsafe ones included,
/// so tests can feed hostile layers to the readers (names < 100 bytes).
#[doc(hidden)]
pub fn raw_tar(entries: &[RawEntry]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, kind, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(*kind);
        h.set_mode(0o644);
        h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
        let body: &[u8] = if kind.is_symlink() || kind.is_hard_link() {
            h.as_old_mut().linkname[..data.len()].copy_from_slice(data.as_bytes());
            &[]
        } else {
            data.as_bytes()
        };
        h.set_size(body.len() as u64);
        h.set_cksum();
        b.append(&h, body).expect("writing to memory");
    }
    b.into_inner().expect("writing to memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(entries: &[RawEntry]) -> tempfile::NamedTempFile {
        use std::io::Write;
        let f = tempfile::NamedTempFile::new().unwrap();
        let mut gz = flate2::write::GzEncoder::new(
            std::fs::File::create(f.path()).unwrap(),
            flate2::Compression::fast(),
        );
        gz.write_all(&raw_tar(entries)).unwrap();
        gz.finish().unwrap();
        f
    }

    #[test]
    fn rejects_parent_and_absolute_paths() {
        let root = tempfile::tempdir().unwrap();
        for bad in ["srv/../../escape", "/etc/escape"] {
            let l = layer(&[(bad, tar::EntryType::Regular, "x")]);
            let err = extract(l.path(), root.path(), &|_| true).unwrap_err();
            assert!(format!("{err:#}").contains("layer"), "{err:#}");
        }
        assert!(!root.path().parent().unwrap().join("escape").exists());
    }

    #[test]
    fn rejects_escaping_symlinks_and_writes_through_links() {
        let root = tempfile::tempdir().unwrap();
        let l = layer(&[("srv/link", tar::EntryType::Symlink, "../../../tmp")]);
        assert!(extract(l.path(), root.path(), &|_| true).is_err());
        let l = layer(&[("srv/abs", tar::EntryType::Symlink, "/etc")]);
        assert!(extract(l.path(), root.path(), &|_| true).is_err());
        // A link that stays inside is fine, but nothing is written through it.
        let outside = tempfile::tempdir().unwrap();
        let l = layer(&[
            ("srv/in", tar::EntryType::Symlink, "."),
            ("srv/in/f", tar::EntryType::Regular, "x"),
        ]);
        let err = extract(l.path(), root.path(), &|_| true).unwrap_err();
        assert!(format!("{err:#}").contains("through symlink"), "{err:#}");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn extracts_and_applies_whiteouts() {
        let root = tempfile::tempdir().unwrap();
        let l = layer(&[
            ("srv/repo/a", tar::EntryType::Regular, "A"),
            ("srv/repo/b", tar::EntryType::Regular, "B"),
            ("other/x", tar::EntryType::Regular, "X"),
        ]);
        let keep = |p: &Path| p.starts_with("srv");
        extract(l.path(), root.path(), &keep).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.path().join("srv/repo/a")).unwrap(),
            "A"
        );
        assert!(!root.path().join("other").exists());
        let l2 = layer(&[("srv/repo/.wh.a", tar::EntryType::Regular, "")]);
        extract(l2.path(), root.path(), &keep).unwrap();
        assert!(!root.path().join("srv/repo/a").exists());
        assert!(root.path().join("srv/repo/b").exists());
        let files = read_files(l.path(), "srv/", 10).unwrap();
        assert_eq!(files.len(), 2);
    }
}
