//! scripts/target-cache.sh, the compiled-dependency cache every target that
//! compiles runs (`make demo`, `make test`, ...), against the cache roots a
//! user's machine can have: missing, empty, holding another key's entry, a
//! corrupt or half-written entry, foreign files; and two runs at once. Each
//! case runs the real script on a fake clone (a Cargo.toml, a Cargo.lock and
//! a target/release of a few files) with its own cache root, so it needs no
//! root and compiles nothing: the fast tier.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The real scripts the clone runs.
const SCRIPTS: &[&str] = &["target-cache.sh", "cache-root.sh", "step.sh"];

struct Clone {
    dir: PathBuf,
    root: PathBuf,
}

/// A fake clone at `dir` whose cache root is `root`, with a compiled
/// target/release: one dependency (`foo`) and the workspace's own crate.
fn clone(dir: &Path, root: &Path) -> Clone {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    fs::create_dir_all(dir.join("scripts")).unwrap();
    for s in SCRIPTS {
        fs::copy(src.join(s), dir.join("scripts").join(s)).unwrap();
    }
    fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"bootimage-gen\"\n\n[features]\nboot = []\n\n[dependencies]\n",
    )
    .unwrap();
    fs::write(dir.join("Cargo.lock"), "version = 3\n").unwrap();
    let rel = dir.join("target/release");
    for (f, body) in [
        ("deps/libfoo-0123abcd.rlib", "foo's rlib"),
        ("deps/foo-0123abcd.d", "foo's deps"),
        (
            "build/foo-0123abcd/output",
            "cargo:rerun-if-changed=build.rs",
        ),
        (".fingerprint/foo-0123abcd/lib-foo", "fp"),
        ("deps/bootimage_gen-feed0001", "our own binary"),
        (
            ".fingerprint/bootimage-gen-feed0001/bin-bootimage-gen",
            "fp",
        ),
    ] {
        let p = rel.join(f);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, body).unwrap();
    }
    Clone {
        dir: dir.to_path_buf(),
        root: root.to_path_buf(),
    }
}

impl Clone {
    fn run(&self, what: &str) -> Output {
        Command::new("bash")
            .arg(self.dir.join("scripts/target-cache.sh"))
            .arg(what)
            .env("BOOTIMAGE_TARGET_CACHE", &self.root)
            .env_remove("BOOTIMAGE_CACHE")
            .output()
            .unwrap()
    }
    /// Runs `what`, which must exit 0; its stderr.
    fn ok(&self, what: &str) -> String {
        let o = self.run(what);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{what} failed ({}):\n{err}", o.status);
        err
    }
    fn rel(&self) -> PathBuf {
        self.dir.join("target/release")
    }
    fn forget_target(&self) {
        fs::remove_dir_all(self.dir.join("target")).unwrap();
    }
    /// What restore brought back: the dependency's files, and never the
    /// workspace's own.
    fn assert_restored(&self) {
        let rel = self.rel();
        assert_eq!(
            fs::read_to_string(rel.join("deps/libfoo-0123abcd.rlib")).unwrap(),
            "foo's rlib"
        );
        assert!(rel.join(".fingerprint/foo-0123abcd/lib-foo").is_file());
        assert!(rel.join("build/foo-0123abcd/output").is_file());
        assert!(!rel.join("deps/bootimage_gen-feed0001").exists());
        assert!(!rel.join(".fingerprint/bootimage-gen-feed0001").exists());
        self.assert_no_staging();
    }
    /// Forgets target/ and restores: a cold compile, said in one line,
    /// and nothing restored.
    fn assert_restore_is_cold(&self) -> String {
        if self.dir.join("target").exists() {
            self.forget_target();
        }
        let err = self.ok("restore");
        assert_eq!(lines_with(&err, "cold compile").len(), 1, "{err}");
        self.assert_nothing_restored();
        err
    }
    fn assert_nothing_restored(&self) {
        assert!(!self.rel().exists(), "a target/release appeared");
        self.assert_no_staging();
    }
    fn assert_no_staging(&self) {
        let left = names_starting(&self.dir.join("target"), ".restore-");
        assert!(left.is_empty(), "restore left {left:?} behind");
    }
}

/// The names in `dir` (none if it is missing) that start with `prefix`.
fn names_starting(dir: &Path, prefix: &str) -> Vec<String> {
    fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// The cache root's entries (key directories).
fn entries(root: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = fs::read_dir(root)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("release").is_dir())
        .collect();
    v.sort();
    v
}

fn one_entry(root: &Path) -> PathBuf {
    let e = entries(root);
    assert_eq!(e.len(), 1, "entries: {e:?}");
    e.into_iter().next().unwrap()
}

fn lines_with<'a>(s: &'a str, word: &str) -> Vec<&'a str> {
    s.lines().filter(|l| l.contains(word)).collect()
}

#[test]
fn missing_root_is_a_cold_compile_said_in_one_line() {
    let d = tempfile::tempdir().unwrap();
    let c = clone(&d.path().join("clone"), &d.path().join("no/such/root"));
    let err = c.assert_restore_is_cold();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!d.path().join("no").exists(), "restore made the root");
}

#[test]
fn save_into_an_empty_root_then_restore_from_it() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    fs::create_dir_all(&root).unwrap();
    let c = clone(&d.path().join("clone"), &root);
    let saved = c.ok("save");
    assert!(saved.contains("saved the compiled dependencies"), "{saved}");
    let e = one_entry(&root);
    // The MANIFEST lists the dependency and never the workspace's own.
    let m = fs::read_to_string(e.join("MANIFEST")).unwrap();
    assert!(m.contains("release/deps/libfoo-0123abcd.rlib"), "{m}");
    assert!(!m.contains("bootimage"), "{m}");
    c.forget_target();
    let err = c.ok("restore");
    assert!(err.contains(&format!("from {}", e.display())), "{err}");
    c.assert_restored();
    // A second save adds nothing and keeps the one entry.
    let again = c.ok("save");
    assert!(again.contains("nothing added"), "{again}");
    one_entry(&root);
}

#[test]
fn empty_directory_root_restores_nothing() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    fs::create_dir_all(&root).unwrap();
    let c = clone(&d.path().join("clone"), &root);
    c.assert_restore_is_cold();
}

#[test]
fn another_keys_entry_seeds_a_new_clone() {
    // The clone's path is part of the key: a clone elsewhere has another
    // key and starts from the most recent entry.
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    let a = clone(&d.path().join("a"), &root);
    a.ok("save");
    let e = one_entry(&root);
    let b = clone(&d.path().join("b"), &root);
    b.forget_target();
    let err = b.ok("restore");
    assert!(err.contains("no entry for key"), "{err}");
    assert!(err.contains(&e.display().to_string()), "{err}");
    b.assert_restored();
    // Its save makes its own key's entry beside the other.
    fs::create_dir_all(b.rel().join("deps")).unwrap();
    b.ok("save");
    assert_eq!(entries(&root).len(), 2);
}

#[test]
fn a_corrupt_entry_is_skipped_and_nothing_half_restored() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    let c = clone(&d.path().join("clone"), &root);
    c.ok("save");
    let e = one_entry(&root);
    // A file cut short (a disk that filled, a crash of the filesystem).
    fs::write(e.join("release/deps/libfoo-0123abcd.rlib"), "foo").unwrap();
    let err = c.assert_restore_is_cold();
    assert!(err.contains("files differ from its MANIFEST"), "{err}");
    // The next save replaces it (else every run would compile cold), and
    // the new entry restores.
    let c = clone(&d.path().join("clone"), &root);
    let saved = c.ok("save");
    assert!(saved.contains("replacing the corrupt entry"), "{saved}");
    c.forget_target();
    c.ok("restore");
    c.assert_restored();
}

#[test]
fn a_half_written_entry_is_skipped_then_replaced() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    let c = clone(&d.path().join("clone"), &root);
    c.ok("save");
    let e = one_entry(&root);
    // A save that was adding to the entry when it was killed, and the
    // temporary directory of another save killed before its rename.
    fs::write(e.join("ADDING"), "").unwrap();
    let stale = root.join(".save-killed");
    fs::create_dir_all(stale.join("release/deps")).unwrap();
    c.forget_target();
    let err = c.ok("restore");
    assert!(err.contains("half-written"), "{err}");
    c.assert_nothing_restored();
    let c = clone(&d.path().join("clone"), &root);
    let saved = c.ok("save");
    assert!(
        saved.contains("replacing the half-written entry"),
        "{saved}"
    );
    assert!(!stale.exists(), "a killed save's leftovers stayed");
    let e = one_entry(&root);
    assert!(!e.join("ADDING").exists());
    c.forget_target();
    c.ok("restore");
    c.assert_restored();
}

#[test]
fn foreign_files_in_the_root_are_left_alone() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    fs::create_dir_all(root.join("not-an-entry/sub")).unwrap();
    fs::write(root.join("README"), "someone else's").unwrap();
    fs::write(root.join("not-an-entry/sub/file"), "x").unwrap();
    let c = clone(&d.path().join("clone"), &root);
    c.assert_restore_is_cold();
    let c = clone(&d.path().join("clone"), &root);
    c.ok("save");
    assert!(root.join("README").is_file() && root.join("not-an-entry/sub/file").is_file());
    c.forget_target();
    c.ok("restore");
    c.assert_restored();
}

#[test]
fn an_entry_of_the_older_script_restores_and_gets_a_manifest() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    let c = clone(&d.path().join("clone"), &root);
    c.ok("save");
    let e = one_entry(&root);
    fs::remove_file(e.join("MANIFEST")).unwrap();
    c.forget_target();
    let err = c.ok("restore");
    assert!(err.contains("restoring it unchecked"), "{err}");
    c.assert_restored();
    c.ok("save");
    assert!(e.join("MANIFEST").is_file());
}

#[test]
fn three_keys_are_kept() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    for i in 0..5 {
        let c = clone(&d.path().join(format!("c{i}")), &root);
        c.ok("save");
        // Distinct mtimes to order by.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(entries(&root).len(), 3, "{:?}", entries(&root));
}

#[test]
fn two_runs_at_once() {
    // Two saves of one key, then saves of two keys beside restores: every
    // run exits 0, one whole entry per key, nothing nested or left over
    // (the older script's `mv tmp cache` moved a racing save's temporary
    // directory into the entry).
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    let a = clone(&d.path().join("a"), &root);
    for round in 0..4 {
        let outs: Vec<Output> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2).map(|_| s.spawn(|| a.run("save"))).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for o in &outs {
            assert!(
                o.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let e = one_entry(&root);
        let nested = names_starting(&e, ".save-");
        assert!(nested.is_empty(), "round {round}: {nested:?} inside {e:?}");
        assert!(e.join("MANIFEST").is_file());
    }
    let b = clone(&d.path().join("b"), &root);
    b.forget_target();
    let c = clone(&d.path().join("c"), &root);
    let (rb, sc) = std::thread::scope(|s| {
        let hb = s.spawn(|| b.run("restore"));
        let hc = s.spawn(|| c.run("save"));
        (hb.join().unwrap(), hc.join().unwrap())
    });
    assert!(
        rb.status.success(),
        "{}",
        String::from_utf8_lossy(&rb.stderr)
    );
    assert!(
        sc.status.success(),
        "{}",
        String::from_utf8_lossy(&sc.stderr)
    );
    b.assert_restored();
    assert_eq!(entries(&root).len(), 2);
    let left = names_starting(&root, ".save-");
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_failing_step_names_itself_and_its_cause() {
    // A cache root that cannot be written (a file where the root's
    // directory should be): the save fails, and says so in a line naming
    // the step and the command, not make's bare "Error 2".
    let d = tempfile::tempdir().unwrap();
    let blocker = d.path().join("blocker");
    fs::write(&blocker, "a file").unwrap();
    let c = clone(&d.path().join("clone"), &blocker.join("root"));
    let o = c.run("save");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("target-cache save: failed (exit "))
        .unwrap_or_else(|| panic!("no step line:\n{err}"));
    assert!(line.contains("mkdir"), "{line}");
    // A usage error says the usage.
    let o = c.run("bogus");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("usage:"));
}

// scripts/keyed-dir.sh, the fixtures' cache (fixtures/build.sh), through a
// driver that builds as fixtures/build.sh does: a payload, then the marker
// last, and commit.

const KEYED_DRIVER: &str = r#"set -euo pipefail
. "$1/scripts/keyed-dir.sh"
if keyed_dir_get fx "$2" "$3" done; then echo "$KEYED_OUT"; exit 0; fi
keyed_dir_begin fx "$2" "$3" done
if [ -n "$KEYED_READY" ]; then echo "$KEYED_OUT"; exit 0; fi
trap 'rm -rf "$KEYED_WORK"' EXIT
echo "built by $$" > "$KEYED_WORK/payload"
sleep "${SLOW:-0}"
[ -z "${DIE:-}" ] || kill -9 $$
: > "$KEYED_WORK/done"
keyed_dir_commit fx "$2" 7
trap - EXIT
echo "$KEYED_OUT"
"#;

/// Runs the driver for KEY under ROOT; (exit ok, stdout, stderr).
fn keyed(root: &Path, key: &str, env: &[(&str, &str)]) -> (bool, String, String) {
    let o = Command::new("bash")
        .arg("-c")
        .arg(KEYED_DRIVER)
        .arg("driver")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .arg(root)
        .arg(key)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).trim().to_string(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn builds(root: &Path) -> Vec<String> {
    names_starting(root, ".build-")
}

#[test]
fn keyed_dir_missing_root_builds_cold_then_is_cached() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("no/such/root");
    let (ok, out, err) = keyed(&root, "k1", &[]);
    assert!(ok, "{err}");
    assert_eq!(lines_with(&err, "cold").len(), 1, "{err}");
    assert_eq!(Path::new(&out), root.join("k1"));
    assert!(root.join("k1/done").is_file() && root.join("k1/payload").is_file());
    let (ok, out2, err) = keyed(&root, "k1", &[]);
    assert!(ok && out2 == out, "{err}");
    assert!(err.contains("fx: cached"), "{err}");
    assert!(!err.contains("cold"), "{err}");
}

#[test]
fn keyed_dir_empty_root_and_another_keys_entries() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    fs::create_dir_all(&root).unwrap();
    let (ok, _, err) = keyed(&root, "k1", &[]);
    assert!(ok, "{err}");
    assert_eq!(lines_with(&err, "cold").len(), 1, "{err}");
    // Another key's recent entry stays; one unused for 10 days goes.
    fs::create_dir_all(root.join("old")).unwrap();
    let ten_days = "@".to_string()
        + &(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            - 10 * 86400)
            .to_string();
    assert!(Command::new("touch")
        .args(["-d", &ten_days])
        .arg(root.join("old"))
        .status()
        .unwrap()
        .success());
    let (ok, _, err) = keyed(&root, "k2", &[]);
    assert!(ok, "{err}");
    assert!(
        root.join("k1/done").is_file(),
        "a recent entry of another key went"
    );
    assert!(
        !root.join("old").exists(),
        "an entry unused for 10 days stayed"
    );
    assert!(err.contains("pruned"), "{err}");
}

#[test]
fn keyed_dir_half_written_entries_are_built_again() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    // An entry without its marker, and a build killed mid-way.
    fs::create_dir_all(root.join("k1")).unwrap();
    fs::write(root.join("k1/payload"), "half").unwrap();
    let (ok, _, err) = keyed(&root, "k1", &[("DIE", "1")]);
    assert!(!ok, "the killed build exited 0: {err}");
    assert_eq!(builds(&root).len(), 1, "the killed build left no work dir");
    let (ok, out, err) = keyed(&root, "k1", &[]);
    assert!(ok, "{err}");
    assert!(err.contains("has no done"), "{err}");
    assert!(
        builds(&root).is_empty(),
        "leftovers stayed: {:?}",
        builds(&root)
    );
    let payload = fs::read_to_string(Path::new(&out).join("payload")).unwrap();
    assert!(payload.starts_with("built by "), "{payload}");
}

#[test]
fn keyed_dir_two_runs_at_once_build_once() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    let rs: Vec<(bool, String, String)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| s.spawn(|| keyed(&root, "k1", &[("SLOW", "1")])))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (ok, _, err) in &rs {
        assert!(ok, "{err}");
    }
    assert_eq!(rs[0].1, rs[1].1, "two runs gave two directories");
    let colds: usize = rs.iter().map(|r| lines_with(&r.2, "cold").len()).sum();
    assert_eq!(colds, 1, "built {colds} times: {rs:?}");
    assert!(rs.iter().any(|r| r.2.contains("built meanwhile")), "{rs:?}");
    assert!(builds(&root).is_empty());
}
