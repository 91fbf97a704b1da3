//! A small typed client for the vSphere Web Services (SOAP, `urn:vim25`)
//! API: exactly the calls `vsphere import` makes, each named after its
//! vSphere method (fixtures/UPSTREAM.md §17 lists them with their sources).
//!
//! Requests are written by hand (escaped); responses are read with
//! roxmltree. HTTP is ureq (blocking) over the tree's rustls with ring. The
//! session is the `vmware_soap_session` cookie that `Login` sets.
use anyhow::{anyhow, bail, Context, Result};
use std::io::Read;
use std::time::Duration;

/// A managed object reference: `<x type="Folder">group-d1</x>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MoRef {
    pub kind: String,
    pub value: String,
}

impl MoRef {
    pub fn new(kind: &str, value: &str) -> Self {
        MoRef {
            kind: kind.into(),
            value: value.into(),
        }
    }

    /// The reference as the element `tag`.
    pub fn xml(&self, tag: &str) -> String {
        format!(
            "<{tag} type=\"{}\">{}</{tag}>",
            esc(&self.kind),
            esc(&self.value)
        )
    }
}

impl std::fmt::Display for MoRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind, self.value)
    }
}

pub use crate::util::xml::esc;

/// A SOAP fault: the fault's type (`InvalidLogin`, `DuplicateName`, ...)
/// and its message.
#[derive(Debug, thiserror::Error)]
#[error("{message} ({kind})")]
pub struct Fault {
    pub kind: String,
    pub message: String,
}

pub use crate::util::http::TransportError;
use crate::util::http::{self, transport};

/// How to reach and trust the server.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `https://host[:port]/sdk`
    pub sdk: String,
    /// `host[:port]`, for the `*` in NFC device URLs.
    pub authority: String,
    pub insecure: bool,
    /// PEM file(s) of CAs to trust instead of the system store.
    pub ca_file: Option<std::path::PathBuf>,
}

impl Endpoint {
    /// From govc's `GOVC_URL` forms: `host`, `host:port`, `https://host[/sdk]`.
    /// User info in the URL is refused (passwords come from the environment).
    pub fn parse(url: &str, insecure: bool, ca_file: Option<std::path::PathBuf>) -> Result<Self> {
        let u = url.trim();
        if u.is_empty() {
            bail!("the vCenter URL is empty: set GOVC_URL (e.g. https://vcenter.example.com/sdk)");
        }
        let rest = if let Some(r) = u.strip_prefix("https://") {
            r
        } else if u.starts_with("http://") {
            bail!("vCenter URL {u}: plain http is not supported; use https://");
        } else if u.contains("://") {
            bail!("vCenter URL {u}: not an https URL");
        } else {
            u
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.contains('@') {
            bail!("vCenter URL {u} carries credentials: remove them and set GOVC_USERNAME and GOVC_PASSWORD");
        }
        if authority.is_empty() {
            bail!("vCenter URL {u} has no host");
        }
        let path = match path.trim_end_matches('/') {
            "" => "/sdk",
            p => p,
        };
        Ok(Endpoint {
            sdk: format!("https://{authority}{path}"),
            authority: authority.into(),
            insecure,
            ca_file,
        })
    }
}

/// The ServiceContent references used here.
#[derive(Debug, Clone)]
pub struct ServiceContent {
    pub root_folder: MoRef,
    pub property_collector: MoRef,
    pub view_manager: MoRef,
    pub session_manager: MoRef,
    pub search_index: MoRef,
    pub ovf_manager: MoRef,
    pub api_type: String,
    pub full_name: String,
    pub api_version: String,
}

/// A session with one vCenter.
pub struct Client {
    agent: ureq::Agent,
    pub endpoint: Endpoint,
    cookie: Option<String>,
    pub sc: ServiceContent,
}

const ENVELOPE_OPEN: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\" \
xmlns:xsd=\"http://www.w3.org/2001/XMLSchema\" \
xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\"><soapenv:Body>";
const ENVELOPE_CLOSE: &str = "</soapenv:Body></soapenv:Envelope>";

fn agent(ep: &Endpoint) -> Result<ureq::Agent> {
    let trust = match &ep.ca_file {
        Some(f) => http::Trust::Only(f, "GOVC_TLS_CA_CERTS"),
        None => http::Trust::System,
    };
    http::agent(trust, ep.insecure, Duration::from_secs(300))
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

pub use crate::util::xml::{child_text, children, find};

/// A MoRef from an element.
pub fn moref(n: roxmltree::Node<'_, '_>) -> MoRef {
    MoRef::new(n.attribute("type").unwrap_or(""), n.text().unwrap_or(""))
}

/// An object's properties, by path, as nodes' raw XML or text.
pub struct ObjectContent {
    pub obj: MoRef,
    /// (property path, text of `val`, xsi:type of `val`, raw XML of `val`)
    pub props: Vec<(String, String, String, String)>,
}

impl ObjectContent {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.props
            .iter()
            .find(|p| p.0 == name)
            .map(|p| p.1.as_str())
    }
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.props
            .iter()
            .find(|p| p.0 == name)
            .map(|p| p.3.as_str())
    }
}

impl Client {
    /// RetrieveServiceContent, then Login.
    pub fn connect(endpoint: Endpoint, user: &str, password: &str) -> Result<Client> {
        let agent = agent(&endpoint)?;
        let mut c = Client {
            agent,
            endpoint,
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
        let mut resp = req.send(envelope.as_bytes()).map_err(transport)?;
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
            .map_err(transport)?;
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

    /// SearchIndex.FindByInventoryPath: `None` when nothing is there.
    pub fn find_by_inventory_path(&mut self, path: &str) -> Result<Option<MoRef>> {
        let body = format!(
            "<FindByInventoryPath xmlns=\"urn:vim25\">{}<inventoryPath>{}</inventoryPath></FindByInventoryPath>",
            self.sc.search_index.xml("_this"),
            esc(path)
        );
        let r = self.call(&body)?;
        let doc = r.doc()?;
        Ok(find(doc.root(), "returnval").map(moref))
    }

    /// SearchIndex.FindChild: an entity named `name` directly in `parent`.
    pub fn find_child(&mut self, parent: &MoRef, name: &str) -> Result<Option<MoRef>> {
        let body = format!(
            "<FindChild xmlns=\"urn:vim25\">{}{}<name>{}</name></FindChild>",
            self.sc.search_index.xml("_this"),
            parent.xml("entity"),
            esc(name)
        );
        let r = self.call(&body)?;
        let doc = r.doc()?;
        Ok(find(doc.root(), "returnval").map(moref))
    }

    /// PropertyCollector.RetrieveProperties of `paths` on `objs` (all of
    /// type `kind`).
    pub fn retrieve(
        &mut self,
        kind: &str,
        objs: &[MoRef],
        paths: &[&str],
    ) -> Result<Vec<ObjectContent>> {
        if objs.is_empty() {
            return Ok(Vec::new());
        }
        let mut spec = format!("<propSet><type>{}</type>", esc(kind));
        for p in paths {
            spec.push_str(&format!("<pathSet>{}</pathSet>", esc(p)));
        }
        spec.push_str("</propSet>");
        for o in objs {
            spec.push_str(&format!("<objectSet>{}</objectSet>", o.xml("obj")));
        }
        let body = format!(
            "<RetrieveProperties xmlns=\"urn:vim25\">{}<specSet>{spec}</specSet></RetrieveProperties>",
            self.sc.property_collector.xml("_this")
        );
        let r = self.call(&body)?;
        let doc = r.doc()?;
        let text = r.text();
        let xsi = "http://www.w3.org/2001/XMLSchema-instance";
        let mut out = Vec::new();
        for rv in doc
            .descendants()
            .filter(|n| n.is_element() && n.tag_name().name() == "returnval")
        {
            let obj = children(rv, "obj")
                .next()
                .map(moref)
                .unwrap_or_else(|| MoRef::new("", ""));
            let mut props = Vec::new();
            for ps in children(rv, "propSet") {
                let name = child_text(ps, "name").unwrap_or_default();
                if let Some(v) = children(ps, "val").next() {
                    let t = v.attribute((xsi, "type")).unwrap_or("").to_string();
                    let txt = v.text().unwrap_or("").to_string();
                    props.push((name, txt, t, text[v.range()].to_string()));
                }
            }
            out.push(ObjectContent { obj, props });
        }
        Ok(out)
    }

    /// One property's MoRef list (`ArrayOfManagedObjectReference`).
    pub fn refs(&mut self, obj: &MoRef, path: &str) -> Result<Vec<MoRef>> {
        let oc = self.retrieve(&obj.kind.clone(), std::slice::from_ref(obj), &[path])?;
        let Some(raw) = oc.first().and_then(|o| o.raw(path)) else {
            return Ok(Vec::new());
        };
        let doc = roxmltree::Document::parse(raw)?;
        Ok(doc
            .root_element()
            .children()
            .filter(|c| c.is_element() && c.attribute("type").is_some())
            .map(moref)
            .collect())
    }

    /// ViewManager.CreateContainerView over `root` for `kinds`, the names of
    /// what it holds (and their references), then DestroyView.
    pub fn list(&mut self, root: &MoRef, kinds: &[&str]) -> Result<Vec<(String, MoRef)>> {
        let mut ty = String::new();
        for k in kinds {
            ty.push_str(&format!("<type>{}</type>", esc(k)));
        }
        let body = format!(
            "<CreateContainerView xmlns=\"urn:vim25\">{}{}{ty}<recursive>true</recursive></CreateContainerView>",
            self.sc.view_manager.xml("_this"),
            root.xml("container")
        );
        let r = self.call(&body)?;
        let view = {
            let doc = r.doc()?;
            find(doc.root(), "returnval")
                .map(moref)
                .ok_or_else(|| anyhow!("CreateContainerView returned nothing"))?
        };
        let objs = self.refs(&view, "view");
        let _ = self.call(&format!(
            "<DestroyView xmlns=\"urn:vim25\">{}</DestroyView>",
            view.xml("_this")
        ));
        let objs = objs?;
        let mut out = Vec::new();
        for k in kinds {
            let these: Vec<MoRef> = objs.iter().filter(|o| o.kind == *k).cloned().collect();
            for oc in self.retrieve(k, &these, &["name"])? {
                out.push((oc.get("name").unwrap_or("").to_string(), oc.obj));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// OvfManager.CreateImportSpec: the import spec's raw XML (the
    /// `importSpec` element with its xsi:type), or the first error/warning.
    pub fn create_import_spec(
        &mut self,
        ovf: &str,
        pool: &MoRef,
        datastore: &MoRef,
        entity_name: &str,
        network_mapping: &[(String, MoRef)],
        disk_provisioning: Option<&str>,
    ) -> Result<String> {
        let mut cisp = format!("<entityName>{}</entityName>", esc(entity_name));
        for (name, net) in network_mapping {
            cisp.push_str(&format!(
                "<networkMapping><name>{}</name>{}</networkMapping>",
                esc(name),
                net.xml("network")
            ));
        }
        if let Some(d) = disk_provisioning {
            cisp.push_str(&format!("<diskProvisioning>{}</diskProvisioning>", esc(d)));
        }
        let body = format!(
            "<CreateImportSpec xmlns=\"urn:vim25\">{}<ovfDescriptor>{}</ovfDescriptor>{}{}<cisp>{cisp}</cisp></CreateImportSpec>",
            self.sc.ovf_manager.xml("_this"),
            esc(ovf),
            pool.xml("resourcePool"),
            datastore.xml("datastore"),
        );
        let r = self.call(&body)?;
        let doc = r.doc()?;
        let rv = find(doc.root(), "returnval")
            .ok_or_else(|| anyhow!("CreateImportSpec returned nothing"))?;
        if let Some(e) = children(rv, "error").next() {
            let msg = find(e, "localizedMessage")
                .and_then(|m| m.text())
                .unwrap_or("an error without a message");
            bail!("vCenter refused the OVF descriptor: {msg}");
        }
        let spec = children(rv, "importSpec")
            .next()
            .ok_or_else(|| anyhow!("CreateImportSpec returned no import spec"))?;
        let ty = spec
            .attribute(("http://www.w3.org/2001/XMLSchema-instance", "type"))
            .unwrap_or("VirtualMachineImportSpec");
        // Re-emit as <spec xsi:type=...>inner</spec>, the inner XML
        // verbatim: it is in the urn:vim25 default namespace, and its
        // prefixes (govmomi writes `XMLSchema-instance:type`, declared on
        // an ancestor) are declared again on <spec>.
        let mut decl = String::new();
        for ns in spec.namespaces() {
            if let Some(prefix) = ns.name() {
                if prefix != "xml" {
                    decl.push_str(&format!(" xmlns:{prefix}=\"{}\"", esc(ns.uri())));
                }
            }
        }
        let inner: String = spec
            .children()
            .map(|c| r.text()[c.range()].to_string())
            .collect();
        Ok(format!(
            "<spec{decl} xsi:type=\"{}\">{inner}</spec>",
            esc(ty)
        ))
    }

    /// ResourcePool.ImportVApp: the HttpNfcLease.
    pub fn import_vapp(&mut self, pool: &MoRef, spec: &str, folder: &MoRef) -> Result<MoRef> {
        let body = format!(
            "<ImportVApp xmlns=\"urn:vim25\">{}{spec}{}</ImportVApp>",
            pool.xml("_this"),
            folder.xml("folder")
        );
        let r = self.call(&body)?;
        let doc = r.doc()?;
        find(doc.root(), "returnval")
            .map(moref)
            .ok_or_else(|| anyhow!("ImportVApp returned no lease"))
    }

    /// Wait for the lease to leave `initializing`: its entity (the VM) and
    /// device URLs (`*` replaced by the vCenter host), or its error.
    pub fn lease_wait(&mut self, lease: &MoRef) -> Result<LeaseInfo> {
        let deadline = std::time::Instant::now() + Duration::from_secs(600);
        loop {
            let oc = self.retrieve(
                "HttpNfcLease",
                std::slice::from_ref(lease),
                &["state", "info", "error"],
            )?;
            let o = oc
                .first()
                .ok_or_else(|| anyhow!("lease {lease} vanished"))?;
            match o.get("state").unwrap_or("") {
                "ready" => {
                    let raw = o.raw("info").ok_or_else(|| anyhow!("lease has no info"))?;
                    return self.parse_lease_info(raw);
                }
                "error" => {
                    let msg = o
                        .raw("error")
                        .and_then(|e| {
                            roxmltree::Document::parse(e).ok().and_then(|d| {
                                find(d.root(), "localizedMessage")
                                    .and_then(|m| m.text().map(String::from))
                            })
                        })
                        .unwrap_or_else(|| "no message".into());
                    bail!("the import lease failed: {msg}");
                }
                _ => {}
            }
            if std::time::Instant::now() > deadline {
                bail!("the import lease did not become ready in 10 minutes");
            }
            crate::util::cancel::check()?;
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn parse_lease_info(&self, raw: &str) -> Result<LeaseInfo> {
        let doc = roxmltree::Document::parse(raw)?;
        let root = doc.root_element();
        let entity = children(root, "entity")
            .next()
            .map(moref)
            .ok_or_else(|| anyhow!("lease info has no entity"))?;
        let mut devices = Vec::new();
        for d in children(root, "deviceUrl") {
            let url = child_text(d, "url").unwrap_or_default();
            let url = url.replacen("://*", &format!("://{}", self.endpoint.authority), 1);
            devices.push(DeviceUrl {
                import_key: child_text(d, "importKey").unwrap_or_default(),
                url,
                disk: child_text(d, "disk").as_deref() == Some("true"),
            });
        }
        Ok(LeaseInfo { entity, devices })
    }

    /// HttpNfcLease.HttpNfcLeaseProgress (also the keep-alive).
    pub fn lease_progress(&mut self, lease: &MoRef, percent: u32) -> Result<()> {
        self.call(&format!(
            "<HttpNfcLeaseProgress xmlns=\"urn:vim25\">{}<percent>{percent}</percent></HttpNfcLeaseProgress>",
            lease.xml("_this")
        ))
        .map(|_| ())
    }

    /// HttpNfcLease.HttpNfcLeaseComplete.
    pub fn lease_complete(&mut self, lease: &MoRef) -> Result<()> {
        self.call(&format!(
            "<HttpNfcLeaseComplete xmlns=\"urn:vim25\">{}</HttpNfcLeaseComplete>",
            lease.xml("_this")
        ))
        .map(|_| ())
    }

    /// HttpNfcLease.HttpNfcLeaseAbort.
    pub fn lease_abort(&mut self, lease: &MoRef) -> Result<()> {
        self.call(&format!(
            "<HttpNfcLeaseAbort xmlns=\"urn:vim25\">{}</HttpNfcLeaseAbort>",
            lease.xml("_this")
        ))
        .map(|_| ())
    }

    /// POST a streamOptimized VMDK to a lease device URL (as govmomi's
    /// `nfc.Lease.Upload` does for disks), `len` bytes from `body`.
    pub fn upload(&self, url: &str, len: u64, body: &mut dyn Read) -> Result<()> {
        let mut req = self
            .agent
            .post(url)
            .header("Content-Type", "application/x-vnd.vmware-streamVmdk")
            .header("Content-Length", len.to_string());
        if let Some(c) = &self.cookie {
            req = req.header("Cookie", c);
        }
        let t0 = std::time::Instant::now();
        let resp = req
            .send(ureq::SendBody::from_reader(body))
            .map_err(transport)?;
        let status = resp.status().as_u16();
        tracing::debug!(
            "vSphere upload POST {url}: HTTP {status}, {len} bytes in {:.1?}",
            t0.elapsed()
        );
        if !(200..300).contains(&status) {
            bail!("the disk upload was refused: HTTP {status}");
        }
        Ok(())
    }

    /// Wait for a Task: Ok on success, its fault's message otherwise.
    pub fn wait_task(&mut self, task: &MoRef) -> Result<()> {
        loop {
            let oc = self.retrieve(
                "Task",
                std::slice::from_ref(task),
                &["info.state", "info.error"],
            )?;
            let o = oc.first().ok_or_else(|| anyhow!("task {task} vanished"))?;
            match o.get("info.state").unwrap_or("") {
                "success" => return Ok(()),
                "error" => {
                    let raw = o.raw("info.error").unwrap_or("");
                    let msg = roxmltree::Document::parse(raw)
                        .ok()
                        .and_then(|d| {
                            find(d.root(), "localizedMessage")
                                .and_then(|m| m.text().map(String::from))
                        })
                        .unwrap_or_else(|| "no message".into());
                    bail!("{msg}");
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn task_call(&mut self, body: String) -> Result<()> {
        let r = self.call(&body)?;
        let task = {
            let doc = r.doc()?;
            find(doc.root(), "returnval")
                .map(moref)
                .ok_or_else(|| anyhow!("no task returned"))?
        };
        self.wait_task(&task)
    }

    /// VirtualMachine.ReconfigVM_Task: annotation, firmware and secure boot.
    pub fn reconfigure(
        &mut self,
        vm: &MoRef,
        annotation: &str,
        firmware: Option<&str>,
        secure_boot: Option<bool>,
    ) -> Result<()> {
        let mut spec = format!("<annotation>{}</annotation>", esc(annotation));
        if let Some(f) = firmware {
            spec.push_str(&format!("<firmware>{}</firmware>", esc(f)));
        }
        if let Some(sb) = secure_boot {
            spec.push_str(&format!(
                "<bootOptions><efiSecureBootEnabled>{sb}</efiSecureBootEnabled></bootOptions>"
            ));
        }
        self.task_call(format!(
            "<ReconfigVM_Task xmlns=\"urn:vim25\">{}<spec>{spec}</spec></ReconfigVM_Task>",
            vm.xml("_this")
        ))
    }

    /// ManagedEntity.Rename_Task.
    pub fn rename(&mut self, obj: &MoRef, name: &str) -> Result<()> {
        self.task_call(format!(
            "<Rename_Task xmlns=\"urn:vim25\">{}<newName>{}</newName></Rename_Task>",
            obj.xml("_this"),
            esc(name)
        ))
    }

    /// VirtualMachine.MarkAsTemplate.
    pub fn mark_as_template(&mut self, vm: &MoRef) -> Result<()> {
        self.call(&format!(
            "<MarkAsTemplate xmlns=\"urn:vim25\">{}</MarkAsTemplate>",
            vm.xml("_this")
        ))
        .map(|_| ())
    }

    /// ManagedEntity.Destroy_Task.
    pub fn destroy(&mut self, obj: &MoRef) -> Result<()> {
        self.task_call(format!(
            "<Destroy_Task xmlns=\"urn:vim25\">{}</Destroy_Task>",
            obj.xml("_this")
        ))
    }
}

/// What a ready lease says.
#[derive(Debug, Clone)]
pub struct LeaseInfo {
    pub entity: MoRef,
    pub devices: Vec<DeviceUrl>,
}

#[derive(Debug, Clone)]
pub struct DeviceUrl {
    pub import_key: String,
    pub url: String,
    pub disk: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_forms() {
        let e = Endpoint::parse("vc.example.com", false, None).unwrap();
        assert_eq!(e.sdk, "https://vc.example.com/sdk");
        let e = Endpoint::parse("https://127.0.0.1:8989/sdk", false, None).unwrap();
        assert_eq!(
            (e.sdk.as_str(), e.authority.as_str()),
            ("https://127.0.0.1:8989/sdk", "127.0.0.1:8989")
        );
        assert!(Endpoint::parse("https://u:p@vc/sdk", false, None)
            .unwrap_err()
            .to_string()
            .contains("GOVC_PASSWORD"));
        assert!(Endpoint::parse("http://vc/sdk", false, None).is_err());
        assert!(Endpoint::parse("", false, None).is_err());
    }

    #[test]
    fn escapes() {
        assert_eq!(esc("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&apos;");
        assert_eq!(
            MoRef::new("Folder", "g&1").xml("x"),
            "<x type=\"Folder\">g&amp;1</x>"
        );
    }
}
