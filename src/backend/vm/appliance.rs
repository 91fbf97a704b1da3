//! The appliance the VM boots: a Linux kernel and a small root built by
//! `supermin` from this host's installed packages, plus our own `/init`
//! (`init.rs`). In: the host kernel (`host.rs`), the package list
//! (`packages.rs`); out: an [`Appliance`] under `<cache>/appliance/<key>`,
//! the key hashing every input so it is rebuilt only when one changes,
//! held by a shared lock while a VM uses it.
use super::host::host_kernel;
use super::init::{init_script, APPLIANCE_FORMAT};
use super::packages::{appliance_packages, require_installed};
use crate::util::{cmd, progress::Reporter};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Size of the appliance's (sparse, copy-on-write) root filesystem.
const ROOT_SIZE: &str = "4G";

/// A built appliance.
pub(super) struct Appliance {
    pub(super) kernel: PathBuf,
    pub(super) initrd: PathBuf,
    pub(super) root: PathBuf,
    /// Shared while the VM uses it: `gc` and newer builds leave it alone.
    _use: crate::util::lock::Lock,
}

/// Build (or reuse) the appliance under `dir`, with `extra` packages.
pub(super) fn appliance(
    dir: &Path,
    exe: &Path,
    extra: &[String],
    r: &Reporter,
) -> Result<Appliance> {
    let (kernel, modules) = host_kernel()?;
    require_installed(extra)?;
    let pkgs = appliance_packages(exe, extra)?;
    let key = appliance_key(&pkgs, &kernel, &modules)?;
    let out = dir.join(&key[..16]);
    // The lock lives with the cache's other locks (`<cache>/locks/`), not
    // among the appliances: exclusive while building, shared while a VM
    // uses it.
    let locks = dir.parent().unwrap_or(dir).join("locks");
    let lock_path = appliance_lock(&locks, &key[..16]);
    let what = format!("using the VM appliance {}", out.display());
    if out.join("root").exists() {
        r.note(&format!("VM appliance: cached {}", out.display()));
        return open(&out, &lock_path, &what);
    }
    // One build per appliance at a time; a run that waited finds the other's.
    let lock = crate::util::lock::Lock::wait(
        &lock_path,
        &format!("building the VM appliance {}", out.display()),
    )?;
    if out.join("root").exists() {
        r.note(&format!(
            "VM appliance: built by another run {}",
            out.display()
        ));
        drop(lock);
        return open(&out, &lock_path, &what);
    }
    let step = r.step("VM appliance");
    build(dir, &out, &pkgs, &kernel, &modules)?;
    remove_older(dir, &out, &locks);
    step.done(&format!("{}", out.display()));
    drop(lock);
    open(&out, &lock_path, &what)
}

/// The appliance's cache key: a hash of everything it is made of (its
/// format, the init script, the packages' versions, the kernel and its
/// modules, supermin's version).
fn appliance_key(pkgs: &[String], kernel: &Path, modules: &Path) -> Result<String> {
    let versions = cmd::run(&mut cmd::new(
        "dpkg-query",
        std::iter::once("-W".to_string())
            .chain(std::iter::once("-f=${Package} ${Version}\\n".to_string()))
            .chain(pkgs.iter().cloned()),
    ))
    .context("reading the versions of the appliance's packages")?;
    let supermin = cmd::run(&mut cmd::new("supermin", ["--version"])).unwrap_or_default();
    let kmeta = std::fs::metadata(kernel)?;
    let mtime = kmeta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let key_src = format!(
        "{APPLIANCE_FORMAT}\n{}\n{}\n{} {} {mtime}\n{}\n{}",
        init_script(),
        String::from_utf8_lossy(&versions),
        kernel.display(),
        kmeta.len(),
        modules.display(),
        String::from_utf8_lossy(&supermin)
    );
    Ok(crate::util::sha256_hex(key_src.as_bytes()))
}

/// The built appliance at `d`, held by a shared lock on `lock_path` (and
/// its mtime refreshed) while a VM uses it.
fn open(d: &Path, lock_path: &Path, what: &str) -> Result<Appliance> {
    let l = crate::util::lock::Lock::shared(lock_path, what)?;
    let _ = std::fs::File::open(d).and_then(|f| f.set_modified(std::time::SystemTime::now()));
    Ok(Appliance {
        kernel: d.join("kernel"),
        initrd: d.join("initrd"),
        root: d.join("root"),
        _use: l,
    })
}

/// Build the appliance of `pkgs` with supermin in a scratch directory of
/// `dir`, then rename it to `out` (the caller holds the build lock).
fn build(dir: &Path, out: &Path, pkgs: &[String], kernel: &Path, modules: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(&format!(
            ".build-{}-",
            crate::util::owner::Owner::me().tag()
        ))
        .tempdir_in(dir)
        .with_context(|| format!("creating a build directory in {}", dir.display()))?;
    let sd = tmp.path().join("supermin.d");
    cmd::run(
        cmd::new("supermin", ["--prepare", "--use-installed", "-o"])
            .arg(&sd)
            .args(pkgs),
    )
    .context("preparing the VM appliance with supermin")?;
    // Our /init, as an extra tarball supermin unpacks over the packages.
    std::fs::write(sd.join("init.tar.gz"), init_tarball()?)?;
    let built = tmp.path().join("appliance");
    cmd::run(
        cmd::new(
            "supermin",
            [
                "--build",
                "--use-installed",
                "-f",
                "ext2",
                "--size",
                ROOT_SIZE,
            ],
        )
        .arg(&sd)
        .arg("-o")
        .arg(&built)
        .env("SUPERMIN_KERNEL", kernel)
        .env("SUPERMIN_MODULES", modules),
    )
    .context("building the VM appliance with supermin")?;
    // The kernel is a symlink into /boot; keep it so.
    match std::fs::rename(&built, out) {
        Ok(()) => {}
        // Another run built the same appliance meanwhile.
        Err(_) if out.join("root").exists() => {}
        Err(e) => return Err(e).with_context(|| format!("renaming to {}", out.display())),
    }
    Ok(())
}

/// Our /init as a gzipped tarball (one executable file, `init`).
fn init_tarball() -> Result<Vec<u8>> {
    let init = init_script();
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(init.len() as u64);
    h.set_mode(0o755);
    h.set_cksum();
    tar.append_data(&mut h, "init", init.as_bytes())?;
    let tarball = tar.into_inner()?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &tarball)?;
    Ok(gz.finish()?)
}

/// Remove the appliances of `dir` other than `out`: older appliances are
/// of no more use, unless a VM still runs on one.
fn remove_older(dir: &Path, out: &Path, locks: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p != out && !name.starts_with('.') {
                if let Ok(Some(_l)) =
                    crate::util::lock::Lock::try_exclusive(&appliance_lock(locks, &name))
                {
                    let _ = std::fs::remove_dir_all(&p);
                }
            }
        }
    }
}

/// The lock file of the appliance `<cache>/appliance/<name>`.
pub fn appliance_lock(locks: &Path, name: &str) -> PathBuf {
    locks.join(format!("appliance-{name}.lock"))
}
