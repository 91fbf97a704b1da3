//! Runs sharing one cache (privileged tier; about a minute on 2 cores):
//! 8 `generate` runs of different platforms into different output
//! directories, started together on one empty cache, all succeed and the
//! OS is imported once (the others wait on the import lock, saying for
//! whom, and reuse it); a second run into an output directory in use is
//! refused at once, naming the first's PID.
use crate::common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PLATFORMS: [&str; 8] = [
    "metal",
    "metal4k",
    "qemu",
    "openstack",
    "aws",
    "azure",
    "gcp",
    "nutanix",
];

fn root() -> std::path::PathBuf {
    let d = scratch("concurrency-tests");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn generate(cache: &std::path::Path, platform: &str, out: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bootimage-gen"));
    c.args(["generate", &oci("release"), platform, "-o"])
        .arg(out)
        .args(["--progress", "plain", "--compress", "zstd"])
        .env("BOOTIMAGE_GEN_CACHE_DIR", cache)
        .env("HOME", cache)
        .env_remove("REGISTRY_AUTH_FILE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn eight_runs_share_one_empty_cache() {
    let _ = fixture();
    let root = root().join("eight");
    let _ = std::fs::remove_dir_all(&root);
    let cache = root.join("cache");
    let t = Instant::now();
    let children: Vec<_> = PLATFORMS
        .iter()
        .map(|p| {
            let out = root.join(format!("out-{p}"));
            (p, out.clone(), generate(&cache, p, &out).spawn().unwrap())
        })
        .collect();
    let mut imported = 0;
    let mut reused = 0;
    let mut waited = 0;
    for (p, out, c) in children {
        let o = c.wait_with_output().unwrap();
        let log = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "generate {p} failed:\n{log}");
        assert!(out.join("meta.json").exists(), "{p}: no meta.json");
        let sums = Command::new("sha256sum")
            .args(["-c", "--quiet", "SHA256SUMS"])
            .current_dir(&out)
            .status()
            .unwrap();
        assert!(sums.success(), "{p}: sha256sum -c failed");
        imported += log.matches(": imported commit ").count();
        reused += log.matches("another run imported commit").count()
            + log.matches("reusing the cached import").count();
        for l in log.lines().filter(|l| l.starts_with("waiting for PID ")) {
            // Says for whom: the PID and what it does.
            assert!(
                l.contains("importing OS image sha256:")
                    || l.contains("creating the cache's ostree repo"),
                "{l}"
            );
        }
        if log
            .lines()
            .any(|l| l.starts_with("waiting for PID ") && l.contains("importing OS image"))
        {
            waited += 1;
        }
    }
    eprintln!(
        "8 concurrent runs in {:.1} s: OS imported {imported} time(s), reused by {reused}, {waited} of them waited on the import lock",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(imported, 1, "the OS must be imported exactly once");
    assert_eq!(reused, 7);
    assert_cache_clean(&cache);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn second_run_into_one_output_dir_is_refused() {
    let _ = fixture();
    let root = root().join("same-out");
    let _ = std::fs::remove_dir_all(&root);
    let (cache, out) = (root.join("cache"), root.join("out"));
    let mut first = generate(&cache, "metal", &out).spawn().unwrap();
    // Wait until the first run holds the directory (it creates it first).
    let t = Instant::now();
    while !out.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "first run never created its output"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    let o = generate(&root.join("cache2"), "qemu", &out)
        .output()
        .unwrap();
    let took = t.elapsed();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let status = first.try_wait().unwrap();
    assert!(
        status.is_none(),
        "the first run ended too soon to test: {status:?}"
    );
    assert_eq!(o.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line expected:\n{err}");
    assert!(
        lines[0].contains(&format!("is in use by bootimage-gen PID {}", first.id())),
        "{err}"
    );
    eprintln!("refused in {took:?}: {}", lines[0]);
    assert!(
        took < Duration::from_secs(5),
        "not refused at once: {took:?}"
    );
    let o = first.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let _ = std::fs::remove_dir_all(&root);
}
