//! GPG "atomic container signatures" of a release, checked as OpenShift's
//! CVO checks them (library-go `pkg/verify`; docs/contract.md §8, UPSTREAM.md §29a):
//! every keyring of the trust configuration must be satisfied by at least
//! one signature whose OpenPGP message verifies against it (by the system's
//! `gpgv`), has not expired, and whose JSON (no unknown field at any level)
//! says `critical.type` "atomic container signature", names the release's
//! digest and a non-empty docker-reference.
//! In: keyrings (a release-verification ConfigMap or a built-in one),
//! signatures (files, lookaside dirs, ConfigMaps, stores), the digest.
//! Out: a [`Verdict`], or one line naming the unsatisfied keyring and why
//! each signature was refused.
use anyhow::{bail, Context, Result};

mod armor;
mod config;
mod gpgv;
mod objects;
mod payload;
mod sources;
#[cfg(test)]
mod sources_tests;
#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;

pub use config::{builtin, parse_verification_config, BUILTIN_NAMES};
pub use sources::{signatures_from_files, signatures_from_store};

/// The most signatures read per digest from a store: N = 1..9 (library-go
/// `pkg/verify/store/sigstore/sigstore.go` and `verify.go` fileStore:
/// `for i := 1; i < maxSignatureSearch; i++` with `maxSignatureSearch = 10`).
pub const MAX_SIGNATURES: usize = 9;
/// The most bytes of one signature (library-go `sigstore.go`:
/// `io.LimitReader(body, 50*1024)`); upstream truncates, we refuse by name.
pub const MAX_SIGNATURE: usize = 50 * 1024;

/// An OpenPGP keyring and where it came from (ConfigMap key, file path,
/// "built-in redhat"). `armored` is ASCII-armored, or binary (upstream
/// reads both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyring {
    pub name: String,
    pub armored: Vec<u8>,
}

/// A parsed release-verification ConfigMap: its keyrings
/// (`verifier-public-key-*`) and stores (`store-*`, key name and URL), each
/// sorted by key name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerificationConfig {
    pub keyrings: Vec<Keyring>,
    pub stores: Vec<(String, String)>,
}

/// One signature blob and where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub origin: String,
    pub bytes: Vec<u8>,
}

/// The signature that satisfied a keyring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The keyring's name (e.g. `verifier-public-key-redhat`).
    pub keyring: String,
    /// The signer's primary key fingerprint, upper-case hex.
    pub fingerprint: String,
    /// `critical.identity.docker-reference` (not compared with the pull spec).
    pub docker_reference: String,
    pub origin: String,
    /// `optional.timestamp`, when present.
    pub timestamp: Option<i64>,
    /// The OpenPGP signature's creation time.
    pub signed_at: i64,
}

/// Every keyring's satisfying signature, and why each signature that
/// satisfied none was refused (signatures after the last keyring was
/// satisfied are not read, as upstream stops there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub verified: Vec<Verified>,
    pub refused: Vec<(String, String)>,
}

/// library-go `verify.go` `validReleaseDigest`:
/// `^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$`.
fn valid_digest(d: &str) -> bool {
    let Some((algo, hash)) = d.split_once(':') else {
        return false;
    };
    let sep = |c: char| matches!(c, '.' | '+' | '_' | '-');
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !algo.is_empty()
        && algo
            .split(sep)
            .all(|p| !p.is_empty() && p.chars().all(alnum))
        && !hash.is_empty()
        && hash
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '=' | '_' | '-'))
}

/// Accept `digest` only as library-go's `releaseVerifier.Verify` does.
pub fn verify(keyrings: &[Keyring], signatures: &[Signature], digest: &str) -> Result<Verdict> {
    if !valid_digest(digest) {
        bail!("release digest {digest:?} is not a valid digest: give the release by digest (sha256:<hex>)");
    }
    if keyrings.is_empty() {
        bail!("no keyring to verify release {digest} against: give a trust configuration with verifier-public-key-* keys");
    }
    let scratch = tempfile::Builder::new()
        .prefix("bootimage-gen-gpgv-")
        .tempdir()
        .context("making a scratch directory for gpgv")?;
    let home = scratch.path().join("home");
    std::fs::create_dir(&home).context("making gpgv's home")?;
    let mut rings = Vec::new();
    for (i, k) in keyrings.iter().enumerate() {
        let bin = armor::binary_keyring(&k.armored, &k.name)?;
        let f = scratch.path().join(format!("keyring-{i}.gpg"));
        std::fs::write(&f, bin).with_context(|| format!("writing keyring {}", k.name))?;
        rings.push((k, f));
    }
    let mut remaining: Vec<usize> = (0..rings.len()).collect();
    let mut verdict = Verdict {
        verified: Vec::new(),
        refused: Vec::new(),
    };
    // (origin, why) for every signature a remaining keyring refused.
    let mut notes: Vec<(String, String)> = Vec::new();
    for (j, sig) in signatures.iter().enumerate() {
        if remaining.is_empty() {
            break;
        }
        let mut why: Vec<String> = Vec::new();
        let mut satisfied = false;
        if sig.bytes.len() > MAX_SIGNATURE {
            why.push(format!("larger than {} KiB", MAX_SIGNATURE >> 10));
        } else if armor::packet_tag(&sig.bytes).is_none() {
            why.push("not an OpenPGP signed message (armored or text; OpenShift reads binary signatures only)".into());
        } else {
            let f = scratch.path().join(format!("signature-{j}"));
            std::fs::write(&f, &sig.bytes).context("writing a signature for gpgv")?;
            let mut still = Vec::new();
            for r in remaining {
                let (ring, file) = &rings[r];
                let reason = match gpgv::check(&home, file, &ring.name, &f)? {
                    gpgv::Outcome::Refused(m) => m,
                    gpgv::Outcome::Good(g) => match payload::check(&g.payload, digest) {
                        Err(m) => m,
                        Ok(c) => {
                            verdict.verified.push(Verified {
                                keyring: ring.name.clone(),
                                fingerprint: g.fingerprint,
                                docker_reference: c.reference,
                                origin: sig.origin.clone(),
                                timestamp: c.timestamp,
                                signed_at: g.signed_at,
                            });
                            satisfied = true;
                            continue;
                        }
                    },
                };
                if !why.contains(&reason) {
                    why.push(reason);
                }
                still.push(r);
            }
            remaining = still;
        }
        if !why.is_empty() {
            notes.push((sig.origin.clone(), why.join("; ")));
        }
        if !satisfied {
            verdict.refused.push((sig.origin.clone(), why.join("; ")));
        }
    }
    if !remaining.is_empty() {
        let names: Vec<&str> = remaining
            .iter()
            .map(|&r| rings[r].0.name.as_str())
            .collect();
        if signatures.is_empty() {
            bail!(
                "release {digest} is not verified: no signature found for keyring {}: give signatures with --signatures or a reachable store",
                names.join(", ")
            );
        }
        let refusals: Vec<String> = notes.iter().map(|(o, w)| format!("{o}: {w}")).collect();
        bail!(
            "release {digest} is not verified: no signature satisfies keyring {} ({})",
            names.join(", "),
            refusals.join("; ")
        );
    }
    Ok(verdict)
}
