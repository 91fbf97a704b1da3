//! The verification record: what was checked, what verified the release
//! (mechanism, key, keyring, where the signature was found), what was
//! refused and why, and what could not be read. In: the checks' results;
//! out: the console line, meta.json's one-line verdict and
//! `release-verification.json`.
use super::subject::Vendor;
use serde::Serialize;

/// The record's file beside meta.json.
pub const RECORD_FILE: &str = "release-verification.json";

/// One mechanism's success: which key, from where.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct By {
    /// `gpg` (atomic container signature) or `sigstore` (cosign).
    pub mechanism: &'static str,
    /// The digest the signature is over.
    pub digest: String,
    /// GPG fingerprint or cosign key id.
    pub key: String,
    /// The keyring (ConfigMap key) or key file it belongs to.
    pub keyring: String,
    /// Where the signature was found (store URL, file, tag).
    pub origin: String,
    /// The identity the signature names.
    pub signed_reference: String,
}

/// What was checked and what it gave.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Record {
    pub release: String,
    /// The digest the user's pull spec resolves to (the manifest list's,
    /// for a multi-arch payload) and the per-arch manifest's.
    pub digest: String,
    pub arch_digest: String,
    pub official: Option<Vendor>,
    /// Why verification was (or was not) required.
    pub policy: String,
    pub verified: bool,
    pub by: Vec<By>,
    /// Signatures found and refused, each with why.
    pub refused: Vec<String>,
    /// Stores that could not be read, and other notes.
    pub warnings: Vec<String>,
    /// The OS image's own sigstore signature, when it has one.
    pub os: Option<String>,
}

impl Record {
    /// One line for the console and meta.json's `release-payload.comment`.
    pub fn summary(&self) -> String {
        if !self.verified {
            return format!("signature not verified ({})", self.policy);
        }
        let by: Vec<String> = self
            .by
            .iter()
            .map(|b| {
                format!(
                    "{} key {} ({}) over {}",
                    b.mechanism,
                    b.key,
                    b.keyring,
                    short(&b.digest)
                )
            })
            .collect();
        format!("signature verified: {}", by.join("; "))
    }
}

impl Record {
    /// [`Record::summary`] with where each signature was found and the
    /// warnings: what the run says on the console.
    pub fn console(&self) -> String {
        let mut s = self.summary();
        let from: Vec<&str> = self.by.iter().map(|b| b.origin.as_str()).collect();
        if !from.is_empty() {
            s.push_str(&format!(", from {}", from.join(" and ")));
        }
        if let Some(os) = &self.os {
            s.push_str(&format!("; OS image: {os}"));
        }
        s
    }
}

/// First 12 hex digits of a digest.
pub fn short(d: &str) -> String {
    d.trim_start_matches("sha256:").chars().take(12).collect()
}
