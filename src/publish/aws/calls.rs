//! The single-resource EC2 calls the upload and the registration share:
//! a snapshot's state, CreateTags, DeleteSnapshot. A client and an id in,
//! `anyhow` errors naming the call and the id out.
use super::ec2;
use anyhow::Result;

/// The EC2 state of snapshot `id` (`pending`, `completed`, `error`), or
/// `None` if EC2 does not list it (yet).
pub async fn snapshot_state(ec2: &ec2::Client, id: &str) -> Result<Option<String>> {
    let mut p = ec2::Params::new("DescribeSnapshots");
    p.list("SnapshotId", &[id]);
    let snaps = ec2
        .describe_snapshots(&p)
        .await
        .map_err(|e| anyhow::anyhow!("DescribeSnapshots {id}: {e}"))?;
    Ok(snaps.into_iter().find(|s| s.id == id).and_then(|s| s.state))
}

/// CreateTags on an EC2 resource (snapshot or AMI).
pub async fn tag(ec2: &ec2::Client, id: &str, tags: &[(String, String)]) -> Result<()> {
    let mut p = ec2::Params::new("CreateTags");
    p.list("ResourceId", &[id]).tags("Tag", tags);
    ec2.call(&p)
        .await
        .map_err(|e| anyhow::anyhow!("CreateTags {id}: {e}"))?;
    Ok(())
}

pub async fn delete_snapshot(ec2: &ec2::Client, id: &str) -> Result<()> {
    let mut p = ec2::Params::new("DeleteSnapshot");
    p.set("SnapshotId", id);
    ec2.call(&p)
        .await
        .map_err(|e| anyhow::anyhow!("DeleteSnapshot {id}: {e}"))?;
    Ok(())
}
