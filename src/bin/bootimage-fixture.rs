//! bootimage-fixture: builds the test release images (see fixtures/build.sh).
//! Writes OCI image layouts from directories, merges layouts, and exposes
//! ostree-ext's own CLI (`bootimage-fixture ostree-ext container encapsulate ...`).
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

const MT_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const MT_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const MT_LAYER_GZ: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const REF_NAME: &str = "org.opencontainers.image.ref.name";

fn usage() -> ! {
    eprintln!(
        "usage:\n  bootimage-fixture add-image --layout DIR --tag TAG [--layer-dir DIR | --layer-tar FILE]... [--label K=V]... [--arch ARCH]\n  bootimage-fixture merge --from DIR --from-tag TAG --layout DIR --tag TAG\n  bootimage-fixture digest --layout DIR --tag TAG\n  bootimage-fixture ostree-ext ARGS..."
    );
    std::process::exit(2)
}

fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

fn init_layout(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir.join("blobs/sha256"))?;
    if !dir.join("oci-layout").exists() {
        std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)?;
    }
    if !dir.join("index.json").exists() {
        std::fs::write(
            dir.join("index.json"),
            r#"{"schemaVersion":2,"manifests":[]}"#,
        )?;
    }
    Ok(())
}

fn write_blob(dir: &Path, data: &[u8]) -> Result<(String, u64)> {
    let d = sha256(data);
    let p = dir
        .join("blobs/sha256")
        .join(d.trim_start_matches("sha256:"));
    if !p.exists() {
        std::fs::write(&p, data)?;
    }
    Ok((d, data.len() as u64))
}

fn set_tag(dir: &Path, tag: &str, desc: Value) -> Result<()> {
    let mut index: Value = serde_json::from_slice(&std::fs::read(dir.join("index.json"))?)?;
    let m = index["manifests"]
        .as_array_mut()
        .context("bad index.json")?;
    m.retain(|d| d["annotations"][REF_NAME].as_str() != Some(tag));
    let mut desc = desc;
    desc["annotations"] = json!({ REF_NAME: tag });
    m.push(desc);
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index)?)?;
    Ok(())
}

/// Append a directory to a tar builder in sorted, reproducible order.
fn append_sorted(b: &mut tar::Builder<impl Write>, root: &Path, rel: &Path) -> Result<()> {
    let full = root.join(rel);
    let mut entries: Vec<_> = std::fs::read_dir(&full)?.collect::<std::io::Result<Vec<_>>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let r = rel.join(e.file_name());
        let md = std::fs::symlink_metadata(e.path())?;
        let mut h = tar::Header::new_gnu();
        h.set_metadata(&md);
        h.set_mtime(0);
        if md.is_dir() {
            b.append_data(&mut h, &r, std::io::empty())?;
            append_sorted(b, root, &r)?;
        } else if md.file_type().is_symlink() {
            let target = std::fs::read_link(e.path())?;
            h.set_size(0);
            b.append_link(&mut h, &r, &target)?;
        } else if md.is_file() {
            b.append_data(&mut h, &r, std::fs::File::open(e.path())?)?;
        }
    }
    Ok(())
}

fn layer_from_dir(dir: &Path) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    append_sorted(&mut b, dir, Path::new(""))?;
    Ok(b.into_inner()?)
}

fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data)?;
    Ok(e.finish()?)
}

fn add_image(args: &[String]) -> Result<()> {
    let mut layout = None;
    let mut tag = None;
    let mut layers: Vec<Vec<u8>> = Vec::new();
    let mut labels = serde_json::Map::new();
    let mut arch = "amd64".to_string();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_else(|| usage());
        match a.as_str() {
            "--layout" => layout = Some(PathBuf::from(val())),
            "--tag" => tag = Some(val()),
            "--layer-dir" => layers.push(layer_from_dir(Path::new(&val()))?),
            "--layer-tar" => layers.push(std::fs::read(val())?),
            "--label" => {
                let v = val();
                let (k, x) = v.split_once('=').context("--label K=V")?;
                labels.insert(k.into(), x.into());
            }
            "--arch" => arch = val(),
            _ => usage(),
        }
    }
    let (Some(layout), Some(tag)) = (layout, tag) else {
        usage()
    };
    init_layout(&layout)?;
    let mut diff_ids = Vec::new();
    let mut descs = Vec::new();
    for l in &layers {
        diff_ids.push(sha256(l));
        let gz = gzip(l)?;
        let (d, n) = write_blob(&layout, &gz)?;
        descs.push(json!({"mediaType": MT_LAYER_GZ, "digest": d, "size": n}));
    }
    let config = json!({
        "architecture": arch, "os": "linux",
        "created": "2026-11-21T00:00:00Z",
        "config": {"Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": layers.iter().map(|_| json!({"created": "2026-11-21T00:00:00Z", "created_by": "bootimage-fixture"})).collect::<Vec<_>>(),
    });
    let (cd, cn) = write_blob(&layout, &serde_json::to_vec(&config)?)?;
    let manifest = json!({"schemaVersion": 2, "mediaType": MT_MANIFEST, "config": {"mediaType": MT_CONFIG, "digest": cd, "size": cn}, "layers": descs});
    let (md, mn) = write_blob(&layout, &serde_json::to_vec(&manifest)?)?;
    set_tag(
        &layout,
        &tag,
        json!({"mediaType": MT_MANIFEST, "digest": md, "size": mn}),
    )?;
    println!("{md}");
    Ok(())
}

fn find_tag(layout: &Path, tag: &str) -> Result<Value> {
    let index: Value = serde_json::from_slice(
        &std::fs::read(layout.join("index.json"))
            .with_context(|| format!("{}", layout.display()))?,
    )?;
    let found = index["manifests"].as_array().and_then(|m| {
        m.iter()
            .find(|d| d["annotations"][REF_NAME].as_str() == Some(tag))
            .cloned()
    });
    match found {
        Some(d) => Ok(d),
        None => {
            // A single untagged manifest is taken as the one.
            let m = index["manifests"].as_array().cloned().unwrap_or_default();
            if m.len() == 1 {
                return Ok(m[0].clone());
            }
            bail!("tag {tag} not in {}", layout.display())
        }
    }
}

fn merge(args: &[String]) -> Result<()> {
    let mut from = None;
    let mut from_tag = None;
    let mut layout = None;
    let mut tag = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_else(|| usage());
        match a.as_str() {
            "--from" => from = Some(PathBuf::from(val())),
            "--from-tag" => from_tag = Some(val()),
            "--layout" => layout = Some(PathBuf::from(val())),
            "--tag" => tag = Some(val()),
            _ => usage(),
        }
    }
    let (Some(from), Some(from_tag), Some(layout), Some(tag)) = (from, from_tag, layout, tag)
    else {
        usage()
    };
    init_layout(&layout)?;
    for e in std::fs::read_dir(from.join("blobs/sha256"))? {
        let e = e?;
        let dest = layout.join("blobs/sha256").join(e.file_name());
        if !dest.exists() {
            std::fs::copy(e.path(), &dest)?;
        }
    }
    let mut d = find_tag(&from, &from_tag)?;
    if let Some(o) = d.as_object_mut() {
        o.remove("annotations");
    }
    println!("{}", d["digest"].as_str().unwrap_or(""));
    set_tag(&layout, &tag, d)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let Some(cmd) = args.get(1) else { usage() };
    match cmd.as_str() {
        "add-image" => add_image(&args[2..]),
        "merge" => merge(&args[2..]),
        "digest" => {
            let (mut layout, mut tag) = (None, None);
            let mut it = args[2..].iter();
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--layout" => layout = it.next().map(PathBuf::from),
                    "--tag" => tag = it.next().cloned(),
                    _ => usage(),
                }
            }
            let (Some(l), Some(t)) = (layout, tag) else {
                usage()
            };
            println!("{}", find_tag(&l, &t)?["digest"].as_str().unwrap_or(""));
            Ok(())
        }
        "ostree-ext" => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let it = std::iter::once("ostree-ext".to_string()).chain(args[2..].iter().cloned());
            rt.block_on(ostree_ext::cli::run_from_iter(it))
        }
        _ => usage(),
    }
}
