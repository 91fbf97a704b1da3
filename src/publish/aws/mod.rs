//! AWS (SPEC 6.3): register the aws platform's disk as an AMI in regions
//! the release's pinned AMIs do not cover (private, sovereign, secret and
//! disconnected regions). The disk goes up as an EBS snapshot through the
//! EBS direct API ([`snapshot`]), then RegisterImage ([`register`]).
//! Credentials, profile and default region come from the standard AWS
//! chain (environment, shared config and credentials files, process
//! credentials, web identity, container and instance metadata).
pub mod ec2;
pub mod register;
pub mod retry;
pub mod snapshot;

use crate::io::view::DiskView;
use crate::util::{cancel, progress::Reporter};
use anyhow::{bail, Context, Result};
use aws_config::{BehaviorVersion, Region};
use std::sync::Mutex;
use std::time::Duration;

/// One line for an SDK error: the service's code and message with the
/// HTTP status, or the chain of causes (connection refused, timeout, DNS).
pub fn explain<E>(e: &aws_sdk_ebs::error::SdkError<E>) -> String
where
    E: aws_sdk_ebs::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    use aws_sdk_ebs::error::SdkError;
    match e {
        SdkError::ServiceError(s) => {
            let status = s.raw().status().as_u16();
            match (s.err().code(), s.err().message()) {
                (Some(c), Some(m)) => format!("{c}: {m} (HTTP {status})"),
                (Some(c), None) => format!("{c} (HTTP {status})"),
                _ => format!("HTTP {status} without an AWS error in the answer"),
            }
        }
        other => chain(other),
    }
}

/// The Display of an error and its sources, joined by `: `, repeats left out.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = Some(e);
    while let Some(x) = cur {
        let s = x.to_string();
        if !s.is_empty() && !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = x.source();
    }
    parts.join(": ")
}

/// Tags we put on snapshots and AMIs. `Name` is the AMI name.
pub const TAG_NAME: &str = "Name";
/// The AMI name the snapshot was uploaded for (finds leftovers of a run).
pub const TAG_AMI_NAME: &str = "bootimage-gen:ami-name";
/// OpenShift release version the OS came from.
pub const TAG_RELEASE: &str = "bootimage-gen:release";
/// OS (CoreOS) version.
pub const TAG_OS_VERSION: &str = "bootimage-gen:os-version";
/// On an AMI: the snapshot it was registered from. EC2 also says so in
/// the AMI's block device mapping, but an AMI reused by a later run is
/// recorded from this tag first (moto, the test endpoint, does not keep
/// RegisterImage's block device mapping and reports a snapshot of its own).
pub const TAG_SNAPSHOT: &str = "bootimage-gen:snapshot";
/// Set to [`UPLOAD_COMPLETE`] on a snapshot once every block is in and EC2
/// reports it `completed`: only such a snapshot is ever reused.
pub const TAG_UPLOAD: &str = "bootimage-gen:upload";
pub const UPLOAD_COMPLETE: &str = "complete";
/// Root device of CoreOS AMIs (SPEC 6.3; cosa/ore `RegisterImage`).
pub const ROOT_DEVICE: &str = "/dev/xvda";
/// How long resolving credentials may take (the chain ends with the
/// instance metadata service, which is slow to give up off EC2).
const CREDENTIALS_TIMEOUT: Duration = Duration::from_secs(30);

pub type Tags = Vec<(String, String)>;

/// Validated `--aws-*` options.
/// `--aws-*` as given, before validation.
#[derive(Debug, Clone, Default)]
pub struct AwsArgs {
    pub aws_register: bool,
    pub aws_region: Vec<String>,
    pub aws_endpoint_url: Option<String>,
    pub aws_ami_name: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Settings {
    /// Regions asked for; empty: the chain's default region.
    pub regions: Vec<String>,
    pub endpoint_url: Option<String>,
    pub ami_name: Option<String>,
}

impl Settings {
    /// `None` unless `--aws-register` was given.
    pub fn from_args(a: &AwsArgs) -> Result<Option<Settings>> {
        if !a.aws_register {
            return Ok(None);
        }
        let mut regions: Vec<String> = Vec::new();
        for r in &a.aws_region {
            check_region_name(r)?;
            if !regions.contains(r) {
                regions.push(r.clone());
            }
        }
        if let Some(u) = &a.aws_endpoint_url {
            check_endpoint_url(u)?;
        }
        if let Some(n) = &a.aws_ami_name {
            check_ami_name(n)?;
        }
        Ok(Some(Settings {
            regions,
            endpoint_url: a.aws_endpoint_url.clone(),
            ami_name: a.aws_ami_name.clone(),
        }))
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
        arch: &str,
        release: &str,
        image: &crate::oscontainer::config::ImageConfig,
    ) -> Result<Self> {
        let ami_name = settings
            .ami_name
            .clone()
            .unwrap_or_else(|| format!("{name}-{version}-{arch}"));
        check_ami_name(&ami_name).context("the default AMI name; pass --aws-ami-name")?;
        let (ec2_arch, boot_mode) = match arch {
            "x86_64" => ("x86_64", image.aws_x86_boot_mode.value.clone()),
            // aarch64 AMIs boot UEFI only (cosa).
            "aarch64" => ("arm64", "uefi".to_string()),
            other => bail!("no AWS architecture for {other}; AMIs exist for x86_64 and aarch64"),
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

struct RegionClients {
    name: String,
    ec2: ec2::Client,
    ebs: aws_sdk_ebs::Client,
}

/// Clients for every region, on a runtime of their own, and the results.
pub struct Session {
    rt: tokio::runtime::Runtime,
    regions: Vec<RegionClients>,
    endpoint: String,
    results: Mutex<Vec<Registered>>,
}

/// The HTTP client: rustls with ring, the system's roots plus
/// `$AWS_CA_BUNDLE` (private regions often use a private CA).
fn http_client() -> Result<aws_sdk_ebs::config::SharedHttpClient> {
    use aws_smithy_http_client::{tls, Builder};
    let b = Builder::new().tls_provider(tls::Provider::Rustls(
        tls::rustls_provider::CryptoMode::Ring,
    ));
    let b = match std::env::var_os("AWS_CA_BUNDLE") {
        Some(p) if !p.is_empty() => {
            let pem = std::fs::read(&p).with_context(|| {
                format!(
                    "reading AWS_CA_BUNDLE {}",
                    std::path::Path::new(&p).display()
                )
            })?;
            let ctx = tls::TlsContext::builder()
                .with_trust_store(tls::TrustStore::default().with_pem_certificate(pem))
                .build()
                .context("AWS_CA_BUNDLE")?;
            b.tls_context(ctx)
        }
        _ => b,
    };
    Ok(b.build_https())
}

impl Session {
    /// Load the AWS configuration and credentials from the standard chain
    /// and make the clients. Fails, before anything is built, when no
    /// region or no credentials can be found.
    pub fn connect(s: &Settings) -> Result<Session> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .thread_name("aws")
            .enable_all()
            .build()
            .context("starting the AWS runtime")?;
        let (conf, regions, provider) = rt.block_on(async {
            let mut loader = aws_config::defaults(BehaviorVersion::latest()).http_client(http_client()?);
            if let Some(u) = &s.endpoint_url {
                loader = loader.endpoint_url(u);
            }
            let conf = loader.load().await;
            let regions = if s.regions.is_empty() {
                let Some(r) = conf.region() else {
                    bail!("no AWS region: pass --aws-region REGION (several allowed), or set AWS_REGION or a region in the profile of ~/.aws/config");
                };
                check_region_name(r.as_ref()).context("the default AWS region")?;
                vec![r.to_string()]
            } else {
                s.regions.clone()
            };
            let provider = conf
                .credentials_provider()
                .context("no AWS credentials provider")?;
            use aws_credential_types::provider::ProvideCredentials;
            match tokio::time::timeout(CREDENTIALS_TIMEOUT, provider.provide_credentials()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => bail!(
                    "no AWS credentials ({}); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with a profile in ~/.aws/credentials or ~/.aws/config",
                    chain(&e)
                ),
                Err(_) => bail!(
                    "no AWS credentials after {} s of looking (environment, ~/.aws files, instance metadata); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE",
                    CREDENTIALS_TIMEOUT.as_secs()
                ),
            }
            Ok((conf, regions, provider))
        })?;
        let endpoint = s
            .endpoint_url
            .clone()
            .or_else(|| conf.endpoint_url().map(str::to_string))
            .unwrap_or_else(|| "the default AWS endpoints".to_string());
        // EC2: our own client (ec2.rs); the endpoint as the SDK picks it:
        // --aws-endpoint-url, AWS_ENDPOINT_URL_EC2, AWS_ENDPOINT_URL or the
        // profile's endpoint_url, else the region's partition default.
        let ec2_url = s
            .endpoint_url
            .clone()
            .or_else(|| {
                std::env::var("AWS_ENDPOINT_URL_EC2")
                    .ok()
                    .filter(|u| !u.is_empty())
            })
            .or_else(|| conf.endpoint_url().map(str::to_string));
        let bundle = std::env::var_os("AWS_CA_BUNDLE")
            .filter(|p| !p.is_empty())
            .map(std::path::PathBuf::from);
        let trust = match &bundle {
            Some(p) => crate::util::http::Trust::SystemAnd(p, "AWS_CA_BUNDLE"),
            None => crate::util::http::Trust::System,
        };
        let agent = crate::util::http::agent(trust, false, Duration::from_secs(120))?;
        let fips = conf.use_fips().unwrap_or(false);
        let regions = regions
            .into_iter()
            .map(|name| {
                let region = Region::new(name.clone());
                let url = ec2_url
                    .clone()
                    .unwrap_or_else(|| ec2::default_endpoint(&name, fips));
                let ec2 = ec2::Client::new(&url, &name, provider.clone(), agent.clone());
                // EBS calls are retried by us (snapshot.rs), with backoff
                // sized for thousands of blocks; the SDK's own retries off.
                let ebs = aws_sdk_ebs::Client::from_conf(
                    aws_sdk_ebs::config::Builder::from(&conf)
                        .region(region)
                        .retry_config(aws_sdk_ebs::config::retry::RetryConfig::disabled())
                        .timeout_config(
                            aws_sdk_ebs::config::timeout::TimeoutConfig::builder()
                                .connect_timeout(Duration::from_secs(10))
                                .operation_attempt_timeout(Duration::from_secs(120))
                                .build(),
                        )
                        .build(),
                );
                RegionClients { name, ec2, ebs }
            })
            .collect();
        Ok(Session {
            rt,
            regions,
            endpoint,
            results: Mutex::new(Vec::new()),
        })
    }

    pub fn region_names(&self) -> Vec<String> {
        self.regions.iter().map(|r| r.name.clone()).collect()
    }

    /// Before the disk is built: reach each region's EC2 API with the
    /// credentials (DescribeImages for the AMI name) and say which AMIs
    /// already exist and will be reused.
    pub fn preflight(&self, spec: &AmiSpec, r: &Reporter) -> Result<()> {
        for reg in &self.regions {
            let found = self
                .rt
                .block_on(register::find_ami(&reg.ec2, &spec.name))
                .map_err(|e| self.reach_error(&reg.name, e))?;
            match found {
                Some(img) => r.note(&format!(
                    "aws {}: AMI {} already exists as {}; it will be reused",
                    reg.name, spec.name, img.id
                )),
                None => r.note(&format!(
                    "aws {}: will upload the aws disk and register AMI {}",
                    reg.name, spec.name
                )),
            }
        }
        Ok(())
    }

    fn reach_error(&self, region: &str, e: anyhow::Error) -> anyhow::Error {
        anyhow::anyhow!(
            "AWS region {region} at {}: {e:#}; check --aws-region, --aws-endpoint-url, the network and the credentials",
            self.endpoint
        )
    }

    /// Upload `view` and register it in every region (regions side by
    /// side); the results are kept for [`Session::results`]. Regions that
    /// succeed keep their AMI even when another fails (a rerun reuses it).
    pub fn register(&self, view: &dyn DiskView, spec: &AmiSpec, r: &Reporter) -> Result<()> {
        let outcomes: Vec<(String, Result<Registered>)> = std::thread::scope(|sc| {
            let handles: Vec<_> = self
                .regions
                .iter()
                .map(|reg| {
                    sc.spawn(move || {
                        let res = self
                            .rt
                            .block_on(register_region(reg, view, spec, r))
                            .map_err(|e| {
                                if e.downcast_ref::<cancel::Interrupted>().is_some() {
                                    e
                                } else {
                                    self.reach_error(&reg.name, e)
                                }
                            });
                        (reg.name.clone(), res)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("region thread"))
                .collect()
        });
        let mut first_err = None;
        let mut failed = Vec::new();
        for (region, res) in outcomes {
            match res {
                Ok(reg) => self.results.lock().expect("results").push(reg),
                Err(e) => {
                    if e.downcast_ref::<cancel::Interrupted>().is_some() {
                        return Err(e);
                    }
                    failed.push(region);
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            if failed.len() > 1 {
                return Err(e.context(format!("registering in {}", failed.join(", "))));
            }
            return Err(e);
        }
        Ok(())
    }

    /// What [`Session::register`] did, by region.
    pub fn results(&self) -> Vec<Registered> {
        self.results.lock().expect("results").clone()
    }
}

/// Everything for one region: reuse the AMI if it exists; else reuse a
/// completed snapshot left by an earlier run (deleting unfinished ones) or
/// upload one; then RegisterImage and tag.
async fn register_region(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_names() {
        for ok in [
            "us-east-1",
            "us-gov-west-1",
            "cn-north-1",
            "us-iso-east-1",
            "us-isob-east-1",
            "eu-isoe-west-1",
            "ap-southeast-5",
            "xx-nowhere-1",
        ] {
            check_region_name(ok).unwrap();
        }
        for bad in [
            "",
            "us",
            "useast1",
            "us-east",
            "US-EAST-1",
            "us-east-1x",
            "us-east-123",
            "us--east-1",
            "nowhere",
            "usa-east-1",
            "us_east_1",
        ] {
            let e = check_region_name(bad).unwrap_err().to_string();
            assert!(e.contains("not an AWS region name"), "{bad}: {e}");
        }
    }

    #[test]
    fn ami_names_and_endpoints() {
        check_ami_name("rhcos-418.94.202501221327-0-x86_64").unwrap();
        check_ami_name("my image (test) [1]/a@b_c'd").unwrap();
        assert!(check_ami_name("ab").is_err());
        assert!(check_ami_name(&"a".repeat(129)).is_err());
        assert!(check_ami_name("bad*name").is_err());
        check_endpoint_url("http://127.0.0.1:5000").unwrap();
        check_endpoint_url("https://ec2.us-iso-east-1.c2s.ic.gov/").unwrap();
        assert!(check_endpoint_url("127.0.0.1:5000").is_err());
        assert!(check_endpoint_url("http://").is_err());
        assert!(check_endpoint_url("ftp://x").is_err());
    }

    fn image(boot: &str, vt: &str, imds: bool) -> crate::oscontainer::config::ImageConfig {
        let v = serde_json::json!({
            "aws-x86-boot-mode": boot, "aws-volume-type": vt, "aws-imdsv2-only": imds
        });
        crate::oscontainer::config::ImageConfig::from_json(Some(&v), "image.json").unwrap()
    }

    #[test]
    fn ami_spec_from_plan_and_image_json() {
        let s = Settings {
            regions: vec![],
            endpoint_url: None,
            ami_name: None,
        };
        let a = AmiSpec::new(
            &s,
            "rhcos",
            "418.94.1",
            "x86_64",
            "4.18.0",
            &image("uefi-preferred", "gp3", true),
        )
        .unwrap();
        assert_eq!(a.name, "rhcos-418.94.1-x86_64");
        assert_eq!(a.arch, "x86_64");
        assert_eq!(a.boot_mode, "uefi-preferred");
        assert_eq!(a.volume_type, "gp3");
        assert!(a.imdsv2_only);
        assert!(a
            .tags
            .contains(&(TAG_RELEASE.to_string(), "4.18.0".to_string())));
        assert!(a
            .tags
            .contains(&(TAG_OS_VERSION.to_string(), "418.94.1".to_string())));
        let s = Settings {
            ami_name: Some("custom".into()),
            ..s
        };
        let a = AmiSpec::new(
            &s,
            "rhcos",
            "1",
            "aarch64",
            "4",
            &image("legacy-bios", "gp2", false),
        )
        .unwrap();
        assert_eq!(
            (a.name.as_str(), a.arch.as_str(), a.boot_mode.as_str()),
            ("custom", "arm64", "uefi")
        );
        for bad in [image("bios", "gp2", false), image("uefi", "ssd", false)] {
            assert!(AmiSpec::new(&s, "rhcos", "1", "x86_64", "4", &bad).is_err());
        }
    }
}
