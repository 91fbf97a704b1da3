//! Preflight of the settings, before the first side effect: platform
//! names and arches, `all`, the output directory, the base URL. What the
//! OS ships is checked in [`super::facts`], free space in [`super::space`].
use crate::platforms::{self, PlatformSpec, Upload};
use crate::util::arch::Arch;
use crate::util::progress::Reporter;
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// The platform named `all` (docs/contract.md §1.3): what the release's pinned stream
/// lists for the arch, else every platform this tool builds.
pub const ALL: &str = "all";

/// The platforms named on the command line: those named explicitly and
/// whether `all` was named (expanded later, by [`expand_all`]).
pub struct Named {
    pub specs: Vec<&'static PlatformSpec>,
    pub all: bool,
}

impl Named {
    /// Parse the platform arguments ([`parse_platforms`]).
    pub fn parse(names: &[String]) -> Result<Named> {
        Ok(Named {
            specs: parse_platforms(names)?,
            all: names.iter().any(|p| p == ALL),
        })
    }

    /// Whether a platform named can be published to `target` (`all`
    /// names every platform).
    pub fn upload_to(&self, target: Upload) -> bool {
        self.all || self.specs.iter().any(|p| p.uploads_to(target))
    }
}

/// The platforms named explicitly (`all` is expanded later, by
/// [`expand_all`], once the release's stream is known).
pub fn parse_platforms(names: &[String]) -> Result<Vec<&'static PlatformSpec>> {
    let mut v: Vec<&'static PlatformSpec> = Vec::new();
    for n in names {
        if n == ALL {
            continue;
        }
        let Some(p) = platforms::find(n) else {
            bail!(
                "unknown platform '{n}'; valid platforms: {}, or {ALL}",
                platforms::names().join(", ")
            );
        };
        if !p.built {
            bail!(
                "platform '{n}' ({}) is not built by this version yet; built now: {}",
                Arch::join(p.arches),
                platforms::PLATFORMS
                    .iter()
                    .filter(|p| p.built)
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if !v.iter().any(|x| x.name == p.name) {
            v.push(p);
        }
    }
    Ok(v)
}

/// Every named platform must exist for the release's architecture.
pub fn check_arch(named: &[&'static PlatformSpec], arch: Arch) -> Result<()> {
    if let Some(p) = named.iter().find(|p| !p.exists_for(arch)) {
        bail!(
            "platform '{}' does not exist for {arch} (the release's architecture): upstream builds it for {} only; pick another --arch or drop {} (`bootimage-gen platforms` lists them per arch)",
            p.name,
            Arch::join(p.arches),
            p.name
        );
    }
    Ok(())
}

/// `all`: every platform the release's own pinned stream (its
/// `coreos-bootimages` ConfigMap) lists for the arch, with the platforms
/// the stream places under a listed one (metal4k and live under `metal`);
/// with no stream for the arch, every platform this tool builds for it. A
/// listed platform this tool cannot build is reported as skipped, never an
/// error. Platforms named explicitly stay.
pub fn expand_all(
    named: Vec<&'static PlatformSpec>,
    resolved: &crate::release::resolve::Resolved,
    arch: Arch,
    r: &Reporter,
) -> Vec<&'static PlatformSpec> {
    let listed = resolved
        .stream
        .as_ref()
        .and_then(|s| crate::release::stream_platforms(s, arch));
    let wanted: Vec<&'static PlatformSpec> = match &listed {
        Some(list) => {
            let mut skipped = Vec::new();
            for p in list {
                match platforms::find(p) {
                    Some(s) if s.built && s.exists_for(arch) => {}
                    Some(s) if s.built => skipped.push(format!(
                        "{p} (this tool builds it for {} only)",
                        Arch::join(s.arches)
                    )),
                    Some(_) => skipped.push(format!("{p} (not built by this version yet)")),
                    None => skipped.push(format!("{p} (unknown to this version)")),
                }
            }
            if !skipped.is_empty() {
                r.note(&format!(
                    "all: skipping {} listed by the release's stream for {arch}: {}",
                    skipped.len(),
                    skipped.join(", ")
                ));
            }
            platforms::built_for(arch)
                .filter(|s| list.iter().any(|p| p == s.name || p == s.stream_platform))
                .collect()
        }
        None => {
            let all: Vec<&'static PlatformSpec> = platforms::built_for(arch).collect();
            r.note(&format!(
                "all: release {} pins no stream listing {arch} artifacts (its coreos-bootimages ConfigMap has none for {arch}), so there is no list of what its installer knows: building every platform this tool builds for {arch}: {}",
                resolved.release_version,
                all.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
            ));
            all
        }
    };
    let mut out = named;
    for s in wanted {
        if !out.iter().any(|x| x.name == s.name) {
            out.push(s);
        }
    }
    out
}

/// `--base-url` must be an absolute URL with a scheme and a host.
pub fn check_base_url(u: &str) -> Result<()> {
    let ok = u.split_once("://").is_some_and(|(scheme, rest)| {
        let host = rest.split('/').next().unwrap_or("");
        !scheme.is_empty()
            && scheme
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
            && !host.is_empty()
            && !u.chars().any(|c| c.is_whitespace() || c.is_control())
    });
    if !ok {
        bail!(
            "--base-url '{u}' is not a URL; give the absolute URL the output directory will be served from, e.g. https://mirror.example.com/rhcos/4.18"
        );
    }
    Ok(())
}

pub fn check_output_dir(dir: &Path) -> Result<()> {
    let probe = if dir.exists() {
        if !dir.is_dir() {
            bail!(
                "output path {} exists and is not a directory; pass -o with a directory",
                dir.display()
            );
        }
        dir.to_path_buf()
    } else {
        // The nearest existing ancestor must let us create it.
        let mut p = dir.to_path_buf();
        while !p.exists() {
            match p.parent() {
                Some(q) if !q.as_os_str().is_empty() => p = q.to_path_buf(),
                _ => {
                    p = PathBuf::from(".");
                    break;
                }
            }
        }
        if !p.is_dir() {
            bail!(
                "cannot create output directory {}: {} is not a directory",
                dir.display(),
                p.display()
            );
        }
        p
    };
    let c = std::ffi::CString::new(probe.as_os_str().as_encoded_bytes())?;
    // SAFETY: access(2) on a valid NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        bail!(
            "output directory {} is not writable ({}); choose another with -o",
            probe.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}
