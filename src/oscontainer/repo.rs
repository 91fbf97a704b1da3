//! The local ostree repo the OS is imported into. Its files, directories
//! and commit metadata are read through libostree (the `ostree` crate, as
//! ostree-ext reads it), so "absent" is an error kind, not a message; the
//! repo is created, listed whole, pulled into and given refs with the
//! `ostree` CLI (the standard tool; it works unprivileged on a bare-user
//! repo).
use crate::util::cmd;
use anyhow::{bail, Context, Result};
use ostree_ext::gio::{self, prelude::*};
use ostree_ext::{glib, ostree};
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

    /// A commit metadata string (`None` when absent; an error when the key
    /// holds something else).
    pub fn metadata_string(&self, commit: &str, key: &str) -> Result<Option<String>> {
        let what = || format!("commit {commit} in {}", self.path.display());
        let (v, _) = self.load_commit(commit)?;
        // A commit is (a{sv} metadata, ...); the metadata is its first child.
        let meta = glib::VariantDict::new(Some(&v.child_value(0)));
        match meta.lookup_value(key, None) {
            None => Ok(None),
            Some(val) => match val.str() {
                Some(s) => Ok(Some(s.to_string())),
                None => bail!(
                    "{}: metadata key {key} is {} ({}), not a string",
                    what(),
                    val.type_(),
                    val.print(true)
                ),
            },
        }
    }

    /// Commit timestamp (seconds since the epoch).
    pub fn timestamp(&self, commit: &str) -> Result<i64> {
        let (v, _) = self.load_commit(commit)?;
        i64::try_from(ostree::commit_get_timestamp(&v))
            .with_context(|| format!("commit {commit}: timestamp out of range"))
    }

    /// The commit object `commit` (a checksum or a ref) names.
    fn load_commit(&self, commit: &str) -> Result<(glib::Variant, ostree::RepoCommitState)> {
        let repo = self.open()?;
        let what = || format!("commit {commit} in {}", self.path.display());
        let rev = repo
            .resolve_rev(commit, false)
            .with_context(what)?
            .with_context(what)?;
        repo.load_commit(&rev).with_context(what)
    }

    fn open(&self) -> Result<ostree::Repo> {
        let repo = ostree::Repo::new_for_path(&self.path);
        repo.open(gio::Cancellable::NONE)
            .with_context(|| format!("opening ostree repo {}", self.path.display()))?;
        Ok(repo)
    }

    /// `path` in `commit` and what it is (`None` when absent).
    fn lookup(&self, commit: &str, path: &str) -> Result<Option<(gio::File, gio::FileType)>> {
        let repo = self.open()?;
        let (root, _) = repo
            .read_commit(commit, gio::Cancellable::NONE)
            .with_context(|| format!("reading commit {commit} in {}", self.path.display()))?;
        let f = match path.trim_matches('/') {
            "" => root,
            rel => root.resolve_relative_path(rel),
        };
        match f.query_info(
            "standard::type",
            gio::FileQueryInfoFlags::NOFOLLOW_SYMLINKS,
            gio::Cancellable::NONE,
        ) {
            Ok(info) => Ok(Some((f, info.file_type()))),
            Err(e)
                if e.matches(gio::IOErrorEnum::NotFound)
                    || e.matches(gio::IOErrorEnum::NotDirectory) =>
            {
                Ok(None)
            }
            Err(e) => Err(e).with_context(|| format!("{path} in commit {commit}")),
        }
    }

    /// Contents of a regular file in a commit (`None` when absent, or not a
    /// regular file: a directory, a symlink).
    pub fn read_file(&self, commit: &str, path: &str) -> Result<Option<Vec<u8>>> {
        let Some((f, gio::FileType::Regular)) = self.lookup(commit, path)? else {
            return Ok(None);
        };
        let what = || format!("reading {path} in commit {commit}");
        let stream = f.read(gio::Cancellable::NONE).with_context(what)?;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = stream
                .read(&mut buf[..], gio::Cancellable::NONE)
                .with_context(what)?;
            if n == 0 {
                return Ok(Some(out));
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    /// Entries of a directory in a commit: (is_dir, name). `None` when
    /// absent; no entries when `path` is not a directory.
    pub fn list_dir(&self, commit: &str, path: &str) -> Result<Option<Vec<(bool, String)>>> {
        let Some((f, kind)) = self.lookup(commit, path)? else {
            return Ok(None);
        };
        if kind != gio::FileType::Directory {
            return Ok(Some(Vec::new()));
        }
        let what = || format!("listing {path} in commit {commit}");
        let entries = f
            .enumerate_children(
                "standard::name,standard::type",
                gio::FileQueryInfoFlags::NOFOLLOW_SYMLINKS,
                gio::Cancellable::NONE,
            )
            .with_context(what)?;
        let mut v = Vec::new();
        while let Some(info) = entries
            .next_file(gio::Cancellable::NONE)
            .with_context(what)?
        {
            v.push((
                info.file_type() == gio::FileType::Directory,
                info.name().to_string_lossy().into_owned(),
            ));
        }
        Ok(Some(v))
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
    use super::*;

    /// A commit of a small tree made by the ostree CLI, read back through
    /// libostree: absent paths, directories and symlinks are told apart by
    /// their kind, not by a message.
    #[test]
    fn files_dirs_and_metadata_are_read_through_libostree() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("tree");
        std::fs::create_dir_all(tree.join("d/e")).unwrap();
        std::fs::write(tree.join("a"), b"hello\n").unwrap();
        std::fs::write(tree.join("d/f"), vec![7u8; 100_000]).unwrap();
        std::os::unix::fs::symlink("a", tree.join("l")).unwrap();
        let repo = Repo::open_or_create(&d.path().join("repo"), "archive").unwrap();
        let commit = cmd::run_str(&mut repo.ostree(&[
            "commit",
            "--branch=t",
            "--add-metadata-string=version=1.2",
            "--add-metadata=n=uint32 42",
            "--timestamp=2026-01-02 03:04:05 +0000",
            &format!("--tree=dir={}", tree.display()),
        ]))
        .unwrap();
        let commit = commit.trim();
        assert_eq!(repo.read_file(commit, "/a").unwrap().unwrap(), b"hello\n");
        assert_eq!(
            repo.read_file("t", "d/f").unwrap().unwrap(),
            vec![7u8; 100_000]
        );
        for absent in ["/missing", "/d", "/l", "/a/x"] {
            assert_eq!(repo.read_file(commit, absent).unwrap(), None, "{absent}");
        }
        let mut root = repo.list_dir(commit, "/").unwrap().unwrap();
        root.sort_by(|a, b| a.1.cmp(&b.1));
        let want = [(false, "a"), (true, "d"), (false, "l")];
        assert_eq!(root, want.map(|(k, n)| (k, n.to_string())));
        assert_eq!(
            repo.list_dir(commit, "/d").unwrap().unwrap().len(),
            2,
            "e and f"
        );
        assert_eq!(repo.list_dir(commit, "/nope").unwrap(), None);
        assert_eq!(repo.list_dir(commit, "/a").unwrap(), Some(vec![]));
        assert_eq!(
            repo.metadata_string(commit, "version").unwrap().as_deref(),
            Some("1.2")
        );
        assert_eq!(repo.metadata_string(commit, "nope").unwrap(), None);
        assert_eq!(repo.timestamp("t").unwrap(), 1_767_323_045);
        let e = format!("{:#}", repo.metadata_string(commit, "n").unwrap_err());
        assert!(e.contains("not a string"), "{e}");
        // A commit that is not there is an error, not "absent".
        let missing = "0".repeat(64);
        assert!(repo.read_file(&missing, "/a").is_err());
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
