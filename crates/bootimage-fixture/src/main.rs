//! bootimage-fixture: builds the test release images (see fixtures/build.sh).
//! Writes OCI image layouts from directories, merges layouts, and exposes
//! ostree-ext's own CLI (`bootimage-fixture ostree-ext container encapsulate ...`).
//!
//! This file reads the subcommand and dispatches it; each subcommand lives
//! in its own module, over `layout` (blobs, tags, manifests) and `layer`
//! (layer tars).
mod add;
mod chunkah;
mod derive;
mod layer;
mod layout;
mod opts;
mod tags;

use anyhow::Result;
use opts::{usage, Opts};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let Some(cmd) = args.get(1) else { usage() };
    match cmd.as_str() {
        "add-image" => add::add_image(&args[2..]),
        "derive" => derive::derive(&args[2..]),
        "set-arch" => derive::set_arch(&args[2..]),
        "relabel" => derive::relabel(&args[2..]),
        "index" => tags::index(&args[2..]),
        "merge" => tags::merge(&args[2..]),
        "chunkah" => chunkah::chunkah(&args[2..]),
        "digest" => {
            let o = Opts::parse(&args[2..], &["--layout", "--tag"], &[]);
            let d = layout::find_tag(&o.path("--layout"), &o.need("--tag"))?;
            println!("{}", d["digest"].as_str().unwrap_or(""));
            Ok(())
        }
        "ostree-ext" => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let it = std::iter::once("ostree-ext".to_string()).chain(args[2..].iter().cloned());
            rt.block_on(ostree_ext::cli::run_from_iter(it))
        }
        _ => usage(),
    }
}
