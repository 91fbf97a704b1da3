//! Image references in the transports the tool accepts:
//! `docker://HOST/REPO[:TAG][@DIGEST]` (a bare `HOST/REPO...` means docker://),
//! `oci:DIR[:TAG]`, `oci-archive:FILE[:TAG]`, `docker-archive:FILE[:REF]`.
use anyhow::{bail, Result};
use serde::Serialize;
use std::fmt;
use std::path::PathBuf;

/// Registry used by Docker for references without a host (containers/image).
const DEFAULT_REGISTRY: &str = "docker.io";

/// A parsed image reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "transport", rename_all = "kebab-case")]
pub enum ImageRef {
    /// A registry reference.
    Docker(DockerRef),
    /// An OCI image layout directory.
    Oci { path: PathBuf, tag: Option<String> },
    /// A tar archive of an OCI image layout.
    OciArchive { path: PathBuf, tag: Option<String> },
    /// A `docker save` archive.
    DockerArchive {
        path: PathBuf,
        reference: Option<String>,
    },
}

/// `registry/repository[:tag][@digest]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DockerRef {
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

/// True for `sha256:` followed by 64 lower-case hex digits.
pub fn is_sha256_digest(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .map(|h| {
            h.len() == 64
                && h.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
        .unwrap_or(false)
}

fn valid_tag(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 128
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && !t.starts_with(['.', '-'])
}

fn valid_repo(r: &str) -> bool {
    !r.is_empty()
        && r.split('/').all(|c| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        })
}

impl DockerRef {
    /// Parse `HOST/REPO[:TAG][@DIGEST]`.
    pub fn parse(s: &str) -> Result<Self> {
        let orig = s;
        if s.is_empty() {
            bail!("empty image reference");
        }
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => {
                if !is_sha256_digest(d) {
                    bail!("image reference '{orig}': '{d}' is not a sha256 digest (expected sha256:<64 hex digits>)");
                }
                (r, Some(d.to_string()))
            }
            None => (s, None),
        };
        let (name, tag) = match rest.rfind(':') {
            Some(i) if !rest[i + 1..].contains('/') => {
                (&rest[..i], Some(rest[i + 1..].to_string()))
            }
            _ => (rest, None),
        };
        if let Some(t) = &tag {
            if !valid_tag(t) {
                bail!("image reference '{orig}': '{t}' is not a valid tag");
            }
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, repo))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), repo.to_string())
            }
            Some(_) => (DEFAULT_REGISTRY.to_string(), name.to_string()),
            None => (DEFAULT_REGISTRY.to_string(), format!("library/{name}")),
        };
        if !valid_repo(&repository) {
            bail!("image reference '{orig}': '{repository}' is not a valid repository name (lower-case letters, digits, '.', '_', '-', '/')");
        }
        if registry.is_empty() {
            bail!("image reference '{orig}' has an empty registry host");
        }
        Ok(DockerRef {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// `registry/repository`, the unit IDMS mirrors match on.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The same repository, pinned to a digest.
    pub fn with_digest(&self, digest: &str) -> Self {
        DockerRef {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: None,
            digest: Some(digest.to_string()),
        }
    }
}

impl fmt::Display for DockerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        // containers/image rejects references with both: the digest wins.
        match (&self.digest, &self.tag) {
            (Some(d), _) => write!(f, "@{d}"),
            (None, Some(t)) => write!(f, ":{t}"),
            (None, None) => Ok(()),
        }
    }
}

/// Split `PATH[:SUFFIX]` where SUFFIX is a tag-like word (no '/').
fn split_path_tag(s: &str) -> (PathBuf, Option<String>) {
    match s.rfind(':') {
        Some(i) if !s[i + 1..].contains('/') && !s[i + 1..].is_empty() => {
            (PathBuf::from(&s[..i]), Some(s[i + 1..].to_string()))
        }
        _ => (PathBuf::from(s), None),
    }
}

impl ImageRef {
    /// Parse a reference in any accepted transport.
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.trim();
        if let Some(r) = s.strip_prefix("docker://") {
            return Ok(ImageRef::Docker(DockerRef::parse(r)?));
        }
        if let Some(r) = s.strip_prefix("oci-archive:") {
            let (path, tag) = split_path_tag(r);
            if path.as_os_str().is_empty() {
                bail!("'{s}': oci-archive: needs a file path");
            }
            return Ok(ImageRef::OciArchive { path, tag });
        }
        if let Some(r) = s.strip_prefix("oci:") {
            let (path, tag) = split_path_tag(r);
            if path.as_os_str().is_empty() {
                bail!("'{s}': oci: needs a directory path");
            }
            return Ok(ImageRef::Oci { path, tag });
        }
        if let Some(r) = s.strip_prefix("docker-archive:") {
            // docker-archive:FILE[:name:tag] — keep whatever follows the path.
            let (path, reference) = match r.find(':') {
                Some(i) => (PathBuf::from(&r[..i]), Some(r[i + 1..].to_string())),
                None => (PathBuf::from(r), None),
            };
            if path.as_os_str().is_empty() {
                bail!("'{s}': docker-archive: needs a file path");
            }
            return Ok(ImageRef::DockerArchive { path, reference });
        }
        if let Some((t, _)) = s.split_once(':') {
            if [
                "containers-storage",
                "dir",
                "docker-daemon",
                "registry",
                "ostree",
            ]
            .contains(&t)
            {
                bail!("'{s}': transport '{t}:' is not supported; use docker://, oci:, oci-archive: or docker-archive:");
            }
        }
        Ok(ImageRef::Docker(DockerRef::parse(s)?))
    }

    /// The reference in containers/image (skopeo) syntax.
    pub fn to_transport_string(&self) -> String {
        match self {
            ImageRef::Docker(d) => format!("docker://{d}"),
            ImageRef::Oci { path, tag } => match tag {
                Some(t) => format!("oci:{}:{t}", path.display()),
                None => format!("oci:{}", path.display()),
            },
            ImageRef::OciArchive { path, tag } => match tag {
                Some(t) => format!("oci-archive:{}:{t}", path.display()),
                None => format!("oci-archive:{}", path.display()),
            },
            ImageRef::DockerArchive { path, reference } => match reference {
                Some(r) => format!("docker-archive:{}:{r}", path.display()),
                None => format!("docker-archive:{}", path.display()),
            },
        }
    }

    /// The registry host, for registry references.
    pub fn registry(&self) -> Option<&str> {
        match self {
            ImageRef::Docker(d) => Some(&d.registry),
            _ => None,
        }
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_transport_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn bare_is_docker() {
        let r = ImageRef::parse("quay.io/openshift-release-dev/ocp-release:4.18.0-x86_64").unwrap();
        assert_eq!(
            r.to_string(),
            "docker://quay.io/openshift-release-dev/ocp-release:4.18.0-x86_64"
        );
        let r = ImageRef::parse("127.0.0.1:5000/ocp/release").unwrap();
        assert_eq!(r.registry(), Some("127.0.0.1:5000"));
        let r = ImageRef::parse("busybox").unwrap();
        assert_eq!(r.to_string(), "docker://docker.io/library/busybox");
    }

    #[test]
    fn digest_refs() {
        let r = ImageRef::parse(&format!("docker://localhost:5000/a/b@{D}")).unwrap();
        match &r {
            ImageRef::Docker(d) => {
                assert_eq!(d.digest.as_deref(), Some(D));
                assert_eq!(d.name(), "localhost:5000/a/b");
            }
            _ => panic!(),
        }
        assert!(ImageRef::parse("quay.io/a/b@sha256:1234").is_err());
        let both = DockerRef::parse(&format!("quay.io/a/b:t@{D}")).unwrap();
        assert_eq!(both.to_string(), format!("quay.io/a/b@{D}"));
    }

    #[test]
    fn local_transports() {
        assert_eq!(
            ImageRef::parse("oci:/tmp/layout:release").unwrap(),
            ImageRef::Oci {
                path: "/tmp/layout".into(),
                tag: Some("release".into())
            }
        );
        assert_eq!(
            ImageRef::parse("oci:/tmp/layout").unwrap(),
            ImageRef::Oci {
                path: "/tmp/layout".into(),
                tag: None
            }
        );
        assert_eq!(
            ImageRef::parse("oci-archive:/x/r.tar:rel").unwrap(),
            ImageRef::OciArchive {
                path: "/x/r.tar".into(),
                tag: Some("rel".into())
            }
        );
        assert_eq!(
            ImageRef::parse("docker-archive:/x/r.tar").unwrap(),
            ImageRef::DockerArchive {
                path: "/x/r.tar".into(),
                reference: None
            }
        );
        assert!(ImageRef::parse("containers-storage:foo").is_err());
        assert!(ImageRef::parse("oci:").is_err());
    }

    #[test]
    fn bad_names() {
        assert!(ImageRef::parse("quay.io/UPPER/case").is_err());
        assert!(ImageRef::parse("").is_err());
        assert!(ImageRef::parse("quay.io/a/b:bad/tag").is_err());
    }
}
