//! The value checks cosa's schema makes and the types do not: 64 lower-case
//! hex characters, the `ostree-timestamp` pattern, and a plain file name
//! (one `sha256sum -c` reads without escapes). In: strings; out: yes or no,
//! or the error naming the bad file name.
use anyhow::{bail, Result};

pub(super) fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// cosa schema `ostree-timestamp.pattern`: `\d{4}-\d{2}-\d{2}T.*Z$`
/// (unanchored at the start, so we look for the date anywhere).
pub(super) fn is_cosa_timestamp(s: &str) -> bool {
    if !s.ends_with('Z') {
        return false;
    }
    let b = s.as_bytes();
    (0..b.len().saturating_sub(10)).any(|i| {
        let w = &b[i..i + 11];
        w[..4].iter().all(u8::is_ascii_digit)
            && w[4] == b'-'
            && w[5..7].iter().all(u8::is_ascii_digit)
            && w[7] == b'-'
            && w[8..10].iter().all(u8::is_ascii_digit)
            && w[10] == b'T'
    })
}

/// A plain file name: not empty, no `/`, not `.`/`..`, and nothing
/// `sha256sum` would escape (newline, carriage return, backslash).
pub(super) fn check_file_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name == "."
        || name == ".."
        || name.contains(['/', '\n', '\r', '\\', '\0'])
    {
        bail!("{name:?} is not a plain file name");
    }
    Ok(())
}
