//! `status`: the workspaces of a store (or the one a path is in), their branches, dirty state,
//! last turn, and the trees left behind or parked by switches.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ckptfs::id::ObjectId;
use ckptfs::text::quote;
use ckptfs::text::time::local_of_utc;
use ckptfs::units::human_bytes;
use ckptfs::workspace::{self, place};
use ckptfs::{Error, Result, Store};

use super::print_json;

#[derive(serde::Serialize)]
struct WorkspaceStatus {
    branch: String,
    live: bool,
    base: ObjectId,
    head: Option<ObjectId>,
    mountpoints: BTreeMap<String, PathBuf>,
    dirty: bool,
    files_changed: u64,
    bytes_changed: u64,
    /// FIFOs, sockets and devices no exclude rule skips: its checkpoints fail on them.
    special_files: Vec<workspace::SpecialFile>,
    /// What changed since the last checkpoint, path by path (see `history::diff::Change`).
    changes: Vec<ckptfs::history::diff::Change>,
    /// Why its changes could not be told (it is then not reported clean).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// Cgroups its checkpoints freeze (`mount --freeze-cgroup`).
    freeze_cgroups: Vec<PathBuf>,
    /// Its checkpoints freeze the store's filesystem (`mount --freeze-fs`).
    freeze_fs: bool,
    /// Processes writing into it that its checkpoints do not hold (outside `freeze_cgroups`,
    /// and no `freeze_fs`).
    unheld_writers: Vec<workspace::freeze::Writer>,
    /// A turn running on it, or the failed turn whose writes it holds (`ckptfs turn`).
    #[serde(skip_serializing_if = "Option::is_none")]
    turn: Option<serde_json::Value>,
    /// The upper layer's bytes that the last checkpoint recorded, waiting to be folded (see
    /// docs/workspaces.md), and the processes inside that hold them: zero once folded.
    fold_waiting: workspace::FoldReport,
    /// A merge in progress in it (`ckptfs merge` into a mounted branch): its conflicts and
    /// whether each is resolved yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    merge: Option<workspace::pending::MergeStatus>,
}

/// Status of the workspaces of a store (or of the one a path is in).
pub fn workspace_status(place: &Path) -> Result<(Store, Vec<serde_json::Value>)> {
    let (s, only) = match place::resolve_place(place)? {
        place::Place::Store(s) => (s, None),
        place::Place::Workspace(s, st) => (s, Some(st.branch)),
    };
    let mut out = Vec::new();
    for st in workspace::states(&s)? {
        if only.as_ref().is_some_and(|b| *b != st.branch) {
            continue;
        }
        // A workspace whose changes cannot be told is not reported clean.
        let (d, error, merge) = match workspace::dirty_and_merge(&s, &st.branch) {
            Ok((d, merge)) => (d, None, merge),
            Err(e) => {
                let d = workspace::DirtyReport {
                    dirty: true,
                    ..Default::default()
                };
                (
                    d,
                    Some(e.to_string()),
                    workspace::merge_status(&s, &st.branch),
                )
            }
        };
        let head = s.read_branch(&st.branch)?.and_then(|b| b.head);
        let live = workspace::is_live(&s, &st)?;
        let mountpoints: Vec<PathBuf> = st.roots.values().map(|r| r.mountpoint.clone()).collect();
        let unheld_writers = if live && !st.freeze_fs {
            workspace::freeze::unheld_writers(&mountpoints, &st.freeze_cgroups)
        } else {
            Vec::new()
        };
        let fold_waiting = if live {
            workspace::waiting(&s, &st).unwrap_or_default()
        } else {
            workspace::FoldReport::default()
        };
        let ws = WorkspaceStatus {
            fold_waiting,
            live,
            branch: st.branch.clone(),
            base: st.base,
            head,
            mountpoints: st
                .roots
                .iter()
                .map(|(n, r)| (n.clone(), r.mountpoint.clone()))
                .collect(),
            dirty: d.dirty,
            files_changed: d.files_changed,
            bytes_changed: d.bytes_changed,
            special_files: d.special_files,
            changes: d.changes,
            error,
            freeze_cgroups: st.freeze_cgroups.clone(),
            freeze_fs: st.freeze_fs,
            unheld_writers,
            turn: super::turn::turn_status(&s, &st.branch, d.dirty),
            merge: merge.unwrap_or_else(|e| {
                log::warn!("the merge in progress in {}: {e}", st.branch);
                None
            }),
        };
        out.push(serde_json::to_value(&ws).unwrap_or_default());
    }
    Ok((s, out))
}

pub fn print_workspace_status(rows: &[serde_json::Value]) {
    for w in rows {
        println!(
            "workspace {} ({}) head {} base {}: {}",
            w["branch"].as_str().unwrap_or(""),
            if w["live"].as_bool() == Some(true) {
                "mounted"
            } else {
                "not mounted: stale state"
            },
            w["head"].as_str().map_or("-", |h| &h[..12.min(h.len())]),
            w["base"].as_str().map_or("-", |h| &h[..12.min(h.len())]),
            if let Some(e) = w["error"].as_str() {
                format!("changes unknown ({})", quote::text(e))
            } else if w["dirty"].as_bool() == Some(true) {
                format!(
                    "{} files / {} changed since the last checkpoint",
                    w["files_changed"],
                    human_bytes(w["bytes_changed"].as_u64().unwrap_or(0))
                )
            } else {
                "clean".to_string()
            }
        );
        if let Some(t) = w["turn"]["describe"].as_str() {
            println!("  {}", quote::text(t));
        }
        print_merge(&w["merge"]);
        for line in short_status(w) {
            println!("  {line}");
        }
        for f in w["special_files"].as_array().into_iter().flatten() {
            println!(
                "  not checkpointable: {} is a {} (exclude it)",
                quote::name(f["path"].as_str().unwrap_or("").as_bytes()),
                f["kind"].as_str().unwrap_or("special file")
            );
        }
        if let Some(m) = w["mountpoints"].as_object() {
            for (n, p) in m {
                println!("  {n} at {}", p.as_str().unwrap_or(""));
            }
        }
        for c in w["freeze_cgroups"].as_array().into_iter().flatten() {
            println!("  checkpoints freeze cgroup {}", c.as_str().unwrap_or(""));
        }
        if w["freeze_fs"].as_bool() == Some(true) {
            println!("  checkpoints freeze the store's filesystem");
        }
        let f = &w["fold_waiting"];
        if let (Some(why), true) = (f["reason"].as_str(), f["upper_bytes"].as_u64() > Some(0)) {
            // Kept by the fold budget: in the store and in the upper layer both.
            println!(
                "  upper layer: {} files ({}) recorded and kept beside the store: {why}",
                f["upper_files"],
                human_bytes(f["upper_bytes"].as_u64().unwrap_or(0)),
            );
        } else if f["upper_bytes"].as_u64().unwrap_or(0) > 0 {
            println!(
                "  upper layer: {} files ({}) recorded, waiting to be folded{}",
                f["upper_files"],
                human_bytes(f["upper_bytes"].as_u64().unwrap_or(0)),
                if f["holders"].as_array().is_some_and(|h| !h.is_empty()) {
                    " while these are inside:"
                } else {
                    " (at the next checkpoint or switch)"
                }
            );
            for h in f["holders"].as_array().into_iter().flatten() {
                println!(
                    "    pid {} ({}) {} {}",
                    h["pid"],
                    quote::text(h["command"].as_str().unwrap_or("")),
                    h["how"].as_str().unwrap_or(""),
                    quote::name(h["path"].as_str().unwrap_or("").as_bytes())
                );
            }
        }
        for p in w["unheld_writers"].as_array().into_iter().flatten() {
            println!(
                "  not held by checkpoints: pid {} ({}) writing {}",
                p["pid"],
                quote::text(p["command"].as_str().unwrap_or("")),
                quote::name(p["path"].as_str().unwrap_or("").as_bytes())
            );
        }
    }
}

/// A merge in progress, as `git status` tells one.
fn print_merge(m: &serde_json::Value) {
    let Some(source) = m["source"].as_str() else {
        return;
    };
    let conflicts = m["conflicts"].as_array().cloned().unwrap_or_default();
    let open = conflicts
        .iter()
        .filter(|c| c["resolved"].as_bool() != Some(true))
        .count();
    if m["interrupted"].as_bool() == Some(true) {
        println!(
            "  merge of {} cut short while being written: run `ckptfs merge --abort`",
            quote::text(source)
        );
        return;
    }
    println!(
        "  merging {}: {open} of {} conflicts unresolved{}",
        quote::text(source),
        conflicts.len(),
        if open == 0 {
            " (`ckptfs checkpoint` records the merge)"
        } else {
            " (fix them, then `ckptfs checkpoint`; `ckptfs merge --abort` gives up)"
        }
    );
    for c in &conflicts {
        println!(
            "    {} {} ({})",
            if c["resolved"].as_bool() == Some(true) {
                "resolved:  "
            } else {
                "unresolved:"
            },
            quote::name(c["path"].as_str().unwrap_or("").as_bytes()),
            c["kind"].as_str().unwrap_or("")
        );
    }
}

/// A workspace row's changes as `git status --short` lines: `M ws/notes.md`, `R ws/a -> ws/b`.
fn short_status(w: &serde_json::Value) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for c in w["changes"].as_array().into_iter().flatten() {
        let raw = c["path"].as_str().unwrap_or("");
        // A path modified and chmod-ed is one line.
        if !seen.insert(raw.to_string()) {
            continue;
        }
        let path = quote::name(raw.as_bytes());
        let letter = match c["change"].as_str() {
            Some("added") => 'A',
            Some("removed") => 'D',
            Some("renamed") => 'R',
            Some("type") => 'T',
            _ => 'M',
        };
        lines.push(match c["from"].as_str() {
            Some(f) => format!("{letter} {} -> {path}", quote::name(f.as_bytes())),
            None => format!("{letter} {path}"),
        });
    }
    lines
}

/// `ckptfs status STORE|MOUNTPOINT [--json | --short]`: workspaces with their changed paths,
/// then read-only views. The JSON is one array of mounts; workspace rows have `"kind":
/// "workspace"`. `--short` prints only the changed paths.
pub fn status(place: &Path, json: bool, short: bool) -> Result<i32> {
    let (s, mut rows) = workspace_status(place)?;
    let is_store = s.root() == ckptfs::store::absolute(place)?;
    if short {
        for w in &rows {
            if rows.len() > 1 {
                println!("## {}", w["branch"].as_str().unwrap_or(""));
            }
            if let Some(e) = w["error"].as_str() {
                eprintln!(
                    "ckptfs: {}: changes unknown ({})",
                    w["branch"].as_str().unwrap_or(""),
                    quote::text(e)
                );
            }
            for line in short_status(w) {
                println!("{line}");
            }
        }
        return Ok(0);
    }
    for r in &mut rows {
        r["kind"] = "workspace".into();
        let first = r["mountpoints"]
            .as_object()
            .and_then(|m| m.values().next().cloned());
        r["mountpoint"] = first.unwrap_or_default();
    }
    let left = left_behind_rows(&s)?;
    let parked = parked_rows(&s)?;
    if !json {
        print_workspace_status(&rows);
        print_left_behind_rows(&left);
        print_parked_rows(&parked);
    }
    rows.extend(left);
    rows.extend(parked);
    if is_store {
        for mut v in super::view::status_views(&s, json)? {
            v["kind"] = "view".into();
            rows.push(v);
        }
    }
    if json {
        print_json(&rows)?;
    } else if rows.is_empty() {
        println!("no live mounts of {}", s.root().display());
    }
    Ok(0)
}

/// Status rows (`"kind": "left-behind"`) of the trees a switch or a fold set aside that are
/// still mounted because processes are inside: `branch`, `at`, `readonly`, `holders`.
fn left_behind_rows(s: &Store) -> Result<Vec<serde_json::Value>> {
    let mut rows = Vec::new();
    for l in workspace::left_behind(s)? {
        let mut v =
            serde_json::to_value(&l).map_err(|e| Error::Invalid(format!("encoding JSON: {e}")))?;
        v["kind"] = "left-behind".into();
        rows.push(v);
    }
    Ok(rows)
}

/// Status rows (`"kind": "parked"`) of the branches a switch parked (see docs/workspaces.md).
fn parked_rows(s: &Store) -> Result<Vec<serde_json::Value>> {
    let mut rows = Vec::new();
    for p in workspace::parked(s)? {
        let mut v =
            serde_json::to_value(&p).map_err(|e| Error::Invalid(format!("encoding JSON: {e}")))?;
        v["kind"] = "parked".into();
        rows.push(v);
    }
    Ok(rows)
}

fn print_parked_rows(rows: &[serde_json::Value]) {
    for p in rows {
        let shown: Vec<&str> = p["mountpoints"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.values().filter_map(|v| v.as_str()))
            .collect();
        println!(
            "parked: branch {} (base {}), read-only, since {}: a switch back to it at {} moves \
             it back; its upper layer holds {} files ({}) meanwhile",
            p["branch"].as_str().unwrap_or(""),
            p["base"].as_str().map_or("-", |h| &h[..12.min(h.len())]),
            local_of_utc(p["parked"].as_str().unwrap_or("")),
            shown.join(", "),
            p["upper_files"],
            human_bytes(p["upper_bytes"].as_u64().unwrap_or(0))
        );
    }
}

fn print_left_behind_rows(rows: &[serde_json::Value]) {
    for l in rows {
        println!(
            "left behind: a tree of branch {} at {} ({})",
            l["branch"].as_str().unwrap_or(""),
            l["at"].as_str().unwrap_or(""),
            if l["readonly"].as_bool() == Some(true) {
                "read-only: writes into it fail"
            } else {
                "writable: a file open for writing there; what is written goes to that branch's \
                 un-checkpointed changes"
            }
        );
        for h in l["holders"].as_array().into_iter().flatten() {
            println!(
                "  pid {} ({}) {} {}",
                h["pid"],
                quote::text(h["command"].as_str().unwrap_or("")),
                h["how"].as_str().unwrap_or(""),
                quote::name(h["path"].as_str().unwrap_or("").as_bytes())
            );
        }
    }
}
