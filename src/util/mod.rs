//! Small shared helpers: the external command wrapper and friends.
pub mod cancel;
pub mod cmd;
pub mod container;
pub mod lock;
pub mod progress;
pub mod ui;

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
