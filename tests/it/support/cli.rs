//! The binary under test: running it with a clean environment (also with a time bound, for
//! input that might make it hang), checking its exit status and output, and the shell.

use std::ffi::OsStr;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::fault::FAULT_ENV;

/// Path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ckptfs")
}

/// A command for the binary with a clean environment for what the tests control: no fault
/// injection, no logging, no backtraces, no `CKPTFS_STORE` from the caller's shell, and a
/// working directory outside the source tree (a
/// relative path never lands in the repository).
pub fn cmd<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new(bin());
    c.args(args)
        .env_remove(FAULT_ENV)
        .env_remove("RUST_LOG")
        .env_remove("CKPTFS_STORE")
        .env("RUST_BACKTRACE", "0")
        .current_dir(std::env::temp_dir());
    c
}

/// Runs the binary and returns its output, whatever the exit status.
pub fn run<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    cmd(args).output().expect("spawning ckptfs")
}

/// Runs the binary with extra environment variables (set after the clean-up of `cmd`).
pub fn run_env<I, S>(args: I, env: &[(&str, &str)]) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = cmd(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("spawning ckptfs")
}

/// The command line, exit status, stdout and stderr of a run, for failure messages.
pub fn describe(args: &[String], o: &Output) -> String {
    describe_output(&format!("ckptfs {}", args.join(" ")), o)
}

/// As `describe`, for any program: `what` (the command line) first.
pub fn describe_output(what: &str, o: &Output) -> String {
    format!(
        "{what}\nstatus: {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn strings<I, S>(args: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    args.into_iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect()
}

/// Runs the binary, asserts exit 0, returns stdout.
pub fn ok<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args = strings(args);
    let o = run(&args);
    assert!(
        o.status.success(),
        "expected success: {}",
        describe(&args, &o)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs the binary with `--json` (appended unless the arguments hold it), asserts exit 0 and
/// parses stdout.
pub fn ok_json<I, S>(args: I) -> Value
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut args = strings(args);
    if !args.iter().any(|a| a == "--json") {
        args.push("--json".into());
    }
    let out = ok(&args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad JSON from {args:?}: {e}\n{out}"))
}

/// Runs the binary, asserts the exit code and a one-line error on stderr without a panic;
/// returns that line.
pub fn fails<I, S>(code: i32, args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args = strings(args);
    let o = run(&args);
    assert_error_output(&args, &o, code)
}

/// Asserts `o` is a clean failure with `code`: no panic, one line on stderr. Returns it.
pub fn assert_error_output(args: &[String], o: &Output, code: i32) -> String {
    assert_eq!(o.status.code(), Some(code), "{}", describe(args, o));
    clean_error_line(args, o)
}

/// Asserts `o` is a clean failure with whatever exit code: not a success, not a panic (nor
/// its exit code 101), one line on stderr. Returns it. For runs that may fail in more than
/// one way (a race), where `assert_error_output` cannot name the code.
pub fn assert_clean_failure<S: AsRef<OsStr>>(args: &[S], o: &Output) -> String {
    let args = strings(args);
    assert!(
        !o.status.success() && o.status.code() != Some(101),
        "expected a clean failure: {}",
        describe(&args, o)
    );
    clean_error_line(&args, o)
}

/// No panic and exactly one line on stderr; that line.
fn clean_error_line(args: &[String], o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "panic: {}",
        describe(args, o)
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "expected exactly one error line: {}",
        describe(args, o)
    );
    err.trim_end().to_string()
}

// ---- runs with a time bound ------------------------------------------------------------------

/// How long a command on hostile input may take before it counts as hung (`refused`).
pub const BOUND: Duration = Duration::from_secs(20);

/// Runs the binary (the environment of `cmd`, stdin empty), killed once `limit` has passed;
/// its output and whether it finished by itself. Stdout and stderr are drained by threads,
/// so a command that writes much is not mistaken for one that hangs.
pub fn run_bounded<I, S>(args: I, limit: Duration) -> (Output, bool)
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run_command_bounded(cmd(args), limit)
}

/// `run_bounded` for a command already made (with its own environment).
pub fn run_command_bounded(mut c: Command, limit: Duration) -> (Output, bool) {
    fn drain(r: Option<impl Read + Send + 'static>) -> JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    }
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning ckptfs");
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let t0 = Instant::now();
    let (status, finished) = loop {
        if let Some(status) = child.try_wait().expect("waiting for ckptfs") {
            break (status, true);
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            break (child.wait().expect("waiting for ckptfs"), false);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    };
    (o, finished)
}

/// `run_bounded`, asserting it finished within `limit`; the output.
fn finished_within(args: &[String], limit: Duration) -> Output {
    let (o, finished) = run_bounded(args, limit);
    assert!(
        finished,
        "hung (killed after {limit:?}): {}",
        describe(args, &o)
    );
    o
}

/// As `ok`, and the run must finish within `limit`.
pub fn ok_bounded<I, S>(args: I, limit: Duration) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args = strings(args);
    let o = finished_within(&args, limit);
    assert!(
        o.status.success(),
        "expected success: {}",
        describe(&args, &o)
    );
    stdout(&o)
}

/// Asserts a clean refusal within `BOUND`: exit `code`, no panic, one line on stderr (as
/// `assert_error_output`) holding every word of `words`. Returns the line.
pub fn refused<I, S>(code: i32, args: I, words: &[&str]) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args = strings(args);
    let o = finished_within(&args, BOUND);
    let line = assert_error_output(&args, &o, code);
    for w in words {
        assert!(line.contains(w), "{line:?} lacks {w:?}");
    }
    line
}

/// `ckptfs cat STORE SPEC`, asserting success; the file's bytes.
pub fn cat(store: impl AsRef<Path>, spec: &str) -> Vec<u8> {
    let args = vec![
        "cat".to_string(),
        store.as_ref().display().to_string(),
        spec.to_string(),
    ];
    let o = run(&args);
    assert!(o.status.success(), "{}", describe(&args, &o));
    o.stdout
}

/// Stdout of a run, as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Stderr of a run, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A path as `&str` (the tests only make UTF-8 paths).
pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs a shell command and asserts success; returns stdout.
pub fn sh(cmd: &str) -> String {
    let o = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("run sh");
    assert!(
        o.status.success(),
        "`{cmd}` failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}
