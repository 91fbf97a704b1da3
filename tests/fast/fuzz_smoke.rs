//! The fuzz smoke run (fast tier, about 10 s): every fuzz target
//! (`fuzz/src/targets.rs`) over its committed corpus (`fuzz/corpus/`, the
//! seeds and every crash found so far) and a fixed set of mutations of each
//! input, under the fuzzing limits: no panic, no input over 10 s, no
//! allocation over 1 GiB. `make fuzz` is the long, coverage-guided run.
#[path = "../../fuzz/src/cap.rs"]
mod cap;
#[path = "../../fuzz/src/targets.rs"]
mod targets;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[global_allocator]
static A: cap::Capped = cap::Capped;

/// Per-input time limit (the hang bound).
const HANG: Duration = Duration::from_secs(10);
/// Mutations per corpus input.
const MUTATIONS: u64 = 3000;

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Interesting bytes for text formats and length fields.
const DICT: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b"null",
    b"-1",
    b"1e999",
    b"\n---\n",
    b"&a",
    b"*a",
    b"!!binary",
    b"\\u0000",
    b"@@KERNEL-ARGS@@",
    b"@@VOLUME-ID@@",
    b"@@VERSION@@",
    b"../",
    b"/",
    b"sha256:",
    b"@",
    b"=== EFI/x/grub.cfg\n",
    b"07070100",
    b"ffffffff",
    b"\xff\xff\xff\xff",
];

fn mutate(r: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + r.below(4) {
        match r.below(7) {
            0 if !v.is_empty() => {
                let i = r.below(v.len());
                v[i] ^= 1 << r.below(8);
            }
            1 if !v.is_empty() => {
                let i = r.below(v.len());
                v[i] = r.next() as u8;
            }
            2 => {
                let i = r.below(v.len() + 1);
                let d = DICT[r.below(DICT.len())];
                v.splice(i..i, d.iter().copied());
            }
            3 if !v.is_empty() => {
                let i = r.below(v.len());
                let n = r.below(v.len() - i + 1);
                v.drain(i..i + n);
            }
            4 => v.truncate(r.below(v.len() + 1)),
            5 if !other.is_empty() => {
                let i = r.below(v.len() + 1);
                let j = r.below(other.len());
                let n = r.below(other.len() - j + 1).min(4096);
                v.splice(i..i, other[j..j + n].iter().copied());
            }
            _ if !v.is_empty() => {
                let i = r.below(v.len());
                let n = r.below(v.len() - i + 1).min(256);
                let chunk = v[i..i + n].to_vec();
                let at = r.below(v.len() + 1);
                v.splice(at..at, chunk);
            }
            _ => {}
        }
    }
    v
}

fn corpus(name: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(name);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

#[test]
fn every_target_survives_its_corpus_and_mutations() {
    // A watchdog: an input that runs past HANG fails the run, naming it.
    let started = Arc::new(AtomicU64::new(0));
    let current: Arc<Mutex<(String, Vec<u8>)>> = Arc::default();
    let epoch = Instant::now();
    {
        let (started, current) = (started.clone(), current.clone());
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            let s = started.load(Ordering::Relaxed);
            let now = epoch.elapsed().as_millis() as u64;
            if s != 0 && now.saturating_sub(s) > HANG.as_millis() as u64 {
                let (t, input) = &*current.lock().unwrap();
                let p = std::env::temp_dir().join(format!("fuzz-smoke-hang-{t}"));
                let _ = std::fs::write(&p, input);
                eprintln!("{t}: an input ran over {HANG:?}; saved to {}", p.display());
                std::process::abort();
            }
        });
    }
    let mut total = 0u64;
    for (name, target) in targets::TARGETS {
        let t0 = Instant::now();
        let seeds = corpus(name);
        assert!(!seeds.is_empty(), "fuzz/corpus/{name} is empty");
        let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
        let mut inputs: Vec<Vec<u8>> = seeds.clone();
        for (i, s) in seeds.iter().enumerate() {
            let other = &seeds[(i + 1) % seeds.len()];
            for _ in 0..MUTATIONS / seeds.len().max(1) as u64 + 20 {
                inputs.push(mutate(&mut r, s, other));
            }
        }
        for input in &inputs {
            *current.lock().unwrap() = (name.to_string(), input.clone());
            started.store(epoch.elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
            let res = std::panic::catch_unwind(|| target(input));
            started.store(0, Ordering::Relaxed);
            if res.is_err() {
                let p = std::env::temp_dir().join(format!("fuzz-smoke-crash-{name}"));
                std::fs::write(&p, input).unwrap();
                panic!(
                    "fuzz target {name} panicked; input saved to {} (add it to fuzz/corpus/{name}/ with the fix)",
                    p.display()
                );
            }
        }
        total += inputs.len() as u64;
        eprintln!("{name}: {} inputs in {:.2?}", inputs.len(), t0.elapsed());
    }
    eprintln!("{total} inputs in all");
}
