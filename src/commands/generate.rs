//! `generate`: validate, plan, import, build the base disk once, derive and
//! encode each platform, publish atomically with meta.json and SHA256SUMS.
use super::input::{self, Input};
use crate::backend;
use crate::cli::GenerateArgs;
use crate::disk::job::{
    BootSetting, BootupdJob, DiskJob, DiskOutput, LiveJob, LiveStage, OS_EFI_DIR, OS_GRUB_BIOS_DIR,
};
use crate::disk::{deploy, derive, layout::Layout};
use crate::io::compress::{self, Compressor};
use crate::io::view::{Composite, DiskView, FileView, Patch};
use crate::live::{self, iso::Syslinux};
use crate::meta::{self, ContainerImage, ImageEntry, Meta};
use crate::oscontainer::{OsFormat, OsInfo};
use crate::plan::{Plan, PlanArtifact, PlanInput};
use crate::platforms::{self, Format, PlatformSpec};
use crate::util::{cancel, progress::Reporter};
use anyhow::{bail, ensure, Context, Result};
use std::fs::File;
use std::path::{Path, PathBuf};

/// [`Composite::shared`] tag of the views over this run's base disk.
const BASE_TAG: u64 = 1;
/// Space kept free beyond the estimates.
const SPACE_MARGIN: u64 = 64 << 20;

pub fn run(a: GenerateArgs) -> Result<()> {
    cancel::install()?;
    let specs = parse_platforms(&a.platforms)?;
    let aws_settings = crate::aws::Settings::from_args(&a.aws)?;
    if aws_settings.is_some()
        && !specs.iter().any(|p| p.name == platforms::AWS)
        && !a.platforms.iter().any(|p| p == ALL)
    {
        bail!(
            "--aws-register registers the aws disk: add the aws platform (or all) to the platforms"
        );
    }
    let compressor = a.compress.as_deref().map(Compressor::parse).transpose()?;
    if let Some(u) = &a.base_url {
        check_base_url(u)?;
    }
    check_output_dir(&a.output)?;
    // Two runs into one output directory: the second refuses at once.
    let _out_lock = crate::util::lock::DirLock::output(&a.output)?;
    let chosen = backend::choose(a.backend)?;
    // Region and credentials from the AWS chain, before anything is built.
    let aws = aws_settings
        .as_ref()
        .map(crate::aws::Session::connect)
        .transpose()?;
    let input = Input::from_args(&a.input)?;
    let reporter = Reporter::new(a.progress);
    let loaded = super::block_on(input::load(&input, !a.dry_run))?;
    let os = loaded.os.as_ref();
    if let Some((rec, _)) = loaded
        .import
        .as_ref()
        .filter(|(r, _)| !r.dropped.is_empty())
    {
        bail!(
            "OS image {} is a derived image whose layers write outside /usr, /etc and /var ({}); ostree-ext, which imports it as rpm-ostree and bootc do, keeps only /usr, /etc and /var and drops the rest, so the bootimage would lack those files: move them under /usr (or /etc, /var) in the image's Containerfile",
            rec.image,
            rec.dropped.join(", ")
        );
    }
    let content = match os {
        Some(o) => Some(loaded.cache.repo.content_size(&o.commit)?.bytes),
        None => None,
    };
    check_arch(&specs, &loaded.resolved.arch)?;
    let named_live = specs.iter().any(|p| p.is_live());
    let mut specs = if a.platforms.iter().any(|p| p == ALL) {
        expand_all(specs, &loaded.resolved, &reporter)
    } else {
        specs
    };
    // `all` includes live only when the OS has what it needs; named
    // explicitly, live fails below with the reason instead.
    if a.platforms.iter().any(|p| p == ALL) && !named_live {
        if let Some(o) = os.filter(|_| specs.iter().any(|p| p.is_live())) {
            if let Err(e) = check_live(&loaded.cache.repo, o) {
                reporter.note(&format!(
                    "all: leaving the live ISO and PXE files out: {e:#}"
                ));
                specs.retain(|p| !p.is_live());
            }
        }
    }
    let plan = Plan::build(PlanInput {
        resolved: &loaded.resolved,
        os,
        content_bytes: content,
        platforms: &specs,
        compressor,
        backend: chosen,
        output_dir: a.output.clone(),
    })?;
    if a.dry_run {
        println!("{}", serde_json::to_string_pretty(&plan)?);
        return Ok(());
    }
    let os = os.context("the OS was imported")?;
    let ami_spec = match &aws_settings {
        Some(s) => Some(aws_preflight(s, aws.as_ref(), &plan, os, &reporter)?),
        None => None,
    };
    let commit = &os.commit;
    check_bootloader(&loaded.cache.repo, commit, &plan)?;
    let bootupd = check_bootupd(&loaded.cache.repo, os)?;
    let (syslinux, erofs) = if plan.artifacts.iter().any(|x| x.live.is_some()) {
        let (s, e) = check_live(&loaded.cache.repo, os)?;
        (Some(s), e)
    } else {
        (None, None)
    };
    note_os_requests(os, bootupd.as_ref(), erofs.as_ref(), &reporter);
    let new_meta = start_meta(&plan, os, &loaded.resolved);
    if let Some(old) = meta::read_meta(&a.output)? {
        if !old.same_build(&new_meta) {
            bail!(
                "{} already holds meta.json of another build ({} {}, commit {}); use an empty output directory",
                a.output.display(),
                old.name,
                old.buildid,
                input::short(&old.ostree_commit)
            );
        }
    }
    let work = loaded.cache.tempdir()?;
    check_space(&plan, work.path(), &a.output)?;
    std::fs::create_dir_all(&a.output)
        .with_context(|| format!("creating output directory {}", a.output.display()))?;
    reporter.note(&format!(
        "building {} for {} {} (release {}), backend {}: {}",
        plan.artifacts
            .iter()
            .map(|x| x.platform.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        plan.name,
        plan.version,
        plan.release.version,
        plan.backend.name,
        plan.backend.reason
    ));
    let threads = a.threads.unwrap_or(0);
    let b = Builder {
        plan: &plan,
        os,
        resolved: &loaded.resolved,
        cache_repo: &loaded.cache.repo.path,
        work: work.path(),
        out: &a.output,
        r: &reporter,
        threads,
        raw_dir: a.debug_raw_dir.as_deref(),
        chunks: compress::ChunkCache::new(&work.path().join("chunks.cache"))?,
        syslinux,
        erofs,
        bootupd,
        aws: aws.as_ref().zip(ami_spec.as_ref()),
    };
    let job = b.disk_job()?;
    let out = match plan.backend.name {
        "loopback" => job.run(&reporter)?,
        _ => backend::vm::run(&job, &a.vm, plan.backend.name, &loaded.cache.dir, &reporter)?,
    };
    let base = Base::open(out, job.disk.metal_size)?;
    let osmets = b.pack_osmets(&base)?;
    let mut m = new_meta;
    // Live last: its rootfs holds the osmet files of the metal images.
    let (live_arts, disk_arts): (Vec<&PlanArtifact>, Vec<&PlanArtifact>) =
        plan.artifacts.iter().partition(|x| x.live.is_some());
    for art in disk_arts.into_iter().chain(live_arts) {
        cancel::check()?;
        if art.live.is_some() {
            for (key, entry) in b.live_artifacts(&base, art, &osmets, &m.images)? {
                m.images.insert(key, entry);
            }
            if let Some(o) = &b.erofs {
                let replaced: Vec<(String, String, String)> = o
                    .replaced
                    .iter()
                    .map(|x| (x.requested.clone(), x.used.clone(), x.reason.clone()))
                    .collect();
                m.image_details.insert(
                    meta::IMAGE_KEY_LIVE_ROOTFS.to_string(),
                    meta::live_rootfs_details(
                        "erofs",
                        &o.requested,
                        &o.host.describe(),
                        &o.used(),
                        &replaced,
                    ),
                );
            }
            continue;
        }
        let entry = b.artifact(&base, art)?;
        m.images.insert(art.meta_key.clone(), entry);
    }
    if !a.no_ostree_archive {
        let (key, entry) = b.ostree_archive(&input)?;
        m.images.insert(key, entry);
    }
    // AMIs registered by --aws-register (SPEC 6.3), with their snapshots.
    for r in aws.as_ref().map(|s| s.results()).unwrap_or_default() {
        m.amis.retain(|x| x.name != r.region);
        m.amis.push(meta::Ami {
            name: r.region,
            hvm: r.ami,
            snapshot: r.snapshot,
        });
    }
    let pinned = &loaded.resolved.pinned_amis;
    if plan.artifacts.iter().any(|x| x.spec.name == platforms::AWS) {
        // The release's own AMIs (SPEC 6.3); their `release` (in stream.json)
        // may be older than the OS built here.
        for p in pinned {
            if !m.amis.iter().any(|x| x.name == p.region) {
                m.amis.push(meta::Ami {
                    name: p.region.clone(),
                    hvm: p.image.clone(),
                    snapshot: String::new(),
                });
            }
        }
    }
    let written = meta::write_merged_meta(&a.output, m)?;
    meta::write_sha256sums(&a.output, &written.checksums())?;
    let stream_name = loaded
        .resolved
        .stream
        .as_ref()
        .and_then(|s| s.get("stream"))
        .and_then(|s| s.as_str())
        .map(str::to_string)
        .unwrap_or_else(|| plan.name.clone());
    let pinned: Vec<(String, String, String)> = pinned
        .iter()
        .map(|p| (p.region.clone(), p.image.clone(), p.release.clone()))
        .collect();
    let st = crate::stream::from_meta(&written, &stream_name, a.base_url.as_deref(), &pinned);
    crate::stream::write_stream(&a.output, &st)?;
    let (chunks, bytes) = b.chunks.reused();
    if chunks > 0 {
        let by: Vec<String> = (b.chunks.reused_by().iter())
            .map(|(what, n, bytes)| format!("{what} {n} ({} MiB)", bytes >> 20))
            .collect();
        reporter.note(&format!(
            "shared work: {chunks} encoded chunks ({} MiB of disk) reused between platforms instead of encoded again: {}",
            bytes >> 20,
            by.join(", ")
        ));
    }
    drop(b);
    drop(base);
    work.close().context("removing the work directory")?;
    reporter.note(&format!(
        "done: {} (meta.json, stream.json, SHA256SUMS)",
        a.output.display()
    ));
    Ok(())
}

/// `--aws-register`: the aws disk must be planned; the AMI to register;
/// each region reached with the credentials before the disk is built.
fn aws_preflight(
    s: &crate::aws::Settings,
    session: Option<&crate::aws::Session>,
    plan: &Plan,
    os: &OsInfo,
    r: &Reporter,
) -> Result<crate::aws::AmiSpec> {
    if !plan.artifacts.iter().any(|x| x.spec.name == platforms::AWS) {
        bail!("--aws-register needs the aws platform, which is not planned (the release's stream does not list it); name aws explicitly");
    }
    let spec = crate::aws::AmiSpec::new(
        s,
        &plan.name,
        &plan.version,
        &plan.release.arch,
        &plan.release.version,
        &os.config.image,
    )?;
    session.context("AWS session")?.preflight(&spec, r)?;
    Ok(spec)
}

/// The platform named `all` (SPEC 1.3): what the release's pinned stream
/// lists for the arch, else every platform this tool builds.
pub const ALL: &str = "all";

/// The platforms named explicitly (`all` is expanded later, by
/// [`expand_all`], once the release's stream is known).
fn parse_platforms(names: &[String]) -> Result<Vec<&'static PlatformSpec>> {
    let mut v: Vec<&'static PlatformSpec> = Vec::new();
    for n in names {
        if n == ALL {
            continue;
        }
        let Some(p) = platforms::find(n) else {
            bail!(
                "unknown platform '{n}'; valid platforms: {}, or {ALL}",
                platforms::names().join(", ")
            );
        };
        if !p.built {
            bail!(
                "platform '{n}' ({}) is not built by this version yet; built now: {}",
                p.arches.join(", "),
                platforms::PLATFORMS
                    .iter()
                    .filter(|p| p.built)
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if !v.iter().any(|x| x.name == p.name) {
            v.push(p);
        }
    }
    Ok(v)
}

/// Every named platform must exist for the release's architecture.
fn check_arch(named: &[&'static PlatformSpec], arch: &str) -> Result<()> {
    if let Some(p) = named.iter().find(|p| !p.exists_for(arch)) {
        bail!(
            "platform '{}' does not exist for {arch} (the release's architecture): upstream builds it for {} only; pick another --arch or drop {} (`bootimage-gen platforms` lists them per arch)",
            p.name,
            p.arches.join(", "),
            p.name
        );
    }
    Ok(())
}

/// `all`: every platform the release's own pinned stream (its
/// `coreos-bootimages` ConfigMap) lists for the arch, with the platforms
/// the stream places under a listed one (metal4k and live under `metal`);
/// with no stream for the arch, every platform this tool builds for it. A
/// listed platform this tool cannot build is reported as skipped, never an
/// error. Platforms named explicitly stay.
fn expand_all(
    named: Vec<&'static PlatformSpec>,
    resolved: &crate::release::resolve::Resolved,
    r: &Reporter,
) -> Vec<&'static PlatformSpec> {
    let arch = &resolved.arch;
    let listed = resolved
        .stream
        .as_ref()
        .and_then(|s| crate::release::stream_platforms(s, arch));
    let wanted: Vec<&'static PlatformSpec> = match &listed {
        Some(list) => {
            let mut skipped = Vec::new();
            for p in list {
                match platforms::find(p) {
                    Some(s) if s.built && s.exists_for(arch) => {}
                    Some(s) if s.built => skipped.push(format!(
                        "{p} (this tool builds it for {} only)",
                        s.arches.join(", ")
                    )),
                    Some(_) => skipped.push(format!("{p} (not built by this version yet)")),
                    None => skipped.push(format!("{p} (unknown to this version)")),
                }
            }
            if !skipped.is_empty() {
                r.note(&format!(
                    "all: skipping {} listed by the release's stream for {arch}: {}",
                    skipped.len(),
                    skipped.join(", ")
                ));
            }
            platforms::built_for(arch)
                .filter(|s| list.iter().any(|p| p == s.name || p == s.stream_platform))
                .collect()
        }
        None => {
            let all: Vec<&'static PlatformSpec> = platforms::built_for(arch).collect();
            r.note(&format!(
                "all: release {} pins no stream listing {arch} artifacts (its coreos-bootimages ConfigMap has none for {arch}), so there is no list of what its installer knows: building every platform this tool builds for {arch}: {}",
                resolved.release_version,
                all.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
            ));
            all
        }
    };
    let mut out = named;
    for s in wanted {
        if !out.iter().any(|x| x.name == s.name) {
            out.push(s);
        }
    }
    out
}

/// `--base-url` must be an absolute URL with a scheme and a host.
fn check_base_url(u: &str) -> Result<()> {
    let ok = u.split_once("://").is_some_and(|(scheme, rest)| {
        let host = rest.split('/').next().unwrap_or("");
        !scheme.is_empty()
            && scheme
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
            && !host.is_empty()
            && !u.chars().any(|c| c.is_whitespace() || c.is_control())
    });
    if !ok {
        bail!(
            "--base-url '{u}' is not a URL; give the absolute URL the output directory will be served from, e.g. https://mirror.example.com/rhcos/4.18"
        );
    }
    Ok(())
}

fn check_output_dir(dir: &Path) -> Result<()> {
    let probe = if dir.exists() {
        if !dir.is_dir() {
            bail!(
                "output path {} exists and is not a directory; pass -o with a directory",
                dir.display()
            );
        }
        dir.to_path_buf()
    } else {
        // The nearest existing ancestor must let us create it.
        let mut p = dir.to_path_buf();
        while !p.exists() {
            match p.parent() {
                Some(q) if !q.as_os_str().is_empty() => p = q.to_path_buf(),
                _ => {
                    p = PathBuf::from(".");
                    break;
                }
            }
        }
        if !p.is_dir() {
            bail!(
                "cannot create output directory {}: {} is not a directory",
                dir.display(),
                p.display()
            );
        }
        p
    };
    let c = std::ffi::CString::new(probe.as_os_str().as_encoded_bytes())?;
    // SAFETY: access(2) on a valid NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        bail!(
            "output directory {} is not writable ({}); choose another with -o",
            probe.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// The OS must ship what the bootloaders need.
fn check_bootloader(
    repo: &crate::oscontainer::repo::Repo,
    commit: &str,
    plan: &Plan,
) -> Result<()> {
    let efi = format!("/{OS_EFI_DIR}");
    if repo.list_dir(commit, &efi)?.map_or(true, |v| v.is_empty()) {
        bail!("the OS has no GRUB for UEFI: {efi} is missing or empty in commit {} (CoreOS ships its EFI binaries there via bootupd); cannot build a bootable disk: use a release whose OS ships its bootloader (bootupd's EFI directory)", input::short(commit));
    }
    if plan.artifacts.iter().any(|x| x.bios) {
        let dir = format!("/{OS_GRUB_BIOS_DIR}");
        let ok = repo
            .list_dir(commit, &dir)?
            .is_some_and(|v| v.iter().any(|(_, n)| n == "boot.img"));
        if !ok {
            bail!("the OS has no GRUB for BIOS: {dir}/boot.img is missing in commit {}; BIOS boot of {} needs it (metal4k alone does not); use an OS image that ships grub2-pc-modules, or build metal4k only", input::short(commit),
                plan.artifacts.iter().filter(|x| x.bios).map(|x| x.platform.as_str()).collect::<Vec<_>>().join(", "));
        }
    }
    Ok(())
}

/// The OS and the host must have what the live ISO needs (SPEC 5): a
/// usable initramfs, the EFI GRUB vendor directory (for the ISO's
/// `EFI/<vendor>/grub.cfg` and efiboot.img), a squashfs live root, and
/// ISOLINUX on the host. Checked before anything is built.
fn check_live(
    repo: &crate::oscontainer::repo::Repo,
    os: &OsInfo,
) -> Result<(Syslinux, Option<live::erofs::Options>)> {
    let commit = &os.commit;
    let short = input::short(commit);
    let img = &os.config.image;
    let fstype = &img.live_rootfs_fstype.value;
    let erofs = match fstype.as_str() {
        "squashfs" => None,
        "erofs" => {
            let host = live::erofs::Host::probe()?;
            Some(live::erofs::map_options(
                &img.live_rootfs_fsoptions.value,
                &host,
                os.timestamp,
                &live::erofs::uuid_from(&os.commit),
            )?)
        }
        other => bail!("the OS's image.json asks for live-rootfs-fstype '{other}'; upstream builds the live rootfs as squashfs or erofs only (osbuild live-artifacts.mono), and so does this tool"),
    };
    let kdir = format!("/usr/lib/modules/{}", os.kernel_version);
    let initrd = format!("{kdir}/{}", live::INITRAMFS_NAME);
    let Some(data) = repo.read_file(commit, &initrd)? else {
        bail!("the OS has no initramfs {initrd} in commit {short}; the live initramfs is the OS's own initramfs with the live files appended; use an OS image that ships its initramfs next to the kernel (as CoreOS does)");
    };
    live::check_initramfs(
        &data,
        &format!("the OS's initramfs {initrd} (commit {short})"),
    )?;
    let efi = format!("/{OS_EFI_DIR}");
    let mut vendors = Vec::new();
    for (is_dir, name) in repo.list_dir(commit, &efi)?.unwrap_or_default() {
        if !is_dir || name.eq_ignore_ascii_case("BOOT") {
            continue;
        }
        let files = repo
            .list_dir(commit, &format!("{efi}/{name}"))?
            .unwrap_or_default();
        if files.iter().any(|(d, n)| {
            let n = n.to_ascii_lowercase();
            !d && n.starts_with("grub") && n.ends_with(".efi")
        }) {
            vendors.push(name);
        }
    }
    if vendors.len() != 1 {
        let what = if vendors.is_empty() {
            format!("no vendor directory with a grub*.efi under {efi}")
        } else {
            format!(
                "several vendor directories under {efi} ({})",
                vendors.join(", ")
            )
        };
        if os.config.has_live_templates {
            bail!("the live ISO boots UEFI machines with the OS's GRUB and puts its menu next to it in EFI/<vendor>/, but commit {short} has {what}; use an OS image that ships its bootupd EFI tree (e.g. EFI/redhat/grubx64.efi)");
        }
        bail!("the OS ships no live ISO menu templates ({}) and the built-in menus cannot be used either: they need the OS's EFI GRUB in a vendor directory ({efi}/<vendor>/grub*.efi, where the UEFI menu EFI/<vendor>/grub.cfg goes), and commit {short} has {what}; use an OS image that ships coreos-assembler's live/ templates and its bootupd EFI tree", crate::osconfig::LIVE_DIR);
    }
    Ok((Syslinux::find()?, erofs))
}

/// What the OS ships for bootupd (bootupd `src/model.rs`, `src/grubconfigs.rs`).
struct BootupdInfo {
    efi: Option<serde_json::Value>,
    bios: Option<serde_json::Value>,
    static_configs: bool,
}

/// bootupd's metadata in the OS, checked before anything is built: a file
/// that does not parse is an error naming it and the field. `None` when the
/// OS ships none (no state is written then).
fn check_bootupd(
    repo: &crate::oscontainer::repo::Repo,
    os: &OsInfo,
) -> Result<Option<BootupdInfo>> {
    use crate::disk::bootupd as b;
    let read = |rel: &str| -> Result<Option<serde_json::Value>> {
        let path = format!("/{rel}");
        match repo.read_file(&os.commit, &path)? {
            Some(raw) => Ok(Some(b::parse_metadata(
                &raw,
                &format!("{path} (OS commit {})", input::short(&os.commit)),
            )?)),
            None => Ok(None),
        }
    };
    let efi = read(b::EFI_JSON)?;
    let bios = read(b::BIOS_JSON)?;
    if efi.is_none() && bios.is_none() {
        return Ok(None);
    }
    let static_configs = repo
        .list_dir(&os.commit, &format!("/{}", b::STATIC_DIR))?
        .is_some();
    Ok(Some(BootupdInfo {
        efi,
        bios,
        static_configs,
    }))
}

/// Say plainly what the OS asks for and what this run does instead, before
/// the build: bootupd, `bootc-install-to-fs`, EROFS option replacements.
fn note_os_requests(
    os: &OsInfo,
    bootupd: Option<&BootupdInfo>,
    erofs: Option<&live::erofs::Options>,
    r: &Reporter,
) {
    if let Some(b) = bootupd {
        let v = |m: &Option<serde_json::Value>| {
            m.as_ref()
                .and_then(|m| m.get("version"))
                .and_then(|v| v.as_str())
                .unwrap_or("-")
                .to_string()
        };
        r.note(&format!(
            "bootupd: the OS ships its metadata (EFI {}, BIOS {}): /boot/bootupd-state.json is written as `bootupctl backend install{}` writes it{}",
            v(&b.efi),
            v(&b.bios),
            if b.static_configs { " --with-static-configs" } else { "" },
            if b.static_configs {
                format!(", and the GRUB configs come from the OS's /{} (as bootupd installs them) instead of this tool's", crate::disk::bootupd::STATIC_DIR)
            } else {
                String::new()
            }
        ));
    }
    if os.config.image.bootc_install_to_fs.value {
        r.note("bootc-install-to-fs: the OS's image.json asks to be installed by its own bootc (`bootc install to-filesystem`, as coreos-assembler does for it); this tool does not run the OS's bootc: it deploys the commit with ostree (`ostree admin deploy`) and installs the bootloader from the OS's bootupd payload, as coreos-assembler's non-bootc path does. What differs: no /ostree/bootc state or .bootc-aleph.json (the aleph file is /.coreos-aleph-version.json, not a link to .bootc-aleph.json), the origin file is written by this tool, and anything the OS's bootc install configuration (/usr/lib/bootc/install/*.toml) sets, such as root filesystem type or kargs, is not applied");
    }
    if let Some(o) = erofs {
        let mut msg = format!(
            "live-rootfs: erofs with {}; the OS asked for '{}'",
            o.host.describe(),
            o.requested
        );
        if o.replaced.is_empty() {
            msg.push_str(", all honoured");
        } else {
            msg.push_str(&format!(
                "; replaced: {}",
                o.replaced
                    .iter()
                    .map(|x| x.line())
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        if !o.added.is_empty() {
            msg.push_str(&format!(
                "; added for reproducible bytes: {}",
                o.added.join(" ")
            ));
        }
        msg.push_str(&format!("; running: mkfs.erofs {}", o.used()));
        r.note(&msg);
    }
}

/// Free bytes for unprivileged users on the filesystem holding `p`, and its device.
fn free_space(p: &Path) -> Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes())?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs on a valid path into a zeroed struct.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", p.display()));
    }
    let dev = std::fs::metadata(p)?.dev();
    Ok((s.f_bavail as u64 * s.f_frsize as u64, dev))
}

/// Estimated bytes: the work dir holds the base disk's data, a boot
/// filesystem per platform and a qcow2 before compression; each artifact
/// holds at most the disk's data (compressed ones about half).
fn check_space(plan: &Plan, work: &Path, out: &Path) -> Result<()> {
    let d = plan
        .disk
        .as_ref()
        .context("disk sizes known after import")?;
    let data = d.content_bytes + (64 << 20);
    let mut work_need = data + plan.artifacts.len() as u64 * (64 << 20) + SPACE_MARGIN;
    // Formats encoded to a work file before compression (or packing).
    let staged = |x: &PlanArtifact| match x.spec.format {
        Format::OciArchive => true,
        Format::Qcow2 { .. } | Format::Vmdk | Format::Vhdx => x.compressed,
        _ => false,
    };
    if plan.artifacts.iter().any(staged) {
        work_need += data;
    }
    // Live: the squashfs and the rootfs cpio holding it (the ISO links to
    // the rootfs), each at most the data.
    if plan.artifacts.iter().any(|x| x.live.is_some()) {
        work_need += 2 * data;
    }
    // Each artifact holds at most the disk's data (compressed about half),
    // plus the OS container archive.
    let out_need: u64 = plan
        .artifacts
        .iter()
        .map(|x| if x.compressed { data / 2 } else { data })
        .sum::<u64>()
        + data / 2
        + SPACE_MARGIN;
    // The output dir may not exist yet: measure its nearest existing ancestor.
    let out_fs = out
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("."));
    let (wfree, wdev) = free_space(work)?;
    let (ofree, odev) = free_space(out_fs)?;
    let mib = |b: u64| format!("{} MiB", b.div_ceil(1 << 20));
    if wdev == odev {
        let need = work_need + out_need;
        if wfree < need {
            bail!("not enough free space: the build needs about {} ({} of work files in {}, {} of artifacts in {}) on one filesystem with {} free; free some space, or put -o or --cache-dir on a larger filesystem", mib(need), mib(work_need), work.display(), mib(out_need), out.display(), mib(wfree));
        }
    } else {
        if wfree < work_need {
            bail!("not enough free space in the cache directory {}: the build needs about {} there and {} is free; use --cache-dir on a larger filesystem", work.display(), mib(work_need), mib(wfree));
        }
        if ofree < out_need {
            bail!("not enough free space for output directory {}: the artifacts need about {} and {} is free; choose another with -o", out.display(), mib(out_need), mib(ofree));
        }
    }
    Ok(())
}

fn start_meta(plan: &Plan, os: &OsInfo, r: &crate::release::resolve::Resolved) -> Meta {
    // cosa records the OS build's own commit (for an ostree-native image its
    // `ostree.commit` label; the commit deployed here is ostree-ext's local
    // merge commit over it, which differs per import).
    let commit = &os.image_commit;
    let mut m = Meta::new(
        &plan.name,
        &os.version,
        commit,
        &meta::rfc3339_utc(os.timestamp),
        &plan.release.arch,
    );
    m.base_oscontainer = Some(ContainerImage {
        image: r.os_pullspec.clone(),
        digest: Some(r.os_digest.clone()),
        tags: vec![r.os_tag.clone()],
        comment: None,
    });
    m.release_payload = Some(ContainerImage {
        image: r.release_ref.clone(),
        digest: Some(r.release_digest.clone()),
        tags: vec![r.release_version.clone()],
        comment: Some("OpenShift release image the OS was resolved from".into()),
    });
    m
}

/// An osmet file packed for a metal image (SPEC 5.1).
struct Osmet {
    /// Its name in rootfs.img and where it is.
    name: String,
    path: PathBuf,
    /// meta.json key of the image and that image's sha256.
    meta_key: String,
    sha256: String,
}

/// The base disk, ready for deriving.
pub struct Base {
    path: PathBuf,
    file: File,
    layout: Layout,
    /// The 4K-sector ESP, built when metal4k is planned.
    esp4k: Option<PathBuf>,
    /// Boot filesystem image per [`BootSetting::key`].
    boots: std::collections::BTreeMap<String, PathBuf>,
    /// Live files made from the mounted deployment, when live is planned.
    live: Option<LiveStage>,
    /// The ostree objects' extents on the base disk (for osmet), with live.
    extent_map: Option<PathBuf>,
}

impl Base {
    fn open(out: DiskOutput, metal_size: u64) -> Result<Self> {
        let file = File::open(&out.base)
            .with_context(|| format!("opening the base disk {}", out.base.display()))?;
        Ok(Base {
            path: out.base,
            file,
            layout: Layout::new(metal_size, 512)?,
            esp4k: out.esp4k,
            boots: out.boots,
            live: out.live,
            extent_map: out.extent_map,
        })
    }
}

struct Builder<'a> {
    plan: &'a Plan,
    os: &'a OsInfo,
    resolved: &'a crate::release::resolve::Resolved,
    cache_repo: &'a Path,
    work: &'a Path,
    out: &'a Path,
    r: &'a Reporter,
    threads: usize,
    raw_dir: Option<&'a Path>,
    /// Compressed chunks of the base disk's unchanged ranges, shared by
    /// the platforms whose outputs lay the disk out at the same offsets.
    chunks: compress::ChunkCache,
    /// The host's ISOLINUX, when live is planned.
    syslinux: Option<Syslinux>,
    /// The mkfs.erofs options, when live is planned and the OS asks for EROFS.
    erofs: Option<live::erofs::Options>,
    /// What the OS ships for bootupd, when it ships its metadata.
    bootupd: Option<BootupdInfo>,
    /// `--aws-register`: where and what to register the aws disk as.
    aws: Option<(&'a crate::aws::Session, &'a crate::aws::AmiSpec)>,
}

impl Builder<'_> {
    fn origin(&self) -> String {
        match self.resolved.os_format {
            OsFormat::OstreeNative => format!(
                "[origin]\ncontainer-image-reference=ostree-unverified-registry:{}\n",
                self.resolved.os_pullspec
            ),
            OsFormat::Legacy => format!("[origin]\nrefspec={}\n", self.os.commit),
        }
    }

    fn aleph(&self) -> deploy::Aleph {
        deploy::Aleph {
            ref_: String::new(),
            version: self.os.version.clone(),
            ostree_commit: self.os.commit.clone(),
            container_image: (self.resolved.os_format == OsFormat::OstreeNative).then(|| {
                deploy::AlephImage {
                    image_name: self.resolved.os_pullspec.clone(),
                    image_digest: self.resolved.os_digest.clone(),
                    container_imgref: format!(
                        "ostree-unverified-registry:{}",
                        self.resolved.os_pullspec
                    ),
                }
            }),
        }
    }

    /// The privileged part of the build, for a backend to run.
    fn disk_job(&self) -> Result<DiskJob> {
        let mut boots: Vec<BootSetting> = Vec::new();
        for art in &self.plan.artifacts {
            let b = BootSetting::of(art);
            if !boots.iter().any(|x| x.key() == b.key()) {
                boots.push(b);
            }
        }
        Ok(DiskJob {
            work: self.work.to_path_buf(),
            cache_repo: self.cache_repo.to_path_buf(),
            disk: self.plan.disk.clone().context("disk plan")?,
            kernel_version: self.os.kernel_version.clone(),
            commit: self.os.commit.clone(),
            osname: self.os.osname.clone(),
            platforms_json: self
                .os
                .config
                .platforms
                .as_ref()
                .map(|p| p.boot_json(&self.plan.release.arch))
                .transpose()?,
            origin: self.origin(),
            aleph: self.aleph(),
            esp4k: self.plan.artifacts.iter().any(|x| x.sector_size == 4096),
            bios: self.plan.artifacts.iter().any(|x| x.bios),
            boots,
            live: self
                .plan
                .artifacts
                .iter()
                .find_map(|x| x.live.clone())
                .map(|plan| LiveJob {
                    plan,
                    version: self.os.version.clone(),
                    timestamp: self.os.timestamp,
                    title: self
                        .os
                        .os_release
                        .get("NAME")
                        .cloned()
                        .unwrap_or_else(|| self.os.osname.clone()),
                    threads: self.threads,
                    erofs: self.erofs.clone(),
                }),
            bootupd: self.bootupd.as_ref().map(|_| BootupdJob {
                timestamp: self.os.timestamp,
            }),
        })
    }

    /// The live ISO and the PXE files, published together.
    fn live_artifacts(
        &self,
        base: &Base,
        art: &PlanArtifact,
        osmets: &[Osmet],
        done_images: &std::collections::BTreeMap<String, ImageEntry>,
    ) -> Result<Vec<(String, ImageEntry)>> {
        let l = art.live.as_ref().context("live plan")?;
        let st = base.live.as_ref().context("live files staged")?;
        let sys = self.syslinux.as_ref().context("syslinux checked")?;
        for n in &st.notes {
            self.r.note(n);
        }
        self.live_rootfs_and_initramfs(st, osmets, done_images)?;
        let temp = |name: &str| {
            tempfile::Builder::new()
                .prefix(&format!(".{name}."))
                .suffix(".partial")
                .tempfile_in(self.out)
                .with_context(|| format!("creating a temporary file in {}", self.out.display()))
        };
        let step = self.r.step("live-iso");
        let iso_tmp = temp(&l.iso)?;
        let stage = st.dir.join("iso");
        cancel::pause_point("iso")?;
        let input = live::iso::IsoInput {
            volid: &l.volume_id,
            kernel: &st.kernel,
            initramfs: &st.initramfs,
            rootfs: &st.rootfs,
            efiboot: &st.efiboot,
            menus: &st.menus,
            syslinux: sys,
            mtime: self.os.timestamp,
            features: &st.features,
        };
        live::iso::build_iso(&stage, iso_tmp.path(), &input)?;
        let full_mib = std::fs::metadata(iso_tmp.path())?.len() >> 20;
        let minimal = st.dir.join("minimal.iso");
        let ms = live::iso::add_minimal_iso(
            &stage,
            iso_tmp.path(),
            &minimal,
            &input,
            &format!("bootimage-gen {}", env!("CARGO_PKG_VERSION")),
        )?;
        let minimal_mib = std::fs::metadata(&minimal)?.len() as f64 / (1u64 << 20) as f64;
        std::fs::remove_file(&minimal).ok();
        self.r.note(&format!(
            "live: minimal ISO (no rootfs.img; `coreos-installer iso extract minimal-iso` rebuilds it) {minimal_mib:.1} MiB against {full_mib} MiB; coreos/miniso.dat holds {} bytes ({} ranges matched, {} KiB of {} KiB packed)",
            ms.data_size,
            ms.entries,
            ms.packed_xz >> 10,
            ms.packed >> 10
        ));
        std::fs::remove_dir_all(&stage).ok();
        let mut done = vec![(
            meta::IMAGE_KEY_LIVE_ISO.to_string(),
            file_entry(&l.iso, iso_tmp.path(), Some(true))?,
            iso_tmp,
            l.iso.clone(),
        )];
        step.done(&format!(
            "{} (volume id {}, {} MiB)",
            l.iso,
            l.volume_id,
            done[0].1.size >> 20
        ));
        for (key, src, name) in [
            (meta::IMAGE_KEY_LIVE_KERNEL, &st.kernel, &l.kernel),
            (meta::IMAGE_KEY_LIVE_INITRAMFS, &st.initramfs, &l.initramfs),
            (meta::IMAGE_KEY_LIVE_ROOTFS, &st.rootfs, &l.rootfs),
        ] {
            cancel::check()?;
            let tmp = temp(name)?;
            // The staged file's last use (the ISO is written): move it when
            // the work and output dirs share a filesystem, else copy.
            if std::fs::rename(src, tmp.path()).is_err() {
                std::fs::copy(src, tmp.path()).with_context(|| {
                    format!("copying {} to {}", src.display(), tmp.path().display())
                })?;
            }
            let e = file_entry(name, tmp.path(), Some(true))?;
            done.push((key.to_string(), e, tmp, name.clone()));
        }
        cancel::check()?;
        let mut out = Vec::new();
        for (key, entry, tmp, name) in done {
            publish(tmp, &self.out.join(&name))?;
            out.push((key, entry));
        }
        Ok(out)
    }

    /// The osmet file of each planned metal image (SPEC 5.1), packed right
    /// after the disk job, before anything is published: a map that does
    /// not fit the image fails the run with nothing written.
    fn pack_osmets(&self, base: &Base) -> Result<Vec<Osmet>> {
        use live::osmet;
        let Some(st) = base.live.as_ref() else {
            return Ok(Vec::new());
        };
        let map_path = base
            .extent_map
            .as_ref()
            .context("extent map of the base disk")?;
        let mut map: osmet::ExtentMap = serde_json::from_slice(
            &std::fs::read(map_path).with_context(|| format!("reading {}", map_path.display()))?,
        )
        .with_context(|| format!("parsing {}", map_path.display()))?;
        // Fault injection for the tests (a real filesystem does not give a
        // wrong map): point a root extent one block further into its object.
        if std::env::var(osmet::FAULT_ENV).is_ok_and(|v| v == osmet::FAULT_STALE_MAP) {
            if let Some(m) = map.root.iter_mut().find(|m| m.extent.length >= 8192) {
                m.extent.logical += 4096;
            }
        }
        let description = match osmet::description(&self.os.os_release) {
            Some(d) => d,
            None => {
                self.r.note(&format!(
                    "live: the OS's os-release has no PRETTY_NAME, which osbuild passes to `coreos-installer pack osmet --description`; the osmet files say {:?}, os-release(5)'s default",
                    osmet::PRETTY_NAME_DEFAULT
                ));
                osmet::PRETTY_NAME_DEFAULT.to_string()
            }
        };
        let app = format!("bootimage-gen {}", env!("CARGO_PKG_VERSION"));
        let metals: Vec<&PlanArtifact> = self
            .plan
            .artifacts
            .iter()
            .filter(|x| x.spec.is_metal_disk())
            .collect();
        if metals.is_empty() {
            self.r.note("live: neither metal nor metal4k is built in this run, so rootfs.img carries no osmet file and `coreos-installer install` from the live system needs the network");
        }
        let mut out = Vec::new();
        for art in metals {
            let step = self.r.step(format!("osmet {}", art.platform));
            let patches = self.disk_patches(base, art)?;
            let base_view = FileView::open(&base.path)?;
            let view = Composite::new(&base_view, art.disk_size.context("disk size")?, patches)?;
            let part = |name: &str| {
                let p = base.layout.part(name);
                (p.start, p.start + p.size)
            };
            let (bs, be) = part("boot");
            let (rs, re) = part("root");
            let parts = [
                osmet::Partition {
                    start: bs,
                    end: be,
                    mappings: &map.boot,
                },
                osmet::Partition {
                    start: rs,
                    end: re,
                    mappings: &map.root,
                },
            ];
            // cosa names it after the uncompressed image.
            let raw = self.uncompressed_name(art);
            let name = format!("{raw}.osmet");
            let path = st.dir.join(&name);
            let s = osmet::pack(
                &view,
                &parts,
                &self.cache_repo.join("objects"),
                &osmet::Header {
                    app_version: &app,
                    sector_size: art.sector_size as u32,
                    os_description: &description,
                    os_architecture: &self.plan.release.arch,
                },
                None,
                &path,
            )
            .with_context(|| format!("packing the osmet file of {}", art.platform))?;
            step.done(&format!(
                "{name}: {:.1} MiB ({} MiB of {} MiB from {} ostree extents, {} MiB xz'd to {:.1} MiB) in {:.1} s",
                s.file_size as f64 / (1u64 << 20) as f64,
                s.mapped >> 20,
                s.image_size >> 20,
                s.mappings,
                s.packed >> 20,
                s.packed_xz as f64 / (1u64 << 20) as f64,
                s.seconds
            ));
            out.push(Osmet {
                name,
                path,
                meta_key: art.meta_key.clone(),
                sha256: s.image_sha256,
            });
        }
        Ok(out)
    }

    /// rootfs.img (the root image, the version stamp and the osmet files)
    /// and the live initramfs (the OS's, then the live files with the
    /// rootfs's stream hash), SPEC 5.1. Each osmet file must describe the
    /// metal image published in this run.
    fn live_rootfs_and_initramfs(
        &self,
        st: &LiveStage,
        osmets: &[Osmet],
        done_images: &std::collections::BTreeMap<String, ImageEntry>,
    ) -> Result<()> {
        let mtime = u32::try_from(self.os.timestamp.max(0)).unwrap_or(u32::MAX);
        for o in osmets {
            let e = done_images
                .get(&o.meta_key)
                .with_context(|| format!("{} was not published", o.meta_key))?;
            let published = e.uncompressed_sha256.as_ref().unwrap_or(&e.sha256);
            ensure!(
                *published == o.sha256,
                "{} describes an image with sha256 {}, but the published {} has {published}",
                o.name,
                o.sha256,
                o.meta_key
            );
        }
        let extras: Vec<(String, PathBuf)> = osmets
            .iter()
            .map(|o| (o.name.clone(), o.path.clone()))
            .collect();
        let step = self.r.step("live-rootfs.img");
        live::write_rootfs_img(&st.root_image, &self.os.version, &extras, &st.rootfs, mtime)?;
        for (_, p) in &extras {
            std::fs::remove_file(p).ok();
        }
        std::fs::remove_file(&st.root_image).ok();
        let want = live::stream_hash(&st.rootfs)?;
        step.done(&format!(
            "{} MiB; stream hash {} chunks of 2 MiB",
            std::fs::metadata(&st.rootfs)?.len() >> 20,
            want.iter().filter(|&&b| b == b'\n').count() - 1
        ));
        let os_initrd = std::fs::read(&st.os_initramfs)
            .with_context(|| format!("reading {}", st.os_initramfs.display()))?;
        let addon = live::live_initramfs_addon(&self.os.version, &st.features, &want, mtime)?;
        std::fs::write(&st.initramfs, live::live_initramfs(&os_initrd, &addon))
            .with_context(|| format!("writing {}", st.initramfs.display()))?;
        Ok(())
    }

    /// The patches over the base disk that make `art`'s disk: its
    /// partition tables, its boot filesystem, the 4K ESP for 4K sectors.
    fn disk_patches(&self, base: &Base, art: &PlanArtifact) -> Result<Vec<Patch>> {
        let d = self.plan.disk.as_ref().context("disk plan")?;
        let disk_size = art.disk_size.context("disk size")?;
        // The boot filesystem of this platform: derived once per distinct
        // boot setting (metal and metal4k share theirs) and kept for the run.
        let boot_p = base.layout.part("boot").clone();
        let boot_img = base
            .boots
            .get(&BootSetting::of(art).key())
            .with_context(|| format!("no boot filesystem was derived for {}", art.platform))?;
        // The disk as this platform sees it.
        let layout = Layout::with_root(disk_size, art.sector_size, d.root_size)?;
        let mut patches = derive::table_patches(
            &base.file,
            base.layout.disk_size,
            &layout,
            art.bios,
            &self.work.join(format!("table-{}.img", art.platform)),
        )?;
        patches.push(Patch::from_file(boot_img, boot_p.start, boot_p.size)?);
        if art.sector_size == 4096 {
            let esp_p = base.layout.part("EFI-SYSTEM");
            let p = base.esp4k.as_ref().context("4K ESP")?;
            patches.push(Patch::from_file(p, esp_p.start, esp_p.size)?);
        }
        Ok(patches)
    }

    /// Derive, encode, compress and publish one artifact.
    fn artifact(&self, base: &Base, art: &PlanArtifact) -> Result<ImageEntry> {
        let step = self.r.step(art.platform.clone());
        let disk_size = art.disk_size.context("disk size")?;
        let patches = self.disk_patches(base, art)?;
        let base_view = FileView::open(&base.path)?;
        let view = Composite::new(&base_view, disk_size, patches)?.shared(BASE_TAG);
        if let Some(dir) = self.raw_dir {
            std::fs::create_dir_all(dir)?;
            let p = dir.join(format!("{}.raw", art.platform));
            crate::io::sparse::write_sparse(&view, &p, &|_| {})?;
        }
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{}.", art.file))
            .suffix(".partial")
            .tempfile_in(self.out)
            .with_context(|| format!("creating a temporary file in {}", self.out.display()))?;
        let kind = if art.compressed {
            self.plan.compressor
        } else {
            Compressor::None
        };
        let level = self.plan.compression_level;
        let total = view.len();
        let prog = |done: u64| step.bytes(done, total);
        cancel::pause_point("encode")?;
        let entry = match art.spec.format {
            // Raw disks and fixed VHDs are compressed straight from the view.
            Format::Raw => {
                let w = compress::compress_view_cached(
                    kind,
                    level,
                    &view,
                    tmp.path(),
                    self.threads,
                    &prog,
                    Some(&self.chunks),
                )?;
                written_entry(&art.file, &w, art.compressed)
            }
            Format::Vhd if art.compressed => {
                let vhd = crate::formats::vhd::VhdView::new(&view)?;
                let w = compress::compress_view_cached(
                    kind,
                    level,
                    &vhd,
                    tmp.path(),
                    self.threads,
                    &prog,
                    Some(&self.chunks),
                )?;
                written_entry(&art.file, &w, true)
            }
            // Encoded, then compressed: qcow2, VMDK, VHDX.
            _ if art.compressed => {
                let enc = self.work.join(format!("{}.encoded", art.platform));
                let shared = self.encode(art, &view, &enc, &prog)?;
                let ev = FileView::open(&enc)?;
                // A qcow2 holds the base disk's chunks at chunk-aligned
                // offsets: their compressed forms are reused from the raw
                // disks' (and other qcow2s'). A VMDK's grains are already
                // compressed: no match search on them.
                let remapped = shared.as_ref().map(|s| crate::io::view::Remapped {
                    inner: &ev,
                    start: s.start,
                    align: s.align,
                    blocks: &s.blocks,
                });
                let pre = crate::io::view::Precompressed(&ev);
                let input: &dyn DiskView = match (&remapped, art.spec.format) {
                    (Some(r), _) => r,
                    (None, Format::Vmdk) => &pre,
                    _ => &ev,
                };
                let w = compress::compress_view_cached(
                    kind,
                    level,
                    input,
                    tmp.path(),
                    self.threads,
                    &|_| {},
                    Some(&self.chunks),
                )?;
                std::fs::remove_file(&enc).ok();
                written_entry(&art.file, &w, true)
            }
            // Never recompressed (SPEC 3): the file as encoded.
            _ => {
                self.encode(art, &view, tmp.path(), &prog)?;
                file_entry(
                    &art.file,
                    tmp.path(),
                    (!art.spec.recompressed).then_some(true),
                )?
            }
        };
        cancel::check()?;
        if let Some((aws, spec)) = self.aws.filter(|_| art.spec.name == platforms::AWS) {
            // The snapshot holds the same bytes the VMDK encodes.
            aws.register(&view, spec, self.r)?;
        }
        let dst = self.out.join(&art.file);
        publish(tmp, &dst)?;
        step.done(&format!("{} ({} MiB)", art.file, entry.size >> 20));
        Ok(entry)
    }
}

impl Builder<'_> {
    /// The artifact's file name without the compression extension.
    fn uncompressed_name(&self, art: &PlanArtifact) -> String {
        let p = &self.plan;
        art.spec
            .file_name(&p.name, &p.version, &p.release.arch, Compressor::None)
    }

    /// Write `view` in the artifact's format (uncompressed) to `out`
    /// ([`crate::formats::encode`]).
    fn encode(
        &self,
        art: &PlanArtifact,
        view: &dyn DiskView,
        out: &Path,
        prog: &(dyn Fn(u64) + Sync),
    ) -> Result<Option<crate::formats::qcow2::SharedBlocks>> {
        let img = &self.os.config.image;
        let arch = &self.plan.release.arch;
        let ctx = crate::formats::EncodeCtx {
            name: &self.plan.name,
            version: &self.plan.version,
            file: &self.uncompressed_name(art),
            platform: &art.platform,
            arch,
            oci_arch: &crate::release::oci_arch(arch),
            mtime: self.os.timestamp.max(0) as u64,
            align: self.plan.compressor.chunk_size() as u64,
            threads: self.threads,
            chunks: Some(&self.chunks),
            work: self.work,
            vmware: crate::formats::VmwareSettings {
                os_type: img.vmware_os_type.value.clone(),
                hw_version: u32::try_from(img.vmware_hw_version.value)
                    .context("vmware-hw-version")?,
                secure_boot: img.vmware_secure_boot.value,
            },
        };
        crate::formats::encode(art.spec.format, view, out, &ctx, prog)
    }

    /// The OS container as an OCI archive (cosa's `images.ostree`).
    fn ostree_archive(&self, input: &Input) -> Result<(String, ImageEntry)> {
        let file = format!(
            "{}-{}-ostree.{}.ociarchive",
            self.plan.name, self.plan.version, self.plan.release.arch
        );
        let step = self.r.step("ostree");
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{file}."))
            .suffix(".partial")
            .tempfile_in(self.out)
            .with_context(|| format!("creating a temporary file in {}", self.out.display()))?;
        let scratch = self.work.join("skopeo");
        std::fs::create_dir_all(&scratch)?;
        input.fetch.copy_to_oci_archive(
            &self.resolved.os_source,
            tmp.path(),
            &scratch,
            self.resolved
                .os_index
                .as_ref()
                .map(|_| self.plan.release.arch.as_str()),
        )?;
        let entry = file_entry(&file, tmp.path(), Some(true))?;
        publish(tmp, &self.out.join(&file))?;
        step.done(&format!("{file} ({} MiB)", entry.size >> 20));
        Ok((meta::IMAGE_KEY_OSTREE.to_string(), entry))
    }
}

/// Give a finished temporary file its final name (mode 0644).
fn publish(tmp: tempfile::NamedTempFile, dst: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o644))?;
    tmp.persist(dst)
        .with_context(|| format!("renaming into {}", dst.display()))?;
    Ok(())
}

/// meta.json entry of a finished, uncompressed file published as `name`.
fn file_entry(name: &str, path: &Path, skip_compression: Option<bool>) -> Result<ImageEntry> {
    let (sha256, size) = meta::sha256_file(path)?;
    Ok(ImageEntry {
        path: name.to_string(),
        sha256,
        size,
        uncompressed_sha256: None,
        uncompressed_size: None,
        skip_compression,
    })
}

fn written_entry(file: &str, w: &compress::Written, compressed: bool) -> ImageEntry {
    ImageEntry {
        path: file.to_string(),
        sha256: w.sha256.clone(),
        size: w.size,
        uncompressed_sha256: compressed.then(|| w.uncompressed_sha256.clone()),
        uncompressed_size: compressed.then_some(w.uncompressed_size),
        skip_compression: None,
    }
}
