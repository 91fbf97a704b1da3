//! DSSE envelopes (secure-systems-lab/dsse `protocol.md`, `envelope.md`):
//! the signature is over PAE(payloadType, payload), the envelope JSON
//! `{"payloadType","payload","signatures":[{"keyid","sig"}]}` with base64
//! byte strings (cosign writes standard base64 and an empty keyid; a
//! verifier must take standard and URL-safe). In: a payload and a key, or
//! an envelope and keys; out: the envelope, or the payload that verified.
use super::keys::{PublicKey, SigningKey};
use anyhow::{bail, Result};
use base64::Engine;
use serde_json::{json, Value};

/// The Pre-Authentication Encoding: `"DSSEv1" SP LEN(type) SP type SP
/// LEN(body) SP body`, lengths in ASCII decimal.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// An envelope of `payload` signed by `key`.
pub fn dsse_sign(payload_type: &str, payload: &[u8], key: &SigningKey) -> Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    let sig = key.sign(&pae(payload_type, payload));
    json!({
        "payloadType": payload_type,
        "payload": b64.encode(payload),
        "signatures": [{"keyid": "", "sig": b64.encode(sig)}],
    })
}

/// Standard or URL-safe base64, padded or not (DSSE: verifiers take both).
pub(super) fn b64_any(s: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    [STANDARD, URL_SAFE, STANDARD_NO_PAD, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|e| e.decode(s).ok())
}

/// The payload of an envelope one of whose signatures verifies with one of
/// `keys`, and that key; the payload is the bytes verified, never
/// re-read from the envelope.
pub(super) fn open<'k>(
    envelope: &Value,
    keys: &'k [PublicKey],
) -> Result<(Vec<u8>, String, &'k PublicKey)> {
    let Some(payload_type) = envelope["payloadType"].as_str() else {
        bail!("a DSSE envelope without payloadType");
    };
    let Some(payload) = envelope["payload"].as_str().and_then(b64_any) else {
        bail!("a DSSE envelope without a base64 payload");
    };
    let sigs = envelope["signatures"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if sigs.is_empty() {
        bail!("a DSSE envelope without signatures");
    }
    let msg = pae(payload_type, &payload);
    for s in sigs {
        let Some(sig) = s["sig"].as_str().and_then(b64_any) else {
            continue;
        };
        if let Some(k) = keys.iter().find(|k| k.verify(&msg, &sig)) {
            return Ok((payload, payload_type.to_string(), k));
        }
    }
    bail!(
        "none of its {} DSSE signature(s) verifies with {}",
        sigs.len(),
        key_list(keys)
    )
}

/// The keys, for messages.
pub(super) fn key_list(keys: &[PublicKey]) -> String {
    match keys {
        [] => "no key (none given)".into(),
        [k] => k.describe(),
        ks => format!(
            "any of {}",
            ks.iter()
                .map(PublicKey::describe)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The payload of `envelope` when a signature verifies with one of `keys`.
pub fn dsse_verify(envelope: &Value, keys: &[PublicKey]) -> Result<Vec<u8>> {
    open(envelope, keys).map(|(p, _, _)| p)
}
