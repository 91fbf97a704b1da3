//! Tests of the platform table: names and meta keys are unique, every
//! shipped arch is built, file names and stream keys match upstream's, and
//! only the aws disk is uploaded to AWS.
use super::*;

/// The publish target is the table's: only the aws disk goes to AWS,
/// and `platforms --json` says so.
#[test]
fn each_upload_target_has_its_one_platform() {
    let to = |t: Upload| -> Vec<&str> {
        (PLATFORMS.iter())
            .filter(|p| p.uploads_to(t))
            .map(|p| p.name)
            .collect()
    };
    assert_eq!(to(Upload::Aws), [AWS]);
    assert_eq!(to(Upload::Vsphere), ["vmware"]);
    let json = serde_json::to_value(PLATFORMS).unwrap();
    let aws = json
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == AWS)
        .unwrap();
    assert_eq!(aws["upload"], "aws");
    let vmware = (json.as_array().unwrap().iter())
        .find(|p| p["name"] == "vmware")
        .unwrap();
    assert_eq!(vmware["upload"], "vsphere");
}

#[test]
fn table_is_consistent() {
    let names = names();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "duplicate platform names");
    let mut keys = meta_keys();
    keys.sort();
    let n = keys.len();
    keys.dedup();
    assert_eq!(n, keys.len(), "duplicate meta keys");
    assert_eq!(find("metal4k").unwrap().ignition_id, "metal");
    assert!(find("nope").is_none());
    for p in PLATFORMS {
        assert!(!p.arches.is_empty(), "{}", p.name);
        for a in p.rhcos_arches {
            assert!(
                p.arches.contains(a),
                "{} ships for {a} but is not built",
                p.name
            );
        }
    }
}

#[test]
fn names_and_stream_keys() {
    let gz = Compressor::Gzip;
    let f = |p: &str| find(p).unwrap();
    assert_eq!(
        f("metal").file_name("rhcos", "418.94.1", Arch::X86_64, gz),
        "rhcos-418.94.1-metal.x86_64.raw.gz"
    );
    assert_eq!(
        f("qemu").file_name("fedora-coreos", "40.1", Arch::X86_64, Compressor::None),
        "fedora-coreos-40.1-qemu.x86_64.qcow2"
    );
    // installer data/data/coreos/coreos-rhel-9.json
    for (p, key) in [
        ("metal4k", "4k.raw.gz"),
        ("azurestack", "vhd.gz"),
        ("ibmcloud", "qcow2.gz"),
        ("kubevirt", "ociarchive"),
        ("nutanix", "qcow2"),
        ("vmware", "ova"),
        ("gcp", "tar.gz"),
    ] {
        assert_eq!(f(p).stream_format(gz), key, "{p}");
    }
    assert_eq!(f("ibmcloud").disk_size(GIB, 16 * GIB), 100 * GIB);
    assert_eq!(f("metal").disk_size(GIB, 16 * GIB), GIB);
    assert!(!f("nutanix").exists_for(Arch::Aarch64));
    let metal: Vec<&str> = PLATFORMS
        .iter()
        .filter(|p| p.is_metal_disk())
        .map(|p| p.name)
        .collect();
    assert_eq!(metal, ["metal", "metal4k"]);
}
