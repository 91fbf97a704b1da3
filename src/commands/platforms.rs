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
        "{:<10} {:<22} {:<42} {:<10} STATUS",
        "PLATFORM", "ARTIFACT", "FORMAT", "IGNITION"
    );
    for p in PLATFORMS {
        let artifact = if p.name == "live" {
            "live-iso.<arch>.iso +pxe".to_string()
        } else {
            format!("{}.<arch>.{}", p.name, p.extension)
        };
        let status = if p.built {
            "supported"
        } else {
            "not built yet"
        };
        println!(
            "{:<10} {:<22} {:<42} {:<10} {}",
            p.name, artifact, p.format, p.ignition_id, status
        );
    }
    Ok(())
}
