//! A datacenter-scoped view of the vCenter inventory: every object's
//! inventory path under the datacenter, and the resolution of a flag's
//! value (a name, an absolute path, or nothing: the only one there is) to
//! one object of the wanted kinds, with an error listing what exists when
//! it is not found. A session and a datacenter in, (path, MoRef) out.
use anyhow::{bail, Result};

use super::soap::{self, Client, MoRef};

/// A datacenter-scoped inventory.
pub(super) struct Inventory<'c> {
    pub(super) c: &'c mut Client,
    pub(super) dc: MoRef,
    pub(super) dc_path: String,
}

impl Inventory<'_> {
    /// Inventory paths of every `kind` object under the datacenter.
    fn paths(&mut self, kinds: &[&str]) -> Result<Vec<(String, MoRef)>> {
        let walk = [
            "Folder",
            "ClusterComputeResource",
            "ComputeResource",
            "ResourcePool",
            "Datastore",
            "Network",
            "DistributedVirtualPortgroup",
            "OpaqueNetwork",
        ];
        let all = self.c.list(&self.dc, &walk)?;
        // name and parent of each
        let mut parent = std::collections::HashMap::new();
        for k in walk {
            let objs: Vec<MoRef> = all
                .iter()
                .filter(|o| o.1.kind == k)
                .map(|o| o.1.clone())
                .collect();
            for oc in self.c.retrieve(k, &objs, &["name", "parent"])? {
                let p = oc.raw("parent").and_then(|r| {
                    roxmltree::Document::parse(r)
                        .ok()
                        .map(|d| soap::moref(d.root_element()))
                });
                parent.insert(
                    oc.obj.clone(),
                    (oc.get("name").unwrap_or("").to_string(), p),
                );
            }
        }
        let mut out = Vec::new();
        for (_, o) in all.iter().filter(|o| kinds.contains(&o.1.kind.as_str())) {
            let mut parts = Vec::new();
            let mut cur = Some(o.clone());
            while let Some(c) = cur {
                if c == self.dc {
                    break;
                }
                match parent.get(&c) {
                    Some((n, p)) => {
                        parts.push(n.clone());
                        cur = p.clone();
                    }
                    None => break,
                }
            }
            parts.reverse();
            out.push((format!("{}/{}", self.dc_path, parts.join("/")), o.clone()));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.dedup();
        Ok(out)
    }

    /// [`Self::paths`] at or below `base`.
    fn under(&mut self, kinds: &[&str], base: &str) -> Result<Vec<(String, MoRef)>> {
        let sub = format!("{base}/");
        Ok(self
            .paths(kinds)?
            .into_iter()
            .filter(|p| p.0 == base || p.0.starts_with(&sub))
            .collect())
    }

    /// Find `what` (a name under `sub`, or an absolute inventory path) among
    /// `kinds`; `None` given: the only one there is (or `default` if it
    /// exists). Not found: an error listing what exists.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn resolve(
        &mut self,
        label: &str,
        flag: &str,
        env: &str,
        given: Option<&str>,
        sub: &str,
        kinds: &[&str],
        default: Option<&str>,
    ) -> Result<(String, MoRef)> {
        let base = format!("{}/{sub}", self.dc_path);
        let candidates = |given: &str| -> Vec<String> {
            if given.starts_with('/') {
                vec![given.to_string()]
            } else {
                vec![format!("{base}/{given}")]
            }
        };
        if let Some(g) = given.or(default) {
            for p in candidates(g) {
                if let Some(r) = self.c.find_by_inventory_path(&p)? {
                    if kinds.contains(&r.kind.as_str()) {
                        return Ok((p, r));
                    }
                }
            }
            if given.is_none() {
                // The default is absent: fall through to "the only one".
            } else {
                let have = self.under(kinds, &base)?;
                bail!(
                    "{label} {g:?} not found in datacenter {}; {}: set {flag} or {env}",
                    self.dc_path,
                    existing(&have, &base)
                );
            }
        }
        let have = self.under(kinds, &base)?;
        match have.len() {
            1 => Ok(have.into_iter().next().unwrap()),
            0 => bail!(
                "datacenter {} has no {label}: create one, then set {flag} or {env}",
                self.dc_path
            ),
            _ => bail!(
                "datacenter {} has more than one {label}; choose one with {flag} or {env}: {}",
                self.dc_path,
                names(&have, &base)
            ),
        }
    }
}

fn names(have: &[(String, MoRef)], base: &str) -> String {
    have.iter()
        .map(|h| {
            h.0.strip_prefix(&format!("{base}/"))
                .unwrap_or(&h.0)
                .to_string()
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn existing(have: &[(String, MoRef)], base: &str) -> String {
    if have.is_empty() {
        "there are none".into()
    } else {
        format!("existing: {}", names(have, base))
    }
}
