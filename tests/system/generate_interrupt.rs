//! Leak tests: interrupt `generate` with SIGINT/SIGTERM at known points
//! (`BOOTIMAGE_GEN_PAUSE_AT`), then check that no loop device, mount,
//! temporary file or partial artifact is left, and that a rerun succeeds.
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Loop devices whose backing file is under `dir`.
fn loops_under(dir: &Path) -> Vec<String> {
    let out = must(Command::new("losetup").args(["-l", "-n", "-O", "NAME,BACK-FILE"]));
    let d = dir.to_string_lossy().to_string();
    out.lines()
        .filter(|l| l.contains(&d))
        .map(|l| l.to_string())
        .collect()
}

/// Mount points under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let out = must(Command::new("findmnt").args(["-rn", "-o", "TARGET"]));
    let d = dir.to_string_lossy().to_string();
    out.lines()
        .filter(|l| l.starts_with(&d))
        .map(|l| l.to_string())
        .collect()
}

/// The stage's tmpfs among `mounts` (`--stage-in auto` stages in memory on
/// a machine with the room, as this one has): exactly one, or a failure.
fn stage_in_memory(mounts: &[String]) {
    let n = mounts.iter().filter(|m| m.ends_with("/stage")).count();
    assert_eq!(n, 1, "the stage's tmpfs is mounted: {mounts:?}");
}

fn files_in(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect(),
        Err(_) => vec![],
    }
}

fn args(out: &Path, cache: &Path) -> Vec<String> {
    [
        "generate",
        &oci("release"),
        "metal",
        "qemu",
        "-o",
        out.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
        "--no-ostree-archive",
        "--progress",
        "plain",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Run to `point`, check what exists there with `during`, send `signal`,
/// then check that everything is cleaned up and a rerun works.
fn interrupt_at(point: &str, signal: i32, code: i32, during: impl Fn(&Path, &Path)) {
    let root = scratch("interrupt").join(point);
    let _ = std::fs::remove_dir_all(&root);
    let (out, cache) = (root.join("out"), root.join("cache"));
    std::fs::create_dir_all(&root).unwrap();
    let paused = run_until_paused(
        Command::new(env!("CARGO_BIN_EXE_bootimage-gen")).args(args(&out, &cache)),
        point,
        Duration::from_secs(300),
    );
    during(&out, &cache);
    let (st, log) = paused.signal(signal);
    assert_eq!(
        st.code(),
        Some(code),
        "exit code after signal {signal} at {point}:\n{log}"
    );
    assert!(log.contains("interrupted"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    assert!(
        loops_under(&root).is_empty(),
        "loop devices left: {:?}",
        loops_under(&root)
    );
    assert!(
        mounts_under(&root).is_empty(),
        "mounts left: {:?}",
        mounts_under(&root)
    );
    assert!(
        files_in(&out).is_empty(),
        "output dir holds {:?}",
        files_in(&out)
    );
    assert!(
        files_in(&cache.join("tmp")).is_empty(),
        "cache tmp holds {:?}",
        files_in(&cache.join("tmp"))
    );
    // A rerun succeeds.
    let o = Command::new(env!("CARGO_BIN_EXE_bootimage-gen"))
        .args(args(&out, &cache))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "rerun after interrupt at {point}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let names = files_in(&out);
    assert!(
        names.iter().any(|n| n.ends_with("metal.x86_64.raw.gz")),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n.ends_with("qemu.x86_64.qcow2.gz")),
        "{names:?}"
    );
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    assert!(loops_under(&root).is_empty() && mounts_under(&root).is_empty());
    std::fs::remove_dir_all(&root).ok();
}

fn work_dirs(cache: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(cache.join("tmp"))
        .map(|r| r.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn sigint_while_making_filesystems() {
    interrupt_at("mkfs", libc::SIGINT, 130, |_, cache| {
        assert_eq!(
            loops_under(cache).len(),
            1,
            "the root loop device exists at this point"
        );
        assert_eq!(work_dirs(cache).len(), 1);
    });
}

/// Between the stage and the base disk's filesystems (docs/contract.md §9):
/// the staged root mounted, its loop device and the base disk's root
/// partition's attached; all released, nothing left.
#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn sigint_while_making_the_filesystems_from_the_stage() {
    interrupt_at("mkfs-from-stage", libc::SIGINT, 130, |_, cache| {
        let m = mounts_under(cache);
        stage_in_memory(&m);
        assert_eq!(
            m.len(),
            2,
            "the stage's tmpfs and the staged root are mounted at this point: {m:?}"
        );
        assert_eq!(
            loops_under(cache).len(),
            1,
            "the staged root's loop device exists at this point (mkfs writes a file)"
        );
    });
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn sigint_during_deploy() {
    interrupt_at("deploy", libc::SIGINT, 130, |_, cache| {
        let m = mounts_under(cache);
        stage_in_memory(&m);
        assert_eq!(
            m.len(),
            3,
            "the stage's tmpfs, root and boot are mounted at this point: {m:?}"
        );
        assert_eq!(loops_under(cache).len(), 2);
    });
}

#[test]
#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]
fn sigterm_during_encoding() {
    interrupt_at("encode", libc::SIGTERM, 143, |out, _| {
        let f = files_in(out);
        assert!(
            f.iter().any(|n| n.ends_with(".partial")),
            "a partial artifact exists at this point: {f:?}"
        );
    });
}
