//! The ostree deployment on a mounted root (boot filesystem mounted at
//! `<root>/boot`), in the order of docs/contract.md §2: init-fs, os-init, repo config,
//! `/boot/efi`, the `ignition.firstboot` stamp, deploy with kargs, aleph
//! version file, `platforms.json`.
use crate::oscontainer::buildroot::{Bind, Buildroot, BIND_ROOT};
use crate::util::cmd;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The stamp file GRUB looks for on the boot filesystem (docs/contract.md §2).
pub const FIRSTBOOT_STAMP: &str = "ignition.firstboot";
/// The aleph version file at the root of the root filesystem, as osbuild's
/// `org.osbuild.ostree.aleph` names it (`ALEPH_FILENAME`)...
pub const ALEPH: &str = ".aleph-version.json";
/// ...and the name CoreOS tools read (bootupd, coreos-installer), a symlink
/// to it (the stage's `coreos_compat`).
pub const ALEPH_COREOS: &str = ".coreos-aleph-version.json";
/// Where platforms.json goes on the boot filesystem.
pub const BOOT_PLATFORMS_JSON: &str = "coreos/platforms.json";
/// Set on the sysroot repo of every arch but s390x (cosa).
pub const BLS_APPEND_EXCEPT_DEFAULT: (&str, &str) =
    ("sysroot.bls-append-except-default", "grub_users=\"\"");
/// Repo configuration set on the sysroot repo (docs/contract.md §2).
pub const REPO_CONFIG: [(&str, &str); 3] = [
    ("sysroot.readonly", "true"),
    ("sysroot.bootloader", "none"),
    ("sysroot.bootprefix", "true"),
];

/// What to deploy.
pub struct Deploy<'a> {
    pub source_repo: &'a Path,
    pub commit: &'a str,
    pub osname: &'a str,
    /// Kernel arguments, in order (before the per-platform ones).
    pub kargs: &'a [String],
    /// Content of the deployment's origin file.
    pub origin: String,
    pub aleph: Aleph,
    /// `platforms.json` of the OS, copied verbatim when present.
    pub platforms_json: Option<&'a [u8]>,
    /// The disk IPLs through zipl (s390x): the sysroot's bootloader is zipl.
    pub zipl: bool,
    /// Whose ostree lays the OS down.
    pub tool: Tool<'a>,
    /// The OS's SELinux labeller: the deployment's `/etc`, the
    /// stateroot's `/var` and then the whole physical root after the
    /// deploy (the empty physical root before init-fs, with the boot
    /// filesystem's mount point, and `/boot`, once everything is written
    /// there, are the caller's).
    pub labeller: Option<&'a super::selinux::Labeller<'a>>,
    /// The image's refs, as a node that pulled it holds them (ostree-native).
    pub image_refs: Option<&'a crate::oscontainer::ImageRefs>,
}

/// Whose ostree runs the init-fs, repo config, pull and deploy.
#[derive(Debug, Clone, Copy)]
pub enum Tool<'a> {
    /// The OS's own, from its buildroot (the deploy a node would make:
    /// composefs image, `/var` seeding, labels as that ostree writes them).
    Os(&'a Buildroot),
    /// This machine's (the OS ships no ostree CLI).
    Host,
}

/// The ostree that deploys: runs its commands against the sysroot at a host path, translating
/// paths for the buildroot when the OS's ostree runs.
struct Ostree<'a> {
    tool: Tool<'a>,
    binds: Vec<Bind>,
    /// The sysroot and the source repo as the tool sees them.
    sysroot: String,
    source: String,
}

impl<'a> Ostree<'a> {
    fn new(tool: Tool<'a>, root: &Path, source: &Path) -> Self {
        match tool {
            Tool::Host => Ostree {
                tool,
                binds: Vec::new(),
                sysroot: root.display().to_string(),
                source: source.display().to_string(),
            },
            Tool::Os(_) => {
                let sysroot = format!("{BIND_ROOT}/sysroot");
                let src = format!("{BIND_ROOT}/source");
                Ostree {
                    tool,
                    binds: vec![
                        Bind {
                            host: root.to_path_buf(),
                            guest: sysroot.clone(),
                            read_only: false,
                        },
                        Bind {
                            host: source.to_path_buf(),
                            guest: src.clone(),
                            read_only: true,
                        },
                    ],
                    sysroot,
                    source: src,
                }
            }
        }
    }

    /// `--sysroot=` of the sysroot, as the tool sees it.
    fn sysroot_arg(&self) -> String {
        format!("--sysroot={}", self.sysroot)
    }

    /// `--repo=` of the sysroot's repo, as the tool sees it.
    fn repo_arg(&self) -> String {
        format!("--repo={}/ostree/repo", self.sysroot)
    }

    /// `ostree config set K V` on the sysroot repo.
    fn config_set(&self, k: &str, v: &str) -> Result<()> {
        cmd::run(&mut self.ostree(vec![
            "config".into(),
            self.repo_arg(),
            "set".into(),
            k.into(),
            v.into(),
        ])?)
        .with_context(|| format!("setting {k} in the sysroot repo"))?;
        Ok(())
    }

    fn ostree(&self, args: Vec<String>) -> Result<std::process::Command> {
        Ok(match self.tool {
            Tool::Host => cmd::new("ostree", args),
            Tool::Os(b) => {
                let mut argv: Vec<&str> = vec!["/usr/bin/ostree"];
                argv.extend(args.iter().map(String::as_str));
                b.command(&self.binds, &argv)?
            }
        })
    }
}

/// `/.coreos-aleph-version.json`: what the disk was built from, with the keys
/// osbuild's `org.osbuild.ostree.aleph` writes (`version`, `ref`,
/// `ostree-commit`, `container-image`). No `build` key next to `version`:
/// bootupd reads `build` as an alias of `version` and rejects a file with
/// both ("duplicate field `version`", so `bootupctl status` fails).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Aleph {
    #[serde(rename = "ref")]
    pub ref_: String,
    pub version: String,
    #[serde(rename = "ostree-commit")]
    pub ostree_commit: String,
    #[serde(rename = "container-image", skip_serializing_if = "Option::is_none")]
    pub container_image: Option<AlephImage>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct AlephImage {
    #[serde(rename = "image-name")]
    pub image_name: String,
    #[serde(rename = "image-digest")]
    pub image_digest: String,
    #[serde(rename = "container-imgref")]
    pub container_imgref: String,
    /// The image's labels (osbuild's aleph stage writes them).
    #[serde(
        rename = "image-labels",
        default,
        skip_serializing_if = "std::collections::BTreeMap::is_empty"
    )]
    pub image_labels: std::collections::BTreeMap<String, String>,
}

/// The deployment made.
#[derive(Debug, Clone)]
pub struct Deployed {
    /// Path of the deployment's root, relative to the sysroot.
    pub deploy_dir: PathBuf,
    /// The BLS entries ostree wrote, relative to the boot filesystem.
    pub entries: Vec<PathBuf>,
    /// Files labelled per tree (`/etc`, `/var`, `/`: the physical root).
    pub labelled: Vec<(String, usize)>,
}

fn write(path: &Path, data: &[u8]) -> Result<()> {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?;
    }
    std::fs::write(path, data).with_context(|| format!("writing {}", path.display()))
}

/// BLS entries under `<boot>/loader/entries`, relative to `boot`.
pub fn bls_entries(boot: &Path) -> Result<Vec<PathBuf>> {
    let dir = boot.join("loader/entries");
    let mut v = Vec::new();
    for e in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let n = e.file_name();
        if n.to_string_lossy().ends_with(".conf") {
            v.push(PathBuf::from("loader/entries").join(n));
        }
    }
    v.sort();
    Ok(v)
}

/// The one deployment's root under the sysroot `root`
/// (`ostree/deploy/<stateroot>/deploy/<checksum>.<serial>`).
pub fn deployment_root(root: &Path) -> Result<PathBuf> {
    let mut deployments = Vec::new();
    let base = root.join("ostree/deploy");
    for os in std::fs::read_dir(&base).with_context(|| format!("reading {}", base.display()))? {
        let dir = os?.path().join("deploy");
        if !dir.is_dir() {
            continue;
        }
        for e in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let p = e?.path();
            if p.is_dir() {
                deployments.push(p);
            }
        }
    }
    if deployments.len() != 1 {
        bail!(
            "expected one deployment under {}/*/deploy, found {}",
            base.display(),
            deployments.len()
        );
    }
    Ok(deployments.remove(0))
}

/// Deploy into the mounted sysroot at `root`.
pub fn deploy(root: &Path, d: &Deploy) -> Result<Deployed> {
    let t = Ostree::new(d.tool, root, d.source_repo);
    let mut labelled = Vec::new();
    init_sysroot(&t, d)?;
    crate::util::cancel::check()?;
    pull_commit(&t, d)?;
    let boot = root.join("boot");
    deploy_commit(root, &boot, &t, d)?;
    if d.zipl {
        // cosa build.common.ipp.yaml: `bootloader: zipl` once deployed, so
        // that later updates on the machine run zipl.
        t.config_set("sysroot.bootloader", "zipl")?;
    }
    let dep = deployment_root(root)?;
    if let Some(l) = d.labeller {
        label_deployment(l, &dep, &mut labelled)?;
    }
    write_root_files(root, &boot, d)?;
    // Everything ostree and we made on the physical root (`/ostree`, the
    // repo, its config and refs, the origin file, the aleph file), now
    // that nothing else is written there: ostree labelled none of it.
    if let Some(l) = d.labeller {
        labelled.push(("/".to_string(), l.label_physical_root(root)?));
    }
    let entries = bls_entries(&boot)?;
    if entries.is_empty() {
        bail!("ostree wrote no boot loader entry under /boot/loader/entries");
    }
    Ok(Deployed {
        deploy_dir: dep.strip_prefix(root).unwrap_or(&dep).to_path_buf(),
        entries,
        labelled,
    })
}

/// `ostree admin init-fs` and `os-init`, then the sysroot repo's
/// configuration (docs/contract.md §2).
fn init_sysroot(t: &Ostree, d: &Deploy) -> Result<()> {
    cmd::run(&mut t.ostree(vec![
        "admin".into(),
        "init-fs".into(),
        "--modern".into(),
        t.sysroot.clone(),
    ])?)
    .context("ostree admin init-fs")?;
    cmd::run(&mut t.ostree(vec![
        "admin".into(),
        "os-init".into(),
        t.sysroot_arg(),
        d.osname.into(),
    ])?)
    .with_context(|| format!("ostree admin os-init {}", d.osname))?;
    for (k, v) in REPO_CONFIG {
        t.config_set(k, v)?;
    }
    if !d.zipl {
        // cosa build.common.ipp.yaml, every arch but s390x: entries other
        // than the default get `grub_users ""` (anyone may boot them).
        let (k, v) = BLS_APPEND_EXCEPT_DEFAULT;
        t.config_set(k, v)?;
    }
    Ok(())
}

/// The commit into the sysroot repo (`pull-local`), with the image's refs
/// when it came from an image.
fn pull_commit(t: &Ostree, d: &Deploy) -> Result<()> {
    let repo = t.repo_arg();
    // The merge commit, and each layer's ref with its commit, as
    // `ostree container image pull` leaves them on a node.
    let mut pull = vec![
        "pull-local".into(),
        repo.clone(),
        t.source.clone(),
        d.commit.to_string(),
    ];
    if let Some(r) = d.image_refs {
        // ostree-ext sets these refs itself, unbound: the base layer's
        // commit is bound to the OS build's own branch, which pull-local
        // would otherwise insist on.
        pull.push("--disable-verify-bindings".into());
        pull.extend(r.layers.iter().cloned());
    }
    cmd::run(&mut t.ostree(pull)?)
        .with_context(|| format!("copying commit {} into the sysroot repo", d.commit))?;
    if let Some(r) = d.image_refs {
        // The image ref under the reference the origin names: what bootc
        // and rpm-ostree resolve the booted image through.
        cmd::run(&mut t.ostree(vec![
            "refs".into(),
            repo,
            format!("--create={}", r.image),
            d.commit.into(),
        ])?)
        .with_context(|| format!("creating the image ref {} in the sysroot repo", r.image))?;
    }
    Ok(())
}

/// `/boot/efi` and the first-boot stamp on the boot filesystem `boot`,
/// then `ostree admin deploy` of the commit with its origin file and
/// kernel arguments (the origin file is removed after).
fn deploy_commit(root: &Path, boot: &Path, t: &Ostree, d: &Deploy) -> Result<()> {
    std::fs::create_dir_all(boot.join("efi")).context("creating /boot/efi")?;
    write(&boot.join(FIRSTBOOT_STAMP), b"")?;
    let origin_rel = format!("ostree/deploy/{}/origin.tmp", d.osname);
    let origin = root.join(&origin_rel);
    write(&origin, d.origin.as_bytes())?;
    let mut args: Vec<String> = vec![
        "admin".into(),
        "deploy".into(),
        t.sysroot_arg(),
        format!("--os={}", d.osname),
        format!("--origin-file={}/{origin_rel}", t.sysroot),
        "--karg-none".into(),
    ];
    args.extend(d.kargs.iter().map(|k| format!("--karg-append={k}")));
    args.push(d.commit.into());
    crate::util::cancel::pause_point("deploy")?;
    cmd::run(&mut t.ostree(args)?)
        .with_context(|| format!("deploying {} as stateroot {}", d.commit, d.osname))?;
    std::fs::remove_file(&origin).ok();
    Ok(())
}

/// What an ostree writes into a deployment that its commit does not carry
/// (the composefs image, `ostree admin deploy` since 2025.1): no file
/// object, so labelled by path like the rest of what ostree makes.
const DEPLOYMENT_FILES_OF_OSTREE: [&str; 1] = [".ostree.cfs"];

/// Label the deployment `dep`'s `/etc`, what ostree wrote into it besides
/// the commit, and its stateroot's `/var`; the counts go to `labelled`.
fn label_deployment(
    l: &super::selinux::Labeller<'_>,
    dep: &Path,
    labelled: &mut Vec<(String, usize)>,
) -> Result<()> {
    labelled.push(("/etc".into(), l.label(&dep.join("etc"), "/etc")?));
    for f in DEPLOYMENT_FILES_OF_OSTREE {
        let p = dep.join(f);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
            let at = format!("/{f}");
            let n = l.label(&p, &at)?;
            labelled.push((at, n));
        }
    }
    let var = dep
        .parent()
        .and_then(Path::parent)
        .context("the deployment has no stateroot")?
        .join("var");
    labelled.push(("/var".into(), l.label(&var, "/var")?));
    Ok(())
}

/// The aleph file and its CoreOS name at the top of the physical root
/// `root`, and `platforms.json` (when the OS has one) on `boot`.
fn write_root_files(root: &Path, boot: &Path, d: &Deploy) -> Result<()> {
    write(
        &root.join(ALEPH),
        &serde_json::to_vec_pretty(&d.aleph).context("serialising the aleph file")?,
    )?;
    std::os::unix::fs::symlink(ALEPH, root.join(ALEPH_COREOS))
        .with_context(|| format!("linking /{ALEPH_COREOS} to {ALEPH}"))?;
    if let Some(p) = d.platforms_json {
        write(&boot.join(BOOT_PLATFORMS_JSON), p)?;
    }
    Ok(())
}
