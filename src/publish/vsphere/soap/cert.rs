//! What a TLS refusal says about a server certificate, read from its DER
//! by hand (no X.509 crate in the tree; rustls/webpki keep theirs
//! private): the subject and issuer as Go's `pkix.Name.String()` writes
//! them (`CN=…,O=…`, last RDN first), whether it is self-issued, its
//! validity period, whether its extended key usage allows server
//! authentication, the size of an RSA key, and govc's thumbprints (the
//! SHA-1, or SHA-256, of the DER as upper-case hex pairs joined by `:`,
//! govmomi `vim25/soap/client.go` `ThumbprintSHA1`).
//!
//! Only reads; anything it cannot make out is said as such (`?`) rather
//! than failing: the trust decision is never taken on these fields alone
//! except the validity period and key usage of a certificate trusted as
//! itself (the one case webpki does not check for us).

/// The parts of a certificate the trust code and its messages use.
#[derive(Debug, Clone)]
pub struct CertInfo {
    pub subject: String,
    pub issuer: String,
    /// Subject and issuer are the same name (self-signed, as lab vCenters
    /// and ESXi hosts ship).
    pub self_issued: bool,
    /// Seconds since the epoch.
    pub not_before: Option<i64>,
    pub not_after: Option<i64>,
    /// No extended key usage, or one that allows TLS server authentication
    /// (or any purpose).
    pub server_auth: bool,
    /// The modulus size of an RSA key, in bits.
    pub rsa_bits: Option<usize>,
    /// govc's SHA-1 thumbprint.
    pub sha1: String,
    /// The SHA-256 thumbprint, which newer govmomi also accepts.
    pub sha256: String,
}

/// `AB:CD:…` of a digest.
fn colon_hex(d: &[u8]) -> String {
    d.iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// govc's thumbprint of a DER certificate: SHA-1, upper-case hex pairs
/// joined by `:`.
pub fn thumbprint_sha1(der: &[u8]) -> String {
    colon_hex(ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, der).as_ref())
}

/// A thumbprint as written by a person or a server: hex digits only,
/// upper case (`ab:cd` and `ABCD` are the same thumbprint).
pub fn normalize_thumbprint(t: &str) -> String {
    t.chars()
        .filter(|c| c.is_ascii_hexdigit())
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

/// One DER element: its tag and contents.
#[derive(Clone, Copy)]
struct Tlv<'a> {
    tag: u8,
    body: &'a [u8],
}

/// The DER elements of `b`, one after another.
struct Elements<'a> {
    b: &'a [u8],
}

impl<'a> Iterator for Elements<'a> {
    type Item = Tlv<'a>;
    fn next(&mut self) -> Option<Tlv<'a>> {
        let b = self.b;
        if b.len() < 2 {
            return None;
        }
        let tag = b[0];
        let (len, head) = match b[1] {
            l if l < 0x80 => (l as usize, 2),
            0x81..=0x84 => {
                let n = (b[1] & 0x7f) as usize;
                if b.len() < 2 + n {
                    return None;
                }
                let len = b[2..2 + n]
                    .iter()
                    .fold(0usize, |a, &x| (a << 8) | x as usize);
                (len, 2 + n)
            }
            _ => return None,
        };
        let end = head.checked_add(len)?;
        if end > b.len() {
            return None;
        }
        self.b = &b[end..];
        Some(Tlv {
            tag,
            body: &b[head..end],
        })
    }
}

fn elements(b: &[u8]) -> Elements<'_> {
    Elements { b }
}

/// The first element of `b`, if it has tag `tag`.
fn first(b: &[u8], tag: u8) -> Option<Tlv<'_>> {
    elements(b).next().filter(|t| t.tag == tag)
}

const SEQ: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;

/// Attribute names of a distinguished name, as Go's `pkix` writes them.
fn attribute_name(oid: &[u8]) -> Option<&'static str> {
    Some(match oid {
        [0x55, 0x04, 0x03] => "CN",
        [0x55, 0x04, 0x05] => "SERIALNUMBER",
        [0x55, 0x04, 0x06] => "C",
        [0x55, 0x04, 0x07] => "L",
        [0x55, 0x04, 0x08] => "ST",
        [0x55, 0x04, 0x09] => "STREET",
        [0x55, 0x04, 0x0a] => "O",
        [0x55, 0x04, 0x0b] => "OU",
        [0x55, 0x04, 0x11] => "POSTALCODE",
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01] => "emailAddress",
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => "DC",
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => "UID",
        _ => return None,
    })
}

/// An OID in dotted form (for attributes without a short name).
fn dotted(oid: &[u8]) -> String {
    let mut parts: Vec<u64> = Vec::new();
    let mut v: u64 = 0;
    for &b in oid {
        v = (v << 7) | (b & 0x7f) as u64;
        if b & 0x80 == 0 {
            if parts.is_empty() {
                let first = (v / 40).min(2);
                parts.push(first);
                parts.push(v - first * 40);
            } else {
                parts.push(v);
            }
            v = 0;
        }
    }
    parts
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

/// A directory string's text.
fn string_value(t: Tlv<'_>) -> String {
    match t.tag {
        // UTF8String, PrintableString, T61String, IA5String, VisibleString
        0x0c | 0x13 | 0x14 | 0x16 | 0x1a => String::from_utf8_lossy(t.body).into_owned(),
        // BMPString
        0x1e => {
            let u: Vec<u16> = t
                .body
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16_lossy(&u)
        }
        _ => format!("#{}", hex::encode(t.body)),
    }
}

/// A Name (SEQUENCE OF RDN) as `CN=x,O=y`: the last RDN first, the
/// values of a multi-valued RDN joined by `+`, as Go writes it.
fn name(seq_body: &[u8]) -> String {
    let mut rdns = Vec::new();
    for rdn in elements(seq_body).filter(|t| t.tag == SET) {
        let mut atvs = Vec::new();
        for atv in elements(rdn.body).filter(|t| t.tag == SEQ) {
            let mut it = elements(atv.body);
            let (Some(oid), Some(val)) = (it.next(), it.next()) else {
                continue;
            };
            let key = attribute_name(oid.body)
                .map(str::to_string)
                .unwrap_or_else(|| dotted(oid.body));
            atvs.push(format!("{key}={}", string_value(val)));
        }
        rdns.push(atvs.join("+"));
    }
    rdns.reverse();
    if rdns.is_empty() {
        "(empty)".into()
    } else {
        rdns.join(",")
    }
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// A UTCTime or GeneralizedTime (`Z` form, as DER requires) in seconds.
fn time(t: Tlv<'_>) -> Option<i64> {
    let s = std::str::from_utf8(t.body).ok()?.strip_suffix('Z')?;
    let (year, rest) = match t.tag {
        0x17 if s.len() == 12 => {
            let yy: i64 = s[..2].parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &s[2..])
        }
        0x18 if s.len() == 14 => (s[..4].parse().ok()?, &s[4..]),
        _ => return None,
    };
    let n = |i: usize| rest.get(i..i + 2).and_then(|x| x.parse::<i64>().ok());
    let (mo, d, h, mi, se) = (n(0)?, n(2)?, n(4)?, n(6)?, n(8)?);
    Some(days_from_civil(year, mo, d) * 86400 + h * 3600 + mi * 60 + se)
}

/// Seconds since the epoch as `2084-01-29 16:00:00 UTC`.
pub fn utc(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| format!("{secs} s after the epoch"))
}

const EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];
const ANY_EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25, 0x00];
const SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
const RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];

/// Whether the extensions allow server authentication (true without an
/// extended key usage extension).
fn allows_server_auth(exts: &[u8]) -> bool {
    for ext in elements(exts).filter(|t| t.tag == SEQ) {
        let mut it = elements(ext.body);
        let Some(oid) = it.next() else { continue };
        if oid.tag != OID || oid.body != EXT_KEY_USAGE {
            continue;
        }
        // [critical BOOLEAN] then the OCTET STRING holding the value.
        let Some(value) = it.find(|t| t.tag == 0x04) else {
            return false;
        };
        let Some(usages) = first(value.body, SEQ) else {
            return false;
        };
        return elements(usages.body)
            .any(|u| u.tag == OID && (u.body == SERVER_AUTH || u.body == ANY_EXT_KEY_USAGE));
    }
    true
}

/// The modulus size of an RSA SubjectPublicKeyInfo.
fn rsa_bits(spki: &[u8]) -> Option<usize> {
    let mut it = elements(spki);
    let alg = it.next().filter(|t| t.tag == SEQ)?;
    if first(alg.body, OID)?.body != RSA_ENCRYPTION {
        return None;
    }
    let bits = it.next().filter(|t| t.tag == 0x03)?;
    let key = first(bits.body.get(1..)?, SEQ)?;
    let n = first(key.body, 0x02)?.body;
    let n = match n.iter().position(|&b| b != 0) {
        Some(i) => &n[i..],
        None => return Some(0),
    };
    Some(n.len() * 8 - n[0].leading_zeros() as usize)
}

impl CertInfo {
    /// Read a DER certificate; fields it cannot make out are `?`.
    pub fn parse(der: &[u8]) -> CertInfo {
        let sha256 = colon_hex(ring::digest::digest(&ring::digest::SHA256, der).as_ref());
        let mut info = CertInfo {
            subject: "?".into(),
            issuer: "?".into(),
            self_issued: false,
            not_before: None,
            not_after: None,
            server_auth: true,
            rsa_bits: None,
            sha1: thumbprint_sha1(der),
            sha256,
        };
        let Some(tbs) = first(der, SEQ).and_then(|c| first(c.body, SEQ)) else {
            return info;
        };
        let mut it = elements(tbs.body).peekable();
        // [0] version, then serialNumber and the signature algorithm.
        if it.peek().is_some_and(|t| t.tag == 0xa0) {
            it.next();
        }
        let (Some(_serial), Some(_alg), Some(issuer), Some(validity), Some(subject), Some(spki)) = (
            it.next(),
            it.next(),
            it.next(),
            it.next(),
            it.next(),
            it.next(),
        ) else {
            return info;
        };
        info.issuer = name(issuer.body);
        info.subject = name(subject.body);
        info.self_issued = issuer.body == subject.body;
        let mut v = elements(validity.body);
        info.not_before = v.next().and_then(time);
        info.not_after = v.next().and_then(time);
        info.rsa_bits = rsa_bits(spki.body);
        if let Some(exts) = it.find(|t| t.tag == 0xa3) {
            if let Some(seq) = first(exts.body, SEQ) {
                info.server_auth = allows_server_auth(seq.body);
            }
        }
        info
    }

    /// Whether the certificate carries `thumbprint` (SHA-1 or SHA-256, in
    /// any case, with or without `:`).
    pub fn has_thumbprint(&self, thumbprint: &str) -> bool {
        let t = normalize_thumbprint(thumbprint);
        !t.is_empty()
            && (t == normalize_thumbprint(&self.sha1) || t == normalize_thumbprint(&self.sha256))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_days_and_times() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11017);
        assert_eq!(
            time(Tlv {
                tag: 0x17,
                body: b"700101000000Z"
            }),
            Some(0)
        );
        assert_eq!(
            time(Tlv {
                tag: 0x18,
                body: b"20840129160000Z"
            }),
            Some(3600000000)
        );
        assert_eq!(utc(3600000000), "2084-01-29 16:00:00 UTC");
    }

    #[test]
    fn thumbprints() {
        assert_eq!(
            thumbprint_sha1(b"abc"),
            "A9:99:3E:36:47:06:81:6A:BA:3E:25:71:78:50:C2:6C:9C:D0:D8:9D"
        );
        assert_eq!(normalize_thumbprint("a9:99:3e"), "A9993E");
        assert_eq!(dotted(&[0x55, 0x04, 0x2a]), "2.5.4.42");
    }
}
