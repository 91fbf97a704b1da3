//! Bootimages into and out of a registry (issue 31; privileged tier: the
//! fixture release). Against Debian's docker-registry (distribution 2.8)
//! on 127.0.0.1 with TLS and htpasswd: `push` of a `generate` output,
//! read back by skopeo (media types, configs, the index's platforms) and
//! pulled by skopeo as the ordinary image KubeVirt boots (the
//! containerDisk); `pull` rebuilds the directory (sha256sum -c, the
//! coreos-stream-metadata crate reads stream.json with every location
//! under --base-url); pushes racing into one tag; a pull through a proxy
//! that resets connections; and each bad input's one line.
mod common;
use common::faults::{Fault, FaultProxy};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

struct Built {
    out: PathBuf,
    meta: Value,
}

/// One x86_64 `generate metal kubevirt live`, shared by the tests.
fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let root = scratch("registry");
        let _ = std::fs::remove_dir_all(&root);
        let (out, meta, _) =
            generate_logged(&root, &[&oci("release"), "metal", "kubevirt", "live"]);
        Built { out, meta }
    })
}

fn tool(args: &[&str], env: &[(&str, &str)]) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_bootimage-gen"))
        .args(args)
        .env("HOME", home.path())
        .env_remove("REGISTRY_AUTH_FILE")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// The registry's TLS and credential flags for our tool.
fn flags(reg: &Registry, password: &str) -> Vec<String> {
    vec![
        "--authfile".into(),
        reg.auth_file(password).display().to_string(),
        "--ca-file".into(),
        reg.cert_dir().join("ca.crt").display().to_string(),
    ]
}

fn push(reg: &Registry, dir: &Path, tag: &str, extra: &[&str]) -> Output {
    let r = format!("{}/ocp/bootimages:{tag}", reg.host());
    let f = flags(reg, "s3cret");
    let mut a: Vec<&str> = vec!["push", dir.to_str().unwrap(), &r];
    a.extend(f.iter().map(String::as_str));
    a.extend(extra);
    tool(&a, &[])
}

fn pull(reg: &Registry, reference: &str, out: &Path, extra: &[&str]) -> Output {
    let f = flags(reg, "s3cret");
    let mut a: Vec<&str> = vec!["pull", reference, "-o", out.to_str().unwrap()];
    a.extend(f.iter().map(String::as_str));
    a.extend(extra);
    tool(&a, &[])
}

fn skopeo_raw(reg: &Registry, reference: &str, config: bool) -> Value {
    let mut c = Command::new("skopeo");
    c.arg("inspect");
    if config {
        c.arg("--config");
    }
    c.arg("--raw")
        .arg(format!("--cert-dir={}", reg.cert_dir().display()))
        .arg("--creds=tester:s3cret")
        .arg(format!("docker://{}/{reference}", reg.host()));
    serde_json::from_str(&must(&mut c)).unwrap()
}

#[test]
fn push_then_pull_round_trip_read_by_skopeo_and_stream_metadata() {
    let b = built();
    let reg = Registry::start(true);
    let o = push(&reg, &b.out, "4.18.0", &["--chunk-mib", "8"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let printed = stdout(&o);
    assert!(
        printed.contains("/ocp/bootimages:4.18.0@sha256:"),
        "{printed}"
    );
    // The index: every entry with its platform and an artifact type.
    let idx = skopeo_raw(&reg, "ocp/bootimages:4.18.0", false);
    assert_eq!(idx["mediaType"], "application/vnd.oci.image.index.v1+json");
    let entries = idx["manifests"].as_array().unwrap();
    let images = b.meta["images"].as_object().unwrap();
    assert_eq!(entries.len(), images.len() + 2, "{idx:#}");
    for e in entries {
        assert_eq!(e["platform"]["architecture"], "amd64", "{e}");
        assert_eq!(e["platform"]["os"], "linux", "{e}");
        let t = e["artifactType"].as_str().unwrap();
        assert!(
            t.starts_with("application/vnd.diskimage.") || t.contains("+json"),
            "{t}"
        );
    }
    let of = |p: &str| {
        entries
            .iter()
            .find(|e| e["annotations"]["io.bootimage-gen.platform"] == p)
            .unwrap_or_else(|| panic!("no {p} entry"))
    };
    assert_eq!(
        of("metal")["artifactType"],
        "application/vnd.diskimage.raw.gzip"
    );
    assert_eq!(
        of("live-iso")["artifactType"],
        "application/vnd.diskimage.iso"
    );
    // An artifact: a real config (architecture, os), the file as its layer.
    let d = of("metal")["digest"].as_str().unwrap().to_string();
    let m = skopeo_raw(&reg, &format!("ocp/bootimages@{d}"), false);
    assert_eq!(
        m["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    let layer = &m["layers"][0];
    assert_eq!(
        layer["annotations"]["org.opencontainers.image.title"],
        images["metal"]["path"]
    );
    assert_eq!(
        layer["digest"],
        format!("sha256:{}", images["metal"]["sha256"].as_str().unwrap())
    );
    let cfg = skopeo_raw(&reg, &format!("ocp/bootimages@{d}"), true);
    assert_eq!(
        (cfg["architecture"].as_str(), cfg["os"].as_str()),
        (Some("amd64"), Some("linux"))
    );
    // The containerDisk as the ordinary image KubeVirt pulls: skopeo copies
    // it, and its layer holds the disk.
    let image = of("kubevirt")["annotations"]["io.bootimage-gen.image"]
        .as_str()
        .unwrap()
        .to_string();
    let od = tempfile::tempdir().unwrap();
    must(
        Command::new("skopeo")
            .arg("copy")
            .arg("--quiet")
            .arg(format!("--src-cert-dir={}", reg.cert_dir().display()))
            .arg("--src-creds=tester:s3cret")
            .arg(format!("docker://{image}"))
            .arg(format!("oci:{}:disk", od.path().display())),
    );
    // Pushed again: nothing is sent twice.
    let o2 = push(&reg, &b.out, "4.18.0", &[]);
    assert!(o2.status.success(), "{}", stderr(&o2));
    assert!(stderr(&o2).contains(": 0 MiB sent"), "{}", stderr(&o2));
    // Pull back, with a base URL.
    let back = tempfile::tempdir().unwrap();
    let o = pull(
        &reg,
        &format!("{}/ocp/bootimages:4.18.0", reg.host()),
        back.path(),
        &["--base-url", "http://mirror.example/rhcos/"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    sh_ok("sha256sum -c --quiet SHA256SUMS", back.path());
    for (k, img) in images {
        let f = img["path"].as_str().unwrap();
        assert_eq!(
            sha256_file(&back.path().join(f)),
            img["sha256"].as_str().unwrap(),
            "{k}: not byte-identical"
        );
    }
    assert_eq!(
        read(&back.path().join("meta.json")),
        read(&b.out.join("meta.json"))
    );
    let s: coreos_stream_metadata::Stream =
        serde_json::from_slice(&read(&back.path().join("stream.json"))).unwrap();
    let a = &s.architectures["x86_64"];
    let mut seen = 0;
    for (p, art) in &a.artifacts {
        for (fmt, files) in &art.formats {
            for (kind, f) in files {
                let loc = &f.location;
                let name = loc
                    .strip_prefix("http://mirror.example/rhcos/")
                    .unwrap_or_else(|| panic!("{p} {fmt} {kind}: {loc}"));
                assert!(back.path().join(name).is_file(), "{loc}");
                seen += 1;
            }
        }
    }
    assert!(seen >= 5, "{seen}");
    // One platform only: meta.json and stream.json narrowed to it.
    let one = tempfile::tempdir().unwrap();
    let o = pull(
        &reg,
        &format!("{}/ocp/bootimages:4.18.0", reg.host()),
        one.path(),
        &["--platform", "metal", "--arch", "amd64"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let m: Value = serde_json::from_slice(&read(&one.path().join("meta.json"))).unwrap();
    let keys: Vec<&String> = m["images"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["metal"]);
    sh_ok("sha256sum -c --quiet SHA256SUMS", one.path());
}

fn sh_ok(script: &str, dir: &Path) {
    let o = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{script}: {}{}", stdout(&o), stderr(&o));
}

/// Two pushes into one tag at the same time (eight rounds): the index
/// always holds both (a stream each).
#[test]
fn racing_pushes_into_one_tag_both_land() {
    let b = built();
    let reg = Registry::start(true);
    // Blobs in the registry first, so each round is the index race alone.
    let o = push(&reg, &b.out, "warm", &["--stream", "warm"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for round in 0..8 {
        let tag = format!("race{round}");
        let (r1, r2) = std::thread::scope(|s| {
            let a = s.spawn(|| push(&reg, &b.out, &tag, &["--stream", "left"]));
            let c = s.spawn(|| push(&reg, &b.out, &tag, &["--stream", "right"]));
            (a.join().unwrap(), c.join().unwrap())
        });
        assert!(
            r1.status.success() && r2.status.success(),
            "{}\n{}",
            stderr(&r1),
            stderr(&r2)
        );
        let idx = skopeo_raw(&reg, &format!("ocp/bootimages:{tag}"), false);
        let streams: std::collections::BTreeSet<&str> = idx["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                e["annotations"]["io.bootimage-gen.stream"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        assert_eq!(
            streams.into_iter().collect::<Vec<_>>(),
            ["left", "right"],
            "round {round}"
        );
    }
}

/// A push killed at moments spread over its run, then run again: it
/// completes, and the index holds each entry once.
#[test]
fn a_killed_push_completes_when_run_again() {
    let b = built();
    let reg = Registry::start(true);
    let want = b.meta["images"].as_object().unwrap().len() + 2;
    let r = format!("{}/ocp/bootimages:killed", reg.host());
    let f = flags(&reg, "s3cret");
    for (i, ms) in [150u64, 700, 2000].into_iter().enumerate() {
        // Each round in a repository of its own, so the kill lands in the
        // uploads and not only in blobs the registry already has.
        let r = r.replace("bootimages", &format!("killed{i}"));
        let home = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_bootimage-gen"))
            .args(["push", b.out.to_str().unwrap(), &r, "--chunk-mib", "4"])
            .args(&f)
            .env("HOME", home.path())
            .env_remove("REGISTRY_AUTH_FILE")
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(ms));
        let _ = child.kill();
        child.wait().unwrap();
        let mut a: Vec<&str> = vec!["push", b.out.to_str().unwrap(), &r];
        a.extend(f.iter().map(String::as_str));
        let o = tool(&a, &[]);
        assert!(
            o.status.success(),
            "rerun after a kill at {ms} ms: {}",
            stderr(&o)
        );
        let idx = skopeo_raw(&reg, &format!("ocp/killed{i}:killed"), false);
        let n = idx["manifests"].as_array().unwrap().len();
        assert_eq!(n, want, "kill at {ms} ms: {idx:#}");
        let err = stderr(&o);
        let said = err.lines().find(|l| l.contains("pushed ")).unwrap_or("");
        eprintln!("killed at {ms} ms, rerun: {said}");
    }
}

/// A pull through a proxy that resets the connection mid-blob twice: the
/// blob is fetched again and the file is whole. Then each bad input: one
/// line, exit 1, nothing kept under a final name.
#[test]
fn pull_recovers_from_resets_and_bad_inputs_say_one_line() {
    let b = built();
    let reg = Registry::start(true);
    let o = push(&reg, &b.out, "t", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let metal = b.meta["images"]["metal"].clone();
    let digest = format!("sha256:{}", metal["sha256"].as_str().unwrap());
    // Resets (plain HTTP between us and the proxy: --insecure).
    let plain = Registry::start(false);
    let o = tool(
        &[
            "push",
            b.out.to_str().unwrap(),
            &format!("{}/ocp/bootimages:t", plain.host()),
            "--insecure",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let proxy = FaultProxy::start(plain.port, &digest, Fault::ResetMidBlob, 2);
    let out = tempfile::tempdir().unwrap();
    let o = tool(
        &[
            "pull",
            &format!("{}/ocp/bootimages:t", proxy.host()),
            "-o",
            out.path().to_str().unwrap(),
            "--platform",
            "metal",
            "--insecure",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(proxy.hits.lock().unwrap().iter().filter(|h| h.1).count(), 2);
    sh_ok("sha256sum -c --quiet SHA256SUMS", out.path());
    drop(proxy);

    let r = format!("{}/ocp/bootimages:t", reg.host());
    let dir = b.out.to_str().unwrap();
    let ca = reg.cert_dir().join("ca.crt").display().to_string();
    // Refused credentials: the file is named.
    let bad = reg.auth_file("wrong");
    let e = one_error(
        &tool(
            &[
                "push",
                dir,
                &r,
                "--authfile",
                bad.to_str().unwrap(),
                "--ca-file",
                &ca,
            ],
            &[],
        ),
        "refused the credentials of tester",
    );
    assert!(e.contains(bad.to_str().unwrap()), "{e}");
    // No credentials at all.
    one_error(
        &tool(&["push", dir, &r, "--ca-file", &ca], &[]),
        "wants credentials",
    );
    // An unknown CA: said, with the fix.
    one_error(
        &tool(
            &[
                "push",
                dir,
                &r,
                "--authfile",
                reg.auth_file("s3cret").to_str().unwrap(),
            ],
            &[],
        ),
        "--ca-file",
    );
    // Nothing listening.
    let gone = format!("127.0.0.1:{}/ocp/x:t", free_port());
    let e = one_error(&tool(&["push", dir, &gone], &[]), "onnection refused");
    assert!(e.contains("is it running"), "{e}");
    // A tag that holds something else.
    reg.push(&oci("release"), "ocp/bootimages:not-ours");
    one_error(
        &push(&reg, &b.out, "not-ours", &[]),
        "not an index made by bootimage-gen",
    );
    // An arch that is not there: the present ones are listed.
    let out = tempfile::tempdir().unwrap();
    let e = one_error(
        &pull(&reg, &r, out.path(), &["--arch", "s390x"]),
        "holds no s390x",
    );
    assert!(e.contains("x86_64/"), "{e}");
    // Not a generate output.
    one_error(&push(&reg, out.path(), "t", &[]), "no meta.json");
    // A blob that does not match its digest: named, nothing kept.
    let hex = metal["sha256"].as_str().unwrap();
    let data = reg.dir.path().join(format!(
        "storage/docker/registry/v2/blobs/sha256/{}/{hex}/data",
        &hex[..2]
    ));
    let mut bytes = std::fs::read(&data).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&data, bytes).unwrap();
    let out = tempfile::tempdir().unwrap();
    let e = one_error(
        &pull(&reg, &r, out.path(), &["--platform", "metal"]),
        &digest,
    );
    assert!(e.contains("nothing kept"), "{e}");
    let left: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("metal"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
