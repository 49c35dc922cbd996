//! Remote gc tests' helpers: what a remote holds (`remote_bytes`, `remote_keys`) and the
//! binary on a pseudo-terminal with a Garage's AWS environment (`on_terminal_remote`).

use std::process::Command;

use super::cli::bin;
use super::garage::Garage;

/// Total bytes of the objects under `prefix` (each downloaded: test remotes are small).
pub fn remote_bytes(g: &Garage, prefix: &str) -> u64 {
    g.s3_list(prefix)
        .iter()
        .map(|k| g.s3_get(k).map_or(0, |d| d.len() as u64))
        .sum()
}

/// Every key of the remote at `prefix/` except its locks (a command takes one and removes
/// it), sorted: what a command that changes nothing must leave as it was.
pub fn remote_keys(g: &Garage, prefix: &str) -> Vec<String> {
    let mut keys: Vec<String> = g
        .s3_list(&format!("{prefix}/"))
        .into_iter()
        .filter(|k| !k.starts_with(&format!("{prefix}/locks/")))
        .collect();
    keys.sort();
    keys
}

/// Runs `ckptfs ARGS...` on a pseudo-terminal (`script`) with `g`'s AWS environment; returns
/// its exit code and what the terminal showed.
pub fn on_terminal_remote(g: &Garage, args: &[&str]) -> (i32, String) {
    let quote = |a: &str| format!("'{}'", a.replace('\'', r"'\''"));
    let line = std::iter::once(bin())
        .chain(args.iter().copied())
        .map(quote)
        .collect::<Vec<_>>()
        .join(" ");
    let mut c = Command::new("script");
    c.args(["-qec", &line, "/dev/null"])
        .env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "0")
        .current_dir(std::env::temp_dir());
    g.apply_env(&mut c);
    let out = c.output().expect("spawning script(1)");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}
