//! A minimal QMP client for the boot harness: how many requests the
//! guest has made of its disks so far (`query-blockstats`), so that a
//! boot whose console is silent but whose disks are being read (SeaBIOS
//! and GRUB on a metal disk print nothing until the kernel does, and on a
//! loaded TCG host that lasts minutes) is told from one that has stopped.
//!
//! Protocol (qemu's docs/interop/qmp-spec.rst): on connect the server
//! sends a greeting line; the client sends `qmp_capabilities`, then
//! commands; each reply is one JSON line with `return` (or `error`),
//! and asynchronous `event` lines may come between.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects to qemu's `-qmp unix:PATH,server=on,wait=off` and
    /// negotiates; `None` while the socket is not there yet or qemu does
    /// not answer within `wait`.
    pub fn connect(path: &Path, wait: Duration) -> Option<Qmp> {
        let s = UnixStream::connect(path).ok()?;
        s.set_read_timeout(Some(wait)).ok()?;
        s.set_write_timeout(Some(wait)).ok()?;
        let mut q = Qmp {
            reader: BufReader::new(s.try_clone().ok()?),
            writer: s,
        };
        let greeting = q.line()?;
        greeting.get("QMP")?;
        q.execute("qmp_capabilities")?;
        Some(q)
    }

    fn line(&mut self) -> Option<serde_json::Value> {
        let mut l = String::new();
        match self.reader.read_line(&mut l) {
            Ok(n) if n > 0 => serde_json::from_str(&l).ok(),
            _ => None,
        }
    }

    /// The `return` of `command`; `None` on an error reply or no answer.
    fn execute(&mut self, command: &str) -> Option<serde_json::Value> {
        writeln!(self.writer, "{}", serde_json::json!({ "execute": command })).ok()?;
        loop {
            let v = self.line()?;
            if v.get("event").is_some() {
                continue;
            }
            return v.get("return").cloned();
        }
    }

    /// Read and write requests completed on all the guest's block
    /// devices so far.
    pub fn disk_requests(&mut self) -> Option<u64> {
        let r = self.execute("query-blockstats")?;
        Some(requests(&r))
    }
}

/// The sum of `rd_operations` and `wr_operations` over a
/// `query-blockstats` return (devices, and their `parent` nodes not
/// counted twice: only each entry's own `stats`).
fn requests(r: &serde_json::Value) -> u64 {
    r.as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            let s = &d["stats"];
            s["rd_operations"].as_u64().unwrap_or(0) + s["wr_operations"].as_u64().unwrap_or(0)
        })
        .sum()
}
