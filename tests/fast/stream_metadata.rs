//! The stream.json we write, read back by an independent reader: the
//! `coreos-stream-metadata` crate (coreos/stream-metadata-rust), which
//! installers and tools use to find CoreOS artifacts.
use bootimage_gen::publish::meta::{Ami, ImageEntry, Meta};
use bootimage_gen::publish::stream::{from_meta, read_stream, write_stream, STREAM_JSON};
use coreos_stream_metadata::Stream as UpstreamStream;

const V: &str = "418.94.202501221327-0";
const BASE: &str = "https://mirror.example.com/art/418.94/x86_64";

fn hash(key: &str, salt: &str) -> String {
    bootimage_gen::util::sha256_hex(format!("{key}{salt}").as_bytes())
}

/// `(meta key, file name, stream platform, format, kind)` for every image
/// this tool writes, as cosa names and publishes them.
fn table() -> Vec<(
    &'static str,
    String,
    &'static str,
    &'static str,
    &'static str,
)> {
    vec![
        (
            "metal",
            format!("rhcos-{V}-metal.x86_64.raw.gz"),
            "metal",
            "raw.gz",
            "disk",
        ),
        (
            "metal4k",
            format!("rhcos-{V}-metal4k.x86_64.raw.gz"),
            "metal",
            "4k.raw.gz",
            "disk",
        ),
        (
            "qemu",
            format!("rhcos-{V}-qemu.x86_64.qcow2.gz"),
            "qemu",
            "qcow2.gz",
            "disk",
        ),
        (
            "openstack",
            format!("rhcos-{V}-openstack.x86_64.qcow2.gz"),
            "openstack",
            "qcow2.gz",
            "disk",
        ),
        (
            "aws",
            format!("rhcos-{V}-aws.x86_64.vmdk.gz"),
            "aws",
            "vmdk.gz",
            "disk",
        ),
        (
            "vmware",
            format!("rhcos-{V}-vmware.x86_64.ova"),
            "vmware",
            "ova",
            "disk",
        ),
        (
            "azure",
            format!("rhcos-{V}-azure.x86_64.vhd.gz"),
            "azure",
            "vhd.gz",
            "disk",
        ),
        (
            "gcp",
            format!("rhcos-{V}-gcp.x86_64.tar.gz"),
            "gcp",
            "tar.gz",
            "disk",
        ),
        (
            "azurestack",
            format!("rhcos-{V}-azurestack.x86_64.vhd.gz"),
            "azurestack",
            "vhd.gz",
            "disk",
        ),
        (
            "ibmcloud",
            format!("rhcos-{V}-ibmcloud.x86_64.qcow2.gz"),
            "ibmcloud",
            "qcow2.gz",
            "disk",
        ),
        (
            "kubevirt",
            format!("rhcos-{V}-kubevirt.x86_64.ociarchive"),
            "kubevirt",
            "ociarchive",
            "disk",
        ),
        (
            "nutanix",
            format!("rhcos-{V}-nutanix.x86_64.qcow2"),
            "nutanix",
            "qcow2",
            "disk",
        ),
        (
            "oraclecloud",
            format!("rhcos-{V}-oraclecloud.x86_64.qcow2.gz"),
            "oraclecloud",
            "qcow2.gz",
            "disk",
        ),
        (
            "hyperv",
            format!("rhcos-{V}-hyperv.x86_64.vhdx.gz"),
            "hyperv",
            "vhdx.gz",
            "disk",
        ),
        (
            "virtualbox",
            format!("rhcos-{V}-virtualbox.x86_64.ova"),
            "virtualbox",
            "ova",
            "disk",
        ),
        (
            "aliyun",
            format!("rhcos-{V}-aliyun.x86_64.qcow2.gz"),
            "aliyun",
            "qcow2.gz",
            "disk",
        ),
        (
            "digitalocean",
            format!("rhcos-{V}-digitalocean.x86_64.qcow2.gz"),
            "digitalocean",
            "qcow2.gz",
            "disk",
        ),
        (
            "exoscale",
            format!("rhcos-{V}-exoscale.x86_64.qcow2.gz"),
            "exoscale",
            "qcow2.gz",
            "disk",
        ),
        (
            "powervs",
            format!("rhcos-{V}-powervs.x86_64.ova.gz"),
            "powervs",
            "ova.gz",
            "disk",
        ),
        (
            "proxmoxve",
            format!("rhcos-{V}-proxmoxve.x86_64.qcow2.gz"),
            "proxmoxve",
            "qcow2.gz",
            "disk",
        ),
        (
            "applehv",
            format!("rhcos-{V}-applehv.x86_64.raw.gz"),
            "applehv",
            "raw.gz",
            "disk",
        ),
        (
            "hetzner",
            format!("rhcos-{V}-hetzner.x86_64.raw.gz"),
            "hetzner",
            "raw.gz",
            "disk",
        ),
        (
            "vultr",
            format!("rhcos-{V}-vultr.x86_64.raw.gz"),
            "vultr",
            "raw.gz",
            "disk",
        ),
        (
            "live-iso",
            format!("rhcos-{V}-live.x86_64.iso"),
            "metal",
            "iso",
            "disk",
        ),
        (
            "live-kernel",
            format!("rhcos-{V}-live-kernel-x86_64"),
            "metal",
            "pxe",
            "kernel",
        ),
        (
            "live-initramfs",
            format!("rhcos-{V}-live-initramfs.x86_64.img"),
            "metal",
            "pxe",
            "initramfs",
        ),
        (
            "live-rootfs",
            format!("rhcos-{V}-live-rootfs.x86_64.img"),
            "metal",
            "pxe",
            "rootfs",
        ),
    ]
}

fn meta() -> Meta {
    let mut m = Meta::new(
        "rhcos",
        V,
        &hash("commit", ""),
        "2025-01-22T13:27:00Z",
        "x86_64".parse().unwrap(),
    );
    for (key, file, ..) in table() {
        let compressed = file.ends_with(".gz");
        m.images.insert(
            key.to_string(),
            ImageEntry {
                path: file,
                sha256: hash(key, ""),
                size: 1234,
                uncompressed_sha256: compressed.then(|| hash(key, "raw")),
                uncompressed_size: compressed.then_some(16 << 30),
                skip_compression: None,
            },
        );
    }
    m.amis.push(Ami {
        name: "us-gov-west-1".into(),
        hvm: "ami-0000000000000ours".into(),
        snapshot: "snap-0000000000000ours".into(),
    });
    m
}

/// Write the stream for `base`, parse the file with the upstream crate,
/// and check every artifact and AMI.
fn check(base: Option<&str>) {
    // Every image key the tool writes is in the table.
    let mut keys: Vec<&str> = table().iter().map(|t| t.0).collect();
    let mut ours = bootimage_gen::platforms::meta_keys();
    keys.sort();
    ours.sort();
    assert_eq!(keys, ours);

    let m = meta();
    let pinned = vec![
        (
            "us-east-1".to_string(),
            "ami-0123456789abcdef0".to_string(),
            V.to_string(),
        ),
        (
            "eu-west-1".to_string(),
            "ami-0fedcba9876543210".to_string(),
            V.to_string(),
        ),
    ];
    let ours = from_meta(&m, "rhcos-4.18", base, &pinned);
    let dir = tempfile::tempdir().unwrap();
    write_stream(dir.path(), &ours).unwrap();
    assert_eq!(read_stream(dir.path()).unwrap(), ours);
    let text = std::fs::read(dir.path().join(STREAM_JSON)).unwrap();
    let up: UpstreamStream = serde_json::from_slice(&text).unwrap();

    assert_eq!(up.stream, "rhcos-4.18");
    let arch = &up.architectures["x86_64"];
    let mut count = 0;
    for (key, file, platform, format, kind) in table() {
        let a = &arch.artifacts[platform].formats[format][kind];
        let want = match base {
            Some(b) => format!("{b}/{file}"),
            None => file.clone(),
        };
        assert_eq!(a.location, want, "{key}");
        assert_eq!(a.sha256, hash(key, ""), "{key}");
        let compressed = file.ends_with(".gz");
        assert_eq!(
            a.uncompressed_sha256,
            compressed.then(|| hash(key, "raw")),
            "{key}"
        );
        assert_eq!(a.signature, None);
        count += 1;
    }
    assert_eq!(count, 27);
    // Nothing else: 22 platforms, metal with its 4 formats.
    let total: usize = arch
        .artifacts
        .values()
        .flat_map(|p| p.formats.values())
        .map(|k| k.len())
        .sum();
    assert_eq!(total, 27);
    assert_eq!(arch.artifacts.len(), 22);
    assert_eq!(arch.artifacts["metal"].formats.len(), 4);

    // The crate's own query helper.
    let d = up.query_disk("x86_64", "metal", "4k.raw.gz").unwrap();
    assert!(d.location.ends_with("-metal4k.x86_64.raw.gz"));
    let k = up.query_disk("x86_64", "kubevirt", "ociarchive").unwrap();
    assert!(k.location.ends_with("-kubevirt.x86_64.ociarchive"));
    let n = up.query_disk("x86_64", "nutanix", "qcow2").unwrap();
    assert_eq!(n.uncompressed_sha256, None);
    let q = up.query_disk("x86_64", "qemu", "qcow2.gz").unwrap();
    assert_eq!(q.sha256, hash("qemu", ""));

    let regions = &arch.images.as_ref().unwrap().aws.as_ref().unwrap().regions;
    assert_eq!(regions.len(), 3);
    assert_eq!(regions["us-east-1"].image, "ami-0123456789abcdef0");
    assert_eq!(regions["eu-west-1"].image, "ami-0fedcba9876543210");
    assert_eq!(regions["us-gov-west-1"].image, "ami-0000000000000ours");
    for r in regions.values() {
        assert_eq!(r.release, V);
    }

    // Keys the upstream crate does not model, checked on the raw JSON.
    let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
    assert!(v["metadata"]["last-modified"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    assert!(v["metadata"]["generator"]
        .as_str()
        .unwrap()
        .starts_with("bootimage-gen "));
    for (_, _, platform, ..) in table() {
        assert_eq!(
            v["architectures"]["x86_64"]["artifacts"][platform]["release"],
            V
        );
    }
}

#[test]
fn upstream_crate_reads_our_stream_with_base_url() {
    check(Some(BASE));
}

#[test]
fn upstream_crate_reads_our_stream_with_file_names() {
    check(None);
}

#[test]
fn trailing_slash_in_base_url_is_not_doubled() {
    let s = from_meta(&meta(), "rhcos-4.18", Some("https://h/p/"), &[]);
    let v = serde_json::to_value(&s).unwrap();
    assert_eq!(
        v["architectures"]["x86_64"]["artifacts"]["gcp"]["formats"]["tar.gz"]["disk"]["location"],
        format!("https://h/p/rhcos-{V}-gcp.x86_64.tar.gz")
    );
    // Only our AMI without pinned ones.
    let up: UpstreamStream = serde_json::from_value(v).unwrap();
    let regions = &up.architectures["x86_64"]
        .images
        .as_ref()
        .unwrap()
        .aws
        .as_ref()
        .unwrap()
        .regions;
    assert_eq!(regions.keys().collect::<Vec<_>>(), ["us-gov-west-1"]);
}
