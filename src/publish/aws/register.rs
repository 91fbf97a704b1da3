//! EC2 side of docs/contract.md §6.3: find an AMI or leftover snapshots by name, and
//! RegisterImage from a completed snapshot (hvm, root `/dev/xvda`, ENA,
//! volume type, boot mode and IMDSv2 from image.json), then tag the AMI.
use super::ec2::{self, Params};
use super::{AmiSpec, ROOT_DEVICE, TAG_AMI_NAME, TAG_SNAPSHOT, TAG_UPLOAD, UPLOAD_COMPLETE};
use anyhow::{bail, Result};

/// An AMI of ours found by name.
#[derive(Debug, Clone)]
pub struct FoundAmi {
    pub id: String,
    /// Snapshot of its root device, when EC2 says.
    pub snapshot: Option<String>,
}

/// The AMI named `name` owned by this account, if any. One that is not
/// usable (failed, deregistered, ...) is an error naming it.
pub async fn find_ami(ec2: &ec2::Client, name: &str) -> Result<Option<FoundAmi>> {
    let mut p = Params::new("DescribeImages");
    p.list("Owner", &["self"]).filter(1, "name", &[name]);
    let images = ec2
        .describe_images(&p)
        .await
        .map_err(|e| anyhow::anyhow!("DescribeImages for AMI name {name}: {e}"))?;
    let Some(img) = images.iter().find(|i| i.name.as_deref() == Some(name)) else {
        return Ok(None);
    };
    let id = &img.id;
    let state = img.state.as_deref().unwrap_or("available");
    if !["available", "pending"].contains(&state) {
        bail!("AMI {id} named {name} exists in state {state}; deregister it (aws ec2 deregister-image --image-id {id}) or pass another --aws-ami-name");
    }
    let tagged = img.tag(TAG_SNAPSHOT).filter(|v| v.starts_with("snap-"));
    let snapshot = tagged.map(str::to_string).or_else(|| {
        img.block_devices
            .iter()
            .find(|b| b.0 == ROOT_DEVICE)
            .or_else(|| img.block_devices.first())
            .and_then(|b| b.1.clone())
    });
    Ok(Some(FoundAmi {
        id: id.clone(),
        snapshot,
    }))
}

/// A snapshot an earlier run uploaded for the same AMI name.
#[derive(Debug, Clone)]
pub struct Leftover {
    pub id: String,
    pub state: String,
    /// Uploaded in full and `completed` (our [`TAG_UPLOAD`] tag).
    pub complete: bool,
    pub volume_gib: Option<i64>,
}

/// Snapshots of this account tagged for AMI `name`.
pub async fn leftover_snapshots(ec2: &ec2::Client, name: &str) -> Result<Vec<Leftover>> {
    let mut p = Params::new("DescribeSnapshots");
    p.list("Owner", &["self"])
        .filter(1, &format!("tag:{TAG_AMI_NAME}"), &[name]);
    let snaps = ec2
        .describe_snapshots(&p)
        .await
        .map_err(|e| anyhow::anyhow!("DescribeSnapshots for AMI name {name}: {e}"))?;
    Ok(snaps
        .into_iter()
        .map(|s| {
            let state = s.state.clone().unwrap_or_default();
            let tagged = s.tag(TAG_UPLOAD) == Some(UPLOAD_COMPLETE);
            Leftover {
                complete: tagged && state == "completed",
                volume_gib: s.volume_gib,
                id: s.id,
                state,
            }
        })
        .collect())
}

/// The completed snapshot uploaded for AMI `name`, if any (the snapshot
/// of an existing AMI when DescribeImages does not name it).
pub async fn completed_snapshot(ec2: &ec2::Client, name: &str) -> Result<Option<String>> {
    Ok(leftover_snapshots(ec2, name)
        .await?
        .into_iter()
        .find(|s| s.complete)
        .map(|s| s.id))
}

/// The RegisterImage request (docs/contract.md §6.3), not yet sent.
pub fn request(spec: &AmiSpec, snapshot: &str) -> Params {
    let mut p = Params::new("RegisterImage");
    p.set("Name", spec.name.as_str())
        .set("Description", spec.description.as_str())
        .set("Architecture", spec.arch.as_str())
        .set("VirtualizationType", "hvm")
        .set("RootDeviceName", ROOT_DEVICE)
        .set("BlockDeviceMapping.1.DeviceName", ROOT_DEVICE)
        .set("BlockDeviceMapping.1.Ebs.SnapshotId", snapshot)
        .set(
            "BlockDeviceMapping.1.Ebs.VolumeType",
            spec.volume_type.as_str(),
        )
        .set("BlockDeviceMapping.1.Ebs.DeleteOnTermination", "true")
        .set("EnaSupport", "true")
        .set("SriovNetSupport", "simple")
        .set("BootMode", spec.boot_mode.as_str());
    if spec.imdsv2_only {
        p.set("ImdsSupport", "v2.0");
    }
    p
}

/// Register the AMI from `snapshot` and tag it; returns its id. If the
/// name was taken meanwhile, the AMI holding it is returned. If tagging
/// fails the new AMI is deregistered again.
pub async fn register(ec2: &ec2::Client, spec: &AmiSpec, snapshot: &str) -> Result<String> {
    let id = match ec2.call(&request(spec, snapshot)).await {
        Ok(xml) => ec2::parse_image_id(&xml)?
            .ok_or_else(|| anyhow::anyhow!("RegisterImage answered without an image id"))?,
        Err(e) if e.code() == Some("InvalidAMIName.Duplicate") => {
            if let Some(found) = find_ami(ec2, &spec.name).await? {
                return Ok(found.id);
            }
            bail!("RegisterImage {}: {e}", spec.name);
        }
        Err(e) => bail!("RegisterImage {} from snapshot {snapshot}: {e}", spec.name),
    };
    let mut tags = spec.tags.clone();
    tags.push((TAG_SNAPSHOT.to_string(), snapshot.to_string()));
    if let Err(e) = super::tag(ec2, &id, &tags).await {
        let mut p = Params::new("DeregisterImage");
        p.set("ImageId", id.as_str());
        let _ = ec2.call(&p).await;
        return Err(e.context(format!("tagging AMI {id}; it was deregistered again")));
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request carries every docs/contract.md §6.3 parameter (moto ignores most of
    /// them, so this is checked here and on the wire in the moto test).
    #[test]
    fn register_request_has_spec_parameters() {
        let spec = AmiSpec {
            name: "rhcos-1-x86_64".into(),
            description: "d".into(),
            arch: "x86_64".into(),
            volume_type: "gp3".into(),
            boot_mode: "uefi-preferred".into(),
            imdsv2_only: true,
            tags: vec![],
        };
        let p = request(&spec, "snap-0123");
        for (k, v) in [
            ("Action", "RegisterImage"),
            ("Version", "2016-11-15"),
            ("Name", "rhcos-1-x86_64"),
            ("VirtualizationType", "hvm"),
            ("RootDeviceName", "/dev/xvda"),
            ("EnaSupport", "true"),
            ("SriovNetSupport", "simple"),
            ("BootMode", "uefi-preferred"),
            ("ImdsSupport", "v2.0"),
            ("Architecture", "x86_64"),
            ("BlockDeviceMapping.1.DeviceName", "/dev/xvda"),
            ("BlockDeviceMapping.1.Ebs.SnapshotId", "snap-0123"),
            ("BlockDeviceMapping.1.Ebs.VolumeType", "gp3"),
            ("BlockDeviceMapping.1.Ebs.DeleteOnTermination", "true"),
        ] {
            assert_eq!(p.get(k), Some(v), "{k}");
        }
        assert_eq!(p.get("BlockDeviceMapping.2.DeviceName"), None);
        let spec = AmiSpec {
            imdsv2_only: false,
            boot_mode: "legacy-bios".into(),
            ..spec
        };
        let p = request(&spec, "snap-0123");
        assert_eq!(p.get("ImdsSupport"), None);
        assert_eq!(p.get("BootMode"), Some("legacy-bios"));
    }
}
