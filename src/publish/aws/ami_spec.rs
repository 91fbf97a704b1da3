//! [`AmiSpec`]: what to register in every region, from the plan's facts
//! (OS name, version, arch, release) and the OS's image.json (boot mode,
//! volume type, IMDSv2): the AMI name, description, EC2 architecture and
//! tags.
use super::settings::{check_ami_name, Settings};
use super::tags::{Tags, TAG_AMI_NAME, TAG_NAME, TAG_OS_VERSION, TAG_RELEASE};
use crate::util::arch::Arch;
use anyhow::{bail, Context, Result};

/// What to register: name, description, tags and the image.json settings.
#[derive(Debug, Clone)]
pub struct AmiSpec {
    pub name: String,
    pub description: String,
    /// EC2 architecture (`x86_64`, `arm64`).
    pub arch: String,
    pub volume_type: String,
    /// `legacy-bios`, `uefi` or `uefi-preferred`.
    pub boot_mode: String,
    pub imdsv2_only: bool,
    pub tags: Tags,
}

impl AmiSpec {
    /// From the plan's facts and the OS's image.json.
    pub fn new(
        settings: &Settings,
        name: &str,
        version: &str,
        arch: Arch,
        release: &str,
        image: &crate::oscontainer::config::ImageConfig,
    ) -> Result<Self> {
        let ami_name = settings
            .ami_name
            .clone()
            .unwrap_or_else(|| format!("{name}-{version}-{arch}"));
        check_ami_name(&ami_name).context("the default AMI name; pass --aws-ami-name")?;
        let (ec2_arch, boot_mode) = match arch {
            Arch::X86_64 => ("x86_64", image.aws_x86_boot_mode.value.clone()),
            // aarch64 AMIs boot UEFI only (cosa).
            Arch::Aarch64 => ("arm64", "uefi".to_string()),
            Arch::Ppc64le | Arch::S390x | Arch::Other(_) => {
                bail!("no AWS architecture for {arch}; AMIs exist for x86_64 and aarch64")
            }
        };
        if !["legacy-bios", "uefi", "uefi-preferred"].contains(&boot_mode.as_str()) {
            bail!("image.json aws-x86-boot-mode '{boot_mode}' is not legacy-bios, uefi or uefi-preferred");
        }
        let volume_type = image.aws_volume_type.value.clone();
        if !["gp2", "gp3", "io1", "io2", "sc1", "st1", "standard"].contains(&volume_type.as_str()) {
            bail!("image.json aws-volume-type '{volume_type}' is not an EBS volume type (gp2, gp3, io1, io2, sc1, st1, standard)");
        }
        Ok(AmiSpec {
            description: format!(
                "{name} {version} ({arch}) from OpenShift release {release}, registered by bootimage-gen"
            ),
            arch: ec2_arch.to_string(),
            volume_type,
            boot_mode,
            imdsv2_only: image.aws_imdsv2_only.value,
            tags: vec![
                (TAG_NAME.into(), ami_name.clone()),
                (TAG_AMI_NAME.into(), ami_name.clone()),
                (TAG_RELEASE.into(), release.to_string()),
                (TAG_OS_VERSION.into(), version.to_string()),
            ],
            name: ami_name,
        })
    }
}
