//! What the imported OS says about itself ([`OsInfo`]): its kernel, version,
//! osname, os-release and bootimage configuration, read from the imported
//! commit. In: the cache repo and the [`ImportRecord`]; out: [`OsInfo`].
use super::cache::ImportRecord;
use super::config::{self as osconfig, OsBootConfig};
use super::format::{is_checksum, OsFormat, LABEL_OSNAME, LABEL_OSTREE_COMMIT};
use super::repo::Repo;
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;

/// What the imported OS says about itself.
#[derive(Debug, Clone, Serialize)]
pub struct OsInfo {
    /// The commit deployed: the import's (for ostree-native images,
    /// ostree-ext's merge commit, which differs per import).
    pub commit: String,
    /// The OS's own commit, the same whatever the cache holds: the image's
    /// `ostree.commit` label, else the import's base commit (ostree-native);
    /// the verified commit of a legacy image.
    pub image_commit: String,
    pub version: String,
    pub timestamp: i64,
    pub kernel_version: String,
    pub osname: String,
    /// Where `osname` came from (label, commit metadata or os-release).
    pub osname_source: String,
    pub os_release: BTreeMap<String, String>,
    pub config: OsBootConfig,
}

/// Parse os-release text.
pub fn parse_os_release(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            if l.starts_with('#') {
                return None;
            }
            let (k, v) = l.split_once('=')?;
            Some((
                k.to_string(),
                v.trim_matches(|c| c == '"' || c == '\'').to_string(),
            ))
        })
        .collect()
}

/// Read the OS's identity and configuration from the imported commit.
pub fn read_os_info(repo: &Repo, rec: &ImportRecord) -> Result<OsInfo> {
    let c = &rec.commit;
    let what = &rec.image;
    let mods = repo.list_dir(c, "/usr/lib/modules")?.ok_or_else(|| {
        anyhow!("OS image {what} has no /usr/lib/modules: it is not a bootable OS (no kernel)")
    })?;
    let mut kernels = Vec::new();
    for (_, name) in mods.iter().filter(|(is_dir, _)| *is_dir) {
        if repo
            .read_file(c, &format!("/usr/lib/modules/{name}/vmlinuz"))?
            .is_some()
        {
            kernels.push(name.clone());
        }
    }
    let kernel_version = match kernels.len() {
        0 => bail!("OS image {what} has no kernel: no /usr/lib/modules/<version>/vmlinuz"),
        1 => kernels.remove(0),
        _ => bail!(
            "OS image {what} has {} kernels in /usr/lib/modules ({}); expected one",
            kernels.len(),
            kernels.join(", ")
        ),
    };
    let os_release = repo
        .read_file(c, "/usr/lib/os-release")?
        .or(repo.read_file(c, "/usr/etc/os-release")?)
        .map(|b| parse_os_release(&String::from_utf8_lossy(&b)))
        .unwrap_or_default();
    let version = repo
        .metadata_string(c, "version")?
        .or_else(|| rec.labels.get("org.opencontainers.image.version").cloned())
        .or_else(|| rec.labels.get("version").cloned())
        .or_else(|| os_release.get("OSTREE_VERSION").cloned())
        .ok_or_else(|| anyhow!("OS image {what}: cannot tell its version (no 'version' in the commit metadata or labels)"))?;
    let (osname, osname_source) = if let Some(n) = rec.labels.get(LABEL_OSNAME) {
        (n.clone(), format!("label {LABEL_OSNAME}"))
    } else if let Some(n) = repo.metadata_string(c, "coreos-assembler.osname")? {
        (n, "commit metadata coreos-assembler.osname".into())
    } else if let Some(n) = os_release.get("ID") {
        (n.clone(), "os-release ID".into())
    } else {
        bail!("OS image {what}: cannot tell its osname (no {LABEL_OSNAME} label and no os-release ID)")
    };
    if osname.is_empty() || osname.contains('/') || osname.contains(char::is_whitespace) {
        bail!("OS image {what}: osname '{osname}' is not usable as an ostree stateroot");
    }
    let image_json = repo.read_file(c, osconfig::IMAGE_JSON)?;
    let platforms_json = repo.read_file(c, osconfig::PLATFORMS_JSON)?;
    let has_live = repo
        .list_dir(c, osconfig::LIVE_DIR)?
        .is_some_and(|v| !v.is_empty());
    let config = OsBootConfig::from_files(
        image_json.as_deref(),
        platforms_json.as_deref(),
        rec.bootimage_json.as_deref().map(str::as_bytes),
        has_live,
    )
    .with_context(|| format!("bootimage configuration of OS image {what}"))?;
    let image_commit = match rec.format {
        OsFormat::Legacy => c.clone(),
        OsFormat::OstreeNative => rec
            .labels
            .get(LABEL_OSTREE_COMMIT)
            .filter(|x| is_checksum(x))
            .or(rec.base_commit.as_ref())
            .unwrap_or(c)
            .clone(),
    };
    Ok(OsInfo {
        commit: c.clone(),
        image_commit,
        version,
        timestamp: repo.timestamp(c)?,
        kernel_version,
        osname,
        osname_source,
        os_release,
        config,
    })
}
