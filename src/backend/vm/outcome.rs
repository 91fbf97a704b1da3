//! How the job's result crosses back from the VM: inside, [`job_main`]
//! runs the job file and writes its [`Outcome`] (the disk output, or the
//! error chain) to `vm/result.json`; outside, [`rebuild`] turns a guest's
//! error chain back into an error with the same message.
use crate::backend::job::{self, DiskOutput};
use crate::util::progress::Reporter;
use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// How the job ended inside the VM.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Outcome {
    Ok(Box<DiskOutput>),
    /// The error chain, outermost first.
    Error(Vec<String>),
}

/// Inside the VM: run the job file `job`, write the outcome to `result`.
pub fn job_main(job_file: &Path, result: &Path) -> Result<()> {
    let outcome = match job::read(job_file).and_then(|j| {
        let r = Reporter::new(crate::util::progress::Progress::Plain);
        j.run(&r)
    }) {
        Ok(o) => Outcome::Ok(Box::new(o)),
        Err(e) => Outcome::Error(e.chain().map(|c| c.to_string()).collect()),
    };
    let bytes = serde_json::to_vec(&outcome)?;
    let dir = result.parent().context("result path")?;
    let name = result.file_name().context("result path")?;
    crate::publish::meta::write_atomic(dir, &name.to_string_lossy(), &bytes)
}

/// An error with the same chain (and so the same message) as the guest's.
pub(super) fn rebuild(chain: Vec<String>) -> anyhow::Error {
    let mut it = chain.into_iter().rev();
    let mut e = anyhow!(it.next().unwrap_or_else(|| "the VM job failed".into()));
    for c in it {
        e = e.context(c);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_chain_survives_the_trip() {
        let e = anyhow!("root cause").context("middle").context("outer");
        let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
        let back = rebuild(chain);
        assert_eq!(format!("{back:#}"), format!("{e:#}"));
        assert_eq!(back.chain().count(), 3);
    }
}
