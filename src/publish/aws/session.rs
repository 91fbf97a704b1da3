//! [`Session`]: the AWS configuration and credentials from the standard
//! chain, one EC2 and one EBS client per region on a runtime of their own,
//! the preflight check before the disk is built, and the registration in
//! every region side by side. Settings in; the per-region [`Registered`]
//! results out.
use super::ami_spec::AmiSpec;
use super::ec2;
use super::errors::chain;
use super::region::{register_region, RegionClients, Registered};
use super::register;
use super::sdk_http::http_client;
use super::settings::{check_region_name, Settings};
use crate::io::view::DiskView;
use crate::util::{cancel, progress::Reporter};
use anyhow::{bail, Context, Result};
use aws_config::{BehaviorVersion, Region};
use std::sync::Mutex;
use std::time::Duration;

/// How long resolving credentials may take (the chain ends with the
/// instance metadata service, which is slow to give up off EC2).
const CREDENTIALS_TIMEOUT: Duration = Duration::from_secs(30);

/// Clients for every region, on a runtime of their own, and the results.
pub struct Session {
    rt: tokio::runtime::Runtime,
    regions: Vec<RegionClients>,
    endpoint: String,
    results: Mutex<Vec<Registered>>,
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
