//! Registry faults (privileged tier: the fixture release; about 25 s):
//! `inspect` of the test release through a fault-injecting proxy
//! (tests/system/common/faults.rs) in front of the test registry, one fault kind
//! at a time on the release's manifests layer: a connection reset mid-blob,
//! 503, 429 with Retry-After, and a stalled connection. Transient faults are
//! retried with backoff and the run succeeds; faults that persist past the
//! budget, and a stall, end the run with one line naming the blob, the
//! registry and the cause.
use crate::common::faults::{Fault, FaultProxy};
use crate::common::*;
use std::process::Command;
use std::time::{Duration, Instant};

struct Outcome {
    ok: bool,
    stderr: String,
    took: Duration,
    hits: Vec<(Instant, bool)>,
}

fn inspect(
    reg: &Registry,
    blob: &str,
    fault: Fault,
    count: usize,
    env: &[(&str, &str)],
) -> Outcome {
    let proxy = FaultProxy::start(reg.port, blob, fault, count);
    let cache = tempfile::tempdir().unwrap();
    let rel = format!("{}/ocp/release:4.18.0-test", proxy.host());
    let t = Instant::now();
    // Bounded: a run that never ends (a panic whose runtime waited for
    // ever on skopeo) fails here in two minutes, not at the suite's limit.
    let o = Command::new("timeout")
        .args(["--kill-after=5", "120"])
        .arg(env!("CARGO_BIN_EXE_bootimage-gen"))
        .args(["inspect", &rel, "--insecure"])
        .env("BOOTIMAGE_GEN_CACHE_DIR", cache.path())
        .env("HOME", cache.path())
        .env_remove("REGISTRY_AUTH_FILE")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let took = t.elapsed();
    let hits = proxy.hits.lock().unwrap().clone();
    drop(proxy);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        !matches!(o.status.code(), Some(124) | Some(137)),
        "{fault:?} x{count}: inspect did not end within 120 s\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{fault:?} x{count}: {stderr}");
    eprintln!(
        "--- {fault:?} x{count}: {} in {took:.1?}, {} GETs of the blob ({} faulted)\n{stderr}",
        if o.status.success() { "ok" } else { "failed" },
        hits.len(),
        hits.iter().filter(|h| h.1).count()
    );
    Outcome {
        ok: o.status.success(),
        stderr,
        took,
        hits,
    }
}

fn error_line(o: &Outcome) -> String {
    let lines: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("error"))
        .collect();
    assert_eq!(lines.len(), 1, "one error line expected:\n{}", o.stderr);
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    lines[0].to_string()
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn registry_faults_are_retried_then_reported() {
    let reg = Registry::start(false);
    reg.push(&oci("release"), "ocp/release:4.18.0-test");
    reg.push(&oci("rhel-coreos"), "ocp/release:rhel-coreos");
    let m = fixture_manifest("release");
    let blob = m["layers"].as_array().unwrap().last().unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let fast = [("BOOTIMAGE_GEN_FETCH_RETRY_SECS", "30")];

    // Reset mid-blob, twice: retried (by containers/image's resume or our
    // loop), then succeeds.
    let o = inspect(&reg, &blob, Fault::ResetMidBlob, 2, &fast);
    assert!(o.ok, "{}", o.stderr);
    assert!(o.hits.len() >= 3, "{} GETs", o.hits.len());

    // 503 twice: our backoff (1 s, 2 s), then success.
    let o = inspect(&reg, &blob, Fault::Status5xx, 2, &fast);
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(o.hits.len(), 3);
    assert!(o.stderr.contains("retrying in"), "{}", o.stderr);
    assert!(o.hits[2].0 - o.hits[0].0 >= Duration::from_secs(3));

    // 503 for good: retried within the budget, then one line naming the
    // blob, the registry and the cause.
    let o = inspect(
        &reg,
        &blob,
        Fault::Status5xx,
        usize::MAX,
        &[("BOOTIMAGE_GEN_FETCH_RETRY_SECS", "6")],
    );
    assert!(!o.ok);
    let e = error_line(&o);
    for want in [
        blob.as_str(),
        "gave up after",
        "from registry 127.0.0.1:",
        "503",
    ] {
        assert!(e.contains(want), "{want:?} not in: {e}");
    }
    assert!(o.hits.len() >= 3, "{} GETs", o.hits.len());
    assert!(o.took < Duration::from_secs(30), "{:?}", o.took);

    // 429 with Retry-After: 2: waited as asked, then success.
    let o = inspect(&reg, &blob, Fault::TooMany(2), 1, &fast);
    assert!(o.ok, "{}", o.stderr);
    assert!(o.hits.len() >= 2);
    let gap = o.hits[1].0 - o.hits[0].0;
    eprintln!("429: next GET after {gap:?}");
    assert!(
        gap >= Duration::from_millis(1900),
        "Retry-After not honoured: {gap:?}"
    );

    // A stall mid-blob: ended after the stall time, reported.
    let o = inspect(
        &reg,
        &blob,
        Fault::Stall,
        1,
        &[("BOOTIMAGE_GEN_FETCH_STALL_SECS", "3")],
    );
    assert!(o.took < Duration::from_secs(30), "{:?}", o.took);
    if !o.ok {
        let e = error_line(&o);
        for want in [blob.as_str(), "stalled", "from registry 127.0.0.1:"] {
            assert!(e.contains(want), "{want:?} not in: {e}");
        }
    }
}
