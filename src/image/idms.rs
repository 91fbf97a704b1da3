//! ImageDigestMirrorSet (and the older ImageContentSourcePolicy) files: for a
//! reference by digest, the mirrors to try first, in order, as `oc` does.
use super::imageref::DockerRef;
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::Path;

/// One source repository and its mirrors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorRule {
    pub source: String,
    pub mirrors: Vec<String>,
    /// `NeverContactSource`: do not fall back to the source itself.
    pub never_contact_source: bool,
}

#[derive(Deserialize)]
struct Doc {
    kind: Option<String>,
    spec: Option<Spec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    image_digest_mirrors: Option<Vec<Entry>>,
    repository_digest_mirrors: Option<Vec<Entry>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    source: String,
    #[serde(default)]
    mirrors: Vec<String>,
    mirror_source_policy: Option<String>,
}

/// The mirror rules of one or more IDMS/ICSP documents.
#[derive(Debug, Clone, Default)]
pub struct Mirrors {
    pub rules: Vec<MirrorRule>,
}

impl Mirrors {
    /// Read a YAML file holding one or more ImageDigestMirrorSet or
    /// ImageContentSourcePolicy documents (a `List` is not needed: use `---`).
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading IDMS file {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("IDMS file {}", path.display()))
    }

    /// Parse YAML text (see [`Mirrors::from_file`]).
    pub fn parse(text: &str) -> Result<Self> {
        let mut rules = Vec::new();
        let mut docs = 0;
        for de in serde_yaml_ng::Deserializer::from_str(text) {
            let v = serde_yaml_ng::Value::deserialize(de).context("not valid YAML")?;
            if v.is_null() {
                continue;
            }
            docs += 1;
            let doc: Doc =
                serde_yaml_ng::from_value(v).context("not an ImageDigestMirrorSet document")?;
            match doc.kind.as_deref() {
                Some("ImageDigestMirrorSet") | Some("ImageContentSourcePolicy") => {}
                Some(k) => bail!("document of kind '{k}': expected ImageDigestMirrorSet or ImageContentSourcePolicy"),
                None => bail!("document has no 'kind': expected ImageDigestMirrorSet"),
            }
            let spec = doc.spec.context("ImageDigestMirrorSet has no 'spec'")?;
            for e in spec
                .image_digest_mirrors
                .into_iter()
                .chain(spec.repository_digest_mirrors)
                .flatten()
            {
                if e.source.is_empty() {
                    bail!("a mirror entry has an empty 'source'");
                }
                for m in &e.mirrors {
                    if m.contains("://") || m.contains('@') {
                        bail!(
                            "mirror '{m}' must be a registry/repository without scheme or digest"
                        );
                    }
                }
                let never = match e.mirror_source_policy.as_deref() {
                    None | Some("AllowContactingSource") => false,
                    Some("NeverContactSource") => true,
                    Some(p) => bail!("unknown mirrorSourcePolicy '{p}' (AllowContactingSource or NeverContactSource)"),
                };
                rules.push(MirrorRule {
                    source: e.source,
                    mirrors: e.mirrors,
                    never_contact_source: never,
                });
            }
        }
        if docs == 0 {
            bail!("no ImageDigestMirrorSet document found");
        }
        Ok(Mirrors { rules })
    }

    /// The source repositories whose mirrors `r` lies in (a release pulled
    /// from a mirror is known by its source: `oc adm release mirror`
    /// writes the IDMS that maps it).
    pub fn sources_of(&self, r: &DockerRef) -> Vec<String> {
        let name = r.name();
        let mut out = Vec::new();
        for rule in &self.rules {
            for m in &rule.mirrors {
                if name == *m || name.starts_with(&format!("{m}/")) {
                    let src = format!("{}{}", rule.source, &name[m.len()..]);
                    if !out.contains(&src) {
                        out.push(src);
                    }
                }
            }
        }
        out
    }

    /// For a digest reference: the mirror references to try (in order) and
    /// whether the source itself may still be contacted. Tag references get
    /// no mirrors (IDMS applies to digests only).
    pub fn candidates(&self, r: &DockerRef) -> (Vec<DockerRef>, bool) {
        let Some(digest) = &r.digest else {
            return (Vec::new(), true);
        };
        let name = r.name();
        let mut out = Vec::new();
        let mut contact_source = true;
        // The most specific matching source wins, as in containers-registries.conf.
        let best = self
            .rules
            .iter()
            .filter(|rule| name == rule.source || name.starts_with(&format!("{}/", rule.source)))
            .map(|rule| rule.source.len())
            .max();
        for rule in self.rules.iter().filter(|rule| {
            Some(rule.source.len()) == best
                && (name == rule.source || name.starts_with(&format!("{}/", rule.source)))
        }) {
            let rest = &name[rule.source.len()..];
            for m in &rule.mirrors {
                if let Ok(mut d) = DockerRef::parse(&format!("{m}{rest}")) {
                    d.tag = None;
                    d.digest = Some(digest.clone());
                    if !out.contains(&d) {
                        out.push(d);
                    }
                }
            }
            if rule.never_contact_source {
                contact_source = false;
            }
        }
        (out, contact_source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const IDMS: &str = r#"
apiVersion: config.openshift.io/v1
kind: ImageDigestMirrorSet
metadata:
  name: release
spec:
  imageDigestMirrors:
  - mirrors:
    - mirror.local:5000/ocp/art
    - backup.local/art
    source: quay.io/openshift-release-dev/ocp-v4.0-art-dev
  - mirrors:
    - mirror.local:5000/ocp
    source: quay.io/openshift-release-dev
    mirrorSourcePolicy: NeverContactSource
---
apiVersion: operator.openshift.io/v1alpha1
kind: ImageContentSourcePolicy
spec:
  repositoryDigestMirrors:
  - mirrors: [other.local/x]
    source: registry.example.com/x
"#;

    #[test]
    fn most_specific_source_wins() {
        let m = Mirrors::parse(IDMS).unwrap();
        let r = DockerRef::parse(&format!(
            "quay.io/openshift-release-dev/ocp-v4.0-art-dev@{D}"
        ))
        .unwrap();
        let (c, src) = m.candidates(&r);
        assert_eq!(
            c.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
            vec![
                format!("mirror.local:5000/ocp/art@{D}"),
                format!("backup.local/art@{D}")
            ]
        );
        assert!(src);
        let r =
            DockerRef::parse(&format!("quay.io/openshift-release-dev/ocp-release@{D}")).unwrap();
        let (c, src) = m.candidates(&r);
        assert_eq!(
            c[0].to_string(),
            format!("mirror.local:5000/ocp/ocp-release@{D}")
        );
        assert!(!src);
        let r = DockerRef::parse(&format!("registry.example.com/x/y@{D}")).unwrap();
        assert_eq!(
            m.candidates(&r).0[0].to_string(),
            format!("other.local/x/y@{D}")
        );
    }

    #[test]
    fn tags_are_not_mirrored() {
        let m = Mirrors::parse(IDMS).unwrap();
        let r = DockerRef::parse("quay.io/openshift-release-dev/ocp-v4.0-art-dev:latest").unwrap();
        assert!(m.candidates(&r).0.is_empty());
    }

    #[test]
    fn bad_documents() {
        assert!(Mirrors::parse("kind: ConfigMap\n").is_err());
        assert!(Mirrors::parse("").is_err());
        assert!(Mirrors::parse("kind: ImageDigestMirrorSet\nspec:\n  imageDigestMirrors:\n  - source: a.b/c\n    mirrors: ['https://x/y']\n").is_err());
        assert!(Mirrors::parse(": : :").is_err());
    }
}
