//! `verify --manifest-only DIR`: check each disk image of a `generate`
//! output against its content manifest (docs/contract.md §9), without
//! rebuilding. Unprivileged: the manifest file against meta.json's digest,
//! the disk (decompressed, and decoded by `qemu-img` or `tar` when it is
//! not raw) against its recorded size, and every partition's bytes
//! against its digest. As root, also the filesystem of a differing
//! partition, mounted read-only, walked and compared entry by entry, so
//! that the paths that differ are named.
use super::verify::{Report, Verdict};
use crate::disk::manifest::{self, Manifest};
use crate::io::view::FileView;
use crate::publish::meta::{sha256_file, META_JSON};
use crate::sys::loopback::{LoopDevice, Mounted};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Paths named per differing filesystem.
const SHOWN: usize = 10;

pub fn run(dir: &Path) -> Result<()> {
    let meta: Value = serde_json::from_slice(
        &std::fs::read(dir.join(META_JSON))
            .with_context(|| format!("reading {}", dir.join(META_JSON).display()))?,
    )
    .with_context(|| format!("parsing {}", dir.join(META_JSON).display()))?;
    let images = meta["images"].as_object().cloned().unwrap_or_default();
    let listed: Vec<(String, String, String)> = images
        .iter()
        .filter_map(|(k, v)| {
            let c = &v["content-manifest"];
            Some((
                k.clone(),
                format!("{}\0{}", v["path"].as_str()?, v["sha256"].as_str()?),
                format!("{}\0{}", c["path"].as_str()?, c["sha256"].as_str()?),
            ))
        })
        .collect();
    if listed.is_empty() {
        return Err(anyhow::Error::new(Verdict {
            code: 2,
            message: format!(
                "{}/meta.json names no content manifest (an output of a bootimage-gen before content manifests, or a pulled copy without them): run `bootimage-gen verify {}` to rebuild and compare instead",
                dir.display(),
                dir.display()
            ),
        }));
    }
    let scratch = tempfile::Builder::new()
        .prefix(".verify-manifest-")
        .tempdir_in(std::env::temp_dir())
        .context("creating a scratch directory")?;
    let mut r = Report::default();
    let mut unchecked: Vec<(String, String)> = Vec::new();
    for (key, f, c) in listed {
        crate::util::cancel::check()?;
        let (file, fsha) = f.split_once('\0').expect("joined above");
        let (mpath, msha) = c.split_once('\0').expect("joined above");
        let file = file.to_string();
        crate::util::ui::status(format!("verify: {file} against {mpath}"));
        // The file against meta.json first: a file that no longer matches
        // differs even when it cannot be decoded any more.
        let whole = match sha256_file(&dir.join(&file)) {
            Ok((h, _)) if h == fsha => None,
            Ok((h, _)) => Some(format!("its sha256 is {h}, meta.json records {fsha}")),
            Err(e) => {
                unchecked.push((file, format!("{e:#}")));
                continue;
            }
        };
        match (
            check_image(dir, &key, &file, mpath, msha, scratch.path()),
            whole,
        ) {
            (Ok(None), None) => r.same.push(file),
            (Ok(None), Some(w)) => r.differ.push((file, w)),
            (Ok(Some(why)), w) => {
                let why = w.map_or(why.clone(), |w| format!("{w}; {why}"));
                r.differ.push((file, why))
            }
            (Err(e), Some(w)) => r
                .differ
                .push((file, format!("{w}; it cannot be read: {e:#}"))),
            (Err(e), None) => unchecked.push((file, format!("{e:#}"))),
        }
    }
    for (name, why) in &r.differ {
        println!("DIFFERS  {name}: {why}");
    }
    for (name, why) in &unchecked {
        println!("UNCHECKED {name}: {why}");
    }
    for name in &r.same {
        println!("same     {name}");
    }
    let total = r.same.len() + r.differ.len() + unchecked.len();
    if !r.differ.is_empty() {
        return Err(anyhow::Error::new(Verdict {
            code: 1,
            message: format!(
                "{} of {total} disk images of {} differ from their content manifests: {}",
                r.differ.len(),
                dir.display(),
                r.differ
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }));
    }
    if !unchecked.is_empty() {
        return Err(anyhow::Error::new(Verdict {
            code: 2,
            message: format!(
                "{} of {total} disk images of {} could not be checked: {}",
                unchecked.len(),
                dir.display(),
                unchecked
                    .iter()
                    .map(|(n, w)| format!("{n} ({w})"))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }));
    }
    crate::util::ui::status(format!(
        "verify: all {total} disk images of {} match their content manifests, partition by partition",
        dir.display()
    ));
    Ok(())
}

/// `None` when image `key` (file `file`) matches its manifest `mpath`
/// (recorded sha256 `msha`); else what differs.
fn check_image(
    dir: &Path,
    key: &str,
    file: &str,
    mpath: &str,
    msha: &str,
    scratch: &Path,
) -> Result<Option<String>> {
    let mp = dir.join(mpath);
    let (sha, _) = sha256_file(&mp)?;
    if sha != msha {
        return Ok(Some(format!(
            "its content manifest {mpath} has sha256 {sha}, meta.json records {msha}"
        )));
    }
    let m = Manifest::read(&mp)?;
    let img = m
        .images
        .get(key)
        .with_context(|| format!("{mpath} lists no image {key}"))?;
    let raw = to_raw(&dir.join(file), scratch)?;
    let view = FileView::open(&raw)?;
    let len = std::fs::metadata(&raw)?.len();
    let res = (|| -> Result<Option<String>> {
        if len != img.size {
            return Ok(Some(format!(
                "the disk is {len} bytes, the manifest records {}",
                img.size
            )));
        }
        for p in &img.partitions {
            let d = manifest::blocks_digest(&view, p.start, p.hashed)?;
            if d == p.digest {
                continue;
            }
            let mut why = format!(
                "partition {} (bytes {}+{}) has digest {d}, the manifest records {}",
                p.label, p.start, p.hashed, p.digest
            );
            if let Some(fs) = p.filesystem.as_ref().and_then(|k| m.filesystems.get(k)) {
                why.push_str(&match paths_that_differ(&raw, p, fs, scratch) {
                    Ok(d) if d.is_empty() => format!(
                        "; its {} content agrees with the manifest (the filesystem's own metadata differs)",
                        fs.fs
                    ),
                    Ok(d) => format!(
                        "; {} path(s) of its {} differ: {}{}",
                        d.len(),
                        fs.fs,
                        d.iter().take(SHOWN).cloned().collect::<Vec<_>>().join("; "),
                        if d.len() > SHOWN { "; …" } else { "" }
                    ),
                    Err(e) => format!("; its paths were not compared: {e:#}"),
                });
            }
            return Ok(Some(why));
        }
        Ok(None)
    })();
    let _ = std::fs::remove_file(&raw);
    res
}

/// The entries of `p`'s filesystem in the disk `raw` that differ from
/// `fs`: mounted read-only (root only: loop devices).
fn paths_that_differ(
    raw: &Path,
    p: &manifest::Partition,
    fs: &manifest::Filesystem,
    scratch: &Path,
) -> Result<Vec<String>> {
    if !crate::util::owner::is_root() {
        bail!("naming them needs root (a read-only loop mount); the partition digests are checked without it");
    }
    let options = match fs.fs.as_str() {
        "xfs" => "ro,norecovery,nouuid",
        "ext4" => "ro,noload",
        other => bail!("no read-only mount for {other}"),
    };
    let dev = LoopDevice::attach(raw, p.start, p.size, 512)?;
    let m = Mounted::new(
        dev,
        &scratch.join(format!("mnt-{}", p.label)),
        &fs.fs,
        options,
    )?;
    let found = manifest::walk(m.path());
    m.close()?;
    Ok(manifest::diff(&fs.entries, &found?))
}

/// The disk image `file` as a raw file in `scratch`: decompressed (gzip,
/// xz, zstd), then decoded when it is not raw (qcow2, VMDK, VHD, VHDX by
/// `qemu-img convert`; an OVA's VMDK, a GCP tarball's disk.raw and a
/// kubevirt containerdisk's qcow2 by `tar`).
fn to_raw(file: &Path, scratch: &Path) -> Result<PathBuf> {
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{}: not a file name", file.display()))?
        .to_string();
    let (stem, comp) = match name.rsplit_once('.') {
        Some((s, "gz")) if !s.ends_with(".tar") => (s.to_string(), Some("gz")),
        Some((s, "xz")) => (s.to_string(), Some("xz")),
        Some((s, "zst")) => (s.to_string(), Some("zst")),
        _ => (name.clone(), None),
    };
    let plain = match comp {
        None => file.to_path_buf(),
        Some(c) => {
            let out = scratch.join(&stem);
            decompress(file, c, &out)?;
            out
        }
    };
    let ext = stem.rsplit('.').next().unwrap_or("");
    let raw = scratch.join(format!("{stem}.disk.raw"));
    let qemu_img = |fmt: &str, src: &Path| -> Result<PathBuf> {
        let st = Command::new("qemu-img")
            .args(["convert", "-f", fmt, "-O", "raw"])
            .arg(src)
            .arg(&raw)
            .status()
            .context("running qemu-img (Debian: qemu-utils) to decode the disk")?;
        if !st.success() {
            bail!(
                "qemu-img convert -f {fmt} of {} failed ({st})",
                src.display()
            );
        }
        Ok(raw.clone())
    };
    let out = match ext {
        "raw" | "img" if comp.is_none() => return Ok(file.to_path_buf()),
        "raw" | "img" => return Ok(plain),
        "qcow2" => qemu_img("qcow2", &plain)?,
        "vmdk" => qemu_img("vmdk", &plain)?,
        "vhd" => qemu_img("vpc", &plain)?,
        "vhdx" => qemu_img("vhdx", &plain)?,
        "ova" | "gz" | "tar" => {
            // An OVA (tar: OVF, VMDK) or a GCP tarball (tar.gz: disk.raw).
            let x = scratch.join(format!("{stem}.x"));
            std::fs::create_dir_all(&x)?;
            untar(&plain, &x, &[])?;
            let member = std::fs::read_dir(&x)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .find(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("vmdk" | "raw")))
                .with_context(|| format!("{name} holds no .vmdk or .raw disk"))?;
            match member.extension().and_then(|e| e.to_str()) {
                Some("vmdk") => qemu_img("vmdk", &member)?,
                _ => {
                    std::fs::rename(&member, &raw)?;
                    raw.clone()
                }
            }
        }
        "ociarchive" => {
            // A kubevirt containerdisk: a layer holding disk/<name>.qcow2.
            let x = scratch.join(format!("{stem}.x"));
            std::fs::create_dir_all(&x)?;
            untar(&plain, &x, &[])?;
            let blobs = x.join("blobs/sha256");
            let mut found = None;
            for b in std::fs::read_dir(&blobs)
                .with_context(|| format!("{name}: no blobs/sha256 (not an OCI archive)"))?
            {
                let b = b?.path();
                let list = Command::new("tar").arg("-tf").arg(&b).output()?;
                let text = String::from_utf8_lossy(&list.stdout).into_owned();
                if let Some(m) = text
                    .lines()
                    .find(|l| l.starts_with("disk/") && l.ends_with(".qcow2"))
                {
                    found = Some((b, m.to_string()));
                    break;
                }
            }
            let (blob, member) =
                found.with_context(|| format!("{name}: no layer holds a disk/*.qcow2"))?;
            untar(&blob, &x, &[&member])?;
            qemu_img("qcow2", &x.join(&member))?
        }
        other => bail!("{name}: no way to read a disk from a .{other} file"),
    };
    if plain != file {
        let _ = std::fs::remove_file(&plain);
    }
    Ok(out)
}

/// `tar -xf archive -C dir [members]` (GNU tar reads gzip by itself).
fn untar(archive: &Path, dir: &Path, members: &[&str]) -> Result<()> {
    let st = Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(dir)
        .args(members)
        .status()
        .context("running tar")?;
    if !st.success() {
        bail!("tar -xf {} failed ({st})", archive.display());
    }
    Ok(())
}

/// Decompress `src` (`gz`, `xz` or `zst`) into `dst`, leaving runs of
/// zeros as holes.
fn decompress(src: &Path, kind: &str, dst: &Path) -> Result<()> {
    let f = std::io::BufReader::new(
        std::fs::File::open(src).with_context(|| format!("opening {}", src.display()))?,
    );
    let mut r: Box<dyn Read> = match kind {
        "gz" => Box::new(flate2::bufread::MultiGzDecoder::new(f)),
        "xz" => Box::new(xz2::bufread::XzDecoder::new_multi_decoder(f)),
        _ => Box::new(zstd::stream::read::Decoder::with_buffer(f)?),
    };
    let mut out =
        std::fs::File::create(dst).with_context(|| format!("creating {}", dst.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let mut n = 0;
        while n < buf.len() {
            match r
                .read(&mut buf[n..])
                .with_context(|| format!("decompressing {}", src.display()))?
            {
                0 => break,
                k => n += k,
            }
        }
        if n == 0 {
            break;
        }
        if buf[..n].iter().all(|b| *b == 0) {
            out.seek(SeekFrom::Current(n as i64))?;
        } else {
            out.write_all(&buf[..n])?;
        }
        len += n as u64;
    }
    out.set_len(len)?;
    Ok(())
}
