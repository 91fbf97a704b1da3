//! `generate ... all` (what the test release's stream lists: with
//! azurestack, ibmcloud, kubevirt and nutanix) plus the platforms cosa
//! builds beyond RHCOS, named explicitly: every cloud and virtualisation
//! format checked with qemu-img, tar, skopeo, sha256sum and xmllint, the
//! stream JSON read by the `coreos-stream-metadata` crate, and one disk per
//! format booted under SeaBIOS and OVMF.
use crate::common::boot::{self, DiskFormat, Firmware, Media};
use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The platforms cosa builds that RHCOS does not ship (the test release's
/// stream does not list them, so `all` leaves them out; named here).
const COSA_ONLY: &[&str] = &[
    "oraclecloud",
    "hyperv",
    "virtualbox",
    "aliyun",
    "digitalocean",
    "exoscale",
    "proxmoxve",
    "applehv",
    "hetzner",
    "vultr",
];

/// What RHCOS's x86_64 stream lists beyond the first eight platforms.
const RHCOS_NEW: &[&str] = &["azurestack", "ibmcloud", "kubevirt", "nutanix"];

struct Built {
    root: PathBuf,
    out: PathBuf,
    raw: PathBuf,
    meta: Value,
    log: String,
}

/// The one `generate` command of this target: `all` and [`COSA_ONLY`]
/// into `out`, the raw disks kept in `raw`.
fn args(out: &Path, raw: &Path) -> Vec<String> {
    ["generate", &oci("release"), "all"]
        .into_iter()
        .chain(COSA_ONLY.iter().copied())
        .chain([
            "-o",
            out.to_str().unwrap(),
            "--base-url",
            "http://mirror.example/os",
            "--debug-raw-dir",
            raw.to_str().unwrap(),
        ])
        .map(str::to_string)
        .collect()
}

fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let root = scratch("generate-platforms");
        let _ = std::fs::remove_dir_all(&root);
        let (out, raw) = (root.join("out"), root.join("raw"));
        let o = run(
            &root.join("cache"),
            &args(&out, &raw)
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>(),
        );
        assert!(o.status.success(), "generate all failed:\n{}", stderr(&o));
        // Kept for the per-platform sizes and times it reports.
        std::fs::write(root.join("generate.log"), stderr(&o)).unwrap();
        let meta: Value =
            serde_json::from_slice(&std::fs::read(out.join("meta.json")).unwrap()).unwrap();
        Built {
            root,
            out,
            raw,
            meta,
            log: stderr(&o),
        }
    })
}

fn artifact(key: &str) -> PathBuf {
    let b = built();
    image_file(&b.meta, &b.out, key)
}

fn sh(script: &str) -> String {
    must(Command::new("sh").arg("-c").arg(script))
}

/// The platform's disk in its own format, uncompressed, in a scratch dir
/// (decompressed or extracted with the standard tools).
fn disk_of(platform: &str) -> (PathBuf, DiskFormat) {
    // One lock per platform: different platforms' disks are made side by
    // side (their files do not overlap), one platform's once.
    type Locks = std::collections::BTreeMap<String, std::sync::Arc<std::sync::Mutex<()>>>;
    static LOCKS: std::sync::Mutex<Locks> = std::sync::Mutex::new(Locks::new());
    let lock = LOCKS
        .lock()
        .unwrap()
        .entry(platform.to_string())
        .or_default()
        .clone();
    let _g = lock.lock().unwrap_or_else(|e| e.into_inner());
    let b = built();
    let dir = b.root.join("disks");
    std::fs::create_dir_all(&dir).unwrap();
    let a = artifact(platform);
    let (name, fmt, script) = match platform {
        "aws" => (
            "aws.vmdk",
            DiskFormat::Vmdk,
            format!("gzip -dc '{}' > aws.vmdk", a.display()),
        ),
        "openstack" => (
            "openstack.qcow2",
            DiskFormat::Qcow2,
            format!("gzip -dc '{}' > openstack.qcow2", a.display()),
        ),
        "azure" => (
            "azure.vhd",
            DiskFormat::Vpc,
            format!(
                "gzip -dc '{}' | cp --sparse=always /dev/stdin azure.vhd",
                a.display()
            ),
        ),
        "vmware" => (
            "disk.vmdk",
            DiskFormat::Vmdk,
            format!("tar -xf '{}' disk.vmdk", a.display()),
        ),
        "gcp" => (
            "disk.raw",
            DiskFormat::Raw,
            format!("tar -xSzf '{}'", a.display()),
        ),
        "metal" => (
            "metal.raw",
            DiskFormat::Raw,
            format!("gzip -dc '{}' > metal.raw", a.display()),
        ),
        "azurestack" => (
            "azurestack.vhd",
            DiskFormat::Vpc,
            format!(
                "gzip -dc '{}' | cp --sparse=always /dev/stdin azurestack.vhd",
                a.display()
            ),
        ),
        "ibmcloud" | "oraclecloud" | "aliyun" | "digitalocean" | "exoscale" | "proxmoxve" => (
            leak(format!("{platform}.qcow2")),
            DiskFormat::Qcow2,
            format!("gzip -dc '{}' > {platform}.qcow2", a.display()),
        ),
        "applehv" | "hetzner" | "vultr" => (
            leak(format!("{platform}.raw")),
            DiskFormat::Raw,
            format!(
                "gzip -dc '{}' | cp --sparse=always /dev/stdin {platform}.raw",
                a.display()
            ),
        ),
        "hyperv" => (
            "hyperv.vhdx",
            DiskFormat::Vhdx,
            format!("gzip -dc '{}' > hyperv.vhdx", a.display()),
        ),
        "nutanix" => (
            "nutanix.qcow2",
            DiskFormat::Qcow2,
            format!("cp '{}' nutanix.qcow2", a.display()),
        ),
        // The qcow2 out of the containerDisk's one layer, with skopeo
        // (oci-archive -> dir) and tar.
        "kubevirt" => (
            "kubevirt.qcow2",
            DiskFormat::Qcow2,
            format!(
                "rm -rf kv && skopeo copy -q 'oci-archive:{}' dir:kv && \
                 l=$(python3 -c 'import json;print(json.load(open(\"kv/manifest.json\"))[\"layers\"][0][\"digest\"].split(\":\")[1])') && \
                 tar -xzf kv/$l -O disk/$(tar -tzf kv/$l | grep qcow2$ | sed 's|disk/||') > kubevirt.qcow2",
                a.display()
            ),
        ),
        "virtualbox" => (
            "vbox/disk.vmdk",
            DiskFormat::Vmdk,
            format!("mkdir -p vbox && tar -C vbox -xf '{}' disk.vmdk", a.display()),
        ),
        _ => unreachable!("{platform}"),
    };
    let p = dir.join(name);
    if !p.exists() {
        must(Command::new("sh").arg("-c").arg(&script).current_dir(&dir));
    }
    (p, fmt)
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn qemu_img_info(p: &Path, fmt: &str) -> Value {
    serde_json::from_str(&must(
        Command::new("qemu-img")
            .args(["info", "--output=json", "-f", fmt])
            .arg(p),
    ))
    .unwrap()
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn all_builds_every_supported_platform_once() {
    let b = built();
    let images = b.meta["images"].as_object().unwrap();
    for k in [
        "metal",
        "metal4k",
        "qemu",
        "openstack",
        "aws",
        "vmware",
        "azure",
        "gcp",
        "live-iso",
        "live-kernel",
        "live-initramfs",
        "live-rootfs",
        "ostree",
    ]
    .into_iter()
    .chain(RHCOS_NEW.iter().copied())
    .chain(COSA_ONLY.iter().copied())
    {
        assert!(
            images.contains_key(k),
            "images.{k} missing: {:?}",
            images.keys()
        );
    }
    let sums = must(
        Command::new("sha256sum")
            .arg("-c")
            .arg("SHA256SUMS")
            .current_dir(&b.out),
    );
    for e in images.values() {
        assert!(
            sums.contains(&format!("{}: OK", e["path"].as_str().unwrap())),
            "{sums}"
        );
    }
    // Never-recompressed formats are marked so; the others are .gz.
    for k in ["vmware", "gcp", "kubevirt", "nutanix", "virtualbox"] {
        assert_eq!(images[k]["skip-compression"], true, "{k}");
        assert!(images[k].get("uncompressed-sha256").is_none(), "{k}");
    }
    for k in [
        "aws",
        "azure",
        "openstack",
        "azurestack",
        "ibmcloud",
        "oraclecloud",
        "hyperv",
        "aliyun",
        "digitalocean",
        "exoscale",
        "proxmoxve",
        "applehv",
        "hetzner",
        "vultr",
    ] {
        assert!(images[k]["path"].as_str().unwrap().ends_with(".gz"), "{k}");
        sh(&format!("gzip -t '{}'", artifact(k).display()));
    }
    // Work on the base disk's unchanged ranges is shared: metal, metal4k
    // and azure lay the disk out at the same offsets, so their compressed
    // chunks of the root filesystem are made once; so are the VMDK grains
    // of aws and vmware; the qcow2s of qemu and openstack hold the base
    // disk's 4 MiB chunks at 4 MiB-aligned offsets, so their gzip chunks
    // there are the raw disks' ones.
    let shared = b
        .log
        .lines()
        .find_map(|l| l.strip_prefix("shared work: "))
        .unwrap_or_else(|| panic!("no shared work reported:\n{}", b.log));
    let n: u64 = shared.split_whitespace().next().unwrap().parse().unwrap();
    assert!(n > 0, "{shared}");
    let by = shared.split_once(": ").expect("per-encoding figures").1;
    for what in ["gzip ", "vmdk grains "] {
        let count: u64 = by
            .split(", ")
            .find_map(|p| p.strip_prefix(what))
            .unwrap_or_else(|| panic!("no {what:?} reuse in {shared}"))
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(count > 0, "{shared}");
    }
    // qemu and openstack differ in their boot filesystem only: their qcow2
    // files hold the base disk's clusters at the same offsets, after the
    // header cluster and a hole up to the first 4 MiB, so those bytes can
    // be compressed once.
    let (openstack, _) = disk_of("openstack");
    let qemu = b.root.join("disks/qemu.qcow2");
    sh(&format!(
        "gzip -dc '{}' > '{}'",
        artifact("qemu").display(),
        qemu.display()
    ));
    let (q, o) = (
        std::fs::read(&qemu).unwrap(),
        std::fs::read(&openstack).unwrap(),
    );
    let same = q
        .iter()
        .zip(&o)
        .skip(64 << 10)
        .take_while(|(a, b)| a == b)
        .count();
    assert!(
        same >= 16 << 20,
        "qemu and openstack qcow2 share only {same} bytes after the header"
    );
    assert!(q != o, "qemu and openstack differ somewhere");
    // ... and those shared blocks are whole 4 MiB chunks of the guest disk,
    // at 4 MiB-aligned guest offsets, as in the raw disks: qemu-img's map
    // of guest to file offsets shows it, and the bytes are the metal
    // disk's.
    let map: serde_json::Value = serde_json::from_slice(
        &std::process::Command::new("qemu-img")
            .args(["map", "--output=json", "-f", "qcow2"])
            .arg(&qemu)
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let (metal, _) = disk_of("metal");
    let metal = std::fs::read(&metal).unwrap();
    const CHUNK: u64 = 4 << 20;
    let mut extents: Vec<(u64, u64, u64)> = (map.as_array().unwrap().iter())
        .filter_map(|e| {
            Some((
                e["offset"].as_u64()?,
                e["start"].as_u64()?,
                e["length"].as_u64()?,
            ))
        })
        .collect();
    extents.sort_unstable();
    // The shared blocks are back to back from the file's first 4 MiB, each
    // run of them aligned in the file and in the guest alike; the
    // platform's own clusters follow.
    let mut blocks = 0;
    let mut next = CHUNK;
    for (file, start, len) in extents.into_iter().filter(|e| e.0 >= CHUNK) {
        if file != next || start % CHUNK != 0 || len % CHUNK != 0 {
            break;
        }
        for k in 0..len / CHUNK {
            let (f, g) = ((file + k * CHUNK) as usize, (start + k * CHUNK) as usize);
            // (metal's last chunk holds its own backup GPT)
            if g + 2 * CHUNK as usize <= metal.len() {
                assert!(
                    q[f..f + CHUNK as usize] == metal[g..g + CHUNK as usize],
                    "qcow2 block at {f} is not the metal disk's chunk at {g}"
                );
                blocks += 1;
            }
        }
        next = file + len;
    }
    assert!(blocks >= 3, "only {blocks} aligned shared blocks in {map}");
    // `all` built everything the stream lists: nothing skipped.
    assert!(!b.log.contains("all: skipping"), "{}", b.log);
    // The release's pinned AMIs are recorded.
    let amis = b.meta["amis"].as_array().expect("amis");
    assert_eq!(amis.len(), 2, "{amis:?}");
}

/// qemu-img recognises the platform's disk as `fmt` (a streamOptimized VMDK
/// where it is one), `qemu-img check` passes, and it holds what its raw does.
fn format_is_valid_and_equal_to_its_raw(b: &Built, platform: &str, fmt: &str, qfmt: &str) {
    let (p, _) = disk_of(platform);
    let info = qemu_img_info(&p, qfmt);
    assert_eq!(info["format"], fmt, "{platform}: {info}");
    if fmt == "vmdk" {
        assert_eq!(
            info["format-specific"]["data"]["create-type"], "streamOptimized",
            "{platform}"
        );
    }
    if fmt != "raw" {
        let c = Command::new("qemu-img")
            .args(["check", "-f", qfmt])
            .arg(&p)
            .output()
            .unwrap();
        // vpc has no check support in qemu-img (exit 63): not an error.
        assert!(
            c.status.success() || (qfmt == "vpc" && c.status.code() == Some(63)),
            "{platform}: {}",
            String::from_utf8_lossy(&c.stdout)
        );
    }
    let raw = b.raw.join(format!("{platform}.raw"));
    let c = Command::new("qemu-img")
        .args(["compare", "-f", qfmt, "-F", "raw"])
        .arg(&p)
        .arg(&raw)
        .output()
        .unwrap();
    assert!(
        c.status.success(),
        "{platform}: qemu-img compare: {}{}",
        String::from_utf8_lossy(&c.stdout),
        String::from_utf8_lossy(&c.stderr)
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn each_format_is_recognised_valid_and_equal_to_its_raw() {
    let b = built();
    let cases = [
        ("aws", "vmdk", "vmdk"),
        ("vmware", "vmdk", "vmdk"),
        ("openstack", "qcow2", "qcow2"),
        ("azure", "vpc", "vpc"),
        ("gcp", "raw", "raw"),
        ("azurestack", "vpc", "vpc"),
        ("ibmcloud", "qcow2", "qcow2"),
        ("nutanix", "qcow2", "qcow2"),
        ("kubevirt", "qcow2", "qcow2"),
        ("oraclecloud", "qcow2", "qcow2"),
        ("aliyun", "qcow2", "qcow2"),
        ("digitalocean", "qcow2", "qcow2"),
        ("exoscale", "qcow2", "qcow2"),
        ("proxmoxve", "qcow2", "qcow2"),
        ("virtualbox", "vmdk", "vmdk"),
        ("hyperv", "vhdx", "vhdx"),
        ("applehv", "raw", "raw"),
        ("hetzner", "raw", "raw"),
        ("vultr", "raw", "raw"),
    ];
    // Two workers, as the machine has two cores: each case decompresses a
    // disk and reads it and its 10 GiB raw through qemu-img.
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while let Some(&(platform, fmt, qfmt)) =
                    cases.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    format_is_valid_and_equal_to_its_raw(b, platform, fmt, qfmt);
                }
            });
        }
    });
    // The VHDs are the raw disk rounded to a MiB plus the footer.
    for p in ["azure", "azurestack"] {
        let (vhd, _) = disk_of(p);
        assert_eq!(std::fs::metadata(&vhd).unwrap().len() % (1 << 20), 512);
    }
    // ibmcloud: 100 GiB virtual size (platform.ibmcloud.ipp.yaml), the
    // other clouds image.json's size.
    let (ibm, _) = disk_of("ibmcloud");
    assert_eq!(qemu_img_info(&ibm, "qcow2")["virtual-size"], 100u64 << 30);
    let (oci, _) = disk_of("oraclecloud");
    let cloud = qemu_img_info(&oci, "qcow2")["virtual-size"]
        .as_u64()
        .unwrap();
    assert!(cloud < 100 << 30, "{cloud}");
    // nutanix: clusters compressed inside the qcow2 (qemu-img check counts
    // them), and the file not recompressed.
    let (nut, _) = disk_of("nutanix");
    let check: Value = serde_json::from_str(&must(
        Command::new("qemu-img")
            .args(["check", "--output=json", "-f", "qcow2"])
            .arg(&nut),
    ))
    .unwrap();
    let compressed = check["compressed-clusters"].as_u64().unwrap();
    let allocated = check["allocated-clusters"].as_u64().unwrap();
    assert!(compressed * 2 > allocated, "{check}");
    let (ibm_plain, _) = disk_of("oraclecloud");
    assert!(
        std::fs::metadata(&nut).unwrap().len() < std::fs::metadata(&ibm_plain).unwrap().len(),
        "nutanix's compressed qcow2 is smaller than a plain one"
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn ova_members_manifest_and_ovf() {
    let ova = artifact("vmware");
    let list = sh(&format!("tar -tf '{}'", ova.display()));
    let names: Vec<&str> = list.lines().collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert_eq!(names[0], "coreos.ovf");
    assert_eq!(names[1], "disk.vmdk");
    assert!(names[2].ends_with(".mf"));
    let dir = built().root.join("ova");
    std::fs::create_dir_all(&dir).unwrap();
    must(Command::new("tar").arg("-xf").arg(&ova).current_dir(&dir));
    let mf = std::fs::read_to_string(dir.join(names[2])).unwrap();
    for m in ["coreos.ovf", "disk.vmdk"] {
        let sum = sh(&format!("sha256sum '{}'", dir.join(m).display()));
        let sum = sum.split_whitespace().next().unwrap();
        assert!(mf.contains(&format!("SHA256({m})= {sum}")), "{mf}");
    }
    let ovf = dir.join("coreos.ovf");
    must(Command::new("xmllint").arg("--noout").arg(&ovf));
    let xp = |q: &str| must(Command::new("xmllint").args(["--xpath", q]).arg(&ovf));
    // Values from the test OS's image.json (vmware-*), and the OS version.
    assert!(
        xp("string(//*[local-name()='OperatingSystemSection']/@*[local-name()='osType'])")
            .contains("rhel9_64Guest")
    );
    assert_eq!(
        xp("string(//*[local-name()='VirtualSystemType'])"),
        "vmx-17"
    );
    let size = std::fs::metadata(dir.join("disk.vmdk")).unwrap().len();
    assert_eq!(
        xp("string(//*[local-name()='File']/@*[local-name()='size'])"),
        size.to_string()
    );
    assert!(
        xp("string(//*[local-name()='ProductSection']/*[local-name()='Version'])")
            .contains(built().meta["ostree-version"].as_str().unwrap())
    );
    // Firmware and secure boot: cosa's vmw:Config keys (vSphere ConfigSpec
    // property paths), directly in the VirtualHardwareSection.
    let cfg = |key: &str| {
        xp(&format!("string(//*[local-name()='VirtualHardwareSection']/*[local-name()='Config'][@*[local-name()='key']='{key}']/@*[local-name()='value'])"))
    };
    assert_eq!(cfg("bootOptions.efiSecureBootEnabled"), "true");
    assert_eq!(cfg("firmware"), "efi");
    let all = std::fs::read_to_string(&ovf).unwrap();
    assert!(!all.contains("uefi.secureBoot.enabled"));
    assert!(all.contains("guestinfo.ignition.config.data"));
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn stream_json_lists_every_artifact_for_coreos_stream_metadata() {
    let b = built();
    let text = std::fs::read_to_string(b.out.join("stream.json")).unwrap();
    let s: coreos_stream_metadata::Stream =
        serde_json::from_str(&text).expect("stream.json parses");
    let arch = &s.architectures["x86_64"];
    let loc = |platform: &str, format: &str| {
        arch.artifacts[platform].formats[format]
            .get("disk")
            .unwrap_or_else(|| panic!("{platform} {format}"))
            .location
            .clone()
    };
    for (key, platform, format) in [
        ("metal", "metal", "raw.gz"),
        ("metal4k", "metal", "4k.raw.gz"),
        ("qemu", "qemu", "qcow2.gz"),
        ("openstack", "openstack", "qcow2.gz"),
        ("aws", "aws", "vmdk.gz"),
        ("vmware", "vmware", "ova"),
        ("azure", "azure", "vhd.gz"),
        ("gcp", "gcp", "tar.gz"),
        // installer data/data/coreos/coreos-rhel-9.json
        ("azurestack", "azurestack", "vhd.gz"),
        ("ibmcloud", "ibmcloud", "qcow2.gz"),
        ("kubevirt", "kubevirt", "ociarchive"),
        ("nutanix", "nutanix", "qcow2"),
        // cosa cmd-generate-release-meta: the suffix after <platform>.<arch>.
        ("oraclecloud", "oraclecloud", "qcow2.gz"),
        ("virtualbox", "virtualbox", "ova"),
        ("hyperv", "hyperv", "vhdx.gz"),
        ("aliyun", "aliyun", "qcow2.gz"),
        ("digitalocean", "digitalocean", "qcow2.gz"),
        ("exoscale", "exoscale", "qcow2.gz"),
        ("proxmoxve", "proxmoxve", "qcow2.gz"),
        ("applehv", "applehv", "raw.gz"),
        ("hetzner", "hetzner", "raw.gz"),
        ("vultr", "vultr", "raw.gz"),
    ] {
        let file = b.meta["images"][key]["path"].as_str().unwrap();
        assert_eq!(
            loc(platform, format),
            format!("http://mirror.example/os/{file}")
        );
    }
    let regions = &arch.images.as_ref().unwrap().aws.as_ref().unwrap().regions;
    assert_eq!(regions.len(), 2);
}

/// Kernel arguments and console.cfg of each platform, read back from its
/// own boot filesystem, match the OS's platforms.json.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn each_platform_has_its_own_kargs_and_console() {
    let b = built();
    // platforms.json gives some platforms no kargs or no console: count
    // those checked, so a platforms.json read as empty cannot pass.
    let (mut with_kargs, mut with_console) = (0, 0);
    for platform in ["openstack", "aws", "vmware", "azure", "gcp"]
        .into_iter()
        .chain(RHCOS_NEW.iter().copied())
        .chain(COSA_ONLY.iter().copied())
    {
        let raw = b.raw.join(format!("{platform}.raw"));
        let read = |path: &str| {
            sh(&format!(
                "l=$(losetup --find --show --read-only --offset=$((129<<20)) --sizelimit=$((384<<20)) '{}'); debugfs -R 'cat {path}' $l 2>/dev/null; losetup -d $l",
                raw.display()
            ))
        };
        let pj: Value = serde_json::from_str(&read("/coreos/platforms.json")).unwrap();
        let entries = sh(&format!(
            "l=$(losetup --find --show --read-only --offset=$((129<<20)) --sizelimit=$((384<<20)) '{}'); debugfs -R 'ls -p /loader/entries' $l 2>/dev/null; losetup -d $l",
            raw.display()
        ));
        let entry = entries
            .lines()
            .filter_map(|l| l.split('/').nth(5))
            .find(|n| n.ends_with(".conf"))
            .unwrap_or_else(|| panic!("{platform}: no BLS entry in {entries}"))
            .to_string();
        let bls = read(&format!("/loader/entries/{entry}"));
        let opts = bls
            .lines()
            .find_map(|l| l.strip_prefix("options "))
            .unwrap();
        assert!(
            opts.contains(&format!("ignition.platform.id={platform}")),
            "{platform}: {opts}"
        );
        let kargs: Vec<String> = pj[platform]["kernel_arguments"]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
            .unwrap_or_default();
        assert!(
            opts.ends_with(&kargs.join(" ")),
            "{platform}: {opts} vs {kargs:?}"
        );
        with_kargs += usize::from(!kargs.is_empty());
        let console = read("/grub2/console.cfg");
        for c in pj[platform]["grub_commands"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(
                console.contains(c.as_str().unwrap()),
                "{platform}: {console}"
            );
            with_console += 1;
        }
    }
    assert!(
        with_kargs > 0 && with_console > 0,
        "platforms.json gave {with_kargs} platforms kargs and {with_console} console commands"
    );
}

/// One boot per (format, firmware) the suite does not boot elsewhere (issue
/// 27): each firmware's own path (BIOS and UEFI from the same disk) is
/// booted with metal in tests/system/generate.rs, so here the firmware alternates.
/// Not booted here, their (format, firmware) booted elsewhere and their
/// bytes and kargs checked above (qemu-img compare with the platform's raw,
/// `each_platform_has_its_own_kargs_and_console`): gcp (raw, UEFI: metal in
/// tests/system/generate.rs), kubevirt (qcow2, UEFI: qemu in tests/system/generate.rs),
/// virtualbox (stream-optimized VMDK, UEFI: aws below), ibmcloud (qcow2,
/// BIOS: openstack below).
fn boots(platform: &str, fw: Firmware) {
    let (p, fmt) = disk_of(platform);
    let r = boot::assert_boots(&[Media::disk_as(p, fmt)], fw, boot::default_timeout());
    assert_eq!(r.marker.platform, platform, "{}", r.log);
    assert!(r.marker.firstboot, "{}", r.log);
    assert_eq!(r.marker.mode, boot::Mode::Disk);
    eprintln!("{platform} {fw:?}: booted in {:.1?}", r.duration);
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_aws_vmdk_uefi() {
    boots("aws", Firmware::Uefi);
}
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_vmware_ova_disk_bios() {
    boots("vmware", Firmware::Bios);
}
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_openstack_qcow2_bios() {
    boots("openstack", Firmware::Bios);
}
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_azure_vhd_uefi() {
    boots("azure", Firmware::Uefi);
}

/// kubevirt: `skopeo inspect` reads the archive as an image of the
/// release's architecture with the OS version as its `version` label; the
/// layer holds `/disk/<name>-<version>-kubevirt.x86_64.qcow2`.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn kubevirt_is_a_containerdisk_image() {
    let b = built();
    let a = artifact("kubevirt");
    let v: Value = serde_json::from_str(&must(
        Command::new("skopeo")
            .arg("inspect")
            .arg(format!("oci-archive:{}", a.display())),
    ))
    .unwrap();
    assert_eq!(v["Architecture"], "amd64", "{v}");
    assert_eq!(v["Os"], "linux", "{v}");
    let version = b.meta["ostree-version"].as_str().unwrap();
    assert_eq!(v["Labels"]["version"], version, "{v}");
    assert_eq!(v["Layers"].as_array().unwrap().len(), 1, "{v}");
    let cfg: Value = serde_json::from_str(&must(
        Command::new("skopeo")
            .args(["inspect", "--config"])
            .arg(format!("oci-archive:{}", a.display())),
    ))
    .unwrap();
    assert_eq!(cfg["architecture"], "amd64", "{cfg}");
    let (qcow2, _) = disk_of("kubevirt");
    assert!(qcow2.exists());
    let list = sh(&format!(
        "cd '{}' && l=$(python3 -c 'import json;print(json.load(open(\"kv/manifest.json\"))[\"layers\"][0][\"digest\"].split(\":\")[1])') && tar -tzf kv/$l",
        b.root.join("disks").display()
    ));
    let name = b.meta["name"].as_str().unwrap();
    assert_eq!(
        list.lines().collect::<Vec<_>>(),
        [
            "disk/",
            &format!("disk/{name}-{version}-kubevirt.x86_64.qcow2")[..]
        ]
    );
}

/// virtualbox: the OVA holds its own template's descriptor (cosa
/// `src/virtualbox-template.xml`), well-formed, and an IDE disk.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn virtualbox_ova_carries_its_template() {
    let ova = artifact("virtualbox");
    let dir = built().root.join("vbox-ova");
    std::fs::create_dir_all(&dir).unwrap();
    must(Command::new("tar").arg("-xf").arg(&ova).current_dir(&dir));
    let ovf = dir.join("coreos.ovf");
    must(Command::new("xmllint").arg("--noout").arg(&ovf));
    let xp = |q: &str| must(Command::new("xmllint").args(["--xpath", q]).arg(&ovf));
    assert_eq!(
        xp("string(//*[local-name()='VirtualSystemType'])"),
        "virtualbox-2.2"
    );
    assert_eq!(
        xp("string(//*[local-name()='OperatingSystemSection']/*[local-name()='OSType'])"),
        "Fedora_64"
    );
    assert_eq!(xp("string(//*[local-name()='Firmware']/@type)"), "EFI");
    let size = std::fs::metadata(dir.join("disk.vmdk")).unwrap().len();
    assert_eq!(
        xp("string(//*[local-name()='File']/@*[local-name()='size'])"),
        size.to_string()
    );
}

// One boot per new format (the other new platforms share a format with
// these or with the platforms above; their platform ids are read back from
// their boot filesystems in each_platform_has_its_own_kargs_and_console).
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_nutanix_compressed_qcow2_bios() {
    boots("nutanix", Firmware::Bios);
}
#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn boot_hyperv_vhdx_uefi() {
    boots("hyperv", Firmware::Uefi);
}

/// The same command run again on another day, as it were: another cache,
/// output path and TMPDIR, another time zone, one CPU (`taskset -c 0`),
/// a later clock, the stage on disk where the first had it in memory.
/// Every file comes out byte for byte the same
/// (docs/contract.md §9): the disks in every format, the live ISO, kernel,
/// initramfs and rootfs, the archives, meta.json, stream.json and
/// SHA256SUMS; diffoscope (Debian's) finds nothing in the metadata either.
/// The second run is `bootimage-gen verify` of the first, which must exit
/// 0.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn a_second_run_elsewhere_writes_the_same_bytes() {
    let b = built();
    let root = scratch("generate-platforms-again");
    let _ = std::fs::remove_dir_all(&root);
    let (out, tmp) = (root.join("elsewhere/out"), root.join("tmp"));
    std::fs::create_dir_all(&tmp).unwrap();
    let exe = env!("CARGO_BIN_EXE_bootimage-gen");
    // The second run is `verify`'s rebuild: the release, platforms and
    // --base-url read from the first run's output.
    let o = Command::new("taskset")
        .args(["-c", "0", exe, "verify"])
        .arg(&b.out)
        .arg("--rebuild-dir")
        .arg(&out)
        .arg("--")
        .arg("--cache-dir")
        .arg(root.join("cache-two"))
        .args(["--stage-in", "disk"])
        .env("TZ", "Pacific/Kiritimati")
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    let log = stderr(&o);
    assert!(
        o.status.success(),
        "verify of the first run failed ({:?}):\n{}\n{log}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        log.contains("match the rebuild byte for byte"),
        "verify did not say all matched:\n{log}"
    );
    assert!(
        log.contains("root and boot made from the staged tree by mkfs.xfs"),
        "the second run did not say which mkfs made the filesystems:\n{log}"
    );
    // Staged in memory (auto, on this machine), then on disk: where the
    // stage was leaves no trace in the bytes.
    assert!(
        b.log.contains("stage: in memory"),
        "the first run did not stage in memory:\n{}",
        b.log
    );
    assert!(
        log.contains("stage: in the work directory (--stage-in disk)"),
        "the second run did not stage on disk:\n{log}"
    );

    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        names(&b.out),
        names(&out),
        "the two runs wrote different files"
    );
    let differ: Vec<String> = names(&b.out)
        .into_iter()
        .filter(|f| read(&b.out.join(f)) != read(&out.join(f)))
        .collect();
    assert!(
        differ.is_empty(),
        "files that differ between the two runs: {differ:?}"
    );
    assert_eq!(
        b.meta["coreos-assembler.build-timestamp"],
        b.meta["ostree-timestamp"]
    );
    eprintln!(
        "{} files identical, SHA256SUMS:\n{}",
        names(&out).len(),
        String::from_utf8_lossy(&read(&out.join("SHA256SUMS")))
    );
    for f in ["meta.json", "stream.json", "SHA256SUMS"] {
        let d = diffoscope(&b.out.join(f), &out.join(f));
        assert!(
            d.0 == Some(0) && d.1.trim().is_empty(),
            "diffoscope {f}: {d:?}"
        );
    }

    let _ = std::fs::remove_dir_all(&root);
}

/// `verify` bites: a byte changed in an OVA, a qcow2 and a raw disk, each
/// named, exit 1; a disk made by an unpinned mkfs (the clock and random
/// seeds back) differs from the rebuild, and diffoscope shows its digest in
/// meta.json, and the content manifests name its differing partition; a
/// release that cannot be read, exit 2. `verify --manifest-only` (no
/// rebuild): the good output's three disks (raw.gz, qcow2.gz, OVA) match
/// their manifests; the changed files differ from meta.json; a byte
/// changed inside a file of the metal disk's root filesystem (the disk
/// then a good gzip again) names the partition, and as root the paths,
/// unprivileged the partition only. Small outputs (metal, qemu, vmware)
/// keep it cheap.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn verify_names_each_file_that_differs_and_says_when_it_cannot_rebuild() {
    let root = scratch("generate-platforms-verify");
    let _ = std::fs::remove_dir_all(&root);
    let cache = root.join("cache");
    let exe = env!("CARGO_BIN_EXE_bootimage-gen");
    let gen = |out: &Path, fault: Option<&str>| {
        let mut c = Command::new(exe);
        c.args(["generate", &oci("release"), "metal", "qemu", "vmware", "-o"])
            .arg(out)
            .arg("--cache-dir")
            .arg(&cache);
        if let Some(f) = fault {
            c.env("BOOTIMAGE_GEN_FAULT", f);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "generate failed:\n{}", stderr(&o));
    };
    let verify = |dir: &Path, extra: &[&str]| {
        let o = Command::new(exe)
            .arg("verify")
            .arg(dir)
            .args(extra)
            .arg("--")
            .arg("--cache-dir")
            .arg(&cache)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
        (o.status.code(), text)
    };
    let good = root.join("good");
    gen(&good, None);
    let (code, text) = verify(&good, &[]);
    assert_eq!(code, Some(0), "{text}");
    // Each disk (raw.gz, qcow2.gz, OVA) against its content manifest.
    let (code, text) = verify_manifest_only(&good, false);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(text.matches("same     ").count(), 3, "{text}");
    assert!(
        !root.join("good.verify").exists(),
        "a matching rebuild is left behind"
    );

    // One byte changed in each of three formats.
    let bad = root.join("changed");
    copy_output(&good, &bad);
    let meta: Value = serde_json::from_slice(&read(&good.join("meta.json"))).unwrap();
    let changed: Vec<String> = ["vmware", "qemu", "metal"]
        .iter()
        .map(|k| meta["images"][k]["path"].as_str().unwrap().to_string())
        .collect();
    for f in &changed {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(bad.join(f))
            .unwrap();
        let mut b = [0u8; 1];
        file.read_exact_at(&mut b, 1000).unwrap();
        file.write_all_at(&[b[0] ^ 1], 1000).unwrap();
    }
    let (code, text) = verify(&bad, &[]);
    assert_eq!(code, Some(1), "{text}");
    for f in &changed {
        assert!(
            text.contains(&format!("DIFFERS  {f}")),
            "{f} not named:\n{text}"
        );
    }
    assert!(text.contains("3 of "), "{text}");
    assert!(
        text.contains("its content manifest agrees with the rebuild's"),
        "{text}"
    );
    assert!(
        root.join("changed.verify").is_dir(),
        "the differing rebuild is not kept"
    );
    // Without rebuilding: each changed file differs from meta.json.
    let (code, text) = verify_manifest_only(&bad, false);
    assert_eq!(code, Some(1), "{text}");
    for f in &changed {
        assert!(
            text.contains(&format!("DIFFERS  {f}: its sha256 is")),
            "{f} not named:\n{text}"
        );
    }
    // A changed byte inside one file of the metal disk's root filesystem,
    // the disk then written again as a good gzip: --manifest-only names
    // the partition, and as root the path.
    let inner = root.join("inner");
    copy_output(&good, &inner);
    let metal = meta["images"]["metal"]["path"].as_str().unwrap();
    let raw = root.join("metal.raw");
    gunzip(&inner.join(metal), &raw);
    let (start, len) = raw_root_extent(&raw);
    let at =
        find_in(&raw, start, len, b"BOOTIMAGE-TEST-OS").expect("the test OS's marker text in root");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&raw)
            .unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0x20], at).unwrap();
    }
    let (line, text) = manifest_only_with_disk(&inner, metal, &raw);
    std::fs::remove_file(&raw).unwrap();
    assert!(line.contains("partition root (bytes "), "{text}");
    assert!(line.contains(" path(s) of its xfs differ: /"), "{text}");
    assert!(line.contains("sha256 \""), "{text}");
    assert_eq!(text.matches("same     ").count(), 2, "{text}");
    let (code, text) = verify_manifest_only(&inner, true);
    assert_eq!(code, Some(1), "as nobody: {text}");
    assert!(text.contains("partition root (bytes "), "{text}");
    assert!(text.contains("naming them needs root"), "{text}");

    // mkfs unpinned: every disk differs from the rebuild.
    let unpinned = root.join("unpinned");
    gen(&unpinned, Some("unpinned-mkfs"));
    let (code, text) = verify(&unpinned, &[]);
    assert_eq!(code, Some(1), "{text}");
    for f in &changed {
        assert!(
            text.contains(&format!("DIFFERS  {f}")),
            "{f} not named:\n{text}"
        );
    }
    assert!(
        text.contains("partition boot (ext4 boot-") || text.contains("partition root (xfs root)"),
        "the differing partition not named:\n{text}"
    );
    // Its own disks still match its own manifests.
    let (code, text) = verify_manifest_only(&unpinned, false);
    assert_eq!(code, Some(0), "{text}");
    let d = diffoscope(&good.join("meta.json"), &unpinned.join("meta.json"));
    assert_eq!(d.0, Some(1), "diffoscope on the unpinned meta.json: {d:?}");
    let metal_sha = meta["images"]["metal"]["sha256"].as_str().unwrap();
    assert!(
        d.1.contains(metal_sha),
        "diffoscope does not show the metal digest:\n{}",
        d.1
    );

    // No rebuild: exit 2, the cause said.
    let (code, text) = verify(&good, &["oci:/nonexistent/layout:release"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("could not rebuild"), "{text}");
    let _ = std::fs::remove_dir_all(&root);
}

/// The offset of the first `what` in `len` bytes of `file` from `start`.
fn find_in(file: &Path, start: u64, len: u64, what: &[u8]) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(file).unwrap();
    let mut buf = vec![0u8; 4 << 20];
    let mut at = start;
    while at < start + len {
        let n = f.read_at(&mut buf, at).unwrap();
        if n == 0 {
            return None;
        }
        if let Some(i) = buf[..n].windows(what.len()).position(|w| w == what) {
            return Some(at + i as u64);
        }
        at += (n - what.len()) as u64;
    }
    None
}

/// diffoscope's exit code and text report of `a` against `b`.
fn diffoscope(a: &Path, b: &Path) -> (Option<i32>, String) {
    let o = Command::new("diffoscope")
        .args(["--no-progress", "--text", "-"])
        .arg(a)
        .arg(b)
        .output()
        .expect("running diffoscope (scripts/install-deps.sh installs diffoscope-minimal)");
    (
        o.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}
