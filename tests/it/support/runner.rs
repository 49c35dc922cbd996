//! The runner contract's helpers (`ckptfs turn`): running a turn in a `Workspace`, reading
//! the audit log and `log --turns`, and a guard that kills what a turn left in its cgroup.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use super::cli::{ok_json, run};
use super::workspace::Workspace;

/// `ckptfs turn ROOM EXTRA... -- COMMAND...`.
pub fn turn(w: &Workspace, extra: &[&str], command: &[&str]) -> Output {
    let mut args = vec!["turn", "--as-root", w.room()];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(command);
    run(&args)
}

/// As `turn` with `--json`: the output and the report (the commands tests run print nothing
/// on stdout, so stdout is the report).
pub fn turn_json(w: &Workspace, extra: &[&str], command: &[&str]) -> (Output, Value) {
    let mut extra = extra.to_vec();
    extra.push("--json");
    let o = turn(w, &extra, command);
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "turn --json printed no report ({e}): {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o, v)
}

/// Whether `ckptfs turn` can run here (it needs a cgroup it can make); says why when not.
pub fn turns_can_run(w: &Workspace) -> bool {
    let o = turn(w, &[], &["true"]);
    if !o.status.success() {
        eprintln!(
            "SKIPPED: `ckptfs turn` cannot run here (no cgroup?): {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    o.status.success()
}

/// Every line of the store's audit log.
pub fn audit(store: &Path) -> Vec<Value> {
    fs::read_to_string(store.join("audit.jsonl"))
        .expect("audit.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
        .collect()
}

/// `ckptfs log STORE --turns --json`, newest first.
pub fn turns(store: &Path) -> Vec<Value> {
    ok_json(["log", store.to_str().expect("utf-8"), "--turns"])
        .as_array()
        .expect("array")
        .clone()
}

/// `ckptfs show STORE SPEC --json`'s `checkpoint`.
pub fn record_of(store: &Path, spec: &str) -> Value {
    ok_json(["show", store.to_str().expect("utf-8"), spec])["checkpoint"].clone()
}

/// Kills every process in a cgroup on drop (what a killed runner left running), even after a
/// failed assert.
pub struct CgroupKiller(pub PathBuf);

impl CgroupKiller {
    /// Kills them now; returns how many there were.
    pub fn kill_all(&self) -> usize {
        let pids: Vec<i32> = fs::read_to_string(self.0.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        for p in &pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        pids.len()
    }

    /// Whether no process is left in it.
    pub fn empty(&self) -> bool {
        fs::read_to_string(self.0.join("cgroup.procs"))
            .unwrap_or_default()
            .trim()
            .is_empty()
    }
}

impl Drop for CgroupKiller {
    fn drop(&mut self) {
        self.kill_all();
    }
}
