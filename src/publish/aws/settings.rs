//! The `--aws-*` options: [`Settings`] once validated (region names, endpoint URL, AMI name
//! checked before anything is built).
use anyhow::{bail, Result};

/// Validated `--aws-*` options.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Regions asked for; empty: the chain's default region.
    pub regions: Vec<String>,
    pub endpoint_url: Option<String>,
    pub ami_name: Option<String>,
}

impl Settings {
    /// `--aws-register` with these `--aws-region`s (repeated ones once),
    /// `--aws-endpoint-url` and `--aws-ami-name`, each checked.
    pub fn new(
        region: &[String],
        endpoint_url: Option<&str>,
        ami_name: Option<&str>,
    ) -> Result<Settings> {
        let mut regions: Vec<String> = Vec::new();
        for r in region {
            check_region_name(r)?;
            if !regions.contains(r) {
                regions.push(r.clone());
            }
        }
        if let Some(u) = endpoint_url {
            check_endpoint_url(u)?;
        }
        if let Some(n) = ami_name {
            check_ami_name(n)?;
        }
        Ok(Settings {
            regions,
            endpoint_url: endpoint_url.map(str::to_string),
            ami_name: ami_name.map(str::to_string),
        })
    }
}

/// An AWS region name: lowercase words joined by `-`, ending in a number
/// (`us-east-1`, `us-gov-west-1`, `cn-north-1`, `us-iso-east-1`,
/// `eu-isoe-west-1`).
pub fn check_region_name(r: &str) -> Result<()> {
    let parts: Vec<&str> = r.split('-').collect();
    let ok = parts.len() >= 3
        && parts[0].len() == 2
        && parts[..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase()))
        && parts[parts.len() - 1].len() <= 2
        && parts[parts.len() - 1].chars().all(|c| c.is_ascii_digit())
        && !parts[parts.len() - 1].is_empty();
    if !ok {
        bail!(
            "--aws-region '{r}' is not an AWS region name; give one like us-east-1, us-gov-west-1 or us-iso-east-1"
        );
    }
    Ok(())
}

/// `--aws-endpoint-url`: an http(s) URL with a host.
pub fn check_endpoint_url(u: &str) -> Result<()> {
    let ok = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"))
        .is_some_and(|rest| {
            !rest.is_empty()
                && !rest.starts_with('/')
                && !u.chars().any(|c| c.is_whitespace() || c.is_control())
        });
    if !ok {
        bail!("--aws-endpoint-url '{u}' is not an http:// or https:// URL; give the endpoint of the region's EC2 and EBS APIs, e.g. https://ec2.us-iso-east-1.c2s.ic.gov");
    }
    Ok(())
}

/// EC2 AMI names: 3 to 128 characters of letters, digits, spaces and
/// `( ) [ ] . / - ' @ _`.
pub fn check_ami_name(n: &str) -> Result<()> {
    let ok = (3..=128).contains(&n.chars().count())
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || " ()[]./-'@_".contains(c));
    if !ok {
        bail!("--aws-ami-name '{n}' is not a valid AMI name: use 3 to 128 letters, digits, spaces or ( ) [ ] . / - ' @ _");
    }
    Ok(())
}
