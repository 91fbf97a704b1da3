//! The live ISO's volume id and the live kernel arguments (docs/contract.md §5): metal's
//! kargs with the first-boot, console, platform and ostree ones swapped for
//! `coreos.liveiso=<volid> ignition.firstboot ignition.platform.id=metal`.
use anyhow::{bail, Result};

/// ISO9660 volume ids hold at most 32 characters (ECMA-119 8.4.6); docs/contract.md §5
/// cuts `<osname>-<version>` there.
pub const VOLUME_ID_MAX: usize = 32;

/// ISO volume id: `<osname>-<version>` cut to 32 characters (docs/contract.md §5). Only
/// ASCII characters are kept (a volume id is ASCII).
pub fn volume_id(osname: &str, version: &str) -> String {
    format!("{osname}-{version}")
        .chars()
        .filter(|c| c.is_ascii() && !c.is_ascii_control())
        .take(VOLUME_ID_MAX)
        .collect()
}

/// Live kernel arguments (docs/contract.md §5): metal's minus `$ignition_firstboot`,
/// `console=`, `ignition.platform.id=` and `ostree=`, plus
/// `coreos.liveiso=<volid> ignition.firstboot ignition.platform.id=metal`.
pub fn live_kargs(metal: &[String], volid: &str) -> Result<Vec<String>> {
    if volid.contains(char::is_whitespace) {
        bail!("volume id '{volid}' holds white space; it cannot be a kernel argument value");
    }
    let mut k: Vec<String> = metal
        .iter()
        .filter(|a| {
            let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n);
            !(a.as_str() == "$ignition_firstboot"
                || name == "console"
                || name == "ignition.platform.id"
                || name == "ostree"
                || name == "coreos.liveiso"
                || name == "ignition.firstboot")
        })
        .cloned()
        .collect();
    k.push(format!("coreos.liveiso={volid}"));
    k.push("ignition.firstboot".into());
    k.push("ignition.platform.id=metal".into());
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn volume_id_is_cut_to_32() {
        assert_eq!(volume_id("rhcos", "418.94.1"), "rhcos-418.94.1");
        let long = volume_id("fedora-coreos", "40.20240101.3.0-extra-long-suffix");
        assert_eq!(long.len(), VOLUME_ID_MAX);
        assert_eq!(long, "fedora-coreos-40.20240101.3.0-ex");
    }

    #[test]
    fn kargs_follow_spec() {
        let metal = s(&[
            "rw",
            "$ignition_firstboot",
            "mitigations=auto,nosmt",
            "ignition.platform.id=metal",
            "console=ttyS0,115200n8",
            "ostree=/ostree/boot.1/x/y/0",
        ]);
        assert_eq!(
            live_kargs(&metal, "rhcos-1").unwrap(),
            s(&[
                "rw",
                "mitigations=auto,nosmt",
                "coreos.liveiso=rhcos-1",
                "ignition.firstboot",
                "ignition.platform.id=metal"
            ])
        );
    }
}
