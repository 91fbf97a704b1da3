//! in-toto Statement v1 (in-toto/attestation `spec/v1/statement.md`) with a
//! SLSA provenance v1 predicate (`https://slsa.dev/provenance/v1`:
//! buildDefinition {buildType, externalParameters, resolvedDependencies},
//! runDetails {builder {id, version}, metadata}). In: the subjects (name,
//! sha256), the resolved dependencies (uri, digest), the builder id and
//! the build's parameters; out: the statement as JSON.
use serde_json::{json, Map, Value};

/// in-toto Statement v1's `_type`.
pub const STATEMENT_V1: &str = "https://in-toto.io/Statement/v1";
/// SLSA provenance v1's predicate type.
pub const SLSA_PROVENANCE_V1: &str = "https://slsa.dev/provenance/v1";
/// Our `buildType`: what `externalParameters` mean (a `generate` run).
pub const SLSA_BUILD_TYPE: &str = "urn:bootimage-gen:build-type:generate:v1";

/// `{"sha256": hex}` (or `{alg: hex}`) from "sha256:hex" or a bare hex
/// SHA-256.
fn digest_set(d: &str) -> Value {
    let (alg, hex) = d.split_once(':').unwrap_or(("sha256", d));
    let mut m = Map::new();
    m.insert(alg.to_string(), Value::String(hex.to_string()));
    Value::Object(m)
}

/// A statement whose subjects are `subjects` (name, sha256) with a SLSA
/// provenance v1 predicate: `deps` (uri, digest) as resolvedDependencies,
/// `builder_id` as runDetails.builder.id with this tool's version, and
/// `external_parameters` as given.
pub fn slsa_provenance(
    subjects: &[(String, String)],
    deps: &[(String, String)],
    builder_id: &str,
    external_parameters: Value,
) -> Value {
    json!({
        "_type": STATEMENT_V1,
        "subject": subjects
            .iter()
            .map(|(name, d)| json!({"name": name, "digest": digest_set(d)}))
            .collect::<Vec<_>>(),
        "predicateType": SLSA_PROVENANCE_V1,
        "predicate": {
            "buildDefinition": {
                "buildType": SLSA_BUILD_TYPE,
                "externalParameters": external_parameters,
                "resolvedDependencies": deps
                    .iter()
                    .map(|(uri, d)| json!({"uri": uri, "digest": digest_set(d)}))
                    .collect::<Vec<_>>(),
            },
            "runDetails": {
                "builder": {
                    "id": builder_id,
                    "version": {"bootimage-gen": env!("CARGO_PKG_VERSION")},
                },
                "metadata": {},
            },
        },
    })
}
