//! Progress of long operations on a terminal: what `ops/` and `ingest/` report into.
//!
//! An operation makes one [`Progress`] per phase (`Progress::items("verify", "objects",
//! Some(n))`), reports what it did (`add_items`, `add_bytes`, from any thread) and calls
//! [`Progress::finish`]. The bar shows the main count against its total (a spinner when the
//! total is not known), the other count, the rate, the ETA and the elapsed time, and leaves one
//! final line on stderr when finished (as restic does).
//!
//! Drawing is off unless the CLI turned it on with [`enable`] (it does so only when stderr is a
//! terminal, without `--quiet` and without `--json`); off, every call is a no-op on an `Option`,
//! so library users and tests pay nothing. Only this module knows the drawing crate
//! (indicatif), so it can be changed in one place.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

static ENABLED: AtomicBool = AtomicBool::new(false);
static NOTICES: AtomicBool = AtomicBool::new(false);

/// Turns drawing on for this process when `wanted` and stderr is a terminal; returns whether it
/// is on. Called once by the CLI before running a command.
pub fn enable(wanted: bool) -> bool {
    let on = wanted && std::io::stderr().is_terminal();
    ENABLED.store(on, Ordering::Relaxed);
    on
}

/// Turns [`notices`] on or off for this process (the CLI: on unless `--quiet`).
pub fn enable_notices(on: bool) {
    NOTICES.store(on, Ordering::Relaxed);
}

/// Whether one-line notices of a wait (a remote that does not answer yet) go to stderr: on
/// for the CLI without `--quiet`, off for library users.
pub fn notices() -> bool {
    NOTICES.load(Ordering::Relaxed)
}

/// Whether progress is drawn in this process.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// What the bar's main count counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Main {
    /// Items (files, objects, checkpoints...); bytes are the secondary count.
    Items,
    /// Bytes; items are the secondary count.
    Bytes,
}

/// One phase of a long operation. Cheap to share by reference across threads.
pub struct Progress {
    inner: Option<Inner>,
}

struct Inner {
    bar: ProgressBar,
    main: Main,
    noun: &'static str,
    /// The secondary count (bytes when counting items, items when counting bytes).
    other: Arc<AtomicU64>,
    has_total: AtomicBool,
    finished: AtomicBool,
}

impl Progress {
    /// A progress that draws nothing.
    pub fn hidden() -> Progress {
        Progress { inner: None }
    }

    /// Counts `noun` (e.g. "files", "objects") against `total` when known; bytes are shown
    /// beside them.
    pub fn items(what: &str, noun: &'static str, total: Option<u64>) -> Progress {
        Progress::start(what, noun, total, Main::Items)
    }

    /// Counts bytes against `total` when known; `noun` items are shown beside them.
    pub fn bytes(what: &str, noun: &'static str, total: Option<u64>) -> Progress {
        Progress::start(what, noun, total, Main::Bytes)
    }

    fn start(what: &str, noun: &'static str, total: Option<u64>, main: Main) -> Progress {
        // Nothing to do is nothing to show.
        if !enabled() || total == Some(0) {
            return Progress::hidden();
        }
        // Styled before it may draw, so no frame shows indicatif's default style.
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
        bar.set_prefix(what.to_string());
        let inner = Inner {
            bar,
            main,
            noun,
            other: Arc::new(AtomicU64::new(0)),
            has_total: AtomicBool::new(total.is_some()),
            finished: AtomicBool::new(false),
        };
        inner.restyle();
        inner.bar.set_draw_target(ProgressDrawTarget::stderr());
        inner.bar.enable_steady_tick(Duration::from_millis(200));
        Progress { inner: Some(inner) }
    }

    /// Whether anything is drawn (callers may skip counting work otherwise).
    pub fn is_shown(&self) -> bool {
        self.inner.is_some()
    }

    /// Adds `n` items done.
    pub fn add_items(&self, n: u64) {
        if let Some(i) = &self.inner {
            match i.main {
                Main::Items => i.bar.inc(n),
                Main::Bytes => {
                    i.other.fetch_add(n, Ordering::Relaxed);
                }
            }
        }
    }

    /// Adds `n` bytes done.
    pub fn add_bytes(&self, n: u64) {
        if let Some(i) = &self.inner {
            match i.main {
                Main::Bytes => i.bar.inc(n),
                Main::Items => {
                    i.other.fetch_add(n, Ordering::Relaxed);
                }
            }
        }
    }

    /// Sets both counts (for work counted elsewhere, e.g. by the reading engine's atomics).
    pub fn set_done(&self, items: u64, bytes: u64) {
        if let Some(i) = &self.inner {
            let (main, other) = match i.main {
                Main::Items => (items, bytes),
                Main::Bytes => (bytes, items),
            };
            i.bar.set_position(main);
            i.other.store(other, Ordering::Relaxed);
        }
    }

    /// Sets the total of the main count (items or bytes, as made), once it is known.
    pub fn set_total(&self, total: u64) {
        if let Some(i) = &self.inner {
            i.bar.set_length(total);
            if !i.has_total.swap(true, Ordering::Relaxed) {
                i.restyle();
            }
        }
    }

    /// Adds to the total of the main count (a total known in parts, e.g. root by root).
    pub fn add_total(&self, n: u64) {
        if n == 0 {
            return;
        }
        if let Some(i) = &self.inner {
            let now = i.bar.length().unwrap_or(0);
            self.set_total(now + n);
        }
    }

    /// Draws the final state and leaves it as one line on stderr.
    pub fn finish(&self) {
        if let Some(i) = &self.inner {
            if !i.finished.swap(true, Ordering::Relaxed) {
                if let Some(len) = i.bar.length() {
                    // A total counted up front may be above what was done (work skipped).
                    i.bar.set_length(len.max(i.bar.position()));
                }
                i.bar.finish();
            }
        }
    }
}

impl Drop for Progress {
    /// An operation that failed (returned early) clears its line, so the error stands alone.
    fn drop(&mut self) {
        if let Some(i) = &self.inner {
            if !i.finished.load(Ordering::Relaxed) {
                i.bar.finish_and_clear();
            }
        }
    }
}

impl Inner {
    fn restyle(&self) {
        let total = self.has_total.load(Ordering::Relaxed);
        let (count, rate) = match self.main {
            Main::Items => (format!("{{human_pos}} {}", self.noun), "{per_sec:0}"),
            Main::Bytes => ("{binary_bytes}".to_string(), "{binary_bytes_per_sec}"),
        };
        let count = match (self.main, total) {
            (_, false) => count,
            (Main::Items, true) => format!("{{human_pos}}/{{human_len}} {}", self.noun),
            (Main::Bytes, true) => "{binary_bytes}/{binary_total_bytes}".to_string(),
        };
        let template = if total {
            format!(
                "{{prefix}} [{{bar:16}}] {count}{{other}}, {rate}, ETA {{eta}}, \
                 elapsed {{elapsed}}"
            )
        } else {
            format!("{{spinner}} {{prefix}}: {count}{{other}}, {rate}, elapsed {{elapsed}}")
        };
        let other = Arc::clone(&self.other);
        let main = self.main;
        let noun = self.noun;
        let style = match ProgressStyle::with_template(&template) {
            Ok(s) => s,
            Err(e) => {
                log::warn!("progress template: {e}");
                return;
            }
        };
        let style = style.progress_chars("=> ").with_key(
            "other",
            move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
                // The secondary count is shown once there is one.
                let n = other.load(Ordering::Relaxed);
                let _ignored = match main {
                    _ if n == 0 => Ok(()),
                    Main::Items => write!(w, ", {}", crate::units::human_bytes(n)),
                    Main::Bytes => write!(w, ", {n} {noun}"),
                };
            },
        );
        self.bar.set_style(style);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_progress_counts_nothing_and_never_panics() {
        let p = Progress::items("x", "files", Some(3));
        assert!(!p.is_shown(), "drawing is off unless the CLI enables it");
        p.add_items(5);
        p.add_bytes(5);
        p.set_total(1);
        p.add_total(1);
        p.set_done(1, 1);
        p.finish();
    }
}
