//! Where the OS is staged and which mkfs makes the filesystems from the
//! stage, decided before the preflight (the work directory's estimate
//! depends on both) and said on the console.
use crate::plan::settings::Settings;
use crate::plan::Plan;
use crate::sys::ramstage;
use crate::util::progress::Reporter;
use anyhow::{bail, Result};

/// The mkfs that makes the filesystems from the staged tree (said on the
/// console), or none and why (the kernel writes them, not reproducibly).
pub(super) fn mkfs_tools(s: &Settings, r: &Reporter) -> Result<Option<crate::disk::mkfs::Tools>> {
    Ok(
        match crate::disk::mkfs::find_tools(s.mkfs_tools.as_deref(), &s.input.cache_dir)? {
            Ok(t) => {
                r.note(&format!(
                    "mkfs: {} from {}: the root and boot filesystems are made from the staged tree",
                    t.versions, t.source
                ));
                Some(t)
            }
            Err(why) => {
                r.note(&format!(
                    "mkfs: the filesystems are not reproducible: {why}. scripts/mkfs-root.sh fetches mkfs that makes them reproducibly (--mkfs-tools)"
                ));
                None
            }
        },
    )
}

/// Whether the OS is staged in memory before mkfs makes the filesystems
/// from it: a tmpfs under the work directory when it fits (`--stage-in`,
/// [`ramstage`]), else the work directory; said on the console. Only with
/// mkfs tools (else there is no stage) on this host's loop devices (a VM
/// stages inside itself).
pub(super) fn stage_place(s: &Settings, plan: &Plan, staged: bool, r: &Reporter) -> Result<bool> {
    let none = if !staged {
        Some("no mkfs makes the filesystems from a stage: the kernel writes them directly")
    } else if plan.backend.name.vm().is_some() {
        Some("the VM backends stage inside their VM")
    } else {
        None
    };
    if let Some(why) = none {
        if s.stage_in == ramstage::StageIn::Memory {
            bail!("--stage-in memory: {why}; leave --stage-in at auto");
        }
        return Ok(false);
    }
    // The staged tree, and the root filesystem mkfs makes from it beside
    // it, each about the OS's data.
    let data = 2 * (plan.disk.content_bytes + (64 << 20));
    Ok(match ramstage::decide(s.stage_in, data)? {
        Ok(()) => {
            r.note(&format!(
                "stage: in memory (a tmpfs in the work directory, about {} MiB): the OS's bytes reach the disk once, written by mkfs",
                data >> 20
            ));
            true
        }
        Err(why) => {
            r.note(&format!("stage: in the work directory ({why})"));
            false
        }
    })
}

/// The stage's tmpfs in `work`, sized to hold the stage files whole (their
/// apparent sizes: the metal disk's and the root filesystem's).
pub(super) fn mount(work: &std::path::Path, plan: &Plan) -> Result<ramstage::RamStage> {
    ramstage::mount(work, plan.disk.metal_size + plan.disk.root_size)
}
