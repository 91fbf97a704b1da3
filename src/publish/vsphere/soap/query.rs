//! The inventory queries of a [`Client`]: SearchIndex.FindByInventoryPath
//! and FindChild (a path or a name in, a [`MoRef`] or nothing out),
//! PropertyCollector.RetrieveProperties (objects and property paths in,
//! an [`ObjectContent`] per object out), and the container-view listing of
//! what a folder holds by kind.
use anyhow::{anyhow, Result};

use super::session::Client;
use super::types::{moref, MoRef};
use crate::util::xml::{child_text, children, esc, find};

/// An object's properties, by path, as nodes' raw XML or text.
pub struct ObjectContent {
    pub obj: MoRef,
    /// (property path, text of `val`, xsi:type of `val`, raw XML of `val`)
    pub props: Vec<(String, String, String, String)>,
}

impl ObjectContent {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.props
            .iter()
            .find(|p| p.0 == name)
            .map(|p| p.1.as_str())
    }
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.props
            .iter()
            .find(|p| p.0 == name)
            .map(|p| p.3.as_str())
    }
}

impl Client {
    /// SearchIndex.FindByInventoryPath: `None` when nothing is there.
    pub fn find_by_inventory_path(&mut self, path: &str) -> Result<Option<MoRef>> {
        let body = format!(
            "<FindByInventoryPath xmlns=\"urn:vim25\">{}<inventoryPath>{}</inventoryPath></FindByInventoryPath>",
            self.sc.search_index.xml("_this"),
            esc(path)
        );
        let r = self.call(&body)?;
        let doc = r.doc()?;
        Ok(find(doc.root(), "returnval").map(moref))
    }

    /// SearchIndex.FindChild: an entity named `name` directly in `parent`.
    pub fn find_child(&mut self, parent: &MoRef, name: &str) -> Result<Option<MoRef>> {
        let body = format!(
            "<FindChild xmlns=\"urn:vim25\">{}{}<name>{}</name></FindChild>",
            self.sc.search_index.xml("_this"),
            parent.xml("entity"),
            esc(name)
        );
        let r = self.call(&body)?;
        let doc = r.doc()?;
        Ok(find(doc.root(), "returnval").map(moref))
    }

    /// PropertyCollector.RetrieveProperties of `paths` on `objs` (all of
    /// type `kind`).
    pub fn retrieve(
        &mut self,
        kind: &str,
        objs: &[MoRef],
        paths: &[&str],
    ) -> Result<Vec<ObjectContent>> {
        if objs.is_empty() {
            return Ok(Vec::new());
        }
        let mut spec = format!("<propSet><type>{}</type>", esc(kind));
        for p in paths {
            spec.push_str(&format!("<pathSet>{}</pathSet>", esc(p)));
        }
        spec.push_str("</propSet>");
        for o in objs {
            spec.push_str(&format!("<objectSet>{}</objectSet>", o.xml("obj")));
        }
        let body = format!(
            "<RetrieveProperties xmlns=\"urn:vim25\">{}<specSet>{spec}</specSet></RetrieveProperties>",
            self.sc.property_collector.xml("_this")
        );
        let r = self.call(&body)?;
        let doc = r.doc()?;
        let text = r.text();
        let xsi = "http://www.w3.org/2001/XMLSchema-instance";
        let mut out = Vec::new();
        for rv in doc
            .descendants()
            .filter(|n| n.is_element() && n.tag_name().name() == "returnval")
        {
            let obj = children(rv, "obj")
                .next()
                .map(moref)
                .unwrap_or_else(|| MoRef::new("", ""));
            let mut props = Vec::new();
            for ps in children(rv, "propSet") {
                let name = child_text(ps, "name").unwrap_or_default();
                if let Some(v) = children(ps, "val").next() {
                    let t = v.attribute((xsi, "type")).unwrap_or("").to_string();
                    let txt = v.text().unwrap_or("").to_string();
                    props.push((name, txt, t, text[v.range()].to_string()));
                }
            }
            out.push(ObjectContent { obj, props });
        }
        Ok(out)
    }

    /// One property's MoRef list (`ArrayOfManagedObjectReference`).
    pub fn refs(&mut self, obj: &MoRef, path: &str) -> Result<Vec<MoRef>> {
        let oc = self.retrieve(&obj.kind.clone(), std::slice::from_ref(obj), &[path])?;
        let Some(raw) = oc.first().and_then(|o| o.raw(path)) else {
            return Ok(Vec::new());
        };
        let doc = roxmltree::Document::parse(raw)?;
        Ok(doc
            .root_element()
            .children()
            .filter(|c| c.is_element() && c.attribute("type").is_some())
            .map(moref)
            .collect())
    }

    /// ViewManager.CreateContainerView over `root` for `kinds`, the names of
    /// what it holds (and their references), then DestroyView.
    pub fn list(&mut self, root: &MoRef, kinds: &[&str]) -> Result<Vec<(String, MoRef)>> {
        let mut ty = String::new();
        for k in kinds {
            ty.push_str(&format!("<type>{}</type>", esc(k)));
        }
        let body = format!(
            "<CreateContainerView xmlns=\"urn:vim25\">{}{}{ty}<recursive>true</recursive></CreateContainerView>",
            self.sc.view_manager.xml("_this"),
            root.xml("container")
        );
        let r = self.call(&body)?;
        let view = {
            let doc = r.doc()?;
            find(doc.root(), "returnval")
                .map(moref)
                .ok_or_else(|| anyhow!("CreateContainerView returned nothing"))?
        };
        let objs = self.refs(&view, "view");
        let _ = self.call(&format!(
            "<DestroyView xmlns=\"urn:vim25\">{}</DestroyView>",
            view.xml("_this")
        ));
        let objs = objs?;
        let mut out = Vec::new();
        for k in kinds {
            let these: Vec<MoRef> = objs.iter().filter(|o| o.kind == *k).cloned().collect();
            for oc in self.retrieve(k, &these, &["name"])? {
                out.push((oc.get("name").unwrap_or("").to_string(), oc.obj));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
}
