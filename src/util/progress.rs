//! Progress on stderr: indicatif bars on a terminal, one line per step
//! otherwise, or JSON Lines (`--progress json`) for CI.
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How progress is asked to be reported (`--progress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Bars on a terminal, plain lines otherwise.
    Auto,
    Tty,
    Plain,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Tty,
    Plain,
    Json,
    Quiet,
}

/// How often byte progress is reported in plain and JSON modes.
const PLAIN_EVERY: Duration = Duration::from_secs(5);
const JSON_EVERY: Duration = Duration::from_secs(1);

pub struct Reporter {
    mode: Mode,
}

impl Reporter {
    pub fn new(p: Progress) -> Self {
        let mode = match p {
            Progress::Json => Mode::Json,
            _ if super::ui::is_quiet() => Mode::Quiet,
            Progress::Tty => Mode::Tty,
            Progress::Plain => Mode::Plain,
            Progress::Auto if std::io::stderr().is_terminal() => Mode::Tty,
            Progress::Auto => Mode::Plain,
        };
        Reporter { mode }
    }

    fn json(&self, v: serde_json::Value) {
        eprintln!("{v}");
    }

    /// A free-form status line.
    pub fn note(&self, msg: &str) {
        match self.mode {
            Mode::Json => self.json(serde_json::json!({"event": "note", "message": msg})),
            Mode::Quiet => {}
            _ => eprintln!("{msg}"),
        }
    }

    /// Start a step.
    pub fn step(&self, name: impl Into<String>) -> Step<'_> {
        let name = name.into();
        match self.mode {
            Mode::Json => self.json(serde_json::json!({"event": "start", "step": name})),
            Mode::Plain => eprintln!("{name} ..."),
            _ => {}
        }
        Step {
            r: self,
            name,
            start: Instant::now(),
            bar: Mutex::new(None),
            last: Mutex::new(Instant::now()),
        }
    }
}

pub struct Step<'a> {
    r: &'a Reporter,
    name: String,
    start: Instant,
    bar: Mutex<Option<ProgressBar>>,
    last: Mutex<Instant>,
}

impl Step<'_> {
    /// Report `done` of `total` bytes.
    pub fn bytes(&self, done: u64, total: u64) {
        match self.r.mode {
            Mode::Tty => {
                let mut b = self.bar.lock().expect("progress lock");
                let bar = b.get_or_insert_with(|| {
                    let pb = ProgressBar::new(total);
                    pb.set_style(
                        ProgressStyle::with_template(
                            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                        )
                        .expect("valid template")
                        .progress_chars("=> "),
                    );
                    pb.set_message(self.name.clone());
                    pb
                });
                bar.set_position(done);
            }
            Mode::Plain | Mode::Json => {
                let every = if self.r.mode == Mode::Json {
                    JSON_EVERY
                } else {
                    PLAIN_EVERY
                };
                let mut last = self.last.lock().expect("progress lock");
                if last.elapsed() < every {
                    return;
                }
                *last = Instant::now();
                if self.r.mode == Mode::Json {
                    self.r.json(serde_json::json!({"event": "progress", "step": self.name, "done": done, "total": total}));
                } else {
                    eprintln!("  {}: {} / {} MiB", self.name, done >> 20, total >> 20);
                }
            }
            Mode::Quiet => {}
        }
    }

    /// Finish the step with a short result.
    pub fn done(self, detail: &str) -> Duration {
        let secs = self.start.elapsed();
        if let Some(b) = self.bar.lock().expect("progress lock").take() {
            b.finish_and_clear();
        }
        match self.r.mode {
            Mode::Json => self.r.json(serde_json::json!({"event": "done", "step": self.name, "seconds": secs.as_secs_f64(), "detail": detail})),
            Mode::Quiet => {}
            _ => eprintln!("{}: {detail} ({:.1?})", self.name, secs),
        }
        secs
    }
}

impl Drop for Step<'_> {
    fn drop(&mut self) {
        if let Ok(mut b) = self.bar.lock() {
            if let Some(b) = b.take() {
                b.abandon();
            }
        }
    }
}
