//! Guards, one type per privileged or temporary resource (loop device,
//! mount, work dir): `#[must_use]`, released by an explicit fallible
//! `close()` that keeps the resource when the release fails, and by a
//! best-effort `Drop` when an error or a signal unwinds the run.
pub mod fsmeta;
pub mod loopback;
pub mod ramstage;
pub mod stale;
pub mod workdir;
