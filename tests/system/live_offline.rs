//! The live artifacts for disconnected installs (docs/contract.md §5.1, issue 20): the
//! osmet files in rootfs.img, the rootfs stream hash in the live initramfs,
//! `etc/coreos-live-rootfs`, features.json's installer-config-directives,
//! the live root tree as osbuild builds it, and the minimal ISO in
//! `coreos/miniso.dat`. Checked with tools we did not write: the real
//! coreos-installer (`dev extract osmet` rebuilds metal and metal4k byte for
//! byte from the live rootfs's ostree repo; `iso extract minimal-iso`;
//! `dev extract initrd`; `iso ignition embed`, `iso kargs modify`), GNU
//! cpio, unsquashfs, xorriso; and boots under TCG: the minimal ISO (BIOS
//! and UEFI) fetching its rootfs over HTTP from a server on 127.0.0.1
//! (qemu user networking: 10.0.2.2), a tampered rootfs refused.
use crate::common::boot::{self, BootResult, Firmware, Media, Mode};
use crate::common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

struct Built {
    root: PathBuf,
    out: PathBuf,
    meta: Value,
    log: String,
    /// rootfs.img unpacked (cpio) and its squashfs (unsquashfs).
    rootfs_dir: PathBuf,
    squash: PathBuf,
}

fn generate(root: &Path, release: &str, platforms: &[&str]) -> (PathBuf, Value, String) {
    let rel = oci(release);
    let mut args = vec![rel.as_str()];
    args.extend_from_slice(platforms);
    generate_logged(root, &args)
}

/// One `generate release metal metal4k live` run shared by the tests.
fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let root = scratch("live-offline");
        let _ = std::fs::remove_dir_all(&root);
        let (out, meta, log) = generate(&root, "release", &["metal", "metal4k", "live"]);
        let rootfs_dir = root.join("rootfs");
        std::fs::create_dir_all(&rootfs_dir).unwrap();
        let img = image_file(&meta, &out, "live-rootfs");
        must(
            Command::new("sh")
                .arg("-c")
                .arg(format!("cpio -idm --quiet < '{}'", img.display()))
                .current_dir(&rootfs_dir),
        );
        let squash = root.join("squash");
        must(
            Command::new("unsquashfs")
                .args(["-q", "-n", "-d"])
                .arg(&squash)
                .arg(rootfs_dir.join("root.squashfs")),
        );
        Built {
            root,
            out,
            meta,
            log,
            rootfs_dir,
            squash,
        }
    })
}

fn artifact(key: &str) -> PathBuf {
    let b = built();
    image_file(&b.meta, &b.out, key)
}

fn os_file(path: &str) -> Vec<u8> {
    fixture_os_file(fx()["rhel_coreos"]["commit"].as_str().unwrap(), path)
}

fn version() -> String {
    fx()["rhel_coreos"]["version"].as_str().unwrap().to_string()
}

fn os_release(key: &str) -> Option<String> {
    String::from_utf8(os_file("/usr/lib/os-release"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
        .map(|v| v.trim_matches(|c| c == '"' || c == '\'').to_string())
}

/// `<metal file without .gz>.osmet`, as cosa names it.
fn osmet_name(key: &str) -> String {
    let p = built().meta["images"][key]["path"].as_str().unwrap();
    format!("{}.osmet", p.strip_suffix(".gz").unwrap_or(p))
}

/// The entry names of an uncompressed newc archive, in order (GNU cpio).
fn cpio_names(p: &Path) -> Vec<String> {
    let o = must(
        Command::new("sh")
            .arg("-c")
            .arg(format!("cpio -it --quiet < '{}'", p.display())),
    );
    o.lines().map(str::to_string).collect()
}

// -------------------------------------------------------------- bincode

/// A reader of coreos-installer's bincode options (varint, little endian),
/// for the header fields the tests check.
struct Bin<'a>(&'a [u8]);

impl Bin<'_> {
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a.to_vec()
    }
    fn var(&mut self) -> u64 {
        let t = self.bytes(1)[0];
        match t {
            0..=250 => t as u64,
            251 => u16::from_le_bytes(self.bytes(2).try_into().unwrap()) as u64,
            252 => u32::from_le_bytes(self.bytes(4).try_into().unwrap()) as u64,
            253 => u64::from_le_bytes(self.bytes(8).try_into().unwrap()),
            _ => panic!("varint tag {t}"),
        }
    }
    fn string(&mut self) -> String {
        let n = self.var() as usize;
        String::from_utf8(self.bytes(n)).unwrap()
    }
}

/// magic, version, app version, sector size, description, architecture.
fn osmet_header(p: &Path) -> (Vec<u8>, u64, String, u64, String, String) {
    let data = read(p);
    let mut b = Bin(&data);
    (
        b.bytes(8),
        b.var(),
        b.string(),
        b.var(),
        b.string(),
        b.string(),
    )
}

// ---------------------------------------------------------------- osmet

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn rootfs_img_holds_the_root_image_the_stamp_and_two_osmet_files() {
    let b = built();
    let names = cpio_names(&artifact("live-rootfs"));
    assert_eq!(
        names,
        [
            "root.squashfs".to_string(),
            "etc".into(),
            "etc/coreos-live-rootfs".into(),
            osmet_name("metal"),
            osmet_name("metal4k")
        ]
    );
    assert_eq!(
        read(&b.rootfs_dir.join("etc/coreos-live-rootfs")),
        format!("{}\n", version()).as_bytes()
    );
    let pretty = os_release("PRETTY_NAME").expect("the test OS has a PRETTY_NAME");
    for (key, sector) in [("metal", 512), ("metal4k", 4096)] {
        let (magic, v, app, ss, desc, arch) = osmet_header(&b.rootfs_dir.join(osmet_name(key)));
        assert_eq!(magic, b"OSMET\0\0\0");
        assert_eq!(v, 1);
        assert!(app.starts_with("bootimage-gen "), "{app}");
        assert_eq!(ss, sector, "{key}");
        assert_eq!(
            desc, pretty,
            "{key}: description from os-release PRETTY_NAME"
        );
        assert_eq!(arch, b.meta["coreos-assembler.basearch"].as_str().unwrap());
    }
    assert!(b.log.contains("osmet metal:"), "{}", b.log);
}

/// A read-write loop device ([`Loop`]) over a new sparse file of `size`
/// bytes at `file`.
fn sparse_loop(file: &Path, size: u64) -> Loop {
    let _ = std::fs::remove_file(file);
    let f = std::fs::File::create(file).unwrap();
    f.set_len(size).unwrap();
    Loop::rw(file)
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn coreos_installer_rebuilds_metal_and_metal4k_byte_for_byte_offline() {
    let b = built();
    let repo = b.squash.join("ostree/repo");
    assert!(
        repo.join("objects").is_dir(),
        "no ostree repo in the live root"
    );
    for key in ["metal", "metal4k"] {
        let img = &b.meta["images"][key];
        let size = img["uncompressed-size"].as_u64().unwrap();
        let want = img["uncompressed-sha256"].as_str().unwrap();
        let file = b.root.join(format!("{key}.rebuilt"));
        let l = sparse_loop(&file, size);
        let t = Instant::now();
        must(
            Command::new("coreos-installer")
                .args(["dev", "extract", "osmet", "--osmet"])
                .arg(b.rootfs_dir.join(osmet_name(key)))
                .arg(&repo)
                .arg(&l.0),
        );
        let secs = t.elapsed().as_secs_f64();
        drop(Command::new("sync").status());
        let got = sha256_file(&file);
        eprintln!(
            "{key}: coreos-installer rebuilt {} MiB from {} KiB of osmet in {secs:.1} s",
            size >> 20,
            std::fs::metadata(b.rootfs_dir.join(osmet_name(key)))
                .unwrap()
                .len()
                >> 10
        );
        assert_eq!(
            got, want,
            "{key} rebuilt by coreos-installer differs from meta.json"
        );
        drop(l);
        std::fs::remove_file(file).ok();
    }
}

// ------------------------------------------------------- live root tree

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn live_root_tree_is_built_as_osbuild_does() {
    let b = built();
    let boot = b.squash.join("boot");
    let kver = fx()["kernel"].as_str().unwrap();
    // The kernel and its HMAC hardlinked into /boot, the same bytes as the
    // OS ships.
    let k = boot.join(format!("vmlinuz-{kver}"));
    let h = boot.join(format!(".vmlinuz-{kver}.hmac"));
    assert_eq!(
        read(&k),
        os_file(&format!("/usr/lib/modules/{kver}/vmlinuz"))
    );
    assert_eq!(
        read(&h),
        os_file(&format!("/usr/lib/modules/{kver}/.vmlinuz.hmac"))
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&k).unwrap().nlink(),
        2,
        "vmlinuz is a hardlink"
    );
    assert_eq!(
        std::fs::metadata(&h).unwrap().nlink(),
        2,
        ".hmac is a hardlink"
    );
    // The ESP on /boot/efi: the OS's EFI tree.
    let vendor = fx()["efi_vendor"].as_str().unwrap();
    assert_eq!(
        read(&boot.join("efi/EFI/BOOT/BOOTX64.EFI")),
        os_file("/usr/lib/bootupd/updates/EFI/BOOT/BOOTX64.EFI")
    );
    assert!(boot.join(format!("efi/EFI/{vendor}/grub.cfg")).is_file());
    // sysroot.readonly dropped from the repo config.
    let cfg = String::from_utf8(read(&b.squash.join("ostree/repo/config"))).unwrap();
    assert!(!cfg.contains("readonly=true"), "{cfg}");
    assert!(cfg.contains("[core]"), "{cfg}");
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn the_metal_disk_keeps_its_own_boot_and_repo_config() {
    // The live tree's changes are made on copies: the metal image's boot
    // partition has no kernel at its top, and its repo stays read-only.
    let b = built();
    let raw = b.root.join("metal.raw");
    must(Command::new("sh").arg("-c").arg(format!(
        "gzip -dc '{}' > '{}'",
        artifact("metal").display(),
        raw.display()
    )));
    let parts = must(Command::new("sgdisk").arg("-p").arg(&raw));
    let start = |n: &str| -> u64 {
        let l = parts
            .lines()
            .find(|l| l.split_whitespace().last() == Some(n))
            .unwrap_or_else(|| panic!("no {n} in {parts}"));
        l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 512
    };
    for (label, fstype) in [("boot", "ext4"), ("root", "xfs")] {
        let mnt = b.root.join(format!("mnt-{label}"));
        std::fs::create_dir_all(&mnt).unwrap();
        let dev = must(
            Command::new("losetup")
                .args(["-f", "--show", "-r", "-o", &start(label).to_string()])
                .arg(&raw),
        )
        .trim()
        .to_string();
        let ok = Command::new("mount")
            .args(["-t", fstype, "-o", "ro,norecovery", &dev])
            .arg(&mnt)
            .status()
            .unwrap()
            .success();
        let check = || {
            if label == "boot" {
                let top: Vec<String> = std::fs::read_dir(&mnt)
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect();
                assert!(!top.iter().any(|n| n.starts_with("vmlinuz")), "{top:?}");
                // /boot/efi is the ESP's (empty) mount point on the disk.
                let efi: Vec<_> = std::fs::read_dir(mnt.join("efi")).unwrap().collect();
                assert!(efi.is_empty(), "{efi:?}");
            } else {
                let cfg = String::from_utf8(read(&mnt.join("ostree/repo/config"))).unwrap();
                assert!(cfg.contains("readonly=true"), "{cfg}");
            }
        };
        let r = std::panic::catch_unwind(check);
        if ok {
            let _ = Command::new("umount").arg(&mnt).status();
        }
        let _ = Command::new("losetup").args(["-d", &dev]).status();
        assert!(ok, "mounting the metal {label} partition");
        if let Err(e) = r {
            std::panic::resume_unwind(e);
        }
    }
    std::fs::remove_file(&raw).ok();
}

// ------------------------------------------- initramfs: stream hash, features

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn initramfs_carries_the_rootfs_stream_hash_and_features() {
    let b = built();
    let d = b.root.join("initrd");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let shown = must(
        Command::new("coreos-installer")
            .args(["dev", "show", "initrd"])
            .arg(artifact("live-initramfs"))
            .arg("etc/*"),
    );
    assert!(shown.contains("etc/coreos-live-want-rootfs"), "{shown}");
    must(
        Command::new("coreos-installer")
            .args(["dev", "extract", "initrd", "-C"])
            .arg(&d)
            .arg(artifact("live-initramfs")),
    );
    let want = String::from_utf8(read(&d.join("etc/coreos-live-want-rootfs"))).unwrap();
    // Computed here, independently: sha256 of each 2 MiB of rootfs.img.
    let rootfs = read(&artifact("live-rootfs"));
    let mut expect = "stream-hash sha256 2097152\n".to_string();
    for c in rootfs.chunks(2 << 20) {
        expect.push_str(&hex::encode(<sha2::Sha256 as sha2::Digest>::digest(c)));
        expect.push('\n');
    }
    assert_eq!(want, expect);
    assert_eq!(
        read(&d.join("etc/coreos-live-initramfs")),
        format!("{}\n", version()).as_bytes()
    );
    // features.json: directives = the top-level keys of the OS's example config.
    let ex: serde_yaml_ng::Value =
        serde_yaml_ng::from_slice(&os_file("/usr/share/coreos-installer/example-config.yaml"))
            .unwrap();
    let keys: Vec<String> = ex
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    assert!(keys.len() > 10);
    let f: Value = serde_json::from_slice(&read(&d.join("etc/coreos/features.json"))).unwrap();
    let dirs = f["installer-config-directives"].as_object().unwrap();
    let mut got: Vec<&String> = dirs.keys().collect();
    got.sort();
    let mut want_keys: Vec<&String> = keys.iter().collect();
    want_keys.sort();
    assert_eq!(got, want_keys);
    assert!(dirs.values().all(|v| v == &Value::Bool(true)));
    assert_eq!(f["installer-config"], true);
    assert_eq!(f["live-initrd-network"], true);
    // The ISO's copy is the same file.
    let iso_features = iso_extract(&artifact("live-iso"), "/coreos/features.json");
    assert_eq!(iso_features, read(&d.join("etc/coreos/features.json")));
}

fn iso_extract(iso: &Path, path: &str) -> Vec<u8> {
    let d = tempfile::tempdir().unwrap();
    let dst = d.path().join("f");
    must(
        Command::new("xorriso")
            .args(["-osirrox", "on", "-indev"])
            .arg(iso)
            .args(["-extract", path])
            .arg(&dst),
    );
    read(&dst)
}

// --------------------------------------------------------- minimal ISO

fn minimal_iso(name: &str, url: &str) -> PathBuf {
    let p = built().root.join(name);
    let _ = std::fs::remove_file(&p);
    must(
        Command::new("coreos-installer")
            .args(["iso", "extract", "minimal-iso", "--rootfs-url", url])
            .arg(artifact("live-iso"))
            .arg(&p),
    );
    p
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn minimal_iso_extracts_and_customises() {
    let b = built();
    let url = "http://10.0.2.2:1/rootfs.img";
    let m = minimal_iso("minimal-custom.iso", url);
    let full = std::fs::metadata(artifact("live-iso")).unwrap().len();
    let min = std::fs::metadata(&m).unwrap().len();
    eprintln!(
        "minimal ISO {:.1} MiB, full ISO {:.1} MiB",
        min as f64 / 1048576.0,
        full as f64 / 1048576.0
    );
    assert!(min + std::fs::metadata(artifact("live-rootfs")).unwrap().len() / 2 < full);
    let names = must(Command::new("isoinfo").arg("-f").arg("-i").arg(&m));
    assert!(!names.contains("ROOTFS.IMG"), "{names}");
    assert!(!names.contains("MINISO.DAT"), "{names}");
    let k = must(
        Command::new("coreos-installer")
            .args(["iso", "kargs", "show"])
            .arg(&m),
    );
    assert!(!k.contains("coreos.liveiso="), "{k}");
    assert!(k.contains(&format!("coreos.live.rootfs_url={url}")), "{k}");
    // Ignition and kargs on the minimal ISO and on a copy of the full one.
    let ign = b.root.join("config.ign");
    std::fs::write(&ign, br#"{"ignition":{"version":"3.4.0"}}"#).unwrap();
    let full_copy = b.root.join("full-custom.iso");
    std::fs::copy(artifact("live-iso"), &full_copy).unwrap();
    for iso in [&m, &full_copy] {
        must(
            Command::new("coreos-installer")
                .args(["iso", "ignition", "embed", "-i"])
                .arg(&ign)
                .arg(iso),
        );
        must(
            Command::new("coreos-installer")
                .args(["iso", "kargs", "modify", "-a", "test.karg=1"])
                .arg(iso),
        );
        let shown = must(
            Command::new("coreos-installer")
                .args(["iso", "ignition", "show"])
                .arg(iso),
        );
        assert_eq!(shown.as_bytes(), read(&ign));
        let k = must(
            Command::new("coreos-installer")
                .args(["iso", "kargs", "show"])
                .arg(iso),
        );
        assert!(k.trim_end().ends_with("test.karg=1"), "{k}");
    }
    // A customised full ISO cannot give a minimal one (coreos-installer's rule).
    let o = Command::new("coreos-installer")
        .args(["iso", "extract", "minimal-iso"])
        .arg(&full_copy)
        .arg(b.root.join("never.iso"))
        .output()
        .unwrap();
    assert!(!o.status.success());
}

/// A tiny HTTP/1.0 server on 127.0.0.1 serving one file at any path;
/// stopped when dropped.
struct Http {
    port: u16,
    #[allow(dead_code)] // held for its drop
    server: ServerThread,
}

impl Http {
    fn serve(body: Vec<u8>) -> Http {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let server = ServerThread::spawn(move |s| {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                match l.accept() {
                    Ok((mut c, _)) => {
                        c.set_nonblocking(false).unwrap();
                        let mut req = [0u8; 4096];
                        let n = c.read(&mut req).unwrap_or(0);
                        let head = String::from_utf8_lossy(&req[..n]).to_string();
                        let hdr = format!(
                            "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
                            body.len()
                        );
                        let _ = c.write_all(hdr.as_bytes());
                        if !head.starts_with("HEAD ") {
                            let _ = c.write_all(&body);
                        }
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
                }
            }
        });
        Http { port, server }
    }
}

fn boot_minimal(fw: Firmware, rootfs: Vec<u8>, tag: &str) -> Result<BootResult, String> {
    let http = Http::serve(rootfs);
    let url = format!("http://10.0.2.2:{}/rootfs.img", http.port);
    let iso = minimal_iso(&format!("minimal-{tag}.iso"), &url);
    boot::Vm::new(fw)
        .media(&[Media::Cdrom(iso)])
        .timeout(boot::default_timeout())
        .arg("-netdev")
        .arg("user,id=n0")
        .arg("-device")
        .arg("virtio-net-pci,netdev=n0,romfile=")
        .boot()
}

fn check_minimal_boot(r: &BootResult, what: &str) {
    eprintln!(
        "boot time {what}: {:.1} s ({})",
        r.duration.as_secs_f64(),
        r.marker
    );
    assert_eq!(r.marker.mode, Mode::LivePxe, "{}", r.marker);
    assert_eq!(r.marker.version, version());
    assert_eq!(r.marker.platform, "metal");
    assert!(
        r.log.contains("BOOTIMAGE-TEST-OS rootfs-url verified"),
        "{}",
        r.log
    );
    let names = format!(
        "BOOTIMAGE-TEST-OS osmet={},{}",
        osmet_name("metal"),
        osmet_name("metal4k")
    );
    assert!(r.log.contains(&names), "{names} not in {}", r.log);
    assert!(!r.has_karg("coreos.liveiso"), "{:?}", r.cmdline);
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn minimal_iso_boots_bios_fetching_its_rootfs_over_http() {
    let r = boot_minimal(Firmware::Bios, read(&artifact("live-rootfs")), "bios")
        .unwrap_or_else(|e| panic!("{e}"));
    check_minimal_boot(&r, "minimal ISO, BIOS, rootfs over HTTP");
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn minimal_iso_boots_uefi_fetching_its_rootfs_over_http() {
    let r = boot_minimal(Firmware::Uefi, read(&artifact("live-rootfs")), "uefi")
        .unwrap_or_else(|e| panic!("{e}"));
    check_minimal_boot(&r, "minimal ISO, UEFI, rootfs over HTTP");
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn minimal_iso_refuses_a_tampered_rootfs() {
    let mut rootfs = read(&artifact("live-rootfs"));
    // One byte of the squashfs changed, size unchanged.
    let i = rootfs.len() / 2;
    rootfs[i] ^= 0xff;
    let t = Instant::now();
    let e = match boot_minimal(Firmware::Bios, rootfs, "tampered") {
        Ok(r) => panic!("a tampered rootfs booted: {}", r.marker.line),
        Err(e) => e,
    };
    eprintln!(
        "tampered rootfs refused in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(
        e.contains("does not match /etc/coreos-live-want-rootfs"),
        "{e}"
    );
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn full_iso_exposes_the_osmet_files_to_the_live_system() {
    let r = boot::assert_boots(
        &[Media::Cdrom(artifact("live-iso"))],
        Firmware::Bios,
        boot::default_timeout(),
    );
    eprintln!(
        "boot time full ISO, BIOS: {:.1} s ({})",
        r.duration.as_secs_f64(),
        r.marker
    );
    assert_eq!(r.marker.mode, Mode::LiveIso);
    let names = format!(
        "BOOTIMAGE-TEST-OS osmet={},{}",
        osmet_name("metal"),
        osmet_name("metal4k")
    );
    assert!(r.log.contains(&names), "{names} not in {}", r.log);
}

// ------------------------------------------------------------ bad input

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn os_without_pretty_name_falls_back_to_linux_and_says_so() {
    let root = scratch("live-offline-nopretty");
    let _ = std::fs::remove_dir_all(&root);
    let (out, meta, log) = generate(&root, "release-nopretty", &["metal", "live"]);
    assert!(log.contains("no PRETTY_NAME"), "{log}");
    let d = root.join("rootfs");
    std::fs::create_dir_all(&d).unwrap();
    must(
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "cpio -idm --quiet '*.osmet' < '{}'",
                image_file(&meta, &out, "live-rootfs").display()
            ))
            .current_dir(&d),
    );
    let p = meta["images"]["metal"]["path"].as_str().unwrap();
    let name = format!("{}.osmet", p.strip_suffix(".gz").unwrap_or(p));
    let (_, _, _, ss, desc, _) = osmet_header(&d.join(&name));
    assert_eq!(desc, "Linux");
    assert_eq!(ss, 512);
    // Only metal was built: no metal4k osmet.
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn live_without_metal_says_the_rootfs_has_no_osmet() {
    // `generate live` alone: the live files are made, with a note that
    // offline installs need metal/metal4k in the same run.
    let root = scratch("live-offline-liveonly");
    let _ = std::fs::remove_dir_all(&root);
    let (out, meta, log) = generate(&root, "release", &["live"]);
    assert!(log.contains("carries no osmet file"), "{log}");
    let names = cpio_names(&image_file(&meta, &out, "live-rootfs"));
    assert_eq!(names, ["root.squashfs", "etc", "etc/coreos-live-rootfs"]);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn a_wrong_extent_map_fails_the_run_and_writes_nothing() {
    // A real filesystem does not give a wrong map, so the map is made wrong
    // on purpose (BOOTIMAGE_GEN_FAULT=stale-extent-map moves one root
    // extent by a block): the packer must notice that the image's bytes
    // are not the object's, name it, and publish nothing (the osmet files
    // are packed before any artifact is written).
    let root = scratch("live-offline-stale");
    let _ = std::fs::remove_dir_all(&root);
    let out = root.join("out");
    let cache = root.join("cache");
    let o = Command::new(env!("CARGO_BIN_EXE_bootimage-gen"))
        .args(["generate", &oci("release"), "metal", "live", "-o"])
        .arg(&out)
        .env("BOOTIMAGE_GEN_CACHE_DIR", &cache)
        .env("HOME", &cache)
        .env("BOOTIMAGE_GEN_FAULT", "stale-extent-map")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    let l = lines[0];
    assert!(l.contains("osmet file of metal"), "{l}");
    assert!(l.contains("ostree object") && l.contains("stale"), "{l}");
    assert!(!err.contains("panicked"), "{err}");
    let left: Vec<String> = std::fs::read_dir(&out)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "output dir holds {left:?}");
    let r = root.to_string_lossy().to_string();
    let loops = must(Command::new("losetup").args(["-l", "-n", "-O", "NAME,BACK-FILE"]));
    assert!(!loops.contains(&r), "loop devices left: {loops}");
    let mounts = must(Command::new("findmnt").args(["-rn", "-o", "TARGET"]));
    assert!(
        !mounts.lines().any(|m| m.starts_with(&r)),
        "mounts left: {mounts}"
    );
    let tmp: Vec<_> = std::fs::read_dir(cache.join("tmp"))
        .map(|rd| rd.collect())
        .unwrap_or_default();
    assert!(tmp.is_empty(), "cache tmp holds {tmp:?}");
    let _ = std::fs::remove_dir_all(&root);
}
