//! The fixture tool as fixtures/build.sh calls it: an OCI layout written,
//! its tag found by `digest`, and bad input refused with usage.
use std::path::Path;
use std::process::Command;

fn tool() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bootimage-fixture"))
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}

#[test]
fn add_image_then_digest_names_the_manifest_blob() {
    let d = tempfile::tempdir().unwrap();
    let layer = d.path().join("layer");
    std::fs::create_dir_all(layer.join("etc")).unwrap();
    std::fs::write(layer.join("etc/hello"), b"hi\n").unwrap();
    let layout = d.path().join("oci");
    let o = tool()
        .args(["add-image", "--layout"])
        .arg(&layout)
        .args(["--tag", "t1", "--layer-dir"])
        .arg(&layer)
        .args(["--label", "k=v"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = tool()
        .args(["digest", "--layout"])
        .arg(&layout)
        .args(["--tag", "t1"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let digest = String::from_utf8(o.stdout).unwrap().trim().to_string();
    let hexd = digest.strip_prefix("sha256:").expect("a sha256 digest");
    // The digest is the manifest blob's own hash, and the manifest carries
    // the label's config.
    let blob = std::fs::read(Path::new(&layout).join("blobs/sha256").join(hexd)).unwrap();
    assert_eq!(sha256_hex(&blob), hexd);
    let m: serde_json::Value = serde_json::from_slice(&blob).unwrap();
    let cfg = m["config"]["digest"]
        .as_str()
        .unwrap()
        .strip_prefix("sha256:")
        .unwrap();
    let c: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("blobs/sha256").join(cfg)).unwrap())
            .unwrap();
    assert_eq!(c["config"]["Labels"]["k"], "v");
}

#[test]
fn unknown_tag_and_no_command_fail() {
    let d = tempfile::tempdir().unwrap();
    let o = tool()
        .args(["digest", "--layout"])
        .arg(d.path())
        .args(["--tag", "nope"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let o = tool().output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("usage:"));
}
