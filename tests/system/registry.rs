//! Bootimages into and out of a registry (issue 31; privileged tier: the
//! fixture release). Against Debian's docker-registry (distribution 2.8)
//! on 127.0.0.1 with TLS and htpasswd: `push` of a `generate` output,
//! read back by skopeo (media types, configs, the index's platforms) and
//! pulled by skopeo as the ordinary image KubeVirt boots (the
//! containerDisk); `pull` rebuilds the directory (sha256sum -c, the
//! coreos-stream-metadata crate reads stream.json with every location
//! under --base-url); pushes racing into one tag; a pull through a proxy
//! that resets connections; and each bad input's one line.
use crate::common::faults::{Fault, FaultProxy};
use crate::common::*;
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
    push_env(reg, dir, tag, extra, &[])
}

fn push_env(reg: &Registry, dir: &Path, tag: &str, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let r = format!("{}/ocp/bootimages:{tag}", reg.host());
    let f = flags(reg, "s3cret");
    let mut a: Vec<&str> = vec!["push", dir.to_str().unwrap(), &r];
    a.extend(f.iter().map(String::as_str));
    a.extend(extra);
    tool(&a, env)
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
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
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
/// one payload into one REF: tests/system/container.rs's Tekton simulation.)
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
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

/// One run's output for the fan-in tests: its directory, how it is pushed
/// (`--stream`), the (arch, stream) it lands under in the index, and its
/// meta.json and stream.json.
struct RunDir {
    dir: PathBuf,
    stream_flag: Option<&'static str>,
    arch: String,
    stream: String,
    meta: Value,
    stream_doc: Value,
}

impl RunDir {
    fn of(dir: PathBuf, stream_flag: Option<&'static str>) -> RunDir {
        let meta: Value = serde_json::from_slice(&read(&dir.join("meta.json"))).unwrap();
        let stream_doc: Value = serde_json::from_slice(&read(&dir.join("stream.json"))).unwrap();
        RunDir {
            arch: meta["coreos-assembler.basearch"].as_str().unwrap().into(),
            stream: stream_flag
                .map(String::from)
                .unwrap_or_else(|| stream_doc["stream"].as_str().unwrap().into()),
            dir,
            stream_flag,
            meta,
            stream_doc,
        }
    }

    fn push(&self, reg: &Registry, tag: &str) -> Output {
        self.push_at(reg, tag, None)
    }

    /// Pushed, entering the fan-in (its last check, its part's tag, the
    /// index) at `at` (milliseconds since the epoch) when given.
    fn push_at(&self, reg: &Registry, tag: &str, at: Option<u128>) -> Output {
        let extra: Vec<&str> = self
            .stream_flag
            .map(|s| vec!["--stream", s])
            .unwrap_or_default();
        let at = at.map(|t| t.to_string());
        let env: Vec<(&str, &str)> = at
            .iter()
            .map(|t| ("BOOTIMAGE_GEN_FANIN_AT", t.as_str()))
            .collect();
        push_env(reg, &self.dir, tag, &extra, &env)
    }

    /// The images keys (platforms) of its meta.json.
    fn platforms(&self) -> Vec<&str> {
        self.meta["images"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect()
    }

    /// Its part tag under `tag` (fanin.rs `part_tag`).
    fn part_tag(&self, tag: &str) -> String {
        let mut p = self.platforms();
        p.sort_unstable();
        format!("{tag}.part.{}.{}.{}", self.arch, self.stream, p.join("_"))
    }
}

/// A run made from `built()`'s output, as another machine's run of the
/// same release would be: the images `keep` takes (hard links), meta.json
/// and stream.json narrowed to them, then `edit`ed (meta.json, stream.json).
fn derived_run(
    name: &str,
    keep: impl Fn(&str) -> bool,
    edit: impl Fn(&mut Value, &mut Value),
) -> RunDir {
    let b = built();
    let dir = b.root.join("fanin").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut meta = b.meta.clone();
    let imgs = meta["images"].as_object_mut().unwrap();
    imgs.retain(|k, _| keep(k));
    let kept: std::collections::BTreeSet<String> = imgs
        .values()
        .map(|i| i["path"].as_str().unwrap().to_string())
        .collect();
    for f in &kept {
        std::fs::hard_link(b.out.join(f), dir.join(f)).unwrap();
    }
    let mut stream: Value = serde_json::from_slice(&read(&b.out.join("stream.json"))).unwrap();
    for a in stream["architectures"]
        .as_object_mut()
        .unwrap()
        .values_mut()
    {
        let arts = a["artifacts"].as_object_mut().unwrap();
        for p in arts.values_mut() {
            let formats = p["formats"].as_object_mut().unwrap();
            for kinds in formats.values_mut() {
                kinds
                    .as_object_mut()
                    .unwrap()
                    .retain(|_, f| kept.contains(f["location"].as_str().unwrap()));
            }
            formats.retain(|_, k| !k.as_object().unwrap().is_empty());
        }
        arts.retain(|_, p| !p["formats"].as_object().unwrap().is_empty());
    }
    edit(&mut meta, &mut stream);
    for (f, v) in [("meta.json", &meta), ("stream.json", &stream)] {
        std::fs::write(dir.join(f), serde_json::to_vec_pretty(v).unwrap()).unwrap();
    }
    RunDir::of(dir, None)
}

/// The runs the fan-in tests push, made once from `built()`.
struct Splits {
    /// The metal disk and the live files (stream platform `metal`), and
    /// every other platform, with its own build time: one build's runs
    /// split by platform group.
    metal: RunDir,
    rest: RunDir,
    /// The same run as aarch64 (meta.json's basearch, stream.json's arch).
    arm: RunDir,
    /// `rest` of another build of the same arch and stream (another OS
    /// commit and version).
    other_build: RunDir,
    /// One platform of `metal` as another file (one byte more).
    changed: RunDir,
}

fn splits() -> &'static Splits {
    static S: OnceLock<Splits> = OnceLock::new();
    S.get_or_init(|| {
        let b = built();
        let is_metal = |k: &str| k.starts_with("metal") || k.starts_with("live-");
        let metal = derived_run("metal", is_metal, |_, _| {});
        let later = |m: &mut Value, s: &mut Value| {
            // Another machine's run: built a minute later.
            m["coreos-assembler.build-timestamp"] = "2030-01-01T00:01:00Z".into();
            s["metadata"]["last-modified"] = "2030-01-01T00:01:00Z".into();
        };
        let rest = derived_run("rest", |k| !is_metal(k), later);
        assert!(
            !metal.platforms().is_empty() && !rest.platforms().is_empty(),
            "{:?}",
            b.meta["images"]
        );
        let arm = derived_run(
            "aarch64",
            |_| true,
            |m, s| {
                m["coreos-assembler.basearch"] = "aarch64".into();
                let a = s["architectures"].as_object_mut().unwrap();
                let x = a.remove("x86_64").unwrap();
                a.insert("aarch64".into(), x);
            },
        );
        let other_build = derived_run(
            "other-build",
            |k| !is_metal(k),
            |m, s| {
                m["ostree-commit"] = "f".repeat(64).into();
                m["ostree-version"] = "9.9.other".into();
                m["buildid"] = "9.9.other".into();
                for a in s["architectures"].as_object_mut().unwrap().values_mut() {
                    for p in a["artifacts"].as_object_mut().unwrap().values_mut() {
                        p["release"] = "9.9.other".into();
                    }
                }
            },
        );
        // The smallest metal-group file, one byte longer.
        let (key, file) = metal.meta["images"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, i)| (k.clone(), i["path"].as_str().unwrap().to_string()))
            .min_by_key(|(_, f)| std::fs::metadata(b.out.join(f)).unwrap().len())
            .unwrap();
        let changed = derived_run("changed", |k| k == key, |_, _| {});
        let p = changed.dir.join(&file);
        let mut bytes = read(&p);
        std::fs::remove_file(&p).unwrap();
        bytes.push(0);
        std::fs::write(&p, &bytes).unwrap();
        let sha = sha256_file(&p);
        let old = changed.meta["images"][&key]["sha256"]
            .as_str()
            .unwrap()
            .to_string();
        for f in ["meta.json", "stream.json"] {
            let t = String::from_utf8(read(&changed.dir.join(f))).unwrap();
            std::fs::write(changed.dir.join(f), t.replace(&old, &sha)).unwrap();
        }
        let changed = RunDir::of(changed.dir, None);
        Splits {
            metal,
            rest,
            arm,
            other_build,
            changed,
        }
    })
}

/// A blob (or manifest) of the test registry, from its storage.
fn stored(reg: &Registry, digest: &str) -> Vec<u8> {
    let hex = digest.trim_start_matches("sha256:");
    read(&reg.dir.path().join(format!(
        "storage/docker/registry/v2/blobs/sha256/{}/{hex}/data",
        &hex[..2]
    )))
}

/// The digest the tag names in the test registry's storage, if any.
fn tag_digest(reg: &Registry, tag: &str) -> Option<String> {
    std::fs::read_to_string(reg.dir.path().join(format!(
        "storage/docker/registry/v2/repositories/ocp/bootimages/_manifests/tags/{tag}/current/link"
    )))
    .ok()
}

/// The tags of the test registry beginning with `prefix`.
fn tags_with(reg: &Registry, prefix: &str) -> Vec<String> {
    let d = reg
        .dir
        .path()
        .join("storage/docker/registry/v2/repositories/ocp/bootimages/_manifests/tags");
    let mut v: Vec<String> = std::fs::read_dir(d)
        .map(|r| {
            r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|t| t.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The index at a tag, from storage (no entries when there is none).
fn index_at(reg: &Registry, tag: &str) -> Value {
    match tag_digest(reg, tag) {
        Some(d) => serde_json::from_slice(&stored(reg, &d)).unwrap(),
        None => serde_json::json!({"manifests": []}),
    }
}

/// The digest of the one layer of the artifact an index entry names.
fn layer_of(reg: &Registry, e: &Value) -> String {
    let m: Value = serde_json::from_slice(&stored(reg, e["digest"].as_str().unwrap())).unwrap();
    m["layers"][0]["digest"].as_str().unwrap().to_string()
}

/// Every file of a stream document's arch: (platform, format, kind, sha256).
fn stream_files(doc: &Value, arch: &str) -> std::collections::BTreeSet<[String; 4]> {
    let mut v = std::collections::BTreeSet::new();
    for (p, pa) in doc["architectures"][arch]["artifacts"]
        .as_object()
        .into_iter()
        .flatten()
    {
        for (f, kinds) in pa["formats"].as_object().unwrap() {
            for (k, a) in kinds.as_object().unwrap() {
                v.insert([
                    p.clone(),
                    f.clone(),
                    k.clone(),
                    a["sha256"].as_str().unwrap().to_string(),
                ]);
            }
        }
    }
    v
}

/// What is wrong with `idx` as the fan-in of `runs` (nothing: empty): each
/// run's every file once under its (arch, stream, platform), its layer that
/// file; nothing else; per (arch, stream), one meta.json whose images are
/// those of all its runs, and one stream.json with every file of all its
/// runs.
fn fan_in_problems(reg: &Registry, idx: &Value, runs: &[&RunDir]) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    type Key = (String, String, String);
    let ann = |e: &Value, k: &str| {
        e["annotations"][format!("io.bootimage-gen.{k}")]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let mut have: BTreeMap<Key, Vec<&Value>> = BTreeMap::new();
    for e in idx["manifests"].as_array().unwrap() {
        have.entry((ann(e, "arch"), ann(e, "stream"), ann(e, "platform")))
            .or_default()
            .push(e);
    }
    let mut want: BTreeMap<Key, String> = BTreeMap::new();
    let mut pairs: BTreeMap<(String, String), Vec<&RunDir>> = BTreeMap::new();
    for r in runs {
        for (k, img) in r.meta["images"].as_object().unwrap() {
            want.insert(
                (r.arch.clone(), r.stream.clone(), k.clone()),
                format!("sha256:{}", img["sha256"].as_str().unwrap()),
            );
        }
        pairs
            .entry((r.arch.clone(), r.stream.clone()))
            .or_default()
            .push(r);
    }
    /// The one entry of `k`; else a problem said.
    fn one<'a>(
        have: &BTreeMap<Key, Vec<&'a Value>>,
        k: &Key,
        problems: &mut Vec<String>,
    ) -> Option<&'a Value> {
        match have.get(k).map(Vec::as_slice) {
            Some([e]) => Some(*e),
            got => {
                problems.push(format!(
                    "{}/{} {}: {} entries",
                    k.0,
                    k.1,
                    k.2,
                    got.map_or(0, <[_]>::len)
                ));
                None
            }
        }
    }
    let mut problems = Vec::new();
    for (k, sha) in &want {
        if let Some(e) = one(&have, k, &mut problems) {
            let got = layer_of(reg, e);
            if got != *sha {
                problems.push(format!("{}/{} {}: file {got}, not {sha}", k.0, k.1, k.2));
            }
        }
    }
    for k in have.keys() {
        let doc = k.2 == "meta" || k.2 == "stream";
        let pushed = want.contains_key(k) || doc && pairs.contains_key(&(k.0.clone(), k.1.clone()));
        if !pushed {
            problems.push(format!("{}/{} {}: not pushed by these runs", k.0, k.1, k.2));
        }
    }
    for ((arch, stream), rs) in &pairs {
        let k = |p: &str| (arch.clone(), stream.clone(), p.to_string());
        if let Some(e) = one(&have, &k("meta"), &mut problems) {
            let m: Value = serde_json::from_slice(&stored(reg, &layer_of(reg, e))).unwrap();
            let got: BTreeMap<&String, &Value> = m["images"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, i)| (k, &i["sha256"]))
                .collect();
            let mut w: BTreeMap<&String, &Value> = BTreeMap::new();
            for r in rs {
                w.extend(
                    r.meta["images"]
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(k, i)| (k, &i["sha256"])),
                );
            }
            if got != w {
                problems.push(format!(
                    "{arch}/{stream} meta.json: images {:?}, not {:?}",
                    got.keys().collect::<Vec<_>>(),
                    w.keys().collect::<Vec<_>>()
                ));
            }
        }
        if let Some(e) = one(&have, &k("stream"), &mut problems) {
            let s: Value = serde_json::from_slice(&stored(reg, &layer_of(reg, e))).unwrap();
            let got = stream_files(&s, arch);
            let w: BTreeSet<[String; 4]> = rs
                .iter()
                .flat_map(|r| stream_files(&r.stream_doc, arch))
                .collect();
            if got != w {
                let platforms = |v: &BTreeSet<[String; 4]>| {
                    v.iter().map(|x| x[0].clone()).collect::<BTreeSet<_>>()
                };
                problems.push(format!(
                    "{arch}/{stream} stream.json: {} files of platforms {:?}, not {} of {:?}",
                    got.len(),
                    platforms(&got),
                    w.len(),
                    platforms(&w)
                ));
            }
        }
    }
    problems
}

/// The index digest a push printed (`REPO:TAG@DIGEST (N entries)`).
fn printed_digest(o: &Output) -> String {
    let out = stdout(o);
    out.split('@')
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or("")
        .to_string()
}

/// Milliseconds since the epoch.
fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// How far apart (ms) the two pushes of each round enter the fan-in:
/// at once, then one a little before the other, either way.
const RACE_OFFSETS: [i64; 8] = [0, 0, 5, -5, 15, -15, 40, -40];

/// Issue 43's fan-in check, for runs split one way (`what`): the two runs
/// pushed one after the other (the reference), then 8 rounds of both at
/// once, each into a tag of its own, entering the fan-in (the last check,
/// the part's tag, the index) at one moment or `RACE_OFFSETS` apart
/// (`BOOTIMAGE_GEN_FANIN_AT`), so their merges overlap. Every round: both
/// pushes succeed, the index holds both runs whole (`fan_in_problems`:
/// every file, one meta.json and stream.json per (arch, stream) holding
/// both runs' platforms), is the reference index byte for byte (the same
/// whatever the order or timing), and is what a push printed. Then a
/// held round: one push stopped in its merge while the other is pushed
/// whole, so that it writes a stale index after it; the index must again
/// be the reference (it reads back and merges again).
fn race_rounds(left: &RunDir, right: &RunDir, what: &str) {
    let reg = Registry::start(true);
    // One after the other (this also puts every blob there, so each round
    // below is the index race alone).
    for r in [left, right] {
        let o = r.push(&reg, "ref");
        assert!(o.status.success(), "{what}: {}", stderr(&o));
    }
    // Each pushed again with its blobs there, as in the rounds: twice the
    // slower sets how far ahead the rounds' moment is.
    let mut lead = 0;
    for r in [left, right] {
        let t = now_ms();
        let o = r.push(&reg, "warm");
        assert!(o.status.success(), "{what}: {}", stderr(&o));
        lead = lead.max(2 * (now_ms() - t));
    }
    eprintln!("{what}: the rounds' pushes enter the fan-in {lead} ms after they start");
    let reference = tag_digest(&reg, "ref").unwrap();
    let mut problems: Vec<String> = fan_in_problems(&reg, &index_at(&reg, "ref"), &[left, right])
        .into_iter()
        .map(|p| format!("one after the other: {p}"))
        .collect();
    let mut lost = 0;
    for (round, offset) in RACE_OFFSETS.into_iter().enumerate() {
        let tag = format!("race{round}");
        let at = now_ms() + lead + 200;
        let at_right = at.saturating_add_signed(offset.into());
        let (r1, r2) = std::thread::scope(|s| {
            let a = s.spawn(|| left.push_at(&reg, &tag, Some(at)));
            let c = s.spawn(|| right.push_at(&reg, &tag, Some(at_right)));
            (a.join().unwrap(), c.join().unwrap())
        });
        assert!(
            r1.status.success() && r2.status.success(),
            "{what} round {round}:\n{}\n{}\nthe registry's errors:\n{}",
            stderr(&r1),
            stderr(&r2),
            std::fs::read_to_string(reg.dir.path().join("registry.log")).unwrap_or_default()
        );
        let digest = tag_digest(&reg, &tag).unwrap();
        let printed = [printed_digest(&r1), printed_digest(&r2)];
        let mut p = fan_in_problems(&reg, &index_at(&reg, &tag), &[left, right]);
        if digest != reference {
            p.push(format!("index {digest}, not the reference {reference}"));
        }
        if !printed.contains(&digest) {
            p.push(format!("index {digest}, the pushes printed {printed:?}"));
        }
        eprintln!(
            "{what} round {round} ({offset:+} ms): printed {} and {}; index {}: {}",
            short(&printed[0]),
            short(&printed[1]),
            short(&digest),
            if p.is_empty() { "both whole" } else { "WRONG" }
        );
        if !p.is_empty() {
            lost += 1;
        }
        problems.extend(p.into_iter().map(|p| format!("round {round}: {p}")));
    }
    eprintln!("{what}: {} of 8 rounds whole", 8 - lost);
    // The stale writer, made to happen: the left push held in its merge
    // (the index it will write made from the parts it saw: its own),
    // the right pushed whole meanwhile, then the left writes its stale
    // index over the right's: it reads back and merges again.
    let resume = reg.dir.path().join("resume-held");
    let r = format!("{}/ocp/bootimages:held", reg.host());
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bootimage-gen"));
    cmd.args(["push", left.dir.to_str().unwrap(), &r])
        .args(flags(&reg, "s3cret"))
        .args(
            left.stream_flag
                .map(|s| vec!["--stream", s])
                .unwrap_or_default(),
        )
        .env("HOME", home.path())
        .env("BOOTIMAGE_GEN_FANIN_RESUME", &resume)
        .env_remove("REGISTRY_AUTH_FILE");
    let mut held = run_until_paused(
        &mut cmd,
        "push-merge-hold",
        std::time::Duration::from_secs(300),
    );
    let o = right.push(&reg, "held");
    assert!(o.status.success(), "{what}: {}", stderr(&o));
    let meanwhile = tag_digest(&reg, "held").unwrap();
    std::fs::write(&resume, "").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut held.err, &mut rest).unwrap();
    let status = held.child.wait().unwrap();
    assert!(
        status.success(),
        "{what}: the held push:\n{}{rest}",
        held.log
    );
    let digest = tag_digest(&reg, "held").unwrap();
    let mut p = fan_in_problems(&reg, &index_at(&reg, "held"), &[left, right]);
    if digest != reference {
        p.push(format!("index {digest}, not the reference {reference}"));
    }
    eprintln!(
        "{what} held round: the right push wrote {}, the held left then {}: {}",
        short(&meanwhile),
        short(&digest),
        if p.is_empty() { "both whole" } else { "WRONG" }
    );
    problems.extend(p.into_iter().map(|p| format!("held round: {p}")));
    assert!(problems.is_empty(), "{what}:\n{}", problems.join("\n"));
}

fn short(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}

/// Two runs of one release split by arch (x86_64 and aarch64), pushed at
/// once into one tag: 8 rounds.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn racing_pushes_split_by_arch_both_land() {
    let b = built();
    let s = splits();
    race_rounds(&RunDir::of(b.out.clone(), None), &s.arm, "split by arch");
}

/// Two runs split by stream (one output pushed as two streams), pushed at
/// once into one tag: 8 rounds.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn racing_pushes_split_by_stream_both_land() {
    let b = built();
    race_rounds(
        &RunDir::of(b.out.clone(), Some("left")),
        &RunDir::of(b.out.clone(), Some("right")),
        "split by stream",
    );
}

/// Issue 43 item 2: two runs of one build, arch and stream split by
/// platform group (metal and the live files; kubevirt and the rest),
/// pushed at once into one tag: 8 rounds; a pull of the reference then
/// gives one directory whose meta.json and stream.json hold both.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn racing_pushes_split_by_platform_group_both_land() {
    let s = splits();
    race_rounds(&s.metal, &s.rest, "split by platform group");
}

/// A push killed during its merge (its part tagged, the merged meta.json
/// and stream.json pushed, the index not yet written), then run again:
/// the index is the one the two runs make pushed one after the other.
/// Both orders (the killed run second, then first).
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn a_push_killed_during_its_merge_completes_when_run_again() {
    let s = splits();
    let reg = Registry::start(true);
    for r in [&s.metal, &s.rest] {
        let o = r.push(&reg, "ref");
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let reference = tag_digest(&reg, "ref").unwrap();
    assert_eq!(
        fan_in_problems(&reg, &index_at(&reg, "ref"), &[&s.metal, &s.rest]),
        Vec::<String>::new()
    );
    let f = flags(&reg, "s3cret");
    for (i, (first, killed)) in [(&s.metal, &s.rest), (&s.rest, &s.metal)]
        .into_iter()
        .enumerate()
    {
        let tag = format!("killed{i}");
        let o = first.push(&reg, &tag);
        assert!(o.status.success(), "{}", stderr(&o));
        let before = tag_digest(&reg, &tag).unwrap();
        let home = tempfile::tempdir().unwrap();
        let r = format!("{}/ocp/bootimages:{tag}", reg.host());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bootimage-gen"));
        cmd.args(["push", killed.dir.to_str().unwrap(), &r])
            .args(&f)
            .env("HOME", home.path())
            .env_remove("REGISTRY_AUTH_FILE");
        let mut p = run_until_paused(&mut cmd, "push-merge", std::time::Duration::from_secs(300));
        p.child.kill().unwrap();
        p.child.wait().unwrap();
        // Killed in the merge: both parts tagged, the index the first
        // run's alone.
        assert_eq!(tags_with(&reg, &format!("{tag}.part.")), {
            let mut v = vec![first.part_tag(&tag), killed.part_tag(&tag)];
            v.sort();
            v
        });
        assert_eq!(
            tag_digest(&reg, &tag).unwrap(),
            before,
            "the index changed before the kill"
        );
        let o = killed.push(&reg, &tag);
        assert!(o.status.success(), "rerun after the kill: {}", stderr(&o));
        let idx = index_at(&reg, &tag);
        assert_eq!(
            fan_in_problems(&reg, &idx, &[&s.metal, &s.rest]),
            Vec::<String>::new(),
            "after the rerun"
        );
        assert_eq!(tag_digest(&reg, &tag).unwrap(), reference);
        eprintln!(
            "killed {} during its merge, rerun: the index is the reference",
            killed.dir.display()
        );
    }
    // The reference pulled: one directory (one arch and stream) whose
    // meta.json and stream.json hold both runs' platforms, every file
    // there.
    let back = tempfile::tempdir().unwrap();
    let o = pull(
        &reg,
        &format!("{}/ocp/bootimages:ref", reg.host()),
        back.path(),
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let m: Value = serde_json::from_slice(&read(&back.path().join("meta.json"))).unwrap();
    let mut keys: Vec<&str> = m["images"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut want = s.metal.platforms();
    want.extend(s.rest.platforms());
    keys.sort_unstable();
    want.sort_unstable();
    assert_eq!(keys, want);
    let st: coreos_stream_metadata::Stream =
        serde_json::from_slice(&read(&back.path().join("stream.json"))).unwrap();
    let got: std::collections::BTreeSet<&String> =
        st.architectures["x86_64"].artifacts.keys().collect();
    let mut w: std::collections::BTreeSet<String> = Default::default();
    for r in [&s.metal, &s.rest] {
        w.extend(
            stream_files(&r.stream_doc, "x86_64")
                .into_iter()
                .map(|x| x[0].clone()),
        );
    }
    assert_eq!(got, w.iter().collect());
    sh_ok("sha256sum -c --quiet SHA256SUMS", back.path());
}

/// Real conflicts are refused naming both runs' parts: another build
/// (OS commit) of the same arch and stream, and one platform as another
/// file; the index is left as it was and no part of theirs stays. Two
/// conflicting pushes at once (3 rounds): not both succeed, a refusal
/// names both parts, and the index holds the winner alone (or nothing).
/// `stream merge` of the same directories: platform-split runs of one
/// build merge, the conflicts are refused naming both.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn conflicting_pushes_are_refused_naming_both() {
    let s = splits();
    let reg = Registry::start(true);
    let t = now_ms();
    let o = s.metal.push(&reg, "c");
    assert!(o.status.success(), "{}", stderr(&o));
    let lead = now_ms() - t;
    let before = tag_digest(&reg, "c").unwrap();
    let e = one_error(&s.other_build.push(&reg, "c"), "would hold two builds");
    for want in [
        s.metal.part_tag("c"),
        s.other_build.part_tag("c"),
        "9.9.other".to_string(),
        "f".repeat(12),
    ] {
        assert!(e.contains(&want), "{want:?} not in: {e}");
    }
    let e = one_error(&s.changed.push(&reg, "c"), "is two different files");
    for want in [s.metal.part_tag("c"), s.changed.part_tag("c")] {
        assert!(e.contains(&want), "{want:?} not in: {e}");
    }
    eprintln!("refused: {e}");
    assert_eq!(tag_digest(&reg, "c").unwrap(), before);
    assert_eq!(tags_with(&reg, "c.part."), [s.metal.part_tag("c")]);
    // The same build's other platforms still join.
    let o = s.rest.push(&reg, "c");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        fan_in_problems(&reg, &index_at(&reg, "c"), &[&s.metal, &s.rest]),
        Vec::<String>::new()
    );
    // At once: entering the fan-in at one moment, then 10 ms apart
    // either way.
    for (round, offset) in [0i64, 10, -10].into_iter().enumerate() {
        let tag = format!("cr{round}");
        let at = now_ms() + lead + 500;
        let (r1, r2) = std::thread::scope(|sc| {
            let a = sc.spawn(|| s.metal.push_at(&reg, &tag, Some(at)));
            let c = sc.spawn(|| {
                s.other_build
                    .push_at(&reg, &tag, Some(at.saturating_add_signed(offset.into())))
            });
            (a.join().unwrap(), c.join().unwrap())
        });
        let ok = [r1.status.success(), r2.status.success()];
        assert!(
            !(ok[0] && ok[1]),
            "round {round}: both conflicting pushes succeeded"
        );
        for o in [&r1, &r2].into_iter().filter(|o| !o.status.success()) {
            let e = one_error(o, "would hold two builds");
            for want in [s.metal.part_tag(&tag), s.other_build.part_tag(&tag)] {
                assert!(e.contains(&want), "round {round}: {want:?} not in: {e}");
            }
        }
        let winners: Vec<&RunDir> = [&s.metal, &s.other_build]
            .into_iter()
            .zip(ok)
            .filter(|x| x.1)
            .map(|x| x.0)
            .collect();
        assert_eq!(
            fan_in_problems(&reg, &index_at(&reg, &tag), &winners),
            Vec::<String>::new(),
            "round {round}: ok {ok:?}"
        );
        let parts: Vec<String> = tags_with(&reg, &format!("{tag}.part."))
            .iter()
            .map(|t| {
                let withdrawn =
                    index_at(&reg, t)["annotations"]["io.bootimage-gen.withdrawn"].is_string();
                format!("{t}{}", if withdrawn { " (withdrawn)" } else { "" })
            })
            .collect();
        eprintln!(
            "conflict round {round} ({offset:+} ms): metal ok {}, other build ok {}; parts {parts:?}",
            ok[0], ok[1]
        );
    }
    // stream merge: the platform-split runs of one build unite; the
    // conflicts are refused naming both directories.
    let out = tempfile::tempdir().unwrap();
    let merged = out.path().join("stream.json");
    let merge = |a: &RunDir, b: &RunDir| {
        tool(
            &[
                "stream",
                "merge",
                a.dir.to_str().unwrap(),
                b.dir.to_str().unwrap(),
                "-o",
                merged.to_str().unwrap(),
            ],
            &[],
        )
    };
    let o = merge(&s.metal, &s.rest);
    assert!(o.status.success(), "{}", stderr(&o));
    let _: coreos_stream_metadata::Stream = serde_json::from_slice(&read(&merged)).unwrap();
    let mut w: std::collections::BTreeSet<[String; 4]> =
        stream_files(&s.metal.stream_doc, "x86_64");
    w.extend(stream_files(&s.rest.stream_doc, "x86_64"));
    let v: Value = serde_json::from_slice(&read(&merged)).unwrap();
    assert_eq!(stream_files(&v, "x86_64"), w);
    for (other, needle) in [
        (&s.other_build, "two builds"),
        (&s.changed, "different contents"),
    ] {
        let e = one_error(&merge(&s.metal, other), needle);
        for d in [&s.metal.dir, &other.dir] {
            assert!(e.contains(d.to_str().unwrap()), "{d:?} not in: {e}");
        }
    }
}

/// A push killed at moments spread over its run, then run again: it
/// completes, and the index holds each entry once.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
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
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
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
#[ignore = "privileged tier, a benchmark: `make bench-registry` runs it (--features privileged -- --ignored)"]
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

/// `push --sign-key` as a site checks it with the real cosign (Debian
/// trixie's 2.5): `cosign verify --key` accepts the index and every entry,
/// `cosign verify-attestation --type slsaprovenance1` accepts the
/// provenance on the index (its subject the index, its dependencies the
/// release and the OS image by digest); another key is refused; an
/// unsigned push of a changed output is refused by both cosign and
/// `pull --sigstore-key` (nothing written); a wrong COSIGN_PASSWORD is one
/// line and pushes nothing.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn a_signed_push_passes_cosign_verify_and_verify_attestation() {
    use crate::common::cosign::{Cosign, PASSWORD};
    let b = built();
    let cosign = Cosign::new("trixie");
    let (_k1, key, public) = cosign.key_pair();
    let (_k2, _, other) = cosign.key_pair();
    let reg = Registry::start(false);
    let host = reg.host();
    let push_signed = |tag: &str, dir: &Path, password: &str| {
        tool(
            &[
                "push",
                dir.to_str().unwrap(),
                &format!("{host}/ocp/bootimages:{tag}"),
                "--insecure",
                "--sign-key",
                key.to_str().unwrap(),
            ],
            &[("COSIGN_PASSWORD", password)],
        )
    };

    let o = push_signed("signed", &b.out, "not the password");
    let e = one_error(&o, "wrong COSIGN_PASSWORD");
    eprintln!("wrong password: {e}");
    assert_eq!(
        tag_digest(&reg, "signed"),
        None,
        "a push with a bad key sent something"
    );

    let o = push_signed("signed", &b.out, PASSWORD);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("signed the index and"),
        "{}",
        stderr(&o)
    );
    let idx = printed_digest(&o);
    let at = |d: &str| format!("{host}/ocp/bootimages@{d}");
    let v = cosign.verify(&["verify"], &public, &at(&idx));
    assert!(
        v.status.success(),
        "cosign verify of the index: {}",
        stderr(&v)
    );
    assert!(stdout(&v).contains(&idx), "{}", stdout(&v));
    let index: Value = serde_json::from_slice(&stored(&reg, &idx)).unwrap();
    for e in index["manifests"].as_array().unwrap() {
        let d = e["digest"].as_str().unwrap();
        let v = cosign.verify(&["verify"], &public, &at(d));
        assert!(v.status.success(), "cosign verify of {e}: {}", stderr(&v));
    }
    let v = cosign.verify(&["verify"], &other, &at(&idx));
    assert!(!v.status.success(), "another key verified the index");

    let v = cosign.verify(
        &["verify-attestation", "--type", "slsaprovenance1"],
        &public,
        &at(&idx),
    );
    assert!(
        v.status.success(),
        "cosign verify-attestation: {}",
        stderr(&v)
    );
    use base64::Engine;
    let env: Value = serde_json::from_str(stdout(&v).lines().next().unwrap()).unwrap();
    let st: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(env["payload"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(st["predicateType"], "https://slsa.dev/provenance/v1");
    assert_eq!(
        st["subject"][0]["digest"]["sha256"],
        idx.trim_start_matches("sha256:")
    );
    let deps = st["predicate"]["buildDefinition"]["resolvedDependencies"].to_string();
    for key in ["release-payload", "base-oscontainer"] {
        let d = b.meta[key]["digest"].as_str().unwrap();
        assert!(
            deps.contains(d.trim_start_matches("sha256:")),
            "{key} {d} not in {deps}"
        );
    }
    let v = cosign.verify(
        &["verify-attestation", "--type", "slsaprovenance1"],
        &other,
        &at(&idx),
    );
    assert!(!v.status.success(), "another key verified the attestation");

    // pull --sigstore-key: the signed tag comes; an unsigned push of a
    // changed output is refused before a file is written.
    let got = tempfile::tempdir().unwrap();
    let pull_checked = |tag: &str, dest: &Path| {
        tool(
            &[
                "pull",
                &format!("{host}/ocp/bootimages:{tag}"),
                "-o",
                dest.to_str().unwrap(),
                "--insecure",
                "--sigstore-key",
                public.to_str().unwrap(),
            ],
            &[],
        )
    };
    let o = pull_checked("signed", &got.path().join("ok"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("signature verified"), "{}", stderr(&o));
    let changed = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(&b.out).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, changed.path().join(f.file_name().unwrap())).unwrap();
    }
    let stream = changed.path().join("stream.json");
    let mut s = read(&stream);
    s.extend_from_slice(b"\n");
    std::fs::write(&stream, s).unwrap();
    let o = tool(
        &[
            "push",
            changed.path().to_str().unwrap(),
            &format!("{host}/ocp/bootimages:changed"),
            "--insecure",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let changed_idx = printed_digest(&o);
    let v = cosign.verify(&["verify"], &public, &at(&changed_idx));
    assert!(!v.status.success(), "cosign verified an unsigned index");
    let dest = got.path().join("refused");
    let o = pull_checked("changed", &dest);
    let e = one_error(&o, "no cosign signature");
    eprintln!("unsigned pull: {e}");
    assert!(!dest.exists() || std::fs::read_dir(&dest).unwrap().count() == 0);

    // Tampered: the signed index's signature copied onto the changed one
    // (what an attacker with push access can do) is refused by both.
    let sig_of = |d: &str| format!("docker://{host}/ocp/bootimages:sha256-{}.sig", &d[7..]);
    must(Command::new("skopeo").args([
        "copy",
        "--quiet",
        "--preserve-digests",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        &sig_of(&idx),
        &sig_of(&changed_idx),
    ]));
    let v = cosign.verify(&["verify"], &public, &at(&changed_idx));
    assert!(
        !v.status.success(),
        "cosign verified a signature moved onto the changed index"
    );
    let o = pull_checked("changed", &dest);
    let e = one_error(&o, "cosign signature");
    eprintln!("tampered pull: {e}");
    assert!(!dest.exists() || std::fs::read_dir(&dest).unwrap().count() == 0);
}
