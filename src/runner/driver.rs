//! What runs inside a turn: a [`Driver`] starts the turn's process and tells how it went.
//! `ckptfs turn -- COMMAND` drives a command ([`Command`]: its exit status is the verdict);
//! `ckptfs agent turn` drives an agent CLI over its own protocol (`crate::agent`), whose
//! verdict is the agent's, checked against its native history.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Child, ExitStatus};

/// Meta keys a driver binds to the turn's checkpoint.
pub type Bound = BTreeMap<String, serde_json::Value>;

/// One turn's process, as the turn runs it: `turn` resolves the user, makes the cgroup, claims
/// the store, adds `CKPTFS_*` to the environment and starts the process in the cgroup; the
/// driver says what to start and drives it.
pub trait Driver {
    /// What the turn runs, for the audit log and `log --turns`.
    fn describe(&self) -> Vec<String>;
    /// Just before the process starts (as the runner, knowing the `owner` (uid, gid) it runs
    /// as): puts in place what the turn lends it. `Err`: the turn cannot run, with why.
    fn start(&mut self, _owner: (u32, u32)) -> std::result::Result<(), String> {
        Ok(())
    }
    /// Where the process starts: entered in the child as the user it runs as (see
    /// `fs::sys::spawn_in_cgroup`); `None` inherits the runner's.
    fn cwd(&self) -> Option<PathBuf>;
    /// The process to start (program, arguments, stdio, environment; never its working
    /// directory, which is [`Driver::cwd`]).
    fn command(&mut self) -> std::process::Command;
    /// Drives the started process to its end. `Err` is a verdict of failure with its reason
    /// (the agent reported a failed turn, its stream broke, it timed out and was killed),
    /// given with the exit status when it has one.
    fn drive(&mut self, child: Child) -> std::result::Result<ExitStatus, Failure>;
    /// Once no process of the turn is left and before anything is recorded, whatever the
    /// outcome: checks what the turn left (`ok`: it exited 0) and puts away what must not be
    /// recorded (a borrowed login). Returns the keys the checkpoint binds, or why the turn
    /// is not to be recorded after all.
    fn settle(&mut self, ok: bool) -> std::result::Result<Bound, String>;
}

/// A driver's verdict of failure.
#[derive(Debug)]
pub struct Failure {
    /// The process's exit status, when it exited.
    pub status: Option<ExitStatus>,
    /// Why the turn failed (one line).
    pub reason: String,
    /// The process could not be started at all (exec failed).
    pub spawn: Option<std::io::Error>,
}

/// `ckptfs turn -- COMMAND`: the command, run where the caller stands.
pub struct Command {
    pub argv: Vec<OsString>,
    /// The caller's directory, taken again through the branch's current mount (see
    /// `procs::caller_dir`); `None`: inherit.
    pub cwd: Option<PathBuf>,
}

impl Driver for Command {
    fn describe(&self) -> Vec<String> {
        self.argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    fn command(&mut self) -> std::process::Command {
        let (program, args) = self
            .argv
            .split_first()
            .map_or_else(|| (OsString::new(), &[][..]), |(p, a)| (p.clone(), a));
        let mut cmd = std::process::Command::new(program);
        cmd.args(args);
        cmd
    }

    fn cwd(&self) -> Option<PathBuf> {
        self.cwd.clone()
    }

    fn drive(&mut self, mut child: Child) -> std::result::Result<ExitStatus, Failure> {
        child.wait().map_err(|e| Failure {
            status: None,
            reason: format!("waiting for {}: {e}", self.describe().join(" ")),
            spawn: None,
        })
    }

    fn settle(&mut self, _ok: bool) -> std::result::Result<Bound, String> {
        Ok(Bound::new())
    }
}
