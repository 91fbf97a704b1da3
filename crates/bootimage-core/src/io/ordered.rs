//! The one ordered worker pool of the encoders (compressed streams, VMDK
//! grains): `workers` scoped threads take items `0..items` in order, each
//! first taking a buffer from a [`BufPool`] (so the lowest unfinished item
//! always belongs to a running worker and memory stays bounded), process
//! them with per-thread state, and the consumer receives the results in item
//! order through [`Ordered::next`]. When the consumer returns (done, error
//! or cancellation) the workers are stopped: the abort flag is raised and the
//! buffer pool closed, so that none waits for a buffer any more.
use super::buffers::BufPool;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver};

/// The results, in item order.
pub(crate) struct Ordered<T> {
    rx: Receiver<(usize, Result<T>)>,
    pending: BTreeMap<usize, T>,
    next: usize,
}

impl<T> Ordered<T> {
    /// The result of the next item (waiting for it); the first error of any
    /// worker ends the run.
    pub(crate) fn next(&mut self) -> Result<T> {
        loop {
            if let Some(d) = self.pending.remove(&self.next) {
                self.next += 1;
                return Ok(d);
            }
            match self.rx.recv() {
                Ok((i, Ok(d))) => {
                    self.pending.insert(i, d);
                }
                Ok((_, Err(e))) => return Err(e),
                Err(_) => bail!("the compression threads stopped early"),
            }
        }
    }
}

/// Raises the abort flag and closes the pool when dropped.
struct Stop<'a> {
    abort: &'a AtomicBool,
    pool: &'a BufPool,
}

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.abort.store(true, Ordering::Relaxed);
        self.pool.close();
    }
}

/// Run `work` over items `0..items` on `workers` threads named
/// `<name>-<n>`, each with its own state from `init`, handing every item a
/// buffer of `pool`; `consume` takes the results in order.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<S, T, R>(
    name: &str,
    workers: usize,
    items: usize,
    pool: &BufPool,
    init: impl Fn() -> Result<S> + Sync,
    work: impl Fn(&mut S, usize, Vec<u8>) -> Result<T> + Sync,
    consume: impl FnOnce(&mut Ordered<T>) -> Result<R>,
) -> Result<R>
where
    T: Send,
{
    let cursor = AtomicUsize::new(0);
    let abort = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<R> {
        // On any return, stop the workers before the scope joins them.
        let _stop = Stop {
            abort: &abort,
            pool,
        };
        let (tx, rx) = channel::<(usize, Result<T>)>();
        for n in 0..workers {
            let tx = tx.clone();
            let (cursor, abort, init, work) = (&cursor, &abort, &init, &work);
            std::thread::Builder::new()
                .name(format!("{name}-{n}"))
                .spawn_scoped(s, move || {
                    let mut state = match init() {
                        Ok(st) => st,
                        Err(e) => {
                            let _ = tx.send((usize::MAX, Err(e)));
                            return;
                        }
                    };
                    while !abort.load(Ordering::Relaxed) {
                        let Some(buf) = pool.get() else {
                            return;
                        };
                        let k = cursor.fetch_add(1, Ordering::Relaxed);
                        if k >= items {
                            pool.put(buf);
                            return;
                        }
                        let res = work(&mut state, k, buf);
                        if tx.send((k, res)).is_err() {
                            return;
                        }
                    }
                })
                .context("starting a compression thread")?;
        }
        drop(tx);
        consume(&mut Ordered {
            rx,
            pending: BTreeMap::new(),
            next: 0,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_in_order_and_errors_stop_the_run() {
        let pool = BufPool::new(16, 6);
        let got = run(
            "t",
            4,
            100,
            &pool,
            || Ok(0usize),
            |seen, k, buf| {
                *seen += 1;
                pool.put(buf);
                // Later items finish first.
                std::thread::sleep(std::time::Duration::from_micros(((100 - k) * 10) as u64));
                Ok(k * 2)
            },
            |o| (0..100).map(|_| o.next()).collect::<Result<Vec<_>>>(),
        )
        .unwrap();
        assert_eq!(got, (0..100).map(|k| k * 2).collect::<Vec<_>>());

        let pool = BufPool::new(16, 6);
        let e = run(
            "t",
            3,
            50,
            &pool,
            || Ok(()),
            |_, k, buf| {
                pool.put(buf);
                if k == 7 {
                    bail!("item {k} failed")
                }
                Ok(k)
            },
            |o| (0..50).map(|_| o.next()).collect::<Result<Vec<_>>>(),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("item 7 failed"), "{e:#}");
    }
}
