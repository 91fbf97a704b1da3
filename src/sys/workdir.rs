//! The run's work directory guard: removed by an explicit `close()` that
//! reports errors and keeps the directory in the guard when removal fails
//! (then `Drop` tries again), or by a best-effort `Drop` on unwind.
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

#[derive(Debug)]
#[must_use = "the work directory is removed when closed or dropped"]
pub struct WorkDir {
    path: Option<PathBuf>,
}

impl WorkDir {
    /// Take over a temporary directory (it is no longer removed by the
    /// `TempDir`, only by this guard).
    pub fn adopt(t: tempfile::TempDir) -> Self {
        WorkDir {
            path: Some(t.keep()),
        }
    }

    pub fn path(&self) -> &Path {
        self.path.as_deref().expect("work directory")
    }

    /// Remove the directory; on error it stays in the guard.
    pub fn release(&mut self) -> Result<()> {
        if let Some(p) = &self.path {
            match std::fs::remove_dir_all(p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("removing {}", p.display()));
                }
                _ => self.path = None,
            }
        }
        Ok(())
    }

    /// Remove the directory, reporting errors.
    pub fn close(mut self) -> Result<()> {
        self.release()
    }

    /// Whether the guard still holds its directory.
    pub fn is_held(&self) -> bool {
        self.path.is_some()
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            if let Err(e) = std::fs::remove_dir_all(&p) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!("removing {}: {e}", p.display());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_removes_and_a_failed_close_keeps_the_guard() {
        let w = WorkDir::adopt(tempfile::tempdir().unwrap());
        let p = w.path().to_path_buf();
        std::fs::write(p.join("f"), b"x").unwrap();
        w.close().unwrap();
        assert!(!p.exists());

        // A directory that cannot be emptied fails to go and stays in the
        // guard: for a user, a read-only parent of its content; for root,
        // which ignores modes, a filesystem mounted inside it (EBUSY).
        let mut w = WorkDir::adopt(tempfile::tempdir().unwrap());
        let sub = w.path().join("ro");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("f"), b"x").unwrap();
        let root = unsafe_is_root();
        let set = |args: &[&str]| {
            let st = std::process::Command::new(args[0])
                .args(&args[1..])
                .arg(&sub)
                .status()
                .unwrap();
            assert!(st.success(), "{args:?} {}", sub.display());
        };
        use std::os::unix::fs::PermissionsExt;
        if root {
            set(&["mount", "-t", "tmpfs", "none"]);
        } else {
            std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o555)).unwrap();
        }
        let failed = w.release().is_err();
        let held = w.is_held() && w.path().exists();
        if root {
            set(&["umount"]);
        } else {
            std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        assert!(
            failed,
            "release of a directory that cannot be emptied succeeded"
        );
        assert!(held, "a failed release let go of the directory");
        w.close().unwrap();
        assert!(!sub.exists());
    }

    fn unsafe_is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }
}
