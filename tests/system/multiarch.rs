//! Other architectures (issue 17), built on this x86_64 host from the
//! `-multi` test release, whose arm64 entry is the aarch64 test OS made of
//! Debian's arm64 packages: `generate … --arch aarch64` (what `all` plans for
//! aarch64 checked on the plan, the stream's platforms built), the layout read
//! back with sfdisk and mtools, the ISO with xorriso and coreos-installer,
//! the stream with the `coreos-stream-metadata` crate, and every disk kind
//! and the live ISO (as CD and as USB disk) and PXE booted under
//! `qemu-system-aarch64 -M virt` with AAVMF (TCG), each printing its
//! `platform=` and `arch=aarch64`. Likewise for ppc64le (Debian's ppc64el
//! packages): the PReP layout, the CHRP ISO, the powervs OVA, and a disk,
//! the qcow2, the ISO and PXE booted under `qemu-system-ppc64 -M pseries`
//! with SLOF.
use crate::common::boot::{self, DiskFormat, Firmware, Media, Mode};
use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const ARCH: &str = "aarch64";

/// `generate <-multi release> <platforms> --arch <arch>`, once per arch.
fn build(cell: &'static OnceLock<Built>, arch: &'static str, platforms: &[&str]) -> &'static Built {
    let release = oci("release-multi");
    let mut args: Vec<&str> = vec![&release];
    args.extend(platforms);
    args.extend(["--arch", arch]);
    built_once(cell, &format!("multiarch-{arch}"), &args, true)
}

/// The aarch64 test OS: the platforms the tests below read or boot, and
/// the stream's (`RHCOS_AARCH64`) but azure. The rest of `all` for aarch64
/// (azure, hyperv, oraclecloud, applehv, hetzner) are encoders the x86_64
/// `generate all` runs (generate_platforms) on the same derive path; three
/// of them are 10 GiB disks whose sha256 alone takes half a minute each
/// (issue 27). What `all` resolves to for aarch64 is checked on the plan
/// (`all_plans_the_aarch64_set_and_nothing_x86_only`).
const AARCH64_BUILT: &[&str] = &[
    "metal",
    "metal4k",
    "qemu",
    "openstack",
    "aws",
    "gcp",
    "live",
];

fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    build(&B, ARCH, AARCH64_BUILT)
}

fn sh(script: &str, dir: &Path) -> String {
    must(Command::new("sh").args(["-ec", script]).current_dir(dir))
}

/// `cmd` with `$l` a read-only loop device over `disk` (in the raw dir of
/// `b`) set up with `losetup_opts`, detached whatever `cmd` does.
fn on_loop_in(b: &Built, disk: &str, losetup_opts: &str, cmd: &str) -> String {
    sh(
        &format!(
            "l=$(losetup --find --show --read-only {losetup_opts} {disk}); \
             rc=0; {cmd} || rc=$?; losetup -d $l; exit $rc"
        ),
        &b.raw,
    )
}

/// The arch a shared run built (its meta.json's, as cosa records it).
fn arch_of(b: &Built) -> &str {
    b.meta["coreos-assembler.basearch"].as_str().unwrap()
}

fn artifact_in(b: &Built, key: &str) -> PathBuf {
    image_file(&b.meta, &b.out, key)
}

/// The root filesystem of the metal disk `raw` (found by its partition
/// name), mounted read-only at `at`.
fn metal_root(raw: &Path, at: &Path) -> Mnt {
    let disk = raw.join("metal.raw");
    let j: Value =
        serde_json::from_str(&must(Command::new("sfdisk").arg("-J").arg(&disk))).unwrap();
    let t = &j["partitiontable"];
    let ss = t["sectorsize"].as_u64().unwrap_or(512);
    let p = t["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "root")
        .unwrap_or_else(|| panic!("no root partition in {t}"));
    Mnt::new(
        &disk,
        p["start"].as_u64().unwrap() * ss,
        p["size"].as_u64().unwrap() * ss,
        "xfs",
        "ro,norecovery,nouuid",
        at,
    )
}

/// Issue 28: the OS of another arch is laid down by its own ostree (sid's,
/// which writes the deployment's composefs image, `.ostree.cfs`; this
/// host's 2022.7 writes none: faithful.rs shows that difference), run from
/// a buildroot of its tree through this host's static qemu-user, called
/// explicitly: said on the console and in meta.json.
fn laid_down_by_its_own_ostree(arch: &str, raw: &Path, meta: &Value, log: &str, at: &Path) {
    let d = &meta["images"]["metal"]["ostree-deploy"];
    assert_eq!(d["tool"], "os", "{d}");
    let emu = d["emulator"].as_str().unwrap_or_default();
    assert!(emu.contains(&format!("qemu-{arch}")), "{d}");
    assert!(
        log.contains(&format!("{arch} programs run by /")) && log.contains("no binfmt_misc"),
        "{log}"
    );
    let root = metal_root(raw, at);
    let deploy = root.0.join("ostree/deploy");
    let stateroot = std::fs::read_dir(&deploy)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let dep = std::fs::read_dir(stateroot.join("deploy"))
        .unwrap()
        .flatten()
        .find(|e| e.path().is_dir())
        .unwrap()
        .path();
    assert!(
        dep.join(".ostree.cfs").is_file(),
        "no .ostree.cfs in {}: not laid down by the OS's own ostree",
        dep.display()
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn aarch64_is_laid_down_by_its_own_ostree_through_qemu_user() {
    let b = built();
    laid_down_by_its_own_ostree(arch_of(b), &b.raw, &b.meta, &b.log, &b.root.join("mnt-own"));
}

/// The aarch64 set is reproducible too (docs/contract.md §9): `verify`
/// rebuilds it on another cache, output path and TMPDIR, in another time
/// zone, on one CPU, and every file matches byte for byte (its OS laid
/// down by its own ostree under qemu-user both times).
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn aarch64_rebuilds_elsewhere_to_the_same_bytes() {
    let b = built();
    let again = b.root.join("again");
    let _ = std::fs::remove_dir_all(&again);
    std::fs::create_dir_all(again.join("tmp")).unwrap();
    let o = Command::new("taskset")
        .args(["-c", "0", env!("CARGO_BIN_EXE_bootimage-gen"), "verify"])
        .arg(&b.out)
        .arg("--rebuild-dir")
        .arg(again.join("out"))
        .arg("--")
        .arg("--cache-dir")
        .arg(again.join("cache"))
        .env("TZ", "Asia/Kolkata")
        .env("TMPDIR", again.join("tmp"))
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert_eq!(
        o.status.code(),
        Some(0),
        "verify of the aarch64 set:\n{text}"
    );
    assert!(
        text.contains("--arch aarch64"),
        "the rebuild was not for aarch64:\n{text}"
    );
    assert!(text.contains("match the rebuild byte for byte"), "{text}");
    let _ = std::fs::remove_dir_all(&again);
}

/// What RHCOS ships for aarch64 (openshift/installer
/// `data/data/coreos/coreos-rhel-9.json`), all of which `all` must plan.
const RHCOS_AARCH64: &[&str] = &[
    "metal",
    "metal4k",
    "qemu",
    "openstack",
    "aws",
    "azure",
    "gcp",
];

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn all_plans_the_aarch64_set_and_nothing_x86_only() {
    // `all --arch aarch64` as planned (`--dry-run` prints the plan the run
    // would execute, artifact by artifact).
    let c = tempfile::tempdir().unwrap();
    let o = run(
        c.path(),
        &[
            "generate",
            &oci("release-multi"),
            "all",
            "--arch",
            ARCH,
            "--dry-run",
            "-o",
            c.path().join("out").to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let plan: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plan["release"]["arch"], ARCH);
    let planned: Vec<&str> = plan["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["platform"].as_str().unwrap())
        .collect();
    for k in RHCOS_AARCH64.iter().chain(&["live"]) {
        assert!(
            planned.contains(k),
            "{k} not in all for aarch64: {planned:?}"
        );
    }
    for a in plan["artifacts"].as_array().unwrap() {
        let f = a["file"].as_str().unwrap();
        assert!(f.contains(".aarch64") || f.contains("-aarch64"), "{a}");
    }
    // x86_64-only platforms (vmware, nutanix, ibmcloud, ...) are not planned.
    for k in [
        "vmware",
        "nutanix",
        "ibmcloud",
        "azurestack",
        "virtualbox",
        "kubevirt",
    ] {
        assert!(
            !planned.contains(&k),
            "{k} planned for aarch64: {planned:?}"
        );
    }
    // The build publishes every platform it was given, for aarch64.
    let b = built();
    assert_eq!(b.meta["coreos-assembler.basearch"], ARCH);
    let images = b.meta["images"].as_object().unwrap();
    let built_keys = AARCH64_BUILT.iter().filter(|k| **k != "live").chain(&[
        "live-iso",
        "live-kernel",
        "live-initramfs",
        "live-rootfs",
    ]);
    for k in built_keys {
        let p = images[*k]["path"]
            .as_str()
            .unwrap_or_else(|| panic!("no images.{k}: {}", b.log));
        assert!(p.contains(".aarch64") || p.contains("-aarch64"), "{k}: {p}");
    }
    let sums = sh(
        "sha256sum -c --quiet SHA256SUMS && wc -l < SHA256SUMS",
        &b.out,
    );
    assert!(sums.trim().parse::<usize>().unwrap() >= AARCH64_BUILT.len() + 3);
}

/// cosa `coreos.osbuild.aarch64.mpp.yaml`: reserved (1 MiB, its own type),
/// EFI-SYSTEM, boot, root with the aarch64 root type; no BIOS boot code in
/// the MBR; the ESP holds shim and GRUB for arm64.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn metal_layout_is_aarch64s() {
    let b = built();
    for (disk, ss) in [("metal.raw", 512), ("metal4k.raw", 4096)] {
        // Through a loop device of the disk's sector size (sfdisk reads a
        // file with 512-byte sectors).
        let j: Value = serde_json::from_str(&on_loop_in(
            built(),
            disk,
            &format!("--sector-size {ss}"),
            "sfdisk -J $l",
        ))
        .unwrap();
        let parts = j["partitiontable"]["partitions"].as_array().unwrap();
        let rows: Vec<(&str, &str)> = parts
            .iter()
            .map(|p| (p["name"].as_str().unwrap(), p["type"].as_str().unwrap()))
            .collect();
        assert_eq!(
            rows,
            [
                ("reserved", "8DA63339-0007-60C0-C436-083AC8230908"),
                ("EFI-SYSTEM", "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"),
                ("boot", "BC13C2FF-59E6-4262-A352-B275FD6F7172"),
                ("root", "B921B045-1DF0-41C3-AF44-4C6F280D3FAE"),
            ],
            "{disk}"
        );
        let starts: Vec<u64> = parts
            .iter()
            .map(|p| p["start"].as_u64().unwrap() * ss / (1 << 20))
            .collect();
        assert_eq!(starts, [1, 2, 129, 513], "{disk}");
    }
    let mbr = std::fs::read(b.raw.join("metal.raw")).unwrap();
    assert!(
        mbr[..440].iter().all(|&x| x == 0),
        "boot code in the MBR of an aarch64 disk"
    );
    let esp = sh("mdir -b -/ -i metal.raw@@2M ::/EFI", &b.raw);
    for f in [
        "::/EFI/BOOT/BOOTAA64.EFI",
        "::/EFI/redhat/shimaa64.efi",
        "::/EFI/redhat/grubaa64.efi",
        "::/EFI/redhat/grub.cfg",
    ] {
        assert!(
            esp.lines().any(|l| l.eq_ignore_ascii_case(f)),
            "{f} not in the ESP:\n{esp}"
        );
    }
    assert!(!esp.to_ascii_lowercase().contains("x64"), "{esp}");
}

/// The bootupd state names EFI only (no BIOS component on aarch64).
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn bootupd_state_has_efi_only() {
    // The boot partition (129 MiB, 384 MiB) read in place.
    let state = on_loop_in(
        built(),
        "metal.raw",
        "--offset=$((129<<20)) --sizelimit=$((384<<20))",
        "debugfs -R 'cat /bootupd-state.json' $l 2>/dev/null",
    );
    let v: Value = serde_json::from_str(&state).unwrap();
    let installed = v["installed"].as_object().unwrap();
    assert!(installed.contains_key("EFI"), "{v}");
    assert!(!installed.contains_key("BIOS"), "{v}");
    assert!(
        v["installed"]["EFI"]["meta"]["version"]
            .as_str()
            .unwrap()
            .contains("aarch64"),
        "{v}"
    );
}

/// osbuild `gen_live_artifacts` for aarch64: EFI El Torito only, no
/// ISOLINUX binaries; coreos-installer edits it as any live ISO.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn live_iso_is_efi_only_and_coreos_installer_edits_it() {
    let b = built();
    let iso = artifact_in(built(), "live-iso");
    let rep = sh(
        &format!(
            "xorriso -indev '{}' -report_el_torito plain 2>/dev/null",
            iso.display()
        ),
        &b.root,
    );
    let imgs: Vec<&str> = rep
        .lines()
        .filter(|l| l.starts_with("El Torito boot img :"))
        .collect();
    assert_eq!(imgs.len(), 1, "{rep}");
    assert!(imgs[0].contains("UEFI"), "{rep}");
    let files = sh(
        &format!(
            "xorriso -indev '{}' -find / -type f 2>/dev/null",
            iso.display()
        ),
        &b.root,
    );
    assert!(
        !files.contains("isolinux.bin") && !files.contains("ldlinux.c32"),
        "{files}"
    );
    let kargs = sh(
        &format!("coreos-installer iso kargs show '{}'", iso.display()),
        &b.root,
    );
    assert!(kargs.contains("coreos.liveiso="), "{kargs}");
    let copy = b.root.join("edited.iso");
    std::fs::copy(&iso, &copy).unwrap();
    let ign = b.root.join("x.ign");
    std::fs::write(&ign, br#"{"ignition":{"version":"3.4.0"}}"#).unwrap();
    sh(
        &format!(
            "coreos-installer iso ignition embed -i '{}' '{}' && coreos-installer iso ignition show '{}'",
            ign.display(),
            copy.display(),
            copy.display()
        ),
        &b.root,
    );
    std::fs::remove_file(&copy).unwrap();
}

/// coreos/stream-metadata-go's schema, through its Rust crate.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn stream_metadata_reads_the_aarch64_stream() {
    let b = built();
    let raw = read(&b.out.join("stream.json"));
    let s: coreos_stream_metadata::Stream = serde_json::from_slice(&raw).unwrap();
    let a = s.architectures.get(ARCH).expect("architectures.aarch64");
    for p in ["metal", "qemu", "openstack", "aws", "gcp"] {
        assert!(a.artifacts.contains_key(p), "{p} missing in stream.json");
    }
    assert!(!s.architectures.contains_key("x86_64"));
}

/// The CI matrix's fan-in on directories (issue 31): `stream merge` of the
/// aarch64, ppc64le and s390x runs' stream.json into one document, which
/// coreos-stream-metadata reads with all three arches; every location,
/// seen from the merged file's directory, is the file with its sha256
/// (checked on the arch's smallest file, existence and size on the rest).
/// The same arch from two different builds is refused, naming both.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn stream_merge_joins_every_arch_and_locations_still_name_the_files() {
    let runs = [built(), ppc(), z()];
    let root = scratch("multiarch-merge");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let merged = root.join("all").join("stream.json");
    let mut a: Vec<&str> = vec!["stream", "merge"];
    let dirs: Vec<String> = runs.iter().map(|b| b.out.display().to_string()).collect();
    a.extend(dirs.iter().map(String::as_str));
    let m = merged.display().to_string();
    a.extend(["-o", m.as_str()]);
    let o = run(&root.join("cache"), &a);
    assert!(o.status.success(), "{}", stderr(&o));
    let s: coreos_stream_metadata::Stream = serde_json::from_slice(&read(&merged)).unwrap();
    let mut arches: Vec<&str> = s.architectures.keys().map(String::as_str).collect();
    arches.sort_unstable();
    assert_eq!(arches, ["aarch64", "ppc64le", "s390x"]);
    let here = merged.parent().unwrap();
    for b in runs {
        let arch = &s.architectures[arch_of(b)];
        let mut files = Vec::new();
        for p in arch.artifacts.values() {
            for f in p.formats.values() {
                for art in f.values() {
                    let path = here.join(&art.location);
                    let len = std::fs::metadata(&path)
                        .unwrap_or_else(|e| panic!("{}: {} ({e})", arch_of(b), art.location))
                        .len();
                    files.push((len, path, art.sha256.clone()));
                }
            }
        }
        assert!(files.len() >= 5, "{}: {files:?}", arch_of(b));
        files.sort();
        let (_, small, want) = &files[0];
        let got = must(Command::new("sha256sum").arg(small));
        assert!(
            got.starts_with(want.as_str()),
            "{}: {got} vs {want}",
            arch_of(b)
        );
    }
    // Negative: aarch64 twice, the second another build.
    let other = root.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let mut doc: Value = serde_json::from_slice(&read(&built().out.join("stream.json"))).unwrap();
    for p in doc["architectures"]["aarch64"]["artifacts"]
        .as_object_mut()
        .unwrap()
        .values_mut()
    {
        p["release"] = "999.0".into();
    }
    std::fs::write(other.join("stream.json"), doc.to_string()).unwrap();
    let e = expect_error(
        &root.join("cache"),
        &[
            "stream",
            "merge",
            &dirs[0],
            other.to_str().unwrap(),
            "-o",
            &m,
        ],
        "arch aarch64 is in both",
    );
    assert!(e.contains("999.0"), "{e}");
}

/// The gzip'd artifact `key` of `b`, unpacked once as `name`.
fn ungz_in(b: &Built, key: &str, name: &str) -> PathBuf {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = LOCK.lock().unwrap();
    let dir = b.root.join("disks");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    if !p.exists() {
        sh(
            &format!(
                "gzip -dc '{}' > '{name}.tmp' && mv '{name}.tmp' '{name}'",
                artifact_in(b, key).display()
            ),
            &dir,
        );
    }
    p
}

fn check_marker_in(b: &Built, r: &boot::BootResult, platform: &str, mode: Mode) {
    assert_eq!(r.marker.platform, platform, "{}", r.log);
    assert_eq!(r.marker.mode, mode, "{}", r.log);
    assert_eq!(r.marker.arch.as_deref(), Some(arch_of(b)), "{}", r.log);
    assert!(r.marker.firstboot, "{}", r.log);
    assert_eq!(r.marker.version, b.meta["ostree-version"].as_str().unwrap());
}

/// Boot `media` of `b`'s arch under `fw` and check its marker.
fn boots(b: &Built, fw: Firmware, media: Media, platform: &str, mode: Mode) -> boot::BootResult {
    let r = boot::assert_boots(&[media], fw, boot::default_timeout());
    check_marker_in(b, &r, platform, mode);
    eprintln!(
        "{platform} {}/{fw} ({mode:?}): booted in {:.1?}",
        arch_of(b),
        r.duration
    );
    r
}

/// PXE by `-kernel/-initrd` with `b`'s live files: the live ISO's kernel
/// arguments without `coreos.liveiso=`, then `console`.
fn pxe_media(b: &Built, console: &str) -> Media {
    let kargs = sh(
        &format!(
            "coreos-installer iso kargs show '{}'",
            artifact_in(b, "live-iso").display()
        ),
        &b.root,
    );
    let kargs: Vec<&str> = kargs
        .split_whitespace()
        .filter(|k| !k.starts_with("coreos.liveiso="))
        .collect();
    Media::kernel(
        artifact_in(b, "live-kernel"),
        &[
            &artifact_in(b, "live-initramfs"),
            &artifact_in(b, "live-rootfs"),
        ],
        &format!("{} {console}", kargs.join(" ")),
    )
}

fn boots_disk(media: Media, platform: &str) {
    boots(built(), Firmware::Aavmf, media, platform, Mode::Disk);
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_metal_aavmf() {
    boots_disk(Media::disk(built().raw.join("metal.raw")), "metal");
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_metal4k_aavmf_4k_disk() {
    boots_disk(
        Media::disk_4k(built().raw.join("metal4k.raw"), DiskFormat::Raw),
        "metal",
    );
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_qemu_qcow2_aavmf() {
    let p = ungz_in(built(), "qemu", "qemu.qcow2");
    boots_disk(Media::disk_as(p, DiskFormat::Qcow2), "qemu");
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_aws_vmdk_aavmf() {
    let p = ungz_in(built(), "aws", "aws.vmdk");
    boots_disk(Media::disk_as(p, DiskFormat::Vmdk), "aws");
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_live_iso_as_cd_aavmf() {
    let media = Media::Cdrom(artifact_in(built(), "live-iso"));
    boots(built(), Firmware::Aavmf, media, "metal", Mode::LiveIso);
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_live_iso_as_usb_disk_aavmf() {
    let media = Media::UsbDisk(artifact_in(built(), "live-iso"));
    boots(built(), Firmware::Aavmf, media, "metal", Mode::LiveIso);
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_pxe_by_kernel_and_initrds_aarch64() {
    boots(
        built(),
        Firmware::Aavmf,
        pxe_media(built(), "console=ttyAMA0"),
        "metal",
        Mode::LivePxe,
    );
}

// ---------------------------------------------------------------------------
// ppc64le: the -multi release's ppc64le entry (Debian's ppc64el packages).

/// The ppc64le test OS, every platform.
fn ppc() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    build(&B, "ppc64le", &["all"])
}

/// What RHCOS ships for ppc64le (openshift/installer
/// `data/data/coreos/coreos-rhel-9.json`).
const RHCOS_PPC64LE: &[&str] = &["metal", "metal4k", "qemu", "openstack", "powervs"];

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn all_builds_the_ppc64le_set() {
    let b = ppc();
    assert_eq!(b.meta["coreos-assembler.basearch"], "ppc64le");
    let images = b.meta["images"].as_object().unwrap();
    for k in
        RHCOS_PPC64LE
            .iter()
            .chain(&["live-iso", "live-kernel", "live-initramfs", "live-rootfs"])
    {
        let p = images[*k]["path"]
            .as_str()
            .unwrap_or_else(|| panic!("no images.{k}: {}", b.log));
        assert!(p.contains(".ppc64le") || p.contains("-ppc64le"), "{k}: {p}");
    }
    for k in ["aws", "azure", "gcp", "vmware", "ibmcloud", "kubevirt"] {
        assert!(!images.contains_key(k), "{k} built for ppc64le: {}", b.log);
    }
    let sums = sh(
        "sha256sum -c --quiet SHA256SUMS && wc -l < SHA256SUMS",
        &b.out,
    );
    assert!(sums.trim().parse::<usize>().unwrap() >= RHCOS_PPC64LE.len() + 4);
    let raw = read(&b.out.join("stream.json"));
    let s: coreos_stream_metadata::Stream = serde_json::from_slice(&raw).unwrap();
    let a = s
        .architectures
        .get("ppc64le")
        .expect("architectures.ppc64le");
    for p in ["metal", "qemu", "openstack", "powervs"] {
        assert!(a.artifacts.contains_key(p), "{p} missing in stream.json");
    }
}

/// cosa `coreos.osbuild.ppc64le.mpp.yaml`: PReP (4 MiB) with GRUB's
/// powerpc-ieee1275 core image (a big-endian 32-bit PowerPC ELF, as
/// grub2-install writes it), reserved, boot, root with the ppc64le root
/// type, at 1, 5, 6 and 390 MiB for both sector sizes; no ESP and no MBR
/// boot code; GRUB's modules and bootupd's state (BIOS only) on /boot.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn ppc64le_layout_prep_and_bootupd_state() {
    let b = ppc();
    for (disk, ss) in [("metal.raw", 512), ("metal4k.raw", 4096)] {
        let j: Value = serde_json::from_str(&on_loop_in(
            b,
            disk,
            &format!("--sector-size {ss}"),
            "sfdisk -J $l",
        ))
        .unwrap();
        let parts = j["partitiontable"]["partitions"].as_array().unwrap();
        let rows: Vec<(&str, &str, u64)> = parts
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap(),
                    p["type"].as_str().unwrap(),
                    p["start"].as_u64().unwrap() * ss / (1 << 20),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (
                    "PowerPC-PReP-boot",
                    "9E1A2D38-C612-4316-AA26-8B49521E5A8B",
                    1
                ),
                ("reserved", "8DA63339-0007-60C0-C436-083AC8230908", 5),
                ("boot", "BC13C2FF-59E6-4262-A352-B275FD6F7172", 6),
                ("root", "C31C45E6-3F39-412E-80FB-4809C4980599", 390),
            ],
            "{disk}"
        );
        let elf = sh(
            &format!("dd if={disk} bs=1M skip=1 count=4 status=none > prep.bin && readelf -h prep.bin && rm prep.bin"),
            &b.raw,
        );
        assert!(
            elf.contains("ELF32") && elf.contains("big endian") && elf.contains("PowerPC"),
            "{disk}: PReP holds no GRUB ELF image:\n{elf}"
        );
    }
    let mbr = std::fs::read(b.raw.join("metal.raw")).unwrap();
    assert!(
        mbr[..440].iter().all(|&x| x == 0),
        "boot code in a ppc64le MBR"
    );
    let boot = "--offset=$((6<<20)) --sizelimit=$((384<<20))";
    let ls = on_loop_in(
        b,
        "metal.raw",
        boot,
        "debugfs -R 'ls -l /grub2/powerpc-ieee1275' $l 2>/dev/null",
    );
    assert!(
        ls.contains("normal.mod") && ls.contains("linux.mod"),
        "{ls}"
    );
    let state = on_loop_in(
        b,
        "metal.raw",
        boot,
        "debugfs -R 'cat /bootupd-state.json' $l 2>/dev/null",
    );
    let v: Value = serde_json::from_str(&state).unwrap();
    let installed = v["installed"].as_object().unwrap();
    assert_eq!(installed.keys().collect::<Vec<_>>(), ["BIOS"], "{v}");
    assert!(
        v["installed"]["BIOS"]["meta"]["version"]
            .as_str()
            .unwrap()
            .contains("ieee1275"),
        "{v}"
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn ppc64le_is_laid_down_by_its_own_ostree_through_qemu_user() {
    let b = ppc();
    laid_down_by_its_own_ostree(arch_of(b), &b.raw, &b.meta, &b.log, &b.root.join("mnt-own"));
}

/// osbuild's ppc64le ISO (grub2-mkrescue): CHRP boot (`ppc/bootinfo.txt`
/// loading `boot/grub/powerpc.elf`), the menu in `boot/grub/grub.cfg`, no
/// El Torito, EFI or ISOLINUX; kargs.json lists only that menu, and
/// coreos-installer edits kargs and embeds Ignition.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn ppc64le_live_iso_is_chrp_and_coreos_installer_edits_it() {
    let b = ppc();
    let iso = artifact_in(b, "live-iso");
    let files = sh(
        &format!(
            "xorriso -indev '{}' -find / -type f 2>/dev/null",
            iso.display()
        ),
        &b.root,
    );
    for f in [
        "'/ppc/bootinfo.txt'",
        "'/boot/grub/powerpc.elf'",
        "'/boot/grub/grub.cfg'",
        "'/boot/grub/powerpc-ieee1275/normal.mod'",
    ] {
        assert!(
            files.lines().any(|l| l == f),
            "{f} not in the ISO:\n{files}"
        );
    }
    for bad in ["/EFI/", "/isolinux/", "efiboot.img", "zipl.prm"] {
        assert!(!files.contains(bad), "{bad} in the ppc64le ISO:\n{files}");
    }
    let torito = sh(
        &format!(
            "xorriso -indev '{}' -report_el_torito plain 2>&1 || true",
            iso.display()
        ),
        &b.root,
    );
    assert!(!torito.contains("El Torito boot img :"), "{torito}");
    let kargs_json: Value = serde_json::from_str(&sh(
        &format!(
            "xorriso -indev '{}' -osirrox on -extract /coreos/kargs.json kargs.json 2>/dev/null && cat kargs.json && rm kargs.json",
            iso.display()
        ),
        &b.root,
    ))
    .unwrap();
    let paths: Vec<&str> = kargs_json["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["boot/grub/grub.cfg"]);
    let copy = b.root.join("edited.iso");
    std::fs::copy(&iso, &copy).unwrap();
    let ign = b.root.join("x.ign");
    std::fs::write(&ign, br#"{"ignition":{"version":"3.4.0"}}"#).unwrap();
    let out = sh(
        &format!(
            "coreos-installer iso kargs modify -a test.karg=1 '{c}' && coreos-installer iso kargs show '{c}' && \
             coreos-installer iso ignition embed -i '{}' '{c}' && coreos-installer iso ignition show '{c}'",
            ign.display(),
            c = copy.display()
        ),
        &b.root,
    );
    assert!(
        out.contains("test.karg=1") && out.contains("3.4.0"),
        "{out}"
    );
    std::fs::remove_file(&copy).unwrap();
}

/// cosa's powervs artifact: a gzip'd tar of `coreos.ovf` then
/// `<name>-<version>-disk.raw`, the OVF naming the disk and its size, and
/// the disk's kernel arguments those of powervs.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn powervs_ova_is_cosas() {
    let b = ppc();
    let ova = artifact_in(b, "powervs");
    assert!(ova.to_str().unwrap().ends_with("-powervs.ppc64le.ova.gz"));
    let image = format!(
        "{}-{}",
        b.meta["name"].as_str().unwrap(),
        b.meta["ostree-version"].as_str().unwrap()
    );
    let dir = b.root.join("powervs");
    std::fs::create_dir_all(&dir).unwrap();
    let list = sh(&format!("tar -tzf '{}'", ova.display()), &dir);
    assert_eq!(
        list.lines().collect::<Vec<_>>(),
        ["coreos.ovf".to_string(), format!("{image}-disk.raw")]
    );
    sh(&format!("tar -xzSf '{}'", ova.display()), &dir);
    let disk = dir.join(format!("{image}-disk.raw"));
    let size = std::fs::metadata(&disk).unwrap().len();
    let ovf = read(&dir.join("coreos.ovf"));
    let ovf = String::from_utf8_lossy(&ovf);
    assert!(
        ovf.contains(&format!(
            r#"<ovf:File href="{image}-disk.raw" id="file1" size="{size}"/>"#
        )),
        "{ovf}"
    );
    assert!(ovf.contains(">ppc64le</ns0:architecture>"), "{ovf}");
    // The BLS entry, whatever its ostree named it (2022.7:
    // ostree-1-<osname>.conf; the OS's sid ostree: ostree-1.conf).
    let entries = sh(
        &format!(
            "l=$(losetup --find --show --read-only --offset=$((6<<20)) --sizelimit=$((384<<20)) '{}'); \
             rc=0; for e in $(debugfs -R 'ls /loader/entries' $l 2>/dev/null | tr -s ' ' '\\n' | grep '^ostree-.*\\.conf$'); do \
             debugfs -R \"cat /loader/entries/$e\" $l 2>/dev/null || rc=$?; done; losetup -d $l; exit $rc",
            disk.display(),
        ),
        &dir,
    );
    assert!(entries.contains("linux "), "no BLS entry read: {entries:?}");
    assert!(
        entries.contains("ignition.platform.id=powervs"),
        "{entries}"
    );
    assert!(!entries.contains("console=hvc0"), "{entries}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn boots_ppc(media: Media, platform: &str, mode: Mode) {
    boots(ppc(), Firmware::Slof, media, platform, mode);
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_metal_slof() {
    boots_ppc(
        Media::disk(ppc().raw.join("metal.raw")),
        "metal",
        Mode::Disk,
    );
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_qemu_qcow2_slof() {
    let p = ungz_in(ppc(), "qemu", "qemu.qcow2");
    boots_ppc(Media::disk_as(p, DiskFormat::Qcow2), "qemu", Mode::Disk);
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_live_iso_as_cd_slof() {
    boots_ppc(
        Media::Cdrom(artifact_in(ppc(), "live-iso")),
        "metal",
        Mode::LiveIso,
    );
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_pxe_by_kernel_and_initrds_ppc64le() {
    boots_ppc(pxe_media(ppc(), "console=hvc0"), "metal", Mode::LivePxe);
}

// ---------------------------------------------------------------------------
// s390x: the -multi release's s390x entry (Debian's s390x packages, zipl
// from s390-tools run through qemu-s390x-static).

/// The s390x test OS, every platform.
fn z() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    build(&B, "s390x", &["all"])
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn s390x_is_laid_down_by_its_own_ostree_through_qemu_user() {
    let b = z();
    laid_down_by_its_own_ostree(arch_of(b), &b.raw, &b.meta, &b.log, &b.root.join("mnt-own"));
}

/// cosa `coreos.osbuild.s390x.mpp.yaml`: boot and root only, as partitions
/// 3 and 4; zipl's SCSI boot record (`zIPL`) in the first sector with the
/// protective MBR kept; no GRUB files on /boot; the PXE files but no ISO
/// (its cdboot.img needs lorax's mk-s390image), said in one note.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn s390x_layout_zipl_record_and_artifacts() {
    let b = z();
    assert_eq!(b.meta["coreos-assembler.basearch"], "s390x");
    let images = b.meta["images"].as_object().unwrap();
    for k in [
        "metal",
        "metal4k",
        "qemu",
        "openstack",
        "ibmcloud",
        "kubevirt",
        "live-kernel",
        "live-initramfs",
        "live-rootfs",
    ] {
        assert!(images.contains_key(k), "no images.{k}: {}", b.log);
    }
    assert!(!images.contains_key("live-iso"));
    assert!(b.log.contains("no ISO for s390x"), "{}", b.log);
    sh("sha256sum -c --quiet SHA256SUMS", &b.out);
    for (disk, ss) in [("metal.raw", 512), ("metal4k.raw", 4096)] {
        let j: Value = serde_json::from_str(&on_loop_in(
            b,
            disk,
            &format!("--sector-size {ss}"),
            "sfdisk -J $l",
        ))
        .unwrap();
        let rows: Vec<(String, String, u64)> = j["partitiontable"]["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let node = p["node"].as_str().unwrap();
                (
                    node[node.len() - 1..].to_string(),
                    p["type"].as_str().unwrap().to_string(),
                    p["start"].as_u64().unwrap() * ss / (1 << 20),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("3".into(), "BC13C2FF-59E6-4262-A352-B275FD6F7172".into(), 1),
                (
                    "4".into(),
                    "5EEAD9A9-FE09-4A1E-A1D7-520D00531306".into(),
                    385
                ),
            ],
            "{disk}"
        );
        let head = std::fs::read(b.raw.join(disk)).unwrap();
        assert_eq!(&head[..4], b"zIPL", "{disk}: no zipl boot record");
        assert_eq!(head[450], 0xEE, "{disk}: protective MBR entry lost");
        assert_eq!(&head[510..512], b"\x55\xAA");
    }
    let ls = on_loop_in(
        b,
        "metal.raw",
        "--offset=$((1<<20)) --sizelimit=$((384<<20))",
        "debugfs -R 'ls -l /' $l 2>/dev/null",
    );
    assert!(ls.contains("bootmap"), "{ls}");
    assert!(!ls.contains("grub2"), "{ls}");
}

fn boots_z(media: Media, platform: &str, mode: Mode) {
    let r = boots(z(), Firmware::S390Ccw, media, platform, mode);
    let cmdline = r.cmdline.clone().unwrap_or_default();
    assert!(
        cmdline.contains("ignition.firstboot") && !cmdline.contains('$'),
        "{cmdline}\n{}",
        r.log
    );
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_metal_s390x() {
    boots_z(Media::disk(z().raw.join("metal.raw")), "metal", Mode::Disk);
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_metal4k_s390x_4k_disk() {
    boots_z(
        Media::disk_4k(z().raw.join("metal4k.raw"), DiskFormat::Raw),
        "metal",
        Mode::Disk,
    );
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_qemu_qcow2_s390x() {
    let p = ungz_in(z(), "qemu", "qemu.qcow2");
    boots_z(Media::disk_as(p, DiskFormat::Qcow2), "qemu", Mode::Disk);
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_pxe_by_kernel_and_initrds_s390x() {
    let b = z();
    boots_z(
        Media::kernel(
            artifact_in(b, "live-kernel"),
            &[
                &artifact_in(b, "live-initramfs"),
                &artifact_in(b, "live-rootfs"),
            ],
            "rw ignition.firstboot ignition.platform.id=metal console=ttysclp0",
        ),
        "metal",
        Mode::LivePxe,
    );
}

/// The nokvm appliance (x86_64, TCG) builds an s390x disk the same way as
/// loopback: its appliance carries qemu-user-static for the OS's zipl. The
/// disk has zipl's record and boots.
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn s390x_disk_from_the_nokvm_vm_boots() {
    let root = scratch("multiarch-s390x-vm");
    let _ = std::fs::remove_dir_all(&root);
    let raw = root.join("raw");
    let (_, meta, log) = generate_logged(
        &root,
        &[
            &oci("release-multi"),
            "metal",
            "--arch",
            "s390x",
            "--backend",
            "nokvm",
            "--debug-raw-dir",
            raw.to_str().unwrap(),
        ],
    );
    assert!(log.contains("backend VM stopped"), "{log}");
    // In the VM too, the OS's own ostree through the appliance's qemu-user.
    laid_down_by_its_own_ostree("s390x", &raw, &meta, &log, &root.join("mnt-own"));
    let disk = raw.join("metal.raw");
    let head = std::fs::read(&disk).unwrap();
    assert_eq!(&head[..4], b"zIPL");
    boots_z(Media::disk(disk), "metal", Mode::Disk);
    std::fs::remove_dir_all(&root).unwrap();
}
