//! The base utilities the leaf library runs on: cooperative cancellation,
//! the one external-command wrapper, bulk SHA-256, XML escaping.
pub mod cancel;
pub mod cmd;
pub mod sha256;
pub mod xml;

/// Worker threads for `n` (0: one per CPU).
pub fn threads(n: usize) -> usize {
    match n {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// Lower-case hex SHA-256 of a byte slice.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

/// Seconds since the epoch as cosa writes timestamps: RFC 3339 in UTC with
/// a `Z` and no fraction (cosa `cosalib/cmdlib.py` `rfc3339_time`:
/// `%Y-%m-%dT%H:%M:%SZ`). Out-of-range values clamp to the epoch.
pub fn rfc3339_utc(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
