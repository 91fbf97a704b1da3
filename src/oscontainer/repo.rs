//! The local ostree repo the OS is imported into, read through the `ostree`
//! CLI (the standard tool; it works unprivileged on a bare-user repo).
use crate::util::cmd;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// An ostree repository on disk.
#[derive(Debug, Clone)]
pub struct Repo {
    pub path: PathBuf,
}

impl Repo {
    /// Open `path`, creating it in `mode` when absent.
    pub fn open_or_create(path: &Path, mode: &str) -> Result<Self> {
        if !path.join("config").is_file() {
            std::fs::create_dir_all(path)
                .with_context(|| format!("creating {}", path.display()))?;
            cmd::run(&mut cmd::new(
                "ostree",
                [
                    "init",
                    &format!("--repo={}", path.display()),
                    &format!("--mode={mode}"),
                ],
            ))
            .with_context(|| format!("creating ostree repo {}", path.display()))?;
        }
        Ok(Repo {
            path: path.to_path_buf(),
        })
    }

    fn ostree(&self, args: &[&str]) -> std::process::Command {
        let mut c = cmd::new("ostree", [format!("--repo={}", self.path.display())]);
        c.args(args);
        c
    }

    /// True if the commit object is present.
    pub fn has_commit(&self, commit: &str) -> bool {
        cmd::run(&mut self.ostree(&["show", commit])).is_ok()
    }

    /// Resolve a ref or commit to a checksum.
    pub fn rev_parse(&self, rev: &str) -> Result<String> {
        cmd::run_str(&mut self.ostree(&["rev-parse", rev]))
    }

    /// Point `refname` at `commit` (replacing any previous value).
    pub fn set_ref(&self, refname: &str, commit: &str) -> Result<()> {
        let _ = cmd::run(&mut self.ostree(&["refs", "--delete", refname]));
        cmd::run(&mut self.ostree(&["refs", &format!("--create={refname}"), commit]))
            .with_context(|| format!("setting ref {refname} in {}", self.path.display()))?;
        Ok(())
    }

    /// What a checkout of `commit` occupies on a filesystem with 4 KiB
    /// blocks: each distinct file object once (a deployment hardlinks them),
    /// rounded up to blocks, plus a block per directory.
    pub fn content_size(&self, commit: &str) -> Result<ContentSize> {
        let out = cmd::run(&mut self.ostree(&["ls", "-R", "-C", commit, "/"]))
            .with_context(|| format!("listing commit {commit}"))?;
        parse_content_size(&String::from_utf8_lossy(&out))
    }

    /// Copy a commit from another repo, verifying every object.
    pub fn pull_local(&self, src: &Path, commit: &str) -> Result<()> {
        cmd::run(&mut self.ostree(&[
            "pull-local",
            "--untrusted",
            &src.display().to_string(),
            commit,
        ]))
        .with_context(|| format!("importing commit {commit} from {}", src.display()))?;
        Ok(())
    }

    /// A commit metadata string (`None` when absent).
    pub fn metadata_string(&self, commit: &str, key: &str) -> Result<Option<String>> {
        match cmd::run_str(&mut self.ostree(&[
            "show",
            &format!("--print-metadata-key={key}"),
            commit,
        ])) {
            Ok(s) => Ok(Some(unquote_gvariant(&s))),
            Err(e) if format!("{e:#}").contains("No such metadata key") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Commit timestamp (seconds since the epoch).
    pub fn timestamp(&self, commit: &str) -> Result<i64> {
        let out = cmd::run_str(&mut self.ostree(&["show", commit]))?;
        for line in out.lines() {
            if let Some(d) = line.strip_prefix("Date:") {
                let d = d.trim();
                let t = chrono::DateTime::parse_from_str(d, "%Y-%m-%d %H:%M:%S %z")
                    .with_context(|| format!("parsing commit date '{d}'"))?;
                return Ok(t.timestamp());
            }
        }
        bail!("no Date in `ostree show {commit}`")
    }

    /// Contents of a file in a commit (`None` when absent).
    pub fn read_file(&self, commit: &str, path: &str) -> Result<Option<Vec<u8>>> {
        match cmd::run(&mut self.ostree(&["cat", commit, path])) {
            Ok(b) => Ok(Some(b)),
            Err(e) => {
                let m = format!("{e:#}");
                if m.contains("No such file")
                    || m.contains("not found")
                    || m.contains("Not a regular file")
                {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Entries of a directory in a commit: (is_dir, name). `None` when absent.
    pub fn list_dir(&self, commit: &str, path: &str) -> Result<Option<Vec<(bool, String)>>> {
        let out = match cmd::run_str(&mut self.ostree(&["ls", commit, path])) {
            Ok(o) => o,
            Err(e) => {
                if format!("{e:#}").contains("No such file") {
                    return Ok(None);
                }
                return Err(e);
            }
        };
        let base = path.trim_end_matches('/');
        let mut v = Vec::new();
        for line in out.lines() {
            // "d00755 0 0      0 /usr/lib/modules/6.1.0"
            let mut it = line.split_whitespace();
            let mode = it.next().unwrap_or("");
            let Some(p) = it.nth(3) else { continue };
            if p == base {
                continue;
            }
            let name = p.rsplit('/').next().unwrap_or(p).to_string();
            v.push((mode.starts_with('d'), name));
        }
        Ok(Some(v))
    }
}

/// `'text'` (GVariant text form) → `text`.
fn unquote_gvariant(s: &str) -> String {
    let s = s.trim();
    if s.len() >= 2
        && ((s.starts_with('\'') && s.ends_with('\'')) || (s.starts_with('"') && s.ends_with('"')))
    {
        s[1..s.len() - 1].replace("\\'", "'")
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod size_tests {
    #[test]
    fn content_size_counts_objects_once() {
        let l = "d00755 0 0      0 aa bb /\n-00644 0 0   5000 c1 /a\n-00644 0 0   5000 c1 /b\nl00777 0 0 0 c3 /l -> a\n-00755 0 0 1 c2 /x\n";
        let c = super::parse_content_size(l).unwrap();
        assert_eq!((c.files, c.dirs, c.bytes), (2, 1, 4096 + 8192 + 4096));
        assert!(super::parse_content_size("garbage").is_err());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn unquote() {
        assert_eq!(super::unquote_gvariant("'418.94.1'"), "418.94.1");
        assert_eq!(super::unquote_gvariant("plain"), "plain");
    }
}

/// Size of a commit's content; see [`Repo::content_size`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ContentSize {
    pub bytes: u64,
    pub files: u64,
    pub dirs: u64,
}

/// Parse `ostree ls -R -C` lines: `<type+mode> <uid> <gid> <size> <checksum...> <path>`.
pub fn parse_content_size(listing: &str) -> Result<ContentSize> {
    const BLOCK: u64 = 4096;
    let mut seen = std::collections::HashSet::new();
    let mut c = ContentSize::default();
    for line in listing.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 {
            bail!("unexpected `ostree ls` line: {line}");
        }
        match f[0].chars().next() {
            Some('d') => {
                c.dirs += 1;
                c.bytes += BLOCK;
            }
            Some('-') => {
                let size: u64 = f[3]
                    .parse()
                    .with_context(|| format!("size in `ostree ls` line: {line}"))?;
                if seen.insert(f[4].to_string()) {
                    c.files += 1;
                    c.bytes += size.div_ceil(BLOCK) * BLOCK;
                }
            }
            _ => {}
        }
    }
    Ok(c)
}
