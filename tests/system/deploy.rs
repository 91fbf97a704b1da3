//! deploy/ (issue 31): the Tekton Task and Pipeline against Tekton's own
//! CRD schemas (tektoncd/pipeline v1.15.0, deploy/test/crds), the
//! Kubernetes Job against the Kubernetes schemas kubernetes-validate
//! bundles, each with a broken copy that must fail; the Pipeline's wiring
//! as Tekton resolves it (every param and workspace it passes is the
//! Task's, the matrix gives one cell per arch x stream); and each cell's
//! step run by this machine's shell as Tekton would run it, with the real
//! bootimage-gen in --dry-run: the flags the script builds are the ones
//! the tool accepts, on the fixture payloads. (tests/system/container.rs runs the
//! same steps for real, in podman with the tool's image.)
//!
//! Privileged tier (`--features privileged`): it needs the fixture release
//! and the deploy venv (PyPI on first use), as the other pipeline targets.
use crate::common::tekton::{self, Params, P};
use crate::common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(rel)
}

fn crds() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(deploy("test/crds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".yaml.gz"))
        .collect();
    v.sort();
    assert_eq!(v.len(), 2, "{v:?}");
    v
}

/// validate.py --strict over `docs`: (exit ok, output).
fn tekton_check(docs: &[PathBuf]) -> (bool, String) {
    let o = Command::new(tekton::venv_bin().join("python3"))
        .arg(deploy("test/validate.py"))
        .arg("--strict")
        .args(crds())
        .arg("--")
        .args(docs)
        .output()
        .unwrap();
    (o.status.success(), format!("{}{}", stdout(&o), stderr(&o)))
}

fn kube_check(doc: &Path, version: &str) -> (bool, String) {
    let o = Command::new(tekton::venv_bin().join("kubernetes-validate"))
        .args(["--strict", "-k", version])
        .arg(doc)
        .output()
        .unwrap();
    (o.status.success(), format!("{}{}", stdout(&o), stderr(&o)))
}

/// A copy of deploy/`rel` with `from` replaced by `to` (which must occur).
fn broken(dir: &Path, rel: &str, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(deploy(rel)).unwrap();
    assert!(text.contains(from), "{rel} has no {from:?}");
    let p = dir.join(rel.replace('/', "-"));
    std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    p
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn tekton_resources_pass_tektons_schemas_and_broken_ones_fail() {
    let docs: Vec<PathBuf> = [
        "tekton/task-generate.yaml",
        "tekton/task-publish.yaml",
        "tekton/pipeline.yaml",
    ]
    .iter()
    .map(|r| deploy(r))
    .collect();
    let (ok, out) = tekton_check(&docs);
    assert!(ok, "{out}");
    for want in [
        "OK ",
        "Task/bootimage-gen-generate (tekton.dev/v1)",
        "Task/bootimage-gen-publish (tekton.dev/v1)",
        "Pipeline/bootimages (tekton.dev/v1)",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
    // Each break is one the API server would refuse.
    let t = tempfile::tempdir().unwrap();
    for (rel, from, to, says) in [
        // A step without a name.
        (
            "tekton/task-publish.yaml",
            "    - name: pull\n",
            "    - displayName: pull\n",
            "'name' is a required property",
        ),
        // A misspelt step field (strict: unknown fields refused).
        (
            "tekton/task-generate.yaml",
            "      securityContext:",
            "      securityContex:",
            "securityContex",
        ),
        // A matrix misspelt.
        (
            "tekton/pipeline.yaml",
            "      matrix:\n        params:",
            "      matrix:\n        parms:",
            "parms",
        ),
        // A workspace flag of the wrong type.
        (
            "tekton/task-publish.yaml",
            "      optional: true",
            "      optional: \"yes\"",
            "is not of type 'boolean'",
        ),
    ] {
        let p = broken(t.path(), rel, from, to);
        let (ok, out) = tekton_check(&[p]);
        assert!(!ok, "{rel} with {to:?} passed: {out}");
        assert!(out.contains(says), "{rel} with {to:?}: {out}");
    }
    // A kind no CRD given serves is an error, not a skip.
    let (ok, out) = tekton_check(&[deploy("kubernetes/job.yaml")]);
    assert!(
        !ok && out.contains("no CRD given serves batch/v1 Job"),
        "{out}"
    );
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn kubernetes_job_passes_its_schemas_and_broken_ones_fail() {
    let job = deploy("kubernetes/job.yaml");
    // backoffLimitPerIndex is GA from Kubernetes 1.33.
    let (ok, out) = kube_check(&job, "1.33");
    assert!(ok, "{out}");
    assert!(
        out.contains("passed for resource job/bootimages-4-18"),
        "{out}"
    );
    assert!(
        out.contains("passed for resource secret/bootimage-gen-registry"),
        "{out}"
    );
    // Before per-index backoff existed, the field is unknown.
    let (ok, out) = kube_check(&job, "1.27");
    assert!(!ok && out.contains("backoffLimitPerIndex"), "{out}");
    let t = tempfile::tempdir().unwrap();
    for (from, to, says) in [
        ("  completions: 4", "  completions: four", "completions"),
        (
            "          securityContext:",
            "          securityContex:",
            "securityContex",
        ),
    ] {
        let p = broken(t.path(), "kubernetes/job.yaml", from, to);
        let (ok, out) = kube_check(&p, "1.33");
        assert!(!ok, "{to:?} passed: {out}");
        assert!(out.contains(says), "{to:?}: {out}");
    }
    // Its cells: completions equals the number of CELLS.
    let d = tekton::load(&job);
    let j = d.iter().find(|x| x["kind"] == "Job").unwrap();
    let c = &j["spec"]["template"]["spec"]["containers"][0];
    let cells = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "CELLS")
        .unwrap()["value"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .count();
    assert_eq!(j["spec"]["completions"].as_u64(), Some(cells as u64));
}

/// The Pipeline's params, defaults filled, with `given`.
fn pipeline_params(p: &Value, given: &[(&str, P)]) -> Params {
    let g: Params = given
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    tekton::task_params(p, &g)
}

fn s(v: &str) -> P {
    P::S(v.to_string())
}
fn a(v: &[&str]) -> P {
    P::A(v.iter().map(|x| x.to_string()).collect())
}

/// Run `step` with this machine's sh: `bootimage-gen` on PATH is the real
/// binary with --dry-run appended (so nothing is built or pushed), its
/// arguments recorded. Gives (the arguments, the sh's output).
fn run_step(step: &tekton::Step, dir: &Path, cache: &Path) -> (Vec<String>, String) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let argv = dir.join("argv");
    std::fs::write(
        bin.join("bootimage-gen"),
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\nexec '{}' \"$@\" --dry-run > /dev/null\n",
            argv.display(),
            env!("CARGO_BIN_EXE_bootimage-gen")
        ),
    )
    .unwrap();
    must(
        Command::new("chmod")
            .arg("+x")
            .arg(bin.join("bootimage-gen")),
    );
    let o = Command::new("sh")
        .arg("-c")
        .arg(&step.script)
        .arg("sh")
        .args(&step.args)
        .envs(step.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env(
            "PATH",
            format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display()),
        )
        .env("BOOTIMAGE_GEN_CACHE_DIR", cache)
        .env("HOME", cache)
        .output()
        .unwrap();
    let log = format!("{}{}", stdout(&o), stderr(&o));
    assert!(o.status.success(), "step {}: {log}", step.name);
    let args = std::fs::read_to_string(&argv)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    (args, log)
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn pipeline_cells_run_the_generate_step_the_tool_accepts() {
    let pipeline = tekton::doc("tekton/pipeline.yaml", "Pipeline");
    let task = tekton::doc("tekton/task-generate.yaml", "Task");
    let publish = tekton::doc("tekton/task-publish.yaml", "Task");
    let tasks = pipeline["spec"]["tasks"].as_array().unwrap();
    let gen = tasks.iter().find(|t| t["name"] == "generate").unwrap();
    let pubt = tasks.iter().find(|t| t["name"] == "publish").unwrap();
    assert_eq!(gen["taskRef"]["name"], task["metadata"]["name"]);
    assert_eq!(pubt["taskRef"]["name"], publish["metadata"]["name"]);
    assert_eq!(pubt["runAfter"], serde_json::json!(["generate"]));
    // Every workspace a pipeline task binds is its Task's and the Pipeline's.
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|w| w["name"].as_str().unwrap().to_string())
            .collect()
    };
    let pws = names(&pipeline["spec"]["workspaces"]);
    for (pt, t) in [(gen, &task), (pubt, &publish)] {
        let tws = names(&t["spec"]["workspaces"]);
        for w in pt["workspaces"].as_array().unwrap() {
            assert!(
                tws.contains(&w["name"].as_str().unwrap().to_string()),
                "{w}"
            );
            assert!(
                pws.contains(&w["workspace"].as_str().unwrap().to_string()),
                "{w}"
            );
        }
    }
    let cache = scratch("deploy-cache");
    let t = tempfile::tempdir().unwrap();
    let auth = t.path().join("auth");
    std::fs::create_dir_all(&auth).unwrap();
    std::fs::write(auth.join(".dockerconfigjson"), r#"{"auths":{}}"#).unwrap();
    let mut n = 0;
    for (release, arches, streams, mode, want_cells) in [
        (
            oci("release-multi"),
            a(&["x86_64", "aarch64"]),
            a(&[""]),
            "loopback",
            2,
        ),
        (
            oci("release-ocp5"),
            a(&["x86_64"]),
            a(&["rhel-9", "rhel-10"]),
            "nokvm",
            2,
        ),
    ] {
        let pp = pipeline_params(
            &pipeline,
            &[
                ("release", s(&release)),
                ("arches", arches),
                ("os-streams", streams),
                ("mode", s(mode)),
                ("ref", s("registry.example:5000/ocp/bootimages:4.18.0")),
            ],
        );
        let cells = tekton::cells(gen, &pp);
        assert_eq!(cells.len(), want_cells);
        for cell in cells {
            n += 1;
            let dir = t.path().join(format!("cell{n}"));
            let out = dir.join("out");
            std::fs::create_dir_all(&out).unwrap();
            let params = tekton::task_params(&task, &cell);
            let ws: BTreeMap<String, Option<PathBuf>> = [
                ("output".to_string(), Some(out.clone())),
                ("registry-auth".to_string(), Some(auth.clone())),
                ("cache".to_string(), None),
                ("certs".to_string(), None),
            ]
            .into();
            let steps = tekton::steps(&task, &params, &ws, &dir);
            // Exactly the mode's step runs, privileged only for loopback.
            assert_eq!(steps.len(), 1, "{steps:?}");
            assert_eq!(steps[0].name, format!("generate-{mode}"));
            assert_eq!(steps[0].privileged, mode == "loopback");
            let (args, log) = run_step(&steps[0], &dir, &cache);
            let P::S(arch) = &cell["arch"] else { panic!() };
            let P::S(stream) = &cell["os-stream"] else {
                panic!()
            };
            let mut want: Vec<String> = [
                "generate",
                release.as_str(),
                "metal",
                "live",
                "qemu",
                "--backend",
                mode,
                "-o",
            ]
            .iter()
            .map(|x| x.to_string())
            .collect();
            want.push(out.join("build").display().to_string());
            want.extend(
                [
                    "--push",
                    "registry.example:5000/ocp/bootimages:4.18.0",
                    "--progress",
                    "plain",
                    "--arch",
                    arch.as_str(),
                ]
                .map(String::from),
            );
            if !stream.is_empty() {
                want.extend(["--os-stream".to_string(), stream.clone()]);
            }
            want.extend([
                "--registry-config".to_string(),
                auth.join(".dockerconfigjson").display().to_string(),
            ]);
            assert_eq!(args, want, "{log}");
        }
    }
    // The publish step's pull, with its flags as the tool takes them.
    let pp = pipeline_params(
        &pipeline,
        &[
            ("release", s("x")),
            ("ref", s("registry.example:5000/ocp/bootimages:4.18.0")),
            ("base-url", s("http://mirror/rhcos")),
        ],
    );
    let cell = tekton::cells(pubt, &pp).remove(0);
    let params = tekton::task_params(&publish, &cell);
    let ws: BTreeMap<String, Option<PathBuf>> = [
        ("site".to_string(), Some(t.path().join("site"))),
        ("registry-auth".to_string(), None),
        ("certs".to_string(), None),
    ]
    .into();
    let steps = tekton::steps(&publish, &params, &ws, t.path());
    assert_eq!(steps.len(), 1);
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_bootimage-gen"))
        .parent()
        .unwrap();
    let o = Command::new("sh")
        .arg("-c")
        .arg(&steps[0].script)
        .envs(steps[0].env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
        .env("HOME", t.path())
        .output()
        .unwrap();
    // Nothing listens at registry.example: the tool got as far as the
    // registry, so every flag parsed.
    let e = stderr(&o);
    assert!(!o.status.success(), "{e}");
    assert!(e.contains("registry.example"), "{e}");
    assert!(!e.contains("unexpected argument"), "{e}");
}
