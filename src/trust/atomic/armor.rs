//! A keyring made binary for `gpgv`: the ASCII armor (RFC 4880 §6) of a
//! `PGP PUBLIC KEY BLOCK` undone, its CRC24 checked when present; a binary
//! keyring passes through, as upstream reads both
//! (library-go `pkg/verify/configmap.go` `loadArmoredOrUnarmoredGPGKeyRing`).
//! Like upstream's `openpgp.ReadArmoredKeyRing`, only the FIRST armored block
//! is read.
//! In: the keyring's bytes and its name. Out: the binary keyring.
use anyhow::{bail, Result};
use base64::Engine;

const BEGIN: &str = "-----BEGIN PGP PUBLIC KEY BLOCK-----";
const END: &str = "-----END PGP PUBLIC KEY BLOCK-----";
/// RFC 4880 §6.1: CRC24 initial value and generator.
const CRC24_INIT: u32 = 0x00B7_04CE;
const CRC24_POLY: u32 = 0x0186_4CFB;
/// RFC 4880 §4.3: packet tag of a public key.
const TAG_PUBLIC_KEY: u8 = 6;

/// The binary form of the keyring `name`, or one line saying why it is none.
pub(super) fn binary_keyring(bytes: &[u8], name: &str) -> Result<Vec<u8>> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    let bin = match first {
        None => bail!("keyring {name} is empty: give an armored OpenPGP public key block"),
        Some(b) if b & 0x80 != 0 => bytes.to_vec(),
        Some(_) => dearmor(bytes, name)?,
    };
    match packet_tag(&bin) {
        Some(TAG_PUBLIC_KEY) => Ok(bin),
        Some(t) => bail!(
            "keyring {name} starts with an OpenPGP packet of tag {t}, not a public key (6): export it with `gpg --export --armor FINGERPRINT`"
        ),
        None => bail!("keyring {name} is not OpenPGP data: export it with `gpg --export --armor FINGERPRINT`"),
    }
}

/// The tag of the first packet (RFC 4880 §4.2: old and new formats).
pub(super) fn packet_tag(bin: &[u8]) -> Option<u8> {
    let b = *bin.first()?;
    if b & 0x80 == 0 {
        return None;
    }
    Some(if b & 0x40 != 0 {
        b & 0x3F
    } else {
        (b >> 2) & 0x0F
    })
}

fn dearmor(bytes: &[u8], name: &str) -> Result<Vec<u8>> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.lines().map(str::trim);
    if !lines.by_ref().any(|l| l == BEGIN) {
        if let Some(other) = text
            .lines()
            .find(|l| l.trim().starts_with("-----BEGIN PGP "))
        {
            bail!(
                "keyring {name} holds `{}`, not a PGP PUBLIC KEY BLOCK: export the public key with `gpg --export --armor FINGERPRINT`",
                other.trim()
            );
        }
        bail!("keyring {name} is neither an armored PGP PUBLIC KEY BLOCK nor a binary keyring: export it with `gpg --export --armor FINGERPRINT`");
    }
    // Armor headers ("Comment: …") end at the first blank line; a body line
    // straight after BEGIN is taken as the body (GnuPG is as lenient).
    let mut body = String::new();
    let mut in_headers = true;
    let mut crc = None;
    let mut ended = false;
    for l in lines {
        if in_headers {
            if l.is_empty() || l.contains(": ") {
                in_headers = !l.is_empty();
                continue;
            }
            in_headers = false;
        }
        if l == END {
            ended = true;
            break;
        }
        if let Some(sum) = l.strip_prefix('=').filter(|s| s.len() == 4) {
            crc = Some(sum.to_string());
            continue;
        }
        body.push_str(l);
    }
    if !ended {
        bail!("keyring {name}: the armored block has no `{END}` line: paste the whole block");
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let Ok(bin) = b64.decode(body.as_bytes()) else {
        bail!("keyring {name}: the armored block is not valid base64: paste it again unchanged");
    };
    if let Some(sum) = crc {
        let want = b64.decode(sum.as_bytes()).ok().filter(|s| s.len() == 3);
        let got = crc24(&bin).to_be_bytes();
        if want.as_deref() != Some(&got[1..]) {
            bail!("keyring {name}: the armor checksum (CRC24) does not match: the block was changed; paste it again unchanged");
        }
    }
    Ok(bin)
}

fn crc24(data: &[u8]) -> u32 {
    let mut crc = CRC24_INIT;
    for &b in data {
        crc ^= u32::from(b) << 16;
        for _ in 0..8 {
            crc <<= 1;
            if crc & 0x0100_0000 != 0 {
                crc ^= CRC24_POLY;
            }
        }
    }
    crc & 0x00FF_FFFF
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc24_of_rfc4880_sample() {
        // The CRC24 of no bytes is the initial value; of "123456789" the
        // published check value of CRC-24/OPENPGP.
        assert_eq!(crc24(b""), CRC24_INIT);
        assert_eq!(crc24(b"123456789"), 0x21CF02);
    }

    #[test]
    fn packet_tags_old_and_new_format() {
        assert_eq!(packet_tag(&[0x99, 0, 0]), Some(6)); // old format, tag 6
        assert_eq!(packet_tag(&[0xC6, 0]), Some(6)); // new format, tag 6
        assert_eq!(packet_tag(&[0xA3, 1]), Some(8)); // compressed data
        assert_eq!(packet_tag(b"-----"), None);
    }

    #[test]
    fn armor_checksum_and_type_are_checked() {
        let body = b64(&[0x99, 1, 2, 3]);
        let sum = b64(&crc24(&[0x99, 1, 2, 3]).to_be_bytes()[1..]);
        let good = format!("{BEGIN}\nComment: x\n\n{body}\n={sum}\n{END}\n");
        assert_eq!(
            binary_keyring(good.as_bytes(), "k").unwrap(),
            [0x99, 1, 2, 3]
        );
        let bad = format!("{BEGIN}\n\n{body}\n=AAAA\n{END}\n");
        let e = binary_keyring(bad.as_bytes(), "k").unwrap_err().to_string();
        assert!(e.contains("CRC24"), "{e}");
        let msg = "-----BEGIN PGP MESSAGE-----\n\nowE=\n-----END PGP MESSAGE-----\n";
        let e = binary_keyring(msg.as_bytes(), "k").unwrap_err().to_string();
        assert!(e.contains("not a PGP PUBLIC KEY BLOCK"), "{e}");
        let e = binary_keyring(format!("{BEGIN}\n\n{body}\n").as_bytes(), "k").unwrap_err();
        assert!(e.to_string().contains("END"), "{e}");
    }

    fn b64(b: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(b)
    }
}
