//! KubeVirt containerDisk as an OCI image archive: cosa's `kubevirt`
//! artifact (`src/osbuild-manifests/platform.kubevirt.ipp.yaml`: a qcow2
//! under `/disk/`, packed by osbuild's `org.osbuild.oci-archive` stage).
//!
//! Shape, as that stage writes it (osbuild `stages/org.osbuild.oci-archive`):
//! - one layer: a tar of the tree (`disk/`, `disk/<file>.qcow2`), gzip'd,
//!   media type `application/vnd.oci.image.layer.v1.tar+gzip`; the config's
//!   `rootfs.diff_ids` holds the digest of the uncompressed tar;
//! - config (`application/vnd.oci.image.config.v1+json`): `created`,
//!   `architecture` (OCI name: amd64, arm64, s390x), `os: linux`,
//!   `config: {Env: [PATH=...], Cmd: [sh], Labels: {version}}`, `rootfs`,
//!   one `history` entry;
//! - manifest (`application/vnd.oci.image.manifest.v1+json`), an
//!   `index.json` listing it, and `oci-layout` (`imageLayoutVersion 1.0.0`);
//! - all of it in a tar, members sorted by name, owner 0, at the build's
//!   time stamp.
//!
//! KubeVirt's containerDisk reads the first disk image under `/disk`
//! (kubevirt `docs/container-register-disks.md`).
use crate::io::compress::{compress_view, CompressOpts, Compressor};
use crate::io::view::{Composite, FileView, Patch};
use crate::util::sha256_hex;
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;

pub const MEDIA_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const MEDIA_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The directory KubeVirt looks in (platform.kubevirt.ipp.yaml: "Kubevirt
/// looks for the disk/qcow2 file under the /disk directory").
pub const DISK_DIR: &str = "disk";
/// osbuild's default `Env` of the image config.
const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// gzip level of the layer (gzip's default, as the stage runs it).
const LAYER_GZIP_LEVEL: u32 = 6;

/// What goes into the image besides the disk.
pub struct OciDisk<'a> {
    /// File name of the qcow2 inside `/disk/`.
    pub disk_name: &'a str,
    /// OCI architecture (`amd64`, `arm64`, `s390x`).
    pub architecture: &'a str,
    /// The `version` label: the OS version.
    pub version: &'a str,
    /// Time stamp of the image and its files, Unix seconds.
    pub mtime: u64,
}

/// What [`write_containerdisk`] produced.
#[derive(Debug, Clone)]
pub struct OciStats {
    pub manifest_digest: String,
    pub layer_digest: String,
    pub diff_id: String,
}

/// Pack the qcow2 file `disk` as a containerDisk OCI archive at `out`;
/// `work` holds the intermediate layer (removed at the end). `threads`
/// workers gzip the layer.
pub fn write_containerdisk(
    disk: &Path,
    out: &Path,
    work: &Path,
    d: &OciDisk,
    threads: usize,
) -> Result<OciStats> {
    write(disk, out, work, d, threads)
        .with_context(|| format!("writing OCI archive {}", out.display()))
}

fn write(disk: &Path, out: &Path, work: &Path, d: &OciDisk, threads: usize) -> Result<OciStats> {
    // The layer tar is never staged: its member headers (from memory) and
    // the qcow2 (read in place) are one view, gzip'd as any disk is.
    let len = std::fs::metadata(disk)
        .with_context(|| format!("opening {}", disk.display()))?
        .len();
    let head = layer_head(d, len)?;
    let head_file = tempfile::Builder::new()
        .prefix(".layer-")
        .suffix(".tar")
        .tempfile_in(work)
        .with_context(|| format!("creating the layer in {}", work.display()))?;
    std::fs::write(head_file.path(), &head)?;
    let head_view = FileView::open(head_file.path())?;
    let at = head.len() as u64;
    // Data padded to a block, then the two zero blocks ending the archive.
    let layer_len = at + len.next_multiple_of(512) + 1024;
    let view = Composite::new(
        &head_view,
        layer_len,
        vec![Patch::from_file(disk, at, len)?],
    )?;
    let layer_gz = tempfile::Builder::new()
        .prefix(".layer-")
        .suffix(".tar.gz")
        .tempfile_in(work)?;
    let opts = CompressOpts::new(Compressor::Gzip, LAYER_GZIP_LEVEL, threads);
    let w = compress_view(&view, layer_gz.path(), &opts, &|_| {})?;
    drop(view);
    drop(head_view);
    head_file.close()?;
    let created = crate::util::rfc3339_utc(d.mtime as i64);
    let diff_id = format!("sha256:{}", w.uncompressed_sha256);
    let layer_digest = format!("sha256:{}", w.sha256);
    let config = serde_json::json!({
        "created": created,
        "architecture": d.architecture,
        "os": "linux",
        "config": {
            "Env": [DEFAULT_PATH],
            "Cmd": ["sh"],
            "Labels": {"version": d.version},
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": "bootimage-gen: containerDisk /disk"}],
    });
    let config = serde_json::to_vec(&config)?;
    let config_digest = sha256_hex(&config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": format!("sha256:{config_digest}"), "size": config.len()},
        "layers": [{"mediaType": MEDIA_LAYER_GZIP, "digest": layer_digest, "size": w.size}],
    }))?;
    let manifest_digest = sha256_hex(&manifest);
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": MEDIA_MANIFEST, "digest": format!("sha256:{manifest_digest}"), "size": manifest.len()}],
    }))?;
    let layout = br#"{"imageLayoutVersion":"1.0.0"}"#;

    // The archive, members sorted by name.
    let file = crate::io::create_sized(out, 0)?;
    let mut t = tar::Builder::new(BufWriter::with_capacity(1 << 20, &file));
    t.mode(tar::HeaderMode::Deterministic);
    for dir in ["blobs/", "blobs/sha256/"] {
        let mut h = header(d.mtime, 0o755, tar::EntryType::Directory, 0);
        t.append_data(&mut h, dir, std::io::empty())?;
    }
    enum Blob<'a> {
        Mem(&'a [u8]),
        File(&'a Path, u64),
    }
    let mut blobs = vec![
        (config_digest, Blob::Mem(&config)),
        (manifest_digest.clone(), Blob::Mem(&manifest)),
        (w.sha256.clone(), Blob::File(layer_gz.path(), w.size)),
    ];
    blobs.sort_by(|a, b| a.0.cmp(&b.0));
    for (digest, blob) in blobs {
        let name = format!("blobs/sha256/{digest}");
        match blob {
            Blob::Mem(b) => {
                let mut h = header(d.mtime, 0o644, tar::EntryType::Regular, b.len() as u64);
                t.append_data(&mut h, name, b)?;
            }
            Blob::File(p, len) => {
                let mut h = header(d.mtime, 0o644, tar::EntryType::Regular, len);
                let f = File::open(p)?;
                t.append_data(&mut h, name, CancelRead(f))?;
            }
        }
    }
    for (name, data) in [("index.json", &index[..]), ("oci-layout", &layout[..])] {
        let mut h = header(d.mtime, 0o644, tar::EntryType::Regular, data.len() as u64);
        t.append_data(&mut h, name, data)?;
    }
    t.into_inner()?.flush()?;
    file.sync_all().context("syncing the archive")?;
    layer_gz.close()?;
    Ok(OciStats {
        manifest_digest: format!("sha256:{manifest_digest}"),
        layer_digest,
        diff_id,
    })
}

/// An OCI image layout directory `dir` (blobs, `index.json`,
/// `oci-layout`) as an OCI archive at `out`, written as reproducibly as
/// [`write_containerdisk`] writes its own: members sorted by path, owner
/// 0:0, modes 0755 and 0644, every time `mtime`. Only directories and
/// regular files are taken; anything else is refused, naming it.
pub fn write_layout_archive(dir: &Path, out: &Path, mtime: u64) -> Result<()> {
    fn walk(root: &Path, rel: &Path, into: &mut Vec<(std::path::PathBuf, bool)>) -> Result<()> {
        let here = root.join(rel);
        let mut names = std::fs::read_dir(&here)
            .with_context(|| format!("reading {}", here.display()))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<std::io::Result<Vec<_>>>()?;
        // Byte order of the names, not the directory's order.
        names.sort();
        for n in names {
            let r = rel.join(&n);
            let t = std::fs::symlink_metadata(root.join(&r))?.file_type();
            if t.is_dir() {
                into.push((r.clone(), true));
                walk(root, &r, into)?;
            } else if t.is_file() {
                into.push((r, false));
            } else {
                bail!(
                    "{}: neither a file nor a directory; an OCI layout holds only those",
                    root.join(&r).display()
                );
            }
        }
        Ok(())
    }
    let mut members = Vec::new();
    walk(dir, Path::new(""), &mut members)?;
    let file = crate::io::create_sized(out, 0)?;
    let mut t = tar::Builder::new(BufWriter::with_capacity(1 << 20, &file));
    t.mode(tar::HeaderMode::Deterministic);
    for (rel, is_dir) in members {
        let name = rel
            .to_str()
            .with_context(|| format!("{}: not UTF-8", rel.display()))?;
        if is_dir {
            let mut h = header(mtime, 0o755, tar::EntryType::Directory, 0);
            t.append_data(&mut h, format!("{name}/"), std::io::empty())?;
        } else {
            let f = File::open(dir.join(&rel))?;
            let len = f.metadata()?.len();
            let mut h = header(mtime, 0o644, tar::EntryType::Regular, len);
            t.append_data(&mut h, name, CancelRead(f))?;
        }
    }
    t.into_inner()?.flush()?;
    file.sync_all()
        .with_context(|| format!("syncing {}", out.display()))?;
    Ok(())
}

/// The layer tar up to the disk's data: the `disk/` member and the
/// header of `disk/<disk_name>` (`len` bytes), as `tar::Builder` writes them.
fn layer_head(d: &OciDisk, len: u64) -> Result<Vec<u8>> {
    let mut t = tar::Builder::new(Vec::new());
    t.mode(tar::HeaderMode::Deterministic);
    let mut h = header(d.mtime, 0o755, tar::EntryType::Directory, 0);
    t.append_data(&mut h, format!("{DISK_DIR}/"), std::io::empty())?;
    // No data given: the builder writes the header alone.
    let mut h = header(d.mtime, 0o644, tar::EntryType::Regular, len);
    t.append_data(
        &mut h,
        format!("{DISK_DIR}/{}", d.disk_name),
        std::io::empty(),
    )?;
    Ok(std::mem::take(t.get_mut()))
}

/// A member header: owner 0:0, the given mode, type, size and time.
fn header(mtime: u64, mode: u32, kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(mtime);
    h.set_size(size);
    h
}

/// A reader that stops when the run is cancelled.
struct CancelRead<R>(R);

impl<R: Read> Read for CancelRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        crate::util::cancel::check().map_err(std::io::Error::other)?;
        self.0.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The archive is a valid OCI layout: its index, manifest, config and
    /// layer digests agree, and the layer holds `disk/<name>`.
    #[test]
    fn archive_is_a_consistent_oci_layout() {
        let d = tempfile::tempdir().unwrap();
        let disk = d.path().join("x.qcow2");
        std::fs::write(&disk, vec![7u8; 200_000]).unwrap();
        let out = d.path().join("a.ociarchive");
        let s = write_containerdisk(
            &disk,
            &out,
            d.path(),
            &OciDisk {
                disk_name: "testos-1-kubevirt.x86_64.qcow2",
                architecture: "amd64",
                version: "1",
                mtime: 1_700_000_000,
            },
            1,
        )
        .unwrap();
        let mut a = tar::Archive::new(File::open(&out).unwrap());
        let mut files = std::collections::BTreeMap::new();
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let name = e.path().unwrap().to_string_lossy().to_string();
            let mut v = Vec::new();
            e.read_to_end(&mut v).unwrap();
            files.insert(name, v);
        }
        let index: serde_json::Value = serde_json::from_slice(&files["index.json"]).unwrap();
        let m = index["manifests"][0]["digest"].as_str().unwrap();
        assert_eq!(m, s.manifest_digest);
        let blob = |dg: &str| &files[&format!("blobs/sha256/{}", &dg[7..])];
        let manifest: serde_json::Value = serde_json::from_slice(blob(m)).unwrap();
        let cfg_dg = manifest["config"]["digest"].as_str().unwrap();
        assert_eq!(format!("sha256:{}", sha256_hex(blob(cfg_dg))), cfg_dg);
        let cfg: serde_json::Value = serde_json::from_slice(blob(cfg_dg)).unwrap();
        assert_eq!(cfg["architecture"], "amd64");
        assert_eq!(cfg["config"]["Labels"]["version"], "1");
        let layer = blob(&s.layer_digest);
        assert_eq!(format!("sha256:{}", sha256_hex(layer)), s.layer_digest);
        let mut raw = Vec::new();
        flate2::read::MultiGzDecoder::new(&layer[..])
            .read_to_end(&mut raw)
            .unwrap();
        assert_eq!(format!("sha256:{}", sha256_hex(&raw)), s.diff_id);
        assert_eq!(cfg["rootfs"]["diff_ids"][0], s.diff_id);
        let mut inner = tar::Archive::new(&raw[..]);
        let names: Vec<String> = inner
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().to_string_lossy().to_string())
            .collect();
        assert_eq!(names, ["disk/", "disk/testos-1-kubevirt.x86_64.qcow2"]);
    }

    /// A layout directory gives the same archive whatever order its
    /// files were made in and whenever: sorted members, owner 0, the
    /// given time; a socket in it is refused, named.
    #[test]
    fn a_layout_archive_depends_on_content_and_mtime_only() {
        let d = tempfile::tempdir().unwrap();
        let make = |name: &str, order: &[&str]| {
            let dir = d.path().join(name);
            std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
            for f in order {
                std::fs::write(dir.join(f), f.as_bytes()).unwrap();
            }
            dir
        };
        let files = [
            "blobs/sha256/bb",
            "blobs/sha256/aa",
            "index.json",
            "oci-layout",
        ];
        let a = make("a", &files);
        let mut rev = files;
        rev.reverse();
        let b = make("b", &rev);
        let (oa, ob, oc) = (
            d.path().join("a.tar"),
            d.path().join("b.tar"),
            d.path().join("c.tar"),
        );
        write_layout_archive(&a, &oa, 1_700_000_000).unwrap();
        // Other file times: not in the archive.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(b.join("index.json"), b"index.json").unwrap();
        write_layout_archive(&b, &ob, 1_700_000_000).unwrap();
        write_layout_archive(&a, &oc, 1_700_000_001).unwrap();
        assert_eq!(std::fs::read(&oa).unwrap(), std::fs::read(&ob).unwrap());
        assert_ne!(std::fs::read(&oa).unwrap(), std::fs::read(&oc).unwrap());
        let mut ar = tar::Archive::new(File::open(&oa).unwrap());
        let names: Vec<(String, u64, u64)> = ar
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().to_string_lossy().to_string(),
                    h.mtime().unwrap(),
                    h.uid().unwrap(),
                )
            })
            .collect();
        let paths: Vec<&str> = names.iter().map(|n| n.0.as_str()).collect();
        assert_eq!(
            paths,
            [
                "blobs/",
                "blobs/sha256/",
                "blobs/sha256/aa",
                "blobs/sha256/bb",
                "index.json",
                "oci-layout"
            ]
        );
        assert!(
            names.iter().all(|n| n.1 == 1_700_000_000 && n.2 == 0),
            "{names:?}"
        );
        let _sock = std::os::unix::net::UnixListener::bind(a.join("blobs/s")).unwrap();
        let e = write_layout_archive(&a, &oc, 0).unwrap_err();
        assert!(
            format!("{e:#}").contains("blobs/s: neither a file nor a directory"),
            "{e:#}"
        );
    }
}
