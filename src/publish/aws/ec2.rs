//! EC2 (docs/contract.md §6.3): a small client of our own for the EC2 Query API
//! (version 2016-11-15), exactly the six calls `--aws-register` makes:
//! DescribeImages, DescribeSnapshots, RegisterImage, CreateTags,
//! DeregisterImage and DeleteSnapshot (fixtures/UPSTREAM.md §18 gives the
//! parameter and element names with their source).
//!
//! A request is a form-encoded POST of `Action`, `Version` and the call's
//! parameters (lists flattened as `Name.1`, `Name.2`, structures as
//! `Name.1.Member`), signed with SigV4 (the `aws-sigv4` crate, service
//! `ec2`). The answer is XML, read with roxmltree by local name; an error
//! answer is `<Response><Errors><Error><Code>…<Message>…`. Throttling, 5xx
//! and dropped connections are retried with backoff ([`super::retry`]).
//! HTTP is ureq (blocking, on tokio's blocking pool) over rustls with ring,
//! trusting the system store plus `$AWS_CA_BUNDLE`.
use super::retry::{self, Backoff, Failure};
use crate::util::http::{self, TransportError};
use crate::util::xml::{child_text, children, find};
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use std::time::{Duration, SystemTime};

pub const API_VERSION: &str = "2016-11-15";
const CONTENT_TYPE: &str = "application/x-www-form-urlencoded; charset=utf-8";

/// A failed EC2 call.
#[derive(Debug, thiserror::Error)]
pub enum Ec2Error {
    /// EC2 answered with an error.
    #[error("{}", service_text(*.status, .code.as_deref(), .message.as_deref()))]
    Service {
        status: u16,
        code: Option<String>,
        message: Option<String>,
    },
    /// No answer: connection refused or reset, DNS, TLS, timeout.
    #[error("{0}")]
    Transport(#[from] TransportError),
    /// The request could not be made (credentials, signing) or the answer
    /// could not be read.
    #[error("{0}")]
    Local(String),
}

fn service_text(status: u16, code: Option<&str>, message: Option<&str>) -> String {
    match (code, message) {
        (Some(c), Some(m)) => format!("{c}: {m} (HTTP {status})"),
        (Some(c), None) => format!("{c} (HTTP {status})"),
        _ => format!("HTTP {status} without an EC2 error in the answer"),
    }
}

impl Ec2Error {
    /// The EC2 error code (`InvalidAMIName.Duplicate`, ...).
    pub fn code(&self) -> Option<&str> {
        match self {
            Ec2Error::Service { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    fn failure(&self) -> Failure {
        match self {
            Ec2Error::Service { status, code, .. } => {
                retry::classify_response(*status, code.as_deref())
            }
            Ec2Error::Transport(TransportError::Connect(_)) => Failure::Transient,
            Ec2Error::Transport(TransportError::Tls(_)) | Ec2Error::Local(_) => Failure::Permanent,
        }
    }
}

/// A call's parameters, in order: `Action`, `Version`, then the call's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params(pub Vec<(String, String)>);

impl Params {
    pub fn new(action: &str) -> Self {
        Params(vec![
            ("Action".into(), action.into()),
            ("Version".into(), API_VERSION.into()),
        ])
    }

    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.0.push((key.into(), value.into()));
        self
    }

    /// A list member: `Name.1=a&Name.2=b`.
    pub fn list(&mut self, name: &str, values: &[&str]) -> &mut Self {
        for (i, v) in values.iter().enumerate() {
            self.set(format!("{name}.{}", i + 1), *v);
        }
        self
    }

    /// Filter number `n` (from 1): `Filter.n.Name`, `Filter.n.Value.m`.
    pub fn filter(&mut self, n: usize, name: &str, values: &[&str]) -> &mut Self {
        self.set(format!("Filter.{n}.Name"), name);
        self.list(&format!("Filter.{n}.Value"), values)
    }

    /// Tags as `prefix.n.Key` / `prefix.n.Value`.
    pub fn tags(&mut self, prefix: &str, tags: &[(String, String)]) -> &mut Self {
        for (i, (k, v)) in tags.iter().enumerate() {
            self.set(format!("{prefix}.{}.Key", i + 1), k.as_str());
            self.set(format!("{prefix}.{}.Value", i + 1), v.as_str());
        }
        self
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The form body: each key and value percent-encoded (RFC 3986: all
    /// but unreserved characters).
    pub fn body(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{}={}", pct(k), pct(v)))
            .collect::<Vec<_>>()
            .join("&")
    }
}

fn pct(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

/// The region's EC2 endpoint when none is configured:
/// `https://ec2[-fips].REGION.SUFFIX`, the suffix by the region's partition.
pub fn default_endpoint(region: &str, fips: bool) -> String {
    let suffix = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else if region.starts_with("us-iso-") {
        "c2s.ic.gov"
    } else if region.starts_with("us-isob-") {
        "sc2s.sgov.gov"
    } else if region.starts_with("us-isof-") {
        "csp.hci.ic.gov"
    } else if region.starts_with("eu-isoe-") {
        "cloud.adc-e.uk"
    } else {
        "amazonaws.com"
    };
    let host = if fips { "ec2-fips" } else { "ec2" };
    format!("https://{host}.{region}.{suffix}")
}

/// One page of a Describe call: its items and the `nextToken`, if any.
pub type Page<T> = (Vec<T>, Option<String>);

/// An image from DescribeImages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Image {
    pub id: String,
    pub name: Option<String>,
    pub state: Option<String>,
    pub tags: Vec<(String, String)>,
    /// (device name, EBS snapshot id)
    pub block_devices: Vec<(String, Option<String>)>,
}

/// A snapshot from DescribeSnapshots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub id: String,
    pub state: Option<String>,
    pub volume_gib: Option<i64>,
    pub tags: Vec<(String, String)>,
}

impl Image {
    pub fn tag(&self, key: &str) -> Option<&str> {
        tag(&self.tags, key)
    }
}

impl Snapshot {
    pub fn tag(&self, key: &str) -> Option<&str> {
        tag(&self.tags, key)
    }
}

fn tag<'a>(tags: &'a [(String, String)], key: &str) -> Option<&'a str> {
    tags.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

fn parse(xml: &str) -> Result<roxmltree::Document<'_>, Ec2Error> {
    roxmltree::Document::parse(xml)
        .map_err(|e| Ec2Error::Local(format!("EC2 answered with XML that does not parse: {e}")))
}

/// `<tagSet><item><key>k</key><value>v</value></item>…`
fn tag_set(n: roxmltree::Node<'_, '_>) -> Vec<(String, String)> {
    children(n, "tagSet")
        .flat_map(|s| children(s, "item"))
        .filter_map(|i| {
            Some((
                child_text(i, "key")?,
                child_text(i, "value").unwrap_or_default(),
            ))
        })
        .collect()
}

/// The `item`s of the set element `set` under the document's root.
fn items<'a, 'i>(
    doc: &'a roxmltree::Document<'i>,
    set: &'a str,
) -> impl Iterator<Item = roxmltree::Node<'a, 'i>> + 'a {
    children(doc.root_element(), set).flat_map(|s| children(s, "item"))
}

fn next_token(doc: &roxmltree::Document<'_>) -> Option<String> {
    child_text(doc.root_element(), "nextToken").filter(|t| !t.is_empty())
}

pub fn parse_images(xml: &str) -> Result<Page<Image>, Ec2Error> {
    let doc = parse(xml)?;
    let images = items(&doc, "imagesSet")
        .filter_map(|i| {
            Some(Image {
                id: child_text(i, "imageId")?,
                name: child_text(i, "name"),
                state: child_text(i, "imageState"),
                tags: tag_set(i),
                block_devices: children(i, "blockDeviceMapping")
                    .flat_map(|s| children(s, "item"))
                    .map(|b| {
                        (
                            child_text(b, "deviceName").unwrap_or_default(),
                            children(b, "ebs")
                                .next()
                                .and_then(|e| child_text(e, "snapshotId")),
                        )
                    })
                    .collect(),
            })
        })
        .collect();
    Ok((images, next_token(&doc)))
}

pub fn parse_snapshots(xml: &str) -> Result<Page<Snapshot>, Ec2Error> {
    let doc = parse(xml)?;
    let snaps = items(&doc, "snapshotSet")
        .filter_map(|s| {
            Some(Snapshot {
                id: child_text(s, "snapshotId")?,
                state: child_text(s, "status"),
                volume_gib: child_text(s, "volumeSize").and_then(|v| v.trim().parse().ok()),
                tags: tag_set(s),
            })
        })
        .collect();
    Ok((snaps, next_token(&doc)))
}

/// An error answer: the first `Error`'s `Code` and `Message`.
pub fn parse_error(status: u16, xml: &str) -> Ec2Error {
    let (code, message) = match roxmltree::Document::parse(xml) {
        Ok(doc) => match find(doc.root_element(), "Error") {
            Some(e) => (child_text(e, "Code"), child_text(e, "Message")),
            None => (None, None),
        },
        Err(_) => (None, None),
    };
    Ec2Error::Service {
        status,
        code,
        message,
    }
}

/// One region's EC2 API.
pub struct Client {
    endpoint: String,
    region: String,
    provider: SharedCredentialsProvider,
    cached: tokio::sync::Mutex<Option<Credentials>>,
    agent: ureq::Agent,
    policy: Backoff,
}

impl Client {
    pub fn new(
        endpoint: &str,
        region: &str,
        provider: SharedCredentialsProvider,
        agent: ureq::Agent,
    ) -> Self {
        Client {
            endpoint: endpoint.trim_end_matches('/').to_string() + "/",
            region: region.to_string(),
            provider,
            cached: tokio::sync::Mutex::new(None),
            agent,
            policy: Backoff {
                base: Duration::from_millis(250),
                cap: Duration::from_secs(8),
                attempts: 5,
            },
        }
    }

    /// The chain's credentials, kept until 5 minutes before they expire.
    async fn credentials(&self) -> Result<Credentials, Ec2Error> {
        let mut c = self.cached.lock().await;
        let fresh = c.as_ref().is_some_and(|k| {
            k.expiry()
                .map_or(true, |t| t > SystemTime::now() + Duration::from_secs(300))
        });
        if !fresh {
            let k = self.provider.provide_credentials().await.map_err(|e| {
                Ec2Error::Local(format!("no AWS credentials: {}", super::errors::chain(&e)))
            })?;
            *c = Some(k);
        }
        Ok(c.clone().expect("credentials just set"))
    }

    /// One signed POST; the answer's body on HTTP 200.
    async fn send(&self, body: &str) -> Result<String, Ec2Error> {
        use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
        let creds = self.credentials().await?;
        let identity = creds.into();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("ec2")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| Ec2Error::Local(format!("signing: {e}")))?
            .into();
        let headers = [("content-type", CONTENT_TYPE)];
        let signable = SignableRequest::new(
            "POST",
            &self.endpoint,
            headers.into_iter(),
            SignableBody::Bytes(body.as_bytes()),
        )
        .map_err(|e| Ec2Error::Local(format!("signing: {e}")))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| Ec2Error::Local(format!("signing: {e}")))?
            .into_parts();
        let mut req = self
            .agent
            .post(&self.endpoint)
            .header("content-type", CONTENT_TYPE);
        for (k, v) in instructions.headers() {
            req = req.header(k, v);
        }
        let body = body.to_string();
        let answer = tokio::task::spawn_blocking(move || -> Result<(u16, String), Ec2Error> {
            let mut resp = req
                .send(body.as_bytes())
                .map_err(|e| Ec2Error::from(http::transport(e)))?;
            let status = resp.status().as_u16();
            let text = resp
                .body_mut()
                .with_config()
                .limit(64 << 20)
                .read_to_string()
                .map_err(|e| Ec2Error::from(http::transport(e)))?;
            Ok((status, text))
        })
        .await
        .map_err(|e| Ec2Error::Local(format!("EC2 call: {e}")))??;
        match answer {
            (200, text) => Ok(text),
            (status, text) => Err(parse_error(status, &text)),
        }
    }

    /// A call, retried on throttling, 5xx and dropped connections.
    pub async fn call(&self, params: &Params) -> Result<String, Ec2Error> {
        let body = params.body();
        let action = params.get("Action").unwrap_or("?").to_string();
        retry::with_retry(
            self.policy,
            Ec2Error::failure,
            |e, kind, n| tracing::debug!("EC2 {action}: {e} ({kind:?}); retry {}", n + 1),
            || self.send(&body),
        )
        .await
    }

    /// A Describe call, every page (`NextToken` until none is given).
    async fn pages<T>(
        &self,
        params: &Params,
        parse: fn(&str) -> Result<Page<T>, Ec2Error>,
    ) -> Result<Vec<T>, Ec2Error> {
        let mut all = Vec::new();
        let mut p = params.clone();
        loop {
            let (mut page, next) = parse(&self.call(&p).await?)?;
            all.append(&mut page);
            match next {
                Some(t) => set_token(&mut p, t),
                None => return Ok(all),
            }
        }
    }

    pub async fn describe_images(&self, params: &Params) -> Result<Vec<Image>, Ec2Error> {
        self.pages(params, parse_images).await
    }

    pub async fn describe_snapshots(&self, params: &Params) -> Result<Vec<Snapshot>, Ec2Error> {
        self.pages(params, parse_snapshots).await
    }
}

fn set_token(p: &mut Params, token: String) {
    p.0.retain(|(k, _)| k != "NextToken");
    p.set("NextToken", token);
}

/// The element text of a RegisterImage answer's `imageId`.
pub fn parse_image_id(xml: &str) -> Result<Option<String>, Ec2Error> {
    let doc = parse(xml)?;
    Ok(child_text(doc.root_element(), "imageId").filter(|s| !s.is_empty()))
}

#[cfg(test)]
mod tests;
