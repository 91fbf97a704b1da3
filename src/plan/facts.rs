//! What the checks find once the OS is imported, kept in the plan: the
//! OS must ship what the bootloaders need; what it ships for bootupd and
//! the live ISO, the host's ISOLINUX, the EROFS options, the image refs a
//! node's bootc reads, and the AMI `--aws-register` registers. In: the
//! plan, the OS and its cache repo; out: [`Facts`] (and notes on the
//! console of what the OS asks for and this run does instead).
use super::input;
use super::{Arch, Plan};
use crate::backend::job::{OS_EFI_DIR, OS_GRUB_BIOS_DIR};
use crate::live::{self, iso::Syslinux};
use crate::oscontainer::repo::Repo;
use crate::oscontainer::{ImageRefs, OsFormat, OsInfo};
use crate::platforms::Upload;
use crate::publish::aws;
use crate::util::progress::Reporter;
use anyhow::{bail, Result};

/// What the checks found, for the jobs.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// What the OS ships for bootupd, when it ships its metadata.
    pub bootupd: Option<BootupdInfo>,
    /// The host's ISOLINUX, when live is planned on an arch with BIOS.
    pub syslinux: Option<Syslinux>,
    /// The mkfs.erofs options, when live is planned and the OS asks for EROFS.
    pub erofs: Option<live::erofs::Options>,
    /// `--aws-register`: the AMI to register.
    pub ami_spec: Option<aws::AmiSpec>,
    /// The image and layer refs to give the sysroot repo (ostree-native).
    pub image_refs: Option<ImageRefs>,
}

/// What [`check_live`] found: the host's ISOLINUX (arches with BIOS) and
/// the mkfs.erofs options (an OS asking for EROFS).
pub type LiveFound = (Option<Syslinux>, Option<live::erofs::Options>);

/// Check what the OS ships against the plan, before anything is built, and
/// keep what was found in the plan. `aws`: `--aws-register`'s settings and
/// the session connected with them; `live`: what an earlier [`check_live`]
/// of this OS found (planning `all` checks it), not looked up again.
pub fn check(
    mut plan: Plan,
    os: &OsInfo,
    repo: &Repo,
    aws: Option<(&aws::Settings, &aws::Session)>,
    live: Option<LiveFound>,
    r: &Reporter,
) -> Result<Plan> {
    let ami_spec = match aws {
        Some((s, session)) => Some(aws_preflight(s, session, &plan, os, r)?),
        None => None,
    };
    check_bootloader(repo, &os.commit, &plan)?;
    let bootupd = check_bootupd(repo, os)?;
    let (syslinux, erofs) = match live {
        _ if !plan.artifacts.iter().any(|x| x.live.is_some()) => (None, None),
        Some(found) => found,
        None => check_live(repo, os, plan.release.arch)?,
    };
    note_os_requests(os, bootupd.as_ref(), erofs.as_ref(), r);
    let image_refs = match plan.os.os_format {
        OsFormat::OstreeNative => Some(crate::oscontainer::image_refs(
            &repo.path,
            &os.commit,
            &plan.os.pullspec,
        )?),
        OsFormat::Legacy => None,
    };
    plan.facts = Facts {
        bootupd,
        syslinux,
        erofs,
        ami_spec,
        image_refs,
    };
    Ok(plan)
}

/// `--aws-register`: the aws disk must be planned; the AMI to register;
/// each region reached with the credentials before the disk is built.
fn aws_preflight(
    s: &aws::Settings,
    session: &aws::Session,
    plan: &Plan,
    os: &OsInfo,
    r: &Reporter,
) -> Result<aws::AmiSpec> {
    if !plan
        .artifacts
        .iter()
        .any(|x| x.spec.uploads_to(Upload::Aws))
    {
        bail!("--aws-register needs the aws platform, which is not planned (the release's stream does not list it); name aws explicitly");
    }
    let spec = aws::AmiSpec::new(
        s,
        &plan.name,
        &plan.version,
        plan.release.arch,
        &plan.release.version,
        &os.config.image,
    )?;
    session.preflight(&spec, r)?;
    Ok(spec)
}

/// The OS must ship what the bootloaders need.
fn check_bootloader(repo: &Repo, commit: &str, plan: &Plan) -> Result<()> {
    let arch = plan.disk.arch;
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
        bail!(
            "this tool does not know how {arch} machines boot (known: {})",
            Arch::known_names()
        );
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

/// The OS and the host must have what the live ISO needs (docs/contract.md §5): a
/// usable initramfs, the EFI GRUB vendor directory (for the ISO's
/// `EFI/<vendor>/grub.cfg` and efiboot.img), a squashfs live root, and
/// ISOLINUX on the host. Checked before anything is built.
pub fn check_live(repo: &Repo, os: &OsInfo, arch: Arch) -> Result<LiveFound> {
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
#[derive(Debug, Clone)]
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
fn check_bootupd(repo: &Repo, os: &OsInfo) -> Result<Option<BootupdInfo>> {
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
