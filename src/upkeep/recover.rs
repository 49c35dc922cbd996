//! `recover`: after a crash, finish or roll back the interrupted operation recorded in
//! `run/RUNNING.json`, and remove half-written temp files. Runs under the exclusive lock, so no
//! other mutating command can be running; a marker whose process is still alive is refused.
//!
//! It also repairs what `doctor` reports as safely repairable: dead pins (and pins or workspace
//! mount records a power loss left unreadable: never synced, they describe what a reboot
//! ended), dead control sockets
//! and pid files, writable object files (back to 0444), a store directory open to others (back
//! to 0700), and mounts of this store whose daemon is gone (lazily detached). An interrupted
//! `archive` has its partial output files removed; an interrupted `gc` or `unarchive` needs no
//! rollback (both keep the store consistent at every step: rerun them to finish). A checkpoint
//! that died holding writers has its cgroups thawed, and its store's filesystem
//! (`--freeze-fs`) before anything else, since every write there would wait. A turn whose
//! runner died is recorded as `crashed` once no process of it is left (`runner::turn`).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fs::safe::Dir;
use crate::store::lock::pid_alive;
use crate::store::Store;
use crate::upkeep::inventory;

/// What recover did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecoverReport {
    /// The interrupted operation, if there was one.
    pub interrupted: Option<String>,
    pub actions: Vec<String>,
    pub temp_files_removed: u64,
}

/// Repairs what can be repaired safely; see the module doc.
///
/// # Errors
/// `Conflict` when the recorded process is still alive.
pub fn recover(store: &Store) -> Result<RecoverReport> {
    let _lock = store.lock_exclusive()?;
    let mut report = RecoverReport::default();
    let marker = store.read_marker()?;
    if let Some(m) = &marker {
        if m.pid != std::process::id() && pid_alive(m.pid) {
            return Err(Error::Conflict(format!(
                "the {} recorded in {} (pid {}) is still running; wait for it or stop it first",
                m.op,
                store.running_marker_path().display(),
                m.pid
            )));
        }
        report.interrupted = Some(format!("{} (pid {})", m.op, m.pid));
        // First, before anything writes to a filesystem a dead checkpoint left frozen.
        if let Some(dir) = m.args.get("freeze_fs").and_then(|v| v.as_str()) {
            report
                .actions
                .extend(crate::workspace::freeze::thaw_fs_after_crash(Path::new(
                    dir,
                )));
        }
        if m.op == "restore" {
            report
                .actions
                .extend(crate::transfer::restore::roll_back_marker(&m.phase)?);
        }
        if m.op == "switch" {
            if let Ok(phase) =
                serde_json::from_value::<crate::workspace::SwitchPhase>(m.phase.clone())
            {
                report
                    .actions
                    .extend(crate::workspace::roll_back_switch(store, &phase)?);
            }
        }
        if m.op == "fork" {
            report
                .actions
                .extend(crate::workspace::roll_back_fork(store, &m.args)?);
        }
        if m.op == "fold" {
            report
                .actions
                .extend(crate::workspace::roll_back_fold(store, &m.args)?);
        }
        // A turn's marker names what its held checkpoint froze too (`Store::run_claimed`).
        if m.op == "checkpoint" || m.op == "switch" || m.op == "turn" {
            let cgroups: Vec<std::path::PathBuf> = m
                .args
                .get("freeze_cgroups")
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default();
            report
                .actions
                .extend(crate::workspace::freeze::thaw_after_crash(&cgroups));
        }
        if m.op == "turn" {
            report
                .actions
                .extend(crate::runner::turn::recover_turn(store, m)?);
        }
        if m.op == "archive" {
            let dir = m.phase.get("temp_dir").and_then(|d| d.as_str());
            let prefix = m.phase.get("temp_prefix").and_then(|d| d.as_str());
            if let (Some(dir), Some(prefix)) = (dir, prefix) {
                for t in crate::fs::list_dir(Path::new(dir))? {
                    let ours = t
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(prefix));
                    if ours {
                        fs::remove_file(&t).map_err(|e| Error::io(&t, e))?;
                        report
                            .actions
                            .push(format!("removed the partial archive file {}", t.display()));
                    }
                }
            }
        }
        if m.op == "gc" || m.op == "unarchive" {
            report.actions.push(format!(
                "{} was interrupted; the store is consistent, run it again to finish",
                m.op
            ));
        }
    }
    // After the rollback above (which moves back a tree a crashed switch was parking).
    let evicted = crate::workspace::evict_parked(store)?;
    if evicted > 0 {
        report.actions.push(format!(
            "detached {evicted} parked workspace overlays (switched-away branches kept mounted)"
        ));
    }
    let reaped = crate::workspace::reap_detached(store)?;
    if reaped > 0 {
        report.actions.push(format!(
            "detached {reaped} old workspace overlays left by an unfinished switch"
        ));
    }
    repair_health(store, &mut report)?;
    for d in inventory::temp_dirs(store) {
        let all = d == store.tmp_dir();
        report.temp_files_removed += remove_temps(&d, all)?;
    }
    if report.temp_files_removed > 0 {
        report.actions.push(format!(
            "removed {} half-written temp files",
            report.temp_files_removed
        ));
    }
    if marker.is_some() {
        report.actions.push("cleared the RUNNING marker".into());
    }
    let summary = serde_json::to_value(&report).unwrap_or_default();
    store.run_locked("recover", serde_json::json!({}), |_| Ok(((), summary)))?;
    Ok(report)
}

/// Repairs what doctor marks `recover`, as the shared inventory finds it (see the module doc).
fn repair_health(store: &Store, report: &mut RecoverReport) -> Result<()> {
    for p in inventory::dead_pins(store).unwrap_or_default() {
        fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
        report
            .actions
            .push(format!("removed the dead pin {}", p.display()));
    }
    for p in inventory::unreadable_mount_records(store) {
        fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
        report.actions.push(format!(
            "removed the unreadable workspace record {} (a power loss cut it; its mounts are gone)",
            p.display()
        ));
    }
    for p in inventory::dead_sockets(store)
        .into_iter()
        .chain(inventory::dead_pid_files(store))
    {
        fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
        report
            .actions
            .push(format!("removed {} (its process is gone)", p.display()));
    }
    let writable = inventory::writable_objects(store)?;
    for p in &writable {
        make_read_only(store, p)?;
    }
    if !writable.is_empty() {
        report.actions.push(format!(
            "made {} object files read-only (0444)",
            writable.len()
        ));
    }
    let md = fs::metadata(store.root()).map_err(|e| Error::io(store.root(), e))?;
    if md.mode() & 0o077 != 0 {
        fs::set_permissions(store.root(), fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io(store.root(), e))?;
        report.actions.push(format!(
            "set the store directory {} to 0700",
            store.root().display()
        ));
    }
    for m in inventory::store_mounts(store) {
        if inventory::mount_is_dead(&m) {
            nix::mount::umount2(&m.mountpoint, nix::mount::MntFlags::MNT_DETACH)
                .map_err(|e| Error::io(&m.mountpoint, std::io::Error::from(e)))?;
            report.actions.push(format!(
                "detached the dead mount {} ({})",
                m.mountpoint.display(),
                m.source
            ));
        }
    }
    Ok(())
}

/// chmod 0444 of the object file `p`, through held directories: `objects/` and its fan-out
/// directory opened without following a symlink, and the mode set only on a regular file
/// (a symlink there is `doctor`'s to report, never a way to chmod what it points to).
fn make_read_only(store: &Store, p: &Path) -> Result<()> {
    let (Some(fan), Some(name)) = (p.parent().and_then(Path::file_name), p.file_name()) else {
        return Ok(());
    };
    let objects = Dir::open(&store.objects_dir())?;
    let fan = objects.open_dir(fan)?;
    match fan.stat(name)? {
        Some(st) if st.is_file() => fan.set_mode(name, 0o444),
        _ => Ok(()),
    }
}

/// Removes `.tmp-*` files in `dir` (every file when `all`). Returns how many.
fn remove_temps(dir: &Path, all: bool) -> Result<u64> {
    let mut n = 0;
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(dir, e))?;
        let name = ent.file_name();
        if all || name.to_string_lossy().starts_with(".tmp-") {
            let p = ent.path();
            let kind = ent.file_type().map_err(|e| Error::io(&p, e))?;
            if kind.is_file() {
                fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
                n += 1;
            } else if kind.is_dir() && name.to_string_lossy().starts_with(".tmp-merge-") {
                // A merge's scratch directory (the store's own, under tmp/).
                fs::remove_dir_all(&p).map_err(|e| Error::io(&p, e))?;
                n += 1;
            }
        }
    }
    Ok(n)
}
