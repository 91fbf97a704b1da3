//! Build script: records the git commit for `--version`.
//!
//! `BOOTIMAGE_GEN_GIT_COMMIT` in the environment wins (the container build
//! passes it, since its build context has no `.git`); else `git rev-parse
//! --short HEAD`; else "unknown" (a source tarball, no git installed).
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=BOOTIMAGE_GEN_GIT_COMMIT");
    let commit = std::env::var("BOOTIMAGE_GEN_GIT_COMMIT")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=BOOTIMAGE_GEN_GIT_COMMIT={}", commit.trim());
}

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git").args(args).output().ok()?;
    if !o.status.success() {
        return None;
    }
    Some(String::from_utf8(o.stdout).ok()?.trim().to_string()).filter(|s| !s.is_empty())
}

fn git_commit() -> Option<String> {
    let commit = git(&["rev-parse", "--short", "HEAD"])?;
    // Rebuild when HEAD moves: HEAD itself, the branch it points at, and
    // packed refs (where a branch lives after `git gc`).
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        let dir = Path::new(&dir);
        let mut watch = vec![dir.join("HEAD"), dir.join("packed-refs")];
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch.push(dir.join(r));
        }
        // Only files that exist: a missing one would rerun this script,
        // and so rebuild the crate, on every build.
        for p in watch.iter().filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    Some(commit)
}
