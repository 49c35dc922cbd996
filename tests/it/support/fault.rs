//! Fault injection (`CKPTFS_FAULT`, read by the store's one write path): `count` prints the
//! number of durable I/O steps an operation takes, `fail:N` fails its Nth step with an I/O
//! error, `abort:N` kills the process there, `stop:N` stops it (SIGSTOP) there.

use std::ffi::OsStr;
use std::process::{Command, Output};

use super::cli::{bin, run_env, stderr};

/// The environment variable the binary reads its fault from.
pub const FAULT_ENV: &str = "CKPTFS_FAULT";

/// Number of durable I/O steps the command takes (`CKPTFS_FAULT=count`); asserts it succeeds.
pub fn io_steps<I, S>(args: I) -> u64
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<String> = args
        .into_iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    let o = run_env(&args, &[(FAULT_ENV, "count")]);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    let e = stderr(&o);
    e.lines()
        .find_map(|l| l.strip_prefix("ckptfs: io steps: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no step count in {e}"))
}

/// Up to `n` fault points spread over 1..=total (all when total <= n).
pub fn spread(total: u64, n: u64) -> Vec<u64> {
    if total <= n {
        return (1..=total).collect();
    }
    let mut v: Vec<u64> = (0..n).map(|i| 1 + i * (total - 1) / (n - 1)).collect();
    v.dedup();
    v
}

/// Runs ckptfs with fault `mode:n` injected (`fail`, `abort`), without core dumps.
pub fn run_fault<I, S>(args: I, mode: &str, n: u64) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new("sh")
        .arg("-c")
        .arg("ulimit -c 0; exec \"$@\"")
        .arg("sh")
        .arg(bin())
        .args(args)
        .env_remove("RUST_LOG")
        .env(FAULT_ENV, format!("{mode}:{n}"))
        .env("RUST_BACKTRACE", "0")
        .current_dir(std::env::temp_dir())
        .output()
        .expect("spawn ckptfs")
}

/// Runs `f` over `items` on two threads (the fault loops' cases are independent).
pub fn par_for<T: Sync>(items: &[T], f: impl Fn(&T) + Sync) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|sc| {
        for _ in 0..2 {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(it) = items.get(i) else { return };
                f(it);
            });
        }
    });
}
