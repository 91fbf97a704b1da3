//! PEM armour (RFC 7468) and the few DER shapes keys need: a
//! SubjectPublicKeyInfo (RFC 5280 §4.1) read and written, an RSA
//! modulus's size. In: PEM text or DER bytes; out: blocks, algorithms and
//! key bytes. Everything else about DER is ring's.
use anyhow::{bail, Result};
use base64::Engine;

/// `id-ecPublicKey` (1.2.840.10045.2.1), the OID's content bytes.
pub const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// `prime256v1` / P-256 (1.2.840.10045.3.1.7).
pub const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// `secp384r1` / P-384 (1.3.132.0.34).
pub const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
/// `rsaEncryption` (1.2.840.113549.1.1.1).
pub const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];

const SEQUENCE: u8 = 0x30;
const OID: u8 = 0x06;
const BIT_STRING: u8 = 0x03;
const INTEGER: u8 = 0x02;
const NULL: u8 = 0x05;

/// One PEM block: its label (`PUBLIC KEY`, ...) and decoded bytes.
pub struct Pem {
    pub label: String,
    pub der: Vec<u8>,
}

/// The first PEM block of `text`.
pub fn pem_decode(text: &[u8]) -> Result<Pem> {
    let text = String::from_utf8_lossy(text);
    let Some(start) = text.find("-----BEGIN ") else {
        bail!("no PEM block (-----BEGIN ...-----)");
    };
    let rest = &text[start + 11..];
    let Some(end_label) = rest.find("-----") else {
        bail!("a PEM BEGIN line without its closing dashes");
    };
    let label = rest[..end_label].to_string();
    let body = &rest[end_label + 5..];
    let end_line = format!("-----END {label}-----");
    let Some(end) = body.find(&end_line) else {
        bail!("PEM block {label} has no {end_line} line");
    };
    let b64: String = body[..end].chars().filter(|c| !c.is_whitespace()).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| anyhow::anyhow!("PEM block {label}: not base64 ({e})"))?;
    Ok(Pem { label, der })
}

/// `der` armoured as a PEM block `label`, 64 columns.
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut s = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        s.push_str(std::str::from_utf8(line).unwrap());
        s.push('\n');
    }
    s.push_str(&format!("-----END {label}-----\n"));
    s
}

/// One TLV off the front of `input`: (tag, value, rest). Definite lengths
/// only (DER).
fn tlv(input: &[u8]) -> Result<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("DER ends early"))?;
    let (&l0, mut rest) = rest
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("DER ends early"))?;
    let len = if l0 < 0x80 {
        l0 as usize
    } else {
        let n = (l0 & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            bail!("DER length not definite or too long");
        }
        let mut len = 0usize;
        for &b in &rest[..n] {
            len = len << 8 | b as usize;
        }
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        bail!("DER value runs past its end");
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

fn expect(input: &[u8], want: u8) -> Result<(&[u8], &[u8])> {
    let (tag, v, rest) = tlv(input)?;
    if tag != want {
        bail!("DER tag 0x{tag:02x} where 0x{want:02x} was expected");
    }
    Ok((v, rest))
}

/// A SubjectPublicKeyInfo's parts: the algorithm OID, its parameter (the
/// curve OID for EC; empty for RSA) and the key bits (the EC point, or
/// the RSAPublicKey DER).
pub struct Spki<'a> {
    pub algorithm: &'a [u8],
    pub parameter: &'a [u8],
    pub key: &'a [u8],
}

pub fn spki_parse(der: &[u8]) -> Result<Spki<'_>> {
    let (seq, trailing) = expect(der, SEQUENCE)?;
    if !trailing.is_empty() {
        bail!("bytes after the SubjectPublicKeyInfo");
    }
    let (alg, rest) = expect(seq, SEQUENCE)?;
    let (algorithm, params) = expect(alg, OID)?;
    let parameter = match tlv(params) {
        Ok((OID, v, _)) => v,
        _ => &[],
    };
    let (bits, _) = expect(rest, BIT_STRING)?;
    let Some((&0, key)) = bits.split_first() else {
        bail!("the public key BIT STRING has unused bits");
    };
    Ok(Spki {
        algorithm,
        parameter,
        key,
    })
}

fn push_tlv(out: &mut Vec<u8>, tag: u8, value: &[u8]) {
    out.push(tag);
    let n = value.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .into_iter()
            .skip_while(|&b| b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(value);
}

/// A SubjectPublicKeyInfo of `algorithm` (with the curve OID `parameter`,
/// or NULL when empty) over `key`.
pub fn spki_build(algorithm: &[u8], parameter: &[u8], key: &[u8]) -> Vec<u8> {
    let mut alg = Vec::new();
    push_tlv(&mut alg, OID, algorithm);
    if parameter.is_empty() {
        push_tlv(&mut alg, NULL, &[]);
    } else {
        push_tlv(&mut alg, OID, parameter);
    }
    let mut bits = vec![0u8];
    bits.extend_from_slice(key);
    let mut seq = Vec::new();
    push_tlv(&mut seq, SEQUENCE, &alg);
    push_tlv(&mut seq, BIT_STRING, &bits);
    let mut out = Vec::new();
    push_tlv(&mut out, SEQUENCE, &seq);
    out
}

/// The size in bits of an RSAPublicKey's modulus (RFC 8017 A.1.1).
pub fn rsa_modulus_bits(rsa_public_key: &[u8]) -> Result<usize> {
    let (seq, _) = expect(rsa_public_key, SEQUENCE)?;
    let (n, _) = expect(seq, INTEGER)?;
    let n: &[u8] = {
        let i = n.iter().position(|&b| b != 0).unwrap_or(n.len());
        &n[i..]
    };
    match n.first() {
        Some(&b) => Ok(n.len() * 8 - b.leading_zeros() as usize),
        None => bail!("an RSA modulus of zero"),
    }
}
