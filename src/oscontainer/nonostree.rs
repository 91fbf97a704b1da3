//! Bootable images with no ostree commit in them at all: chunkah's (a flat
//! root filesystem split into content-based layers, `ostree.commit` and
//! `ostree.final-diffid` stripped; fedora-coreos-config `Containerfile`
//! with `BUILDER_IMG_CHUNKER=chunkah`), or any bootc image built `FROM
//! scratch`. ostree-ext 0.15 refuses them ("No ostree.final-diffid label
//! found, not an ostree encapsulated container"); today's ostree-ext (bootc
//! `crates/ostree-ext/src/container/store.rs`) treats every layer as a
//! derived one, and this importer does what it does:
//!
//! 1. each layer is committed as its own ref `ostree/container/blob/<digest>`
//!    (`tar::write_tar`: `/etc` to `/usr/etc`, top levels outside `/usr`
//!    kept, since such a root is taken to be composefs/transient; `/var`
//!    kept as is for an ostree ≥ 2024.3, else moved to
//!    `/usr/share/factory/var`);
//! 2. the layers are checked out over each other in order, whiteouts
//!    processed (`write_merge_commit_impl`), and the empty
//!    `/usr/etc/hostname` and `/usr/etc/resolv.conf` a container build
//!    leaves are removed (`cleanup_root`);
//! 3. the merged tree is committed labelled with the SELinux policy *of the
//!    merged tree*, with the manifest, config and digest in the commit's
//!    metadata and the image's creation time as its timestamp, no parent;
//!    each layer is recommitted with the same labels (`relabel_layers`), so
//!    that layers and merge share their objects.
//!
//! Steps 3's commits are written by the OS's own ostree, run from a
//! buildroot of the merged tree itself (a node's bootc runs the OS's
//! libostree and libselinux); where the OS ships none that runs here, by
//! this host's, and the run says so.
use super::buildroot::{self, Bind, Buildroot};
use super::Cache;
use crate::image::fetch::{Fetcher, Image};
use crate::util::arch::Arch;
use crate::util::cmd;
use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// The label whose absence makes an image non-ostree for ostree-ext
/// (`parse_manifest_layout`: no `ostree.final-diffid` → every layer is
/// derived).
pub const LABEL_FINAL_DIFFID: &str = "ostree.final-diffid";

/// True when ostree-ext would find no ostree commit layer in the image.
pub fn is_nonostree(labels: &BTreeMap<String, String>) -> bool {
    !labels.contains_key(LABEL_FINAL_DIFFID)
}

/// What the import made.
pub struct Imported {
    pub merge_commit: String,
    /// The first layer's commit (ostree-ext's `base_commit` of such an
    /// image: `query_image_commit` takes the first layer's ref).
    pub base_commit: String,
    /// Files the layers held outside what ostree keeps, as
    /// `<layer> /<toplevel>: <n> file(s)`.
    pub dropped: Vec<String>,
    /// Whose ostree wrote the merge commit, for the console and meta.json.
    pub committed_by: String,
}

/// ostree ≥ 2024.3 seeds the stateroot's `/var` from the commit; older
/// ones need it under `/usr/share/factory/var` (ostree-ext `tar/write.rs`).
fn retains_var(version: Option<(u32, u32)>) -> bool {
    version.is_some_and(|(y, m)| y > 2024 || (y == 2024 && m >= 3))
}

/// Import `img` (whose labels say it carries no ostree commit) into the
/// cache's repo under `image_ref`.
pub async fn import(
    cache: &Cache,
    fetcher: &Fetcher,
    img: &Image,
    image_ref: &str,
) -> Result<Imported> {
    if !crate::util::owner::is_root() {
        bail!(
            "OS image {} carries no ostree commit (a chunkah-style image: every layer plain files): merging its layers keeps each file's owner, which needs root here; run bootimage-gen as root (or import it once as root into the same --cache-dir)",
            img.reference
        );
    }
    tracing::info!(
        "OS image {} has no ostree commit ({} plain layers, chunkah-style): importing it as today's ostree-ext does, every layer a derived one",
        img.reference,
        img.manifest.layers().len()
    );
    // "For generic images we assume they're using composefs": every top
    // level is kept.
    import_layers(
        cache,
        fetcher,
        img,
        image_ref,
        None,
        img.manifest.layers(),
        true,
    )
    .await
}

/// Import the derived `layers` of `img` over its already imported ostree
/// `base` commit, as today's ostree-ext does (see the module's steps; the
/// merge commit's parent is the base, ostree PR #3523): each layer
/// committed unlabelled, the whole merged tree labelled with its own
/// policy (a node image's `file_contexts.local` or `semanage` changes
/// apply, where ostree-ext 0.15 labels derived layers with the base's).
pub async fn import_derived(
    cache: &Cache,
    fetcher: &Fetcher,
    img: &Image,
    image_ref: &str,
    base: &str,
    layers: &[ostree_ext::oci_spec::image::Descriptor],
) -> Result<Imported> {
    let allow_nonusr = root_is_transient(&cache.repo.path, base)?;
    import_layers(
        cache,
        fetcher,
        img,
        image_ref,
        Some(base),
        layers,
        allow_nonusr,
    )
    .await
}

/// Whether the OS commit's `prepare-root.conf` makes `/` transient or
/// composefs (ostree-ext `ostree_prepareroot::overlayfs_root_enabled`:
/// then derived layers may write outside /usr, /etc and /var).
fn root_is_transient(repo: &Path, commit: &str) -> Result<bool> {
    for p in [
        "/etc/ostree/prepare-root.conf",
        "/usr/lib/ostree/prepare-root.conf",
    ] {
        let Ok(text) = cmd::run_str(&mut cmd::new(
            "ostree",
            [
                format!("--repo={}", repo.display()),
                "cat".into(),
                commit.into(),
                p.into(),
            ],
        )) else {
            continue;
        };
        let kf = ostree_ext::glib::KeyFile::new();
        kf.load_from_data(&text, ostree_ext::glib::KeyFileFlags::NONE)
            .with_context(|| format!("parsing {p} of commit {commit}"))?;
        return ostree_ext::ostree_prepareroot::overlayfs_enabled_in_config(&kf);
    }
    Ok(false)
}

/// The shared steps: `layers` written, merged over `base` (if any),
/// committed and relabelled by the merged tree's ostree and policy.
async fn import_layers(
    cache: &Cache,
    fetcher: &Fetcher,
    img: &Image,
    image_ref: &str,
    base: Option<&str>,
    layers: &[ostree_ext::oci_spec::image::Descriptor],
    allow_nonusr: bool,
) -> Result<Imported> {
    let repo = ostree_ext::ostree::Repo::new_for_path(&cache.repo.path);
    repo.open(ostree_ext::gio::Cancellable::NONE)
        .context("opening the cache repo")?;
    let scratch = tempfile::Builder::new()
        .prefix("layers-")
        .tempdir_in(&fetcher.scratch)
        .context("creating a scratch directory for the layer merge")?;
    // The OS's ostree decides how /var is written; it is only knowable
    // from the merged tree, so the layers go in for a current ostree
    // first and again if the OS's turns out older.
    let mut retain_var = true;
    loop {
        let (commits, dropped) = write_layers(
            &repo,
            fetcher,
            img,
            layers,
            scratch.path(),
            allow_nonusr,
            retain_var,
        )
        .await?;
        let merged = scratch.path().join("merged");
        merge(&cache.repo.path, base, &commits, &merged, img)?;
        let br = os_buildroot(&merged, scratch.path(), img.arch()?, img);
        let version = br
            .as_ref()
            .and_then(|b| parse_year_release(&b.ostree_version));
        if retain_var && !retains_var(version) {
            tracing::info!(
                "OS image {}: its ostree ({}) predates 2024.3: its /var goes to /usr/share/factory/var; layers imported again for that",
                img.reference,
                br.as_ref().map_or("none that runs here", |b| b.ostree_version.as_str())
            );
            for (r, _) in &commits {
                repo.set_ref_immediate(None, r, None, ostree_ext::gio::Cancellable::NONE)?;
            }
            let _ = std::fs::remove_dir_all(&merged);
            retain_var = false;
            continue;
        }
        let mut args = plain_commit();
        if let Some(b) = base {
            args.push(format!("--parent={b}"));
        }
        args.push(format!("--timestamp=@{}", created(img).unwrap_or(0)));
        for (k, v) in commit_metadata(img)? {
            args.push(format!("--add-metadata-string={k}={v}"));
        }
        let (merge_commit, committed_by) = commit_and_relabel(
            &cache.repo.path,
            &merged,
            br.as_ref(),
            img,
            args,
            &commits,
            image_ref,
        )?;
        return Ok(Imported {
            merge_commit,
            base_commit: base.map_or_else(|| commits[0].1.clone(), str::to_string),
            dropped,
            committed_by,
        });
    }
}

fn parse_year_release(v: &str) -> Option<(u32, u32)> {
    let mut it = v.split('.');
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

fn layer_ref(digest: &str) -> Result<String> {
    ostree_ext::refescape::prefix_escape_for_ref(super::LAYER_REF_PREFIX, digest)
}

/// Step 1: each layer as its own commit (reused when its ref exists);
/// `(ref, commit)` in manifest order, and what was filtered out.
async fn write_layers(
    repo: &ostree_ext::ostree::Repo,
    fetcher: &Fetcher,
    img: &Image,
    layers: &[ostree_ext::oci_spec::image::Descriptor],
    scratch: &Path,
    allow_nonusr: bool,
    retain_var: bool,
) -> Result<(Vec<(String, String)>, Vec<String>)> {
    let mut out = Vec::new();
    let mut dropped = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        crate::util::cancel::check()?;
        let r = layer_ref(l.digest().as_ref())?;
        if let Some(c) = repo.resolve_rev(&r, true)? {
            out.push((r, c.to_string()));
            continue;
        }
        tracing::info!(
            "layer {}/{} of {}: {} ({} MiB)",
            i + 1,
            layers.len(),
            img.reference,
            l.digest(),
            l.size() >> 20
        );
        let blob = scratch.join("layer.blob");
        fetcher.fetch_blob_to(img, l, &blob).await?;
        let f = tokio::fs::File::open(&blob)
            .await
            .with_context(|| format!("opening {}", blob.display()))?;
        let mut opts = ostree_ext::tar::WriteTarOptions::default();
        opts.allow_nonusr = allow_nonusr;
        opts.retain_var = retain_var;
        let res = ostree_ext::tar::write_tar(
            repo,
            tokio::io::BufReader::new(f),
            l.media_type().clone(),
            &r,
            Some(opts),
        )
        .await
        .map_err(|e| anyhow!("OS image {}: layer {}: {e:#}", img.reference, l.digest()))?;
        let _ = std::fs::remove_file(&blob);
        for (dir, n) in res.filtered {
            if !super::IGNORED_TOPLEVELS.contains(&dir.as_str()) {
                dropped.push(format!("{} /{dir}: {n} file(s)", l.digest()));
            }
        }
        out.push((r, res.commit));
    }
    if out.is_empty() {
        bail!("OS image {} has no layers", img.reference);
    }
    Ok((out, dropped))
}

/// Step 2: the layers checked out over each other, whiteouts processed,
/// owners and xattrs as committed (a copy, as root), and the checks that
/// make it an OS.
fn merge(
    repo: &Path,
    base: Option<&str>,
    commits: &[(String, String)],
    dest: &Path,
    img: &Image,
) -> Result<()> {
    if let Some(b) = base {
        checkout(repo, b, dest, false)
            .with_context(|| format!("OS image {}: its base commit", img.reference))?;
    }
    for (r, c) in commits {
        checkout(repo, c, dest, true)
            .with_context(|| format!("OS image {}: layer {r}", img.reference))?;
    }
    for f in ["usr/etc/hostname", "usr/etc/resolv.conf"] {
        let p = dest.join(f);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file() && m.len() == 0) {
            std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
        }
    }
    let modules = dest.join("usr/lib/modules");
    let kernels: Vec<String> = std::fs::read_dir(&modules)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("vmlinuz").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if kernels.is_empty() {
        bail!(
            "OS image {} {}and no kernel: no /usr/lib/modules/<version>/vmlinuz once its {} layer(s) are merged; a bootable image keeps its kernel there (bootc docs `bootc-images.md`): it is not a bootable OS image, or its last layers removed the kernel",
            img.reference,
            if base.is_none() { "carries no ostree commit " } else { "" },
            commits.len()
        );
    }
    Ok(())
}

/// A buildroot made of the merged tree (hardlinks, plus the mount points
/// the namespace needs, which the merged tree itself must not gain); `None`
/// when the OS ships no ostree that runs here.
fn os_buildroot(merged: &Path, scratch: &Path, arch: Arch, img: &Image) -> Option<Buildroot> {
    if !merged.join(buildroot::OSTREE).is_file() {
        tracing::info!("OS image {} ships no /{}", img.reference, buildroot::OSTREE);
        return None;
    }
    let dir = scratch.join("buildroot");
    let _ = std::fs::remove_dir_all(&dir);
    let made = cmd::run(
        std::process::Command::new("cp")
            .arg("-al")
            .arg(merged)
            .arg(&dir),
    )
    .and_then(|_| Buildroot::from_tree(dir, arch));
    match made {
        Ok(b) => Some(b),
        Err(e) => {
            tracing::warn!(
                "OS image {}: its ostree cannot run here ({e:#}): this host's ostree writes its merge commit",
                img.reference
            );
            None
        }
    }
}

/// The merge commit's metadata as ostree-ext writes it (`store.rs`
/// `META_MANIFEST_DIGEST`, `META_MANIFEST`, `META_CONFIG`).
fn commit_metadata(img: &Image) -> Result<Vec<(&'static str, String)>> {
    Ok(vec![
        ("ostree.manifest-digest", img.digest.clone()),
        ("ostree.manifest", serde_json::to_string(&img.manifest)?),
        (
            "ostree.container.image-config",
            serde_json::to_string(&img.config)?,
        ),
        (
            "ostree.importer.version",
            format!("bootimage-gen {}", env!("CARGO_PKG_VERSION")),
        ),
    ])
}

/// The image's creation time, as ostree-ext's `timestamp_of_manifest_or_config`:
/// the manifest's `org.opencontainers.image.created`, else the config's `created`.
fn created(img: &Image) -> Option<i64> {
    let parse = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.timestamp())
    };
    img.manifest
        .annotations()
        .as_ref()
        .and_then(|a| a.get("org.opencontainers.image.created"))
        .and_then(|s| parse(s))
        .or_else(|| img.config.created().as_deref().and_then(parse))
}

/// `ostree commit ARGS --selinux-policy=<merged> --tree=dir=<tree>` into
/// `repo`, by the OS's ostree in its buildroot, else by this host's; the
/// new commit's checksum.
fn commit_tree(
    repo: &Path,
    merged: &Path,
    tree: &Path,
    br: Option<&Buildroot>,
    args: &[String],
) -> Result<String> {
    const POLICY: &str = "/run/bootimage/policy";
    const TREE: &str = "/run/bootimage/tree";
    const REPO: &str = "/run/bootimage/repo";
    let out = match br {
        Some(b) => {
            let bind = |host: &Path, guest: &str, read_only| Bind {
                host: host.to_path_buf(),
                guest: guest.into(),
                read_only,
            };
            let binds = [
                bind(merged, POLICY, true),
                bind(tree, TREE, true),
                bind(repo, REPO, false),
            ];
            let mut argv: Vec<String> = vec!["/usr/bin/ostree".into(), format!("--repo={REPO}")];
            argv.extend(args.iter().cloned());
            argv.extend([
                format!("--selinux-policy={POLICY}"),
                format!("--tree=dir={TREE}"),
            ]);
            let a: Vec<&str> = argv.iter().map(String::as_str).collect();
            cmd::run_str(&mut b.command(&binds, &a)?)?
        }
        None => {
            let mut c = cmd::new("ostree", [format!("--repo={}", repo.display())]);
            c.args(args)
                .arg(format!("--selinux-policy={}", merged.display()))
                .arg(format!("--tree=dir={}", tree.display()));
            cmd::run_str(&mut c)?
        }
    };
    Ok(out.trim().to_string())
}

fn plain_commit() -> Vec<String> {
    vec!["commit".into(), "--orphan".into(), "--no-bindings".into()]
}

/// `merged` committed with `args` and its own policy's labels, each of
/// `layers` recommitted with the same labels (their refs moved), and
/// `image_ref` set to the new merge commit.
fn commit_and_relabel(
    repo: &Path,
    merged: &Path,
    br: Option<&Buildroot>,
    img: &Image,
    args: Vec<String>,
    layers: &[(String, String)],
    image_ref: &str,
) -> Result<(String, String)> {
    let commit = commit_tree(repo, merged, merged, br, &args)
        .with_context(|| format!("OS image {}: committing its merged layers", img.reference))?;
    let who = match br {
        Some(b) => format!("the OS's ostree {}", b.ostree_version),
        None => "this host's ostree (the OS ships none that runs here)".to_string(),
    };
    let r = super::repo::Repo {
        path: repo.to_path_buf(),
    };
    // The layers relabelled with the same policy, so that they share the
    // merge commit's objects (ostree-ext `relabel_layers`).
    let co = merged.with_file_name("layer");
    for (lref, lcommit) in layers {
        crate::util::cancel::check()?;
        let _ = std::fs::remove_dir_all(&co);
        checkout(repo, lcommit, &co, false)?;
        let mut a = plain_commit();
        if let Some(v) = r.metadata_string(lcommit, "ostree.importer.version")? {
            a.push(format!("--add-metadata-string=ostree.importer.version={v}"));
        }
        let new = commit_tree(repo, merged, &co, br, &a)
            .with_context(|| format!("OS image {}: relabelling layer {lref}", img.reference))?;
        r.set_ref(lref, &new)?;
    }
    let _ = std::fs::remove_dir_all(&co);
    r.set_ref(image_ref, &commit)?;
    Ok((commit, who))
}

/// `ostree checkout` of `commit` into `dest` (a copy, as root: each file's
/// owner and xattrs as committed), over what is there, with its
/// whiteouts applied (layers merging) or kept as files (a layer alone).
fn checkout(repo: &Path, commit: &str, dest: &Path, whiteouts: bool) -> Result<()> {
    let mut c = cmd::new(
        "ostree",
        [
            "checkout".to_string(),
            format!("--repo={}", repo.display()),
            "--union".into(),
        ],
    );
    if whiteouts {
        c.arg("--whiteouts");
    }
    cmd::run(c.arg(commit).arg(dest)).with_context(|| format!("checking out {commit}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn var_is_kept_from_2024_3() {
        assert!(!retains_var(None));
        assert!(!retains_var(Some((2022, 7))));
        assert!(!retains_var(Some((2024, 2))));
        assert!(retains_var(Some((2024, 3))));
        assert!(retains_var(Some((2026, 4))));
        assert_eq!(parse_year_release("2026.4"), Some((2026, 4)));
        assert_eq!(parse_year_release("x"), None);
    }

    #[test]
    fn nonostree_is_told_by_the_final_diffid_label() {
        let mut l = BTreeMap::new();
        l.insert("containers.bootc".to_string(), "1".to_string());
        assert!(is_nonostree(&l));
        l.insert(LABEL_FINAL_DIFFID.to_string(), "sha256:x".to_string());
        assert!(!is_nonostree(&l));
    }
}
