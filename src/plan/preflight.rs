//! Preflight: the checks made before the first side effect (platform
//! names and arches, `all`, output directory, base URL, what the OS ships
//! for the bootloaders, live and bootupd, free space, AWS).
use super::input;
use super::{Plan, PlanArtifact};
use crate::backend::job::{OS_EFI_DIR, OS_GRUB_BIOS_DIR};
use crate::live::{self, iso::Syslinux};
use crate::oscontainer::OsInfo;
use crate::platforms::{self, Format, PlatformSpec, Upload};
use crate::util::progress::Reporter;
use crate::util::space::{describe_fs, mib, Place};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Space kept free beyond the estimates.
const SPACE_MARGIN: u64 = 64 << 20;

/// `--aws-register`: the aws disk must be planned; the AMI to register;
/// each region reached with the credentials before the disk is built.
pub fn aws_preflight(
    s: &crate::publish::aws::Settings,
    session: Option<&crate::publish::aws::Session>,
    plan: &Plan,
    os: &OsInfo,
    r: &Reporter,
) -> Result<crate::publish::aws::AmiSpec> {
    if !plan
        .artifacts
        .iter()
        .any(|x| x.spec.uploads_to(Upload::Aws))
    {
        bail!("--aws-register needs the aws platform, which is not planned (the release's stream does not list it); name aws explicitly");
    }
    let spec = crate::publish::aws::AmiSpec::new(
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
pub fn parse_platforms(names: &[String]) -> Result<Vec<&'static PlatformSpec>> {
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
pub fn check_arch(named: &[&'static PlatformSpec], arch: &str) -> Result<()> {
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
pub fn expand_all(
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
pub fn check_base_url(u: &str) -> Result<()> {
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

pub fn check_output_dir(dir: &Path) -> Result<()> {
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
pub fn check_bootloader(
    repo: &crate::oscontainer::repo::Repo,
    commit: &str,
    plan: &Plan,
) -> Result<()> {
    let arch = &plan.disk.arch;
    let boots_with = crate::platforms::arch_boot(arch);
    let efi = format!("/{OS_EFI_DIR}");
    if boots_with.efi && repo.list_dir(commit, &efi)?.map_or(true, |v| v.is_empty()) {
        bail!("the OS has no GRUB for UEFI: {efi} is missing or empty in commit {} (CoreOS ships its EFI binaries there via bootupd); cannot build a bootable disk: use a release whose OS ships its bootloader (bootupd's EFI directory)", input::short(commit));
    }
    if boots_with.prep {
        let dir = format!("/{}", crate::disk::prep::OS_GRUB_OF_DIR);
        let ok = repo
            .list_dir(commit, &dir)?
            .is_some_and(|v| v.iter().any(|(_, n)| n == "kernel.img"));
        if !ok {
            bail!("the OS has no GRUB for Open Firmware: {dir}/kernel.img is missing in commit {}; {arch} machines boot GRUB powerpc-ieee1275 from the PReP partition; use an OS image that ships grub2-ppc64le-modules (as RHCOS does)", input::short(commit));
        }
    }
    if boots_with.zipl {
        let ok = repo
            .list_dir(commit, "/usr/sbin")?
            .is_some_and(|v| v.iter().any(|(d, n)| !d && n == "zipl"));
        if !ok {
            bail!("the OS has no zipl (/{} in commit {}): {arch} disks IPL through zipl's boot record and bootmap, written by the OS's own zipl; use an OS image that ships s390-tools (as RHCOS does)", crate::disk::zipl::ZIPL_PATH, input::short(commit));
        }
        crate::disk::zipl::emulator()?;
    }
    if !(boots_with.efi || boots_with.prep || boots_with.zipl) {
        bail!("this tool does not know how {arch} machines boot (known: x86_64, aarch64, ppc64le)");
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
pub fn check_live(
    repo: &crate::oscontainer::repo::Repo,
    os: &OsInfo,
    arch: &str,
) -> Result<(Option<Syslinux>, Option<live::erofs::Options>)> {
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
    // Open Firmware ISOs boot the OS's GRUB powerpc-ieee1275 (checked with
    // the disk's bootloader) and need no EFI vendor directory.
    let boots_with = crate::platforms::arch_boot(arch);
    if boots_with.prep {
        let info = format!("/{}/bootinfo.txt", crate::disk::prep::OS_GRUB_OF_DIR);
        if repo.read_file(commit, &info)?.is_none() {
            bail!("the OS has no {info} in commit {short}: the {arch} live ISO boots with GRUB's CHRP boot script from the OS's powerpc-ieee1275 modules (grub2-ppc64le-modules ships it)");
        }
        return Ok((None, erofs));
    }
    // s390x: no ISO boot files from the OS (see the live stage), only PXE.
    if boots_with.zipl {
        return Ok((None, erofs));
    }
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
        bail!("the OS ships no live ISO menu templates ({}) and the built-in menus cannot be used either: they need the OS's EFI GRUB in a vendor directory ({efi}/<vendor>/grub*.efi, where the UEFI menu EFI/<vendor>/grub.cfg goes), and commit {short} has {what}; use an OS image that ships coreos-assembler's live/ templates and its bootupd EFI tree", crate::oscontainer::config::LIVE_DIR);
    }
    // ISOLINUX boots the x86 BIOS; other arches' ISOs boot EFI (or their
    // own firmware) only.
    let syslinux = match crate::platforms::arch_has_bios(arch) {
        true => Some(Syslinux::find()?),
        false => None,
    };
    Ok((syslinux, erofs))
}

/// What the OS ships for bootupd (bootupd `src/model.rs`, `src/grubconfigs.rs`).
pub struct BootupdInfo {
    pub efi: Option<serde_json::Value>,
    pub bios: Option<serde_json::Value>,
    pub static_configs: bool,
    /// The OS ships bootupd's CLI itself (`/usr/bin/bootupctl`).
    pub bootupctl: bool,
}

/// bootupd's metadata in the OS, checked before anything is built: a file
/// that does not parse is an error naming it and the field. `None` when the
/// OS ships none (no state is written then).
pub fn check_bootupd(
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
    let bootupctl = repo
        .list_dir(&os.commit, "/usr/bin")?
        .unwrap_or_default()
        .iter()
        .any(|(dir, name)| !dir && name == "bootupctl");
    Ok(Some(BootupdInfo {
        efi,
        bios,
        static_configs,
        bootupctl,
    }))
}

/// Say plainly what the OS asks for and what this run does instead, before
/// the build: bootupd, `bootc-install-to-fs`, EROFS option replacements.
pub fn note_os_requests(
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
        if b.bootupctl {
            r.note("bootupd: the OS's own /usr/bin/bootupctl is not run: its install mounts the ESP (vfat) and runs grub2-install against the whole disk, which needs the kernel to read the disk's partition table; this tool writes the ESP in userspace and the BIOS boot code itself, from the same payload (/usr/lib/bootupd/updates), on every host");
        }
    }
    if os.config.image.bootc_install_to_fs.value {
        r.note("bootc-install-to-fs: the OS's image.json asks to be installed by its own bootc (`bootc install to-filesystem`, as coreos-assembler does for it); this tool does not run the OS's bootc: it deploys the commit with ostree (`ostree admin deploy`) and installs the bootloader from the OS's bootupd payload, as coreos-assembler's non-bootc path does. What differs: no /ostree/bootc state or .bootc-aleph.json (the aleph file is osbuild's /.aleph-version.json with /.coreos-aleph-version.json a link to it, not .bootc-aleph.json), the origin file is written by this tool, and anything the OS's bootc install configuration (/usr/lib/bootc/install/*.toml) sets, such as root filesystem type or kargs, is not applied");
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
pub fn free_space(p: &Path) -> Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes())?;
    // SAFETY: statvfs is a plain-old-data struct: all zeroes is a valid value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs on a valid path into a zeroed struct.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", p.display()));
    }
    let dev = std::fs::metadata(p)?.dev();
    Ok((s.f_bavail as u64 * s.f_frsize as u64, dev))
}

/// Hidden switch for tests: skip the free-space preflight so a real ENOSPC
/// happens (and is reported) while writing.
pub const SKIP_SPACE_CHECK_ENV: &str = "BOOTIMAGE_GEN_SKIP_SPACE_CHECK";

/// The places the run writes to, with the estimated need of each (for the
/// preflight below and for naming the filesystem of a later ENOSPC).
/// Estimated bytes: the work dir holds the base disk's data, a boot
/// filesystem per platform and a qcow2 before compression; each artifact
/// holds at most the disk's data (compressed ones about half).
pub fn space_places(plan: &Plan, work: &Path, out: &Path) -> Vec<Place> {
    let d = &plan.disk;
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
    vec![
        Place {
            role: "work directory in the cache".into(),
            path: work.to_path_buf(),
            need: work_need,
            fix: "free some space there or use --cache-dir on a larger filesystem; the cache stays valid".into(),
        },
        Place {
            role: "output directory".into(),
            path: out.to_path_buf(),
            need: out_need,
            fix: "free some space there or choose another with -o; the cache stays valid for the next run".into(),
        },
    ]
}

/// Refuse a run that would not fit, naming the filesystem, the need and
/// what is free.
pub fn check_space(places: &[Place]) -> Result<()> {
    if std::env::var_os(SKIP_SPACE_CHECK_ENV).is_some() {
        return Ok(());
    }
    let [work, out] = places else {
        bail!("internal: check_space takes the work and output places");
    };
    // The output dir may not exist yet: measure its nearest existing ancestor.
    let out_fs = out
        .path
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("."));
    let (wfree, wdev) = free_space(&work.path)?;
    let (ofree, odev) = free_space(out_fs)?;
    if wdev == odev {
        let need = work.need + out.need;
        if wfree < need {
            bail!("not enough free space on {}: the build needs about {} ({} of work files in {}, {} of artifacts in {}) and {} is free; free some space, or put -o or --cache-dir on a larger filesystem", describe_fs(&work.path), mib(need), mib(work.need), work.path.display(), mib(out.need), out.path.display(), mib(wfree));
        }
    } else {
        if wfree < work.need {
            bail!("not enough free space in the cache directory {} on {}: the build needs about {} there and {} is free; use --cache-dir on a larger filesystem", work.path.display(), describe_fs(&work.path), mib(work.need), mib(wfree));
        }
        if ofree < out.need {
            bail!("not enough free space for output directory {} on {}: the artifacts need about {} and {} is free; choose another with -o", out.path.display(), describe_fs(out_fs), mib(out.need), mib(ofree));
        }
    }
    Ok(())
}
