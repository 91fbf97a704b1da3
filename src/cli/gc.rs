//! `gc` arguments, and the parsers of its `--max-age` and `--max-size`
//! values (text in, a duration or a byte count out). Handled by
//! `commands::gc`.
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Cache directory. Default: $XDG_CACHE_HOME/bootimage-gen.
    #[arg(long, value_name = "DIR", env = "BOOTIMAGE_GEN_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// An output directory to clear of `.partial` files left by a killed
    /// run (repeatable); skipped while a run writes there.
    #[arg(short, long, value_name = "DIR")]
    pub output: Vec<PathBuf>,
    /// Remove cache entries not used for longer than AGE: a number with s,
    /// m, h, d or w (e.g. 36h, 14d).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub max_age: Option<std::time::Duration>,
    /// Then remove the least recently used entries until the cache takes
    /// at most SIZE: bytes, or a number with K, M, G or T (powers of 1024;
    /// e.g. 500M, 20G). 0 removes every entry not in use.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_size: Option<u64>,
    /// Say what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `36h`, `14d`, `2w`, `90s`, `30m`.
pub fn parse_age(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let (n, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("'{s}' is not an age: use a number with s, m, h, d or w, e.g. 14d"))?;
    let mul = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        "w" => 7 * 86400,
        _ => {
            return Err(format!(
                "'{s}': the unit must be s, m, h, d or w (e.g. 14d)"
            ))
        }
    };
    Ok(std::time::Duration::from_secs(n * mul))
}

/// `1234`, `500M`, `20G` (powers of 1024; a trailing `B` or `iB` is allowed).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (n, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = n.parse().map_err(|_| {
        format!("'{s}' is not a size: use bytes or a number with K, M, G or T, e.g. 20G")
    })?;
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("'{s}': the unit must be K, M, G or T (e.g. 20G)")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("'{s}' is too large"))
}
