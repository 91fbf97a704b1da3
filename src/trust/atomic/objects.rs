//! The Kubernetes objects this module reads, as YAML or JSON: ConfigMaps
//! (`data`, `binaryData`) and Lists of them (`kind: List`, `items`, as
//! `oc get configmap -o yaml` prints several). Only the fields we use are
//! decoded, so repeated keys elsewhere (cluster-update-keys' RHEL manifest
//! says `metadata.namespace` twice) do not matter.
//! In: a file's bytes. Out: its objects.
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Deserialize)]
pub(super) struct Object {
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: Option<Meta>,
    #[serde(default)]
    pub data: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default, rename = "binaryData")]
    pub binary_data: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default)]
    pub items: Option<Vec<Object>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Meta {
    #[serde(default)]
    pub name: Option<String>,
}

impl Object {
    pub fn kind(&self) -> &str {
        self.kind.as_deref().unwrap_or("")
    }
    pub fn name(&self) -> &str {
        self.metadata
            .as_ref()
            .and_then(|m| m.name.as_deref())
            .unwrap_or("(unnamed)")
    }
}

/// The objects of a JSON document or of a (multi-document) YAML stream;
/// empty YAML documents are skipped.
pub(super) fn parse(bytes: &[u8]) -> Result<Vec<Object>, String> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{') {
        return serde_json::from_slice::<Object>(bytes)
            .map(|o| vec![o])
            .map_err(|e| format!("not a valid JSON object: {e}"));
    }
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_slice(bytes) {
        match Option::<Object>::deserialize(doc) {
            Ok(Some(o)) => out.push(o),
            Ok(None) => {}
            Err(e) => return Err(format!("not valid YAML or JSON: {e}")),
        }
    }
    Ok(out)
}
