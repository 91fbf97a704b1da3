//! One OpenPGP signed message checked against one keyring by the system's
//! `gpgv` (GnuPG's verify-only tool), read through its machine-readable
//! status lines (GnuPG `doc/DETAILS`: NEWSIG, GOODSIG, VALIDSIG, EXPSIG,
//! EXPKEYSIG, REVKEYSIG, BADSIG, ERRSIG, NO_PUBKEY), never its human text.
//! gpgv runs with a private, empty home and only the given keyring; the
//! status comes on a pipe of its own, the signed bytes on stdout (capped).
//! In: a scratch dir, a binary keyring file, a signature file. Out: the
//! signed bytes and signer, or why the message was refused.
use anyhow::{bail, Context, Result};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};

/// The most signed bytes we read back (an atomic signature's JSON is a few
/// hundred bytes; this bounds a compression bomb inside a 50 KiB message).
const MAX_PAYLOAD: usize = 1 << 20;

/// A cryptographically good signature by a key of the keyring.
#[derive(Debug)]
pub(super) struct Good {
    /// The signed bytes.
    pub payload: Vec<u8>,
    /// Fingerprint of the primary key (VALIDSIG's last field).
    pub fingerprint: String,
    /// Signature creation time (VALIDSIG's sig-timestamp).
    pub signed_at: i64,
}

/// The verdict of gpgv on one message.
#[derive(Debug)]
pub(super) enum Outcome {
    Good(Good),
    Refused(String),
}

/// What gpgv said on its status pipe.
#[derive(Debug, Default)]
struct Status {
    newsig: usize,
    goodsig: bool,
    /// (signing key fpr, sig-timestamp, expire-timestamp, primary key fpr)
    validsig: Option<(String, i64, i64, String)>,
    expsig: bool,
    expkeysig: Option<String>,
    revkeysig: Option<String>,
    badsig: Option<String>,
    /// (key id, rc, issuer fpr or "-")
    errsig: Option<(String, String, String)>,
    nodata: bool,
}

fn parse_status(text: &str) -> Status {
    let mut s = Status::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("[GNUPG:] ") else {
            continue;
        };
        let f: Vec<&str> = rest.split(' ').collect();
        let arg = |i: usize| f.get(i).copied().unwrap_or("").to_string();
        match f[0] {
            "NEWSIG" => s.newsig += 1,
            "GOODSIG" => s.goodsig = true,
            "EXPSIG" => s.expsig = true,
            "EXPKEYSIG" => s.expkeysig = Some(arg(1)),
            "REVKEYSIG" => s.revkeysig = Some(arg(1)),
            "BADSIG" => s.badsig = Some(arg(1)),
            "ERRSIG" => s.errsig = Some((arg(1), arg(6), arg(7))),
            "NODATA" => s.nodata = true,
            "VALIDSIG" => {
                let num = |i: usize| arg(i).parse::<i64>().unwrap_or(0);
                let primary = f.get(10).copied().unwrap_or(f[1]).to_string();
                s.validsig = Some((arg(1), num(3), num(4), primary));
            }
            _ => {}
        }
    }
    s
}

/// A close-on-exec pipe: (read end, write end).
fn status_pipe() -> std::io::Result<(std::fs::File, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and owned by nothing else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((std::fs::File::from(r), w))
}

/// Check `sig` against `keyring` (binary, a file) named `name`; `home` is
/// an empty private directory for gpgv's home.
pub(super) fn check(home: &Path, keyring: &Path, name: &str, sig: &Path) -> Result<Outcome> {
    let (mut status_r, status_w) = status_pipe().context("making a pipe for gpgv's status")?;
    let fd = status_w.as_raw_fd();
    let mut c = Command::new("gpgv");
    c.arg("--homedir")
        .arg(home)
        .arg(format!("--status-fd={fd}"))
        .arg("--keyring")
        .arg(keyring)
        .arg("--output")
        .arg("-")
        .arg(sig)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs between fork and exec and only calls
    // fcntl(2), which is async-signal-safe; it lets the child keep the
    // status pipe's write end (std opens pipes close-on-exec).
    unsafe {
        use std::os::unix::process::CommandExt;
        c.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    crate::util::owner::die_with_parent(&mut c);
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "gpgv (GnuPG's signature checker) is not installed: install it (Debian/Ubuntu: `apt-get install gpgv`; RHEL/Fedora: `dnf install gnupg2`)"
        ),
        Err(e) => bail!("cannot start gpgv: {e}"),
    };
    drop(status_w);
    let mut out = child.stdout.take().context("gpgv stdout")?;
    let mut err = child.stderr.take().context("gpgv stderr")?;
    // Read the payload up to the cap, then close the pipe: gpgv then stops
    // on its next write (EPIPE) instead of inflating a bomb to the end.
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = (&mut out).take(MAX_PAYLOAD as u64 + 1).read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let mut status = String::new();
    let _ = status_r.read_to_string(&mut status);
    let payload = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    let exit = child.wait().context("waiting for gpgv")?;
    if payload.len() > MAX_PAYLOAD {
        return Ok(Outcome::Refused(format!(
            "the signed content is larger than {} MiB",
            MAX_PAYLOAD >> 20
        )));
    }
    let s = parse_status(&status);
    Ok(judge(&s, exit.success(), payload, name, &stderr))
}

fn judge(s: &Status, success: bool, payload: Vec<u8>, name: &str, stderr: &[u8]) -> Outcome {
    let refuse = |m: String| Outcome::Refused(m);
    let fpr = s.validsig.as_ref().map(|v| v.3.clone());
    if s.newsig > 1 {
        return refuse(format!(
            "holds {} signatures; an atomic signature holds one",
            s.newsig
        ));
    }
    if let Some(k) = &s.badsig {
        return refuse(format!(
            "bad signature by key {k}: the signed bytes were changed"
        ));
    }
    if let Some((keyid, rc, ifpr)) = &s.errsig {
        let who = if ifpr.is_empty() || ifpr == "-" {
            keyid
        } else {
            ifpr
        };
        return refuse(match rc.as_str() {
            "9" => format!("key {who} is not in keyring {name}"),
            "4" => format!("key {who} uses an algorithm gpgv does not support"),
            _ => format!("gpgv cannot check the signature of key {who} (ERRSIG rc {rc})"),
        });
    }
    if let Some(k) = &s.revkeysig {
        return refuse(format!("key {} is revoked", fpr.as_deref().unwrap_or(k)));
    }
    if s.expsig {
        let when = s.validsig.as_ref().map(|v| v.2).unwrap_or(0);
        return refuse(format!(
            "expired: the signature expired on {}",
            crate::util::rfc3339_utc(when)
        ));
    }
    if let Some(k) = &s.expkeysig {
        return refuse(format!(
            "expired: key {} of keyring {name} has expired (containers/image refuses this too; library-go's pkg/verify does not check key expiry)",
            fpr.as_deref().unwrap_or(k)
        ));
    }
    match (&s.validsig, s.goodsig && success) {
        (Some((_, signed_at, _, primary)), true) => Outcome::Good(Good {
            payload,
            fingerprint: primary.clone(),
            signed_at: *signed_at,
        }),
        _ if s.nodata || s.newsig == 0 => {
            refuse("not an OpenPGP signed message (gpgv found no signature in it)".into())
        }
        _ => {
            let human = String::from_utf8_lossy(stderr);
            let last = human.lines().last().unwrap_or("").trim();
            refuse(format!("gpgv did not accept the signature ({last})"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(status: &str, ok: bool) -> Outcome {
        judge(&parse_status(status), ok, b"{}".to_vec(), "ring", b"")
    }

    #[test]
    fn status_lines_decide() {
        let good = "[GNUPG:] NEWSIG\n[GNUPG:] GOODSIG ED23651E863D459E Test A\n[GNUPG:] VALIDSIG C069D5C351EEF19E7FE5C29EED23651E863D459E 2026-11-28 1795869799 0 4 0 1 10 00 C069D5C351EEF19E7FE5C29EED23651E863D459E\n";
        match judged(good, true) {
            Outcome::Good(g) => {
                assert_eq!(g.fingerprint, "C069D5C351EEF19E7FE5C29EED23651E863D459E");
                assert_eq!(g.signed_at, 1795869799);
            }
            o => panic!("{o:?}"),
        }
        // The same lines with a failing exit are not good.
        assert!(matches!(judged(good, false), Outcome::Refused(_)));
        let two = format!("{good}{good}");
        assert!(matches!(judged(&two, true), Outcome::Refused(m) if m.contains("2 signatures")));
        let missing = "[GNUPG:] NEWSIG\n[GNUPG:] ERRSIG ED23651E863D459E 1 10 00 1795869799 9 C069D5C351EEF19E7FE5C29EED23651E863D459E\n[GNUPG:] NO_PUBKEY ED23651E863D459E\n";
        assert!(matches!(judged(missing, false), Outcome::Refused(m)
            if m == "key C069D5C351EEF19E7FE5C29EED23651E863D459E is not in keyring ring"));
        assert!(
            matches!(judged("[GNUPG:] NODATA 4\n", false), Outcome::Refused(m) if m.starts_with("not an OpenPGP"))
        );
        // Human text that looks like a status line, but is not at the start, is ignored.
        assert!(matches!(
            judged("gpgv: [GNUPG:] GOODSIG x\n", true),
            Outcome::Refused(_)
        ));
    }
}
