//! The vCenter Task calls of a [`Client`]: waiting for a Task (its
//! reference in, Ok or its fault's message out), and the changes `vsphere
//! import` makes to the new VM and to an old template: ReconfigVM_Task,
//! Rename_Task and Destroy_Task (Tasks, waited on), and MarkAsTemplate (a
//! direct call).
use anyhow::{anyhow, bail, Result};
use std::time::Duration;

use super::session::Client;
use super::types::{moref, MoRef};
use crate::util::xml::{esc, find};

impl Client {
    /// Wait for a Task: Ok on success, its fault's message otherwise.
    pub fn wait_task(&mut self, task: &MoRef) -> Result<()> {
        loop {
            let oc = self.retrieve(
                "Task",
                std::slice::from_ref(task),
                &["info.state", "info.error"],
            )?;
            let o = oc.first().ok_or_else(|| anyhow!("task {task} vanished"))?;
            match o.get("info.state").unwrap_or("") {
                "success" => return Ok(()),
                "error" => {
                    let raw = o.raw("info.error").unwrap_or("");
                    let msg = roxmltree::Document::parse(raw)
                        .ok()
                        .and_then(|d| {
                            find(d.root(), "localizedMessage")
                                .and_then(|m| m.text().map(String::from))
                        })
                        .unwrap_or_else(|| "no message".into());
                    bail!("{msg}");
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn task_call(&mut self, body: String) -> Result<()> {
        let r = self.call(&body)?;
        let task = {
            let doc = r.doc()?;
            find(doc.root(), "returnval")
                .map(moref)
                .ok_or_else(|| anyhow!("no task returned"))?
        };
        self.wait_task(&task)
    }

    /// VirtualMachine.ReconfigVM_Task: annotation, firmware and secure boot.
    pub fn reconfigure(
        &mut self,
        vm: &MoRef,
        annotation: &str,
        firmware: Option<&str>,
        secure_boot: Option<bool>,
    ) -> Result<()> {
        let mut spec = format!("<annotation>{}</annotation>", esc(annotation));
        if let Some(f) = firmware {
            spec.push_str(&format!("<firmware>{}</firmware>", esc(f)));
        }
        if let Some(sb) = secure_boot {
            spec.push_str(&format!(
                "<bootOptions><efiSecureBootEnabled>{sb}</efiSecureBootEnabled></bootOptions>"
            ));
        }
        self.task_call(format!(
            "<ReconfigVM_Task xmlns=\"urn:vim25\">{}<spec>{spec}</spec></ReconfigVM_Task>",
            vm.xml("_this")
        ))
    }

    /// ManagedEntity.Rename_Task.
    pub fn rename(&mut self, obj: &MoRef, name: &str) -> Result<()> {
        self.task_call(format!(
            "<Rename_Task xmlns=\"urn:vim25\">{}<newName>{}</newName></Rename_Task>",
            obj.xml("_this"),
            esc(name)
        ))
    }

    /// VirtualMachine.MarkAsTemplate.
    pub fn mark_as_template(&mut self, vm: &MoRef) -> Result<()> {
        self.call(&format!(
            "<MarkAsTemplate xmlns=\"urn:vim25\">{}</MarkAsTemplate>",
            vm.xml("_this")
        ))
        .map(|_| ())
    }

    /// ManagedEntity.Destroy_Task.
    pub fn destroy(&mut self, obj: &MoRef) -> Result<()> {
        self.task_call(format!(
            "<Destroy_Task xmlns=\"urn:vim25\">{}</Destroy_Task>",
            obj.xml("_this")
        ))
    }
}
