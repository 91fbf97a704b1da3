//! Architecture names: CoreOS (`x86_64`, `aarch64`, ...) and OCI/GOARCH
//! (`amd64`, `arm64`, ...).

/// Map an OCI architecture to the CoreOS name.
/// The OCI (GOARCH) name of a CoreOS architecture; OCI names pass through.
pub fn oci_arch(arch: &str) -> String {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
    .to_string()
}

/// The CoreOS architectures, by their CoreOS names.
pub const ARCHES: [&str; 4] = ["x86_64", "aarch64", "ppc64le", "s390x"];

/// `--arch`: a CoreOS or OCI architecture name, as its CoreOS name.
pub fn parse_arch(a: &str) -> anyhow::Result<String> {
    let c = coreos_arch(a);
    if !ARCHES.contains(&c.as_str()) {
        anyhow::bail!(
            "--arch {a}: not an architecture CoreOS ships; use one of {} (or amd64, arm64)",
            ARCHES.join(", ")
        );
    }
    Ok(c)
}

/// This host's architecture, by its CoreOS name.
pub fn host_arch() -> String {
    std::env::consts::ARCH.replace("powerpc64", "ppc64le")
}

pub fn coreos_arch(oci: &str) -> String {
    match oci {
        "amd64" => "x86_64",
        "arm64" => "aarch64",
        "ppc64le" => "ppc64le",
        "s390x" => "s390x",
        other => other,
    }
    .to_string()
}
