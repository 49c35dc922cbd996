//! `ckptfs turn`: one agent turn as one checkpoint, or none (docs/runner.md is the contract).
//!
//! A composition of what the workspace already does, in this order:
//!
//! 1. compare the branch's runtime fingerprint with this machine's (`fingerprint`): refuse a
//!    change unless accepted (audited);
//! 2. mount the branch if it is not (`workspace::mount`);
//! 3. refuse while the writes of a failed turn are still in the upper layer (`--retry` sets
//!    them aside first, as `switch --discard` does, by that very switch);
//! 4. make the workspace's cgroup (`workspace::agent_cgroup`, as `exec` does);
//! 5. claim the store (`Store::claim`): the RUNNING marker names the turn, so every other
//!    mutating command refuses, naming it; a `turn-start` line is appended to the audit log
//!    and synced;
//! 6. run COMMAND in the cgroup (born there: `sys::spawn_in_cgroup`), as the user `run_as`
//!    resolves (the workspace's owner, `--user`, or root with `--as-root`), and wait;
//! 7. on exit 0, take one held checkpoint (the cgroup is frozen for its second pass) as a step
//!    of the claim, recording meta, fingerprint, command, exit status and times; on anything
//!    else record nothing on the branch;
//! 8. append the outcome line (`op: "turn"`, synced) and remove the marker.
//!
//! If the runner itself dies, the marker stays: other commands refuse ("did not finish"), and
//! `recover` (once no process is left in the cgroup) appends a `crashed` outcome and clears it.
//! A failed turn's writes stay in the upper layer until `turn --retry`, `switch --discard` or a
//! `checkpoint` decides; [`pending_failure`] tells which turn left them (from the audit log).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::runner::driver::{self, Driver, Failure};
use crate::runner::fingerprint::{self, RuntimeCheck};
use crate::runner::procs;
use crate::runner::run_as::{self, RunAsOptions};
use crate::store::checkpoint::{check_meta, Annotations, TurnRecord, MAX_META_BYTES};
use crate::store::lock::{pid_alive, RunningMarker};
use crate::store::refs::check_name;
use crate::store::Store;
use crate::text::time::format_utc;
use crate::text::time::now_ns;
use crate::workspace::{self, DirtyPolicy, Hold};

/// Exit status of a shell for a command that is not found.
pub const EXIT_NOT_FOUND: i32 = 127;
/// Exit status of a shell for a command found but not executable.
pub const EXIT_CANNOT_EXECUTE: i32 = 126;

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct TurnOptions {
    pub branch: String,
    pub label: Option<String>,
    pub message: String,
    pub meta: BTreeMap<String, serde_json::Value>,
    /// `--meta-file`: read once COMMAND has exited 0 (missing: no keys); `meta` wins.
    pub meta_file: Option<PathBuf>,
    /// COMMAND and its arguments.
    pub command: Vec<OsString>,
    /// Set the writes of a failed turn aside (displaced/) and run again.
    pub retry: bool,
    /// Go on over a differing runtime fingerprint (audited).
    pub accept_runtime_change: bool,
    /// Leave the upper layer unfolded after the turn's checkpoint (`--no-fold`).
    pub no_fold: bool,
    /// Who COMMAND runs as (`--user`, `--as-root`; see `run_as`).
    pub run_as: RunAsOptions,
    /// What drives the turn, when not a command (`agent:codex`): recorded in the audit log.
    pub driver: Option<String>,
    /// The runtime fingerprint now, when the caller has just taken it (it is not taken
    /// again).
    pub runtime_now: Option<crate::store::checkpoint::Runtime>,
}

/// What a turn did.
#[derive(Clone, Debug, Serialize)]
pub struct TurnReport {
    pub turn: String,
    pub branch: String,
    /// `ok`; `failed` (non-zero exit), `killed` (by a signal), `cannot-run` (127/126),
    /// `checkpoint-failed` (COMMAND exited 0 but its checkpoint could not be taken).
    pub outcome: String,
    /// The exit status `turn` exits with: COMMAND's, 128+N for a signal N, 127/126.
    pub exit_status: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// The uid COMMAND ran as.
    pub uid: u32,
    /// The checkpoint the turn recorded (only when `ok`).
    pub checkpoint: Option<ObjectId>,
    /// The branch head the turn started from.
    pub parent: ObjectId,
    pub started: String,
    pub ended: String,
    pub elapsed_ms: u64,
    /// The branch was mounted by this turn (it was not).
    pub mounted: bool,
    /// Where `--retry` set a failed turn's writes aside.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_aside: Option<PathBuf>,
    pub runtime: RuntimeCheck,
    /// Processes of the turn still running [`procs::SETTLE_WAIT`] after its process ended
    /// (`PID (COMMAND)`; frozen for the checkpoint, and the next turn waits for them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_running: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A turn whose outcome was not `ok` and whose writes may still be in the upper layer.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FailedTurn {
    pub turn: String,
    pub outcome: String,
    pub exit_status: Option<i64>,
    /// When it ended (or was found crashed).
    pub time: String,
}

impl FailedTurn {
    /// `turn ID (failed, exit 1, TIME)`.
    pub fn describe(&self) -> String {
        let exit = self
            .exit_status
            .map_or(String::new(), |e| format!("exit {e}, "));
        format!("turn {} ({}, {exit}{})", self.turn, self.outcome, self.time)
    }
}

/// A turn as `log --turns` lists it.
#[derive(Clone, Debug, Serialize)]
pub struct TurnRow {
    pub turn: String,
    pub branch: String,
    pub started: String,
    pub command: Vec<String>,
    /// `running`, `interrupted` (its runner died and `recover` has not looked yet), or the
    /// outcome recorded (`ok`, `failed`, `killed`, `cannot-run`, `checkpoint-failed`,
    /// `crashed`).
    pub outcome: String,
    pub exit_status: Option<i64>,
    pub checkpoint: Option<String>,
    pub ended: Option<String>,
    pub label: Option<String>,
}

/// The turn's id: 12 hex digits of a hash of store, branch, start time and pid.
fn turn_id(store: &Store, branch: &str, started_ns: i64) -> String {
    let seed = format!(
        "{}\0{branch}\0{started_ns}\0{}",
        store.root().display(),
        std::process::id()
    );
    ObjectId::of(seed.as_bytes()).to_hex()[..12].to_string()
}

/// The shell's exit status for a failed spawn of `program` (see `ckptfs exec`): 127 when
/// there is no such command, else 126.
fn spawn_failure_code(program: &Path, err: &std::io::Error) -> i32 {
    let names_a_path = program.as_os_str().as_encoded_bytes().contains(&b'/');
    match err.kind() {
        std::io::ErrorKind::NotFound if !(names_a_path && program.exists()) => EXIT_NOT_FOUND,
        _ => EXIT_CANNOT_EXECUTE,
    }
}

/// The last turn on `branch` that did not end `ok`, when the branch head is still the one it
/// started from (so its writes, if any, are still un-checkpointed in the upper layer), from
/// the audit log.
///
/// # Errors
/// Reading the audit log or the branch.
pub fn pending_failure(store: &Store, branch: &str) -> Result<Option<FailedTurn>> {
    let head = store.read_branch(branch)?.and_then(|b| b.head);
    // The newest turn outcome of the branch, unless a `switch --discard` came after it (it
    // set the upper layer aside: what the workspace holds now is newer).
    let last = store.find_audit_back(|l| {
        let set_aside = l["op"] == "switch"
            && l["result"]["from_branch"].as_str() == Some(branch)
            && !l["result"]["displaced"].is_null();
        if set_aside {
            return Some(None);
        }
        (l["op"] == "turn" && l["args"]["branch"].as_str() == Some(branch)).then(|| Some(l.clone()))
    })?;
    let Some(l) = last.flatten() else {
        return Ok(None);
    };
    let outcome = l["result"]["outcome"].as_str().unwrap_or("failed");
    let from = l["args"]["parent"].as_str();
    if outcome == "ok" || from != head.map(|h| h.to_hex()).as_deref() {
        return Ok(None);
    }
    Ok(Some(FailedTurn {
        turn: l["args"]["turn"].as_str().unwrap_or("?").to_string(),
        outcome: outcome.to_string(),
        exit_status: l["result"]["exit_status"].as_i64(),
        time: l["time"].as_str().unwrap_or("").to_string(),
    }))
}

/// The outcome audit line of a turn.
fn outcome_line(
    args: &serde_json::Value,
    ok: bool,
    result: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({"time": format_utc(now_ns()), "op": "turn", "pid": std::process::id(),
        "args": args, "ok": ok, "result": result})
}

/// Runs one turn of COMMAND (`opts.command`), where the caller stands; see the module doc.
///
/// # Errors
/// As [`run_driven`]; `Usage` without a command.
pub fn run(store: &Store, opts: &TurnOptions) -> Result<TurnReport> {
    if opts.command.is_empty() {
        return Err(Error::Usage("turn needs a command after --".into()));
    }
    // Where the caller stands, by path: a retry or a mount below changes what the path
    // shows, and COMMAND must run in the branch's workspace as it is then, not in the
    // overlay a switch took away (it is read-only).
    let cwd = procs::caller_dir(store);
    let mut driver = driver::Command {
        argv: opts.command.clone(),
        cwd,
    };
    run_driven(store, opts, &mut driver)
}

/// Runs one turn of `driver`; see the module doc.
///
/// # Errors
/// Before the driver's process runs: bad input (`Usage`), a refused runtime change, a failed
/// turn's writes pending, processes of an earlier turn still running after
/// [`procs::SETTLE_WAIT`], a store claimed by another operation (`Conflict`), mount
/// failures. Once it has run, the report says what happened (errors then are only those
/// recording it).
pub fn run_driven(
    store: &Store,
    opts: &TurnOptions,
    driver: &mut dyn Driver,
) -> Result<TurnReport> {
    let t0 = std::time::Instant::now();
    let b = opts.branch.as_str();
    let (runtime, live, set_aside) = prepare(store, opts)?;
    let who = run_as::resolve(store, b, &opts.run_as)?;
    let cgroup = workspace::agent_cgroup(store, b)?;
    let busy = procs::wait_until_empty(&cgroup, procs::SETTLE_WAIT);
    if !busy.is_empty() {
        return Err(Error::Conflict(format!(
            "processes {} still run in the workspace's cgroup {} (an earlier turn's or \
             `exec`'s) after {} s; a turn starts with it empty: wait for them or stop them \
             (`echo 1 > {}/cgroup.kill`)",
            busy.join(", "),
            cgroup.display(),
            procs::SETTLE_WAIT.as_secs(),
            cgroup.display()
        )));
    }
    let parent = store
        .read_branch(b)?
        .ok_or_else(|| Error::NotFound(format!("branch {b}")))?
        .head
        .ok_or_else(|| Error::NotFound(format!("branch {b} has no checkpoint yet")))?;
    let started_ns = now_ns();
    let turn = turn_id(store, b, started_ns);
    let command = driver.describe();
    let args_json = serde_json::json!({"turn": turn, "branch": b, "parent": parent,
        "label": opts.label, "command": command, "cgroup": cgroup, "driver": opts.driver,
        "meta_keys": opts.meta.keys().collect::<Vec<_>>(),
        "accepted_runtime_change": runtime.accepted});
    let start_line = serde_json::json!({"time": format_utc(started_ns), "op": "turn-start",
        "pid": std::process::id(), "args": args_json, "ok": true});
    let mut claim = store.claim("turn", args_json.clone(), &start_line)?;
    let waited = spawn_and_drive(store, b, &turn, &who, &cgroup, driver);
    let ended_ns = now_ns();
    let mut report = TurnReport {
        turn: turn.clone(),
        branch: b.to_string(),
        outcome: String::new(),
        exit_status: 0,
        signal: None,
        uid: who.uid,
        checkpoint: None,
        parent,
        started: format_utc(started_ns),
        ended: format_utc(ended_ns),
        elapsed_ms: 0,
        mounted: !live,
        set_aside,
        runtime,
        left_running: Vec::new(),
        error: None,
    };
    set_outcome(
        &mut report,
        waited,
        command.first().map_or("", String::as_str),
    );
    // What the turn's process started goes with it: the checkpoint is taken once they are
    // gone (bounded; what is left then is frozen for the checkpoint and named).
    report.left_running = procs::wait_until_empty(&cgroup, procs::SETTLE_WAIT);
    if !report.left_running.is_empty() {
        log::warn!(
            "turn {turn}: processes {} still run in {} after {} s",
            report.left_running.join(", "),
            cgroup.display(),
            procs::SETTLE_WAIT.as_secs()
        );
    }
    let mut meta = turn_meta(opts, &mut report);
    match driver.settle(report.outcome == "ok") {
        Ok(bound) => meta.extend(bound),
        Err(e) if report.outcome == "ok" => {
            report.outcome = "failed".into();
            report.exit_status = 1;
            report.error = Some(e);
        }
        Err(e) => log::warn!("turn {turn}: {e}"),
    }
    if report.outcome == "ok" {
        let ann = Annotations {
            meta,
            runtime: Some(report.runtime.now.clone()),
            turn: Some(TurnRecord {
                id: turn.clone(),
                command: command.clone(),
                exit_status: 0,
                started_ns,
                ended_ns,
                accepted_runtime_change: report.runtime.accepted,
            }),
        };
        record_checkpoint(store, opts, &ann, &mut claim, &mut report);
    }
    report.elapsed_ms = t0.elapsed().as_millis() as u64;
    let ok = report.outcome == "ok";
    let result = serde_json::json!({"outcome": report.outcome, "exit_status": report.exit_status,
        "signal": report.signal, "checkpoint": report.checkpoint, "started": report.started,
        "ended": report.ended, "error": report.error, "left_running": report.left_running});
    store.release_claim(&claim, &outcome_line(&args_json, ok, result))?;
    // Between turns nobody is inside: the upper layer's recorded bytes leave it (a fold, see
    // docs/workspaces.md). Not folding is never a turn's failure: the checkpoint stands and
    // the next checkpoint or switch folds.
    if ok && !opts.no_fold {
        match workspace::fold(store, b) {
            Ok(f) if f.folded => {
                log::info!("turn {turn}: folded {} B of the upper layer", f.upper_bytes)
            }
            Ok(_) => {}
            Err(e) => log::warn!("turn {turn}: upper layer not folded: {e}"),
        }
    }
    Ok(report)
}

/// Starts the driver's process in the cgroup as `who`, with the turn's environment, and
/// drives it to its end.
fn spawn_and_drive(
    store: &Store,
    branch: &str,
    turn: &str,
    who: &run_as::RunAs,
    cgroup: &Path,
    driver: &mut dyn Driver,
) -> std::result::Result<std::process::ExitStatus, Failure> {
    let procs_path = cgroup.join("cgroup.procs");
    let owner = who.switch.as_ref().map_or_else(
        || (who.uid, nix::unistd::getgid().as_raw()),
        |s| (s.credentials.uid, s.credentials.gid),
    );
    if let Err(reason) = driver.start(owner) {
        return Err(Failure {
            status: None,
            reason,
            spawn: None,
        });
    }
    let mut cmd = driver.command();
    // What the driver sets wins over the user's defaults (an agent's HOME is its own home).
    let own: Vec<(std::ffi::OsString, Option<std::ffi::OsString>)> = cmd
        .get_envs()
        .map(|(k, v)| (k.to_os_string(), v.map(std::ffi::OsStr::to_os_string)))
        .collect();
    cmd.env("CKPTFS_TURN", turn)
        .env("CKPTFS_BRANCH", branch)
        .env("CKPTFS_STORE", store.root());
    who.set_env(&mut cmd);
    for (k, v) in own {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let creds = who.switch.as_ref().map(|s| &s.credentials);
    let interrupts = crate::fs::sys::IgnoreInterrupts::new();
    let waited = match std::fs::OpenOptions::new().write(true).open(&procs_path) {
        Err(e) => Err(Failure {
            status: None,
            reason: Error::io(&procs_path, e).to_string(),
            spawn: None,
        }),
        Ok(procs) => {
            match crate::fs::sys::spawn_in_cgroup(&mut cmd, procs, creds, driver.cwd().as_deref()) {
                Err(e) => Err(Failure {
                    status: None,
                    reason: e.to_string(),
                    spawn: Some(e),
                }),
                Ok(child) => driver.drive(child),
            }
        }
    };
    drop(interrupts);
    waited
}

/// The turn's checkpoint, as a step of its claim, into `report` (`checkpoint-failed` when it
/// could not be taken).
fn record_checkpoint(
    store: &Store,
    opts: &TurnOptions,
    ann: &Annotations,
    claim: &mut RunningMarker,
    report: &mut TurnReport,
) {
    let message = if opts.message.is_empty() {
        format!("turn {}", report.turn)
    } else {
        opts.message.clone()
    };
    let o = workspace::CheckpointOptions {
        label: opts.label.as_deref(),
        message: &message,
        hold: &Hold::default(),
        exclude: &[],
        // A completed turn is one checkpoint, also when it wrote nothing.
        allow_empty: true,
        annotations: ann,
    };
    match workspace::checkpoint(store, &opts.branch, &o, Some(claim)) {
        Ok(r) => report.checkpoint = Some(r.id),
        Err(e) => {
            report.outcome = "checkpoint-failed".into();
            report.exit_status = 1;
            report.error = Some(e.to_string());
        }
    }
}

/// Before a turn: names and metadata checked, the runtime compared with the branch's, the
/// workspace mounted when it is not, and a failed turn's writes set aside with `--retry`.
/// Returns the runtime check, whether the workspace was mounted already, and where the
/// writes went.
fn prepare(
    store: &Store,
    opts: &TurnOptions,
) -> Result<(fingerprint::RuntimeCheck, bool, Option<PathBuf>)> {
    check_name("branch", &opts.branch)?;
    check_meta(&opts.meta)?;
    if let Some(l) = &opts.label {
        check_name("label", l)?;
        if store.read_label(l)?.is_some() {
            return Err(Error::Conflict(format!(
                "label {l} already exists; labels are immutable"
            )));
        }
    }
    let b = opts.branch.as_str();
    let now = opts
        .runtime_now
        .clone()
        .unwrap_or_else(|| fingerprint::current(store, Some(b)));
    let runtime =
        fingerprint::check_branch_now(store, b, "run a turn on", opts.accept_runtime_change, now)?;
    let live = workspace::ensure_mounted(store, b)?;
    let mut set_aside = None;
    if let Some(f) = pending_failure(store, b)? {
        if workspace::dirty(store, b)?.dirty {
            if !opts.retry {
                let again = if opts.driver.is_some() {
                    "ckptfs agent turn --retry"
                } else {
                    "ckptfs turn --retry"
                };
                return Err(Error::Conflict(format!(
                    "the workspace of branch {b} holds the writes of {}; `{again}` sets them \
                     aside (displaced/) and runs again, `ckptfs switch --discard --to {b}` sets \
                     them aside, `ckptfs checkpoint` keeps them",
                    f.describe()
                )));
            }
            set_aside = workspace::switch(store, b, b, DirtyPolicy::Discard, None)?.displaced;
        }
    }
    Ok((runtime, live, set_aside))
}

/// The outcome of the turn's process (`waited`) into `report`: exit status or signal, why
/// the driver judged it failed, or why it could not run (127 when not found, 126 when not
/// executable, as shells say).
fn set_outcome(
    report: &mut TurnReport,
    waited: std::result::Result<std::process::ExitStatus, Failure>,
    program: &str,
) {
    use std::os::unix::process::ExitStatusExt;
    match waited {
        Err(Failure {
            spawn: Some(source),
            ..
        }) => {
            report.exit_status = spawn_failure_code(Path::new(program), &source);
            report.outcome = "cannot-run".into();
            report.error = Some(format!(
                "{}: {}: {source}",
                if report.exit_status == EXIT_NOT_FOUND {
                    "command not found"
                } else {
                    "cannot execute"
                },
                crate::text::quote::text(program)
            ));
        }
        Err(Failure {
            status: None,
            reason,
            ..
        }) => {
            report.exit_status = EXIT_CANNOT_EXECUTE;
            report.outcome = "cannot-run".into();
            report.error = Some(reason);
        }
        Err(Failure {
            status: Some(status),
            reason,
            ..
        }) => {
            report.signal = status.signal();
            report.exit_status = match (status.signal(), status.code()) {
                (Some(sig), _) => 128 + sig,
                (None, Some(c)) if c != 0 => c,
                _ => 1,
            };
            report.outcome = "failed".into();
            report.error = Some(reason);
        }
        Ok(status) => {
            if let Some(sig) = status.signal() {
                report.signal = Some(sig);
                report.exit_status = 128 + sig;
                report.outcome = "killed".into();
            } else {
                report.exit_status = status.code().unwrap_or(1);
                report.outcome = if report.exit_status == 0 {
                    "ok"
                } else {
                    "failed"
                }
                .into();
            }
        }
    }
}

/// The turn's metadata: `--meta`, over the `--meta-file` COMMAND wrote when it succeeded. A
/// file that does not pass is the turn's failure (`checkpoint-failed`), in `report`.
fn turn_meta(opts: &TurnOptions, report: &mut TurnReport) -> BTreeMap<String, serde_json::Value> {
    let meta = match (&opts.meta_file, report.outcome == "ok") {
        (Some(f), true) => match read_meta_file_if_there(f) {
            Ok(mut m) => {
                m.extend(opts.meta.clone());
                check_meta(&m).map(|()| m)
            }
            Err(e) => Err(e),
        },
        _ => Ok(opts.meta.clone()),
    };
    match meta {
        Ok(m) => m,
        Err(e) => {
            report.outcome = "checkpoint-failed".into();
            report.exit_status = 1;
            report.error = Some(e.to_string());
            BTreeMap::new()
        }
    }
}

/// A `--meta-file`: a regular file (its last component not a symlink; opened non-blocking)
/// holding a JSON object of at most 4x [`MAX_META_BYTES`] ('-': stdin), checked as meta.
///
/// # Errors
/// `Usage` naming the file and what is wrong with it; I/O reading it.
pub fn read_meta_file(f: &Path) -> Result<BTreeMap<String, serde_json::Value>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let limit = (MAX_META_BYTES * 4) as u64;
    let mut data = Vec::new();
    if f == Path::new("-") {
        std::io::stdin()
            .take(limit + 1)
            .read_to_end(&mut data)
            .map_err(|e| Error::io(f, e))?;
    } else {
        let h = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(f)
            .map_err(|e| Error::io(f, e))?;
        if !h.metadata().map_err(|e| Error::io(f, e))?.is_file() {
            return Err(Error::Usage(format!(
                "--meta-file {}: not a regular file",
                f.display()
            )));
        }
        h.take(limit + 1)
            .read_to_end(&mut data)
            .map_err(|e| Error::io(f, e))?;
    }
    if data.len() as u64 > limit {
        return Err(Error::Usage(format!(
            "--meta-file {}: more than {limit} bytes",
            f.display()
        )));
    }
    let v: serde_json::Value = serde_json::from_slice(&data)
        .map_err(|e| Error::Usage(format!("--meta-file {}: not JSON ({e})", f.display())))?;
    let serde_json::Value::Object(map) = v else {
        return Err(Error::Usage(format!(
            "--meta-file {}: expected a JSON object of KEY: VALUE",
            f.display()
        )));
    };
    let out: BTreeMap<String, serde_json::Value> = map.into_iter().collect();
    check_meta(&out).map_err(|e| Error::Usage(format!("--meta-file {}: {e}", f.display())))?;
    Ok(out)
}

/// As [`read_meta_file`]; a file that is not there gives no keys.
fn read_meta_file_if_there(f: &Path) -> Result<BTreeMap<String, serde_json::Value>> {
    match std::fs::symlink_metadata(f) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        _ => read_meta_file(f),
    }
}

/// `recover` of a turn whose runner died (marker `m`, its pid gone): refuses while processes
/// are left in the turn's cgroup; otherwise appends the `crashed` outcome line. Returns what
/// it did. Nothing on the branch changes: the writes stay in the upper layer.
///
/// # Errors
/// `Conflict` naming the processes still running; writing the audit line.
pub fn recover_turn(store: &Store, m: &RunningMarker) -> Result<Vec<String>> {
    let turn = m.args["turn"].as_str().unwrap_or("?");
    let branch = m.args["branch"].as_str().unwrap_or("?");
    if let Some(cg) = m.args["cgroup"].as_str() {
        let left = procs::cgroup_pids(Path::new(cg));
        if !left.is_empty() {
            return Err(Error::Conflict(format!(
                "turn {turn} on branch {branch}: its runner is gone but processes {left:?} of \
                 the turn still run in {cg}; wait for them or stop them (`echo 1 > \
                 {cg}/cgroup.kill`), then run recover again"
            )));
        }
    }
    // Died after writing its outcome line, before removing the marker: nothing to add.
    let recorded = store
        .read_audit()?
        .iter()
        .any(|l| l["op"] == "turn" && l["args"]["turn"].as_str() == Some(turn));
    if recorded {
        return Ok(vec![format!(
            "turn {turn} on branch {branch} had recorded its outcome when its runner died"
        )]);
    }
    let mut args = m.args.clone();
    args["recovered_by"] = serde_json::json!(std::process::id());
    // Died after its checkpoint was published (before the outcome line): the turn completed,
    // and its checkpoint, which names it, is the branch head.
    if let Some(id) = published_by(store, branch, turn)? {
        let result = serde_json::json!({"outcome": "ok", "exit_status": 0, "signal": null,
            "checkpoint": id, "started": format_utc(m.started_ns), "ended": null,
            "error": null});
        store.append_audit(&outcome_line(&args, true, result))?;
        return Ok(vec![format!(
            "turn {turn} on branch {branch} had recorded its checkpoint {} when its runner \
             (pid {}) died: recorded as ok",
            id.short(),
            m.pid
        )]);
    }
    let result = serde_json::json!({"outcome": "crashed", "exit_status": null,
        "signal": null, "checkpoint": null, "started": format_utc(m.started_ns),
        "ended": null, "error": format!("the runner (pid {}) died", m.pid)});
    store.append_audit(&outcome_line(&args, false, result))?;
    Ok(vec![format!(
        "turn {turn} on branch {branch} did not finish (its runner, pid {}, died): recorded \
         as crashed; nothing was recorded on the branch, its writes stay in the workspace \
         (`turn --retry`, `switch --discard` or `checkpoint` decide)",
        m.pid
    )])
}

/// The head of `branch` when its record names turn `turn` (published by it).
fn published_by(store: &Store, branch: &str, turn: &str) -> Result<Option<ObjectId>> {
    let Some(head) = store.read_branch(branch)?.and_then(|b| b.head) else {
        return Ok(None);
    };
    let c = store.read_checkpoint(&head)?;
    Ok(c.annotations
        .turn
        .as_ref()
        .is_some_and(|t| t.id == turn)
        .then_some(head))
}

/// What drove each turn (`TurnOptions::driver`: `agent-turn:codex`...), by turn id, from
/// the audit log's start lines; turns of a command are not listed.
///
/// # Errors
/// Reading the audit log.
pub fn turn_drivers(store: &Store) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for l in store.read_audit()? {
        if l["op"] != "turn-start" {
            continue;
        }
        if let (Some(t), Some(d)) = (l["args"]["turn"].as_str(), l["args"]["driver"].as_str()) {
            out.insert(t.to_string(), d.to_string());
        }
    }
    Ok(out)
}

/// Every turn in the audit log, newest first (of `branch` only, when given).
///
/// # Errors
/// Reading the audit log or the marker.
pub fn turns(store: &Store, branch: Option<&str>) -> Result<Vec<TurnRow>> {
    let marker = store.read_marker()?;
    let mut rows: Vec<TurnRow> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for l in store.read_audit()? {
        let op = l["op"].as_str().unwrap_or("");
        if op != "turn-start" && op != "turn" {
            continue;
        }
        let a = &l["args"];
        let id = a["turn"].as_str().unwrap_or("").to_string();
        if branch.is_some_and(|b| a["branch"].as_str() != Some(b)) {
            continue;
        }
        let i = *index.entry(id.clone()).or_insert_with(|| {
            rows.push(TurnRow {
                turn: id.clone(),
                branch: a["branch"].as_str().unwrap_or("").to_string(),
                started: l["time"].as_str().unwrap_or("").to_string(),
                command: serde_json::from_value(a["command"].clone()).unwrap_or_default(),
                outcome: "interrupted".into(),
                exit_status: None,
                checkpoint: None,
                ended: None,
                label: a["label"].as_str().map(str::to_string),
            });
            rows.len() - 1
        });
        if op == "turn" {
            let r = &l["result"];
            let row = &mut rows[i];
            row.outcome = r["outcome"].as_str().unwrap_or("failed").to_string();
            row.exit_status = r["exit_status"].as_i64();
            row.checkpoint = r["checkpoint"].as_str().map(str::to_string);
            row.ended = Some(l["time"].as_str().unwrap_or("").to_string());
        }
    }
    if let Some(m) = marker.filter(|m| m.op == "turn" && pid_alive(m.pid)) {
        if let Some(row) = rows
            .iter_mut()
            .find(|r| Some(r.turn.as_str()) == m.args["turn"].as_str())
        {
            row.outcome = "running".into();
        }
    }
    rows.reverse();
    Ok(rows)
}
