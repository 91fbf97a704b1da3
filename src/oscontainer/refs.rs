//! The refs ostree-ext leaves in a node's repo for a pulled image, as the
//! cache repo holds them: the layer refs of a merge commit and the image ref
//! a node's origin names. In: the cache repo, a merge commit, a pullspec;
//! out: [`ImageRefs`].
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::Path;

/// The refs a node's ostree-ext leaves in its repo for a pulled image
/// (bootc `crates/ostree-ext/src/container/store.rs`: `ref_for_image`,
/// `ref_for_layer`): one per layer of the manifest and one for the image.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ImageRefs {
    /// `ostree/container/blob/<escaped layer digest>`, in manifest order,
    /// as the cache repo holds them (copied with their commits).
    pub layers: Vec<String>,
    /// `ostree/container/image/<escaped imgref>` for the image reference a
    /// node's origin names, pointing at the merge commit.
    pub image: String,
}

/// The image and layer refs of the merge commit `commit` in `repo` (the
/// cache's), with the image ref under the registry pullspec a node's
/// origin names (`ostree-unverified-registry:<pullspec>`).
pub fn image_refs(repo: &Path, commit: &str, pullspec: &str) -> Result<ImageRefs> {
    use ostree_ext::container::{store, ImageReference, Transport};
    use ostree_ext::refescape::prefix_escape_for_ref;
    let r = ostree_ext::ostree::Repo::new_for_path(repo);
    r.open(ostree_ext::gio::Cancellable::NONE)
        .with_context(|| format!("opening the cache repo {}", repo.display()))?;
    // What bootc's query_image_commit reads: the manifest in the merge
    // commit's metadata, and a commit behind the base layer's ref.
    let state = store::query_image_commit(&r, commit)
        .with_context(|| format!("reading the image metadata of merge commit {commit}"))?;
    let mut layers = Vec::new();
    for l in state.manifest.layers() {
        let name = prefix_escape_for_ref(LAYER_REF_PREFIX, l.digest().as_ref())?;
        if r.resolve_rev(&name, true)?.is_none() {
            bail!(
                "the cache repo {} lacks the layer ref {name} of merge commit {commit} (an interrupted import or gc?): run `bootimage-gen gc` and again",
                repo.display()
            );
        }
        layers.push(name);
    }
    let imgref = ImageReference {
        transport: Transport::Registry,
        name: pullspec.to_string(),
    };
    Ok(ImageRefs {
        layers,
        image: prefix_escape_for_ref(IMAGE_REF_PREFIX, &imgref.to_string())?,
    })
}

/// ostree-ext's ref prefixes (`store.rs` `LAYER_PREFIX`, `IMAGE_PREFIX`).
pub const LAYER_REF_PREFIX: &str = "ostree/container/blob";
pub const IMAGE_REF_PREFIX: &str = "ostree/container/image";
