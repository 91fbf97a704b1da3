//! `bootimage-gen platforms`: the platform table.
use crate::cli::PlatformsArgs;
use crate::platforms::PLATFORMS;
use anyhow::Result;

pub fn run(a: PlatformsArgs) -> Result<()> {
    if a.json {
        println!("{}", serde_json::to_string_pretty(PLATFORMS)?);
        return Ok(());
    }
    println!(
        "{:<16} {:<28} {:<52} {:<30} STATUS",
        "PLATFORM", "ARTIFACT", "FORMAT", "ARCHES (RHCOS ships: *)"
    );
    for p in PLATFORMS {
        let artifact = if p.is_live() {
            "live-iso.<arch>.iso +pxe".to_string()
        } else {
            format!("{}.<arch>.{}", p.name, p.extension)
        };
        let status = if p.built {
            "supported"
        } else {
            "not built yet"
        };
        let arches: Vec<String> = p
            .arches
            .iter()
            .map(|a| {
                if p.rhcos_arches.contains(a) {
                    format!("{a}*")
                } else {
                    a.to_string()
                }
            })
            .collect();
        println!(
            "{:<16} {:<28} {:<52} {:<30} {}",
            p.name,
            artifact,
            p.format.describe(),
            arches.join(","),
            status
        );
    }
    println!();
    println!("Console settings (kernel arguments, GRUB serial lines) come from the OS's");
    println!("platforms.json entry for the platform (/usr/share/coreos-assembler/platforms.json,");
    println!("keyed by platform as fedora-coreos-config writes it); a platform it does not list");
    println!("(metal, metal4k and live always) gets ignition.platform.id alone. An OS without");
    println!("platforms.json gets the built-in defaults (see --json). `generate --dry-run`");
    println!("prints, per artifact, where its console settings came from (console_source).");
    println!("`all` builds what the release's pinned stream lists, plus metal4k and live.");
    Ok(())
}
