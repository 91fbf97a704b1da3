//! Keys as cosign has them: a `PublicKey` from a PEM SubjectPublicKeyInfo
//! (cosign.pub, a ClusterImagePolicy's keyData), a `SigningKey` from
//! cosign's encrypted `cosign.key` (or a plain PKCS#8 PEM), and the
//! OpenShift ClusterImagePolicy's key built in. In: PEM bytes, a password;
//! out: keys that verify and sign as sigstore's defaults do (sigstore/sigstore
//! `pkg/signature/algorithm_registry.go`: ECDSA P-256 with SHA-256, P-384
//! with SHA-384, RSA PKCS#1 v1.5 with SHA-256; ASN.1 DER ECDSA signatures).
use super::der::{self, OID_EC_PUBLIC_KEY, OID_P256, OID_P384, OID_RSA};
use super::encrypted;
use crate::util::sha256::Sha256;
use anyhow::{bail, Context, Result};
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self as sig, EcdsaKeyPair, KeyPair, RsaKeyPair, UnparsedPublicKey};

/// PEM labels of cosign's encrypted private key: the current one and the
/// older (cosign `pkg/cosign/keys.go` `SigstorePrivateKeyPemType`,
/// `CosignPrivateKeyPemType`).
pub const SIGSTORE_PRIVATE_KEY_PEM: &str = "ENCRYPTED SIGSTORE PRIVATE KEY";
pub const COSIGN_PRIVATE_KEY_PEM: &str = "ENCRYPTED COSIGN PRIVATE KEY";

/// The algorithm of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    EcdsaP256,
    EcdsaP384,
    /// RSA with its modulus size in bits.
    Rsa(usize),
}

impl std::fmt::Display for KeyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyKind::EcdsaP256 => write!(f, "ECDSA P-256"),
            KeyKind::EcdsaP384 => write!(f, "ECDSA P-384"),
            KeyKind::Rsa(bits) => write!(f, "RSA {bits}"),
        }
    }
}

/// A public key, with where it came from (a file name, "the built-in
/// OpenShift key") for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    kind: KeyKind,
    /// The SubjectPublicKeyInfo DER.
    spki: Vec<u8>,
    /// What ring verifies with: the EC point, or the RSAPublicKey DER.
    key: Vec<u8>,
    origin: String,
}

impl PublicKey {
    /// A `-----BEGIN PUBLIC KEY-----` PEM (cosign.pub); `origin` names it.
    pub fn from_pem(pem: &[u8], origin: &str) -> Result<Self> {
        let p = der::pem_decode(pem).with_context(|| format!("public key {origin}"))?;
        if p.label != "PUBLIC KEY" {
            bail!(
                "public key {origin}: a PEM {} block, not PUBLIC KEY: give the public half (cosign.pub), not {}",
                p.label,
                if p.label.contains("PRIVATE") { "the private key" } else { "this file" }
            );
        }
        Self::from_spki(&p.der, origin)
    }

    /// A SubjectPublicKeyInfo DER.
    pub fn from_spki(spki: &[u8], origin: &str) -> Result<Self> {
        let s = der::spki_parse(spki).with_context(|| format!("public key {origin}"))?;
        let kind = match (s.algorithm, s.parameter) {
            (OID_EC_PUBLIC_KEY, OID_P256) => KeyKind::EcdsaP256,
            (OID_EC_PUBLIC_KEY, OID_P384) => KeyKind::EcdsaP384,
            (OID_RSA, _) => {
                let bits = der::rsa_modulus_bits(s.key)
                    .with_context(|| format!("public key {origin}: its RSA key"))?;
                if bits < 2048 {
                    bail!("public key {origin}: RSA {bits} is too short (sigstore takes 2048 bits and more)");
                }
                KeyKind::Rsa(bits)
            }
            _ => bail!(
                "public key {origin}: an algorithm other than ECDSA P-256/P-384 or RSA (e.g. Ed25519): not supported"
            ),
        };
        Ok(PublicKey {
            kind,
            spki: spki.to_vec(),
            key: s.key.to_vec(),
            origin: origin.to_string(),
        })
    }

    /// True when `sig` (ASN.1 DER for ECDSA) signs `msg` with this key.
    /// P-384 also takes SHA-256: cosign's `verify --key` loads keys with
    /// SHA-256 whatever the curve (`pkg/signature/keys.go`).
    pub fn verify(&self, msg: &[u8], signature: &[u8]) -> bool {
        let algs: &[&'static dyn sig::VerificationAlgorithm] = match self.kind {
            KeyKind::EcdsaP256 => &[&sig::ECDSA_P256_SHA256_ASN1],
            KeyKind::EcdsaP384 => &[&sig::ECDSA_P384_SHA384_ASN1, &sig::ECDSA_P384_SHA256_ASN1],
            KeyKind::Rsa(_) => &[&sig::RSA_PKCS1_2048_8192_SHA256],
        };
        algs.iter().any(|a| {
            UnparsedPublicKey::new(*a, &self.key)
                .verify(msg, signature)
                .is_ok()
        })
    }

    /// A short id: `sha256:` and the first 16 hex digits of the SHA-256 of
    /// the SubjectPublicKeyInfo DER.
    pub fn id(&self) -> String {
        format!("sha256:{}", &hex::encode(Sha256::digest(&self.spki))[..16])
    }

    /// cosign 3's `verificationMaterial.publicKey.hint`: the SHA-256 of the
    /// SubjectPublicKeyInfo DER, base64.
    pub fn hint(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(Sha256::digest(&self.spki))
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// The key as cosign writes cosign.pub.
    pub fn to_pem(&self) -> String {
        der::pem_encode("PUBLIC KEY", &self.spki)
    }

    /// "ECDSA P-256 key sha256:0123… (origin)".
    pub fn describe(&self) -> String {
        format!("{} key {} ({})", self.kind, self.id(), self.origin)
    }
}

enum Signer {
    Ecdsa(EcdsaKeyPair),
    Rsa(RsaKeyPair),
}

/// A private key that signs as cosign does.
pub struct SigningKey {
    signer: Signer,
    pkcs8: Vec<u8>,
    public: PublicKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({})", self.public.describe())
    }
}

impl SigningKey {
    /// cosign's private key file: `ENCRYPTED SIGSTORE PRIVATE KEY` (or the
    /// older `ENCRYPTED COSIGN PRIVATE KEY`) opened with `password`
    /// (COSIGN_PASSWORD); a plain PKCS#8 `PRIVATE KEY` takes no password.
    pub fn from_cosign_pem(pem: &[u8], password: &[u8], origin: &str) -> Result<Self> {
        let p = der::pem_decode(pem).with_context(|| format!("private key {origin}"))?;
        let pkcs8 = match p.label.as_str() {
            SIGSTORE_PRIVATE_KEY_PEM | COSIGN_PRIVATE_KEY_PEM => {
                match encrypted::open(&p.der, password) {
                    Ok(k) => k,
                    Err(encrypted::OpenError::WrongPassword) => {
                        bail!("wrong COSIGN_PASSWORD for {origin}: set COSIGN_PASSWORD to the password the key pair was made with (cosign generate-key-pair)")
                    }
                    Err(encrypted::OpenError::Format(why)) => {
                        bail!("private key {origin}: not a cosign encrypted key ({why}): give a key from `cosign generate-key-pair`")
                    }
                }
            }
            "PRIVATE KEY" => p.der,
            other => bail!(
                "private key {origin}: a PEM {other} block; expected {SIGSTORE_PRIVATE_KEY_PEM} (cosign generate-key-pair) or a PKCS#8 PRIVATE KEY (convert with `cosign import-key-pair`)"
            ),
        };
        Self::from_pkcs8(&pkcs8, origin)
    }

    /// A PKCS#8 DER private key: ECDSA P-256, P-384 or RSA.
    pub fn from_pkcs8(pkcs8: &[u8], origin: &str) -> Result<Self> {
        let rng = SystemRandom::new();
        let ec = [
            (&sig::ECDSA_P256_SHA256_ASN1_SIGNING, OID_P256),
            (&sig::ECDSA_P384_SHA384_ASN1_SIGNING, OID_P384),
        ];
        for (alg, curve) in ec {
            if let Ok(kp) = EcdsaKeyPair::from_pkcs8(alg, pkcs8, &rng) {
                let spki = der::spki_build(OID_EC_PUBLIC_KEY, curve, kp.public_key().as_ref());
                return Ok(SigningKey {
                    public: PublicKey::from_spki(&spki, origin)?,
                    signer: Signer::Ecdsa(kp),
                    pkcs8: pkcs8.to_vec(),
                });
            }
        }
        match RsaKeyPair::from_pkcs8(pkcs8) {
            Ok(kp) => {
                let spki = der::spki_build(OID_RSA, &[], kp.public().as_ref());
                Ok(SigningKey {
                    public: PublicKey::from_spki(&spki, origin)?,
                    signer: Signer::Rsa(kp),
                    pkcs8: pkcs8.to_vec(),
                })
            }
            Err(e) => bail!(
                "private key {origin}: not an ECDSA P-256/P-384 or RSA PKCS#8 key ({e}); Ed25519 keys are not supported"
            ),
        }
    }

    /// A new ECDSA P-256 key (cosign generate-key-pair's default).
    pub fn generate(origin: &str) -> Result<Self> {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&sig::ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
            .map_err(|_| anyhow::anyhow!("generating an ECDSA P-256 key: no randomness"))?;
        Self::from_pkcs8(doc.as_ref(), origin)
    }

    /// The key as cosign writes cosign.key: PKCS#8 sealed with `password`
    /// (scrypt N=2^16, r=8, p=1; nacl/secretbox), PEM
    /// `ENCRYPTED SIGSTORE PRIVATE KEY`.
    pub fn to_cosign_pem(&self, password: &[u8]) -> Result<String> {
        let sealed = encrypted::seal(&self.pkcs8, password)?;
        Ok(der::pem_encode(SIGSTORE_PRIVATE_KEY_PEM, &sealed))
    }

    pub fn public(&self) -> PublicKey {
        self.public.clone()
    }

    /// A signature of `msg`: ECDSA ASN.1 DER (SHA-256 on P-256, SHA-384 on
    /// P-384), or RSA PKCS#1 v1.5 with SHA-256.
    pub fn sign(&self, msg: &[u8]) -> Vec<u8> {
        let rng = SystemRandom::new();
        match &self.signer {
            Signer::Ecdsa(kp) => kp
                .sign(&rng, msg)
                .expect("ECDSA signing with the system's randomness")
                .as_ref()
                .to_vec(),
            Signer::Rsa(kp) => {
                let mut out = vec![0u8; kp.public().modulus_len()];
                kp.sign(&sig::RSA_PKCS1_SHA256, &rng, msg, &mut out)
                    .expect("RSA signing with the system's randomness");
                out
            }
        }
    }
}

/// The ClusterImagePolicy `openshift` of cluster-update-keys
/// (`manifests.rhel/0000_90_openshift-cluster-image-policy.yaml`), as
/// published: the key Red Hat signs OCP release payloads with for sigstore.
const OPENSHIFT_POLICY: &[u8] = include_bytes!("openshift-cluster-image-policy.yaml");
const OPENSHIFT_POLICY_ORIGIN: &str =
    "the built-in OpenShift ClusterImagePolicy (cluster-update-keys manifests.rhel/0000_90_openshift-cluster-image-policy.yaml)";

fn openshift_policy() -> serde_yaml_ng::Value {
    serde_yaml_ng::from_slice(OPENSHIFT_POLICY).expect("the built-in ClusterImagePolicy is YAML")
}

/// The key of OpenShift's ClusterImagePolicy (`spec.policy.rootOfTrust.
/// publicKey.keyData`, base64 of a PEM): RSA 4096.
pub fn builtin_openshift_key() -> PublicKey {
    let p = openshift_policy();
    let data = p["spec"]["policy"]["rootOfTrust"]["publicKey"]["keyData"]
        .as_str()
        .expect("the built-in ClusterImagePolicy has keyData");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .expect("keyData is base64");
    PublicKey::from_pem(&pem, OPENSHIFT_POLICY_ORIGIN).expect("keyData is a PEM public key")
}

/// The repositories that policy covers (`spec.scopes`).
pub fn builtin_openshift_scopes() -> Vec<String> {
    openshift_policy()["spec"]["scopes"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}
