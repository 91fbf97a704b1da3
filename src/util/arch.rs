//! [`Arch`]: an architecture, by its CoreOS name (`x86_64`, `aarch64`,
//! `ppc64le`, `s390x`); the OCI/GOARCH names (`amd64`, `arm64`) are read as
//! the same arch and given by [`Arch::oci_name`]. The arches this tool knows
//! are listed once, in [`Arch::KNOWN`]; any other well-formed name (riscv64
//! in a platforms.json, mips64le in an image index) is carried as
//! [`Arch::Other`], and refused only where a step must know the arch.
use anyhow::{bail, Result};
use std::fmt;

/// An architecture. Displayed and serialised as its CoreOS name, ordered by
/// that name (so maps keyed by it keep the order they had keyed by name).
///
/// `Copy`: the name of an arch this tool does not know is held inline
/// ([`OtherName`]), not on the heap.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
    Ppc64le,
    S390x,
    /// An arch this tool does not know: carried, never a known name.
    Other(OtherName),
}

/// The name of an arch this tool does not know: 1 to [`OtherName::MAX`]
/// bytes of `a-z`, `0-9` and `_` (every `uname -m`, GOARCH and Rust arch
/// name is), never one of [`Arch::KNOWN`]'s names.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OtherName {
    len: u8,
    bytes: [u8; OtherName::MAX],
}

impl OtherName {
    /// The longest name held (`loongarch64`, the longest in use, has 11).
    pub const MAX: usize = 15;

    /// `name` if it is well-formed (the known names are the caller's to
    /// check).
    const fn new(name: &str) -> Option<OtherName> {
        let b = name.as_bytes();
        if b.is_empty() || b.len() > Self::MAX {
            return None;
        }
        let mut bytes = [0u8; Self::MAX];
        let mut i = 0;
        while i < b.len() {
            if !(b[i].is_ascii_lowercase() || b[i].is_ascii_digit() || b[i] == b'_') {
                return None;
            }
            bytes[i] = b[i];
            i += 1;
        }
        Some(OtherName {
            len: b.len() as u8,
            bytes,
        })
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII bytes are ever stored (`new`).
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl Arch {
    /// The architectures this tool builds for: the one list.
    pub const KNOWN: [Arch; 4] = [Arch::X86_64, Arch::Aarch64, Arch::Ppc64le, Arch::S390x];

    /// riscv64: a name upstream uses (fedora-coreos-config `platforms.yaml`
    /// keys it; it boots EFI), not one this tool builds for.
    pub const RISCV64: Arch = Arch::other("riscv64");

    /// An arch this tool does not know, by a name fixed in the source (a
    /// compile error when `name` is malformed).
    pub const fn other(name: &str) -> Arch {
        match OtherName::new(name) {
            Some(n) => Arch::Other(n),
            None => panic!("not an architecture name"),
        }
    }

    /// A CoreOS or OCI/GOARCH architecture name: a known arch, else
    /// [`Arch::Other`]. Refused only when it is no architecture name at
    /// all (empty, too long, other characters).
    pub fn parse(name: &str) -> Result<Arch> {
        if let Some(a) = Arch::KNOWN
            .into_iter()
            .find(|a| a.as_str() == name || a.oci_name() == name)
        {
            return Ok(a);
        }
        match OtherName::new(name) {
            Some(n) => Ok(Arch::Other(n)),
            None => bail!(
                "{name:?} is not an architecture name (1 to {} characters of a-z, 0-9 and _)",
                OtherName::MAX
            ),
        }
    }

    /// The CoreOS name (`uname -m`, cosa's `basearch`, qemu's).
    pub fn as_str(&self) -> &str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
            Arch::Ppc64le => "ppc64le",
            Arch::S390x => "s390x",
            Arch::Other(n) => n.as_str(),
        }
    }

    /// The OCI (GOARCH) name: an image config's and an index entry's
    /// `architecture`.
    pub fn oci_name(&self) -> &str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
            Arch::Ppc64le | Arch::S390x | Arch::Other(_) => self.as_str(),
        }
    }

    /// One of [`Arch::KNOWN`].
    pub fn is_known(&self) -> bool {
        !matches!(self, Arch::Other(_))
    }

    /// The known arches' names, for messages: `x86_64, aarch64, ppc64le, s390x`.
    pub fn known_names() -> String {
        Arch::join(&Arch::KNOWN)
    }

    /// Names of `arches`, for messages: `x86_64, aarch64`.
    pub fn join(arches: &[Arch]) -> String {
        let names: Vec<&str> = arches.iter().map(Arch::as_str).collect();
        names.join(", ")
    }

    /// This host's architecture.
    pub fn host() -> Arch {
        // Rust names ppc64le `powerpc64`; its names are all well-formed.
        Arch::parse(&std::env::consts::ARCH.replace("powerpc64", "ppc64le"))
            .expect("Rust's architecture names are architecture names")
    }
}

/// `--arch`: a CoreOS or OCI architecture name of an arch this tool knows.
pub fn parse_known(a: &str) -> Result<Arch> {
    match Arch::parse(a) {
        Ok(arch) if arch.is_known() => Ok(arch),
        _ => bail!(
            "--arch {a}: not an architecture CoreOS ships; use one of {} (or amd64, arm64)",
            Arch::known_names()
        ),
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// As the name was a `String`: `"x86_64"`.
impl fmt::Debug for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Debug for OtherName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::str::FromStr for Arch {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Arch> {
        Arch::parse(s)
    }
}

/// By CoreOS name, as [`Ord`] and [`Borrow<str>`](std::borrow::Borrow).
impl std::hash::Hash for Arch {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

/// Maps keyed by arch are looked up by CoreOS name too (`m["x86_64"]`).
impl std::borrow::Borrow<str> for Arch {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialOrd for Arch {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// By CoreOS name (each arch has one name, so this agrees with `==`).
impl Ord for Arch {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialEq<str> for Arch {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Arch {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Arch {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<Arch> for str {
    fn eq(&self, other: &Arch) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Arch> for &str {
    fn eq(&self, other: &Arch) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<Arch> for String {
    fn eq(&self, other: &Arch) -> bool {
        self == other.as_str()
    }
}

impl serde::Serialize for Arch {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Arch {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Arch, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Arch::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_both_ways() {
        for (a, coreos, oci) in [
            (Arch::X86_64, "x86_64", "amd64"),
            (Arch::Aarch64, "aarch64", "arm64"),
            (Arch::Ppc64le, "ppc64le", "ppc64le"),
            (Arch::S390x, "s390x", "s390x"),
        ] {
            assert_eq!(Arch::parse(coreos).unwrap(), a);
            assert_eq!(Arch::parse(oci).unwrap(), a);
            assert_eq!((a.as_str(), a.oci_name()), (coreos, oci));
            assert_eq!(a.to_string(), coreos);
            assert!(Arch::KNOWN.contains(&a) && a.is_known());
        }
    }

    #[test]
    fn unknown_arches_are_carried() {
        let r = Arch::parse("riscv64").unwrap();
        assert_eq!(r, Arch::RISCV64);
        assert!(!r.is_known());
        assert_eq!((r.as_str(), r.oci_name()), ("riscv64", "riscv64"));
        assert_eq!(format!("{r}|{r:?}|{r:>9}"), "riscv64|\"riscv64\"|  riscv64");
        let l = Arch::parse("loongarch64").unwrap();
        assert_ne!(l, r);
        for bad in ["", "x86-64", "AMD64", "linux/amd64", "a_name_too_long_"] {
            let e = Arch::parse(bad).unwrap_err().to_string();
            assert!(e.contains("not an architecture name"), "{e}");
        }
        assert!(Arch::parse("a_name_15_bytes").is_ok());
        // Copy, and no larger than a name.
        assert!(std::mem::size_of::<Arch>() <= 17);
    }

    #[test]
    fn serde_and_order_by_coreos_name() {
        use std::collections::BTreeMap;
        let m: BTreeMap<Arch, u8> = [(Arch::X86_64, 1), (Arch::Aarch64, 2), (Arch::RISCV64, 3)]
            .into_iter()
            .chain([(Arch::S390x, 4), (Arch::Ppc64le, 5)])
            .collect();
        let j = serde_json::to_string(&m).unwrap();
        assert_eq!(
            j,
            r#"{"aarch64":2,"ppc64le":5,"riscv64":3,"s390x":4,"x86_64":1}"#
        );
        let back: BTreeMap<Arch, u8> = serde_json::from_str(&j).unwrap();
        assert_eq!(back, m);
        assert_eq!((m["s390x"], m.get("riscv64")), (4, Some(&3)));
        let a: Arch = serde_json::from_str(r#""amd64""#).unwrap();
        assert_eq!(a, Arch::X86_64);
        assert!(serde_json::from_str::<Arch>(r#""x/y""#).is_err());
    }

    #[test]
    fn arch_flag_takes_known_arches_only() {
        assert_eq!(parse_known("arm64").unwrap(), Arch::Aarch64);
        assert_eq!(
            parse_known("mips").unwrap_err().to_string(),
            "--arch mips: not an architecture CoreOS ships; use one of x86_64, aarch64, ppc64le, s390x (or amd64, arm64)"
        );
        assert!(parse_known("riscv64").is_err());
    }

    #[test]
    fn host_is_an_arch() {
        assert_eq!(
            Arch::host().as_str(),
            std::env::consts::ARCH.replace("powerpc64", "ppc64le")
        );
    }
}
