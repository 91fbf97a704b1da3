//! What the index at a tag is made of: the live parts grouped by (arch,
//! stream) into [`Group`]s, and the conflicts that keep parts from being
//! one index (two OS commits of one (arch, stream); one platform with two
//! different files), each a [`Conflict`] naming both parts.
use super::part::{is_doc, Part};
use crate::publish::registry::layout::*;
use anyhow::{anyhow, Result};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// Two parts that cannot be one index, and why (one line naming both).
#[derive(Debug)]
pub struct Conflict {
    pub parts: [String; 2],
    pub message: String,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Conflict {}

/// One (arch, stream) of the index: its artifacts by platform (with the
/// part each came from first), and the meta.json and stream.json entries of
/// its parts (part tag, entry), in the parts' order.
#[derive(Debug, Default)]
pub struct Group {
    pub artifacts: BTreeMap<String, (String, Value)>,
    pub docs: BTreeMap<String, Vec<(String, Value)>>,
}

/// What the index at `what` is made of, from its parts (withdrawn ones
/// left out), by (arch, stream); a conflict between two parts, named.
pub fn plan(parts: &[Part], what: &str) -> Result<BTreeMap<(String, String), Group>, Conflict> {
    let live: Vec<&Part> = parts.iter().filter(|p| !p.withdrawn()).collect();
    let mut builds: BTreeMap<(String, String), (&str, &Part)> = BTreeMap::new();
    for p in &live {
        let Some(commit) = p.ann(A_COMMIT) else {
            continue;
        };
        for pair in p.pairs() {
            match builds.get(&pair) {
                Some((c0, p0)) if *c0 != commit => {
                    return Err(Conflict {
                        parts: [p0.tag.clone(), p.tag.clone()],
                        message: format!(
                            "{what}: {}/{} would hold two builds: part {} ({}) and part {} ({}); a tag holds one build per stream and arch: push the other build to a tag of its own",
                            pair.0,
                            pair.1,
                            p0.tag,
                            p0.build(),
                            p.tag,
                            p.build()
                        ),
                    })
                }
                Some(_) => {}
                None => {
                    builds.insert(pair, (commit, p));
                }
            }
        }
    }
    let by_tag: HashMap<&str, &Part> = live.iter().map(|p| (p.tag.as_str(), *p)).collect();
    let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
    for p in &live {
        for e in &p.entries {
            let (arch, stream, platform) = entry_key(e);
            let g = groups.entry((arch.clone(), stream.clone())).or_default();
            if is_doc(e) {
                g.docs
                    .entry(platform)
                    .or_default()
                    .push((p.tag.clone(), e.clone()));
                continue;
            }
            match g.artifacts.get(&platform) {
                None => {
                    g.artifacts.insert(platform, (p.tag.clone(), e.clone()));
                }
                Some((_, e0)) if e0["digest"] == e["digest"] => {}
                Some((t0, e0)) => {
                    let file = |e: &Value| {
                        let d = e["digest"].as_str().unwrap_or("?");
                        format!(
                            "{}, manifest {}",
                            e["annotations"][A_FILE].as_str().unwrap_or("?"),
                            d.get(..19).unwrap_or(d)
                        )
                    };
                    return Err(Conflict {
                        parts: [t0.clone(), p.tag.clone()],
                        message: format!(
                            "{what}: {platform} of {arch}/{stream} is two different files: {} in part {t0} ({}) and {} in part {} ({}); one platform from two builds: push one of them to a tag of its own",
                            file(e0),
                            by_tag.get(t0.as_str()).map(|p| p.build()).unwrap_or_default(),
                            file(e),
                            p.tag,
                            p.build()
                        ),
                    });
                }
            }
        }
    }
    Ok(groups)
}

/// Refuse `ours` (parts about to be tagged, or only their builds when
/// their entries are still empty) when they conflict with the parts
/// `there`, or with each other; a part of `there` with a tag of ours is
/// the one ours replaces.
pub fn check(there: &[Part], ours: &[Part], what: &str) -> Result<()> {
    let mut all: Vec<Part> = there
        .iter()
        .filter(|p| !ours.iter().any(|o| o.tag == p.tag))
        .cloned()
        .collect();
    all.extend(ours.iter().cloned());
    all.sort_by(|a, b| a.tag.cmp(&b.tag));
    plan(&all, what).map(|_| ()).map_err(|c| anyhow!(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::registry::fanin::part::platform_of;
    use crate::util::arch::Arch;
    use serde_json::json;

    fn entry(arch: &str, platform: &str, digest: &str) -> Value {
        json!({"digest": digest, "annotations": {A_ARCH: arch, A_STREAM: "s", A_PLATFORM: platform, A_FILE: format!("{platform}.file")}})
    }

    fn part(tag: &str, commit: &str, entries: Vec<Value>) -> Part {
        let platforms: Vec<&str> = entries.iter().map(platform_of).collect();
        let meta = json!({"name": "rhcos", "buildid": "9.6", "ostree-commit": commit});
        Part::new(
            tag.into(),
            entries.clone(),
            (Arch::X86_64, "s"),
            &platforms,
            &meta,
        )
    }

    #[test]
    fn plan_unites_parts_and_names_both_sides_of_a_conflict() {
        let metal = part(
            "t.part.a",
            "c1",
            vec![
                entry("x86_64", "metal", "d1"),
                entry("x86_64", "meta", "m1"),
            ],
        );
        let vmware = part(
            "t.part.b",
            "c1",
            vec![
                entry("x86_64", "vmware", "d2"),
                entry("x86_64", "meta", "m2"),
            ],
        );
        // The same file in two parts is one entry.
        let again = part("t.part.c", "c1", vec![entry("x86_64", "metal", "d1")]);
        let g = plan(&[metal.clone(), vmware.clone(), again], "r:t").unwrap();
        let g = &g[&("x86_64".to_string(), "s".to_string())];
        let platforms: Vec<&String> = g.artifacts.keys().collect();
        assert_eq!(platforms, ["metal", "vmware"]);
        assert_eq!(g.docs["meta"].len(), 2);
        // Another OS commit of the pair: both parts and builds named.
        let other = part("t.part.b", "c2", vec![entry("x86_64", "vmware", "d2")]);
        let c = plan(&[metal.clone(), other.clone()], "r:t").unwrap_err();
        assert_eq!(c.parts, ["t.part.a", "t.part.b"]);
        assert!(c.message.contains("x86_64/s would hold two builds"), "{c}");
        assert!(
            c.message.contains("ostree commit c1") && c.message.contains("ostree commit c2"),
            "{c}"
        );
        // Another arch of another commit is no conflict.
        let arm = Part::new(
            "t.part.z".into(),
            vec![entry("aarch64", "metal", "d9")],
            (Arch::Aarch64, "s"),
            &["metal"],
            &json!({"ostree-commit": "c3"}),
        );
        assert!(plan(&[metal.clone(), arm], "r:t").is_ok());
        // One platform, two files.
        let clash = part("t.part.d", "c1", vec![entry("x86_64", "metal", "d3")]);
        let c = plan(&[metal.clone(), clash.clone()], "r:t").unwrap_err();
        assert!(
            c.message
                .contains("metal of x86_64/s is two different files"),
            "{c}"
        );
        assert!(
            c.message.contains("manifest d1 in part t.part.a")
                && c.message.contains("manifest d3 in part t.part.d"),
            "{c}"
        );
        // A withdrawn part adds nothing and conflicts with nothing.
        let w = clash.withdrawal("lost");
        assert!(w.entries.is_empty() && w.withdrawn());
        assert!(plan(&[metal.clone(), w], "r:t").is_ok());
        // check: ours against the parts there, ours replacing its own tag.
        let metal = std::slice::from_ref(&metal);
        assert!(check(metal, &[other.withdrawal("x")], "r:t").is_ok());
        assert!(check(metal, std::slice::from_ref(&clash), "r:t").is_err());
        assert!(check(&[clash], metal, "r:t").is_err());
    }
}
