//! `gc`: remove what killed runs left (work dirs with their VM, mounts and
//! loop devices; `.partial` files in output directories), then prune cache
//! entries by age and/or size, never one a live run uses.
use crate::cli::GcArgs;
use crate::oscontainer::{gc, Cache};
use crate::sys::stale;
use crate::util::space::mib;
use anyhow::Result;

pub fn run(a: GcArgs) -> Result<()> {
    let cache = a.cache_dir.clone().unwrap_or_else(Cache::default_dir);
    let t = std::time::Instant::now();
    let mut swept = stale::Swept::default();
    for out in &a.output {
        // Only while no run writes there.
        match crate::util::lock::DirLock::try_lock(out, "output directory") {
            Ok(_l) if a.dry_run => {
                let n = std::fs::read_dir(out)
                    .map(|rd| {
                        rd.flatten()
                            .filter(|e| {
                                let n = e.file_name().to_string_lossy().into_owned();
                                n.starts_with('.') && n.ends_with(stale::PARTIAL_SUFFIX)
                            })
                            .count()
                    })
                    .unwrap_or(0);
                swept.partials += n;
            }
            Ok(_l) => swept.add(stale::sweep_output(out)),
            Err(e) => println!("skipped: {e:#}"),
        }
    }
    if cache.is_dir() {
        if a.dry_run {
            for (d, why) in stale::stale_dirs(&cache) {
                println!("would remove {} (its owner {why})", d.display());
                swept.dirs += 1;
                swept.bytes += stale::du(&d);
            }
        } else {
            swept.add(stale::sweep_cache(&cache)?);
        }
    }
    println!(
        "{}leftovers of killed runs: {swept}",
        if a.dry_run { "would remove " } else { "" }
    );
    if a.max_age.is_some() || a.max_size.is_some() {
        let p = gc::prune(
            &cache,
            &gc::Policy {
                max_age: a.max_age,
                max_size: a.max_size,
                dry_run: a.dry_run,
            },
        )?;
        for r in &p.removed {
            println!("{} {r}", if a.dry_run { "would remove" } else { "removed" });
        }
        for r in &p.in_use {
            println!("kept {r}: in use by a running bootimage-gen");
        }
        if !p.pruned_objects {
            println!("an import was running: unused objects stay until the next gc");
        }
        println!(
            "cache {}: {} before, {} after",
            cache.display(),
            mib(p.size_before),
            mib(p.size_after)
        );
    }
    tracing::info!("gc took {:.1?}", t.elapsed());
    Ok(())
}
