//! Layer tars: a directory written as a reproducible tar (sorted, mtime 0),
//! compressed (gzip or zstd) and stored as a blob of the layout, which
//! gives back the layer's descriptor.
use crate::layout::{write_blob, MT_D_LAYER, MT_LAYER_GZ, MT_LAYER_ZST};
use anyhow::Result;
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;

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

pub(crate) fn layer_from_dir(dir: &Path) -> Result<Vec<u8>> {
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

fn zstd_compress(data: &[u8]) -> Result<Vec<u8>> {
    Ok(zstd::stream::encode_all(data, 3)?)
}

/// Compress a layer tar and store it; its descriptor.
pub(crate) fn put_layer(layout: &Path, tar: &[u8], zstd: bool, docker: bool) -> Result<Value> {
    let (blob, mt) = if zstd {
        (zstd_compress(tar)?, MT_LAYER_ZST)
    } else if docker {
        (gzip(tar)?, MT_D_LAYER)
    } else {
        (gzip(tar)?, MT_LAYER_GZ)
    };
    let (d, n) = write_blob(layout, &blob)?;
    Ok(json!({"mediaType": mt, "digest": d, "size": n}))
}
