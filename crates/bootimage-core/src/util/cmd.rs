//! The one wrapper for external commands: logs the command line, captures
//! stderr, and puts its tail into the error so failures explain themselves.
use anyhow::{bail, Context, Result};
use std::ffi::OsStr;
use std::io::Read;
use std::process::{Command, Stdio};

/// How many trailing stderr lines go into an error message.
const STDERR_TAIL_LINES: usize = 12;
/// How often a running command is checked for exit or cancellation.
const POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Render a command line for logs and errors.
pub fn render(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        let a = a.to_string_lossy();
        if a.contains(' ') || a.is_empty() {
            s.push_str(&format!(" '{a}'"));
        } else {
            s.push(' ');
            s.push_str(&a);
        }
    }
    s
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(STDERR_TAIL_LINES);
    lines[start..].join("\n")
}

/// Build a command from a program and arguments.
pub fn new<I, S>(program: &str, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new(program);
    c.args(args);
    c
}

/// Run a command to completion; on failure the error names the command, its
/// exit status and the tail of its stderr. Returns stdout. A pending
/// SIGINT/SIGTERM ([`super::cancel`]) kills the command and returns
/// `Interrupted`.
pub fn run(cmd: &mut Command) -> Result<Vec<u8>> {
    let line = render(cmd);
    tracing::debug!(target: "cmd", "running: {line}");
    super::cancel::check()?;
    // A SIGKILLed run takes its tools along (nothing else would stop them).
    die_with_parent(cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| {
            format!("cannot start `{line}` (is it installed? run scripts/install-deps.sh)")
        })?;
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status = loop {
        if let Some(s) = child
            .try_wait()
            .with_context(|| format!("waiting for `{line}`"))?
        {
            break s;
        }
        if super::cancel::pending().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = out_t.join();
            let _ = err_t.join();
            return Err(super::cancel::check().unwrap_err());
        }
        std::thread::sleep(POLL);
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    if !status.success() {
        super::cancel::check()?;
        let err = String::from_utf8_lossy(&stderr);
        let t = tail(&err);
        if t.is_empty() {
            bail!("`{line}` failed ({status})");
        }
        bail!("`{line}` failed ({status}):\n{t}");
    }
    Ok(stdout)
}

/// Like [`run`] but returns stdout as a trimmed string.
pub fn run_str(cmd: &mut Command) -> Result<String> {
    let out = run(cmd)?;
    Ok(String::from_utf8_lossy(&out).trim().to_string())
}

/// True if `program` is found on PATH.
pub fn have(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}

/// Make a child die with the thread that spawned it (`PR_SET_PDEATHSIG`),
/// so a SIGKILLed run does not leave its tools (or its VM) running.
pub fn die_with_parent(c: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe; the closure allocates nothing.
    unsafe {
        c.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn failing_command_reports_stderr_tail() {
        let err = run(&mut new(
            "sh",
            ["-c", "echo first >&2; echo boom >&2; exit 3"],
        ))
        .unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("boom"), "{msg}");
        assert!(msg.contains("exit status: 3"), "{msg}");
    }
    #[test]
    fn missing_program_is_explained() {
        let err = run(&mut new("definitely-not-a-program-xyz", [""; 0])).unwrap_err();
        assert!(format!("{err:#}").contains("cannot start"));
    }
    #[test]
    fn stdout_is_returned() {
        assert_eq!(run_str(&mut new("echo", ["hi"])).unwrap(), "hi");
    }
}
