//! The one staged write of every published file: a temporary file in the
//! destination's directory (`.<name>.<random>.partial`), written, made mode
//! 0644 and fsynced, renamed to its final name (refusing to replace an
//! existing file where asked), then the directory fsynced so the rename
//! itself survives a crash. A file is never seen half-written under its
//! final name; a run that stops leaves only `.partial` files, which the
//! dropped guard removes.
use anyhow::{Context, Result};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Mode of published files.
const MODE: u32 = 0o644;
/// Suffix of a file being written.
pub const PARTIAL_SUFFIX: &str = crate::sys::stale::PARTIAL_SUFFIX;

/// A file being written under a temporary name next to its destination.
#[must_use = "a staged file is removed unless committed"]
pub struct Staged {
    tmp: tempfile::NamedTempFile,
    dst: PathBuf,
}

fn parent(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

impl Staged {
    /// Start writing `dst` (its directory must exist).
    pub fn new(dst: &Path) -> Result<Self> {
        let dir = parent(dst);
        let name = dst
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(PARTIAL_SUFFIX)
            .tempfile_in(dir)
            .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
        Ok(Staged {
            tmp,
            dst: dst.to_path_buf(),
        })
    }

    /// The temporary file's path.
    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    pub fn file(&self) -> &File {
        self.tmp.as_file()
    }

    pub fn file_mut(&mut self) -> &mut File {
        self.tmp.as_file_mut()
    }

    /// The final name.
    pub fn dst(&self) -> &Path {
        &self.dst
    }

    /// Publish, replacing a file of the same name.
    pub fn commit(self) -> Result<()> {
        self.finish(true)
    }

    /// Publish; an existing file of the same name is an error and stays.
    pub fn commit_noclobber(self) -> Result<()> {
        self.finish(false)
    }

    fn finish(self, clobber: bool) -> Result<()> {
        let Staged { tmp, dst } = self;
        // By path, not through the open descriptor: a caller may have renamed
        // a finished file over the temporary name.
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(MODE))
            .with_context(|| format!("chmod {}", tmp.path().display()))?;
        File::open(tmp.path())
            .and_then(|f| f.sync_all())
            .with_context(|| format!("fsync {}", tmp.path().display()))?;
        let r = if clobber {
            tmp.persist(&dst)
        } else {
            tmp.persist_noclobber(&dst)
        };
        r.map_err(|e| e.error)
            .with_context(|| format!("renaming into {}", dst.display()))?;
        let dir = parent(&dst);
        File::open(dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("fsync {}", dir.display()))?;
        Ok(())
    }
}

/// Write `dir/name` with `data` through the staged path (replacing).
pub fn write_file(dir: &Path, name: &str, data: &[u8]) -> Result<()> {
    let mut s = Staged::new(&dir.join(name))?;
    {
        let path = s.path().to_path_buf();
        let mut w = std::io::BufWriter::new(s.file_mut());
        w.write_all(data)
            .and_then(|_| w.flush())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    s.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn staged_write_renames_and_respects_noclobber() {
        let d = tempfile::tempdir().unwrap();
        write_file(d.path(), "a.json", b"one").unwrap();
        write_file(d.path(), "a.json", b"two").unwrap();
        assert_eq!(std::fs::read(d.path().join("a.json")).unwrap(), b"two");
        let mode = std::fs::metadata(d.path().join("a.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);

        let mut s = Staged::new(&d.path().join("a.json")).unwrap();
        s.file_mut().write_all(b"three").unwrap();
        assert!(s.path().to_string_lossy().ends_with(PARTIAL_SUFFIX));
        let e = s.commit_noclobber().unwrap_err();
        assert!(format!("{e:#}").contains("renaming into"), "{e:#}");
        assert_eq!(std::fs::read(d.path().join("a.json")).unwrap(), b"two");
        // Nothing staged is left behind, committed or not.
        let s = Staged::new(&d.path().join("b")).unwrap();
        drop(s);
        assert_eq!(names(d.path()), vec!["a.json"]);
    }
}
