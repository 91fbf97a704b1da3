//! The pieces every streaming writer shares: a bounded buffer pool, the
//! hashing thread, `is_zero`, and [`Written`], what a hashed write produced.
//! The sparse writer, the chunked compressor and the ordered worker pool all
//! build on these; this file imports none of them.
use crate::util::sha256::Sha256;
use anyhow::{anyhow, Context, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Size of the shared zero block the hashing thread feeds for holes.
const ZERO_BLOCK: usize = 1 << 20;

/// True if every byte of `buf` is zero. OR-folds 64-byte blocks, which the
/// compiler vectorises, and stops at the first non-zero block.
pub fn is_zero(buf: &[u8]) -> bool {
    let mut blocks = buf.chunks_exact(64);
    let blocks_zero = blocks.all(|b| b.iter().fold(0u8, |a, &x| a | x) == 0);
    blocks_zero && blocks.remainder().iter().all(|&b| b == 0)
}

/// A fixed number of equally sized buffers, allocated on first use. `get`
/// blocks while all are out, which is what bounds memory in the pipelines.
pub struct BufPool {
    state: Mutex<PoolState>,
    cv: Condvar,
    buf_len: usize,
    max: usize,
}

struct PoolState {
    free: Vec<Vec<u8>>,
    allocated: usize,
    closed: bool,
}

impl BufPool {
    pub fn new(buf_len: usize, max: usize) -> Arc<Self> {
        Arc::new(BufPool {
            state: Mutex::new(PoolState {
                free: Vec::new(),
                allocated: 0,
                closed: false,
            }),
            cv: Condvar::new(),
            buf_len,
            max: max.max(1),
        })
    }

    /// A buffer of `buf_len` bytes (contents unspecified), or `None` once
    /// the pool is closed.
    pub fn get(&self) -> Option<Vec<u8>> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if st.closed {
                return None;
            }
            if let Some(b) = st.free.pop() {
                return Some(b);
            }
            if st.allocated < self.max {
                st.allocated += 1;
                return Some(vec![0u8; self.buf_len]);
            }
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    pub fn put(&self, buf: Vec<u8>) {
        debug_assert_eq!(buf.len(), self.buf_len);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.free.push(buf);
        drop(st);
        self.cv.notify_one();
    }

    /// Wake every waiter and make `get` fail from now on (error paths).
    pub fn close(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.closed = true;
        st.free.clear();
        drop(st);
        self.cv.notify_all();
    }
}

/// What the hashing thread is fed, in stream order.
enum Piece {
    /// The first `len` bytes of a pool buffer; the buffer goes back to the
    /// pool once hashed.
    Data(Vec<u8>, usize),
    /// A run of zero bytes.
    Zeros(u64),
}

/// SHA-256 of a byte stream on its own thread, so hashing overlaps reading,
/// compressing and writing. Runs of zeros cost no memory.
pub struct HashThread {
    tx: Option<SyncSender<Piece>>,
    handle: Option<JoinHandle<(String, u64)>>,
    cancel: Arc<AtomicBool>,
}

impl HashThread {
    pub fn spawn(pool: Arc<BufPool>, queue: usize) -> Result<Self> {
        let (tx, rx) = sync_channel::<Piece>(queue.max(1));
        let cancel = Arc::new(AtomicBool::new(false));
        let stop = cancel.clone();
        let handle = std::thread::Builder::new()
            .name("sha256".into())
            .spawn(move || {
                let mut h = Sha256::new();
                let mut total = 0u64;
                let zeros = vec![0u8; ZERO_BLOCK];
                for piece in rx {
                    match piece {
                        Piece::Data(buf, len) => {
                            h.update(&buf[..len]);
                            total += len as u64;
                            pool.put(buf);
                        }
                        Piece::Zeros(mut n) => {
                            total += n;
                            while n > 0 {
                                if stop.load(Ordering::Relaxed) {
                                    return (String::new(), 0);
                                }
                                let k = n.min(ZERO_BLOCK as u64) as usize;
                                h.update(&zeros[..k]);
                                n -= k as u64;
                            }
                        }
                    }
                }
                (hex::encode(h.finalize()), total)
            })
            .context("starting the hashing thread")?;
        Ok(HashThread {
            tx: Some(tx),
            handle: Some(handle),
            cancel,
        })
    }

    fn send(&self, p: Piece) -> Result<()> {
        self.tx
            .as_ref()
            .expect("hash thread already finished")
            .send(p)
            .map_err(|_| anyhow!("the hashing thread stopped"))
    }

    /// Hash `buf[..len]`; `buf` returns to the pool afterwards.
    pub fn data(&self, buf: Vec<u8>, len: usize) -> Result<()> {
        self.send(Piece::Data(buf, len))
    }

    /// Hash `n` zero bytes.
    pub fn zeros(&self, n: u64) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.send(Piece::Zeros(n))
    }

    /// Wait for the hash of everything fed: (lower-case hex, byte count).
    pub fn finish(mut self) -> Result<(String, u64)> {
        drop(self.tx.take());
        self.handle
            .take()
            .expect("hash thread joined twice")
            .join()
            .map_err(|_| anyhow!("the hashing thread panicked"))
    }
}

impl Drop for HashThread {
    /// On error paths: stop hashing queued zero runs and reap the thread.
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            self.cancel.store(true, Ordering::Relaxed);
            drop(self.tx.take());
            let _ = handle.join();
        }
    }
}

/// What was written: the output file and the stream it encodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// Size of the output file in bytes.
    pub size: u64,
    /// Lower-case hex SHA-256 of the output file.
    pub sha256: String,
    /// Size of the uncompressed content (the view's length).
    pub uncompressed_size: u64,
    /// Lower-case hex SHA-256 of the uncompressed content.
    pub uncompressed_sha256: String,
}
