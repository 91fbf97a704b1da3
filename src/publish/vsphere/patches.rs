//! What the cluster needs after a template import: each MachineSet's
//! `spec.template.spec.providerSpec.value.template` pointed at the template,
//! and the `MachineConfiguration` `cluster` recording the RHCOS version of
//! the bootimages for Manual boot-image skew enforcement (docs/contract.md §7; openshift/
//! api `operator/v1/types_machineconfiguration.go`).
use anyhow::{bail, Context, Result};
use std::path::Path;

/// openshift/api's pattern for `manual.rhcosVersion`.
pub const RHCOS_VERSION_PATTERN: &str = r"^[0-9]+\.[0-9]+\.([0-9]{8}|[0-9]{12})-[0-9]+$";

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `v` matches [`RHCOS_VERSION_PATTERN`].
pub fn is_rhcos_version(v: &str) -> bool {
    let Some((head, build)) = v.rsplit_once('-') else {
        return false;
    };
    let parts: Vec<&str> = head.split('.').collect();
    parts.len() == 3
        && digits(parts[0])
        && digits(parts[1])
        && digits(parts[2])
        && matches!(parts[2].len(), 8 | 12)
        && digits(build)
}

/// The `rhcosVersion` for an OS version as the OS states it (the OVA's
/// ProductSection `Version`, meta.json `buildid`, or a node image's
/// `org.opencontainers.image.version`): the same string when it matches the
/// API's pattern; otherwise an error naming it (it is never typed by the
/// user, so a mismatch means the OS carries no RHCOS build id).
pub fn rhcos_version(os_version: &str, source: &str) -> Result<String> {
    let v = os_version.trim();
    if is_rhcos_version(v) {
        return Ok(v.to_string());
    }
    bail!(
        "the OS version {v:?} ({source}) is not an RHCOS build id (pattern {RHCOS_VERSION_PATTERN}): \
         the skew record needs one; build the OVA from an RHCOS release"
    )
}

/// The namespace of the Machine API objects.
pub const MACHINE_API_NS: &str = "openshift-machine-api";

/// The JSON patch of one MachineSet (`--type=json`).
pub fn machineset_patch(template: &str) -> serde_json::Value {
    serde_json::json!([{
        "op": "replace",
        "path": "/spec/template/spec/providerSpec/value/template",
        "value": template,
    }])
}

/// The merge patch of MachineConfiguration `cluster`.
pub fn machineconfiguration_patch(rhcos_version: &str) -> serde_json::Value {
    serde_json::json!({
        "spec": {
            "bootImageSkewEnforcement": {
                "mode": "Manual",
                "manual": {
                    "mode": "RHCOSVersion",
                    "rhcosVersion": rhcos_version,
                }
            }
        }
    })
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The `oc` commands, one a line: a patch per named MachineSet (or a loop
/// over every MachineSet when none is named), then the skew record.
pub fn commands(template: &str, machinesets: &[String], rhcos_version: &str) -> String {
    let ms = shell_quote(&machineset_patch(template).to_string());
    let mut out = String::new();
    if machinesets.is_empty() {
        out.push_str(&format!(
            "for ms in $(oc -n {MACHINE_API_NS} get machineset -o name); do oc -n {MACHINE_API_NS} patch \"$ms\" --type=json -p {ms}; done\n"
        ));
    } else {
        for m in machinesets {
            out.push_str(&format!(
                "oc -n {MACHINE_API_NS} patch machineset {} --type=json -p {ms}\n",
                shell_quote(m)
            ));
        }
    }
    out.push_str(&format!(
        "oc patch machineconfiguration cluster --type=merge -p {}\n",
        shell_quote(&machineconfiguration_patch(rhcos_version).to_string())
    ));
    out
}

/// Write the patches into `dir`: `machineset-template.patch.json` (the JSON
/// patch, the same for every MachineSet), `machineconfiguration-cluster.
/// patch.yaml` (the merge patch) and `apply.sh` (the `oc` commands).
pub fn write(
    dir: &Path,
    template: &str,
    machinesets: &[String],
    rhcos_version: &str,
) -> Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let files = [
        (
            "machineset-template.patch.json",
            serde_json::to_string_pretty(&machineset_patch(template))? + "\n",
        ),
        (
            "machineconfiguration-cluster.patch.yaml",
            serde_yaml_ng::to_string(&machineconfiguration_patch(rhcos_version))?,
        ),
        (
            "apply.sh",
            format!(
                "#!/bin/sh\nset -e\n{}",
                commands(template, machinesets, rhcos_version)
            ),
        ),
    ];
    let mut out = Vec::new();
    for (name, text) in files {
        let p = dir.join(name);
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text.as_bytes())
            .and_then(|_| std::fs::rename(&tmp, &p))
            .with_context(|| format!("writing {}", p.display()))?;
        out.push(p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        // The current form, the legacy form, a node image's
        // org.opencontainers.image.version (RHCOS 10 node image form).
        for v in [
            "9.6.20251023-0",
            "48.84.202208021106-0",
            "10.1.20251112-0",
            "418.94.202410090804-0",
        ] {
            assert_eq!(rhcos_version(v, "test").unwrap(), v);
        }
        // Negative: what the pattern refuses.
        for v in [
            "4.19.0",
            "9.6.2025102-0",
            "9.6.20251023",
            "9.6.20251023-0.1",
            "v9.6.20251023-0",
            "9.20251023-0",
            "",
        ] {
            let e = rhcos_version(v, "test").unwrap_err().to_string();
            assert!(e.contains("not an RHCOS build id"), "{v}: {e}");
        }
    }

    #[test]
    fn patches_parse() {
        let c = commands("rhcos-tpl", &["a".into(), "it's".into()], "9.6.20251023-0");
        assert_eq!(c.lines().count(), 3);
        assert!(c.contains("'it'\\''s'"));
        let mc = machineconfiguration_patch("9.6.20251023-0");
        assert_eq!(
            mc["spec"]["bootImageSkewEnforcement"]["manual"]["rhcosVersion"],
            "9.6.20251023-0"
        );
    }
}
