//! The union of several stream documents named `stream` ([`unite`]): every
//! arch of every part, and an arch in several parts (runs split by
//! platform) joined platform by platform, format by format, when they are
//! one build; two builds of one arch, or one file that differs, refused
//! naming both. Shared by `stream merge` and `push`'s fan-in.
use crate::publish::stream::{Arch, Stream};
use crate::util::arch;
use anyhow::{bail, Result};
use std::collections::BTreeMap;

/// Several stream documents (each named by its label in errors) as one
/// named `stream`: every arch of every part; an arch in several parts
/// (runs split by platform) when they are one build: the same `release`,
/// platforms, formats and files united, each file once. Two builds of one
/// arch, or one file that differs between parts, is refused naming both.
/// The result does not depend on the parts' order: `last-modified` is the
/// latest, `generator` the one given, else the greatest of the parts'.
pub fn unite(parts: &[(&str, &Stream)], stream: &str, generator: Option<&str>) -> Result<Stream> {
    let mut arches: BTreeMap<arch::Arch, (String, Arch)> = BTreeMap::new();
    let mut last_modified = String::new();
    let mut generators: Vec<&str> = Vec::new();
    for (label, s) in parts {
        // RFC 3339 UTC stamps of one shape compare as text.
        if s.metadata.last_modified > last_modified {
            last_modified = s.metadata.last_modified.clone();
        }
        generators.extend(s.metadata.generator.as_deref());
        for (arch, a) in &s.architectures {
            match arches.get_mut(arch) {
                None => {
                    arches.insert(*arch, (label.to_string(), a.clone()));
                }
                Some((l0, a0)) => join_arch(*arch, (l0.as_str(), a0), (label, a))?,
            }
        }
    }
    let generator = match generator {
        Some(g) => Some(g.to_string()),
        None => generators.into_iter().max().map(String::from),
    };
    Ok(Stream {
        stream: stream.to_string(),
        metadata: crate::publish::stream::Metadata {
            last_modified,
            generator,
        },
        architectures: arches.into_iter().map(|(k, (_, a))| (k, a)).collect(),
    })
}

/// `add` (from `l1`) joined into `a0` (from `l0`), both arch `arch`.
fn join_arch(
    arch: arch::Arch,
    (l0, a0): (&str, &mut Arch),
    (l1, add): (&str, &Arch),
) -> Result<()> {
    if *a0 == *add {
        return Ok(());
    }
    let (r0, r1) = (release_of(a0), release_of(add));
    if r0 != "-" && r1 != "-" && r0 != r1 {
        bail!(
            "arch {arch} is in both {l0} and {l1} from two builds (release {r0} and {r1}): a stream holds one build per arch; merge the runs of one build"
        );
    }
    let clash = |what: String, x: String, y: String| {
        anyhow::anyhow!(
            "arch {arch}: {what} is in both {l0} and {l1} with different contents ({x} and {y}): two builds of one file; merge the runs of one build"
        )
    };
    // A file as a message names it: its name and the start of its digest.
    let file = |a: &crate::publish::stream::Artifact| {
        let name = a.location.rsplit('/').next().unwrap_or(&a.location);
        format!("{name} sha256 {}", a.sha256.get(..12).unwrap_or(&a.sha256))
    };
    for (platform, pa) in &add.artifacts {
        let Some(p0) = a0.artifacts.get_mut(platform) else {
            a0.artifacts.insert(platform.clone(), pa.clone());
            continue;
        };
        if p0.release != pa.release {
            bail!(
                "arch {arch} is in both {l0} and {l1} from two builds (release {} and {}): a stream holds one build per arch; merge the runs of one build",
                p0.release,
                pa.release
            );
        }
        for (format, kinds) in &pa.formats {
            let f0 = p0.formats.entry(format.clone()).or_default();
            for (kind, art) in kinds {
                add_once(
                    f0,
                    kind,
                    art,
                    file,
                    || format!("platform {platform} format {format} {kind}"),
                    &clash,
                )?;
            }
        }
    }
    match (&mut a0.images, &add.images) {
        (_, None) => {}
        (slot @ None, Some(i)) => *slot = Some(i.clone()),
        (Some(i0), Some(i)) => {
            if let Some(aws) = &i.aws {
                let r0 = &mut i0.aws.get_or_insert_with(Default::default).regions;
                for (region, img) in &aws.regions {
                    add_once(
                        r0,
                        region,
                        img,
                        |x| format!("{} of release {}", x.image, x.release),
                        || format!("the aws image of region {region}"),
                        &clash,
                    )?;
                }
            }
            for (cloud, v) in &i.other {
                add_once(
                    &mut i0.other,
                    cloud,
                    v,
                    |x| x.to_string(),
                    || format!("the {cloud} images"),
                    &clash,
                )?;
            }
        }
    }
    match (&mut a0.rhel_coreos_extensions, &add.rhel_coreos_extensions) {
        (_, None) => {}
        (slot @ None, Some(x)) => *slot = Some(x.clone()),
        (Some(x0), Some(x)) if *x0 == *x => {}
        (Some(x0), Some(x)) => {
            return Err(clash(
                "rhel-coreos-extensions".into(),
                x0.to_string(),
                x.to_string(),
            ));
        }
    }
    Ok(())
}

/// `value` under `key` in `map`: added if absent, kept if equal; a
/// different value there is `clash`, `what` naming it and `show` each side.
fn add_once<V: PartialEq + Clone>(
    map: &mut BTreeMap<String, V>,
    key: &str,
    value: &V,
    show: impl Fn(&V) -> String,
    what: impl FnOnce() -> String,
    clash: &dyn Fn(String, String, String) -> anyhow::Error,
) -> Result<()> {
    match map.get(key) {
        None => {
            map.insert(key.to_string(), value.clone());
        }
        Some(x) if x == value => {}
        Some(x) => return Err(clash(what(), show(x), show(value))),
    }
    Ok(())
}

fn release_of(a: &Arch) -> &str {
    a.artifacts
        .values()
        .next()
        .map(|p| p.release.as_str())
        .unwrap_or("-")
}

#[cfg(test)]
mod tests {
    use crate::publish::merge::tests::{one, refusal, stream};
    use crate::publish::merge::{merge, Doc};
    use crate::publish::stream::Artifact;
    use crate::util::arch::Arch;
    use std::collections::BTreeMap;
    use std::path::Path;

    #[test]
    fn platform_split_runs_of_one_build_unite() {
        // One build, three runs: metal's disk, the live ISO (also under
        // metal), and vmware; stamped a minute apart.
        let run = |dir: &str, platform: &str, format: &str, file: &str, sha: char, stamp: &str| {
            let mut s = stream("s", Arch::X86_64, file, "9.6", stamp);
            let a = s.architectures.get_mut("x86_64").unwrap();
            let mut p = a.artifacts.remove("metal").unwrap();
            let art = p.formats.remove("raw.gz").unwrap().remove("disk").unwrap();
            let art = Artifact {
                sha256: sha.to_string().repeat(64),
                ..art
            };
            p.formats = BTreeMap::from([(
                format.to_string(),
                BTreeMap::from([("disk".to_string(), art)]),
            )]);
            a.artifacts.insert(platform.to_string(), p);
            one(&format!("/w/{dir}/stream.json"), s)
        };
        let metal = || {
            run(
                "m",
                "metal",
                "raw.gz",
                "m.raw.gz",
                'a',
                "2026-01-01T00:00:00Z",
            )
        };
        let iso = || run("i", "metal", "iso", "l.iso", 'b', "2026-01-01T00:02:00Z");
        let vmware = || run("v", "vmware", "ova", "v.ova", 'c', "2026-01-01T00:01:00Z");
        let d = merge(&[metal(), iso(), vmware()], Path::new("/w"), None, None).unwrap();
        let Doc::One(s) = d else { panic!() };
        let a = &s.architectures["x86_64"];
        let platforms: Vec<&String> = a.artifacts.keys().collect();
        assert_eq!(platforms, ["metal", "vmware"]);
        let formats: Vec<&String> = a.artifacts["metal"].formats.keys().collect();
        assert_eq!(formats, ["iso", "raw.gz"]);
        assert_eq!(
            a.artifacts["metal"].formats["iso"]["disk"].location,
            "i/l.iso"
        );
        assert_eq!(s.metadata.last_modified, "2026-01-01T00:02:00Z");
        // Whatever the order, the same document.
        let d2 = merge(&[vmware(), iso(), metal()], Path::new("/w"), None, None).unwrap();
        let Doc::One(s2) = d2 else { panic!() };
        assert_eq!(s, s2);
        // The same run twice is one.
        assert!(merge(&[metal(), metal()], Path::new("/w"), None, None).is_ok());
        // One file of one platform that differs: both inputs named.
        let other = run("o", "metal", "raw.gz", "m.raw.gz", 'd', "t");
        let e = refusal(&[metal(), other], "/w", None);
        assert!(
            e.contains("platform metal format raw.gz disk is in both /w/m/stream.json and /w/o/stream.json"),
            "{e}"
        );
        // Another release of the arch on another platform: two builds.
        let mut later = vmware();
        if let Doc::One(s) = &mut later.doc {
            for p in s
                .architectures
                .get_mut("x86_64")
                .unwrap()
                .artifacts
                .values_mut()
            {
                p.release = "9.7".into();
            }
        }
        let e = refusal(&[metal(), later], "/w", None);
        assert!(e.contains("from two builds (release 9.6 and 9.7)"), "{e}");
        assert!(e.contains("/w/m/stream.json and /w/v/stream.json"), "{e}");
    }
}
