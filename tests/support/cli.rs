//! The binary under test: running it with a clean environment, checking its exit status and
//! output, and the shell.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use super::fault::FAULT_ENV;

/// Path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ckptfs")
}

/// A command for the binary with a clean environment for what the tests control: no fault
/// injection, no logging, no backtraces, and a working directory outside the source tree (a
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
    format!(
        "ckptfs {}\nstatus: {:?}\nstdout: {}\nstderr: {}",
        args.join(" "),
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
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "{}", describe(args, o));
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
