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

/// A UUID derived from `parts` (what it identifies, in words), not drawn
/// at random: the same inputs give the same id, so the bytes that carry it
/// are reproducible. SHA-256 of the parts (each ended by a NUL), its first
/// 16 bytes marked as an RFC 9562 version 8 (custom) UUID.
pub fn derived_uuid(parts: &[&str]) -> [u8; 16] {
    let mut h = sha256::Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&h.finalize()[..16]);
    id[6] = (id[6] & 0x0f) | 0x80;
    id[8] = (id[8] & 0x3f) | 0x80;
    id
}

#[cfg(test)]
mod derived_uuid_tests {
    use super::derived_uuid;
    #[test]
    fn same_parts_same_id_other_parts_other_id() {
        let a = derived_uuid(&["vhd", "rhcos", "418.94", "azure"]);
        assert_eq!(a, derived_uuid(&["vhd", "rhcos", "418.94", "azure"]));
        assert_ne!(a, derived_uuid(&["vhd", "rhcos", "418.94", "azurestack"]));
        // The boundary between parts counts.
        assert_ne!(derived_uuid(&["ab", "c"]), derived_uuid(&["a", "bc"]));
        let u = uuid::Uuid::from_bytes(a);
        assert_eq!(u.get_version_num(), 8);
        assert_eq!(u.get_variant(), uuid::Variant::RFC4122);
    }
}
