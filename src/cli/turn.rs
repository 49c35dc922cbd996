//! CLI of the runner's contract: `turn`, the `--meta`/`--meta-file` arguments that
//! `checkpoint`, `capture` and `turn` share, `log --turns`, and the turn line of `status`.
//! The contract is docs/runner.md; the composition is `ckptfs::runner::turn`.

use std::path::{Path, PathBuf};

use clap::Args;

use ckptfs::runner::turn::{self, TurnOptions};
use ckptfs::{Error, Result, Store};

use super::args::{MetaArgs, RecordArgs, RunAsArgs};
use super::json::rfc3339_of_utc;
use super::print_json;

/// `turn` arguments.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    ckptfs turn /var/lib/ckpt --branch main --meta thread=t1 -- python3 agent.py\n  \
    ckptfs turn /workspace/room --retry -- python3 agent.py     after a failed turn\n  \
    ckptfs log /var/lib/ckpt --turns                            every turn and its outcome")]
pub struct TurnArgs {
    /// A workspace mountpoint (or a path inside it), or the store directory.
    pub place: PathBuf,
    /// The branch: with a store, the one mounted workspace when not given (a branch that is
    /// not mounted is mounted first).
    #[arg(long, short)]
    pub branch: Option<String>,
    #[command(flatten)]
    pub record: RecordArgs,
    /// The workspace holds the writes of a failed turn: set them aside under
    /// STORE/displaced/ (as `switch --discard` does) and run COMMAND again.
    #[arg(long)]
    pub retry: bool,
    /// Run even when the branch's recorded runtime fingerprint differs from this
    /// machine's; the change is audited and the new fingerprint recorded with the turn.
    #[arg(long)]
    pub accept_runtime_change: bool,
    /// Keep the upper layer after the turn's checkpoint instead of folding it (as
    /// `checkpoint --no-fold`: for rooms whose big files grow every turn).
    #[arg(long)]
    pub no_fold: bool,
    /// Print the turn's report as JSON on stdout once COMMAND has exited (after COMMAND's
    /// own output).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub run_as: RunAsArgs,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

/// `ckptfs turn`.
pub fn run_turn(a: TurnArgs) -> Result<i32> {
    // The file is read after COMMAND: only the flags now.
    let flags = MetaArgs {
        meta: a.record.meta.meta.clone(),
        meta_file: None,
    };
    let meta = flags.to_map()?;
    if a.record.meta.meta_file.as_deref() == Some(Path::new("-")) {
        return Err(Error::Usage(
            "turn reads --meta-file after COMMAND, whose stdin is its own: give a file".into(),
        ));
    }
    let (s, branch) = ckptfs::workspace::place::target(&a.place, a.branch.as_deref())?;
    let r = turn::run(
        &s,
        &TurnOptions {
            branch,
            label: a.record.label,
            message: a.record.message,
            meta,
            meta_file: a.record.meta.meta_file,
            command: a.command,
            retry: a.retry,
            accept_runtime_change: a.accept_runtime_change,
            no_fold: a.no_fold,
            run_as: a.run_as.options(),
            driver: None,
            runtime_now: None,
        },
    )?;
    if let Some(e) = &r.error {
        eprintln!("ckptfs: {e}");
    }
    if a.json {
        let mut r = r;
        r.started = rfc3339_of_utc(&r.started);
        r.ended = rfc3339_of_utc(&r.ended);
        print_json(&r)?;
        return Ok(r.exit_status);
    }
    if let Some(d) = &r.set_aside {
        eprintln!(
            "ckptfs: the failed turn's writes were set aside in {}",
            d.display()
        );
    }
    if !r.left_running.is_empty() {
        eprintln!(
            "ckptfs: processes of the turn still run after {} s (frozen for its checkpoint): {}",
            ckptfs::runner::procs::SETTLE_WAIT.as_secs(),
            r.left_running.join(", ")
        );
    }
    for d in r.runtime.differences.iter().filter(|_| r.runtime.accepted) {
        eprintln!("ckptfs: runtime change accepted: {}", d.describe());
    }
    match &r.checkpoint {
        Some(id) => eprintln!(
            "ckptfs: turn {} on {}: ok, checkpoint {} ({} ms)",
            r.turn,
            r.branch,
            id.short(),
            r.elapsed_ms
        ),
        None => eprintln!(
            "ckptfs: turn {} on {}: {} (exit status {}); nothing recorded on the branch{}",
            r.turn,
            r.branch,
            r.outcome,
            r.exit_status,
            if r.outcome == "cannot-run" {
                ""
            } else {
                "; its writes stay in the workspace (see `ckptfs status`)"
            }
        ),
    }
    Ok(r.exit_status)
}

/// The `turn` field of a `status` row: a turn running on `branch`, or (when `dirty`) the
/// failed turn whose writes the workspace holds. `None` when neither, or when the audit log
/// does not read (status still reports the rest).
pub fn turn_status(s: &Store, branch: &str, dirty: bool) -> Option<serde_json::Value> {
    if let Ok(Some(m)) = s.read_marker() {
        if m.op == "turn" && m.args["branch"].as_str() == Some(branch) {
            let t = m.args["turn"].as_str().unwrap_or("?");
            let alive = ckptfs::store::lock::pid_alive(m.pid);
            let describe = if alive {
                format!("turn {t} running (pid {})", m.pid)
            } else {
                format!(
                    "turn {t} did not finish (runner pid {} gone): run `ckptfs recover`",
                    m.pid
                )
            };
            let state = if alive { "running" } else { "interrupted" };
            return Some(serde_json::json!({"turn": t, "state": state, "describe": describe}));
        }
    }
    if !dirty {
        return None;
    }
    let f = turn::pending_failure(s, branch).ok()??;
    let describe = format!(
        "the changes below are the writes of {}, not recorded: `ckptfs turn --retry` \
         sets them aside and runs again, `ckptfs switch --discard --to {branch}` sets them \
         aside, `ckptfs checkpoint` keeps them",
        f.describe()
    );
    Some(
        serde_json::json!({"turn": f.turn, "state": "failed", "outcome": f.outcome,
        "exit_status": f.exit_status, "time": rfc3339_of_utc(&f.time), "describe": describe}),
    )
}

/// `ckptfs log STORE --turns [--branch B] [--json]`.
pub fn print_turns(s: &Store, branch: Option<&str>, max: Option<usize>, json: bool) -> Result<i32> {
    let mut rows = turn::turns(s, branch)?;
    if let Some(n) = max {
        rows.truncate(n);
    }
    if json {
        for r in &mut rows {
            r.started = rfc3339_of_utc(&r.started);
            r.ended = r.ended.as_deref().map(rfc3339_of_utc);
        }
        print_json(&rows)?;
        return Ok(0);
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for r in &rows {
        let exit = r
            .exit_status
            .map_or(String::new(), |e| format!(" exit {e}"));
        let ck = r
            .checkpoint
            .as_deref()
            .map_or("-".to_string(), |c| c[..12.min(c.len())].to_string());
        // A reader that stops early (`| head`) is not an error.
        let _ignored = writeln!(
            out,
            "{} {} {:<12} {:<18} {:<12} {}",
            r.turn,
            ckptfs::text::time::local_of_utc(&r.started),
            r.branch,
            format!("{}{exit}", r.outcome),
            ck,
            r.command.join(" ")
        );
    }
    Ok(0)
}
