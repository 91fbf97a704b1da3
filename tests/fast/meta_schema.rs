//! meta.json against coreos-assembler's own schema (tests/data, see its
//! README), and SHA256SUMS against `sha256sum -c`.

use std::path::Path;
use std::process::Command;

use bootimage_gen::platforms;
use bootimage_gen::publish::meta::{
    self, Ami, ContainerImage, Git, ImageEntry, Meta, IMAGE_KEY_OCI_MANIFEST, IMAGE_KEY_OSTREE,
};
use serde_json::Value;

const SCHEMA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/cosa-meta-v1.schema.json"
);

const NAME: &str = "rhcos";
const VERSION: &str = "418.94.202501221327-0";
const ARCH: &str = "x86_64";
const COMMIT: &str = "f15f5b25cf138a7683e3d200c53ece2091bf71d31332135da87892ab72ff4ee3";

fn validator() -> jsonschema::Validator {
    let text = std::fs::read_to_string(SCHEMA).expect("reading the saved cosa schema");
    let schema: Value = serde_json::from_str(&text).expect("the saved cosa schema is JSON");
    jsonschema::validator_for(&schema)
        .unwrap_or_else(|e| panic!("compiling the cosa schema failed: {e}"))
}

/// Every validation error, one per line with its location; empty when valid.
fn errors(v: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    v.iter_errors(instance)
        .map(|e| format!("at {:?}: {e}", e.instance_path.as_str()))
        .collect()
}

fn hash(seed: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(seed.as_bytes()))
}

fn file_name(platform: &str, ext: &str) -> String {
    format!("{NAME}-{VERSION}-{platform}.{ARCH}.{ext}")
}

/// A Meta with every image key of docs/contract.md §6.1, the ostree and oci-manifest
/// entries cosa's schema expects, AMIs and all the optional facts we fill.
fn full_meta() -> Meta {
    let mut m = Meta::new(
        NAME,
        VERSION,
        COMMIT,
        &meta::rfc3339_utc(1_737_552_420),
        ARCH.parse().unwrap(),
    );
    m.base_oscontainer = Some(ContainerImage {
        image: "quay.io/openshift-release-dev/ocp-v4.0-art-dev".into(),
        digest: Some(format!("sha256:{}", hash("os"))),
        tags: vec![],
        comment: None,
    });
    m.release_payload = Some(ContainerImage {
        image: "quay.io/openshift-release-dev/ocp-release".into(),
        digest: Some(format!("sha256:{}", hash("release"))),
        tags: vec!["4.18.1".into()],
        comment: Some("OpenShift release 4.18.1".into()),
    });
    m.coreos_assembler.container_config_git = Some(Git {
        commit: "742edc307e58f35824d906958b6493510e12b593".into(),
        origin: "https://github.com/openshift/os".into(),
        branch: None,
        dirty: None,
    });
    m.summary = Some("Red Hat Enterprise Linux CoreOS".into());
    m.ostree_content_checksum = Some(hash("content"));

    // Every key of the platform table, named as the table names it.
    let ext = |key: &str| match key {
        "live-iso" => ("live".to_string(), "iso".to_string(), false),
        "live-kernel" => ("live-kernel".into(), String::new(), false),
        "live-initramfs" => ("live-initramfs".into(), "img".into(), false),
        "live-rootfs" => ("live-rootfs".into(), "img".into(), false),
        other => {
            let p = platforms::by_meta_key(other).expect("a table key");
            let gz = bootimage_gen::io::compress::Compressor::Gzip;
            (p.name.to_string(), p.suffix(gz), p.compressed_with(gz))
        }
    };
    let keys = platforms::meta_keys();
    for key in &keys {
        let (platform, ext, compressed) = ext(key);
        let path = if ext.is_empty() {
            format!("{NAME}-{VERSION}-{platform}.{ARCH}")
        } else {
            file_name(&platform, &ext)
        };
        let entry = if compressed {
            ImageEntry {
                path: path.clone(),
                sha256: hash(&path),
                size: 1_000_000,
                uncompressed_sha256: Some(hash(&format!("{path}-raw"))),
                uncompressed_size: Some(17 << 30),
                skip_compression: None,
            }
        } else {
            ImageEntry {
                path: path.clone(),
                sha256: hash(&path),
                size: 1_000_000,
                uncompressed_sha256: None,
                uncompressed_size: None,
                skip_compression: Some(true),
            }
        };
        m.images.insert(key.to_string(), entry);
    }
    for (key, path) in [
        (IMAGE_KEY_OSTREE, file_name("ostree", "ociarchive")),
        (
            IMAGE_KEY_OCI_MANIFEST,
            format!("{NAME}-{VERSION}-ostree.{ARCH}-manifest.json"),
        ),
    ] {
        m.images.insert(
            key.into(),
            ImageEntry {
                path: path.clone(),
                sha256: hash(&path),
                size: 1234,
                uncompressed_sha256: None,
                uncompressed_size: None,
                skip_compression: Some(true),
            },
        );
    }
    m.amis = vec![
        Ami {
            name: "us-east-1".into(),
            hvm: "ami-0123456789abcdef0".into(),
            snapshot: "snap-0123456789abcdef0".into(),
        },
        Ami {
            name: "eu-west-1".into(),
            hvm: "ami-0fedcba9876543210".into(),
            snapshot: "snap-0fedcba9876543210".into(),
        },
    ];
    m
}

/// Writes `m` with write_meta and reads the file back as JSON, so what is
/// validated is exactly what lands on disk.
fn written(m: &Meta) -> Value {
    let d = tempfile::tempdir().unwrap();
    meta::write_meta(d.path(), m).expect("write_meta");
    let text = std::fs::read_to_string(d.path().join(meta::META_JSON)).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn full_meta_validates_against_cosa_schema() {
    let v = validator();
    let m = full_meta();
    let json = written(&m);
    let errs = errors(&v, &json);
    assert!(
        errs.is_empty(),
        "meta.json does not validate against cosa's schema:\n{}\n\ndocument:\n{}",
        errs.join("\n"),
        serde_json::to_string_pretty(&json).unwrap()
    );
    // every docs/contract.md §6.1 key made it into the document
    let images = json["images"].as_object().unwrap();
    for key in &platforms::meta_keys() {
        assert!(images.contains_key(*key), "images.{key} missing");
    }
    assert_eq!(json["amis"].as_array().unwrap().len(), 2);
    assert_eq!(json["coreos-assembler.basearch"], ARCH);
}

#[test]
fn minimal_meta_without_images_validates() {
    let v = validator();
    let arch = ARCH.parse().unwrap();
    let m = Meta::new(NAME, VERSION, COMMIT, "2025-01-22T13:27:00Z", arch);
    let errs = errors(&v, &written(&m));
    assert!(errs.is_empty(), "{}", errs.join("\n"));
}

#[test]
fn missing_required_field_fails_validation() {
    let v = validator();
    let good = serde_json::to_value(full_meta()).unwrap();
    assert!(errors(&v, &good).is_empty());
    for key in [
        "buildid",
        "name",
        "ostree-commit",
        "ostree-timestamp",
        "ostree-version",
    ] {
        let mut bad = good.clone();
        bad.as_object_mut().unwrap().remove(key);
        let errs = errors(&v, &bad);
        assert!(
            errs.iter().any(|e| e.contains(key)),
            "removing {key} should fail validation, got {errs:?}"
        );
    }
}

#[test]
fn schema_constraints_are_enforced() {
    let v = validator();
    let good = serde_json::to_value(full_meta()).unwrap();

    // cosa's schema forbids unknown top-level keys: no object of our own
    let mut bad = good.clone();
    bad["bootimage-gen"] = serde_json::json!({"version": "0.1.0"});
    assert!(!errors(&v, &bad).is_empty(), "extra top-level key accepted");

    // images needs an ostree entry
    let mut bad = good.clone();
    bad["images"].as_object_mut().unwrap().remove("ostree");
    assert!(
        !errors(&v, &bad).is_empty(),
        "images without ostree accepted"
    );
    let mut m = full_meta();
    m.images.remove(IMAGE_KEY_OSTREE);
    assert!(m.lacks_ostree_image());

    // the timestamp must end in Z
    let mut bad = good.clone();
    bad["ostree-timestamp"] = "2025-01-22T13:27:00+00:00".into();
    assert!(
        !errors(&v, &bad).is_empty(),
        "timestamp with offset accepted"
    );

    // an artifact needs its sha256; an AMI its snapshot
    let mut bad = good.clone();
    bad["images"]["qemu"]
        .as_object_mut()
        .unwrap()
        .remove("sha256");
    assert!(
        !errors(&v, &bad).is_empty(),
        "artifact without sha256 accepted"
    );
    let mut bad = good;
    bad["amis"][0].as_object_mut().unwrap().remove("snapshot");
    assert!(
        !errors(&v, &bad).is_empty(),
        "AMI without snapshot accepted"
    );
}

#[test]
fn merged_meta_still_validates() {
    let v = validator();
    let d = tempfile::tempdir().unwrap();
    let mut first = full_meta();
    first
        .images
        .retain(|k, _| k == "metal" || k == IMAGE_KEY_OSTREE);
    meta::write_merged_meta(d.path(), first).unwrap();
    let mut second = full_meta();
    second
        .images
        .retain(|k, _| k == "qemu" || k == IMAGE_KEY_OSTREE);
    second.amis.clear();
    let merged = meta::write_merged_meta(d.path(), second).unwrap();
    assert_eq!(merged.images.len(), 3);
    assert_eq!(merged.amis.len(), 2);
    let text = std::fs::read_to_string(d.path().join(meta::META_JSON)).unwrap();
    let errs = errors(&v, &serde_json::from_str(&text).unwrap());
    assert!(errs.is_empty(), "{}", errs.join("\n"));
}

fn sha256sum_check(dir: &Path) -> std::process::Output {
    Command::new("sha256sum")
        .args(["-c", meta::SHA256SUMS])
        .current_dir(dir)
        .output()
        .expect("running sha256sum (coreutils)")
}

#[test]
fn sha256sums_passes_sha256sum_check() {
    let d = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (name, data) in [
        ("zeta.x86_64.iso", &b"second file\n"[..]),
        ("alpha.x86_64.raw.gz", &b"first file"[..]),
    ] {
        let p = d.path().join(name);
        std::fs::write(&p, data).unwrap();
        let e = ImageEntry::for_file(&p).unwrap();
        assert_eq!(e.size, data.len() as u64);
        files.push((e.path, e.sha256));
    }
    meta::write_sha256sums(d.path(), &files).unwrap();

    let text = std::fs::read_to_string(d.path().join(meta::SHA256SUMS)).unwrap();
    let names: Vec<_> = text
        .lines()
        .map(|l| l.split_once("  ").unwrap().1)
        .collect();
    assert_eq!(names, ["alpha.x86_64.raw.gz", "zeta.x86_64.iso"]);

    let out = sha256sum_check(d.path());
    assert!(
        out.status.success(),
        "sha256sum -c failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches(": OK").count(), 2, "{stdout}");

    // and the check can fail: corrupt one file
    std::fs::write(d.path().join("zeta.x86_64.iso"), b"tampered\n").unwrap();
    assert!(!sha256sum_check(d.path()).status.success());
}
