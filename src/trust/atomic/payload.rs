//! The signed JSON of an atomic container signature, decoded as library-go's
//! `verifyAtomicContainerSignature` decodes it (`pkg/verify/verify.go`: Go
//! `encoding/json` with `DisallowUnknownFields`, into
//! `{critical: {type, image: {docker-manifest-digest}, identity:
//! {docker-reference}}, optional: {creator, timestamp}}`), then checked.
//! Go's rules kept: an unknown field at any level is refused; keys match
//! exactly or case-insensitively (Go's simple folding: `K` KELVIN SIGN is `k`,
//! `ſ` is `s`); a repeated key merges into the same field, the last value
//! winning; `null` leaves a field as it was; a string where a number is
//! wanted (or the reverse) is refused; `timestamp` must be an integer
//! literal; only the first JSON value is read (bytes after it are ignored).
//! In: the payload and the release digest. Out: the claims, or why refused.
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use std::fmt;

/// `critical.type` of an atomic container signature (containers/image
/// `signature/signature.go`, library-go `pkg/verify/verify.go`).
pub(super) const ATOMIC_TYPE: &str = "atomic container signature";

/// What the signature claims.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Claims {
    pub kind: String,
    pub digest: String,
    pub reference: String,
    pub creator: String,
    /// `optional.timestamp`; None when absent or null (Go would read 0).
    pub timestamp: Option<i64>,
}

/// The claims of `payload` when they are an atomic signature of `digest`,
/// else why not (one phrase, in upstream's order of checks).
pub(super) fn check(payload: &[u8], digest: &str) -> Result<Claims, String> {
    let c = decode(payload)?;
    if c.kind != ATOMIC_TYPE {
        return Err(format!(
            "critical.type is {:?}, not {ATOMIC_TYPE:?}",
            c.kind
        ));
    }
    if c.reference.is_empty() {
        return Err("critical.identity.docker-reference is empty".into());
    }
    if c.digest != digest {
        return Err(format!(
            "signed digest {} is not the release's {digest}",
            if c.digest.is_empty() {
                "(none)"
            } else {
                &c.digest
            }
        ));
    }
    Ok(c)
}

/// Decode as Go's `json.Decoder.Decode` with `DisallowUnknownFields`.
pub(super) fn decode(payload: &[u8]) -> Result<Claims, String> {
    let mut c = Claims::default();
    let mut de = serde_json::Deserializer::from_slice(payload);
    // Only the first value, as Decoder.Decode: no `de.end()`.
    Into {
        c: &mut c,
        level: Level::Top,
    }
    .deserialize(&mut de)
    .map_err(|e| format!("the signed JSON is not valid: {e}"))?;
    Ok(c)
}

#[derive(Clone, Copy)]
enum Level {
    Top,
    Critical,
    Image,
    Identity,
    Optional,
}

impl Level {
    fn path(self) -> &'static str {
        match self {
            Level::Top => "the payload",
            Level::Critical => "critical",
            Level::Image => "critical.image",
            Level::Identity => "critical.identity",
            Level::Optional => "optional",
        }
    }
}

enum Field {
    Object(Level),
    Kind,
    Digest,
    Reference,
    Creator,
    Timestamp,
}

/// The field `key` names at `level`: an exact match, else Go's folded one.
fn field(level: Level, key: &str) -> Option<Field> {
    let names: &[(&str, Field)] = match level {
        Level::Top => &[
            ("critical", Field::Object(Level::Critical)),
            ("optional", Field::Object(Level::Optional)),
        ],
        Level::Critical => &[
            ("type", Field::Kind),
            ("image", Field::Object(Level::Image)),
            ("identity", Field::Object(Level::Identity)),
        ],
        Level::Image => &[("docker-manifest-digest", Field::Digest)],
        Level::Identity => &[("docker-reference", Field::Reference)],
        Level::Optional => &[("creator", Field::Creator), ("timestamp", Field::Timestamp)],
    };
    let folded = fold(key);
    names
        .iter()
        .find(|(n, _)| *n == key || *n == folded)
        .map(|(_, f)| match f {
            Field::Object(l) => Field::Object(*l),
            Field::Kind => Field::Kind,
            Field::Digest => Field::Digest,
            Field::Reference => Field::Reference,
            Field::Creator => Field::Creator,
            Field::Timestamp => Field::Timestamp,
        })
}

/// Go's case folding as far as it can reach our (lower-case ASCII) field
/// names: ASCII lower-cased, KELVIN SIGN to `k`, LONG S to `s`.
fn fold(key: &str) -> String {
    key.chars()
        .map(|c| match c {
            '\u{212A}' => 'k',
            '\u{017F}' => 's',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// Decodes an object into the claims at `level`, merging as Go does.
struct Into<'a> {
    c: &'a mut Claims,
    level: Level,
}

impl<'de> DeserializeSeed<'de> for Into<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Into<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an object for {}", self.level.path())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
        while let Some(key) = m.next_key::<String>()? {
            let Some(f) = field(self.level, &key) else {
                return Err(de::Error::custom(format!(
                    "unknown field {key:?} in {}",
                    self.level.path()
                )));
            };
            match f {
                Field::Object(level) => m.next_value_seed(Into { c: self.c, level })?,
                Field::Kind => m.next_value_seed(Str(&mut self.c.kind))?,
                Field::Digest => m.next_value_seed(Str(&mut self.c.digest))?,
                Field::Reference => m.next_value_seed(Str(&mut self.c.reference))?,
                Field::Creator => m.next_value_seed(Str(&mut self.c.creator))?,
                Field::Timestamp => m.next_value_seed(Int(&mut self.c.timestamp))?,
            }
        }
        Ok(())
    }
}

/// A Go `string` field: a string sets it, null leaves it.
struct Str<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for Str<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Str<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        *self.0 = v.to_string();
        Ok(())
    }
}

/// A Go `int64` field: an integer literal sets it, null leaves it.
struct Int<'a>(&'a mut Option<i64>);

impl<'de> DeserializeSeed<'de> for Int<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Int<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer (int64)")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        *self.0 = Some(v);
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        let v = i64::try_from(v).map_err(|_| E::custom("timestamp overflows int64"))?;
        *self.0 = Some(v);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:aaaa";

    fn ok(s: &str) -> Claims {
        check(s.as_bytes(), D).unwrap_or_else(|e| panic!("{s}: {e}"))
    }
    fn refused(s: &str) -> String {
        check(s.as_bytes(), D).expect_err(s)
    }

    #[test]
    fn accepts_the_containers_image_shape() {
        let c = ok(
            r#"{"critical":{"identity":{"docker-reference":"q/r:1"},"image":{"docker-manifest-digest":"sha256:aaaa"},"type":"atomic container signature"},"optional":{"creator":"atomic 5.23.1","timestamp":1795869799}}"#,
        );
        assert_eq!(c.reference, "q/r:1");
        assert_eq!(c.timestamp, Some(1795869799));
        // No "optional" at all is fine (Go: zero value).
        let c = ok(
            r#"{"critical":{"type":"atomic container signature","image":{"docker-manifest-digest":"sha256:aaaa"},"identity":{"docker-reference":"x"}}}"#,
        );
        assert_eq!(c.timestamp, None);
    }

    #[test]
    fn unknown_fields_refused_at_every_level() {
        let base = |crit: &str, img: &str, id: &str, opt: &str, top: &str| {
            format!(
                r#"{{"critical":{{"type":"atomic container signature","image":{{"docker-manifest-digest":"sha256:aaaa"{img}}},"identity":{{"docker-reference":"x"{id}}}{crit}}},"optional":{{"creator":"c"{opt}}}{top}}}"#
            )
        };
        for (s, where_) in [
            (base(r#","foo":1"#, "", "", "", ""), "in critical"),
            (base("", r#","foo":1"#, "", "", ""), "in critical.image"),
            (base("", "", r#","foo":1"#, "", ""), "in critical.identity"),
            (base("", "", "", r#","foo":1"#, ""), "in optional"),
            (base("", "", "", "", r#","foo":1"#), "in the payload"),
        ] {
            let e = refused(&s);
            assert!(
                e.contains(&format!("unknown field \"foo\" {where_}")),
                "{e}"
            );
        }
        // The same document without the extra field passes: the check can fail.
        ok(&base("", "", "", "", ""));
    }

    #[test]
    fn go_case_folding_duplicates_null_and_trailing_bytes() {
        // Case-insensitive keys, KELVIN SIGN and LONG S fold as in Go.
        ok("{\"CRITICAL\":{\"Type\":\"atomic container signature\",\"image\":{\"docker-manife\u{017F}t-digest\":\"sha256:aaaa\"},\"identity\":{\"doc\u{212A}er-reference\":\"x\"}}}");
        // A repeated object merges; the last string wins.
        ok(
            r#"{"critical":{"type":"x","image":{"docker-manifest-digest":"sha256:aaaa"}},"critical":{"type":"atomic container signature","identity":{"docker-reference":"x"}}}"#,
        );
        // null leaves the field: here the digest stays set.
        ok(
            r#"{"critical":{"type":"atomic container signature","image":{"docker-manifest-digest":"sha256:aaaa"},"image":null,"identity":{"docker-reference":"x"}},"optional":null}"#,
        );
        // Only the first JSON value is read.
        ok(
            r#"{"critical":{"type":"atomic container signature","image":{"docker-manifest-digest":"sha256:aaaa"},"identity":{"docker-reference":"x"}}} trailing"#,
        );
    }

    #[test]
    fn wrong_types_and_values_refused() {
        let e = refused(
            r#"{"critical":{"type":"atomic container signaturE","image":{"docker-manifest-digest":"sha256:aaaa"},"identity":{"docker-reference":"x"}}}"#,
        );
        assert!(e.contains("critical.type is"), "{e}");
        let e = refused(
            r#"{"critical":{"type":"atomic container signature","image":{"docker-manifest-digest":"sha256:bbbb"},"identity":{"docker-reference":"x"}}}"#,
        );
        assert_eq!(
            e,
            "signed digest sha256:bbbb is not the release's sha256:aaaa"
        );
        let e = refused(
            r#"{"critical":{"type":"atomic container signature","image":{"docker-manifest-digest":"sha256:aaaa"},"identity":{"docker-reference":""}}}"#,
        );
        assert!(e.contains("docker-reference is empty"), "{e}");
        for bad in [
            r#"{"critical":{"type":1}}"#,
            r#"{"critical":"x"}"#,
            r#"{"optional":{"timestamp":"1"}}"#,
            r#"{"optional":{"timestamp":1.5}}"#,
            r#"{"optional":{"timestamp":1e3}}"#,
            r#"{"optional":{"timestamp":9223372036854775808}}"#,
            r#"[]"#,
            "",
            "{",
        ] {
            let e = refused(bad);
            assert!(e.starts_with("the signed JSON is not valid"), "{bad}: {e}");
        }
    }
}
