//! The input options shared by `inspect` and `generate`, validated: what
//! to resolve and where to cache it. Resolving and importing are the
//! pipeline's first stage (`pipeline::load`); the plan has no side effects.
use crate::image::fetch::FetchOptions;
use crate::image::idms::Mirrors;
use crate::image::imageref::ImageRef;

/// Validated input settings (the CLI builds them: `commands::input_settings`).
pub struct Input {
    pub release: ImageRef,
    pub fetch: FetchOptions,
    pub mirrors: Option<Mirrors>,
    pub os_stream: Option<String>,
    pub cache_dir: std::path::PathBuf,
    /// How the release's signature is checked.
    pub trust: crate::trust::policy::Options,
}

/// First 12 hex digits of a digest or checksum (the trust record's).
pub use crate::trust::record::short;
