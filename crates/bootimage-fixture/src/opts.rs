//! The subcommands' options: the usage text, and `Opts`, which reads a
//! subcommand's `--name VALUE` and `--flag` arguments (a bad one prints the
//! usage and exits 2). Every subcommand module takes its options from here.
use anyhow::{Context, Result};
use std::path::PathBuf;

pub(crate) fn usage() -> ! {
    eprintln!(
        "usage:
  bootimage-fixture add-image --layout DIR --tag TAG [--layer-dir DIR | --layer-tar FILE]... [--label K=V]...
        [--arch ARCH] [--zstd] [--docker] [--minimal-config]
      --zstd            layers as tar+zstd (default tar+gzip)
      --docker          Docker schema 2 manifest, config and layer media types
      --minimal-config  config with only architecture, os, rootfs (OCI minimum; labels dropped)
  bootimage-fixture derive --layout DIR --from-tag TAG --tag TAG --layer-dir DIR [--zstd] [--created-by TEXT]
      the image FROM-TAG plus one layer, config extended as `podman build` does
  bootimage-fixture relabel --layout DIR --from-tag TAG --tag TAG [--label K=V]... [--unlabel K]...
      the image FROM-TAG with labels set or removed (a `FROM base` + `LABEL` build: config only)
  bootimage-fixture set-arch --layout DIR --tag TAG --arch ARCH
      TAG's image with config architecture ARCH (OCI name; arm64 gets variant v8)
  bootimage-fixture index --layout DIR --tag TAG --entry ARCH=DIGEST...
      an OCI image index (os linux) of manifests already in the layout
  bootimage-fixture chunkah --layout DIR --tag TAG --rootfs DIR --components FILE [--max-layers N] [--label K=V]...
      a flat root filesystem as chunkah splits it: a layer per component (FILE: `/path<TAB>component`
      lines; the rest is `chunkah/unclaimed`), the smallest packed together past N (default 64),
      each annotated org.chunkah.component; no ostree commit, no security.selinux or trusted.* xattrs
  bootimage-fixture merge --from DIR --from-tag TAG --layout DIR --tag TAG
  bootimage-fixture digest --layout DIR --tag TAG
  bootimage-fixture ostree-ext ARGS..."
    );
    std::process::exit(2)
}

/// A subcommand's options: `--name VALUE` (any may repeat; the order of
/// all is kept) and bare `--flag`s. Anything else, or a missing value,
/// prints the usage.
pub(crate) struct Opts {
    pub(crate) values: Vec<(&'static str, String)>,
    pub(crate) flags: Vec<&'static str>,
}

impl Opts {
    pub(crate) fn parse(
        args: &[String],
        with_value: &[&'static str],
        flags: &[&'static str],
    ) -> Opts {
        let mut o = Opts {
            values: Vec::new(),
            flags: Vec::new(),
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if let Some(k) = with_value.iter().find(|k| **k == a.as_str()) {
                o.values
                    .push((k, it.next().cloned().unwrap_or_else(|| usage())));
            } else if let Some(f) = flags.iter().find(|f| **f == a.as_str()) {
                o.flags.push(f);
            } else {
                usage()
            }
        }
        o
    }
    /// Every value of `k`, in order.
    pub(crate) fn all(&self, k: &str) -> Vec<String> {
        (self.values.iter())
            .filter(|(n, _)| *n == k)
            .map(|(_, v)| v.clone())
            .collect()
    }
    /// The last value of `k`.
    pub(crate) fn get(&self, k: &str) -> Option<String> {
        self.all(k).pop()
    }
    /// The value of a required `k`.
    pub(crate) fn need(&self, k: &str) -> String {
        self.get(k).unwrap_or_else(|| usage())
    }
    pub(crate) fn path(&self, k: &str) -> PathBuf {
        PathBuf::from(self.need(k))
    }
    pub(crate) fn has(&self, f: &str) -> bool {
        self.flags.contains(&f)
    }
    /// The `--label K=V` values as (K, V).
    pub(crate) fn labels(&self) -> Result<Vec<(String, String)>> {
        (self.all("--label").iter())
            .map(|kv| {
                let (k, v) = kv.split_once('=').context("--label K=V")?;
                Ok((k.to_string(), v.to_string()))
            })
            .collect()
    }
}
