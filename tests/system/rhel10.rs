//! Issue 18, RHEL CoreOS 10: the EROFS live rootfs (image.json
//! `live-rootfs-fstype: erofs` with rhel-coreos-config's options), bootupd's
//! state and static GRUB configs on the disk, and `bootc-install-to-fs`.
//! One `generate release-rhel10 live metal` run serves every check; each is
//! made with tools we did not write: fsck.erofs, dump.erofs, the pure-Rust
//! reader erofs-rs and the kernel's
//! EROFS driver (every file read back and compared with the metal disk's
//! deployment), `coreos-installer iso extract pxe`, the real bootupd
//! (`bootupctl status` from crates.io's bootupd, run in a chroot holding the
//! disk's /boot and the OS's /usr/lib/bootupd), GRUB (SeaBIOS and OVMF
//! boots) and qemu (the ISO as CD under SeaBIOS and as USB under OVMF, and
//! PXE, boot with the EROFS root). Bad input:
//! no mkfs.erofs, an unknown algorithm, bootupd metadata that does not parse.
use crate::common::boot::{self, Firmware, Media, Mode};
use crate::common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const MIB: u64 = 1 << 20;
const RELEASE: &str = "release-rhel10";

fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    built_once(&B, "rhel10", &[&oci(RELEASE), "live", "metal"], true)
}

fn artifact(key: &str) -> PathBuf {
    let b = built();
    image_file(&b.meta, &b.out, key)
}

/// The metal disk's root and boot filesystems, mounted read-only.
fn metal_mounts(tag: &str) -> (Mnt, Mnt) {
    let b = built();
    let raw = b.raw.join("metal.raw");
    let dir = b.root.join(format!("mnt-{tag}"));
    let root = mount_raw_root(&raw, &dir.join("root"));
    let boot = mount_raw_boot(&raw, &dir.join("boot"));
    (root, boot)
}

/// sha256 (or link target) of every file under `dir`, by relative path.
fn tree(dir: &Path) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(dir.join(&rel)).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            let ft = e.file_type().unwrap();
            let key = r.display().to_string();
            if ft.is_dir() {
                m.insert(key, "dir".into());
                stack.push(r);
            } else if ft.is_symlink() {
                m.insert(
                    key,
                    format!("-> {}", std::fs::read_link(e.path()).unwrap().display()),
                );
            } else if ft.is_file() {
                m.insert(key, sha256_file(&e.path()));
            }
        }
    }
    m
}

fn deployment(sysroot: &Path) -> PathBuf {
    let d = sysroot.join("ostree/deploy");
    let os = std::fs::read_dir(&d)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::read_dir(os.join("deploy"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.path().is_dir())
        .unwrap()
        .path()
}

// ------------------------------------------------------------- erofs

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn erofs_options_replaced_and_recorded() {
    let b = built();
    let e = &b.meta["images"]["live-rootfs"];
    assert_eq!(e["live-rootfs-fstype"], "erofs", "{e}");
    assert_eq!(
        e["live-rootfs-fsoptions"],
        "-zlzma,level=6 -Efragments -C1048576 --quiet"
    );
    assert!(
        e["mkfs"].as_str().unwrap().starts_with("mkfs.erofs 1."),
        "{e}"
    );
    let replaced: Vec<(String, String)> = e["mkfs-options-replaced"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert!(!r["reason"].as_str().unwrap().is_empty(), "{r}");
            (
                r["requested"].as_str().unwrap().to_string(),
                r["used"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // Debian 12: erofs-utils 1.5, lz4/lz4hc only.
    assert!(
        replaced.contains(&("-zlzma,level=6".into(), "-zlz4hc,12".into())),
        "{replaced:?}"
    );
    assert!(
        replaced.contains(&("-Efragments".into(), String::new())),
        "{replaced:?}"
    );
    assert!(
        e["mkfs-options"]
            .as_str()
            .unwrap()
            .starts_with("-zlz4hc,12"),
        "{e}"
    );
    // Said in the run's output too, and the other two OS requests.
    assert!(b.log.contains("-zlzma,level=6 -> -zlz4hc,12"), "{}", b.log);
    assert!(b.log.contains("-Efragments left out"), "{}", b.log);
    assert!(
        b.log.contains(
            "bootc-install-to-fs: the OS's image.json asks to be installed by its own bootc"
        ),
        "{}",
        b.log
    );
    assert!(
        b.log.contains("bootupd: the OS ships its metadata"),
        "{}",
        b.log
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn erofs_rootfs_checked_by_erofs_utils_and_read_back_by_the_kernel() {
    let rootfs = artifact("live-rootfs");
    // newc cpio: root.erofs first, image at 124, superblock magic 1024 later.
    let erofs = root_erofs();
    assert_eq!(&erofs[1024..1028], &[0xe2, 0xe1, 0xf5, 0xe0]);
    let list = must(
        Command::new("sh")
            .arg("-c")
            .arg(format!("cpio -it < {}", rootfs.display())),
    );
    assert_eq!(list.lines().next(), Some("root.erofs"), "{list}");
    let img = built().root.join("root.erofs");
    std::fs::write(&img, &erofs).unwrap();
    must(Command::new("fsck.erofs").arg(&img));
    let dump = must(Command::new("dump.erofs").arg("-s").arg(&img));
    assert!(dump.contains("0xE0F5E1E2"), "{dump}");
    // The kernel's EROFS driver reads the deployment back from rootfs.img
    // (at offset 124, as the live initramfs mounts it): same files, same
    // bytes as the metal disk's.
    let mnt = built().root.join("mnt-erofs");
    std::fs::create_dir_all(&mnt).unwrap();
    let l = Loop::new(&rootfs, 124, None, 512);
    must(
        Command::new("mount")
            .args(["-t", "erofs", "-o", "ro", &l.0])
            .arg(&mnt),
    );
    let live = tree(&deployment(&mnt));
    let _ = Command::new("umount").arg(&mnt).status();
    drop(l);
    let (root, _boot) = metal_mounts("erofs");
    let metal = tree(&deployment(&root.0));
    assert!(live.len() > 100, "{} entries", live.len());
    let diff: Vec<_> = metal
        .iter()
        .filter(|(k, v)| live.get(*k) != Some(*v))
        .map(|(k, _)| k)
        .take(10)
        .collect();
    assert!(
        diff.is_empty(),
        "differ between the metal disk and the EROFS: {diff:?}"
    );
    assert_eq!(live.len(), metal.len());
}

/// `root.erofs` cut out of the live rootfs.img (newc cpio: the image
/// starts at byte 124, its size is the header's c_filesize).
fn root_erofs() -> Vec<u8> {
    let mut data = std::fs::read(artifact("live-rootfs")).unwrap();
    assert_eq!(&data[110..120], b"root.erofs");
    let size = usize::from_str_radix(std::str::from_utf8(&data[54..62]).unwrap(), 16).unwrap();
    data.truncate(124 + size);
    data.drain(..124);
    data
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn erofs_rs_reads_every_file_back() {
    // A pure-Rust EROFS reader (erofs-rs, crates.io) walks the image from
    // its superblock: every directory, symlink and regular file of the
    // deployment, with the same bytes as the metal disk's.
    use erofs_rs::{backend::SliceImage, EroFS};
    use std::io::Read;
    let data = root_erofs();
    let fs = EroFS::new(SliceImage::new(&data)).expect("erofs-rs opens root.erofs");
    let mut all = BTreeMap::new();
    let mut bytes = 0u64;
    for e in fs.walk_dir("/").expect("walk /") {
        let e = e.expect("directory entry");
        let path = e.dir_entry.path().to_string_lossy().into_owned();
        let path = path.trim_start_matches('/').to_string();
        let v = if e.inode.is_dir() {
            "dir".to_string()
        } else if e.inode.is_symlink() {
            let t = fs.read_link_inode(e.inode).expect("symlink target");
            format!("-> {}", t.to_string_lossy())
        } else if e.inode.is_file() {
            let mut f = fs.open_inode_file(e.inode).expect("open file");
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)
                .unwrap_or_else(|err| panic!("erofs-rs reading {path}: {err}"));
            assert_eq!(buf.len() as u64, e.inode.data_size(), "{path}");
            bytes += buf.len() as u64;
            bootimage_gen::util::sha256_hex(&buf)
        } else {
            continue;
        };
        all.insert(path, v);
    }
    // The deployment: ostree/deploy/<os>/deploy/<checksum>.<serial>.
    let prefix = all
        .keys()
        .find(|k| {
            let p: Vec<&str> = k.split('/').collect();
            p.len() == 5
                && p[0] == "ostree"
                && p[1] == "deploy"
                && p[3] == "deploy"
                && all[*k] == "dir"
        })
        .unwrap_or_else(|| {
            panic!(
                "no deployment in {:?}",
                all.keys().take(20).collect::<Vec<_>>()
            )
        })
        .clone();
    let live: BTreeMap<String, String> = all
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(&format!("{prefix}/"))
                .map(|r| (r.to_string(), v.clone()))
        })
        .collect();
    let (root, _boot) = metal_mounts("erofs-rs");
    let metal = tree(&deployment(&root.0));
    eprintln!(
        "erofs-rs: {} entries in the image, {} in the deployment, {bytes} bytes of file data",
        all.len(),
        live.len()
    );
    assert!(live.len() > 100, "{} entries", live.len());
    let diff: Vec<_> = metal
        .iter()
        .filter(|(k, v)| live.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: metal {v}, erofs-rs {:?}", live.get(k)))
        .take(10)
        .collect();
    assert!(diff.is_empty(), "differ: {diff:#?}");
    assert_eq!(live.len(), metal.len());
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn coreos_installer_extracts_the_same_pxe_files() {
    let dir = built().root.join("extract");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    must(
        Command::new("coreos-installer")
            .args(["iso", "extract", "pxe", "-o"])
            .arg(&dir)
            .arg(artifact("live-iso")),
    );
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for (suffix, key) in [
        ("rootfs.img", "live-rootfs"),
        ("initrd.img", "live-initramfs"),
        ("vmlinuz", "live-kernel"),
    ] {
        let n = names
            .iter()
            .find(|n| n.ends_with(suffix))
            .unwrap_or_else(|| panic!("{suffix} not in {names:?}"));
        assert_eq!(
            sha256_file(&dir.join(n)),
            sha256_file(&artifact(key)),
            "{n}"
        );
    }
}

fn check_live(r: &boot::BootResult, mode: Mode) {
    eprintln!(
        "boot {mode:?}: {:.1} s ({})",
        r.duration.as_secs_f64(),
        r.marker
    );
    assert_eq!(r.marker.mode, mode, "{}", r.marker);
    assert_eq!(r.marker.platform, "metal");
    assert!(
        r.log.contains("BOOTIMAGE-TEST-OS live-rootfs=erofs"),
        "{}",
        r.log
    );
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn cdrom_bios_boots_with_the_erofs_root() {
    let r = boot::assert_boots(
        &[Media::Cdrom(artifact("live-iso"))],
        Firmware::Bios,
        boot::default_timeout(),
    );
    check_live(&r, Mode::LiveIso);
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn usb_uefi_boots_with_the_erofs_root() {
    // The other media and firmware: the hybrid ISO as a USB disk under OVMF
    // (GRUB from the ESP image rather than isolinux from El Torito).
    let r = boot::assert_boots(
        &[Media::UsbDisk(artifact("live-iso"))],
        Firmware::Uefi,
        boot::default_timeout(),
    );
    check_live(&r, Mode::LiveIso);
}

/// PXE boot of a live set (`art` gives each artifact's file) with the
/// ISO's kargs minus coreos.liveiso (kargs.json default).
fn pxe_boot(art: impl Fn(&str) -> PathBuf) -> boot::BootResult {
    let shown = must(
        Command::new("coreos-installer")
            .args(["iso", "kargs", "show"])
            .arg(art("live-iso")),
    );
    let k: Vec<&str> = shown
        .split_whitespace()
        .filter(|k| !k.starts_with("coreos.liveiso="))
        .collect();
    boot::assert_boots(
        &[Media::kernel(
            art("live-kernel"),
            &[&art("live-initramfs"), &art("live-rootfs")],
            &format!("{} console=ttyS0", k.join(" ")),
        )],
        Firmware::Bios,
        boot::default_timeout(),
    )
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn pxe_boots_with_the_erofs_root() {
    check_live(&pxe_boot(artifact), Mode::LivePxe);
}

/// RHCOS 10.1's options (rhel-coreos-config `image-rhel-10.1.yaml`,
/// 2025-04 to 2025-11, fixture release-erofs101): `fragdedupe`, which
/// needs erofs-utils 1.8.5, mapped to what this host's mkfs.erofs can do,
/// said on the console and recorded in meta.json; the rootfs made with
/// the mapped options mounts in the guest.
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn erofs_10_1_options_mapped_and_the_rootfs_boots() {
    let root = scratch("rhel10-erofs101");
    let _ = std::fs::remove_dir_all(&root);
    let (out, meta, log) = generate_logged(&root, &[&oci("release-erofs101"), "live"]);
    let e = &meta["images"]["live-rootfs"];
    assert_eq!(
        e["live-rootfs-fsoptions"],
        "-zlzma,level=6 -Eall-fragments,fragdedupe=inode -C1048576 --quiet",
        "{e}"
    );
    let replaced: Vec<String> = e["mkfs-options-replaced"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["requested"].as_str().unwrap().to_string())
        .collect();
    assert!(
        replaced.iter().any(|r| r.contains("fragdedupe=inode")),
        "{e}"
    );
    assert!(
        !e["mkfs-options"].as_str().unwrap().contains("fragdedupe"),
        "{e}"
    );
    assert!(log.contains("fragdedupe=inode"), "{log}");
    check_live(&pxe_boot(|k| image_file(&meta, &out, k)), Mode::LivePxe);
    std::fs::remove_dir_all(&root).unwrap();
}

// ------------------------------------------------------------ bootupd

fn rhel10_os_file(path: &str) -> Vec<u8> {
    fixture_os_file(
        fx()["release_rhel10"]["os"]["commit"].as_str().unwrap(),
        path,
    )
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn disk_has_bootupd_state_and_static_configs() {
    let (_root, boot) = metal_mounts("bootupd");
    let b = &boot.0;
    use std::os::unix::fs::PermissionsExt;
    let state: Value =
        serde_json::from_slice(&std::fs::read(b.join("bootupd-state.json")).unwrap()).unwrap();
    let efi_json: Value =
        serde_json::from_slice(&rhel10_os_file("/usr/lib/bootupd/updates/EFI.json")).unwrap();
    let bios_json: Value =
        serde_json::from_slice(&rhel10_os_file("/usr/lib/bootupd/updates/BIOS.json")).unwrap();
    assert_eq!(state["installed"]["EFI"]["meta"], efi_json);
    assert_eq!(state["installed"]["BIOS"]["meta"], bios_json);
    assert_eq!(state["pending"], Value::Null);
    assert!(state["static-configs"]["version"].is_string(), "{state}");
    let children = state["installed"]["EFI"]["filetree"]["children"]
        .as_object()
        .unwrap();
    let vendor = fx()["efi_vendor"].as_str().unwrap();
    for f in [
        "BOOT/BOOTX64.EFI",
        &format!("{vendor}/grubx64.efi"),
        &format!("{vendor}/shimx64.efi"),
    ] {
        let data = rhel10_os_file(&format!("/usr/lib/bootupd/updates/EFI/{f}"));
        use sha2::Digest;
        assert_eq!(
            children[f]["sha512"],
            format!("sha512:{}", hex::encode(sha2::Sha512::digest(&data))),
            "{f}"
        );
        assert_eq!(children[f]["size"], data.len());
    }
    // grub.cfg: bootupd's concatenation of the OS's grub2-static files.
    let cfg = std::fs::read_to_string(b.join("grub2/grub.cfg")).unwrap();
    let pre = String::from_utf8(rhel10_os_file(
        "/usr/lib/bootupd/grub2-static/grub-static-pre.cfg",
    ))
    .unwrap();
    assert!(
        cfg.starts_with(&format!("# Generated by bootupd / do not edit\n\n{pre}")),
        "{cfg}"
    );
    for d in ["05_ignition.cfg", "10_blscfg.cfg", "41_custom.cfg"] {
        let text = String::from_utf8(rhel10_os_file(&format!(
            "/usr/lib/bootupd/grub2-static/configs.d/{d}"
        )))
        .unwrap();
        assert!(
            cfg.contains(&format!("\n### BEGIN {d} ###\n{text}### END {d} ###\n")),
            "{d}:\n{cfg}"
        );
    }
    must(Command::new("grub-script-check").arg(b.join("grub2/grub.cfg")));
    let mode = |p: &str| std::fs::metadata(b.join(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("grub2/grub.cfg"), 0o600);
    assert_eq!(mode("grub2/grubenv"), 0o600);
    assert_eq!(mode("bootupd-state.json"), 0o644);
    let env = must(
        Command::new("grub-editenv")
            .arg(b.join("grub2/grubenv"))
            .arg("list"),
    );
    assert!(env.is_empty(), "{env}");
    // The ESP's EFI/<vendor>/grub.cfg is grub-static-efi.cfg (read with mtools).
    let raw = built().raw.join("metal.raw");
    let esp = must(
        Command::new("mtype")
            .arg("-i")
            .arg(format!("{}@@{}", raw.display(), 2 * MIB))
            .arg(format!("::EFI/{vendor}/grub.cfg")),
    );
    let want = String::from_utf8(rhel10_os_file(
        "/usr/lib/bootupd/grub2-static/grub-static-efi.cfg",
    ))
    .unwrap();
    assert_eq!(esp.trim(), want.trim());
}

/// crates.io's bootupd (`cargo install bootupd`), built once into target/.
fn bootupd_bin() -> PathBuf {
    let root = top().join("target/bootupd");
    let bin = root.join("bin/bootupd");
    if !bin.exists() {
        must(
            Command::new("cargo")
                .args(["install", "--locked", "--quiet", "bootupd", "--root"])
                .arg(&root),
        );
    }
    bin
}

/// `bootupctl ARGS` as on a booted node: in a private mount namespace, a
/// chroot whose /boot is the disk's boot filesystem, /sysroot its root and
/// /usr/lib/bootupd the deployment's (bootupctl reads `/`). No
/// /.dockerenv there, and INVOCATION_ID set as systemd sets it (bootupctl
/// otherwise re-executes itself under systemd-run).
fn bootupctl(args: &str) -> String {
    let b = built();
    let raw = b.raw.join("metal.raw");
    let script = r#"set -eu
raw=$1; bin=$2; shift 2
R=$(mktemp -d)
mount -t tmpfs tmpfs "$R"
mkdir -p "$R/sysroot" "$R/boot" "$R/usr/lib/bootupd" "$R/usr/bin" "$R/proc"
rl=$(losetup -f --show -r -o $((513<<20)) "$raw")
bl=$(losetup -f --show -r -o $((129<<20)) --sizelimit $((384<<20)) "$raw")
trap 'umount -R "$R"; losetup -d $rl $bl' EXIT
mount -o ro,nouuid,norecovery "$rl" "$R/sysroot"
mount -o ro,noload "$bl" "$R/boot"
dep=$(ls -d "$R"/sysroot/ostree/deploy/*/deploy/*.0 | head -1)
mount --bind "$dep/usr/lib/bootupd" "$R/usr/lib/bootupd"
cp "$bin" "$R/usr/bin/bootupd"; ln -s bootupd "$R/usr/bin/bootupctl"
for l in $(ldd "$bin" | grep -o '/[^ ]*'); do mkdir -p "$R$(dirname "$l")"; cp -L "$l" "$R$l"; done
mount -t proc proc "$R/proc"
c=$(command -v chroot)
env -i INVOCATION_ID=bootimage-gen-test PATH=/usr/bin "$c" "$R" /usr/bin/bootupctl "$@"
"#;
    let mut c = Command::new("unshare");
    c.args(["-m", "--propagation", "private", "sh", "-c", script, "sh"])
        .arg(&raw)
        .arg(bootupd_bin());
    c.args(args.split_whitespace());
    must(&mut c)
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn real_bootupctl_status_reads_the_state() {
    let text = bootupctl("status");
    eprintln!("bootupctl status:\n{text}");
    let efi: Value =
        serde_json::from_slice(&rhel10_os_file("/usr/lib/bootupd/updates/EFI.json")).unwrap();
    let bios: Value =
        serde_json::from_slice(&rhel10_os_file("/usr/lib/bootupd/updates/BIOS.json")).unwrap();
    assert!(
        text.contains(&format!(
            "Component EFI\n  Installed: {}\n  Update: At latest version",
            efi["version"].as_str().unwrap()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "Component BIOS\n  Installed: {}\n  Update: At latest version",
            bios["version"].as_str().unwrap()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "Aleph version: {}",
            fx()["release_rhel10"]["os"]["version"].as_str().unwrap()
        )),
        "{text}"
    );
    // The JSON form: an update from the same OS has nothing to do.
    let j: Value = serde_json::from_str(&bootupctl("status --json")).unwrap();
    for c in ["EFI", "BIOS"] {
        assert_eq!(j["components"][c]["updatable"], "at-latest-version", "{j}");
        assert_eq!(j["components"][c]["interrupted"], Value::Null);
    }
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn disk_boots_with_static_configs_bios_and_uefi() {
    let raw = built().raw.join("metal.raw");
    for fw in [Firmware::Bios, Firmware::Uefi] {
        // A private copy: the firmware and the OS may write to the disk.
        let copy = built().root.join(format!("boot-{fw}.raw"));
        must(
            Command::new("cp")
                .args(["--sparse=always"])
                .arg(&raw)
                .arg(&copy),
        );
        let r = boot::assert_boots(&[Media::disk(&copy)], fw, boot::default_timeout());
        eprintln!(
            "boot disk {fw}: {:.1} s ({})",
            r.duration.as_secs_f64(),
            r.marker
        );
        assert_eq!(r.marker.mode, Mode::Disk);
        assert_eq!(r.marker.platform, "metal");
        assert!(r.marker.firstboot, "05_ignition.cfg: {}", r.marker);
        std::fs::remove_file(&copy).ok();
    }
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn inspect_shows_fstype_bootupd_and_bootc() {
    let cache = scratch("rhel10-inspect");
    let _ = std::fs::remove_dir_all(&cache);
    let d = ok_json(&cache, &["inspect", &oci(RELEASE), "--import", "--json"]);
    let c = &d["bootimage-config"];
    assert_eq!(c["image"]["live-rootfs-fstype"]["value"], "erofs");
    assert_eq!(
        c["image"]["live-rootfs-fsoptions"]["value"],
        "-zlzma,level=6 -Efragments -C1048576 --quiet"
    );
    assert_eq!(c["image"]["bootc-install-to-fs"]["value"], true);
    assert_eq!(c["bootupd"]["static-configs"], true, "{c}");
    assert!(
        c["bootupd"]["efi"].as_str().unwrap().contains("shim"),
        "{c}"
    );
    let o = run(&cache, &["inspect", &oci(RELEASE), "--import"]);
    let text = stdout(&o);
    assert!(
        text.contains("bootupd") && text.contains("static GRUB configs"),
        "{text}"
    );
    // The main test OS: squashfs defaults, bootupd metadata, no static configs.
    let d = ok_json(&cache, &["inspect", &oci("release"), "--import", "--json"]);
    let c = &d["bootimage-config"];
    assert_eq!(c["image"]["live-rootfs-fsoptions"]["value"], "-comp zstd");
    assert_eq!(c["image"]["live-rootfs-fsoptions"]["default"], true);
    assert_eq!(c["image"]["bootc-install-to-fs"]["value"], false);
    assert_eq!(c["bootupd"]["static-configs"], false);
}

// ---------------------------------------------------------- bad input

fn refused(release: &str, platform: &str, path: Option<&str>, words: &[&str]) {
    let root = scratch(&format!("rhel10-{release}"));
    let _ = std::fs::remove_dir_all(&root);
    let cache = root.join("cache");
    let out = root.join("out");
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootimage-gen"));
    c.args([
        "generate",
        &oci(release),
        platform,
        "-o",
        out.to_str().unwrap(),
    ])
    .env("BOOTIMAGE_GEN_CACHE_DIR", &cache)
    .env("HOME", &cache)
    .env_remove("REGISTRY_AUTH_FILE");
    if let Some(p) = path {
        c.env("PATH", p);
    }
    let o = c.output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "one error line:\n{err}");
    for w in words {
        assert!(lines[0].contains(w), "'{w}' not in: {}", lines[0]);
    }
    assert!(!out.exists(), "output directory created");
    assert_cache_clean(&cache);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn erofs_without_mkfs_erofs_names_the_package() {
    // PATH without mkfs.erofs: every other program of the usual dirs.
    let dir = scratch("rhel10-path-no-erofs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut dirs: Vec<PathBuf> =
        std::env::split_paths(&std::env::var_os("PATH").unwrap()).collect();
    dirs.extend(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from));
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let n = e.file_name();
            if n == "mkfs.erofs" || dir.join(&n).exists() {
                continue;
            }
            let _ = std::os::unix::fs::symlink(e.path(), dir.join(&n));
        }
    }
    refused(
        RELEASE,
        "live",
        Some(dir.to_str().unwrap()),
        &["live-rootfs-fstype: erofs", "no mkfs.erofs", "erofs-utils"],
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn unknown_erofs_algorithm_is_named() {
    refused(
        "release-erofsbadalgo",
        "live",
        None,
        &["'snappy'", "live-rootfs-fsoptions", "algorithm"],
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn bootupd_metadata_that_does_not_parse_names_file_and_field() {
    refused(
        "release-badbootupd",
        "metal",
        None,
        &[
            "/usr/lib/bootupd/updates/EFI.json",
            "'timestamp'",
            "yesterday",
        ],
    );
}
