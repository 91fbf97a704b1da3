//! Following the backend VM until it ends: the job's own output comes back
//! on the second serial port (qemu's stdout) and is shown as the loopback
//! backend would show it, the appliance's heartbeat proves the VM alive,
//! and a VM that makes no progress for the watchdog's window is stopped.
//! In: a running [`Vm`]; out: its exit status and qemu's stderr, then the
//! job's [`Outcome`] read from `vm/result.json` (the console log kept in
//! the cache when something went wrong).
use super::init::MARK;
use super::outcome::Outcome;
use super::qemu::Vm;
use crate::util::{cancel, progress::Reporter};
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The least time the backend VM gets to show its first sign of life (the
/// watchdog's window while it boots; `--vm-watchdog` applies after).
const BOOT_ALLOWANCE: Duration = Duration::from_secs(120);

/// How the VM is watched.
pub(super) struct Watch<'a> {
    /// Under KVM (the watchdog's hint differs).
    pub(super) kvm: bool,
    /// `--vm-watchdog`, in seconds.
    pub(super) watchdog_secs: u64,
    /// The guest console log, `vm/console.log`.
    pub(super) console: &'a Path,
    /// Where a failed VM's console log is kept.
    pub(super) cache_dir: &'a Path,
}

/// Follow `vm` (started at `started`) until it stops: returns its exit
/// status and what qemu wrote on stderr.
pub(super) fn watch(
    mut vm: Vm,
    started: Instant,
    w: &Watch<'_>,
    r: &Reporter,
) -> Result<(ExitStatus, String)> {
    let (rx, err_thread) = spawn_readers(&mut vm)?;
    let mut vm = follow(vm, &rx, w, r)?;
    let status = vm.0.wait().context("waiting for the backend VM")?;
    let qemu_err = err_thread.join().unwrap_or_default();
    tracing::info!(elapsed = ?started.elapsed(), ?status, "backend VM stopped");
    r.note(&format!(
        "backend VM stopped after {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    Ok((status, qemu_err))
}

/// Threads reading the VM's stdout (line by line, into the returned
/// channel) and its stderr (whole, the thread's result).
fn spawn_readers(vm: &mut Vm) -> Result<(mpsc::Receiver<String>, JoinHandle<String>)> {
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = vm.0.stdout.take().context("VM output")?;
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = vm.0.stderr.take().context("VM errors")?;
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut s);
        s
    });
    Ok((rx, err_thread))
}

/// Show the job channel's lines until it closes (the VM is gone), and
/// stop the VM on cancellation or when it makes no progress; returns the
/// VM once its channel closed.
fn follow(vm: Vm, rx: &mpsc::Receiver<String>, w: &Watch<'_>, r: &Reporter) -> Result<Vm> {
    let watchdog = Duration::from_secs(w.watchdog_secs.max(1));
    // Until its first sign of life the VM is booting, which under TCG on a
    // loaded host can itself take a minute: that phase gets at least
    // BOOT_ALLOWANCE, the watchdog's own window applies once it runs.
    let boot_window = watchdog.max(BOOT_ALLOWANCE);
    let mut last = Instant::now();
    let mut alive = false;
    loop {
        if let Err(e) = cancel::check() {
            drop(vm);
            return Err(e);
        }
        match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(line) => {
                last = Instant::now();
                alive = true;
                show(&line, r);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let window = if alive { watchdog } else { boot_window };
                if last.elapsed() > window {
                    drop(vm);
                    let console = keep_console(w.console, w.cache_dir);
                    bail!(
                        "the backend VM made no progress for {} s ({}) and was stopped; {} (console log: {})",
                        window.as_secs(),
                        if alive { "its heartbeat stopped" } else { "it never showed a sign of life" },
                        if w.kvm {
                            "nested KVM can start and then hang on some hosts: try --backend nokvm"
                        } else {
                            "on a very loaded host, a larger --vm-watchdog may help"
                        },
                        console.display()
                    );
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    Ok(vm)
}

/// Show one line of the job channel: the job's output as a note, the
/// appliance's own (marked) lines in the log, heartbeats not at all.
fn show(line: &str, r: &Reporter) {
    let line = line.trim_end_matches('\r');
    match line.strip_prefix(MARK) {
        Some("alive") => {}
        Some(s) => tracing::info!("appliance: {s}"),
        None if !line.is_empty() => r.note(line),
        None => {}
    }
}

/// The job's outcome from `result`; when the VM left none, an error with
/// its `status`, `qemu_err` and the console's last lines (the console log
/// kept in `cache_dir`).
pub(super) fn read_outcome(
    result: &Path,
    console: &Path,
    cache_dir: &Path,
    status: ExitStatus,
    qemu_err: &str,
) -> Result<Outcome> {
    let outcome: Outcome = match std::fs::read(result) {
        Ok(b) => serde_json::from_slice(&b).context("reading the VM's result")?,
        Err(_) => {
            let tail = tail_of(console, 20);
            keep_console(console, cache_dir);
            bail!(
                "the backend VM stopped ({status}) without a result{}{}",
                if qemu_err.trim().is_empty() {
                    String::new()
                } else {
                    format!("; qemu: {}", qemu_err.trim())
                },
                if tail.is_empty() {
                    String::new()
                } else {
                    format!("; last console lines:\n{tail}")
                }
            );
        }
    };
    Ok(outcome)
}

/// Copy the console log of a failed VM out of the work directory (which
/// is removed) to `<cache>/last-vm-console.log`; returns where it is.
fn keep_console(console: &Path, cache_dir: &Path) -> PathBuf {
    let kept = cache_dir.join("last-vm-console.log");
    match std::fs::copy(console, &kept) {
        Ok(_) => kept,
        Err(_) => console.to_path_buf(),
    }
}

/// The last `n` lines of a text file (empty when unreadable).
fn tail_of(path: &Path, n: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
