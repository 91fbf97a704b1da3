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
const MT_LAYER_ZST: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
const MT_INDEX: &str = "application/vnd.oci.image.index.v1+json";
// Docker image manifest v2 schema 2 (distribution/distribution
// docs/spec/manifest-v2-2.md) and the Docker image config.
const MT_D_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const MT_D_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
const MT_D_LAYER: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";
const CREATED: &str = "2026-11-21T00:00:00Z";
const REF_NAME: &str = "org.opencontainers.image.ref.name";

fn usage() -> ! {
    eprintln!(
        "usage:
  bootimage-fixture add-image --layout DIR --tag TAG [--layer-dir DIR | --layer-tar FILE]... [--label K=V]...
        [--arch ARCH] [--zstd] [--docker] [--minimal-config]
      --zstd            layers as tar+zstd (default tar+gzip)
      --docker          Docker schema 2 manifest, config and layer media types
      --minimal-config  config with only architecture, os, rootfs (OCI minimum; labels dropped)
  bootimage-fixture derive --layout DIR --from-tag TAG --tag TAG --layer-dir DIR [--zstd] [--created-by TEXT]
      the image FROM-TAG plus one layer, config extended as `podman build` does
  bootimage-fixture relabel --layout DIR --from-tag TAG --tag TAG [--label K=V]... [--unlabel K]...
      the image FROM-TAG with labels set or removed (a `FROM base` + `LABEL` build: config only)
  bootimage-fixture set-arch --layout DIR --tag TAG --arch ARCH
      TAG's image with config architecture ARCH (OCI name; arm64 gets variant v8)
  bootimage-fixture index --layout DIR --tag TAG --entry ARCH=DIGEST...
      an OCI image index (os linux) of manifests already in the layout
  bootimage-fixture chunkah --layout DIR --tag TAG --rootfs DIR --components FILE [--max-layers N] [--label K=V]...
      a flat root filesystem as chunkah splits it: a layer per component (FILE: `/path<TAB>component`
      lines; the rest is `chunkah/unclaimed`), the smallest packed together past N (default 64),
      each annotated org.chunkah.component; no ostree commit, no security.selinux or trusted.* xattrs
  bootimage-fixture merge --from DIR --from-tag TAG --layout DIR --tag TAG
  bootimage-fixture digest --layout DIR --tag TAG
  bootimage-fixture ostree-ext ARGS..."
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

fn zstd_compress(data: &[u8]) -> Result<Vec<u8>> {
    Ok(zstd::stream::encode_all(data, 3)?)
}

/// Compress a layer tar and store it; its descriptor.
fn put_layer(layout: &Path, tar: &[u8], zstd: bool, docker: bool) -> Result<Value> {
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

/// Store a config and its manifest, tag it, print and return its digest.
fn put_image(
    layout: &Path,
    tag: &str,
    config: &Value,
    layers: Vec<Value>,
    docker: bool,
) -> Result<String> {
    let (mt, ct) = if docker {
        (MT_D_MANIFEST, MT_D_CONFIG)
    } else {
        (MT_MANIFEST, MT_CONFIG)
    };
    let (cd, cn) = write_blob(layout, &serde_json::to_vec(config)?)?;
    let manifest = json!({"schemaVersion": 2, "mediaType": mt, "config": {"mediaType": ct, "digest": cd, "size": cn}, "layers": layers});
    let (md, mn) = write_blob(layout, &serde_json::to_vec(&manifest)?)?;
    set_tag(
        layout,
        tag,
        json!({"mediaType": mt, "digest": md, "size": mn}),
    )?;
    println!("{md}");
    Ok(md)
}

/// A subcommand's options: `--name VALUE` (any may repeat; the order of
/// all is kept) and bare `--flag`s. Anything else, or a missing value,
/// prints the usage.
struct Opts {
    values: Vec<(&'static str, String)>,
    flags: Vec<&'static str>,
}

impl Opts {
    fn parse(args: &[String], with_value: &[&'static str], flags: &[&'static str]) -> Opts {
        let mut o = Opts {
            values: Vec::new(),
            flags: Vec::new(),
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if let Some(k) = with_value.iter().find(|k| **k == a.as_str()) {
                o.values
                    .push((k, it.next().cloned().unwrap_or_else(|| usage())));
            } else if let Some(f) = flags.iter().find(|f| **f == a.as_str()) {
                o.flags.push(f);
            } else {
                usage()
            }
        }
        o
    }
    /// Every value of `k`, in order.
    fn all(&self, k: &str) -> Vec<String> {
        (self.values.iter())
            .filter(|(n, _)| *n == k)
            .map(|(_, v)| v.clone())
            .collect()
    }
    /// The last value of `k`.
    fn get(&self, k: &str) -> Option<String> {
        self.all(k).pop()
    }
    /// The value of a required `k`.
    fn need(&self, k: &str) -> String {
        self.get(k).unwrap_or_else(|| usage())
    }
    fn path(&self, k: &str) -> PathBuf {
        PathBuf::from(self.need(k))
    }
    fn has(&self, f: &str) -> bool {
        self.flags.contains(&f)
    }
    /// The `--label K=V` values as (K, V).
    fn labels(&self) -> Result<Vec<(String, String)>> {
        (self.all("--label").iter())
            .map(|kv| {
                let (k, v) = kv.split_once('=').context("--label K=V")?;
                Ok((k.to_string(), v.to_string()))
            })
            .collect()
    }
}

fn add_image(args: &[String]) -> Result<()> {
    let o = Opts::parse(
        args,
        &[
            "--layout",
            "--tag",
            "--layer-dir",
            "--layer-tar",
            "--label",
            "--arch",
        ],
        &["--zstd", "--docker", "--minimal-config"],
    );
    let (layout, tag) = (o.path("--layout"), o.need("--tag"));
    let mut layers: Vec<Vec<u8>> = Vec::new();
    for (k, v) in &o.values {
        match *k {
            "--layer-dir" => layers.push(layer_from_dir(Path::new(v))?),
            "--layer-tar" => layers.push(std::fs::read(v)?),
            _ => {}
        }
    }
    let mut labels = serde_json::Map::new();
    for (k, v) in o.labels()? {
        labels.insert(k, v.into());
    }
    let arch = o.get("--arch").unwrap_or_else(|| "amd64".into());
    let (zstd, docker, minimal) = (
        o.has("--zstd"),
        o.has("--docker"),
        o.has("--minimal-config"),
    );
    if zstd && docker {
        bail!("--zstd and --docker: Docker schema 2 has no zstd layer type");
    }
    init_layout(&layout)?;
    let mut diff_ids = Vec::new();
    let mut descs = Vec::new();
    for l in &layers {
        diff_ids.push(sha256(l));
        descs.push(put_layer(&layout, l, zstd, docker)?);
    }
    let mut config = if minimal {
        // image-spec config.md: only these three are required.
        json!({"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": diff_ids}})
    } else {
        json!({
            "architecture": arch, "os": "linux",
            "created": CREATED,
            "config": {"Labels": labels},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": layers.iter().map(|_| json!({"created": CREATED, "created_by": "bootimage-fixture"})).collect::<Vec<_>>(),
        })
    };
    if arch == "arm64" && !minimal {
        config["variant"] = json!("v8");
    }
    put_image(&layout, &tag, &config, descs, docker)?;
    Ok(())
}

fn read_blob(layout: &Path, digest: &str) -> Result<Vec<u8>> {
    let p = layout
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"));
    std::fs::read(&p).with_context(|| format!("{}", p.display()))
}

/// FROM-TAG plus one layer, as `podman build` writes a `FROM base` + `COPY`
/// image: the base manifest's layers kept, one appended; the base config
/// with its labels (and everything else) kept, `rootfs.diff_ids` and
/// `history` extended, `created` updated.
fn derive(args: &[String]) -> Result<()> {
    let o = Opts::parse(
        args,
        &[
            "--layout",
            "--from-tag",
            "--tag",
            "--layer-dir",
            "--created-by",
        ],
        &["--zstd"],
    );
    let (layout, from, tag, dir) = (
        o.path("--layout"),
        o.need("--from-tag"),
        o.need("--tag"),
        o.path("--layer-dir"),
    );
    let zstd = o.has("--zstd");
    let created_by = o
        .get("--created-by")
        .unwrap_or_else(|| "/bin/sh -c #(nop) COPY dir:layer in / ".into());
    let (mut manifest, mut config) = load_image(&layout, &from)?;
    let tar = layer_from_dir(&dir)?;
    config["rootfs"]["diff_ids"]
        .as_array_mut()
        .context("diff_ids")?
        .push(json!(sha256(&tar)));
    config["created"] = json!(CREATED);
    push_history(
        &mut config,
        json!({"created": CREATED, "created_by": created_by}),
    );
    let mut layers = manifest["layers"].as_array().cloned().context("layers")?;
    layers.push(put_layer(&layout, &tar, zstd, false)?);
    // Keep the base manifest's annotations (ostree-ext writes some), drop none.
    manifest["layers"] = json!(layers);
    store_image(&layout, &tag, manifest, &config)
}

/// FROM-TAG with labels set (`--label K=V`) or removed (`--unlabel K`), as
/// `podman build` writes `FROM base` + `LABEL ...`: layers kept, only the
/// config's `config.Labels` changed (and an empty-layer history entry).
fn relabel(args: &[String]) -> Result<()> {
    let o = Opts::parse(
        args,
        &["--layout", "--from-tag", "--tag", "--label", "--unlabel"],
        &[],
    );
    let (layout, from, tag) = (o.path("--layout"), o.need("--from-tag"), o.need("--tag"));
    let (set, unset) = (o.labels()?, o.all("--unlabel"));
    let (manifest, mut config) = load_image(&layout, &from)?;
    if !config["config"].is_object() {
        config["config"] = json!({});
    }
    if !config["config"]["Labels"].is_object() {
        config["config"]["Labels"] = json!({});
    }
    let labels = config["config"]["Labels"]
        .as_object_mut()
        .context("labels")?;
    for k in &unset {
        labels.remove(k);
    }
    for (k, v) in &set {
        labels.insert(k.clone(), json!(v));
    }
    let what: Vec<String> = set.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let entry = json!({"created": CREATED, "created_by": format!("/bin/sh -c #(nop) LABEL {}", what.join(" ")), "empty_layer": true});
    push_history(&mut config, entry);
    store_image(&layout, &tag, manifest, &config)
}

/// Append `entry` to the image config's `history` (made if absent).
fn push_history(config: &mut Value, entry: Value) {
    match config["history"].as_array_mut() {
        Some(h) => h.push(entry),
        None => config["history"] = json!([entry]),
    }
}

/// The OCI manifest and config that TAG names.
fn load_image(layout: &Path, tag: &str) -> Result<(Value, Value)> {
    let desc = find_tag(layout, tag)?;
    let manifest: Value = serde_json::from_slice(&read_blob(
        layout,
        desc["digest"].as_str().context("digest")?,
    )?)?;
    if manifest["mediaType"].as_str() != Some(MT_MANIFEST)
        && desc["mediaType"].as_str() != Some(MT_MANIFEST)
    {
        bail!("{tag} is not an OCI image manifest");
    }
    let config: Value = serde_json::from_slice(&read_blob(
        layout,
        manifest["config"]["digest"].as_str().context("config")?,
    )?)?;
    Ok((manifest, config))
}

/// Write `config`, point `manifest` at it, write that and tag it TAG;
/// prints the manifest digest.
fn store_image(layout: &Path, tag: &str, mut manifest: Value, config: &Value) -> Result<()> {
    let (cd, cn) = write_blob(layout, &serde_json::to_vec(config)?)?;
    manifest["config"] = json!({"mediaType": MT_CONFIG, "digest": cd, "size": cn});
    let (md, mn) = write_blob(layout, &serde_json::to_vec(&manifest)?)?;
    set_tag(
        layout,
        tag,
        json!({"mediaType": MT_MANIFEST, "digest": md, "size": mn}),
    )?;
    println!("{md}");
    Ok(())
}

/// TAG's image with its config's architecture set to ARCH (OCI names:
/// arm64 gets variant v8), as a build on that arch writes it. ostree-ext's
/// encapsulate records the host's arch; the test OS of another arch is
/// encapsulated on this host, then relabelled.
fn set_arch(args: &[String]) -> Result<()> {
    let o = Opts::parse(args, &["--layout", "--tag", "--arch"], &[]);
    let (layout, tag, arch) = (o.path("--layout"), o.need("--tag"), o.need("--arch"));
    let (manifest, mut config) = load_image(&layout, &tag)?;
    config["architecture"] = json!(arch);
    match arch.as_str() {
        "arm64" => config["variant"] = json!("v8"),
        _ => {
            config.as_object_mut().context("config")?.remove("variant");
        }
    }
    store_image(&layout, &tag, manifest, &config)
}

/// An OCI image index of manifests already in the layout, one per arch.
fn index(args: &[String]) -> Result<()> {
    let o = Opts::parse(args, &["--layout", "--tag", "--entry"], &[]);
    let (layout, tag, entries) = (o.path("--layout"), o.need("--tag"), o.all("--entry"));
    let mut manifests = Vec::new();
    for e in entries {
        let (arch, digest) = e.split_once('=').context("--entry ARCH=DIGEST")?;
        let blob = read_blob(&layout, digest)?;
        let m: Value = serde_json::from_slice(&blob)?;
        let mt = m["mediaType"].as_str().unwrap_or(MT_MANIFEST).to_string();
        let mut platform = json!({"architecture": arch, "os": "linux"});
        if arch == "arm64" {
            platform["variant"] = json!("v8");
        }
        manifests.push(
            json!({"mediaType": mt, "digest": digest, "size": blob.len(), "platform": platform}),
        );
    }
    let idx = json!({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": manifests});
    let (d, n) = write_blob(&layout, &serde_json::to_vec(&idx)?)?;
    set_tag(
        &layout,
        &tag,
        json!({"mediaType": MT_INDEX, "digest": d, "size": n}),
    )?;
    println!("{d}");
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
    let o = Opts::parse(args, &["--from", "--from-tag", "--layout", "--tag"], &[]);
    let (from, from_tag, layout, tag) = (
        o.path("--from"),
        o.need("--from-tag"),
        o.path("--layout"),
        o.need("--tag"),
    );
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

/// A flat rootfs split as chunkah does (coreos/chunkah `ocibuilder.rs`):
/// one layer per component, each carrying the parent directories of its
/// files, the smallest components packed into one layer past the limit.
fn chunkah(args: &[String]) -> Result<()> {
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
    let mut owner = std::collections::HashMap::new();
    for line in std::fs::read_to_string(&comps)?.lines() {
        if let Some((p, c)) = line.split_once('\t') {
            owner.insert(p.to_string(), c.to_string());
        }
    }
    let mut entries = Vec::new();
    walk(&rootfs, Path::new(""), &mut entries)?;
    const UNCLAIMED: &str = "chunkah/unclaimed";
    // component -> (bytes, entries); a directory with nothing below it
    // goes with the unclaimed files.
    let mut groups: std::collections::BTreeMap<String, (u64, Vec<PathBuf>)> = Default::default();
    let mut has_child = std::collections::HashSet::new();
    for e in &entries {
        let mut p = e.parent();
        while let Some(d) = p {
            if !has_child.insert(d.to_path_buf()) {
                break;
            }
            p = d.parent();
        }
    }
    for e in &entries {
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
    let mut order: Vec<(String, (u64, Vec<PathBuf>))> = groups.into_iter().collect();
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
    init_layout(&layout)?;
    let (mut descs, mut diff_ids, mut history) = (Vec::new(), Vec::new(), Vec::new());
    for (name, (_, files)) in &order {
        let mut b = tar::Builder::new(Vec::new());
        b.follow_symlinks(false);
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
        for r in &paths {
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
        }
        let tar = b.into_inner()?;
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

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let Some(cmd) = args.get(1) else { usage() };
    match cmd.as_str() {
        "add-image" => add_image(&args[2..]),
        "derive" => derive(&args[2..]),
        "set-arch" => set_arch(&args[2..]),
        "relabel" => relabel(&args[2..]),
        "index" => index(&args[2..]),
        "merge" => merge(&args[2..]),
        "chunkah" => chunkah(&args[2..]),
        "digest" => {
            let o = Opts::parse(&args[2..], &["--layout", "--tag"], &[]);
            let d = find_tag(&o.path("--layout"), &o.need("--tag"))?;
            println!("{}", d["digest"].as_str().unwrap_or(""));
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
