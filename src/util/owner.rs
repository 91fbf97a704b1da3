//! Who owns a leftover: a process identity that survives PID reuse and
//! reboots (PID, its start time in clock ticks since boot from
//! `/proc/PID/stat`, and the first 8 hex digits of the boot id), written into
//! the names of work directories and into VM pidfiles, so that a later run
//! can prove the owner dead before it removes anything (`sys::stale`).
use std::path::Path;

/// `/proc/sys/kernel/random/boot_id`: a new random UUID each boot.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// A process, identified so that a reused PID does not match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub pid: u32,
    /// Field 22 of /proc/PID/stat (`starttime`, clock ticks since boot).
    pub start: u64,
    /// First 8 hex digits of the boot id the process ran under.
    pub boot: String,
}

/// The start time of `pid` (field 22 of /proc/PID/stat), if it runs. A
/// zombie (exited, not yet reaped) does not run: it will clean up nothing.
pub fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces:
    // count fields after the last ')'. Field 3 (the state) is the first
    // after it.
    let mut f = s[s.rfind(')')? + 1..].split_whitespace();
    if matches!(f.next()?, "Z" | "X") {
        return None;
    }
    f.nth(22 - 4)?.parse().ok()
}

fn boot_id() -> String {
    std::fs::read_to_string(BOOT_ID)
        .unwrap_or_default()
        .trim()
        .replace('-', "")
        .chars()
        .take(8)
        .collect()
}

impl Owner {
    /// This process.
    pub fn me() -> Owner {
        Self::of(std::process::id()).expect("/proc/self/stat")
    }

    /// A running process, now.
    pub fn of(pid: u32) -> Option<Owner> {
        Some(Owner {
            pid,
            start: start_time(pid)?,
            boot: boot_id(),
        })
    }

    /// `PID.START.BOOT`, safe in a file name.
    pub fn tag(&self) -> String {
        format!("{}.{}.{}", self.pid, self.start, self.boot)
    }

    /// Parse [`Owner::tag`].
    pub fn parse(tag: &str) -> Option<Owner> {
        let mut it = tag.trim().splitn(3, '.');
        let pid = it.next()?.parse().ok()?;
        let start = it.next()?.parse().ok()?;
        let boot = it.next()?.to_string();
        (!boot.is_empty() && boot.bytes().all(|b| b.is_ascii_hexdigit())).then_some(Owner {
            pid,
            start,
            boot,
        })
    }

    /// Whether this process still runs: same boot, and the PID is alive
    /// with the same start time (a reused PID has another).
    pub fn alive(&self) -> bool {
        self.boot == boot_id() && start_time(self.pid) == Some(self.start)
    }

    /// Why it is dead (for the report), or None when it runs.
    pub fn why_dead(&self) -> Option<String> {
        if self.boot != boot_id() {
            return Some(format!("PID {} ran before the last reboot", self.pid));
        }
        match start_time(self.pid) {
            None => Some(format!("PID {} has exited", self.pid)),
            Some(s) if s != self.start => Some(format!(
                "PID {} now belongs to another process (started at tick {s}, not {})",
                self.pid, self.start
            )),
            Some(_) => None,
        }
    }
}

/// Write `owner` as a pidfile (`PID.START.BOOT`).
pub fn write_pidfile(path: &Path, owner: &Owner) -> std::io::Result<()> {
    std::fs::write(path, owner.tag())
}

/// Read a pidfile written by [`write_pidfile`].
pub fn read_pidfile(path: &Path) -> Option<Owner> {
    Owner::parse(&std::fs::read_to_string(path).ok()?)
}

/// Make a child die with the thread that spawned it (the leaf library's
/// `cmd`, where every command is spawned).
pub use super::cmd::die_with_parent;

/// Does this process run as root (effective UID 0)?
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn me_is_alive_and_a_reused_or_dead_pid_is_not() {
        let me = Owner::me();
        assert!(me.alive());
        assert_eq!(Owner::parse(&me.tag()), Some(me.clone()));
        // Same PID, another start time: a reused PID.
        let reused = Owner {
            start: me.start + 1,
            ..me.clone()
        };
        assert!(!reused.alive());
        assert!(reused.why_dead().unwrap().contains("another process"));
        // Another boot.
        let old = Owner {
            boot: "00000000".into(),
            ..me.clone()
        };
        assert!(old.why_dead().unwrap().contains("reboot"));
        // A child: alive, then a zombie (exited, not reaped), then gone.
        let mut c = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let o = Owner::of(c.id()).unwrap();
        assert!(o.alive());
        std::thread::sleep(std::time::Duration::from_millis(600));
        assert!(!o.alive(), "a zombie is not alive");
        c.wait().unwrap();
        assert!(!o.alive());
        assert_eq!(Owner::parse("12.x.ab"), None);
        assert_eq!(Owner::parse("12.3"), None);
    }

    #[test]
    fn start_time_reads_names_with_spaces_and_parens() {
        // Our own stat: the name is ours, the field count must still work.
        assert!(start_time(std::process::id()).unwrap() > 0);
    }
}
