//! The staged tree a root filesystem is made from in one pass
//! (docs/contract.md §9): the deployed root, rebuilt beside itself in
//! sorted order so that `mkfs.xfs -p`, which walks directories in readdir
//! order, sees the same order on every machine. Directories are made anew
//! (entries added in byte order to a directory nothing is ever removed
//! from, which XFS lists in insertion order), with the original's mode,
//! owner, extended attributes (SELinux labels) and time; every other entry
//! is a hard link to the original (metadata only, no data copied; mkfs
//! counts the links it meets in the tree, so the extra name does not
//! reach the image). Times later than the OS's are clamped to it (the
//! deploy dates what it writes by the clock), as `mke2fs -d` does itself
//! with `SOURCE_DATE_EPOCH`. The inode flags `mkfs.xfs -p` drops (the
//! deployment directory's `chattr +i`) are returned, to be set offline.
use crate::sys::fsmeta;
use anyhow::{bail, Context, Result};
use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What [`sorted_links`] made.
#[derive(Debug)]
pub struct Sorted {
    /// The rebuilt tree (inside the source's filesystem).
    pub dir: PathBuf,
    /// Directories (relative, without a leading `/`) that carry the
    /// immutable flag in the source.
    pub immutable: Vec<PathBuf>,
    /// Inodes whose times were clamped to the OS's.
    pub clamped: u64,
    /// Every entry rebuilt, directories included, in the order it was made
    /// (relative paths).
    pub made: Vec<PathBuf>,
}

/// Rebuild `src` (a mounted filesystem's root) at `src/<name>` in sorted
/// order, times clamped to `time`. `src` must hold no other mount.
pub fn sorted_links(src: &Path, name: &str, time: i64) -> Result<Sorted> {
    let dir = src.join(name);
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut w = Walk {
        dev: std::fs::symlink_metadata(src)?.dev(),
        skip: name.as_bytes().to_vec(),
        time,
        seen: HashSet::new(),
        out: Sorted {
            dir: dir.clone(),
            immutable: Vec::new(),
            clamped: 0,
            made: Vec::new(),
        },
    };
    w.dir(src, &dir, Path::new(""))?;
    Ok(w.out)
}

struct Walk {
    dev: u64,
    skip: Vec<u8>,
    time: i64,
    /// Inodes already clamped (hard links share them).
    seen: HashSet<u64>,
    out: Sorted,
}

impl Walk {
    fn dir(&mut self, from: &Path, to: &Path, rel: &Path) -> Result<()> {
        crate::util::cancel::check()?;
        let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(from)
            .with_context(|| format!("reading {}", from.display()))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<std::io::Result<_>>()
            .with_context(|| format!("reading {}", from.display()))?;
        if rel.as_os_str().is_empty() {
            names.retain(|n| n.as_bytes() != self.skip.as_slice());
        }
        names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        let mut subdirs = Vec::new();
        for n in &names {
            let (s, d) = (from.join(n), to.join(n));
            let md = std::fs::symlink_metadata(&s)
                .with_context(|| format!("reading {}", s.display()))?;
            if md.dev() != self.dev {
                bail!(
                    "{} is another filesystem mounted inside the staged tree: unmount it before the tree is rebuilt",
                    s.display()
                );
            }
            self.out.made.push(rel.join(n));
            if md.is_dir() {
                std::fs::create_dir(&d).with_context(|| format!("creating {}", d.display()))?;
                subdirs.push((s, d, rel.join(n), md));
            } else {
                std::fs::hard_link(&s, &d)
                    .with_context(|| format!("linking {} to {}", s.display(), d.display()))?;
                if md.mtime() > self.time && self.seen.insert(md.ino()) {
                    fsmeta::set_times(&d, self.time.min(md.atime()), self.time)?;
                    self.out.clamped += 1;
                }
            }
        }
        for (s, d, r, md) in subdirs {
            self.dir(&s, &d, &r)?;
            self.copy_dir_meta(&s, &d, &r, &md)?;
        }
        if rel.as_os_str().is_empty() {
            let md = std::fs::symlink_metadata(from)?;
            self.copy_dir_meta(from, to, rel, &md)?;
        }
        Ok(())
    }

    /// A rebuilt directory's mode, owner, extended attributes and time
    /// (last: adding its entries changed it); the immutable flag noted.
    fn copy_dir_meta(
        &mut self,
        s: &Path,
        d: &Path,
        rel: &Path,
        md: &std::fs::Metadata,
    ) -> Result<()> {
        std::os::unix::fs::lchown(d, Some(md.uid()), Some(md.gid()))
            .with_context(|| format!("setting the owner of {}", d.display()))?;
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(md.mode() & 0o7777))
            .with_context(|| format!("setting the mode of {}", d.display()))?;
        for (name, value) in fsmeta::xattrs(s)? {
            fsmeta::set_xattr(d, &name, &value)?;
        }
        let mtime = md.mtime().min(self.time);
        if md.mtime() > self.time {
            self.out.clamped += 1;
        }
        fsmeta::set_times(d, md.atime().min(self.time), mtime)?;
        if fsmeta::dir_flags(s)? & fsmeta::IMMUTABLE != 0 {
            self.out.immutable.push(rel.to_path_buf());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// Names, types and times of the tree at `d`, in readdir order.
    fn listing(d: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            out.push(format!(
                "{} {:o} {} {}",
                e.path().display(),
                md.mode(),
                md.mtime(),
                md.nlink()
            ));
            if md.is_dir() {
                listing(&e.path(), out);
            }
        }
    }

    #[test]
    fn a_tree_made_in_another_order_is_rebuilt_the_same_and_times_are_clamped() {
        let t = tempfile::tempdir().unwrap();
        // The same tree twice, entries created in opposite orders.
        let names = ["b", "a", "c", "ab", "_z"];
        for (root, order) in [
            ("one", names.to_vec()),
            ("two", names.iter().rev().copied().collect()),
        ] {
            let r = t.path().join(root);
            std::fs::create_dir_all(r.join("d")).unwrap();
            for n in &order {
                std::fs::create_dir(r.join("d").join(n)).unwrap();
                std::fs::write(r.join("d").join(n).join("f"), n).unwrap();
            }
            std::fs::hard_link(r.join("d/a/f"), r.join("hard")).unwrap();
            symlink("d/a/f", r.join("sym")).unwrap();
            std::fs::set_permissions(r.join("d"), std::fs::Permissions::from_mode(0o750)).unwrap();
            fsmeta::set_times(&r.join("d/b/f"), 100, 100).unwrap();
        }
        let mut lists = Vec::new();
        for root in ["one", "two"] {
            let r = t.path().join(root);
            let s = sorted_links(&r, ".sorted", 1000).unwrap();
            assert_eq!(s.made.len(), 13);
            let mut l = Vec::new();
            listing(&s.dir, &mut l);
            l.sort();
            lists.push(l.join("\n").replace(&format!("/{root}/"), "/X/"));
            // The entries are made in byte order, whatever order the source
            // was made in (inode numbers showed it only until a freed inode
            // was reused: a suite run saw "a" before "_z").
            let got: Vec<String> = s
                .made
                .iter()
                .filter(|p| p.parent() == Some(Path::new("d")))
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect();
            assert_eq!(got, ["_z", "a", "ab", "b", "c"], "{root}");
            let md = std::fs::symlink_metadata(s.dir.join("d")).unwrap();
            assert_eq!(md.mode() & 0o7777, 0o750);
            // Clamped: the clock's times; kept: an older one.
            assert_eq!(md.mtime(), 1000);
            assert_eq!(
                std::fs::symlink_metadata(s.dir.join("d/c/f"))
                    .unwrap()
                    .mtime(),
                1000
            );
            assert_eq!(
                std::fs::symlink_metadata(s.dir.join("d/b/f"))
                    .unwrap()
                    .mtime(),
                100
            );
            assert_eq!(
                std::fs::read_link(s.dir.join("sym")).unwrap(),
                Path::new("d/a/f")
            );
            // A hard link to the original: no data copied.
            assert_eq!(
                std::fs::symlink_metadata(s.dir.join("hard")).unwrap().ino(),
                std::fs::symlink_metadata(r.join("d/a/f")).unwrap().ino()
            );
        }
        // The same tree (names, modes, times, link counts) from both.
        assert_eq!(lists[0], lists[1]);
    }

    #[test]
    fn a_second_rebuild_under_the_same_name_is_refused_by_name() {
        let t = tempfile::tempdir().unwrap();
        sorted_links(t.path(), ".sorted", 0).unwrap();
        let e = sorted_links(t.path(), ".sorted", 0).unwrap_err();
        assert!(format!("{e:#}").contains(".sorted"), "{e:#}");
    }
}
