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

/// One x86_64 `generate metal kubevirt live`, shared by the tests.
fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    built_once(
        &B,
        "registry",
        &[&oci("release"), "metal", "kubevirt", "live"],
        false,
    )
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
    // The real ORAS CLI pulls every entry back (each file, meta.json and
    // stream.json), byte-identical.
    let mut written: std::collections::BTreeMap<String, (String, PathBuf)> = images
        .values()
        .map(|i| {
            let f = i["path"].as_str().unwrap().to_string();
            (
                f.clone(),
                (i["sha256"].as_str().unwrap().to_string(), b.out.join(&f)),
            )
        })
        .collect();
    for doc in ["meta.json", "stream.json"] {
        let p = b.out.join(doc);
        written.insert(doc.into(), (sha256_file(&p), p));
    }
    let od2 = tempfile::tempdir().unwrap();
    let n = oras_pulls_each_back(&reg, entries, &written, od2.path(), |_| true);
    assert_eq!(n, entries.len());
    assert_eq!(n, written.len());
    eprintln!("oras pulled {n} artifacts back, each byte-identical");
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

/// Issue 31's fan-out as a CI matrix runs it: `generate --push` on two
/// "machines" at once into one REF, the -multi payload's x86_64 and
/// aarch64, with the registry's CA given as generate's own `--cert-dir`
/// and its credentials as `--registry-config`. The index holds both arches'
/// parts (one stream) with their platforms; the real ORAS CLI (Debian
/// forky's, tests/tools/oras.sh) pulls every artifact back byte-identical to
/// the file generate wrote; `pull` lays out `<arch>/` and writes one
/// stream.json with both arches, which coreos-stream-metadata reads with
/// every location under --base-url and its file present. (Both streams of
/// one payload into one REF: tests/container.rs's Tekton simulation.)
#[test]
fn generate_push_of_two_arches_into_one_ref_oras_reads_each_back() {
    let reg = Registry::start(true);
    let root = scratch("registry-fanout");
    let _ = std::fs::remove_dir_all(&root);
    let r = format!("{}/ocp/bootimages:4.18", reg.host());
    let auth = reg.auth_file("s3cret").display().to_string();
    let certs = reg.cert_dir().display().to_string();
    let multi = oci("release-multi");
    let gen = |arch: &str| {
        let out = root.join(arch);
        let o = out.display().to_string();
        let t = std::time::Instant::now();
        let res = run(
            &root.join(format!("cache-{arch}")),
            &[
                "generate",
                &multi,
                "metal",
                "--arch",
                arch,
                "--compress",
                "zstd",
                "--no-ostree-archive",
                "--push",
                &r,
                "--registry-config",
                &auth,
                "--cert-dir",
                &certs,
                "-o",
                &o,
            ],
        );
        eprintln!("{arch}: generate --push in {:.1?}", t.elapsed());
        (out, res)
    };
    let ((x86, o1), (arm, o2)) = std::thread::scope(|s| {
        let a = s.spawn(|| gen("x86_64"));
        let b = s.spawn(|| gen("aarch64"));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(o1.status.success(), "{}", stderr(&o1));
    assert!(o2.status.success(), "{}", stderr(&o2));
    // Every file generate wrote, by name: (its sha256, the file).
    let mut written: std::collections::BTreeMap<String, (String, PathBuf)> = Default::default();
    for dir in [&x86, &arm] {
        let meta: Value = serde_json::from_slice(&read(&dir.join("meta.json"))).unwrap();
        for img in meta["images"].as_object().unwrap().values() {
            let f = img["path"].as_str().unwrap().to_string();
            written.insert(
                f.clone(),
                (img["sha256"].as_str().unwrap().into(), dir.join(&f)),
            );
        }
    }
    assert_eq!(written.len(), 2, "{written:?}");
    let idx = skopeo_raw(&reg, "ocp/bootimages:4.18", false);
    let entries = idx["manifests"].as_array().unwrap();
    let mut parts = std::collections::BTreeSet::new();
    for e in entries {
        let a = &e["annotations"];
        let arch = a["io.bootimage-gen.arch"].as_str().unwrap();
        let goarch = if arch == "aarch64" { "arm64" } else { "amd64" };
        assert_eq!(e["platform"]["architecture"], goarch, "{e}");
        parts.insert((
            arch.to_string(),
            a["io.bootimage-gen.stream"].as_str().unwrap().to_string(),
        ));
    }
    let arches: Vec<&str> = parts.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(arches, ["aarch64", "x86_64"], "{idx:#}");
    let streams: std::collections::BTreeSet<&str> = parts.iter().map(|p| p.1.as_str()).collect();
    assert_eq!(
        streams.len(),
        1,
        "one OS stream key for both arches: {parts:?}"
    );
    // The real ORAS CLI: every artifact back, byte for byte.
    let skip_docs = |e: &Value| {
        matches!(
            e["annotations"]["io.bootimage-gen.platform"].as_str(),
            Some(p) if p != "meta" && p != "stream"
        )
    };
    let checked = oras_pulls_each_back(&reg, entries, &written, &root, skip_docs);
    assert_eq!(
        checked,
        written.len(),
        "every file generate wrote, pulled by oras"
    );
    // pull: <arch>/, and one stream.json with both arches.
    let back = root.join("back");
    let o = pull(
        &reg,
        &r,
        &back,
        &["--base-url", "http://mirror.example/rhcos/"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let s: coreos_stream_metadata::Stream =
        serde_json::from_slice(&read(&back.join("stream.json"))).unwrap();
    let mut got: Vec<&str> = s.architectures.keys().map(String::as_str).collect();
    got.sort_unstable();
    assert_eq!(got, ["aarch64", "x86_64"]);
    let mut located = 0;
    for (arch, a) in &s.architectures {
        for p in a.artifacts.values() {
            for f in p.formats.values() {
                for art in f.values() {
                    let rel = art
                        .location
                        .strip_prefix("http://mirror.example/rhcos/")
                        .unwrap_or_else(|| panic!("{}", art.location));
                    assert!(rel.starts_with(&format!("{arch}/")), "{rel}");
                    assert!(back.join(rel).is_file(), "{rel}");
                    located += 1;
                }
            }
        }
        sh_ok("sha256sum -c --quiet SHA256SUMS", &back.join(arch));
    }
    assert_eq!(located, 2);
}

/// The real ORAS CLI (Debian forky's, tests/tools/oras.sh) pulls each
/// index entry `want` picks into a directory of its own; the one file it
/// writes must be named as a file of `written` (name: its sha256 and the
/// file generate wrote) and be byte-identical to it. How many it checked.
fn oras_pulls_each_back(
    reg: &Registry,
    entries: &[Value],
    written: &std::collections::BTreeMap<String, (String, PathBuf)>,
    scratch_dir: &Path,
    want: impl Fn(&Value) -> bool,
) -> usize {
    let oras = must(&mut Command::new(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/oras.sh"),
    ));
    let ca = reg.cert_dir().join("ca.crt").display().to_string();
    let mut checked = 0;
    for (i, e) in entries.iter().enumerate().filter(|(_, e)| want(e)) {
        let into = scratch_dir.join(format!("oras/{i}"));
        std::fs::create_dir_all(&into).unwrap();
        must(
            Command::new(&oras)
                .args([
                    "pull",
                    "--ca-file",
                    ca.as_str(),
                    "-u",
                    "tester",
                    "-p",
                    "s3cret",
                    "-o",
                ])
                .arg(&into)
                .arg(format!(
                    "{}/ocp/bootimages@{}",
                    reg.host(),
                    e["digest"].as_str().unwrap()
                ))
                .env("HOME", scratch_dir),
        );
        let got: Vec<_> = std::fs::read_dir(&into)
            .unwrap()
            .map(|d| d.unwrap().path())
            .collect();
        assert_eq!(got.len(), 1, "{got:?}");
        let name = got[0].file_name().unwrap().to_string_lossy().into_owned();
        let (sha, orig) = written
            .get(&name)
            .unwrap_or_else(|| panic!("oras named it {name}"));
        let h = must(Command::new("sha256sum").arg(&got[0]));
        assert!(h.starts_with(sha.as_str()), "{name}: {h} vs {sha}");
        must(Command::new("cmp").arg(&got[0]).arg(orig));
        std::fs::remove_dir_all(&into).unwrap();
        checked += 1;
    }
    checked
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
            "round {round}:\n{}\n{}\nthe registry's errors:\n{}",
            stderr(&r1),
            stderr(&r2),
            std::fs::read_to_string(reg.dir.path().join("registry.log")).unwrap_or_default()
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
    // generate --push: the registry is reached before the build, so a
    // wrong one costs no build (nothing written), and a digest is refused.
    let gen_out = tempfile::tempdir().unwrap();
    let go = gen_out.path().join("o");
    let go = go.to_str().unwrap();
    let gen_push = |to: &str| {
        tool(
            &["generate", &oci("release"), "metal", "-o", go, "--push", to],
            &[],
        )
    };
    let e = one_error(&gen_push(&gone), "--push");
    assert!(e.contains("is it running"), "{e}");
    one_error(
        &gen_push(&format!("{}/ocp/x@sha256:{}", reg.host(), "0".repeat(64))),
        "push takes a tag, not a digest",
    );
    assert!(
        !Path::new(go).exists(),
        "generate wrote {go} before failing"
    );
    // A registry that takes images only: every artifact manifest refused
    // (through a proxy to the plain registry, whose blobs the first push
    // put there): the registry named, the fix said.
    let picky = FaultProxy::start(plain.port, "-", Fault::RejectManifests, 0);
    let e = one_error(
        &tool(
            &[
                "push",
                dir,
                &format!("{}/ocp/bootimages:picky", picky.host()),
                "--insecure",
            ],
            &[],
        ),
        "does not take OCI artifacts",
    );
    assert!(
        e.contains(&picky.host()) && e.contains("MANIFEST_INVALID"),
        "{e}"
    );
    assert!(e.contains("OCI distribution spec 1.1"), "{e}");
    drop(picky);
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

/// `make bench-registry`: push throughput against `skopeo copy` of the
/// same blobs to the same registry (TLS, htpasswd): an OCI archive holding
/// one layer of REGISTRY_BENCH_MIB (default 512) MiB of random bytes, each
/// into a fresh repository, best of three. Our push sends the archive as
/// the artifact and the image inside it, so its rate counts both; skopeo
/// sends the image. Then our whole push of a generate run. Prints the
/// figures; asserts only that both worked.
#[test]
#[ignore]
fn bench_push_vs_skopeo_copy() {
    use sha2::{Digest, Sha256};
    let mib: u64 = std::env::var("REGISTRY_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512);
    let t = tempfile::tempdir_in("/var/tmp").unwrap();
    // The OCI layout: one random layer, a config, a manifest, index.json.
    let lay = t.path().join("layout");
    let blobs = lay.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let layer = t.path().join("layer");
    must(Command::new("dd").args([
        "if=/dev/urandom",
        &format!("of={}", layer.display()),
        "bs=1M",
        &format!("count={mib}"),
        "status=none",
    ]));
    let ld = sha256_file(&layer);
    std::fs::rename(&layer, blobs.join(&ld)).unwrap();
    let put = |bytes: Vec<u8>| -> (String, usize) {
        let d = hex::encode(Sha256::digest(&bytes));
        std::fs::write(blobs.join(&d), &bytes).unwrap();
        (d, bytes.len())
    };
    let (cd, cs) = put(serde_json::json!({"architecture": "amd64", "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{ld}")]}})
    .to_string()
    .into_bytes());
    let (md, ms) = put(
        serde_json::json!({"schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": format!("sha256:{cd}"), "size": cs},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": format!("sha256:{ld}"), "size": mib << 20}]})
        .to_string()
        .into_bytes(),
    );
    std::fs::write(lay.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    std::fs::write(
        lay.join("index.json"),
        serde_json::json!({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{md}"), "size": ms,
            "annotations": {"org.opencontainers.image.ref.name": "bench"}}]})
        .to_string(),
    )
    .unwrap();
    // As generate would publish it: meta.json naming the archive.
    let run = t.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let name = "bench-kubevirt.x86_64.ociarchive";
    must(
        Command::new("tar")
            .arg("-C")
            .arg(&lay)
            .arg("-cf")
            .arg(run.join(name))
            .arg("."),
    );
    let sha = sha256_file(&run.join(name));
    std::fs::write(
        run.join("meta.json"),
        serde_json::json!({"coreos-assembler.basearch": "x86_64", "ostree-version": "bench",
            "images": {"kubevirt": {"path": name, "sha256": sha}}})
        .to_string(),
    )
    .unwrap();
    let archive = run.join(name);
    // Each measurement into a registry of its own: no blob is there yet,
    // and skopeo's blob-info cache cannot mount one from an earlier repo.
    let (mut ours, mut theirs) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        let reg = Registry::start(true);
        let r = format!("{}/bench/ours:t", reg.host());
        let f = flags(&reg, "s3cret");
        let mut a: Vec<&str> = vec!["push", run.to_str().unwrap(), &r, "--stream", "b"];
        a.extend(f.iter().map(String::as_str));
        let t0 = std::time::Instant::now();
        let o = tool(&a, &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        ours = ours.min(t0.elapsed().as_secs_f64());
        drop(reg);
        let reg = Registry::start(true);
        let t0 = std::time::Instant::now();
        must(
            Command::new("skopeo")
                .args(["copy", "-q", "--dest-creds", "tester:s3cret"])
                .arg(format!("--dest-cert-dir={}", reg.cert_dir().display()))
                .arg(format!("oci-archive:{}", archive.display()))
                .arg(format!("docker://{}/bench/skopeo:t", reg.host())),
        );
        theirs = theirs.min(t0.elapsed().as_secs_f64());
    }
    let mine = 2.0 * mib as f64 / ours;
    let skopeo = mib as f64 / theirs;
    eprintln!(
        "registry bench: {mib} MiB layer: push {mine:.0} MiB/s ({ours:.2} s for the archive and the image inside, {} MiB), skopeo copy {skopeo:.0} MiB/s ({theirs:.2} s): {:.0} %",
        2 * mib,
        100.0 * mine / skopeo
    );
    // Our whole push of a real run, once.
    let reg = Registry::start(true);
    let b = built();
    let t0 = std::time::Instant::now();
    let o = push(&reg, &b.out, "whole", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let whole = t0.elapsed().as_secs_f64();
    let total: u64 = walk_size(&b.out);
    eprintln!(
        "registry bench: a generate run (metal kubevirt live), {} MiB: pushed in {whole:.2} s",
        total >> 20
    );
}

fn walk_size(d: &Path) -> u64 {
    std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}
