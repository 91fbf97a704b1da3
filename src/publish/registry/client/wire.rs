//! The wire-level pieces every request of the client shares, none of
//! which needs a `Client`: the request body, response headers and error
//! bodies read, the transient HTTP statuses and `Range` offsets, query
//! encoding, the upload URL's `digest=`, the cancellable sleep between
//! attempts and the `Fault` an attempt ends with. In: ureq responses and
//! strings; out: values and short error texts.
use anyhow::{Context, Result};
use std::path::Path;
use std::time::{Duration, Instant};

/// A request body.
pub(super) enum Body<'a> {
    Empty,
    Bytes(&'a [u8]),
    /// `len` bytes of the file from `at`.
    File {
        path: &'a Path,
        at: u64,
        len: u64,
    },
}

/// Percent-encoding of a query value.
pub(super) fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(super) fn header(r: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The registry's error body, short: the first `errors[].message` (and
/// code) of the distribution spec's error format, or the text.
pub(super) fn error_text(r: &mut ureq::http::Response<ureq::Body>) -> String {
    let body = r
        .body_mut()
        .with_config()
        .limit(64 << 10)
        .read_to_string()
        .unwrap_or_default();
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) {
        if let Some(e) = v["errors"].as_array().and_then(|a| a.first()) {
            let code = e["code"].as_str().unwrap_or("");
            let msg = e["message"].as_str().unwrap_or("");
            return format!("{code}: {msg}")
                .trim_matches([' ', ':'])
                .to_string();
        }
    }
    body.chars()
        .take(200)
        .collect::<String>()
        .trim()
        .to_string()
}

/// A JSON response body of at most `limit` bytes.
pub(super) fn json_body(
    r: &mut ureq::http::Response<ureq::Body>,
    limit: u64,
    what: &str,
) -> Result<serde_json::Value> {
    let text = r
        .body_mut()
        .with_config()
        .limit(limit)
        .read_to_string()
        .with_context(|| format!("reading {what}"))?;
    serde_json::from_str(&text).with_context(|| format!("{what} is not JSON"))
}

/// A transient fault: worth another attempt.
pub(super) fn transient_status(s: u16) -> bool {
    matches!(s, 408 | 429 | 500 | 502 | 503 | 504)
}

/// The end offset (exclusive) a `Range: 0-N` header reports. `0-0` is
/// read as nothing: distribution sends it for an empty session too (it
/// cannot say "one byte" apart), and a wrong guess only costs a retry: the
/// closing PUT's digest check refuses a blob that is not whole.
pub(super) fn range_end(r: &ureq::http::Response<ureq::Body>) -> Option<u64> {
    let v = header(r, "Range")?;
    let (_, end) = v.trim().trim_start_matches("bytes=").split_once('-')?;
    match end.trim().parse::<u64>().ok()? {
        0 => Some(0),
        e => Some(e + 1),
    }
}

/// Sleep `d`, stopping early (with the error) on Ctrl-C or SIGTERM.
pub(super) fn sleep(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        crate::util::cancel::check()?;
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(100)));
    }
    Ok(())
}

/// An upload URL with `digest=` added to its query.
pub(super) fn with_digest(loc: &str, digest: &str) -> String {
    let sep = if loc.contains('?') { '&' } else { '?' };
    format!("{loc}{sep}digest={}", enc(digest))
}

/// Why an attempt failed: worth another, or not.
pub(super) enum Fault {
    Transient(anyhow::Error),
    Fatal(anyhow::Error),
}

impl From<anyhow::Error> for Fault {
    fn from(e: anyhow::Error) -> Self {
        Fault::Transient(e)
    }
}
