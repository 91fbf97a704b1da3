//! The test tiers' one gating mechanism, checked from the sources
//! (docs/testing.md "Tiers"): every test of the `system` binary carries
//! exactly one tier gate where it is declared,
//! `#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]`
//! or the same with `boot` (or, run only on request, an `#[ignore = "..."]`
//! whose reason starts with its tier); no test of the `fast` binary carries
//! one; no other feature gate (`required-features`, `#[cfg(feature)]`,
//! `#![cfg(feature)]`) is left; every test file is a module of one of the
//! two binaries, so none is compiled as a binary of its own or silently
//! not at all. A test that boots without the boot gate is refused at run
//! time by the boot harness (tests/system/common/boot.rs).
use std::path::{Path, PathBuf};

const PRIVILEGED: &str =
    r#"#[cfg_attr(not(feature = "privileged"), ignore = "needs --features privileged")]"#;
const BOOT: &str = r#"#[cfg_attr(not(feature = "boot"), ignore = "needs --features boot")]"#;

fn top() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// A test function: its name, line and attributes (whitespace removed).
struct Test {
    name: String,
    line: usize,
    attrs: String,
}

/// The `#[test]` functions of `src`: each `fn` line with the attribute and
/// doc lines right above it, one of which is `#[test]`.
fn tests_in(src: &str) -> Vec<Test> {
    let lines: Vec<&str> = src.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let Some(rest) = t
            .strip_prefix("fn ")
            .or_else(|| t.strip_prefix("async fn "))
        else {
            continue;
        };
        let mut attrs = Vec::new();
        let mut j = i;
        while j > 0 {
            let a = lines[j - 1].trim();
            let attr_like = a.starts_with("#[")
                || a.starts_with("//")
                || a.ends_with(',')
                || a.ends_with('(')
                || a == ")]";
            if a.is_empty() || !attr_like {
                break;
            }
            if !a.starts_with("//") {
                attrs.push(a);
            }
            j -= 1;
        }
        attrs.reverse();
        let attrs = squash(&attrs.join(""));
        if attrs.contains("#[test]") {
            let name = rest.split(['(', '<']).next().unwrap().to_string();
            out.push(Test {
                name,
                line: i + 1,
                attrs,
            });
        }
    }
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(top()).unwrap_or(p).display().to_string()
}

/// The test files of binary `bin` (tests/BIN), its support code aside.
fn modules(bin: &str) -> Vec<PathBuf> {
    rust_files(&top().join("tests").join(bin))
        .into_iter()
        .filter(|p| !p.components().any(|c| c.as_os_str() == "common"))
        .collect()
}

#[test]
fn every_system_test_carries_exactly_one_tier_gate() {
    let (privileged, boot) = (squash(PRIVILEGED), squash(BOOT));
    let mut bad = Vec::new();
    let (mut n, mut per_tier) = (0, [0usize; 3]);
    for f in modules("system") {
        for t in tests_in(&std::fs::read_to_string(&f).unwrap()) {
            n += 1;
            let gates = [
                t.attrs.matches(&privileged).count(),
                t.attrs.matches(&boot).count(),
                // Run only on request: the reason names the tier.
                usize::from(
                    t.attrs.contains("#[ignore=\"privilegedtier")
                        || t.attrs.contains("#[ignore=\"boottier"),
                ),
            ];
            let ignores = t.attrs.matches("ignore=").count() + t.attrs.matches("#[ignore]").count();
            if gates.iter().sum::<usize>() != 1 || ignores != 1 {
                bad.push(format!("{}:{} {}", rel(&f), t.line, t.name));
            } else {
                per_tier[gates.iter().position(|&g| g == 1).unwrap()] += 1;
            }
        }
    }
    assert!(
        bad.is_empty(),
        "system tests without exactly one tier gate ({PRIVILEGED} or {BOOT}):\n{}",
        bad.join("\n")
    );
    assert!(n > 200, "only {n} tests found under tests/system");
    eprintln!(
        "tiers: {n} system tests: {} privileged, {} boot, {} run only on request",
        per_tier[0], per_tier[1], per_tier[2]
    );
}

#[test]
fn no_fast_test_is_gated_or_ignored() {
    let mut bad = Vec::new();
    let mut n = 0;
    for f in modules("fast") {
        for t in tests_in(&std::fs::read_to_string(&f).unwrap()) {
            n += 1;
            if t.attrs.contains("ignore") || t.attrs.contains("cfg") {
                bad.push(format!("{}:{} {}", rel(&f), t.line, t.name));
            }
        }
    }
    assert!(bad.is_empty(), "gated fast tests:\n{}", bad.join("\n"));
    assert!(n > 20, "only {n} tests found under tests/fast");
}

#[test]
fn the_tier_gate_is_the_only_feature_gate_of_the_tests() {
    let mut bad = Vec::new();
    for f in rust_files(&top().join("tests")) {
        if f.ends_with("tests/fast/tiers.rs") {
            continue; // this file names what it looks for
        }
        let src = std::fs::read_to_string(&f).unwrap();
        // The gates themselves (and the doc lines quoting them) aside,
        // nothing under tests/ depends on a feature.
        let rest = squash(&src)
            .replace(&squash(PRIVILEGED), "")
            .replace(&squash(BOOT), "");
        if rest.contains("cfg(feature") || rest.contains("cfg!(feature") {
            bad.push(rel(&f));
        }
    }
    assert!(
        bad.is_empty(),
        "feature gates besides the tier gate in:\n{}",
        bad.join("\n")
    );
    let manifest = std::fs::read_to_string(top().join("Cargo.toml")).unwrap();
    assert!(
        !manifest.contains("required-features"),
        "Cargo.toml gates a target with required-features"
    );
}

#[test]
fn every_test_file_is_a_module_of_one_of_the_two_binaries() {
    let mut bad: Vec<String> = std::fs::read_dir(top().join("tests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| format!("{}: a test binary of its own", rel(&p)))
        .collect();
    for bin in ["fast", "system"] {
        let dir = top().join("tests").join(bin);
        let main = std::fs::read_to_string(dir.join("main.rs")).unwrap();
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            let module = p.extension().is_some_and(|x| x == "rs") || p.is_dir();
            if module && name != "main" && !main.contains(&format!("mod {name};")) {
                bad.push(format!("{}: not a module of tests/{bin}/main.rs", rel(&p)));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
