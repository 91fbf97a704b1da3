//! Stage publish, the metadata: meta.json of this build (started before
//! the images, checked against an output directory's earlier run, merged
//! with it at the end), the AMIs, SHA256SUMS and stream.json.
use crate::plan::input;
use crate::plan::settings::Settings;
use crate::plan::Plan;
use crate::platforms::Upload;
use crate::publish::aws;
use crate::publish::meta::{self, ContainerImage, Meta};
use crate::publish::stream;
use crate::release::resolve::Resolved;
use anyhow::{bail, Result};

/// meta.json of this build, before its images.
pub(super) fn start_meta(plan: &Plan) -> Meta {
    // cosa records the OS build's own commit (for an ostree-native image its
    // `ostree.commit` label; the commit deployed here is ostree-ext's local
    // merge commit over it, which differs per import).
    let os = &plan.os;
    let mut m = Meta::new(
        &plan.name,
        &plan.version,
        &os.image_commit,
        &meta::rfc3339_utc(os.timestamp),
        plan.release.arch,
    );
    m.base_oscontainer = Some(ContainerImage {
        image: os.pullspec.clone(),
        digest: Some(os.digest.clone()),
        tags: vec![os.tag.clone()],
        comment: None,
    });
    let r = &plan.release;
    m.release_payload = Some(ContainerImage {
        image: r.reference.clone(),
        digest: Some(r.digest.clone()),
        tags: vec![r.version.clone()],
        comment: Some(format!(
            "OpenShift release image the OS was resolved from; {}",
            r.signature
        )),
    });
    m
}

/// Each disk image records whose ostree deployed it, `deployed_by` (cosa's
/// schema allows keys of our own in `images` entries only).
pub(super) fn record_deployer(
    m: &mut Meta,
    plan: &Plan,
    deployed_by: serde_json::Map<String, serde_json::Value>,
) {
    for art in plan.artifacts.iter().filter(|x| x.live.is_none()) {
        m.image_details
            .entry(art.meta_key.clone())
            .or_default()
            .insert(meta::DETAILS_KEY_DEPLOY.into(), deployed_by.clone().into());
    }
}

/// An output directory may only hold meta.json of this same build.
pub(super) fn check_output_meta(s: &Settings, new_meta: &Meta) -> Result<()> {
    if let Some(old) = meta::read_meta(&s.output)? {
        if !old.same_build(new_meta) {
            bail!(
                "{} already holds meta.json of another build ({} {}, commit {}); use an empty output directory",
                s.output.display(),
                old.name,
                old.buildid,
                input::short(&old.ostree_commit)
            );
        }
    }
    Ok(())
}

/// Stage publish (metadata): the AMIs, meta.json (merged with an earlier
/// run's), SHA256SUMS and stream.json.
pub(super) fn publish_metadata(
    s: &Settings,
    resolved: &Resolved,
    plan: &Plan,
    aws: Option<&aws::Session>,
    mut m: Meta,
) -> Result<stream::Stream> {
    // AMIs registered by --aws-register (docs/contract.md §6.3), with their snapshots.
    for r in aws.map(|s| s.results()).unwrap_or_default() {
        m.amis.retain(|x| x.name != r.region);
        m.amis.push(meta::Ami {
            name: r.region,
            hvm: r.ami,
            snapshot: r.snapshot,
        });
    }
    let pinned = &resolved.pinned_amis;
    if plan
        .artifacts
        .iter()
        .any(|x| x.spec.uploads_to(Upload::Aws))
    {
        // The release's own AMIs (docs/contract.md §6.3); their `release` (in stream.json)
        // may be older than the OS built here.
        for p in pinned {
            if !m.amis.iter().any(|x| x.name == p.region) {
                m.amis.push(meta::Ami {
                    name: p.region.clone(),
                    hvm: p.image.clone(),
                    snapshot: String::new(),
                });
            }
        }
    }
    let written = meta::write_merged_meta(&s.output, m)?;
    meta::write_sha256sums(&s.output, &written.checksums())?;
    let stream_name = resolved
        .stream
        .as_ref()
        .and_then(|s| s.get("stream"))
        .and_then(|s| s.as_str())
        .map(str::to_string)
        .unwrap_or_else(|| plan.name.clone());
    let pinned: Vec<(String, String, String)> = pinned
        .iter()
        .map(|p| (p.region.clone(), p.image.clone(), p.release.clone()))
        .collect();
    let st = stream::from_meta(&written, &stream_name, s.base_url.as_deref(), &pinned);
    stream::write_stream(&s.output, &st)?;
    Ok(st)
}

/// The whole verification record (stores, files and tags it read, what was
/// refused) beside meta.json: `release-verification.json`, a file of this
/// run (its paths and URLs are the run's), not an artifact.
pub(super) fn write_verification(s: &Settings, rec: &crate::trust::policy::Record) -> Result<()> {
    let mut doc = serde_json::to_vec_pretty(rec)?;
    doc.push(b'\n');
    meta::write_atomic(&s.output, crate::trust::policy::RECORD_FILE, &doc)
}
