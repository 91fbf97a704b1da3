//! EC2 side of SPEC 6.3: find an AMI or leftover snapshots by name, and
//! RegisterImage from a completed snapshot (hvm, root `/dev/xvda`, ENA,
//! volume type, boot mode and IMDSv2 from image.json), then tag the AMI.
use super::explain;
use super::{AmiSpec, ROOT_DEVICE, TAG_AMI_NAME, TAG_SNAPSHOT, TAG_UPLOAD, UPLOAD_COMPLETE};
use anyhow::{bail, Context, Result};
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{
    ArchitectureValues, BlockDeviceMapping, BootModeValues, EbsBlockDevice, Filter,
    ImdsSupportValues, VolumeType,
};

/// An AMI of ours found by name.
#[derive(Debug, Clone)]
pub struct FoundAmi {
    pub id: String,
    /// Snapshot of its root device, when EC2 says.
    pub snapshot: Option<String>,
}

/// The AMI named `name` owned by this account, if any. One that is not
/// usable (failed, deregistered, ...) is an error naming it.
pub async fn find_ami(ec2: &aws_sdk_ec2::Client, name: &str) -> Result<Option<FoundAmi>> {
    let out = ec2
        .describe_images()
        .owners("self")
        .filters(Filter::builder().name("name").values(name).build())
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("DescribeImages for AMI name {name}: {}", explain(&e)))?;
    let Some(img) = out.images().iter().find(|i| i.name() == Some(name)) else {
        return Ok(None);
    };
    let id = img.image_id().context("DescribeImages: image without id")?;
    let state = img.state().map(|s| s.as_str()).unwrap_or("available");
    if !["available", "pending"].contains(&state) {
        bail!("AMI {id} named {name} exists in state {state}; deregister it (aws ec2 deregister-image --image-id {id}) or pass another --aws-ami-name");
    }
    let tagged = img
        .tags()
        .iter()
        .find(|t| t.key() == Some(TAG_SNAPSHOT))
        .and_then(|t| t.value())
        .filter(|v| v.starts_with("snap-"));
    let snapshot = tagged.map(str::to_string).or_else(|| {
        img.block_device_mappings()
            .iter()
            .find(|b| b.device_name() == Some(ROOT_DEVICE))
            .or_else(|| img.block_device_mappings().first())
            .and_then(|b| b.ebs())
            .and_then(|e| e.snapshot_id())
            .map(str::to_string)
    });
    Ok(Some(FoundAmi {
        id: id.to_string(),
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
pub async fn leftover_snapshots(ec2: &aws_sdk_ec2::Client, name: &str) -> Result<Vec<Leftover>> {
    let out = ec2
        .describe_snapshots()
        .owner_ids("self")
        .filters(
            Filter::builder()
                .name(format!("tag:{TAG_AMI_NAME}"))
                .values(name)
                .build(),
        )
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("DescribeSnapshots for AMI name {name}: {}", explain(&e)))?;
    Ok(out
        .snapshots()
        .iter()
        .filter_map(|s| {
            let id = s.snapshot_id()?.to_string();
            let state = s
                .state()
                .map(|x| x.as_str().to_string())
                .unwrap_or_default();
            let tagged = s
                .tags()
                .iter()
                .any(|t| t.key() == Some(TAG_UPLOAD) && t.value() == Some(UPLOAD_COMPLETE));
            Some(Leftover {
                complete: tagged && state == "completed",
                id,
                state,
                volume_gib: s.volume_size().map(i64::from),
            })
        })
        .collect())
}

/// The completed snapshot uploaded for AMI `name`, if any (the snapshot
/// of an existing AMI when DescribeImages does not name it).
pub async fn completed_snapshot(ec2: &aws_sdk_ec2::Client, name: &str) -> Result<Option<String>> {
    Ok(leftover_snapshots(ec2, name)
        .await?
        .into_iter()
        .find(|s| s.complete)
        .map(|s| s.id))
}

/// The RegisterImage request (SPEC 6.3), not yet sent.
pub fn request(
    ec2: &aws_sdk_ec2::Client,
    spec: &AmiSpec,
    snapshot: &str,
) -> aws_sdk_ec2::operation::register_image::builders::RegisterImageFluentBuilder {
    let mut req = ec2
        .register_image()
        .name(&spec.name)
        .description(&spec.description)
        .architecture(ArchitectureValues::from(spec.arch.as_str()))
        .virtualization_type("hvm")
        .root_device_name(ROOT_DEVICE)
        .block_device_mappings(
            BlockDeviceMapping::builder()
                .device_name(ROOT_DEVICE)
                .ebs(
                    EbsBlockDevice::builder()
                        .snapshot_id(snapshot)
                        .volume_type(VolumeType::from(spec.volume_type.as_str()))
                        .delete_on_termination(true)
                        .build(),
                )
                .build(),
        )
        .ena_support(true)
        .sriov_net_support("simple")
        .boot_mode(BootModeValues::from(spec.boot_mode.as_str()));
    if spec.imdsv2_only {
        req = req.imds_support(ImdsSupportValues::V20);
    }
    req
}

/// Register the AMI from `snapshot` and tag it; returns its id. If the
/// name was taken meanwhile, the AMI holding it is returned. If tagging
/// fails the new AMI is deregistered again.
pub async fn register(ec2: &aws_sdk_ec2::Client, spec: &AmiSpec, snapshot: &str) -> Result<String> {
    let id = match request(ec2, spec, snapshot).send().await {
        Ok(out) => out
            .image_id()
            .context("RegisterImage answered without an image id")?
            .to_string(),
        Err(e) if e.code() == Some("InvalidAMIName.Duplicate") => {
            if let Some(found) = find_ami(ec2, &spec.name).await? {
                return Ok(found.id);
            }
            bail!("RegisterImage {}: {}", spec.name, explain(&e));
        }
        Err(e) => bail!(
            "RegisterImage {} from snapshot {snapshot}: {}",
            spec.name,
            explain(&e)
        ),
    };
    let mut tags = spec.tags.clone();
    tags.push((TAG_SNAPSHOT.to_string(), snapshot.to_string()));
    if let Err(e) = super::tag(ec2, &id, &tags).await {
        let _ = ec2.deregister_image().image_id(&id).send().await;
        return Err(e.context(format!("tagging AMI {id}; it was deregistered again")));
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request carries every SPEC 6.3 parameter (moto ignores most of
    /// them, so this is checked here and on the wire in the moto test).
    #[test]
    fn register_request_has_spec_parameters() {
        let conf = aws_sdk_ec2::Config::builder()
            .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
            .region(aws_sdk_ec2::config::Region::new("us-iso-east-1"))
            .build();
        let ec2 = aws_sdk_ec2::Client::from_conf(conf);
        let spec = AmiSpec {
            name: "rhcos-1-x86_64".into(),
            description: "d".into(),
            arch: "x86_64".into(),
            volume_type: "gp3".into(),
            boot_mode: "uefi-preferred".into(),
            imdsv2_only: true,
            tags: vec![],
        };
        let req = request(&ec2, &spec, "snap-0123");
        let i = req.as_input();
        assert_eq!(i.get_name().as_deref(), Some("rhcos-1-x86_64"));
        assert_eq!(i.get_virtualization_type().as_deref(), Some("hvm"));
        assert_eq!(i.get_root_device_name().as_deref(), Some("/dev/xvda"));
        assert_eq!(i.get_ena_support(), &Some(true));
        assert_eq!(i.get_boot_mode(), &Some(BootModeValues::UefiPreferred));
        assert_eq!(i.get_imds_support(), &Some(ImdsSupportValues::V20));
        assert_eq!(i.get_architecture(), &Some(ArchitectureValues::X8664));
        let bdm = i.get_block_device_mappings().as_ref().unwrap();
        assert_eq!(bdm.len(), 1);
        assert_eq!(bdm[0].device_name(), Some("/dev/xvda"));
        let ebs = bdm[0].ebs().unwrap();
        assert_eq!(ebs.snapshot_id(), Some("snap-0123"));
        assert_eq!(ebs.volume_type(), Some(&VolumeType::Gp3));
        assert_eq!(ebs.delete_on_termination(), Some(true));
        let spec = AmiSpec {
            imdsv2_only: false,
            boot_mode: "legacy-bios".into(),
            ..spec
        };
        let req = request(&ec2, &spec, "snap-0123");
        assert_eq!(req.as_input().get_imds_support(), &None);
        assert_eq!(
            req.as_input().get_boot_mode(),
            &Some(BootModeValues::LegacyBios)
        );
    }
}
