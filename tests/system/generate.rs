//! Pipeline tests (root, loop devices): `generate` on the test OS release,
//! checked with tools we did not write (sfdisk, sgdisk, blkid, qemu-img,
//! gzip/xz/zstd, sha256sum, ostree, mount) and booted under SeaBIOS and OVMF.
use crate::common::boot::{self, Firmware, Media};
use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const MIB: u64 = 1 << 20;

/// The docs/contract.md §2 table: (name, type GUID, start MiB, fs type, fs label, fs UUID).
const SPEC_PARTS: [(&str, &str, u64, &str, &str, &str); 4] = [
    (
        "BIOS-BOOT",
        "21686148-6449-6E6F-744E-656564454649",
        1,
        "",
        "",
        "",
    ),
    (
        "EFI-SYSTEM",
        "C12A7328-F81F-11D2-BA4B-00A0C93EC93B",
        2,
        "vfat",
        "EFI-SYSTEM",
        "7B77-95E7",
    ),
    (
        "boot",
        "BC13C2FF-59E6-4262-A352-B275FD6F7172",
        129,
        "ext4",
        "boot",
        "96d15588-3596-4b3c-adca-a2ff7279ea63",
    ),
    (
        "root",
        "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709",
        513,
        "xfs",
        "root",
        "910678ff-f77e-4a7d-8d53-86f2ac47a823",
    ),
];

struct Built {
    out: PathBuf,
    raw: PathBuf,
    meta: Value,
}

fn tmp_root() -> PathBuf {
    let d = scratch("generate-tests");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// One gzip build of metal, metal4k and qemu shared by the tests.
fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let root = tmp_root().join("main");
        let _ = std::fs::remove_dir_all(&root);
        let (out, raw, cache) = (root.join("out"), root.join("raw"), root.join("cache"));
        let o = run(
            &cache,
            &[
                "generate",
                &oci("release"),
                "metal",
                "metal4k",
                "qemu",
                "-o",
                out.to_str().unwrap(),
                "--compress",
                "gzip",
                "--progress",
                "plain",
                "--debug-raw-dir",
                raw.to_str().unwrap(),
            ],
        );
        assert!(o.status.success(), "generate failed:\n{}", stderr(&o));
        let meta: Value =
            serde_json::from_slice(&std::fs::read(out.join("meta.json")).unwrap()).unwrap();
        Built { out, raw, meta }
    })
}

fn image(key: &str) -> (PathBuf, Value) {
    let b = built();
    let e = b.meta["images"][key].clone();
    assert!(e.is_object(), "meta.json has no images.{key}: {}", b.meta);
    (b.out.join(e["path"].as_str().unwrap()), e)
}

fn sh(script: &str) -> String {
    must(Command::new("sh").arg("-c").arg(script))
}

fn sha256sum(p: &Path) -> String {
    sh(&format!("sha256sum '{}'", p.display()))
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn outputs_are_named_checksummed_and_compressed() {
    let b = built();
    let m = &b.meta;
    let (name, ver) = (m["name"].as_str().unwrap(), m["buildid"].as_str().unwrap());
    assert_eq!(name, fx()["osname"].as_str().unwrap());
    assert_eq!(ver, fx()["rhel_coreos"]["version"].as_str().unwrap());
    for (key, suffix) in [
        ("metal", "metal.x86_64.raw.gz"),
        ("metal4k", "metal4k.x86_64.raw.gz"),
        ("qemu", "qemu.x86_64.qcow2.gz"),
    ] {
        let (p, e) = image(key);
        assert_eq!(
            e["path"].as_str().unwrap(),
            format!("{name}-{ver}-{suffix}")
        );
        assert_eq!(
            e["size"].as_u64().unwrap(),
            std::fs::metadata(&p).unwrap().len()
        );
        assert_eq!(e["sha256"].as_str().unwrap(), sha256sum(&p));
        sh(&format!("gzip -t '{}'", p.display()));
        let un = sh(&format!("gzip -dc '{}' | sha256sum", p.display()));
        assert_eq!(
            un.split_whitespace().next().unwrap(),
            e["uncompressed-sha256"].as_str().unwrap(),
            "{key}"
        );
        let size = sh(&format!("gzip -dc '{}' | wc -c", p.display()));
        assert_eq!(
            size.parse::<u64>().unwrap(),
            e["uncompressed-size"].as_u64().unwrap()
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o644
        );
    }
    // The raw artifacts are exactly the platform disks.
    for key in ["metal", "metal4k"] {
        let (_, e) = image(key);
        assert_eq!(
            sha256sum(&b.raw.join(format!("{key}.raw"))),
            e["uncompressed-sha256"].as_str().unwrap()
        );
    }
    // sha256sum -c accepts SHA256SUMS and it covers every image.
    let out = must(
        Command::new("sha256sum")
            .arg("-c")
            .arg("SHA256SUMS")
            .current_dir(&b.out),
    );
    for e in m["images"].as_object().unwrap().values() {
        assert!(
            out.contains(&format!("{}: OK", e["path"].as_str().unwrap())),
            "{out}"
        );
    }
    // Nothing half-written is left.
    for f in std::fs::read_dir(&b.out).unwrap() {
        let n = f.unwrap().file_name().into_string().unwrap();
        assert!(!n.starts_with('.'), "leftover {n}");
    }
    assert_eq!(m["images"]["ostree"]["skip-compression"], true);
    assert_eq!(m["coreos-assembler.basearch"], "x86_64");
}

/// Partition starts (bytes), types, names, GUIDs from `sfdisk -J` on `dev`.
fn check_table(dev: &str, sector: u64, disk_bytes: u64) {
    let j: Value = serde_json::from_str(&must(Command::new("sfdisk").args(["-J", dev]))).unwrap();
    let t = &j["partitiontable"];
    assert_eq!(t["label"], "gpt");
    assert_eq!(
        t["id"].as_str().unwrap().to_lowercase(),
        "00000000-0000-4000-a000-000000000001"
    );
    assert_eq!(t["sectorsize"].as_u64().unwrap(), sector, "{dev}");
    let parts = t["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 4);
    for (i, (name, ty, start, ..)) in SPEC_PARTS.iter().enumerate() {
        let p = &parts[i];
        assert_eq!(p["name"].as_str().unwrap(), *name);
        assert_eq!(p["type"].as_str().unwrap().to_uppercase(), *ty);
        assert_eq!(
            p["start"].as_u64().unwrap() * sector,
            start * MIB,
            "{name} start"
        );
        assert!(p["uuid"].is_string());
    }
    let root = &parts[3];
    let root_end = (root["start"].as_u64().unwrap() + root["size"].as_u64().unwrap()) * sector;
    assert!(
        root_end <= disk_bytes - 33 * 512,
        "root must end before the backup GPT"
    );
    let v = must(Command::new("sgdisk").args(["-v", dev]));
    assert!(v.contains("No problems found"), "sgdisk -v {dev}:\n{v}");
}

/// Filesystem type, label and UUID of each partition, read by blkid.
fn check_filesystems(file: &Path) {
    for (name, _, start, ty, label, uuid) in SPEC_PARTS {
        if ty.is_empty() {
            continue;
        }
        let o = must(
            Command::new("blkid")
                .args(["-p", "-o", "export", "-O", &(start * MIB).to_string()])
                .arg(file),
        );
        assert!(
            o.contains(&format!("TYPE={ty}")),
            "{name} in {}: {o}",
            file.display()
        );
        assert!(o.contains(&format!("LABEL={label}")), "{name}: {o}");
        assert!(o.contains(&format!("UUID={uuid}")), "{name}: {o}");
    }
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn partition_tables_and_filesystems_follow_spec() {
    let b = built();
    for key in ["metal", "qemu"] {
        let raw = b.raw.join(format!("{key}.raw"));
        let len = std::fs::metadata(&raw).unwrap().len();
        check_table(raw.to_str().unwrap(), 512, len);
        check_filesystems(&raw);
    }
    // qemu is image.json `size` GiB, metal is sized from the content.
    let q = std::fs::metadata(b.raw.join("qemu.raw")).unwrap().len();
    let m = std::fs::metadata(b.raw.join("metal.raw")).unwrap().len();
    assert_eq!(q, 10 << 30, "test OS image.json size is 10");
    assert!(m < q && m > 513 * MIB);
    // metal4k: read through a 4096-byte-sector loop device.
    let raw = b.raw.join("metal4k.raw");
    let l = Loop::new(&raw, 0, None, 4096);
    check_table(&l.0, 4096, m);
    check_filesystems(&raw);
    // The 4K ESP really has 4096-byte sectors; the 512 one 512.
    let bps = |f: &Path| {
        let o = must(
            Command::new("minfo")
                .arg("-i")
                .arg(format!("{}@@{}", f.display(), 2 * MIB))
                .arg("::"),
        );
        o.lines()
            .find(|l| l.contains("sector size:"))
            .unwrap_or("")
            .to_string()
    };
    assert!(bps(&raw).contains("4096"), "{}", bps(&raw));
    assert!(bps(&b.raw.join("metal.raw")).contains("512"));
    // No BIOS boot code on metal4k; GRUB's on metal.
    let mbr = |f: &Path| {
        use std::os::unix::fs::FileExt;
        let mut b = [0u8; 440];
        std::fs::File::open(f)
            .unwrap()
            .read_exact_at(&mut b, 0)
            .unwrap();
        b
    };
    assert!(mbr(&raw).iter().all(|&x| x == 0), "metal4k has boot code");
    assert!(mbr(&b.raw.join("metal.raw"))
        .windows(4)
        .any(|w| w == b"GRUB"));
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn qcow2_is_valid_and_equals_its_raw() {
    let b = built();
    let (_, e) = image("qemu");
    let q = qcow2();
    must(Command::new("qemu-img").arg("check").arg(&q));
    let info: Value = serde_json::from_str(&must(
        Command::new("qemu-img")
            .args(["info", "--output=json"])
            .arg(&q),
    ))
    .unwrap();
    assert_eq!(info["format"], "qcow2");
    assert_eq!(info["format-specific"]["data"]["compat"], "1.1");
    assert_eq!(info["virtual-size"].as_u64().unwrap(), 10 << 30);
    assert_eq!(info["cluster-size"].as_u64().unwrap(), 65536);
    // Holes stay holes: the file is a small fraction of the virtual size.
    assert!(e["uncompressed-size"].as_u64().unwrap() < 200 * MIB);
    let c = Command::new("qemu-img")
        .args(["compare", "-f", "qcow2", "-F", "raw"])
        .arg(&q)
        .arg(b.raw.join("qemu.raw"))
        .output()
        .unwrap();
    assert!(
        c.status.success(),
        "qemu-img compare: {}",
        String::from_utf8_lossy(&c.stdout)
    );
    std::fs::remove_file(&q).unwrap();
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn root_partition_is_identical_across_platforms() {
    let b = built();
    let m = b.raw.join("metal.raw");
    let len = std::fs::metadata(&m).unwrap().len();
    let root_start = 513 * MIB;
    let root_len = len - root_start - MIB;
    for other in ["qemu", "metal4k"] {
        let o = b.raw.join(format!("{other}.raw"));
        let st = Command::new("cmp")
            .arg(format!("--bytes={root_len}"))
            .arg(format!("--ignore-initial={root_start}:{root_start}"))
            .arg(&m)
            .arg(&o)
            .status()
            .unwrap();
        assert!(st.success(), "root partition of {other} differs from metal");
    }
    // ESP identical between metal and qemu; boot differs (kargs).
    let same = |a: &Path, bb: &Path, start: u64, n: u64| {
        Command::new("cmp")
            .arg(format!("--bytes={n}"))
            .arg(format!("--ignore-initial={start}:{start}"))
            .arg(a)
            .arg(bb)
            .status()
            .unwrap()
            .success()
    };
    assert!(same(&m, &b.raw.join("qemu.raw"), 2 * MIB, 127 * MIB));
    assert!(!same(&m, &b.raw.join("qemu.raw"), 129 * MIB, 384 * MIB));
}

/// Mount root and boot of a raw platform disk read-only.
fn mount_disk(key: &str) -> (Mnt, Mnt, PathBuf) {
    let b = built();
    let raw = b.raw.join(format!("{key}.raw"));
    let dir = tempfile::Builder::new()
        .prefix("mnt-")
        .tempdir_in(tmp_root())
        .unwrap()
        .keep();
    let root = mount_raw_root(&raw, &dir.join("root"));
    let boot = mount_raw_boot(&raw, &dir.join("boot"));
    (root, boot, dir)
}

fn bls_options(boot: &Path) -> String {
    let dir = boot.join("loader/entries");
    let e: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(e.len(), 1, "one BLS entry expected: {e:?}");
    let t = std::fs::read_to_string(&e[0]).unwrap();
    t.lines()
        .find_map(|l| l.strip_prefix("options "))
        .unwrap()
        .to_string()
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn deployment_kargs_and_boot_files() {
    let b = built();
    let commit = b.meta["ostree-commit"].as_str().unwrap();
    let osname = fx()["osname"].as_str().unwrap();
    for key in ["metal", "qemu"] {
        let (root, boot, dir) = mount_disk(key);
        // ostree sees the deployment (the sysroot's /boot is on the boot fs).
        let bind = dir.join("root/boot");
        let _ = bind; // /boot on the root fs is only a mount point
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "mount --bind '{b}' '{r}/boot' 2>/dev/null || true; ostree admin status --sysroot='{r}'; umount '{r}/boot' 2>/dev/null || true",
                b = boot.0.display(),
                r = root.0.display()
            ))
            .output()
            .unwrap();
        let st = String::from_utf8_lossy(&status.stdout).to_string()
            + &String::from_utf8_lossy(&status.stderr);
        assert!(st.contains(osname), "ostree admin status:\n{st}");
        // The deployed commit is the import of the OS image meta.json names.
        let deployed = st
            .split_whitespace()
            .find_map(|w| {
                w.split_once('.')
                    .filter(|(c, _)| c.len() == 64)
                    .map(|(c, _)| c.to_string())
            })
            .unwrap_or_else(|| panic!("no deployment in:\n{st}"));
        assert_eq!(commit, fx()["rhel_coreos"]["commit"].as_str().unwrap());
        // ostree makes the deployment immutable (ostree-linuxfsutil.c,
        // `_ostree_linuxfs_fd_alter_immutable_flag`); mkfs.xfs -p drops the
        // flag and xfs_db sets it again (docs/contract.md §9).
        let dep_dir = root
            .0
            .join(format!("ostree/deploy/{osname}/deploy/{deployed}.0"));
        let attrs = must(Command::new("lsattr").arg("-d").arg(&dep_dir));
        assert!(
            attrs.split_whitespace().next().unwrap_or("").contains('i'),
            "{key}: the deployment is not immutable: {attrs}"
        );
        for (k, v) in [("sysroot.readonly", "true"), ("sysroot.bootloader", "none")] {
            let got = must(
                Command::new("ostree")
                    .arg(format!("--repo={}/ostree/repo", root.0.display()))
                    .args(["config", "get", k]),
            );
            assert_eq!(got, v, "{k}");
        }
        // Kernel arguments: docs/contract.md §2 base + extra-kargs + the platform's own.
        let opts = bls_options(&boot.0);
        let words: Vec<&str> = opts.split_whitespace().collect();
        assert!(
            words.contains(&"rw") && words.contains(&"$ignition_firstboot"),
            "{opts}"
        );
        assert!(
            words.contains(&"mitigations=auto,nosmt"),
            "image.json extra-kargs missing: {opts}"
        );
        assert!(
            words.contains(&format!("ignition.platform.id={key}").as_str()),
            "{opts}"
        );
        assert!(!opts.contains("root="), "no root= karg: {opts}");
        assert!(words.iter().any(|w| w.starts_with("ostree=")), "{opts}");
        // The platform's console settings come from the OS's platforms.json,
        // keyed by platform as upstream ships it; metal is not listed there
        // (no console settings: ignition.platform.id alone).
        let pj: Value =
            serde_json::from_slice(&std::fs::read(boot.0.join("coreos/platforms.json")).unwrap())
                .unwrap();
        assert!(
            pj.get("x86_64").is_none(),
            "platforms.json is keyed by platform: {pj}"
        );
        let plat = &pj[key];
        if key == "metal" {
            assert!(plat.is_null(), "upstream never lists metal: {pj}");
            assert!(
                words.last() == Some(&"ignition.platform.id=metal"),
                "{opts}"
            );
        }
        let kargs: Vec<String> = plat["kernel_arguments"]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
            .unwrap_or_default();
        let tail: Vec<String> = words[words.len() - kargs.len()..]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(tail, kargs, "{key} kargs, in order: {opts}");
        if key == "qemu" {
            assert!(!kargs.is_empty(), "the test OS gives qemu console kargs");
        }
        let console = std::fs::read_to_string(boot.0.join("grub2/console.cfg")).unwrap();
        assert!(
            console.contains("# CONSOLE-SETTINGS-START")
                && console.contains("# CONSOLE-SETTINGS-END")
        );
        for c in plat["grub_commands"].as_array().into_iter().flatten() {
            assert!(
                console.contains(c.as_str().unwrap()),
                "{key} console.cfg lacks {c}: {console}"
            );
        }
        // platforms.json is the OS's own file.
        let os_pj = must(
            Command::new("ostree")
                .arg(format!("--repo={}/ostree/repo", root.0.display()))
                .args([
                    "cat",
                    &deployed,
                    "/usr/share/coreos-assembler/platforms.json",
                ]),
        );
        assert_eq!(serde_json::from_str::<Value>(&os_pj).unwrap(), pj);
        // Stamp, aleph, /boot/efi, GRUB config and modules.
        assert_eq!(
            std::fs::metadata(boot.0.join("ignition.firstboot"))
                .unwrap()
                .len(),
            0
        );
        assert!(boot.0.join("efi").is_dir());
        let grub = std::fs::read_to_string(boot.0.join("grub2/grub.cfg")).unwrap();
        assert!(
            grub.contains("ignition.firstboot") && grub.contains("console.cfg"),
            "{grub}"
        );
        assert!(boot.0.join("grub2/i386-pc/normal.mod").is_file());
        let aleph: Value = serde_json::from_slice(
            &std::fs::read(root.0.join(".coreos-aleph-version.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(aleph["ostree-commit"], deployed.as_str());
        assert_eq!(aleph["version"], b.meta["ostree-version"]);
        drop(boot);
        drop(root);
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn xz_and_zstd_outputs_are_standard() {
    for (kind, ext, tool) in [("xz", "xz", "xz"), ("zstd", "zst", "zstd")] {
        let root = tmp_root().join(kind);
        let _ = std::fs::remove_dir_all(&root);
        let out = root.join("out");
        let o = run(
            &root.join("cache"),
            &[
                "generate",
                &oci("release"),
                "metal",
                "-o",
                out.to_str().unwrap(),
                "--compress",
                kind,
                "--no-ostree-archive",
            ],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let meta: Value =
            serde_json::from_slice(&std::fs::read(out.join("meta.json")).unwrap()).unwrap();
        let e = &meta["images"]["metal"];
        let p = out.join(e["path"].as_str().unwrap());
        assert!(p.to_str().unwrap().ends_with(&format!(".raw.{ext}")));
        sh(&format!("{tool} -t '{}'", p.display()));
        let un = sh(&format!("{tool} -dc '{}' | sha256sum", p.display()));
        assert_eq!(
            un.split_whitespace().next().unwrap(),
            e["uncompressed-sha256"].as_str().unwrap()
        );
        std::fs::remove_dir_all(&root).ok();
    }
}

fn boots(media: Media, fw: Firmware, platform: &str) {
    let r = boot::assert_boots(&[media], fw, boot::default_timeout());
    assert_eq!(r.marker.platform, platform, "{}", r.log);
    assert!(r.marker.firstboot, "firstboot=1 expected:\n{}", r.log);
    assert_eq!(r.marker.mode, boot::Mode::Disk);
    assert_eq!(
        r.marker.version,
        built().meta["ostree-version"].as_str().unwrap()
    );
    eprintln!("{platform} {fw:?}: booted in {:.1?}", r.duration);
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_metal_bios() {
    boots(
        Media::disk(built().raw.join("metal.raw")),
        Firmware::Bios,
        "metal",
    );
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_metal_uefi() {
    boots(
        Media::disk(built().raw.join("metal.raw")),
        Firmware::Uefi,
        "metal",
    );
}

fn qcow2() -> PathBuf {
    static Q: OnceLock<PathBuf> = OnceLock::new();
    Q.get_or_init(|| {
        let (p, _) = image("qemu");
        let q = tmp_root().join("main/qemu.qcow2");
        gunzip(&p, &q);
        q
    })
    .clone()
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
/// Under UEFI only: metal boots the same disk under BIOS too.
fn boot_qemu_qcow2_uefi() {
    boots(
        Media::disk_as(qcow2(), boot::DiskFormat::Qcow2),
        Firmware::Uefi,
        "qemu",
    );
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_metal4k_uefi_4k_virtio() {
    boots(
        Media::disk_4k(built().raw.join("metal4k.raw"), boot::DiskFormat::Raw),
        Firmware::Uefi,
        "metal",
    );
}
