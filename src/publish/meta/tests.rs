//! Unit tests of meta.json and SHA256SUMS: cosa's key names, the round
//! trip through the file, merges, the schema checks and the checksum list.
use super::checks::is_cosa_timestamp;
use super::*;

const COMMIT: &str = "f15f5b25cf138a7683e3d200c53ece2091bf71d31332135da87892ab72ff4ee3";
const OTHER_COMMIT: &str = "742edc307e58f35824d906958b6493510e12b593742edc307e58f35824d90695";

fn hash(c: char) -> String {
    std::iter::repeat(c).take(64).collect()
}

fn image(path: &str, c: char) -> ImageEntry {
    ImageEntry {
        path: path.into(),
        sha256: hash(c),
        size: 42,
        uncompressed_sha256: None,
        uncompressed_size: None,
        skip_compression: None,
    }
}

fn meta(commit: &str) -> Meta {
    Meta::new(
        "rhcos",
        "418.94.202501221327-0",
        commit,
        "2025-01-22T13:27:00Z",
        crate::util::arch::Arch::X86_64,
    )
}

#[test]
fn serialises_with_cosa_key_names() {
    let mut m = meta(COMMIT);
    m.images.insert(
        "qemu".into(),
        ImageEntry {
            uncompressed_sha256: Some(hash('b')),
            uncompressed_size: Some(1 << 30),
            ..image("rhcos-418.94.202501221327-0-qemu.x86_64.qcow2.gz", 'a')
        },
    );
    m.amis.push(Ami {
        name: "us-east-1".into(),
        hvm: "ami-0123".into(),
        snapshot: "snap-0123".into(),
    });
    let v = serde_json::to_value(&m).unwrap();
    let o = v.as_object().unwrap();
    for k in [
        "buildid",
        "name",
        "ostree-commit",
        "ostree-timestamp",
        "ostree-version",
        "coreos-assembler.basearch",
        "coreos-assembler.build-timestamp",
        "coreos-assembler.oci-imported",
        "coreos-assembler.container-image-git",
        "images",
        "amis",
    ] {
        assert!(o.contains_key(k), "missing {k} in {v}");
    }
    assert!(!o.contains_key("coreos_assembler"));
    assert!(!o.contains_key("extra"));
    assert!(!o.contains_key("summary"));
    let q = &v["images"]["qemu"];
    assert_eq!(q["uncompressed-size"], 1u64 << 30);
    assert_eq!(q["uncompressed-sha256"], hash('b'));
    assert!(q.get("skip-compression").is_none());
    assert_eq!(v["amis"][0]["hvm"], "ami-0123");
}

#[test]
fn empty_images_and_amis_are_omitted() {
    let v = serde_json::to_value(meta(COMMIT)).unwrap();
    assert!(v.get("images").is_none());
    assert!(v.get("amis").is_none());
}

#[test]
fn round_trip_through_file_keeps_unknown_keys() {
    let d = tempfile::tempdir().unwrap();
    let mut m = meta(COMMIT);
    m.images.insert("metal".into(), image("a.raw.gz", 'a'));
    m.images.insert(
        "vmware".into(),
        ImageEntry {
            skip_compression: Some(true),
            ..image("a.ova", 'c')
        },
    );
    m.base_oscontainer = Some(ContainerImage {
        image: "quay.io/openshift-release-dev/ocp-v4.0-art-dev".into(),
        digest: Some(format!("sha256:{}", hash('d'))),
        tags: vec![],
        comment: None,
    });
    m.extra
        .insert("coreos-assembler.image-genver".into(), 0.into());
    write_meta(d.path(), &m).unwrap();
    let text = std::fs::read_to_string(d.path().join(META_JSON)).unwrap();
    assert!(text.starts_with("{\n    \"buildid\": "), "{text}");
    assert!(text.ends_with("}\n"));
    let back = read_meta(d.path()).unwrap().unwrap();
    assert_eq!(back, m);
    assert_eq!(back.extra["coreos-assembler.image-genver"], 0);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.path().join(META_JSON))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644);
    // no temporary file left behind
    let names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from(META_JSON)]);
}

#[test]
fn read_meta_absent_is_none() {
    let d = tempfile::tempdir().unwrap();
    assert!(read_meta(d.path()).unwrap().is_none());
}

#[test]
fn merge_same_build_unites_images_and_amis() {
    let d = tempfile::tempdir().unwrap();
    let mut first = meta(COMMIT);
    first.images.insert("metal".into(), image("m.raw.gz", 'a'));
    first.images.insert("qemu".into(), image("q.qcow2.gz", 'b'));
    first.amis.push(Ami {
        name: "us-east-1".into(),
        hvm: "ami-old".into(),
        snapshot: "snap-old".into(),
    });
    first.amis.push(Ami {
        name: "eu-west-1".into(),
        hvm: "ami-eu".into(),
        snapshot: "snap-eu".into(),
    });
    first.release_payload = Some(ContainerImage {
        image: "quay.io/openshift-release-dev/ocp-release".into(),
        digest: Some(format!("sha256:{}", hash('e'))),
        tags: vec!["4.18.1".into()],
        comment: None,
    });
    first.extra.insert("x-kept".into(), "yes".into());
    write_merged_meta(d.path(), first).unwrap();

    let mut second = meta(COMMIT);
    second
        .images
        .insert("qemu".into(), image("q.qcow2.gz", 'c'));
    second.images.insert("live-iso".into(), image("l.iso", 'd'));
    second.amis.push(Ami {
        name: "us-east-1".into(),
        hvm: "ami-new".into(),
        snapshot: "snap-new".into(),
    });
    let merged = write_merged_meta(d.path(), second).unwrap();
    assert_eq!(read_meta(d.path()).unwrap().unwrap(), merged);

    let keys: Vec<_> = merged.images.keys().map(String::as_str).collect();
    assert_eq!(keys, ["live-iso", "metal", "qemu"]);
    assert_eq!(merged.images["qemu"].sha256, hash('c'), "new image wins");
    assert_eq!(merged.images["metal"].sha256, hash('a'), "old image kept");
    let amis: Vec<_> = merged
        .amis
        .iter()
        .map(|a| (a.name.as_str(), a.hvm.as_str()))
        .collect();
    assert_eq!(amis, [("eu-west-1", "ami-eu"), ("us-east-1", "ami-new")]);
    assert_eq!(
        merged.release_payload.as_ref().unwrap().tags,
        ["4.18.1"],
        "facts the new run lacks are kept"
    );
    assert_eq!(merged.extra["x-kept"], "yes");
    let sums = merged.checksums();
    assert_eq!(sums.len(), 3);
}

#[test]
fn merge_other_commit_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let mut first = meta(COMMIT);
    first.images.insert("metal".into(), image("m.raw.gz", 'a'));
    write_merged_meta(d.path(), first.clone()).unwrap();

    let err = write_merged_meta(d.path(), meta(OTHER_COMMIT)).unwrap_err();
    assert!(err.downcast_ref::<OutputDirConflict>().is_some(), "{err:#}");
    let msg = format!("{err:#}");
    assert!(msg.contains("use an empty output directory"), "{msg}");
    assert!(msg.contains(COMMIT) && msg.contains(OTHER_COMMIT), "{msg}");
    // the existing file is untouched
    assert_eq!(read_meta(d.path()).unwrap().unwrap(), first);

    let mut other_arch = meta(COMMIT);
    other_arch.coreos_assembler.basearch = crate::util::arch::Arch::Aarch64;
    assert!(write_merged_meta(d.path(), other_arch).is_err());
    let mut other_version = meta(COMMIT);
    other_version.buildid = "418.94.202501221327-1".into();
    other_version.ostree_version = other_version.buildid.clone();
    assert!(write_merged_meta(d.path(), other_version).is_err());
}

#[test]
fn check_rejects_what_the_schema_would() {
    assert!(meta(COMMIT).check().is_ok());
    assert!(meta("abc").check().is_err());
    let mut m = meta(COMMIT);
    m.ostree_timestamp = "2025-01-22T13:27:00+00:00".into();
    assert!(m.check().is_err());
    let mut m = meta(COMMIT);
    m.buildid.clear();
    assert!(m.check().is_err());
    let mut m = meta(COMMIT);
    m.images.insert("metal".into(), image("../x", 'a'));
    assert!(m.check().is_err());
    let d = tempfile::tempdir().unwrap();
    assert!(write_meta(d.path(), &m).is_err());
}

#[test]
fn lacks_ostree_image() {
    let mut m = meta(COMMIT);
    assert!(!m.lacks_ostree_image());
    m.images.insert("metal".into(), image("m.raw", 'a'));
    assert!(m.lacks_ostree_image());
    m.images
        .insert(IMAGE_KEY_OSTREE.into(), image("o.ociarchive", 'b'));
    assert!(!m.lacks_ostree_image());
}

#[test]
fn timestamps_are_cosa_form() {
    assert_eq!(rfc3339_utc(1579116691), "2020-01-15T19:31:31Z");
    assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
    assert!(is_cosa_timestamp("2020-01-15T19:31:31Z"));
    assert!(!is_cosa_timestamp("2020-01-15 19:31:31Z"));
    assert!(!is_cosa_timestamp("2020-01-15T19:31:31"));
    assert!(!is_cosa_timestamp("Z"));
}

#[test]
fn sha256sums_sorted_deduplicated_and_strict() {
    let d = tempfile::tempdir().unwrap();
    let files = vec![
        ("b.iso".to_string(), hash('b')),
        ("a.raw.gz".to_string(), hash('a')),
        ("b.iso".to_string(), hash('b')),
    ];
    write_sha256sums(d.path(), &files).unwrap();
    let text = std::fs::read_to_string(d.path().join(SHA256SUMS)).unwrap();
    assert_eq!(
        text,
        format!("{}  a.raw.gz\n{}  b.iso\n", hash('a'), hash('b'))
    );

    let clash = vec![("a".to_string(), hash('a')), ("a".to_string(), hash('b'))];
    assert!(write_sha256sums(d.path(), &clash).is_err());
    assert!(write_sha256sums(d.path(), &[("a\nb".into(), hash('a'))]).is_err());
    assert!(write_sha256sums(d.path(), &[("sub/a".into(), hash('a'))]).is_err());
    assert!(write_sha256sums(d.path(), &[("a".into(), "XYZ".into())]).is_err());
    // the failed writes left the first file alone
    assert_eq!(
        std::fs::read_to_string(d.path().join(SHA256SUMS)).unwrap(),
        text
    );
}

#[test]
fn image_entry_for_file_hashes_it() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("x.raw");
    std::fs::write(&p, b"abc").unwrap();
    let e = ImageEntry::for_file(&p).unwrap();
    assert_eq!(e.path, "x.raw");
    assert_eq!(e.size, 3);
    assert_eq!(
        e.sha256,
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}
