//! `chunkah`: a flat root filesystem split into layers as coreos/chunkah
//! does, one per component. In: the rootfs, a `/path<TAB>component` list,
//! the layer limit and labels; out: the layers (each annotated with its
//! component), the config and the manifest, stored and tagged.
use crate::layer::put_layer;
use crate::layout::{init_layout, put_image, sha256, CREATED};
use crate::opts::Opts;
use anyhow::{Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};

/// The xattrs of `p` (not followed), without those chunkah leaves out
/// (coreos/chunkah `src/scan.rs` `read_xattrs`: `security.selinux`,
/// `trusted.*`).
fn chunkah_xattrs(p: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes())?;
    let mut names = vec![0u8; 4096];
    // SAFETY: the buffer is valid for its length; c is NUL-terminated.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n < 0 {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for name in names[..n as usize]
        .split(|b| *b == 0)
        .filter(|x| !x.is_empty())
    {
        let key = String::from_utf8_lossy(name).into_owned();
        if key == "security.selinux" || key.starts_with("trusted.") {
            continue;
        }
        let cn = std::ffi::CString::new(name)?;
        let mut v = vec![0u8; 65536];
        // SAFETY: as above.
        let m = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        if m >= 0 {
            v.truncate(m as usize);
            out.push((key, v));
        }
    }
    Ok(out)
}

/// Every entry under `root` (relative, sorted, parents first).
fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut names: Vec<_> = std::fs::read_dir(root.join(rel))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<_>>()?;
    names.sort();
    for n in names {
        let r = rel.join(n);
        out.push(r.clone());
        if std::fs::symlink_metadata(root.join(&r))?.is_dir() {
            walk(root, &r, out)?;
        }
    }
    Ok(())
}

/// One layer's worth: a component (or the packed names of several), the
/// bytes of its files, and its entries (relative to the rootfs).
type Group = (String, (u64, Vec<PathBuf>));

/// A flat rootfs split as chunkah does (coreos/chunkah `ocibuilder.rs`):
/// one layer per component, each carrying the parent directories of its
/// files, the smallest components packed into one layer past the limit.
pub(crate) fn chunkah(args: &[String]) -> Result<()> {
    let o = Opts::parse(
        args,
        &[
            "--layout",
            "--tag",
            "--rootfs",
            "--components",
            "--max-layers",
            "--label",
        ],
        &[],
    );
    let (layout, tag, rootfs, comps) = (
        o.path("--layout"),
        o.need("--tag"),
        o.path("--rootfs"),
        o.path("--components"),
    );
    let max_layers: usize = match o.get("--max-layers") {
        Some(n) => n.parse().context("--max-layers N")?,
        None => 64,
    };
    let mut labels = serde_json::Map::new();
    for (k, v) in o.labels()? {
        labels.insert(k, v.into());
    }
    let owner = read_components(&comps)?;
    let mut entries = Vec::new();
    walk(&rootfs, Path::new(""), &mut entries)?;
    let groups = group_entries(&rootfs, &entries, &owner)?;
    let order = pack(groups, max_layers);
    init_layout(&layout)?;
    let (mut descs, mut diff_ids, mut history) = (Vec::new(), Vec::new(), Vec::new());
    for (name, (_, files)) in &order {
        let tar = component_tar(&rootfs, files)?;
        diff_ids.push(sha256(&tar));
        let mut d = put_layer(&layout, &tar, false, false)?;
        d["annotations"] = json!({"org.chunkah.component": name, "org.chunkah.stability": "0"});
        descs.push(d);
        history.push(json!({"created": CREATED, "created_by": "chunkah", "author": "chunkah"}));
    }
    let config = json!({
        "architecture": "amd64", "os": "linux", "created": CREATED,
        "config": {"Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": history,
    });
    put_image(&layout, &tag, &config, descs, false)?;
    Ok(())
}

/// The `--components` file: `/path<TAB>component` lines, as path -> component.
fn read_components(comps: &Path) -> Result<std::collections::HashMap<String, String>> {
    let mut owner = std::collections::HashMap::new();
    for line in std::fs::read_to_string(comps)?.lines() {
        if let Some((p, c)) = line.split_once('\t') {
            owner.insert(p.to_string(), c.to_string());
        }
    }
    Ok(owner)
}

/// The rootfs entries by component: every file, symlink and empty
/// directory under its owner's name (`chunkah/unclaimed` when none), with
/// the bytes it adds; directories with entries below them come with those.
fn group_entries(
    rootfs: &Path,
    entries: &[PathBuf],
    owner: &std::collections::HashMap<String, String>,
) -> Result<std::collections::BTreeMap<String, (u64, Vec<PathBuf>)>> {
    const UNCLAIMED: &str = "chunkah/unclaimed";
    // component -> (bytes, entries); a directory with nothing below it
    // goes with the unclaimed files.
    let mut groups: std::collections::BTreeMap<String, (u64, Vec<PathBuf>)> = Default::default();
    let mut has_child = std::collections::HashSet::new();
    for e in entries {
        let mut p = e.parent();
        while let Some(d) = p {
            if !has_child.insert(d.to_path_buf()) {
                break;
            }
            p = d.parent();
        }
    }
    for e in entries {
        let md = std::fs::symlink_metadata(rootfs.join(e))?;
        if md.is_dir() && has_child.contains(e) {
            continue;
        }
        let c = owner
            .get(&format!("/{}", e.display()))
            .cloned()
            .unwrap_or_else(|| UNCLAIMED.to_string());
        let g = groups.entry(c).or_default();
        g.0 += md.len();
        g.1.push(e.clone());
    }
    Ok(groups)
}

/// The groups as layers, largest first (then by name); past `max_layers`
/// the smallest are packed into one last layer named after all of them.
fn pack(
    groups: std::collections::BTreeMap<String, (u64, Vec<PathBuf>)>,
    max_layers: usize,
) -> Vec<Group> {
    let mut order: Vec<Group> = groups.into_iter().collect();
    order.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    if order.len() > max_layers {
        let rest = order.split_off(max_layers.max(1) - 1);
        let name = rest
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let mut files: Vec<PathBuf> = rest.into_iter().flat_map(|(_, (_, f))| f).collect();
        files.sort();
        order.push((name, (0, files)));
    }
    order
}

/// One component's layer tar: its files, each preceded by the parent
/// directories not yet written.
fn component_tar(rootfs: &Path, files: &[PathBuf]) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    let paths = with_parents(files);
    for r in &paths {
        append_entry(&mut b, rootfs, r)?;
    }
    Ok(b.into_inner()?)
}

/// `files` with their ancestors (outermost first), each path once.
fn with_parents(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut written = std::collections::HashSet::new();
    let mut paths: Vec<PathBuf> = Vec::new();
    for f in files {
        let mut anc: Vec<PathBuf> = f
            .ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .collect();
        anc.reverse();
        for a in anc.into_iter().chain(std::iter::once(f.clone())) {
            if written.insert(a.clone()) {
                paths.push(a);
            }
        }
    }
    paths
}

/// Append the rootfs entry `r` (not followed) with its xattrs as PAX
/// `SCHILY.xattr.*` records, mtime 0.
fn append_entry(b: &mut tar::Builder<Vec<u8>>, rootfs: &Path, r: &Path) -> Result<()> {
    let full = rootfs.join(r);
    let md = std::fs::symlink_metadata(&full)?;
    let x = chunkah_xattrs(&full)?;
    if !x.is_empty() {
        let keys: Vec<(String, &[u8])> = x
            .iter()
            .map(|(k, v)| (format!("SCHILY.xattr.{k}"), v.as_slice()))
            .collect();
        b.append_pax_extensions(keys.iter().map(|(k, v)| (k.as_str(), *v)))?;
    }
    let mut h = tar::Header::new_gnu();
    h.set_metadata(&md);
    h.set_mtime(0);
    if md.is_dir() {
        b.append_data(&mut h, r, std::io::empty())?;
    } else if md.file_type().is_symlink() {
        h.set_size(0);
        b.append_link(&mut h, r, std::fs::read_link(&full)?)?;
    } else if md.is_file() {
        b.append_data(&mut h, r, std::fs::File::open(&full)?)?;
    }
    Ok(())
}
