//! `inspect` over every transport and both OS formats, on the test release,
//! plus the bad-input contract (one error line, exit 1, nothing left behind).
use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn cache() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn check_native(doc: &Value) {
    let f = fx();
    assert_eq!(doc["schema"], "bootimage-gen/inspect/v1");
    assert_eq!(doc["release"]["version"], f["release"]["version"]);
    assert_eq!(doc["release"]["digest"], f["release"]["digest"]);
    assert_eq!(doc["release"]["architecture"], "x86_64");
    assert_eq!(doc["release"]["metadata"]["kind"], "cincinnati-metadata-v0");
    assert_eq!(doc["os"]["tag"], "rhel-coreos");
    assert_eq!(doc["os"]["digest"], f["rhel_coreos"]["digest"]);
    assert_eq!(doc["os"]["format"], "ostree-native");
    assert_eq!(doc["os"]["version"], f["rhel_coreos"]["version"]);
    assert_eq!(doc["os"]["kernel"], f["kernel"]);
    assert_eq!(doc["os"]["osname"], f["osname"]);
    assert_eq!(doc["os"]["imported"], true);
    assert!(doc["os"]["commit"].as_str().unwrap().len() == 64);
    // The OS's own commit (meta.json's), not the import's merge commit.
    assert_eq!(doc["os"]["commit"], f["rhel_coreos"]["commit"]);
    assert_eq!(doc["os"]["derived"], false);
    let img = &doc["bootimage-config"]["image"];
    assert_eq!(img["size"]["value"], 10);
    assert_eq!(img["size"]["default"], false);
    assert_eq!(img["vmware-hw-version"]["value"], 17);
    assert_eq!(img["aws-volume-type"]["value"], "gp3");
    assert_eq!(img["extra-kargs"]["value"][0], "mitigations=auto,nosmt");
    // platforms.json as upstream ships it: keyed by platform, no metal.
    let pj = &doc["bootimage-config"]["platforms"];
    assert_eq!(pj["shape"], "by-platform", "{pj:#}");
    let plats = pj["console"].as_object().unwrap();
    assert!(plats.contains_key("qemu") && !plats.contains_key("metal"));
    assert_eq!(
        plats["qemu"]["kernel_arguments"][1],
        "console=ttyS0,115200n8"
    );
    assert_eq!(doc["bootimage-config"]["live-templates"], true);
    let amis = doc["pinned-amis"].as_array().unwrap();
    assert_eq!(amis.len(), 2);
    assert!(amis
        .iter()
        .all(|a| a["release"] == f["pinned_release"]
            && a["image"].as_str().unwrap().starts_with("ami-")));
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn oci_dir_native_and_cache_reuse() {
    let c = cache();
    let doc = ok_json(
        c.path(),
        &["inspect", &oci("release"), "--import", "--json"],
    );
    check_native(&doc);
    assert_eq!(doc["os"]["from-cache"], false);
    // Second run: reused, and says so.
    let o = run(
        c.path(),
        &["inspect", &oci("release"), "--import", "--json"],
    );
    assert!(o.status.success());
    assert!(
        stderr(&o).contains("reusing the cached import"),
        "{}",
        stderr(&o)
    );
    let doc2: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc2["os"]["from-cache"], true);
    assert_eq!(doc2["os"]["commit"], doc["os"]["commit"]);
    assert_cache_clean(c.path());
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn text_output_names_everything() {
    let c = cache();
    let o = run(c.path(), &["inspect", &oci("release"), "--import"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for needle in [
        "4.18.0-test",
        "rhel-coreos",
        "ostree-native",
        "6.1.0",
        "testos",
        "gp3",
        "us-east-1",
        "eu-west-1",
        "qemu",
    ] {
        assert!(out.contains(needle), "text output lacks {needle}:\n{out}");
    }
}

/// Issue 21: the same document cold and cached, apart from the fields
/// docs/inspect-json.md marks cache-dependent; the same for the text.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn same_identity_cold_and_cached() {
    let c = cache();
    let args = ["inspect", &oci("release"), "--import", "--json"];
    let mut cold = ok_json(c.path(), &args);
    let mut warm = ok_json(c.path(), &args);
    assert_eq!(cold["os"]["from-cache"], false);
    assert_eq!(warm["os"]["from-cache"], true);
    assert_eq!(cold["os"]["commit"], fx()["rhel_coreos"]["commit"]);
    for d in [&mut cold, &mut warm] {
        for k in ["from-cache", "import-commit"] {
            d["os"].as_object_mut().unwrap().remove(k);
        }
    }
    assert_eq!(cold, warm);
    // Without --import: a fresh cache and one holding the import name the
    // same commit (the label's), as meta.json does.
    let fresh = cache();
    let label = ok_json(fresh.path(), &["inspect", &oci("release"), "--json"]);
    let cached = ok_json(c.path(), &["inspect", &oci("release"), "--json"]);
    assert_eq!(label["os"]["commit"], cached["os"]["commit"]);
    assert_eq!(label["os"]["commit"], fx()["rhel_coreos"]["commit"]);
    // Text: identical apart from the "imported" line.
    let text = |dir: &Path| {
        let o = run(dir, &["inspect", &oci("release"), "--import"]);
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
            .lines()
            .filter(|l| !l.trim_start().starts_with("imported"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let t = cache();
    assert_eq!(text(t.path()), text(t.path()));
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn without_import_labels_only() {
    let c = cache();
    let doc = ok_json(c.path(), &["inspect", &oci("release"), "--json"]);
    assert_eq!(doc["os"]["imported"], false);
    assert_eq!(doc["bootimage-config"], Value::Null);
    // The kernel is read from the tree only (never the ostree.linux label).
    assert_eq!(doc["os"]["kernel"], Value::Null);
    assert_eq!(doc["os"]["version"], fx()["rhel_coreos"]["version"]);
    // Every OS tag found, as the MCO finds them; the default is rhel-9 for 4.x.
    let imgs: Vec<(&str, &str, bool)> = doc["os-images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["tag"].as_str().unwrap(),
                f["stream-class"].as_str().unwrap_or("-"),
                f["bootable"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        imgs,
        [
            ("rhel-coreos", "rhel-9", true),
            ("rhel-coreos-10", "rhel-10", true),
            ("machine-os-content", "-", true)
        ]
    );
    assert_eq!(doc["os"]["stream-class"], "rhel-9");
    let why = doc["os"]["chosen-because"].as_str().unwrap();
    assert!(why.contains("OCP 4.x is rhel-9"), "{why}");
}

/// OCP 5-style payload: rhel-coreos and rhel-coreos-10 node images with the
/// stream class label, their extensions images, `data.streams` for both.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn ocp5_dual_stream_payload() {
    let c = cache();
    let f = &fx()["release_ocp5"];
    let doc = ok_json(c.path(), &["inspect", &oci("release-ocp5"), "--json"]);
    assert_eq!(doc["release"]["version"], f["version"]);
    let imgs = doc["os-images"].as_array().unwrap();
    let row = |t: &str| {
        imgs.iter()
            .find(|x| x["tag"] == t)
            .unwrap_or_else(|| panic!("{t}: {imgs:?}"))
    };
    assert_eq!(imgs.len(), 4, "{imgs:?}");
    for (t, class, boots) in [
        ("rhel-coreos", "rhel-9", true),
        ("rhel-coreos-extensions", "rhel-9", false),
        ("rhel-coreos-10", "rhel-10", true),
        ("rhel-coreos-10-extensions", "rhel-10", false),
    ] {
        assert_eq!(row(t)["stream-class"], class, "{t}");
        assert_eq!(row(t)["bootable"], boots, "{t}");
    }
    assert_eq!(
        row("rhel-coreos-10")["stream-class-source"],
        "label io.openshift.os.streamclass"
    );
    assert_eq!(row("rhel-coreos-extensions")["kind"], "extensions");
    // The MCO's default from OCP 5: rhel-10; its stream's AMIs.
    assert_eq!(doc["os"]["tag"], "rhel-coreos-10");
    assert_eq!(doc["os"]["digest"], f["rhel10"]["digest"]);
    assert_eq!(doc["os"]["stream-class"], "rhel-10");
    let why = doc["os"]["chosen-because"].as_str().unwrap();
    assert!(why.contains("OCP 5.x is rhel-10"), "{why}");
    assert_eq!(doc["pinned-amis"][0]["image"], "ami-010f1e2d3c4b5a697");
    // No `version` label on node images: org.opencontainers.image.version.
    assert_eq!(doc["os"]["version"], f["rhel10"]["version"]);
    assert_eq!(doc["os"]["kernel"], Value::Null);
    // --os-stream takes a stream or a tag.
    for want in ["rhel-9", "rhel-coreos"] {
        let d = ok_json(
            c.path(),
            &[
                "inspect",
                &oci("release-ocp5"),
                "--os-stream",
                want,
                "--json",
            ],
        );
        assert_eq!(d["os"]["tag"], "rhel-coreos", "{want}");
        assert_eq!(d["os"]["digest"], f["rhel9"]["digest"], "{want}");
        assert_eq!(
            d["pinned-amis"][0]["image"], "ami-0f1e2d3c4b5a69788",
            "{want}"
        );
    }
    // The text form lists every OS image with its class and bootability.
    let o = run(c.path(), &["inspect", &oci("release-ocp5")]);
    let t = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        t.contains("rhel-coreos-10-extensions") && t.contains("not bootable: an extensions image"),
        "{t}"
    );
    assert!(t.contains("chosen because") && t.contains("rhel-10"), "{t}");
    // A stream the payload lacks, and an extensions tag: one line each.
    let e = expect_error(
        c.path(),
        &["inspect", &oci("release-ocp5"), "--os-stream", "rhel-11"],
        "no OS stream 'rhel-11'",
    );
    assert!(
        e.contains("rhel-coreos (stream rhel-9), rhel-coreos-10 (stream rhel-10)"),
        "{e}"
    );
    expect_error(
        c.path(),
        &[
            "inspect",
            &oci("release-ocp5"),
            "--os-stream",
            "rhel-coreos-extensions",
        ],
        "is not bootable: an extensions image",
    );
    // generate says which OS and why (the dry run needs no import).
    let outd = tempfile::tempdir().unwrap();
    let out = outd.path().join("out");
    let o = run(
        c.path(),
        &[
            "generate",
            &oci("release-ocp5"),
            "metal",
            "--dry-run",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("OS image: release tag rhel-coreos-10 (stream rhel-10): the MCO's default stream for OCP 5.x is rhel-10"),
        "{}",
        stderr(&o)
    );
    let plan: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plan["os"]["stream"], "rhel-10");
}

/// OKD: `stream-coreos` (and its extensions) only, `data.streams` keyed "".
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn okd_stream_coreos_payload() {
    let c = cache();
    let f = &fx()["release_okd"];
    let doc = ok_json(c.path(), &["inspect", &oci("release-okd"), "--json"]);
    assert_eq!(doc["os"]["tag"], "stream-coreos");
    assert_eq!(doc["os"]["digest"], f["os"]["digest"]);
    assert_eq!(doc["os"]["stream-class"], Value::Null);
    let why = doc["os"]["chosen-because"].as_str().unwrap();
    assert!(why.contains("only OS stream"), "{why}");
    let imgs = doc["os-images"].as_array().unwrap();
    assert_eq!(imgs.len(), 2, "{imgs:?}");
    assert_eq!(imgs[1]["tag"], "stream-coreos-extensions");
    assert_eq!(imgs[1]["bootable"], false);
    // The stream under key "" pins the AMIs.
    assert_eq!(doc["pinned-amis"].as_array().unwrap().len(), 2);
}

/// A payload whose OS tags hold no bootable image: the error lists what
/// was found and why each was skipped.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn payload_without_bootable_os() {
    let c = cache();
    let e = expect_error(
        c.path(),
        &["inspect", &oci("release-noos")],
        "has no bootable OS image",
    );
    assert!(
        e.contains("rhel-coreos-extensions (stream rhel-9): skipped, an extensions image"),
        "{e}"
    );
    assert!(
        e.contains("rhel-coreos (stream rhel-9): skipped, not an OS image"),
        "{e}"
    );
}

/// `data.streams` that is not JSON: one line naming the ConfigMap key.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn bootimages_streams_not_json() {
    let c = cache();
    let d = tempfile::tempdir().unwrap();
    let refs = refs_json("5.0.0-bad", &[]);
    let r = make_release(
        d.path(),
        &[
            ("release-manifests/image-references", &refs),
            (
                "release-manifests/0000_50_installer_coreos-bootimages.yaml",
                "apiVersion: v1\ndata:\n  stream: '{}'\n  streams: 'rhel-9: not json'\nkind: ConfigMap\n",
            ),
        ],
        None,
    );
    expect_error(
        c.path(),
        &["inspect", &r],
        "ConfigMap key data.streams is not a JSON object",
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn legacy_machine_os_content() {
    let c = cache();
    let doc = ok_json(
        c.path(),
        &["inspect", &oci("release-legacy"), "--import", "--json"],
    );
    let f = fx();
    assert_eq!(doc["release"]["version"], f["release_legacy"]["version"]);
    assert_eq!(doc["os"]["tag"], "machine-os-content");
    assert_eq!(doc["os"]["format"], "legacy");
    assert_eq!(doc["os"]["commit"], f["machine_os_content"]["commit"]);
    assert_eq!(doc["os"]["version"], f["machine_os_content"]["version"]);
    assert_eq!(doc["os"]["kernel"], f["kernel"]);
    // Configuration from /bootimage.json (size 12 there, 10 in image.json).
    assert_eq!(doc["bootimage-config"]["sources"][0], "/bootimage.json");
    assert_eq!(doc["bootimage-config"]["image"]["size"]["value"], 12);
    assert!(doc["bootimage-config"]["platforms"]["console"]["qemu"].is_object());
    // The full release also carries machine-os-content; pick it explicitly.
    let doc = ok_json(
        c.path(),
        &[
            "inspect",
            &oci("release"),
            "--os-stream",
            "machine-os-content",
            "--json",
        ],
    );
    assert_eq!(doc["os"]["format"], "legacy");
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn oci_archive_and_second_stream() {
    let c = cache();
    let ar = format!(
        "oci-archive:{}:release",
        fixture_dir().join("release.ociarchive").display()
    );
    let doc = ok_json(c.path(), &["inspect", &ar, "--import", "--json"]);
    check_native(&doc);
    let doc = ok_json(
        c.path(),
        &[
            "inspect",
            &ar,
            "--os-stream",
            "rhel-coreos-10",
            "--import",
            "--json",
        ],
    );
    assert_eq!(doc["os"]["tag"], "rhel-coreos-10");
    assert_eq!(doc["os"]["digest"], fx()["rhel_coreos_10"]["digest"]);
    assert_eq!(doc["os"]["version"], fx()["rhel_coreos_10"]["version"]);
    expect_error(
        c.path(),
        &["inspect", &ar, "--os-stream", "rhel-coreos-11"],
        "no OS stream 'rhel-coreos-11'",
    );
}

fn push_all(reg: &Registry, release_repo: &str, os_repo: &str) {
    reg.push(&oci("release"), &format!("{release_repo}:4.18.0-test"));
    reg.push(
        &oci("release-legacy"),
        &format!("{release_repo}:4.11.0-test"),
    );
    for t in ["rhel-coreos", "rhel-coreos-10", "machine-os-content"] {
        reg.push(&oci(t), &format!("{os_repo}:{t}"));
    }
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn registry_plain_http() {
    let reg = Registry::start(false);
    // As `oc adm release mirror` leaves it: components in the release's repository.
    push_all(&reg, "ocp/release", "ocp/release");
    let c = cache();
    let rel = format!("{}/ocp/release:4.18.0-test", reg.host());
    let doc = ok_json(
        c.path(),
        &["inspect", &rel, "--insecure", "--import", "--json"],
    );
    check_native(&doc);
    assert!(doc["os"]["source"]
        .as_str()
        .unwrap()
        .starts_with(&format!("docker://{}/ocp/release@sha256:", reg.host())));
    let doc = ok_json(
        c.path(),
        &[
            "inspect",
            &format!("docker://{}/ocp/release:4.11.0-test", reg.host()),
            "--insecure",
            "--import",
            "--json",
        ],
    );
    assert_eq!(doc["os"]["format"], "legacy");
    // By digest too.
    let by_digest = format!(
        "{}/ocp/release@{}",
        reg.host(),
        fx()["release"]["digest"].as_str().unwrap()
    );
    let doc = ok_json(c.path(), &["inspect", &by_digest, "--insecure", "--json"]);
    assert_eq!(doc["release"]["digest"], fx()["release"]["digest"]);
    // Plain HTTP is refused unless asked.
    expect_error(c.path(), &["inspect", &rel], "--insecure");
    // A tag that does not exist.
    expect_error(
        c.path(),
        &[
            "inspect",
            &format!("{}/ocp/release:9.9.9", reg.host()),
            "--insecure",
        ],
        "not found",
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn registry_tls_and_auth() {
    let reg = Registry::start(true);
    push_all(&reg, "ocp/release", "ocp/release");
    let c = cache();
    let rel = format!("docker://{}/ocp/release:4.18.0-test", reg.host());
    let cert = reg.cert_dir();
    let cert = cert.to_str().unwrap();
    let good = reg.auth_file("s3cret");
    let doc = ok_json(
        c.path(),
        &[
            "inspect",
            &rel,
            "--cert-dir",
            cert,
            "--registry-config",
            good.to_str().unwrap(),
            "--import",
            "--json",
        ],
    );
    check_native(&doc);
    // REGISTRY_AUTH_FILE works the same.
    let o = Command::new(env!("CARGO_BIN_EXE_bootimage-gen"))
        .args(["inspect", &rel, "--cert-dir", cert])
        .env("BOOTIMAGE_GEN_CACHE_DIR", c.path())
        .env("HOME", c.path())
        .env("REGISTRY_AUTH_FILE", &good)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // No credentials, wrong credentials, untrusted CA.
    expect_error(
        c.path(),
        &["inspect", &rel, "--cert-dir", cert],
        "requires authentication",
    );
    let bad = reg.auth_file("wrong");
    expect_error(
        c.path(),
        &[
            "inspect",
            &rel,
            "--cert-dir",
            cert,
            "--registry-config",
            bad.to_str().unwrap(),
        ],
        "rejected the credentials",
    );
    expect_error(
        c.path(),
        &["inspect", &rel, "--registry-config", good.to_str().unwrap()],
        "not trusted",
    );
    // A registry config that is not JSON.
    let junk = c.path().join("junk.json");
    std::fs::write(&junk, "not json").unwrap();
    expect_error(
        c.path(),
        &["inspect", &rel, "--registry-config", junk.to_str().unwrap()],
        "not valid JSON",
    );
}

fn write_idms(dir: &Path, mirror: &str) -> PathBuf {
    let p = dir.join("idms.yaml");
    std::fs::write(
        &p,
        format!(
            "apiVersion: config.openshift.io/v1\nkind: ImageDigestMirrorSet\nmetadata:\n  name: test\nspec:\n  imageDigestMirrors:\n  - source: {}\n    mirrors:\n    - {mirror}\n",
            fx()["art_repo"].as_str().unwrap()
        ),
    )
    .unwrap();
    p
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn registry_idms_mirror_and_docker_archive() {
    let reg = Registry::start(false);
    // Release alone in one repository, OS images only in a mirror repository.
    reg.push(&oci("release"), "ocp/release:4.18.0-test");
    for t in ["rhel-coreos", "rhel-coreos-10", "machine-os-content"] {
        reg.push(&oci(t), &format!("mirror/art-dev:{t}"));
    }
    let c = cache();
    let rel = format!("{}/ocp/release:4.18.0-test", reg.host());
    // Without the IDMS the OS cannot be found: the error lists where it looked.
    expect_error(
        c.path(),
        &["inspect", &rel, "--insecure"],
        "was not found; tried",
    );
    let idms = write_idms(c.path(), &format!("{}/mirror/art-dev", reg.host()));
    let doc = ok_json(
        c.path(),
        &[
            "inspect",
            &rel,
            "--insecure",
            "--idms-file",
            idms.to_str().unwrap(),
            "--import",
            "--json",
        ],
    );
    check_native(&doc);
    assert!(doc["os"]["source"]
        .as_str()
        .unwrap()
        .starts_with(&format!("docker://{}/mirror/art-dev@", reg.host())));
    // docker-archive release + IDMS mirror for its components.
    let da = format!(
        "docker-archive:{}",
        fixture_dir().join("release.dockerarchive").display()
    );
    let doc = ok_json(
        c.path(),
        &[
            "inspect",
            &da,
            "--insecure",
            "--idms-file",
            idms.to_str().unwrap(),
            "--import",
            "--json",
        ],
    );
    assert_eq!(doc["release"]["version"], "4.18.0-test");
    assert_eq!(doc["os"]["digest"], fx()["rhel_coreos"]["digest"]);
    // A malformed IDMS file.
    let bad = c.path().join("bad.yaml");
    std::fs::write(&bad, "kind: ConfigMap\n").unwrap();
    expect_error(
        c.path(),
        &["inspect", &rel, "--idms-file", bad.to_str().unwrap()],
        "ImageDigestMirrorSet",
    );
}

// ---- bad input -------------------------------------------------------------

/// A layout in a temp dir holding one "release" image made from `files`.
fn make_release(dir: &Path, files: &[(&str, &str)], extra_layout: Option<&Path>) -> String {
    let layout = extra_layout
        .map(Path::to_path_buf)
        .unwrap_or_else(|| dir.join("oci"));
    let ld = dir.join("release-layer");
    for (p, content) in files {
        let f = ld.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, content).unwrap();
    }
    must(fixture_tool().args([
        "add-image",
        "--layout",
        layout.to_str().unwrap(),
        "--tag",
        "release",
        "--layer-dir",
        ld.to_str().unwrap(),
    ]));
    std::fs::remove_dir_all(&ld).unwrap();
    format!("oci:{}:release", layout.display())
}

fn refs_json(version: &str, tags: &[(&str, &str)]) -> String {
    let tags: Vec<Value> = tags
        .iter()
        .map(|(n, r)| serde_json::json!({"name": n, "from": {"kind": "DockerImage", "name": r}}))
        .collect();
    serde_json::json!({"kind": "ImageStream", "apiVersion": "image.openshift.io/v1", "metadata": {"name": version}, "spec": {"tags": tags}}).to_string()
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn bad_references() {
    let c = cache();
    expect_error(c.path(), &["inspect", &oci("no-such-tag")], "not found");
    expect_error(
        c.path(),
        &["inspect", "oci:/nonexistent/layout:release"],
        "does not exist",
    );
    expect_error(
        c.path(),
        &["inspect", "oci-archive:/nonexistent.tar"],
        "does not exist",
    );
    expect_error(
        c.path(),
        &["inspect", "quay.io/UPPER/case:1"],
        "not a valid repository name",
    );
    expect_error(
        c.path(),
        &[
            "inspect",
            &format!("oci:{}", fixture_dir().join("oci").display()),
        ],
        "name one with",
    );
    let port = free_port();
    expect_error(
        c.path(),
        &["inspect", &format!("127.0.0.1:{port}/ocp/release:4.18")],
        "not reachable",
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn not_a_release() {
    let c = cache();
    // The OS image itself has no release-manifests/.
    expect_error(
        c.path(),
        &["inspect", &oci("rhel-coreos")],
        "not a release image",
    );
    let d = tempfile::tempdir().unwrap();
    let r = make_release(
        d.path(),
        &[(
            "release-manifests/image-references",
            r#"{"kind":"ConfigMap","metadata":{"name":"x"}}"#,
        )],
        None,
    );
    expect_error(c.path(), &["inspect", &r], "kind 'ConfigMap'");
    let d = tempfile::tempdir().unwrap();
    let r = make_release(
        d.path(),
        &[("release-manifests/image-references", "{not json")],
        None,
    );
    expect_error(c.path(), &["inspect", &r], "not valid JSON");
    let d = tempfile::tempdir().unwrap();
    let r = make_release(d.path(), &[("release-manifests/image-references", &refs_json("4.99.0", &[("cli", "quay.io/a/b@sha256:0000000000000000000000000000000000000000000000000000000000000000")]))], None);
    expect_error(c.path(), &["inspect", &r], "has no OS image");
}

/// An ostree commit of a tiny tree, in an archive repo at `repo`.
fn commit_tree(repo: &Path, tree: &Path) -> String {
    let run = |args: &[&str]| must(Command::new("ostree").args(args));
    run(&[
        "init",
        &format!("--repo={}", repo.display()),
        "--mode=archive",
    ]);
    run(&[
        "commit",
        &format!("--repo={}", repo.display()),
        "--orphan",
        &format!("--tree=dir={}", tree.display()),
        "--add-metadata-string=version=1.0",
    ])
}

/// A release (in a fresh layout) whose OS is a legacy image made from `layer_tar` or `layer_dir`.
fn release_with_legacy_os(d: &Path, layer: (&str, &Path), commit: &str) -> String {
    let layout = d.join("oci");
    let digest = must(fixture_tool().args([
        "add-image",
        "--layout",
        layout.to_str().unwrap(),
        "--tag",
        "os",
        layer.0,
        layer.1.to_str().unwrap(),
        "--label",
        &format!("com.coreos.ostree-commit={commit}"),
    ]));
    let refs = refs_json(
        "4.99.0",
        &[("machine-os-content", &format!("quay.io/x/art@{digest}"))],
    );
    make_release(
        d,
        &[("release-manifests/image-references", &refs)],
        Some(&layout),
    )
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn os_without_kernel() {
    let c = cache();
    let d = tempfile::tempdir().unwrap();
    let tree = d.path().join("tree");
    std::fs::create_dir_all(tree.join("usr/lib")).unwrap();
    std::fs::write(tree.join("usr/lib/os-release"), "ID=nokernel\n").unwrap();
    let ld = d.path().join("layer");
    std::fs::create_dir_all(ld.join("srv")).unwrap();
    let commit = commit_tree(&ld.join("srv/repo"), &tree);
    let r = release_with_legacy_os(d.path(), ("--layer-dir", &ld), &commit);
    expect_error(c.path(), &["inspect", &r, "--import"], "/usr/lib/modules");
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn legacy_label_without_commit() {
    let c = cache();
    let d = tempfile::tempdir().unwrap();
    let tree = d.path().join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    let ld = d.path().join("layer");
    std::fs::create_dir_all(ld.join("srv")).unwrap();
    commit_tree(&ld.join("srv/repo"), &tree);
    let r = release_with_legacy_os(d.path(), ("--layer-dir", &ld), &"ab".repeat(32));
    expect_error(
        c.path(),
        &["inspect", &r, "--import"],
        "does not contain that commit",
    );
}

use bootimage_gen::image::layers::{raw_tar, RawEntry as Entry};

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn unsafe_layers_are_rejected() {
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("pwned");
    let up = format!(
        "srv/{}{}",
        "../".repeat(12),
        target.display().to_string().trim_start_matches('/')
    );
    let cases: Vec<(Vec<Entry>, &str)> = vec![
        (vec![(up.as_str(), tar::EntryType::Regular, "x")], "'..'"),
        (
            vec![(target.to_str().unwrap(), tar::EntryType::Regular, "x")],
            "absolute path",
        ),
        (
            vec![
                (
                    "srv/repo/link",
                    tar::EntryType::Symlink,
                    outside.path().to_str().unwrap(),
                ),
                ("srv/repo/link/pwned", tar::EntryType::Regular, "x"),
            ],
            "outside the extraction root",
        ),
        (
            vec![
                (
                    "srv/repo/rel",
                    tar::EntryType::Symlink,
                    "../../../../../../../../..",
                ),
                ("srv/repo/rel/pwned", tar::EntryType::Regular, "x"),
            ],
            "outside the extraction root",
        ),
    ];
    for (entries, needle) in cases {
        let c = cache();
        let d = tempfile::tempdir().unwrap();
        let tarf = d.path().join("layer.tar");
        std::fs::write(&tarf, raw_tar(&entries)).unwrap();
        let r = release_with_legacy_os(d.path(), ("--layer-tar", &tarf), &"cd".repeat(32));
        expect_error(c.path(), &["inspect", &r, "--import"], needle);
        assert!(
            !target.exists(),
            "a file was written outside the extraction root"
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}

fn copy_layout(dst: &Path) -> PathBuf {
    let l = dst.join("oci");
    let st = Command::new("cp")
        .args([
            "-a",
            fixture_dir().join("oci").to_str().unwrap(),
            l.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(st.success());
    l
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn corrupt_blob_is_detected() {
    let c = cache();
    let d = tempfile::tempdir().unwrap();
    let l = copy_layout(d.path());
    let mdig = fx()["release"]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:")
        .to_string();
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(l.join("blobs/sha256").join(&mdig)).unwrap())
            .unwrap();
    let layer = manifest["layers"].as_array().unwrap().last().unwrap()["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:")
        .to_string();
    let p = l.join("blobs/sha256").join(layer);
    let mut b = std::fs::read(&p).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0xff;
    std::fs::write(&p, b).unwrap();
    expect_error(
        c.path(),
        &["inspect", &format!("oci:{}:release", l.display())],
        "corrupt",
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn truncated_oci_archive() {
    let c = cache();
    let d = tempfile::tempdir().unwrap();
    let src = std::fs::read(fixture_dir().join("release.ociarchive")).unwrap();
    let t = d.path().join("trunc.ociarchive");
    std::fs::write(&t, &src[..src.len() / 3]).unwrap();
    expect_error(
        c.path(),
        &["inspect", &format!("oci-archive:{}:release", t.display())],
        "truncated",
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn platforms_lists_the_table() {
    let c = cache();
    let o = run(c.path(), &["platforms"]);
    assert!(o.status.success());
    let out = stdout(&o);
    let v = ok_json(c.path(), &["platforms", "--json"]);
    let rows = v.as_array().unwrap();
    // RHCOS's x86_64 platforms, cosa's others and live: each in the text
    // table and in the JSON, once.
    for p in [
        "metal",
        "metal4k",
        "qemu",
        "openstack",
        "aws",
        "vmware",
        "azure",
        "gcp",
        "azurestack",
        "ibmcloud",
        "kubevirt",
        "nutanix",
        "oraclecloud",
        "hyperv",
        "virtualbox",
        "live",
    ] {
        assert!(
            out.lines().any(|l| l.split_whitespace().next() == Some(p)),
            "{p} missing:\n{out}"
        );
        assert_eq!(
            rows.iter().filter(|r| r["name"] == p).count(),
            1,
            "{p} in --json"
        );
    }
    // One text row per JSON row (the table's rows start with a name).
    let text_rows = out
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .count();
    assert_eq!(text_rows, rows.len(), "{out}");
    let qemu = rows.iter().find(|r| r["name"] == "qemu").unwrap();
    assert_eq!(qemu["ignition_id"], "qemu");
    assert_eq!(
        rows.iter().find(|r| r["name"] == "live").unwrap()["ignition_id"],
        "metal"
    );
}
