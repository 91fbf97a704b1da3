//! The test OS of the fixture release boots: its own kernel and initramfs,
//! with a squashfs of the committed tree appended (PXE mode), under TCG,
//! print the marker line; with an Ignition config appended, its sha256.
use crate::common::*;
use std::process::Command;

fn checkout(dest: &std::path::Path) {
    let f = fx();
    must(Command::new("ostree").args([
        "checkout",
        "--repo",
        fixture_dir().join("repo").to_str().unwrap(),
        f["rhel_coreos"]["commit"].as_str().unwrap(),
        dest.to_str().unwrap(),
    ]));
}

#[test]
#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]
fn committed_tree_boots_in_pxe_mode() {
    let d = tempfile::tempdir().unwrap();
    let tree = d.path().join("tree");
    checkout(&tree);
    let ign = d.path().join("config.ign");
    std::fs::write(&ign, r#"{"ignition":{"version":"3.4.0"}}"#).unwrap();
    let log = d.path().join("serial.log");
    let o = Command::new("bash")
        .arg(top().join("fixtures/os/smoke-boot.sh"))
        .arg(&tree)
        .args([
            "--ignition",
            ign.to_str().unwrap(),
            "--log",
            log.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let serial = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        o.status.success(),
        "smoke boot failed:\n{}\n--- serial ---\n{serial}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Checked here too, independently of the script.
    let marker = serial
        .lines()
        .find(|l| l.contains("BOOTIMAGE-TEST-OS ok"))
        .expect("no marker line");
    let want_ign = bootimage_gen::util::sha256_hex(&std::fs::read(&ign).unwrap());
    assert!(marker.contains("mode=live-pxe"), "{marker}");
    assert!(marker.contains("platform=metal"), "{marker}");
    assert!(
        marker.contains(&format!(
            "version={}",
            fx()["rhel_coreos"]["version"].as_str().unwrap()
        )),
        "{marker}"
    );
    assert!(marker.contains(&format!("ignition={want_ign}")), "{marker}");
    assert!(!serial.contains("BOOTIMAGE-TEST-OS FAIL"));
}
