//! The CLI convention tests' helpers: the binary run from a chosen directory with chosen
//! environment variables (store discovery, `CKPTFS_STORE`, `TZ`), and where a table's
//! columns start.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;

use super::cli::{assert_error_output, cmd, describe, stdout};

/// Runs the binary in `dir` with extra environment variables; whatever the exit status.
pub fn run_in<I, S>(dir: &Path, env: &[(&str, &str)], args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = cmd(args);
    c.current_dir(dir);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("spawning ckptfs")
}

/// As [`run_in`], which must succeed; returns stdout.
pub fn ok_in<S: AsRef<OsStr>>(dir: &Path, env: &[(&str, &str)], args: &[S]) -> String {
    let o = run_in(dir, env, args);
    let shown: Vec<String> = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    assert!(o.status.success(), "{}", describe(&shown, &o));
    stdout(&o)
}

/// As [`run_in`], which must fail with `code` and one clean line; returns that line.
pub fn fails_in<S: AsRef<OsStr>>(
    dir: &Path,
    env: &[(&str, &str)],
    code: i32,
    args: &[S],
) -> String {
    let o = run_in(dir, env, args);
    let shown: Vec<String> = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    assert_error_output(&shown, &o, code)
}

/// The character offsets where each column of a table line starts: a column begins after a
/// run of two or more spaces (cells hold at most single spaces, as `2 files` or a time).
pub fn column_starts(line: &str) -> Vec<usize> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = vec![0];
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == ' ' && chars.get(i + 1) == Some(&' ') {
            let mut j = i;
            while j < chars.len() && chars[j] == ' ' {
                j += 1;
            }
            out.push(j);
            i = j;
        } else {
            i += 1;
        }
    }
    out
}
