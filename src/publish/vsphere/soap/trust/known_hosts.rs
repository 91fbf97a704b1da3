//! govc's pinned thumbprints: `GOVC_TLS_KNOWN_HOSTS`, a `:` list of files
//! of `host[:port] thumbprint` lines (govmomi `vim25/soap/client.go`
//! `LoadThumbprints`), keyed by `host:port` as govc keys them
//! ([`host_addr`]). [`Trust`](super::Trust) consults them when a
//! certificate is not trusted by its chain.
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::PathBuf;

/// Where the pinned thumbprints come from, for messages.
pub(super) const KNOWN_HOSTS_VAR: &str = "GOVC_TLS_KNOWN_HOSTS";

/// `host:port` as govc keys its thumbprints (`hostAddr`: 443 when the
/// name has no port), the host in lower case.
pub fn host_addr(authority: &str) -> String {
    let a = authority.trim().to_ascii_lowercase();
    let has_port = match (a.rfind(':'), a.rfind(']')) {
        (Some(c), Some(b)) => c > b,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if has_port {
        a
    } else {
        format!("{a}:443")
    }
}

/// A pinned thumbprint and the file that pins it.
#[derive(Debug, Clone)]
pub(super) struct Pin {
    pub(super) thumbprint: String,
    pub(super) file: PathBuf,
}

/// The thumbprints of `GOVC_TLS_KNOWN_HOSTS`.
pub(super) struct KnownHosts {
    pub(super) files: Vec<PathBuf>,
    /// By `host:port`; a later line wins, as in govc.
    pub(super) pins: HashMap<String, Pin>,
}

/// govc's `loadThumbprints`: `host thumbprint` lines; a file that does not
/// exist is empty; other lines are skipped.
pub(super) fn read_known_hosts(spec: &OsStr) -> Result<KnownHosts> {
    let mut kh = KnownHosts {
        files: Vec::new(),
        pins: HashMap::new(),
    };
    for f in std::env::split_paths(spec).filter(|p| !p.as_os_str().is_empty()) {
        kh.files.push(f.clone());
        let text = match std::fs::read_to_string(&f) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "reading the known hosts file {} ({KNOWN_HOSTS_VAR})",
                        f.display()
                    )
                })
            }
        };
        for line in text.lines() {
            let mut w = line.split_whitespace();
            let (Some(host), Some(tp)) = (w.next(), w.next()) else {
                continue;
            };
            if host.starts_with('#') {
                continue;
            }
            kh.pins.insert(
                host_addr(host),
                Pin {
                    thumbprint: tp.to_string(),
                    file: f.clone(),
                },
            );
        }
    }
    Ok(kh)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_addrs_as_govc() {
        assert_eq!(host_addr("vc.example.com"), "vc.example.com:443");
        assert_eq!(host_addr("VC.example.com:8989"), "vc.example.com:8989");
        assert_eq!(host_addr("[::1]"), "[::1]:443");
        assert_eq!(host_addr("[::1]:8443"), "[::1]:8443");
    }

    #[test]
    fn known_hosts_lines() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        std::fs::write(
            &a,
            "vc.example.com AA:BB\n# a comment\nbad-line\n10.0.0.1:8989 CC:DD extra\nvc.example.com EE:FF\n",
        )
        .unwrap();
        let spec = std::env::join_paths([a.as_path(), d.path().join("missing").as_path()]).unwrap();
        let kh = read_known_hosts(&spec).unwrap();
        assert_eq!(kh.files.len(), 2);
        assert_eq!(kh.pins["vc.example.com:443"].thumbprint, "EE:FF");
        assert_eq!(kh.pins["10.0.0.1:8989"].thumbprint, "CC:DD");
        assert_eq!(kh.pins.len(), 2);
    }
}
