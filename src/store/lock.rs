//! The store lock and the RUNNING marker.
//!
//! Every mutating command runs inside [`Store::mutate`]: it takes an exclusive `flock` on
//! `STORE/lock` (so two captures serialize), refuses to start while `run/RUNNING.json` exists
//! (a previous operation crashed: `ckptfs recover` must look first), writes the marker, runs,
//! appends one audit line, and removes the marker. A crash leaves the marker behind.
//!
//! A long operation that must not hold the lock while it waits (`ckptfs turn`, which runs an
//! agent for minutes) *claims* the store instead ([`Store::claim`]): its marker is written
//! under the lock and stays while the lock is released, so every other mutating command
//! refuses, naming it; its own steps run under the lock with [`Store::run_claimed`], and
//! [`Store::release_claim`] writes its outcome line and removes the marker.

use std::fs::{self, File, OpenOptions};
use std::io;

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::store::Store;

/// Contents of run/RUNNING.json.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunningMarker {
    pub pid: u32,
    pub op: String,
    pub started_ns: i64,
    pub args: serde_json::Value,
    /// Operation-specific progress needed to roll back (e.g. restore staging paths).
    #[serde(default)]
    pub phase: serde_json::Value,
}

/// A held store lock (released on drop).
pub struct StoreLock {
    _flock: Flock<File>,
}

/// The running mutation: lets the operation record its phase in the marker.
pub struct Mutation<'a> {
    store: &'a Store,
    marker: RunningMarker,
    /// Sync the marker (false for operations on live mounts only: see [`Store::mutate_live`]).
    durable: bool,
}

impl Mutation<'_> {
    /// Records operation progress in the RUNNING marker, durably, for `recover`.
    pub fn set_phase(&mut self, phase: serde_json::Value) -> Result<()> {
        self.marker.phase = phase;
        self.store.write_marker(&self.marker, self.durable)
    }
}

impl Store {
    fn lock_with(&self, arg: FlockArg) -> Result<StoreLock> {
        let p = self.lock_path();
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .map_err(|e| Error::io(&p, e))?;
        let nonblocking = match arg {
            FlockArg::LockExclusive => FlockArg::LockExclusiveNonblock,
            _ => FlockArg::LockSharedNonblock,
        };
        match Flock::lock(f, nonblocking) {
            Ok(l) => Ok(StoreLock { _flock: l }),
            Err((f, nix::errno::Errno::EWOULDBLOCK)) => {
                log::info!("waiting for the store lock {}", p.display());
                Flock::lock(f, arg)
                    .map(|l| StoreLock { _flock: l })
                    .map_err(|(_, e)| Error::io(&p, io::Error::from(e)))
            }
            Err((_, e)) => Err(Error::io(&p, io::Error::from(e))),
        }
    }

    /// Exclusive store lock (blocks until free), for what writes: refused in a store whose own
    /// directories are not real directories (see [`Store::check_own_dirs`]).
    pub fn lock_exclusive(&self) -> Result<StoreLock> {
        let lock = self.lock_with(FlockArg::LockExclusive)?;
        self.check_own_dirs()?;
        Ok(lock)
    }

    /// Shared store lock (blocks while an exclusive holder runs).
    pub fn lock_shared(&self) -> Result<StoreLock> {
        self.lock_with(FlockArg::LockShared)
    }

    /// Reads the RUNNING marker, if any.
    pub fn read_marker(&self) -> Result<Option<RunningMarker>> {
        let p = self.running_marker_path();
        match fs::read(&p) {
            Ok(d) => Ok(Some(serde_json::from_slice(&d).unwrap_or_else(|e| {
                // Empty or torn (a marker of a live-mount operation is not synced, and a power
                // loss can leave it so): still an interrupted operation, for `recover` to clear.
                RunningMarker {
                    pid: 0,
                    op: format!("operation with an unreadable marker ({e})"),
                    started_ns: 0,
                    args: serde_json::Value::Null,
                    phase: serde_json::Value::Null,
                }
            }))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&p, e)),
        }
    }

    fn write_marker(&self, m: &RunningMarker, durable: bool) -> Result<()> {
        let data = serde_json::to_vec_pretty(m)
            .map_err(|e| Error::Invalid(format!("encoding RUNNING marker: {e}")))?;
        if durable {
            atomic::write_atomic_replace(&self.running_marker_path(), &data, 0o600)
        } else {
            atomic::write_atomic_replace_volatile(&self.running_marker_path(), &data, 0o600)
        }
    }

    /// Removes the RUNNING marker durably.
    pub fn clear_marker(&self) -> Result<()> {
        self.clear_marker_with(true)
    }

    fn clear_marker_with(&self, durable: bool) -> Result<()> {
        let p = self.running_marker_path();
        match fs::remove_file(&p) {
            Ok(()) if durable => atomic::sync_path(&self.run_dir()),
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(&p, e)),
        }
    }

    /// Runs a mutating operation under the exclusive lock with a RUNNING marker and an audit
    /// line; see the module doc. `f` returns a JSON summary for the audit log.
    ///
    /// # Errors
    /// `Conflict` when a previous operation's marker is present; otherwise `f`'s error.
    pub fn mutate<T>(
        &self,
        op: &str,
        args: serde_json::Value,
        f: impl FnOnce(&mut Mutation<'_>) -> Result<(T, serde_json::Value)>,
    ) -> Result<T> {
        self.mutate_with(op, args, true, f)
    }

    /// As `mutate`, for an operation that only rearranges live mounts (`switch`): its RUNNING
    /// marker and phases are written atomically but not synced. A crashed process leaves them
    /// in the page cache for `recover`; a reboot removes the mounts they describe, and with
    /// them the need to roll anything back. The store changes the operation makes (refs,
    /// records, `base.json`) are still synced by their own writes; its audit line is written
    /// but left to writeback.
    /// Saves the syncs that cost up to a second each while the disk is busy writing back.
    pub fn mutate_live<T>(
        &self,
        op: &str,
        args: serde_json::Value,
        f: impl FnOnce(&mut Mutation<'_>) -> Result<(T, serde_json::Value)>,
    ) -> Result<T> {
        self.mutate_with(op, args, false, f)
    }

    fn mutate_with<T>(
        &self,
        op: &str,
        args: serde_json::Value,
        durable: bool,
        f: impl FnOnce(&mut Mutation<'_>) -> Result<(T, serde_json::Value)>,
    ) -> Result<T> {
        let _lock = self.lock_exclusive()?;
        if let Some(m) = self.read_marker()? {
            return Err(self.refusal(&m));
        }
        self.run_locked_with(op, args, durable, f)
    }

    /// Why a mutating command cannot start while marker `m` is there.
    fn refusal(&self, m: &RunningMarker) -> Error {
        let store = self.root().display();
        if m.op == "turn" {
            let turn = m.args["turn"].as_str().unwrap_or("?");
            let branch = m.args["branch"].as_str().unwrap_or("?");
            let command = m.args["command"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            if pid_alive(m.pid) {
                return Error::Conflict(format!(
                    "turn {turn} is running on branch {branch} of store {store} (pid {}, since \
                     {}: {command}); wait for it to end",
                    m.pid,
                    crate::text::time::format_utc(m.started_ns)
                ));
            }
            return Error::Conflict(format!(
                "turn {turn} on branch {branch} of store {store} did not finish (its runner, \
                 pid {}, is gone); run `ckptfs recover {store}` to record it",
                m.pid
            ));
        }
        Error::Conflict(format!(
            "store {store} has an unfinished {} (pid {}); run `ckptfs recover {store}` first",
            m.op, m.pid
        ))
    }

    /// Claims the store for a long operation `op` (see the module doc): under the lock,
    /// refuses as `mutate` does when a marker is there, writes the marker durably and appends
    /// `start_line` to the audit log (synced), then releases the lock, leaving the marker.
    ///
    /// # Errors
    /// `Conflict` naming the operation whose marker is there; I/O writing marker or line.
    pub fn claim(
        &self,
        op: &str,
        args: serde_json::Value,
        start_line: &serde_json::Value,
    ) -> Result<RunningMarker> {
        let _lock = self.lock_exclusive()?;
        if let Some(m) = self.read_marker()? {
            return Err(self.refusal(&m));
        }
        let marker = RunningMarker {
            pid: std::process::id(),
            op: op.into(),
            started_ns: crate::text::time::now_ns(),
            args,
            phase: serde_json::Value::Null,
        };
        self.write_marker(&marker, true)?;
        if let Err(e) = self.append_audit(start_line) {
            let _ignored = self.clear_marker();
            return Err(e);
        }
        Ok(marker)
    }

    /// Under the lock, checks that `claim` is still the store's marker (`recover` did not
    /// take it over), records `phase` in it and runs `f`, appending the audit line of step
    /// `op` (`args` plus `f`'s summary) as `mutate` does. The step's `args` are merged into
    /// the marker's (for `recover`: what a held checkpoint froze); the marker stays.
    ///
    /// # Errors
    /// `Conflict` when the marker is no longer this claim; otherwise `f`'s error.
    pub fn run_claimed<T>(
        &self,
        claim: &mut RunningMarker,
        op: &str,
        args: serde_json::Value,
        f: impl FnOnce() -> Result<(T, serde_json::Value)>,
    ) -> Result<T> {
        let _lock = self.lock_exclusive()?;
        self.check_claim(claim)?;
        if let (Some(m), Some(a)) = (claim.args.as_object_mut(), args.as_object()) {
            for (k, v) in a {
                m.insert(k.clone(), v.clone());
            }
        }
        claim.phase = serde_json::json!({ "step": op });
        self.write_marker(claim, true)?;
        let line = |ok: bool, key: &str, v: serde_json::Value| {
            serde_json::json!({"time": crate::text::time::format_utc(crate::text::time::now_ns()),
                "op": op, "pid": std::process::id(), "args": args, "ok": ok, key: v})
        };
        let (ret, line) = match f() {
            Ok((v, summary)) => (Ok(v), line(true, "result", summary)),
            Err(e) => {
                let l = line(false, "error", e.to_string().into());
                (Err(e), l)
            }
        };
        let audit = self.append_audit(&line);
        let v = ret?;
        audit?;
        Ok(v)
    }

    /// Ends a claim: under the lock, appends `outcome_line` (synced), then removes the marker
    /// when it is still this claim's.
    ///
    /// # Errors
    /// I/O writing the line or removing the marker.
    pub fn release_claim(
        &self,
        claim: &RunningMarker,
        outcome_line: &serde_json::Value,
    ) -> Result<()> {
        let _lock = self.lock_exclusive()?;
        self.append_audit(outcome_line)?;
        if self.check_claim(claim).is_ok() {
            self.clear_marker()?;
        }
        Ok(())
    }

    /// `Conflict` unless the marker is `claim`'s (same pid, operation and start).
    fn check_claim(&self, claim: &RunningMarker) -> Result<()> {
        match self.read_marker()? {
            Some(m)
                if m.pid == claim.pid && m.op == claim.op && m.started_ns == claim.started_ns =>
            {
                Ok(())
            }
            Some(m) => Err(Error::Conflict(format!(
                "the {} of pid {} no longer holds store {}: {} (pid {}) does",
                claim.op,
                claim.pid,
                self.root().display(),
                m.op,
                m.pid
            ))),
            None => Err(Error::Conflict(format!(
                "the {} of pid {} no longer holds store {} (its marker is gone: `recover` ran?)",
                claim.op,
                claim.pid,
                self.root().display()
            ))),
        }
    }

    /// As `mutate`, for callers that already hold the lock and handled the marker (`recover`).
    pub fn run_locked<T>(
        &self,
        op: &str,
        args: serde_json::Value,
        f: impl FnOnce(&mut Mutation<'_>) -> Result<(T, serde_json::Value)>,
    ) -> Result<T> {
        self.run_locked_with(op, args, true, f)
    }

    fn run_locked_with<T>(
        &self,
        op: &str,
        args: serde_json::Value,
        durable: bool,
        f: impl FnOnce(&mut Mutation<'_>) -> Result<(T, serde_json::Value)>,
    ) -> Result<T> {
        let marker = RunningMarker {
            pid: std::process::id(),
            op: op.into(),
            started_ns: crate::text::time::now_ns(),
            args: args.clone(),
            phase: serde_json::Value::Null,
        };
        self.write_marker(&marker, durable)?;
        let mut m = Mutation {
            store: self,
            marker,
            durable,
        };
        let result = f(&mut m);
        let (ret, line) = match result {
            Ok((v, summary)) => (
                Ok(v),
                serde_json::json!({"time": crate::text::time::format_utc(crate::text::time::now_ns()),
                    "op": op, "pid": std::process::id(), "args": args, "ok": true, "result": summary}),
            ),
            Err(e) => {
                let line = serde_json::json!({"time": crate::text::time::format_utc(crate::text::time::now_ns()),
                    "op": op, "pid": std::process::id(), "args": args, "ok": false, "error": e.to_string()});
                (Err(e), line)
            }
        };
        let audit = atomic::append_line_with(&self.audit_path(), &line.to_string(), durable);
        let cleared = self.clear_marker_with(durable);
        let v = ret?;
        audit?;
        cleared?;
        Ok(v)
    }

    /// Appends one JSON line to audit.jsonl (synced).
    pub fn append_audit(&self, line: &serde_json::Value) -> Result<()> {
        atomic::append_line(&self.audit_path(), &line.to_string())
    }
}

/// True when a process with this pid exists.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(p) = i32::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false; // 0 and negatives address process groups, never one process
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), None) {
        Ok(()) => true,
        Err(nix::errno::Errno::EPERM) => true,
        Err(_) => false,
    }
}
