//! The merge commit ostree-ext writes on import, made canonical
//! (docs/contract.md §9): ostree-ext 0.15 builds the commit's metadata
//! (`a{sv}`) and the JSON it stores there (`ostree.manifest`,
//! `ostree.container.image-config`) from hash maps, so two imports of the
//! same image give the same tree under commits with other checksums, and
//! the deployment's directory (`<commit>.0`), its `ostree/boot.*` links
//! and the sysroot repo differ with them (fixtures/UPSTREAM.md §31). The
//! commit is rewritten with every string-keyed dictionary sorted by key
//! and that JSON re-serialised with sorted keys; its tree, parent,
//! subject, body and time are kept, and the image ref is moved to it.
//! ostree-ext and bootc read these keys by name, never by position.
use anyhow::{anyhow, Context, Result};
use ostree_ext::glib::{prelude::*, Variant};
use ostree_ext::ostree;

/// The metadata keys whose string values are JSON (ostree-ext
/// `container/store.rs` `META_MANIFEST`, `META_CONFIG`).
const JSON_KEYS: [&str; 2] = ["ostree.manifest", "ostree.container.image-config"];

/// Rewrite `commit` in `repo` canonically and point `image_ref` at it;
/// returns its checksum (the same when it already was canonical).
pub fn canonical_commit(repo: &ostree::Repo, commit: &str, image_ref: &str) -> Result<String> {
    let (v, _) = repo
        .load_commit(commit)
        .with_context(|| format!("reading commit {commit}"))?;
    let c = canonical(&v)?;
    if c == v {
        return Ok(commit.to_string());
    }
    let none = ostree::gio::Cancellable::NONE;
    repo.prepare_transaction(none)
        .context("starting a transaction in the cache repo")?;
    let written = (|| -> Result<String> {
        let sum = repo
            .write_metadata(ostree::ObjectType::Commit, None, &c, none)
            .context("writing the canonical commit")?;
        let sum = sum.to_hex();
        repo.transaction_set_ref(None, image_ref, Some(&sum));
        repo.commit_transaction(none)
            .context("committing the transaction")?;
        Ok(sum)
    })();
    if written.is_err() {
        let _ = repo.abort_transaction(none);
    }
    let sum = written.with_context(|| format!("rewriting commit {commit} canonically"))?;
    tracing::info!("merge commit {commit} rewritten canonically as {sum}");
    Ok(sum)
}

/// The commit variant with its metadata (child 0) canonical.
fn canonical(commit: &Variant) -> Result<Variant> {
    let meta = commit.child_value(0);
    let mut entries = Vec::new();
    for i in 0..meta.n_children() {
        let e = meta.child_value(i);
        let key = e.child_value(0);
        let k = key.str().unwrap_or_default().to_string();
        let mut value = sorted(&e.child_value(1).as_variant().context("a{sv} value")?);
        if JSON_KEYS.contains(&k.as_str()) {
            if let Some(text) = value.str() {
                let j: serde_json::Value = serde_json::from_str(text)
                    .map_err(|e| anyhow!("metadata {k} is not JSON: {e}"))?;
                value = sorted_json(j).to_string().to_variant();
            }
        }
        entries.push((
            k,
            Variant::from_dict_entry(&key, &Variant::from_variant(&value)),
        ));
    }
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let meta = Variant::array_from_iter_with_type(
        meta.type_().element(),
        entries.into_iter().map(|e| e.1),
    );
    let mut kids = vec![meta];
    kids.extend((1..commit.n_children()).map(|i| commit.child_value(i)));
    Ok(Variant::tuple_from_iter(kids).normal_form())
}

/// `v` with every dictionary keyed by strings sorted by key, at any depth.
fn sorted(v: &Variant) -> Variant {
    let ty = v.type_();
    if ty.is_variant() {
        return match v.as_variant() {
            Some(inner) => Variant::from_variant(&sorted(&inner)),
            None => v.clone(),
        };
    }
    if !ty.is_container() || ty.is_maybe() {
        return v.clone();
    }
    let mut kids: Vec<Variant> = (0..v.n_children())
        .map(|i| sorted(&v.child_value(i)))
        .collect();
    if ty.is_array() {
        let elem = ty.element();
        if elem.is_dict_entry() && elem.key().as_str() == "s" {
            kids.sort_by(|a, b| {
                let (x, y) = (a.child_value(0), b.child_value(0));
                x.str()
                    .unwrap_or("")
                    .as_bytes()
                    .cmp(y.str().unwrap_or("").as_bytes())
            });
        }
        return Variant::array_from_iter_with_type(elem, kids);
    }
    if ty.is_dict_entry() {
        return Variant::from_dict_entry(&kids[0], &kids[1]);
    }
    Variant::tuple_from_iter(kids)
}

/// `v` with every object's keys in sorted order (serde_json keeps
/// insertion order in this build).
fn sorted_json(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let mut kv: Vec<(String, Value)> = m.into_iter().collect();
            kv.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(kv.into_iter().map(|(k, v)| (k, sorted_json(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted_json).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ostree_ext::glib;

    fn commit_with(meta: &[(&str, Variant)]) -> Variant {
        let d = glib::VariantDict::new(None);
        for (k, v) in meta {
            d.insert_value(k, v);
        }
        let meta = d.end();
        let empty = Variant::array_from_fixed_array::<u8>(&[]);
        let related = Variant::array_from_iter_with_type(
            glib::VariantTy::new("(say)").unwrap(),
            Vec::<Variant>::new(),
        );
        Variant::tuple_from_iter([
            meta,
            empty.clone(),
            related,
            "".to_variant(),
            "".to_variant(),
            1_795_219_200u64.to_be().to_variant(),
            Variant::array_from_fixed_array::<u8>(&[1; 32]),
            Variant::array_from_fixed_array::<u8>(&[2; 32]),
        ])
        .normal_form()
    }

    #[test]
    fn two_orders_of_the_same_metadata_give_one_commit_and_the_content_stays() {
        let filtered = |order: &[&str]| {
            let d = glib::VariantDict::new(None);
            for k in order {
                d.insert_value(k, &glib::VariantDict::new(None).end());
            }
            d.end()
        };
        let a = commit_with(&[
            (
                "ostree.manifest",
                r#"{"b":1,"a":{"y":2,"x":[{"q":1,"p":2}]}}"#.to_variant(),
            ),
            ("ostree.importer.version", "0.15.3".to_variant()),
            ("ostree.tar-filtered", filtered(&["l2", "l1"])),
        ]);
        let b = commit_with(&[
            ("ostree.tar-filtered", filtered(&["l1", "l2"])),
            ("ostree.importer.version", "0.15.3".to_variant()),
            (
                "ostree.manifest",
                r#"{"a":{"x":[{"p":2,"q":1}],"y":2},"b":1}"#.to_variant(),
            ),
        ]);
        assert_ne!(a, b, "the two inputs differ, or the test proves nothing");
        let (ca, cb) = (canonical(&a).unwrap(), canonical(&b).unwrap());
        assert_eq!(ca, cb);
        // Canonical is a fixed point, and the values are kept by name.
        assert_eq!(canonical(&ca).unwrap(), ca);
        let d = glib::VariantDict::new(Some(&ca.child_value(0)));
        let m: String = d.lookup("ostree.manifest").unwrap().unwrap();
        assert_eq!(m, r#"{"a":{"x":[{"p":2,"q":1}],"y":2},"b":1}"#);
        for i in 1..8 {
            assert_eq!(ca.child_value(i), a.child_value(i), "child {i}");
        }
        // Another value is another commit.
        let c = commit_with(&[("ostree.importer.version", "0.15.4".to_variant())]);
        assert_ne!(canonical(&c).unwrap(), ca);
    }

    #[test]
    fn metadata_that_should_be_json_and_is_not_is_an_error_naming_the_key() {
        let a = commit_with(&[("ostree.manifest", "{not json".to_variant())]);
        let e = canonical(&a).unwrap_err();
        assert!(format!("{e:#}").contains("ostree.manifest"), "{e:#}");
    }
}
