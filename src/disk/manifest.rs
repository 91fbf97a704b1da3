//! The content manifest of a build (docs/contract.md §9): per filesystem
//! every entry's path, type, mode, owner, size, time, sha256, link target
//! and extended attributes (SELinux labels), and per disk image every
//! partition's place and sha256, naming the filesystem it holds. `generate`
//! writes it beside the disks; `verify` reads it to name the first
//! differing partition and paths of a disk, and `verify --manifest-only`
//! checks disks against it without rebuilding.
//!
//! In: a mounted filesystem (walked read-only, one filesystem, in byte
//! order), a disk's bytes. Out: `<name>-<version>-contents.<arch>.json.gz`
//! (gzip with no name or time: the same content gives the same bytes).
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The format's version (bumped when a field changes meaning).
pub const VERSION: u32 = 1;

/// The key of the root filesystem in [`Manifest::filesystems`].
pub const ROOT_KEY: &str = "root";

/// The key of the boot filesystem of boot setting `key`.
pub fn boot_key(key: &str) -> String {
    format!("boot-{key}")
}

/// One filesystem entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// From the filesystem's root, starting with `/`.
    pub path: String,
    /// `dir`, `file`, `symlink`, `char`, `block`, `fifo` or `socket`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Permission bits with setuid, setgid and sticky, in octal.
    pub mode: String,
    pub uid: u32,
    pub gid: u32,
    /// Bytes (regular files and symlinks).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub size: u64,
    /// Seconds since the epoch.
    pub mtime: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A symlink's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// A device's major:minor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdev: Option<String>,
    /// Name → value: the text when it is UTF-8 (SELinux labels keep their
    /// trailing NUL as `\u0000`), else `hex:` and the bytes in hex.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub xattrs: BTreeMap<String, String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One filesystem's entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filesystem {
    /// `xfs`, `ext4`, …
    pub fs: String,
    pub entries: Vec<Entry>,
}

/// One partition of a disk image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    /// Its GPT name.
    pub label: String,
    /// Byte offset and length in the disk.
    pub start: u64,
    pub size: u64,
    /// The [`blocks_digest`] of its first `hashed` bytes: the whole partition, except
    /// a root partition larger than its filesystem (a cloud disk's: the
    /// rest is free space the first boot grows the filesystem into).
    pub hashed: u64,
    pub digest: String,
    /// The key in [`Manifest::filesystems`] of the filesystem it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<String>,
}

/// A disk image: its file and partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// The artifact's file name (as in meta.json).
    pub file: String,
    /// The disk's size and sha256, uncompressed and unencoded.
    pub size: u64,
    pub partitions: Vec<Partition>,
}

/// A build's content manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    /// Filesystems by key (`root`, `boot-<boot setting key>`).
    pub filesystems: BTreeMap<String, Filesystem>,
    /// Disk images by meta.json key (`metal`, `qemu`, …).
    pub images: BTreeMap<String, Image>,
}

impl Manifest {
    pub fn new() -> Manifest {
        Manifest {
            version: VERSION,
            filesystems: BTreeMap::new(),
            images: BTreeMap::new(),
        }
    }

    /// Read a manifest file (gzip).
    pub fn read(path: &Path) -> Result<Manifest> {
        let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(f)
            .read_to_end(&mut text)
            .with_context(|| format!("reading {} (gzip)", path.display()))?;
        let m: Manifest =
            serde_json::from_slice(&text).with_context(|| format!("parsing {}", path.display()))?;
        if m.version != VERSION {
            bail!(
                "{}: content manifest version {} (this bootimage-gen reads version {VERSION})",
                path.display(),
                m.version
            );
        }
        Ok(m)
    }

    /// Its file bytes: compact JSON, gzip'd without a name
    /// or time.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let json = serde_json::to_vec(self)?;
        let mut gz = flate2::GzBuilder::new()
            .mtime(0)
            .write(Vec::new(), flate2::Compression::new(6));
        gz.write_all(&json)?;
        Ok(gz.finish()?)
    }
}

impl Default for Manifest {
    fn default() -> Self {
        Manifest::new()
    }
}

/// The entries of the filesystem mounted at `root`, in byte order of
/// their paths; entries of other filesystems mounted below are not
/// entered.
pub fn walk(root: &Path) -> Result<Vec<Entry>> {
    let dev = std::fs::symlink_metadata(root)
        .with_context(|| format!("reading {}", root.display()))?
        .dev();
    let mut out = Vec::new();
    walk_dir(root, root, dev, &mut out)?;
    Ok(out)
}

fn walk_dir(root: &Path, dir: &Path, dev: u64, out: &mut Vec<Entry>) -> Result<()> {
    out.push(entry(root, dir)?);
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("listing {}", dir.display()))?;
    names.sort_by(|a, b| a.as_os_str().as_bytes().cmp(b.as_os_str().as_bytes()));
    for p in names {
        let md =
            std::fs::symlink_metadata(&p).with_context(|| format!("reading {}", p.display()))?;
        if md.is_dir() {
            if md.dev() == dev {
                walk_dir(root, &p, dev, out)?;
            }
        } else {
            out.push(entry(root, &p)?);
        }
    }
    Ok(())
}

fn entry(root: &Path, p: &Path) -> Result<Entry> {
    let md = std::fs::symlink_metadata(p).with_context(|| format!("reading {}", p.display()))?;
    let ft = md.file_type();
    let kind = if ft.is_dir() {
        "dir"
    } else if ft.is_file() {
        "file"
    } else if ft.is_symlink() {
        "symlink"
    } else if ft.is_char_device() {
        "char"
    } else if ft.is_block_device() {
        "block"
    } else if ft.is_fifo() {
        "fifo"
    } else {
        "socket"
    };
    let rel = p.strip_prefix(root).unwrap_or(p);
    let path = format!("/{}", String::from_utf8_lossy(rel.as_os_str().as_bytes()));
    let mut e = Entry {
        path,
        kind: kind.into(),
        mode: format!("{:04o}", md.mode() & 0o7777),
        uid: md.uid(),
        gid: md.gid(),
        size: 0,
        mtime: md.mtime(),
        sha256: None,
        target: None,
        rdev: None,
        xattrs: BTreeMap::new(),
    };
    if ft.is_file() {
        e.size = md.len();
        e.sha256 = Some(file_sha256(p)?);
    } else if ft.is_symlink() {
        e.size = md.len();
        let t = std::fs::read_link(p).with_context(|| format!("reading {}", p.display()))?;
        e.target = Some(String::from_utf8_lossy(t.as_os_str().as_bytes()).into_owned());
    } else if ft.is_char_device() || ft.is_block_device() {
        let r = md.rdev();
        e.rdev = Some(format!("{}:{}", libc::major(r), libc::minor(r)));
    }
    for (name, value) in crate::sys::fsmeta::xattrs(p)? {
        let v = match String::from_utf8(value) {
            Ok(s) => s,
            Err(b) => format!("hex:{}", hex::encode(b.into_bytes())),
        };
        e.xattrs
            .insert(String::from_utf8_lossy(name.as_bytes()).into_owned(), v);
    }
    Ok(e)
}

fn file_sha256(p: &Path) -> Result<String> {
    let mut f = std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).with_context(|| format!("reading {}", p.display()))?;
    Ok(hex::encode(h.finalize()))
}

/// The block size of [`blocks_digest`].
pub const DIGEST_BLOCK: u64 = 1 << 20;

/// The digest of `view`'s bytes `start..start+size` that [`Partition`]
/// records: SHA-256 over each 1 MiB block that is not all zeros, each
/// preceded by its index from `start` (u64, little-endian). Zeros cost no
/// hashing (most of a boot or cloud root partition is free space), and a
/// file and its sparse copy give the same digest.
pub fn blocks_digest(
    view: &dyn crate::io::view::DiskView,
    start: u64,
    size: u64,
) -> Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; DIGEST_BLOCK as usize];
    let end = start + size;
    // Blocks outside the view's data extents are zeros: not even read.
    let extents = view.data_extents()?;
    let mut next = extents
        .iter()
        .filter(|r| r.end > start && r.start < end)
        .peekable();
    let mut index = 0u64;
    let mut at = start;
    while at < end {
        let n = ((end - at) as usize).min(buf.len());
        let block = at..at + n as u64;
        while next.peek().is_some_and(|r| r.end <= block.start) {
            next.next();
        }
        let data = next.peek().is_some_and(|r| r.start < block.end);
        if data {
            view.read_at(&mut buf[..n], at)?;
            if buf[..n].iter().any(|b| *b != 0) {
                h.update(index.to_le_bytes());
                h.update(&buf[..n]);
            }
        }
        at += n as u64;
        index += 1;
    }
    Ok(hex::encode(h.finalize()))
}

/// How `a` (recorded) and `b` (found) differ, a line per path in path
/// order: `only recorded`, `only found`, or the fields that differ.
pub fn diff(a: &[Entry], b: &[Entry]) -> Vec<String> {
    let ma: BTreeMap<&str, &Entry> = a.iter().map(|e| (e.path.as_str(), e)).collect();
    let mb: BTreeMap<&str, &Entry> = b.iter().map(|e| (e.path.as_str(), e)).collect();
    let mut paths: Vec<&str> = ma.keys().chain(mb.keys()).copied().collect();
    paths.sort_unstable_by(|x, y| x.as_bytes().cmp(y.as_bytes()));
    paths.dedup();
    let mut out = Vec::new();
    for p in paths {
        match (ma.get(p), mb.get(p)) {
            (Some(_), None) => out.push(format!("{p}: recorded, not found")),
            (None, Some(_)) => out.push(format!("{p}: found, not recorded")),
            (Some(x), Some(y)) if x != y => out.push(format!("{p}: {}", fields(x, y))),
            _ => {}
        }
    }
    out
}

/// The fields of two entries of one path that differ, `name recorded →
/// found`.
fn fields(x: &Entry, y: &Entry) -> String {
    let (jx, jy) = (
        serde_json::to_value(x).unwrap_or_default(),
        serde_json::to_value(y).unwrap_or_default(),
    );
    let (Some(ox), Some(oy)) = (jx.as_object(), jy.as_object()) else {
        return "differs".into();
    };
    let mut keys: Vec<&String> = ox.keys().chain(oy.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| ox.get(*k) != oy.get(*k))
        .map(|k| {
            let show = |v: Option<&serde_json::Value>| v.map_or("none".into(), |v| v.to_string());
            format!("{k} {} → {}", show(ox.get(k)), show(oy.get(k)))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// How image `key` of `recorded` differs from `found`: the first partition
/// whose bytes differ, and for a filesystem the first `limit` paths that
/// differ (or that its content agrees and only the filesystem's own
/// metadata differs). `None` when neither has the image.
pub fn explain(recorded: &Manifest, found: &Manifest, key: &str, limit: usize) -> Option<String> {
    let (a, b) = (recorded.images.get(key)?, found.images.get(key)?);
    if a.partitions == b.partitions {
        return Some("its content manifest agrees with the rebuild's, partition by partition: the file was changed after it was written (`verify --manifest-only` names the partition)".into());
    }
    for pa in &a.partitions {
        let Some(pb) = b.partitions.iter().find(|p| p.label == pa.label) else {
            return Some(format!("partition {} is not in the rebuild", pa.label));
        };
        if (pa.start, pa.size) != (pb.start, pb.size) {
            return Some(format!(
                "partition {} is at {}+{} recorded, {}+{} found",
                pa.label, pa.start, pa.size, pb.start, pb.size
            ));
        }
        if pa.digest == pb.digest {
            continue;
        }
        let fs = pa.filesystem.as_ref().and_then(|k| {
            Some((
                k,
                recorded.filesystems.get(k)?,
                found.filesystems.get(pb.filesystem.as_ref()?)?,
            ))
        });
        let Some((k, fa, fb)) = fs else {
            return Some(format!(
                "partition {} differs (no filesystem listed)",
                pa.label
            ));
        };
        let d = diff(&fa.entries, &fb.entries);
        if d.is_empty() {
            return Some(format!(
                "partition {} ({} {k}) differs, but its content agrees with the manifest: the filesystem's own metadata (placement, ids, journal) differs",
                pa.label, fa.fs
            ));
        }
        let more = d.len().saturating_sub(limit);
        let mut s = format!(
            "partition {} ({} {k}) differs in {} path(s): {}",
            pa.label,
            fa.fs,
            d.len(),
            d.iter().take(limit).cloned().collect::<Vec<_>>().join("; ")
        );
        if more > 0 {
            s.push_str(&format!("; and {more} more"));
        }
        return Some(s);
    }
    Some("every partition agrees: the difference is outside them (the partition tables or the format's wrapper)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("b/c")).unwrap();
        std::fs::write(d.path().join("b/c/f"), b"hello").unwrap();
        std::fs::write(d.path().join("a"), b"").unwrap();
        std::os::unix::fs::symlink("b/c/f", d.path().join("l")).unwrap();
        d
    }

    #[test]
    fn walk_lists_every_entry_in_byte_order_with_its_digest() {
        let d = tree();
        let e = walk(d.path()).unwrap();
        let paths: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["/", "/a", "/b", "/b/c", "/b/c/f", "/l"]);
        let f = &e[4];
        assert_eq!(f.kind, "file");
        assert_eq!(f.size, 5);
        assert_eq!(
            f.sha256.as_deref(),
            Some("2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
        );
        assert_eq!(e[5].target.as_deref(), Some("b/c/f"));
        assert_eq!(e[5].kind, "symlink");
    }

    #[test]
    fn diff_names_each_changed_missing_and_extra_path() {
        let d = tree();
        let a = walk(d.path()).unwrap();
        assert!(diff(&a, &a).is_empty());
        std::fs::write(d.path().join("b/c/f"), b"hellO").unwrap();
        std::fs::remove_file(d.path().join("a")).unwrap();
        std::fs::write(d.path().join("z"), b"").unwrap();
        let b = walk(d.path()).unwrap();
        let d = diff(&a, &b);
        assert_eq!(d.len(), 3, "{d:?}");
        assert_eq!(d[0], "/a: recorded, not found");
        assert!(d[1].starts_with("/b/c/f: sha256 \"2cf24"), "{}", d[1]);
        assert_eq!(d[2], "/z: found, not recorded");
    }

    #[test]
    fn file_bytes_are_stable_and_read_back() {
        let d = tree();
        let mut m = Manifest::new();
        m.filesystems.insert(
            "root".into(),
            Filesystem {
                fs: "xfs".into(),
                entries: walk(d.path()).unwrap(),
            },
        );
        let b1 = m.to_bytes().unwrap();
        assert_eq!(b1, m.to_bytes().unwrap());
        let p = d.path().join("m.json.gz");
        std::fs::write(&p, &b1).unwrap();
        assert_eq!(Manifest::read(&p).unwrap(), m);
    }

    #[test]
    fn explain_names_the_partition_and_the_paths() {
        let d = tree();
        let entries = walk(d.path()).unwrap();
        let part = |sha: &str| Partition {
            label: "root".into(),
            start: 1 << 20,
            size: 1 << 30,
            hashed: 1 << 30,
            digest: sha.into(),
            filesystem: Some("root".into()),
        };
        let build = |entries: Vec<Entry>, sha: &str| {
            let mut m = Manifest::new();
            m.filesystems.insert(
                "root".into(),
                Filesystem {
                    fs: "xfs".into(),
                    entries,
                },
            );
            m.images.insert(
                "metal".into(),
                Image {
                    file: "x.raw".into(),
                    size: 2 << 30,
                    partitions: vec![part(sha)],
                },
            );
            m
        };
        let a = build(entries.clone(), "aa");
        let mut changed = entries.clone();
        changed[1].mode = "0600".into();
        let s = explain(&a, &build(changed, "bb"), "metal", 5).unwrap();
        let mode = format!("{:?}", entries[1].mode);
        assert!(
            s.starts_with("partition root (xfs root) differs in 1 path(s): /a: mode ")
                && s.ends_with(&format!("{mode} → \"0600\"")),
            "{s}"
        );
        let s = explain(&a, &build(entries.clone(), "bb"), "metal", 5).unwrap();
        assert!(s.contains("content agrees"), "{s}");
        let s = explain(&a, &build(entries.clone(), "aa"), "metal", 5).unwrap();
        assert!(s.contains("agrees with the rebuild's"), "{s}");
        let mut moved = build(entries, "aa");
        moved.images.get_mut("metal").unwrap().partitions[0].start = 2 << 20;
        let s = explain(&a, &moved, "metal", 5).unwrap();
        assert!(s.starts_with("partition root is at 1048576+"), "{s}");
    }
}
