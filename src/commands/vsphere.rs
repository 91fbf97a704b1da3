//! `vsphere import`: settings from flags and govc's environment, the OVA
//! read, the import, then the cluster patches printed (and written).
use crate::cli::{VsphereCommand, VsphereImportArgs, VsphereTarget};
use crate::publish::vsphere::{self, patches, Outcome, Settings};
use anyhow::{anyhow, Result};
use std::path::Path;

pub fn run(c: VsphereCommand) -> Result<()> {
    match c {
        VsphereCommand::Import(a) => import(a),
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A govc boolean variable.
fn env_true(name: &str) -> bool {
    env(name).is_some_and(|v| truthy(&v))
}

/// govc's boolean: 1/true/yes.
fn truthy(v: &str) -> bool {
    matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes")
}

/// What a credentials file gives (`--credentials`), by govc's names.
#[derive(Debug, Default, PartialEq)]
pub struct FileCredentials {
    pub url: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub ca_file: Option<String>,
    pub known_hosts: Option<String>,
    pub insecure: Option<bool>,
}

/// A credentials file as vSphere admins keep them: govc's variables as
/// `NAME=value` lines (the file they source, `export` and quotes allowed),
/// or the cluster's own `vsphere-creds` Secret (`oc get secret -n
/// kube-system vsphere-creds -o yaml`: `<server>.username` and
/// `<server>.password`, base64 under `data` or plain under `stringData`,
/// as openshift-install writes it), whose server is GOVC_URL's host or,
/// with GOVC_URL unset, its only one. `url` is GOVC_URL from the
/// environment. Errors name the file and never print a value.
pub fn parse_credentials(text: &str, file: &str, url: Option<&str>) -> Result<FileCredentials> {
    let yaml: Option<serde_yaml_ng::Value> = serde_yaml_ng::from_str(text).ok();
    if let Some(y) = yaml.as_ref().filter(|y| y.get("kind").is_some()) {
        return secret_credentials(y, file, url);
    }
    let mut c = FileCredentials::default();
    for (n, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let l = l.strip_prefix("export ").unwrap_or(l).trim();
        let Some((k, v)) = l.split_once('=') else {
            anyhow::bail!(
                "{file} line {}: not NAME=value (a credentials file holds GOVC_URL, GOVC_USERNAME, GOVC_PASSWORD, GOVC_TLS_CA_CERTS, GOVC_TLS_KNOWN_HOSTS, GOVC_INSECURE lines, or is the cluster's vsphere-creds Secret)",
                n + 1
            );
        };
        let v = v.trim();
        let v = match (v.chars().next(), v.chars().last()) {
            (Some(a), Some(b)) if v.len() >= 2 && a == b && (a == '"' || a == '\'') => {
                &v[1..v.len() - 1]
            }
            _ => v,
        }
        .to_string();
        match k.trim() {
            "GOVC_URL" => c.url = Some(v),
            "GOVC_USERNAME" => c.username = Some(v),
            "GOVC_PASSWORD" => c.password = Some(v),
            "GOVC_TLS_CA_CERTS" => c.ca_file = Some(v),
            "GOVC_TLS_KNOWN_HOSTS" => c.known_hosts = Some(v),
            "GOVC_INSECURE" => c.insecure = Some(truthy(&v)),
            // Placement and other govc settings come from the flags and
            // the environment; a file of govc's may hold them too.
            _ => {}
        }
    }
    Ok(c)
}

/// The user and password of one vCenter from a `vsphere-creds` Secret.
fn secret_credentials(
    y: &serde_yaml_ng::Value,
    file: &str,
    url: Option<&str>,
) -> Result<FileCredentials> {
    use base64::Engine;
    if y.get("kind").and_then(|k| k.as_str()) != Some("Secret") {
        anyhow::bail!("{file} is a Kubernetes {:?}, not a Secret: give the cluster's vsphere-creds Secret (oc get secret -n kube-system vsphere-creds -o yaml) or a file of GOVC_* lines", y.get("kind").and_then(|k| k.as_str()).unwrap_or("object"));
    }
    let mut keys: std::collections::BTreeMap<String, String> = Default::default();
    for (field, b64) in [("data", true), ("stringData", false)] {
        let Some(m) = y.get(field).and_then(|m| m.as_mapping()) else {
            continue;
        };
        for (k, v) in m {
            let (Some(k), Some(v)) = (k.as_str(), v.as_str()) else {
                continue;
            };
            let v = match b64 {
                true => String::from_utf8(
                    base64::engine::general_purpose::STANDARD
                        .decode(v.trim())
                        .map_err(|_| anyhow!("{file}: data.{k} is not base64"))?,
                )
                .map_err(|_| anyhow!("{file}: data.{k} is not UTF-8 text"))?,
                false => v.to_string(),
            };
            keys.insert(k.to_string(), v);
        }
    }
    let servers: Vec<&str> = keys
        .keys()
        .filter_map(|k| k.strip_suffix(".username"))
        .collect();
    let host = url.map(|u| {
        let rest = u.split_once("://").map_or(u, |(_, r)| r);
        let hostport = rest.split('/').next().unwrap_or(rest);
        let hostport = hostport.rsplit_once('@').map_or(hostport, |(_, h)| h);
        hostport.to_string()
    });
    let server = match &host {
        Some(h) => servers
            .iter()
            .find(|s| *s == h || Some(**s) == h.rsplit_once(':').map(|(a, _)| a))
            .copied()
            .ok_or_else(|| {
                anyhow!(
                    "{file}: the Secret has no credentials for {h} (GOVC_URL's host); it has: {}",
                    if servers.is_empty() { "none".to_string() } else { servers.join(", ") }
                )
            })?,
        None => match servers.as_slice() {
            [one] => one,
            [] => anyhow::bail!("{file}: the Secret has no <server>.username key (the shape of kube-system/vsphere-creds)"),
            many => anyhow::bail!(
                "{file}: the Secret holds several vCenters ({}); set GOVC_URL=https://<one of them>/sdk",
                many.join(", ")
            ),
        },
    };
    let password = keys
        .get(&format!("{server}.password"))
        .cloned()
        .ok_or_else(|| {
            anyhow!("{file}: the Secret has {server}.username but no {server}.password")
        })?;
    Ok(FileCredentials {
        url: host.is_none().then(|| format!("https://{server}/sdk")),
        username: keys.get(&format!("{server}.username")).cloned(),
        password: Some(password),
        ca_file: None,
        known_hosts: None,
        insecure: None,
    })
}

/// `--credentials FILE`, read and parsed; a file others may read is said.
fn read_credentials_file(path: &Path) -> Result<FileCredentials> {
    use std::os::unix::fs::MetadataExt;
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| anyhow!("--credentials {file}: {e}"))?;
    if let Ok(m) = std::fs::metadata(path) {
        if m.mode() & 0o044 != 0 {
            crate::util::ui::status(format!(
                "vsphere: WARNING: {file} holds a password and others can read it (mode {:o}); chmod 600 {file}",
                m.mode() & 0o777
            ));
        }
    }
    parse_credentials(&text, &file, env("GOVC_URL").as_deref())
}

/// The settings: vCenter and credentials from `--credentials FILE` or
/// govc's environment names (a password is never a flag; the file's values
/// win over the environment), placement from the flags (which clap also
/// reads from GOVC_*).
pub fn settings(
    t: &VsphereTarget,
    name: &str,
    insecure: bool,
    release: Option<String>,
) -> Result<Settings> {
    let f = match &t.credentials {
        Some(p) => read_credentials_file(p)?,
        None => FileCredentials::default(),
    };
    let f_has_login = f.username.is_some() || f.password.is_some();
    let from = |what: &str| match &t.credentials {
        Some(p) => format!("{what} is neither in {} nor set", p.display()),
        None => format!("{what} is not set"),
    };
    let url = f.url.or_else(|| env("GOVC_URL")).ok_or_else(|| {
        anyhow!(
            "{}: export GOVC_URL=https://<vcenter>/sdk (and GOVC_USERNAME, GOVC_PASSWORD), or give them in --credentials FILE",
            from("GOVC_URL")
        )
    })?;
    let username = f.username.or_else(|| env("GOVC_USERNAME")).ok_or_else(|| {
        anyhow!(
            "{}: export the vCenter user (and GOVC_PASSWORD), or give them in --credentials FILE",
            from("GOVC_USERNAME")
        )
    })?;
    let password = f.password.or_else(|| env("GOVC_PASSWORD")).ok_or_else(|| {
        anyhow!(
            "{}: export the password of {username:?} or put it in --credentials FILE (it is never a flag)",
            from("GOVC_PASSWORD")
        )
    })?;
    let insecure = insecure || f.insecure.unwrap_or_else(|| env_true("GOVC_INSECURE"));
    let credentials_file = t.credentials.clone().filter(|_| f_has_login);
    if insecure {
        crate::util::ui::status(format!(
            "vsphere: WARNING: TLS verification of {url} is OFF (--insecure / GOVC_INSECURE)"
        ));
    }
    if name.trim().is_empty() || name.contains('/') {
        return Err(anyhow!(
            "template name {name:?} is empty or has a '/': give a plain --name"
        ));
    }
    Ok(Settings {
        url,
        username,
        password,
        credentials_file,
        insecure,
        ca_file: f
            .ca_file
            .or_else(|| env("GOVC_TLS_CA_CERTS"))
            .map(Into::into),
        known_hosts: f.known_hosts.or_else(|| env("GOVC_TLS_KNOWN_HOSTS")),
        datacenter: nonempty(&t.datacenter),
        datastore: nonempty(&t.datastore),
        resource_pool: nonempty(&t.resource_pool),
        folder: nonempty(&t.folder),
        network: nonempty(&t.network),
        disk_provisioning: t.disk_provisioning.clone(),
        name: name.into(),
        replace: t.replace,
        release,
    })
}

/// An empty flag or variable (`GOVC_FOLDER=`) means unset, as in govc.
fn nonempty(v: &Option<String>) -> Option<String> {
    v.clone().filter(|v| !v.trim().is_empty())
}

fn import(a: VsphereImportArgs) -> Result<()> {
    crate::util::cancel::install()?;
    let s = settings(&a.target, &a.name, a.insecure, None)?;
    import_ova(&s, &a.ova, &a.target)?;
    Ok(())
}

/// Import, then print (and write) the patches. Shared with `generate`.
pub fn import_ova(s: &Settings, ova: &Path, t: &VsphereTarget) -> Result<Outcome> {
    let o = vsphere::read_ova(ova)?;
    let version = patches::rhcos_version(
        &o.os_version,
        &format!("the OVF ProductSection Version of {}", ova.display()),
    )?;
    crate::util::ui::status(format!(
        "vsphere: importing {} (RHCOS {version}, disk {} MiB) into {} as template {:?}",
        ova.display(),
        o.disk_size >> 20,
        s.url,
        s.name
    ));
    let t0 = std::time::Instant::now();
    let out = vsphere::import(s, &o, &version)?;
    let how = if out.reused {
        "reused (same RHCOS version)".to_string()
    } else {
        format!(
            "{} ({} MiB in {:.1?})",
            if out.replaced { "replaced" } else { "imported" },
            out.uploaded >> 20,
            t0.elapsed()
        )
    };
    crate::util::ui::status(format!(
        "vsphere: template {} {how}: {} ({})",
        out.inventory_path, out.vm.value, out.rhcos_version
    ));
    print!(
        "{}",
        patches::commands(&out.name, &t.machinesets, &out.rhcos_version)
    );
    if let Some(dir) = &t.write_patches {
        for f in patches::write(dir, &out.name, &t.machinesets, &out.rhcos_version)? {
            crate::util::ui::status(format!("vsphere: wrote {}", f.display()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn govc_lines() {
        let c = parse_credentials(
            "# vc\nexport GOVC_URL=https://vc.example.com/sdk\nGOVC_USERNAME='admin@vsphere.local'\nGOVC_PASSWORD=\"p=ss word\"\nGOVC_INSECURE=1\nGOVC_DATASTORE=ds1\nGOVC_TLS_KNOWN_HOSTS=/etc/govc/known_hosts\n",
            "f",
            None,
        )
        .unwrap();
        assert_eq!(c.url.as_deref(), Some("https://vc.example.com/sdk"));
        assert_eq!(c.username.as_deref(), Some("admin@vsphere.local"));
        assert_eq!(c.password.as_deref(), Some("p=ss word"));
        assert_eq!(c.insecure, Some(true));
        assert_eq!(c.known_hosts.as_deref(), Some("/etc/govc/known_hosts"));
        let e = parse_credentials("GOVC_URL=x\nsecret\n", "creds", None).unwrap_err();
        assert!(e.to_string().contains("creds line 2"), "{e}");
        assert!(!e.to_string().contains("secret"), "{e}");
    }

    #[test]
    fn the_clusters_vsphere_creds_secret() {
        // openshift-install's shape: data.<server>.username/.password, base64.
        let s = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: vsphere-creds\n  namespace: kube-system\ndata:\n  vc1.example.com.username: YWRtaW4=\n  vc1.example.com.password: czNjcjN0\n  vc2.example.com.username: b3RoZXI=\n  vc2.example.com.password: eA==\n";
        let c = parse_credentials(s, "f", Some("https://vc1.example.com/sdk")).unwrap();
        assert_eq!(c.username.as_deref(), Some("admin"));
        assert_eq!(c.password.as_deref(), Some("s3cr3t"));
        assert_eq!(c.url, None);
        // Two vCenters and no GOVC_URL: which one is asked.
        let e = parse_credentials(s, "f", None).unwrap_err().to_string();
        assert!(
            e.contains("vc1.example.com, vc2.example.com") && e.contains("GOVC_URL"),
            "{e}"
        );
        let e = parse_credentials(s, "f", Some("https://vc9:443/sdk"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no credentials for vc9:443"), "{e}");
        // One vCenter, plain stringData, port in GOVC_URL.
        let one = "kind: Secret\nstringData:\n  127.0.0.1.username: u\n  127.0.0.1.password: p\n";
        let c = parse_credentials(one, "f", None).unwrap();
        assert_eq!(c.url.as_deref(), Some("https://127.0.0.1/sdk"));
        let c = parse_credentials(one, "f", Some("https://127.0.0.1:8989/sdk")).unwrap();
        assert_eq!(
            (c.username.as_deref(), c.password.as_deref()),
            (Some("u"), Some("p"))
        );
        let e = parse_credentials("kind: ConfigMap\n", "f", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a Secret"), "{e}");
    }
}
