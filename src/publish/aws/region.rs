//! One region's registration: reuse the AMI if it exists, else reuse a
//! completed snapshot of an earlier run (deleting unfinished ones) or
//! upload the disk ([`snapshot`]), then RegisterImage ([`register`]).
//! A region's clients and the disk in, [`Registered`] out.
use super::ami_spec::AmiSpec;
use super::calls::delete_snapshot;
use super::tags::{TAG_UPLOAD, UPLOAD_COMPLETE};
use super::{ec2, register, retry, snapshot};
use crate::io::view::DiskView;
use crate::util::{cancel, progress::Reporter};
use anyhow::{Context, Result};

/// One region's result.
#[derive(Debug, Clone)]
pub struct Registered {
    pub region: String,
    pub ami: String,
    /// Empty when an existing AMI's snapshot could not be found out.
    pub snapshot: String,
    pub reused_ami: bool,
    pub reused_snapshot: bool,
    pub upload: Option<snapshot::UploadStats>,
}

/// One region's clients: our EC2 client and the SDK's EBS client.
pub(super) struct RegionClients {
    pub(super) name: String,
    pub(super) ec2: ec2::Client,
    pub(super) ebs: aws_sdk_ebs::Client,
}

/// Everything for one region: reuse the AMI if it exists; else reuse a
/// completed snapshot left by an earlier run (deleting unfinished ones) or
/// upload one; then RegisterImage and tag.
pub(super) async fn register_region(
    reg: &RegionClients,
    view: &dyn DiskView,
    spec: &AmiSpec,
    r: &Reporter,
) -> Result<Registered> {
    let region = reg.name.as_str();
    if let Some(img) = register::find_ami(&reg.ec2, &spec.name).await? {
        let snapshot = match img.snapshot {
            Some(s) => s,
            None => register::completed_snapshot(&reg.ec2, &spec.name)
                .await?
                .unwrap_or_default(),
        };
        r.note(&format!(
            "aws {region}: AMI {} already exists: reusing {} (snapshot {})",
            spec.name,
            img.id,
            if snapshot.is_empty() {
                "unknown"
            } else {
                &snapshot
            }
        ));
        return Ok(Registered {
            region: region.to_string(),
            ami: img.id,
            snapshot,
            reused_ami: true,
            reused_snapshot: true,
            upload: None,
        });
    }
    cancel::check()?;
    let gib = snapshot::volume_gib(view.len());
    let leftover = register::leftover_snapshots(&reg.ec2, &spec.name).await?;
    let mut reuse = None;
    for s in leftover {
        if reuse.is_none() && s.complete && s.volume_gib == Some(gib as i64) {
            r.note(&format!(
                "aws {region}: reusing completed snapshot {} from an earlier run",
                s.id
            ));
            reuse = Some(s.id);
        } else {
            delete_snapshot(&reg.ec2, &s.id)
                .await
                .with_context(|| format!("deleting leftover snapshot {} in {region}", s.id))?;
            r.note(&format!(
                "aws {region}: deleted snapshot {} left unfinished by an earlier run (state {}, not tagged {TAG_UPLOAD}={UPLOAD_COMPLETE})",
                s.id, s.state
            ));
        }
    }
    let (snap, stats, reused_snapshot) = match reuse {
        Some(id) => (id, None, true),
        None => {
            let step = r.step(format!("aws upload {region}"));
            let up = snapshot::Uploader {
                ebs: &reg.ebs,
                ec2: &reg.ec2,
                region,
                description: spec.description.clone(),
                tags: &spec.tags,
                backoff: retry::Backoff::default(),
            };
            let prog = |done: u64, total: u64| {
                step.bytes(done * snapshot::BLOCK_SIZE, total * snapshot::BLOCK_SIZE)
            };
            let (id, stats) = up.upload(view, &prog).await?;
            step.done(&format!(
                "uploaded {} of {} blocks ({} MiB) in {:.1} s to {id} ({} all-zero blocks in data extents skipped, {} retries)",
                stats.blocks_sent,
                stats.blocks_total,
                stats.bytes_sent >> 20,
                stats.seconds_millis as f64 / 1000.0,
                stats.zero_blocks_read,
                stats.retries
            ));
            (id, Some(stats), false)
        }
    };
    cancel::check()?;
    let ami = register::register(&reg.ec2, spec, &snap).await?;
    r.note(&format!(
        "aws {region}: registered AMI {ami} ({}) from snapshot {snap}",
        spec.name
    ));
    Ok(Registered {
        region: region.to_string(),
        ami,
        snapshot: snap,
        reused_ami: false,
        reused_snapshot,
        upload: stats,
    })
}
