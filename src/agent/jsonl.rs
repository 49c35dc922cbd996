//! JSON lines from an agent process, read with a deadline: a reader thread sends each line
//! (bounded in length) on a channel, so a silent or flooding agent cannot hang the turn.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The longest line read from an agent (a whole thread's items can be large).
pub const MAX_LINE: u64 = 64 << 20;

/// What the reader sends.
pub enum Line {
    /// One line that parsed as JSON.
    Json(serde_json::Value),
    /// One line that did not (kept for the error message, cut).
    Text(String),
    /// The stream ended (or broke, or a line was longer than [`MAX_LINE`]).
    End(Option<String>),
}

/// Lines of an agent's stdout, until a deadline.
pub struct Lines {
    rx: Receiver<Line>,
    deadline: Instant,
}

impl Lines {
    /// Starts reading `out` on a thread.
    pub fn start(out: ChildStdout, timeout: Duration) -> Lines {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            loop {
                let mut buf = Vec::new();
                let n = match (&mut r).take(MAX_LINE).read_until(b'\n', &mut buf) {
                    Ok(n) => n,
                    Err(e) => {
                        let _gone = tx.send(Line::End(Some(e.to_string())));
                        return;
                    }
                };
                if n == 0 {
                    let _gone = tx.send(Line::End(None));
                    return;
                }
                if buf.last() != Some(&b'\n') && n as u64 >= MAX_LINE {
                    let _gone = tx.send(Line::End(Some(format!(
                        "a line longer than {MAX_LINE} bytes"
                    ))));
                    return;
                }
                let line = match serde_json::from_slice::<serde_json::Value>(&buf) {
                    Ok(v) => Line::Json(v),
                    Err(_) => {
                        let t = String::from_utf8_lossy(&buf);
                        Line::Text(t.trim().chars().take(200).collect())
                    }
                };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Lines {
            rx,
            deadline: Instant::now() + timeout,
        }
    }

    /// The next JSON line. `Err` says why there is none: the stream ended or broke, or the
    /// deadline passed.
    pub fn next_json(&mut self) -> std::result::Result<serde_json::Value, String> {
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(Line::Json(v)) => return Ok(v),
                Ok(Line::Text(t)) => log::debug!("agent printed a line that is not JSON: {t}"),
                Ok(Line::End(None)) | Err(RecvTimeoutError::Disconnected) => {
                    return Err("the agent's output ended before its turn completed".into())
                }
                Ok(Line::End(Some(e))) => return Err(format!("reading the agent's output: {e}")),
                Err(RecvTimeoutError::Timeout) => return Err("timed out".into()),
            }
        }
    }
}

/// Waits for `child` to exit, at most `wait`; kills it then.
pub fn reap(child: &mut Child, wait: Duration) -> std::io::Result<std::process::ExitStatus> {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(s);
        }
        if t0.elapsed() >= wait {
            let _gone = child.kill();
            return child.wait();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `program ARGS` with the fixed environment of fingerprint commands (PATH of system
/// directories, LC_ALL=C, HOME=/), stdin empty, cwd `/`, at most `wait`; its stdout.
///
/// # Errors
/// It could not start, did not exit 0, or timed out (one line).
pub fn run_bounded(
    program: &Path,
    args: &[&str],
    wait: Duration,
) -> std::result::Result<String, String> {
    let mut child = Command::new(program)
        .args(args)
        .current_dir("/")
        .env_clear()
        .envs(crate::runner::fingerprint::COMMAND_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run: {e}"))?;
    let Some(out) = child.stdout.take() else {
        return Err("no stdout".into());
    };
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _partial = out.take(1 << 16).read_to_string(&mut s);
        s
    });
    let status = reap(&mut child, wait).map_err(|e| format!("waiting: {e}"))?;
    let out = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("exited with {status}"));
    }
    Ok(out)
}
