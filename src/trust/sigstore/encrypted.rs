//! cosign's encrypted private key (go-securesystemslib `encrypted`, which
//! cosign's `pkg/cosign/keys.go` calls): the PEM body is JSON,
//! `{"kdf":{"name":"scrypt","params":{"N","r","p"},"salt"},"cipher":{"name":
//! "nacl/secretbox","nonce"},"ciphertext"}` (byte strings base64), the key
//! scrypt(password, salt, N, r, p, 32) and the plaintext PKCS#8 DER. In:
//! the PEM body and the password; out: the PKCS#8 DER, or which of
//! "wrong password" and "not this format" it was.
use anyhow::{anyhow, Result};
use base64::Engine;
use crypto_secretbox::aead::{Aead, KeyInit};
use crypto_secretbox::{Key, Nonce, XSalsa20Poly1305};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{json, Value};

/// The scrypt parameters go-securesystemslib accepts (`CheckParams`:
/// legacy N=2^15, standard N=2^16 (what it writes now), OWASP N=2^17;
/// r=8, p=1): a file cannot make us spend more memory than that.
const ACCEPTED_LOG_N: [u8; 3] = [15, 16, 17];
const WRITE_LOG_N: u8 = 16;
const SALT_LEN: usize = 32;
const NONCE_LEN: usize = 24;
const KEY_LEN: usize = 32;

pub enum OpenError {
    WrongPassword,
    Format(String),
}

fn b64(v: &Value, what: &str) -> Result<Vec<u8>, OpenError> {
    let s = v
        .as_str()
        .ok_or_else(|| OpenError::Format(format!("no {what}")))?;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| OpenError::Format(format!("{what} is not base64: {e}")))
}

fn derive(password: &[u8], salt: &[u8], log_n: u8) -> Result<[u8; KEY_LEN]> {
    let params = scrypt::Params::new(log_n, 8, 1, KEY_LEN).map_err(|e| anyhow!("scrypt: {e}"))?;
    let mut key = [0u8; KEY_LEN];
    scrypt::scrypt(password, salt, &params, &mut key).map_err(|e| anyhow!("scrypt: {e}"))?;
    Ok(key)
}

/// The PKCS#8 DER inside an encrypted key's PEM body.
pub fn open(body: &[u8], password: &[u8]) -> Result<Vec<u8>, OpenError> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| OpenError::Format(format!("not JSON: {e}")))?;
    let kdf = &v["kdf"];
    if kdf["name"] != "scrypt" {
        return Err(OpenError::Format(format!(
            "KDF {} (not scrypt)",
            kdf["name"]
        )));
    }
    let p = &kdf["params"];
    let (n, r, pp) = (p["N"].as_u64(), p["r"].as_u64(), p["p"].as_u64());
    let log_n = match (n, r, pp) {
        (Some(n), Some(8), Some(1))
            if n.is_power_of_two() && ACCEPTED_LOG_N.contains(&(n.trailing_zeros() as u8)) =>
        {
            n.trailing_zeros() as u8
        }
        _ => {
            return Err(OpenError::Format(format!(
            "unsupported scrypt parameters {p} (go-securesystemslib takes N 2^15..2^17, r 8, p 1)"
        )))
        }
    };
    if v["cipher"]["name"] != "nacl/secretbox" {
        return Err(OpenError::Format(format!(
            "cipher {} (not nacl/secretbox)",
            v["cipher"]["name"]
        )));
    }
    let salt = b64(&kdf["salt"], "salt")?;
    let nonce = b64(&v["cipher"]["nonce"], "nonce")?;
    if nonce.len() != NONCE_LEN {
        return Err(OpenError::Format(format!(
            "a nonce of {} bytes",
            nonce.len()
        )));
    }
    let ciphertext = b64(&v["ciphertext"], "ciphertext")?;
    let key = derive(password, &salt, log_n).map_err(|e| OpenError::Format(e.to_string()))?;
    XSalsa20Poly1305::new(Key::from_slice(&key))
        .decrypt(Nonce::from_slice(&nonce), ciphertext.as_slice())
        .map_err(|_| OpenError::WrongPassword)
}

/// `plaintext` sealed with `password` as go-securesystemslib's `Encrypt`
/// does (standard scrypt parameters, fresh salt and nonce): the JSON body.
pub fn seal(plaintext: &[u8], password: &[u8]) -> Result<Vec<u8>> {
    let rng = SystemRandom::new();
    let mut salt = [0u8; SALT_LEN];
    let mut nonce = [0u8; NONCE_LEN];
    rng.fill(&mut salt)
        .and_then(|()| rng.fill(&mut nonce))
        .map_err(|_| anyhow!("sealing a private key: no randomness"))?;
    let key = derive(password, &salt, WRITE_LOG_N)?;
    let ciphertext = XSalsa20Poly1305::new(Key::from_slice(&key))
        .encrypt(Nonce::from_slice(&nonce), plaintext)
        .map_err(|_| anyhow!("sealing a private key"))?;
    let e = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let v = json!({
        "kdf": {"name": "scrypt", "params": {"N": 1u64 << WRITE_LOG_N, "r": 8, "p": 1}, "salt": e(&salt)},
        "cipher": {"name": "nacl/secretbox", "nonce": e(&nonce)},
        "ciphertext": e(&ciphertext),
    });
    Ok(serde_json::to_vec(&v)?)
}
