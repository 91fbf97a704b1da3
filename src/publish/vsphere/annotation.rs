//! The annotation our templates carry in vCenter: the text written on
//! import (the RHCOS version and release in) and the RHCOS version read
//! back from an existing VM's annotation (`None` when it is not ours).

/// The annotation our templates carry: a marker line, the RHCOS version,
/// the release and the SHA-256 of the uploaded VMDK.
pub fn annotation(rhcos_version: &str, release: Option<&str>) -> String {
    format!(
        "bootimage-gen template\nrhcos-version={rhcos_version}\nrelease={}\n",
        release.unwrap_or("")
    )
}

/// The RHCOS version an annotation records, if it is one of ours.
pub fn annotation_version(a: &str) -> Option<String> {
    let mut lines = a.lines();
    if lines.next()? != "bootimage-gen template" {
        return None;
    }
    lines
        .find_map(|l| l.strip_prefix("rhcos-version="))
        .map(str::to_string)
}
