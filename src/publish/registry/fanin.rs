//! The fan-in of `push`: the index at a tag as the union of every run
//! pushed there, whatever the order or timing of the pushes (UPSTREAM.md
//! sections 23 and 28).
//!
//! Each run first tags its own index, its part:
//! `<tag>.part.<arch>.<stream>.<platforms>`, the platform keys of the run
//! `_`-joined (a hash of them when the tag would pass the registry's 128
//! characters), so runs split by arch, by stream or by platform group never
//! share a part; a run pushed again replaces its own. The index at `<tag>`
//! is then a function of the set of parts alone ([`plan`], [`Docs`]):
//! - every part's artifacts, each (arch, stream, platform) once;
//! - per (arch, stream), one meta.json and one stream.json: a part's own
//!   when all parts of the pair have the same one, else merged from all of
//!   them (meta.json: images united; stream.json: `merge::unite`, as
//!   `stream merge` merges directories) and pushed as artifacts of their
//!   own.
//!
//! A real conflict is refused naming both parts and their builds: two
//! builds (OS commits) of one (arch, stream), or one platform of a pair
//! with two different files. A run checks for one before it uploads
//! anything and again before it tags its part; one found only later (two
//! conflicting runs at once) withdraws the run's part (tagged again with no
//! entries) and rewrites the index from the parts left.
//!
//! The registry offers no conditional PUT (distribution 2.8 has no
//! If-Match). So each run writes the index, pauses, reads the parts and the
//! index back, and writes again until the index is what the parts make and
//! holds the run's own entries. The last writer verifies after its own
//! write and lists every part tagged before that: the index ends up
//! holding them all.
//!
//! Its files: `part.rs` (a run's part and its tag, the parts read back),
//! `groups.rs` (the parts planned into (arch, stream) groups, and the
//! conflicts between them), `docs.rs` (the merged meta.json and
//! stream.json), `hooks.rs` (the tests' moments); this one, the write and
//! read-back loop ([`publish`]) and the withdrawal of a losing part.
mod docs;
mod groups;
mod hooks;
mod part;

pub use docs::{merge_meta, merge_stream, Docs};
pub use groups::{check, plan, Conflict, Group};
pub use hooks::{wait_for_test_instant, FANIN_AT_ENV};
pub use part::{part_tag, read_parts, Part};

use super::client::{Client, INDEX_OCI};
use super::layout::*;
use anyhow::{anyhow, bail, Context, Result};
use part::is_doc;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Rounds of write and read-back before giving up.
const ROUNDS: u64 = 20;

/// The index entries the parts make (pushing merged documents as needed),
/// in (arch, stream, platform) order.
fn entries(
    c: &Client,
    groups: &BTreeMap<(String, String), Group>,
    docs: &mut Docs,
) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for ((arch, stream), g) in groups {
        out.extend(g.artifacts.values().map(|(_, e)| e.clone()));
        for (kind, list) in &g.docs {
            out.push(
                docs.entry(c, kind, list)
                    .with_context(|| format!("merging the {kind} documents of {arch}/{stream}"))?,
            );
        }
    }
    out.sort_by_key(entry_key);
    Ok(out)
}

/// The index at `tag` (its entries and digest), or none.
fn current(c: &Client, tag: &str, what: &str) -> Result<(Vec<Value>, String)> {
    Ok(match c.get_manifest(tag)? {
        Some(m) => (our_entries(&m.bytes, what)?, m.digest),
        None => (Vec::new(), String::new()),
    })
}

/// Whether the index entries `cur` hold every entry of the part `p`: each
/// artifact by digest, and a meta.json and stream.json for its pair.
fn holds(cur: &[Value], p: &Part) -> bool {
    p.entries.iter().all(|e| {
        if is_doc(e) {
            cur.iter().any(|x| entry_key(x) == entry_key(e))
        } else {
            cur.iter().any(|x| x["digest"] == e["digest"])
        }
    })
}

/// Whether `other` (found at the tag of our part `ours`: a run of the same
/// arch, stream and platforms pushed since) holds the same files.
fn same_files(ours: &Part, other: &Part) -> bool {
    ours.entries
        .iter()
        .filter(|e| !is_doc(e))
        .all(|e| other.entries.iter().any(|x| x["digest"] == e["digest"]))
}

/// Write the index at `tag` as the parts make it, and again until a
/// read-back finds it so with every entry of `ours` (the parts this run
/// tagged) in it (see the module's comment). Its digest and entry count.
pub fn publish(c: &Client, tag: &str, ours: &[Part]) -> Result<(String, usize)> {
    let what = format!("{}/{}:{tag}", c.host, c.repo);
    let mut docs = Docs::new(tag);
    for round in 0..ROUNDS {
        let parts = read_parts(c, tag, &what)?;
        let mut retag = false;
        for o in ours {
            match parts.iter().find(|p| p.tag == o.tag) {
                Some(p) if p.digest == o.digest => {}
                Some(p) if same_files(o, p) => {}
                Some(p) => bail!(
                    "{what}: part {} was pushed again by another run at the same time, with other files ({} and {}): push one of them to a tag of its own",
                    o.tag,
                    o.build(),
                    p.build()
                ),
                None => {
                    c.put_manifest(&o.tag, INDEX_OCI, &o.bytes)?;
                    retag = true;
                }
            }
        }
        if retag {
            std::thread::sleep(std::time::Duration::from_millis(200));
            continue;
        }
        let groups = match plan(&parts, &what) {
            Ok(g) => g,
            Err(conflict) => return Err(withdraw(c, tag, ours, conflict)),
        };
        let want = entries(c, &groups, &mut docs)?;
        let (cur, cur_digest) = current(c, tag, &what)?;
        if !cur_digest.is_empty() && cur == want && ours.iter().all(|o| holds(&cur, o)) {
            return Ok((cur_digest, cur.len()));
        }
        if round == 0 && !ours.is_empty() {
            // Tests: a push killed during its merge (parts tagged, merged
            // documents pushed, the index not yet written), or held there
            // while another pushes, to write a stale index after it.
            crate::util::cancel::pause_point("push-merge")?;
            hooks::hold_point()?;
        }
        let mut ann = Map::new();
        ann.insert(INDEX_MARK.into(), INDEX_VERSION.into());
        c.put_manifest(tag, INDEX_OCI, &index(&want, &ann))?;
        // Another run may be writing too: look again after a moment.
        let jitter = (u64::from(std::process::id()) * 37 + round * 91) % 400;
        std::thread::sleep(std::time::Duration::from_millis(200 + jitter));
    }
    bail!(
        "{what}: the index kept changing under {ROUNDS} rounds of writes: too many pushes at once?"
    )
}

/// A conflict found while merging: when one of the two parts is ours,
/// ours are withdrawn (so the tag is not left unmergeable) and the index
/// is rewritten from the parts left; the error either way.
fn withdraw(c: &Client, tag: &str, ours: &[Part], conflict: Conflict) -> anyhow::Error {
    if !ours.iter().any(|o| conflict.parts.contains(&o.tag)) {
        return anyhow!(conflict);
    }
    for o in ours {
        let w = o.withdrawal(&conflict.message);
        if let Err(e) = c.put_manifest(&w.tag, INDEX_OCI, &w.bytes) {
            return anyhow!(conflict).context(format!("withdrawing part {}: {e:#}", o.tag));
        }
    }
    if let Err(e) = publish(c, tag, &[]) {
        tracing::warn!("rewriting the index after withdrawing this run's part: {e:#}");
    }
    anyhow!(conflict)
}
