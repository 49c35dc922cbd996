//! Running the binary under a pseudo-terminal (`script -qec CMD /dev/null`), for what it does
//! only when stderr is a terminal (progress bars).

use std::process::Command;

use super::cli::bin;
use super::fault::FAULT_ENV;

/// Quotes `a` for `sh -c`.
fn sh_quote(a: &str) -> String {
    format!("'{}'", a.replace('\'', r"'\''"))
}

/// Runs `ckptfs ARGS...` on a pseudo-terminal; returns its exit code and everything it
/// wrote there (stdout and stderr together, as a terminal shows them, control codes and all).
pub fn on_terminal(args: &[&str]) -> (i32, String) {
    let line = std::iter::once(bin())
        .chain(args.iter().copied())
        .map(sh_quote)
        .collect::<Vec<_>>()
        .join(" ");
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env_remove(FAULT_ENV)
        .env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "0")
        .current_dir(std::env::temp_dir())
        .output()
        .expect("spawning script(1)");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}
