//! Test hooks of the fan-in: the moment a push enters it
//! (`$BOOTIMAGE_GEN_FANIN_AT`), and a hold in its merge
//! (`push-merge-hold`), so that tests race pushes at chosen instants.
use anyhow::{anyhow, Result};

/// Tests: with `$BOOTIMAGE_GEN_FANIN_AT` (a time in milliseconds since
/// the epoch), wait until then before the last check and the part's tag,
/// so that racing pushes enter the fan-in at the moments a test chose.
pub const FANIN_AT_ENV: &str = "BOOTIMAGE_GEN_FANIN_AT";

pub fn wait_for_test_instant() -> Result<()> {
    let Some(at) = std::env::var(FANIN_AT_ENV)
        .ok()
        .and_then(|v| v.parse::<u128>().ok())
    else {
        return Ok(());
    };
    loop {
        crate::util::cancel::check()?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        if now >= at {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis((at - now).min(50) as u64));
    }
}

/// Tests: with `$BOOTIMAGE_GEN_PAUSE_AT=push-merge-hold`, say so and wait
/// in the merge until the file `$BOOTIMAGE_GEN_FANIN_RESUME` exists (or a
/// signal arrives), then go on.
pub(super) fn hold_point() -> Result<()> {
    use crate::util::cancel;
    if !std::env::var(cancel::PAUSE_ENV).is_ok_and(|p| p == "push-merge-hold") {
        return Ok(());
    }
    let resume = std::env::var_os("BOOTIMAGE_GEN_FANIN_RESUME")
        .ok_or_else(|| anyhow!("push-merge-hold needs BOOTIMAGE_GEN_FANIN_RESUME"))?;
    eprintln!("bootimage-gen: paused at push-merge-hold");
    while !std::path::Path::new(&resume).exists() {
        cancel::check()?;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}
