//! The OVF import calls of a [`Client`]: OvfManager.CreateImportSpec (the
//! OVF descriptor and placement in, the import spec's XML out),
//! ResourcePool.ImportVApp (the spec in, an HttpNfcLease out), the wait for
//! the lease to be ready ([`LeaseInfo`]: the new VM and its device URLs),
//! the lease's progress, complete and abort calls, and the POST of the
//! VMDK to a device URL.
use anyhow::{anyhow, bail, Result};
use std::io::Read;
use std::time::Duration;

use super::session::Client;
use super::tls;
use super::types::{moref, MoRef};
use crate::util::xml::{child_text, children, esc, find};

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
    /// The SHA-1 thumbprint vCenter gives for the certificate of the
    /// URL's host (an ESXi host), empty when it gives none.
    pub ssl_thumbprint: String,
}

/// The `host[:port]` of an `https://` URL.
fn url_authority(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("https://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some(&rest[..end]).filter(|a| !a.is_empty())
}

impl Client {
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
    /// device URLs (`*` replaced by the vCenter host), or its error. The
    /// hosts' `sslThumbprint`s become trusted for them (govmomi's
    /// `newLeaseInfo`: `SetThumbprint(u.Host, device.SslThumbprint)`).
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
            let ssl_thumbprint = child_text(d, "sslThumbprint").unwrap_or_default();
            if let (Some(trust), Some(host)) = (&self.trust, url_authority(&url)) {
                trust.pin_from_lease(host, &ssl_thumbprint);
            }
            devices.push(DeviceUrl {
                import_key: child_text(d, "importKey").unwrap_or_default(),
                url,
                disk: child_text(d, "disk").as_deref() == Some("true"),
                ssl_thumbprint,
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
            .map_err(tls::error)?;
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
}
