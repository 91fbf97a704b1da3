//! The SOAP session: the [`Client`] (a ureq agent over the tree's rustls,
//! the endpoint, the `vmware_soap_session` cookie and the ServiceContent),
//! one SOAP call ([`Client::call`]: the method element in, the response
//! text or a [`Fault`] out), and the calls that open and close a session
//! (RetrieveServiceContent, Login, Logout). The other calls live in the
//! query, lease and task files, as more `impl Client` blocks.
use anyhow::{anyhow, bail, Context, Result};
use std::sync::Arc;
use std::time::Duration;

use super::tls;
use super::trust::Trust;
use super::types::{moref, Endpoint, Fault, MoRef, ServiceContent};
use crate::util::http;
use crate::util::xml::{child_text, children, esc, find};

/// A session with one vCenter.
pub struct Client {
    pub(super) agent: ureq::Agent,
    pub endpoint: Endpoint,
    pub(super) cookie: Option<String>,
    pub sc: ServiceContent,
    /// The TLS trust of its connections (`None` with `--insecure`); NFC
    /// leases add their hosts' thumbprints to it.
    pub(super) trust: Option<Arc<Trust>>,
}

const ENVELOPE_OPEN: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\" \
xmlns:xsd=\"http://www.w3.org/2001/XMLSchema\" \
xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\"><soapenv:Body>";
const ENVELOPE_CLOSE: &str = "</soapenv:Body></soapenv:Envelope>";

/// The agent and, when TLS is verified, its trust: govc's
/// (`GOVC_TLS_CA_CERTS`, `GOVC_TLS_KNOWN_HOSTS`, NFC lease thumbprints).
fn agent(ep: &Endpoint) -> Result<(ureq::Agent, Option<Arc<Trust>>)> {
    let recv = Duration::from_secs(300);
    if ep.insecure {
        let agent = http::agent(http::Trust::System, true, recv)?;
        return Ok((agent, None));
    }
    let trust = Trust::load(
        &ep.authority,
        ep.ca_file.as_deref().map(|p| p.as_os_str()),
        ep.known_hosts.as_deref(),
    )?;
    Ok((tls::agent(trust.clone(), recv), Some(trust)))
}

/// A parsed SOAP response body element (`<XResponse>`), kept with its text.
pub struct Response {
    text: String,
}

impl Response {
    pub fn doc(&self) -> Result<roxmltree::Document<'_>> {
        roxmltree::Document::parse(&self.text).context("parsing a SOAP response")
    }
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl Client {
    /// RetrieveServiceContent, then Login.
    pub fn connect(endpoint: Endpoint, user: &str, password: &str) -> Result<Client> {
        let (agent, trust) = agent(&endpoint)?;
        let mut c = Client {
            agent,
            endpoint,
            trust,
            cookie: None,
            sc: ServiceContent {
                root_folder: MoRef::new("Folder", ""),
                property_collector: MoRef::new("PropertyCollector", ""),
                view_manager: MoRef::new("ViewManager", ""),
                session_manager: MoRef::new("SessionManager", ""),
                search_index: MoRef::new("SearchIndex", ""),
                ovf_manager: MoRef::new("OvfManager", ""),
                api_type: String::new(),
                full_name: String::new(),
                api_version: String::new(),
            },
        };
        c.sc = c.retrieve_service_content()?;
        c.login(user, password)?;
        Ok(c)
    }

    /// A second handle on the same session (for the lease keep-alive).
    pub fn clone_session(&self) -> Client {
        Client {
            agent: self.agent.clone(),
            endpoint: self.endpoint.clone(),
            cookie: self.cookie.clone(),
            sc: self.sc.clone(),
            trust: self.trust.clone(),
        }
    }

    /// One SOAP call: `body` is the method element. A fault is returned as
    /// [`Fault`], a non-SOAP answer as an error naming what came back.
    pub fn call(&mut self, body: &str) -> Result<Response> {
        let envelope = format!("{ENVELOPE_OPEN}{body}{ENVELOPE_CLOSE}");
        let method = body
            .trim_start_matches('<')
            .split([' ', '>'])
            .next()
            .unwrap_or("")
            .to_string();
        let t0 = std::time::Instant::now();
        let mut req = self
            .agent
            .post(&self.endpoint.sdk)
            .header("Content-Type", "text/xml; charset=utf-8")
            .header("SOAPAction", "urn:vim25/6.5");
        if let Some(c) = &self.cookie {
            req = req.header("Cookie", c);
        }
        let mut resp = req.send(envelope.as_bytes()).map_err(tls::error)?;
        for v in resp.headers().get_all("set-cookie") {
            if let Ok(s) = v.to_str() {
                if let Some(kv) = s.split(';').next() {
                    if kv.trim_start().starts_with("vmware_soap_session=") {
                        self.cookie = Some(kv.trim().to_string());
                    }
                }
            }
        }
        let status = resp.status().as_u16();
        let ctype = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = resp
            .body_mut()
            .with_config()
            .limit(256 << 20)
            .read_to_string()
            .map_err(tls::error)?;
        if !ctype.contains("xml") || !text.contains("Envelope") {
            bail!(
                "not a vSphere API endpoint: HTTP {status}, {} answered instead of SOAP",
                if ctype.is_empty() {
                    "no content type".to_string()
                } else {
                    ctype
                }
            );
        }
        tracing::debug!(
            "vSphere {method}: HTTP {status}, {} bytes in {:.1?}",
            text.len(),
            t0.elapsed()
        );
        let doc = roxmltree::Document::parse(&text).context("parsing a SOAP response")?;
        if let Some(f) = find(doc.root(), "Fault") {
            let message = child_text(f, "faultstring").unwrap_or_default();
            let kind = find(f, "detail")
                .and_then(|d| d.children().find(|c| c.is_element()))
                .map(|d| {
                    d.attribute(("http://www.w3.org/2001/XMLSchema-instance", "type"))
                        .map(str::to_string)
                        .unwrap_or_else(|| {
                            d.tag_name().name().trim_end_matches("Fault").to_string()
                        })
                })
                .unwrap_or_else(|| "Fault".into());
            return Err(Fault { kind, message }.into());
        }
        if status != 200 {
            bail!("vSphere API: HTTP {status}");
        }
        Ok(Response { text })
    }

    fn retrieve_service_content(&mut self) -> Result<ServiceContent> {
        let r = self.call(
            "<RetrieveServiceContent xmlns=\"urn:vim25\"><_this type=\"ServiceInstance\">ServiceInstance</_this></RetrieveServiceContent>",
        )?;
        let doc = r.doc()?;
        let rv = find(doc.root(), "returnval").ok_or_else(|| anyhow!("no ServiceContent"))?;
        let get = |n: &str| -> Result<MoRef> {
            children(rv, n)
                .next()
                .map(moref)
                .ok_or_else(|| anyhow!("ServiceContent has no {n}: not a vCenter"))
        };
        let about = find(rv, "about").ok_or_else(|| anyhow!("ServiceContent has no about"))?;
        Ok(ServiceContent {
            root_folder: get("rootFolder")?,
            property_collector: get("propertyCollector")?,
            view_manager: get("viewManager")?,
            session_manager: get("sessionManager")?,
            search_index: get("searchIndex")?,
            ovf_manager: get("ovfManager")?,
            api_type: child_text(about, "apiType").unwrap_or_default(),
            full_name: child_text(about, "fullName").unwrap_or_default(),
            api_version: child_text(about, "apiVersion").unwrap_or_default(),
        })
    }

    /// SessionManager.Login.
    fn login(&mut self, user: &str, password: &str) -> Result<()> {
        let body = format!(
            "<Login xmlns=\"urn:vim25\">{}<userName>{}</userName><password>{}</password></Login>",
            self.sc.session_manager.xml("_this"),
            esc(user),
            esc(password)
        );
        self.call(&body)?;
        Ok(())
    }

    /// SessionManager.Logout (best effort).
    pub fn logout(&mut self) {
        let body = format!(
            "<Logout xmlns=\"urn:vim25\">{}</Logout>",
            self.sc.session_manager.xml("_this")
        );
        let _ = self.call(&body);
    }
}
