//! `doctor`: check the store's invariants and say how to fix each finding. Every check runs;
//! findings are collected as data (`--json`), never stopping at the first.
//!
//! Checks: format version known; store directory 0700 and object files 0444 (read-only);
//! refs point at existing checkpoints; every object a checkpoint reaches exists and has the
//! right size (full re-hash is `verify`); no stale RUNNING marker, dead pins, dead control
//! sockets or pid files; no leftover temp/staging files; no stale mounts of this store in
//! `/proc/self/mountinfo` (fsname `ckptfs:<store>...`); no unknown top-level entries or
//! symlinks in the store's own directories (nothing of the store's lives outside its root),
//! nor where objects or their fan-out directories should be;
//! a `home` root keeps credentials out (default exclude rules).
//!
//! Findings marked `repair: "recover"` are fixed by `ckptfs recover`.

use std::collections::HashSet;
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fs::safe::Dir;
use crate::fs::{file_name, list_dir};
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::store::lock::pid_alive;
use crate::store::object::object_files;
use crate::store::tree::{EntryKind, Tree};
use crate::store::{Store, DEFAULT_EXCLUDES, TOP_LEVEL};
use crate::upkeep::inventory;

/// Object findings listed one by one; past this many, one finding counts the rest.
const MAX_OBJECT_FINDINGS: usize = 50;

/// How bad a finding is.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Data at risk or wrong.
    Error,
    /// Should be fixed.
    Warning,
    /// A note; nothing is wrong.
    Info,
}

/// Which check made a finding.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Check {
    Format,
    Permissions,
    Ref,
    Object,
    Marker,
    Pin,
    Socket,
    Temp,
    Mount,
    Layout,
    Security,
    Garbage,
    /// What an ordinary account needs for workspaces (docs/rootless.md).
    Rootless,
}

/// What repairs a finding.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub enum Repair {
    /// `ckptfs recover` repairs it.
    #[serde(rename = "recover")]
    Recover,
    /// `ckptfs gc` cleans it.
    #[serde(rename = "gc")]
    Gc,
    /// Only the fix a human applies.
    #[serde(rename = "")]
    Manual,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

impl Check {
    pub fn as_str(self) -> &'static str {
        match self {
            Check::Format => "format",
            Check::Permissions => "permissions",
            Check::Ref => "ref",
            Check::Object => "object",
            Check::Marker => "marker",
            Check::Pin => "pin",
            Check::Socket => "socket",
            Check::Temp => "temp",
            Check::Mount => "mount",
            Check::Layout => "layout",
            Check::Security => "security",
            Check::Garbage => "garbage",
            Check::Rootless => "rootless",
        }
    }
}

impl Repair {
    pub fn as_str(self) -> &'static str {
        match self {
            Repair::Recover => "recover",
            Repair::Gc => "gc",
            Repair::Manual => "",
        }
    }
}

// Display pads (`{:<7}`) like the strings these enums replaced.
impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl fmt::Display for Repair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// One problem (or note) found by doctor.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    pub check: Check,
    pub subject: String,
    pub detail: String,
    /// How to fix it.
    pub fix: String,
    pub repair: Repair,
}

impl Finding {
    fn new(
        severity: Severity,
        check: Check,
        subject: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
        repair: Repair,
    ) -> Finding {
        Finding {
            severity,
            check,
            subject: subject.into(),
            detail: detail.into(),
            fix: fix.into(),
            repair,
        }
    }

    /// True for an error or warning.
    pub fn is_problem(&self) -> bool {
        self.severity != Severity::Info
    }
}

/// Everything doctor found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DoctorReport {
    pub store: PathBuf,
    pub checkpoints: usize,
    pub objects_checked: usize,
    /// Always false: doctor checks that objects are there and of the right size, never
    /// what they hold (a flipped byte passes); `content_check` does.
    pub content_checked: bool,
    /// The command that hashes every object (`ckptfs verify STORE`).
    pub content_check: String,
    pub findings: Vec<Finding>,
}

impl DoctorReport {
    /// True when some finding is an error or warning.
    pub fn has_problems(&self) -> bool {
        self.findings.iter().any(Finding::is_problem)
    }
}

/// Runs every check on the store at `path`. A store that does not open gives one finding.
///
/// # Errors
/// I/O listing the store's own directories (the root, refs, objects).
pub fn doctor(path: &Path) -> Result<DoctorReport> {
    let root = crate::store::absolute(path)?;
    let mut report = DoctorReport {
        store: root.clone(),
        content_check: format!("ckptfs verify {}", root.display()),
        ..Default::default()
    };
    let store = match crate::remote::open_store_to_repair(&root) {
        Ok(s) => s,
        Err(e) if e.kind() == crate::error::ErrorKind::Untrusted => {
            report.findings.push(Finding::new(
                Severity::Error,
                Check::Security,
                root.display().to_string(),
                e.to_string(),
                "if the store is yours: give it and its parent directories to root or yourself \
                 (chown), take write access from group and others (chmod go-w), and keep it \
                 outside every workspace, root and other store; else do not use it",
                Repair::Manual,
            ));
            return Ok(report);
        }
        Err(e) => {
            report.findings.push(Finding::new(
                Severity::Error,
                Check::Format,
                root.display().to_string(),
                e.to_string(),
                "a newer format needs a newer ckptfs. Otherwise rebuild STORE.json: archives carry \
                 no STORE.json, but their MANIFEST.json holds the roots, exclude rules, \
                 compression and chunker, so `ckptfs unarchive ARCHIVE NEW_STORE` makes a working \
                 store of what was archived; without an archive, `ckptfs init` an empty directory \
                 with the same --root, --exclude and --compression and copy its STORE.json here \
                 (objects, records and refs do not depend on it)",
                Repair::Manual,
            ));
            return Ok(report);
        }
    };
    let f = &mut report.findings;
    check_permissions(&store, f)?;
    check_marker(&store, f);
    check_run_state(&store, f);
    check_mounts(&store, f);
    check_rootless(f);
    check_layout(&store, f)?;
    check_config(&store, f);
    let checkpoints: HashSet<ObjectId> = store.list_checkpoints()?.into_iter().collect();
    report.checkpoints = checkpoints.len();
    check_refs(&store, &checkpoints, f)?;
    check_workspaces(&store, &checkpoints, f);
    check_object_files(&store, f)?;
    let reached = check_objects(&store, &checkpoints, f)?;
    report.objects_checked = reached.len();
    check_garbage(&store, &reached, f)?;
    Ok(report)
}

/// The store directory is 0700; object files are read-only.
fn check_permissions(store: &Store, f: &mut Vec<Finding>) -> Result<()> {
    if let Ok(md) = fs::metadata(store.root()) {
        if md.mode() & 0o077 != 0 {
            f.push(Finding::new(
                Severity::Warning,
                Check::Permissions,
                store.root().display().to_string(),
                format!("store directory is mode {:04o}; it should be 0700 (history holds private files)", md.mode() & 0o7777),
                format!("chmod 700 {}", store.root().display()),
                Repair::Recover,
            ));
        }
    }
    let writable = inventory::writable_objects(store)?;
    if let Some(first) = writable.first() {
        f.push(Finding::new(
            Severity::Warning,
            Check::Permissions,
            format!("{} object files", writable.len()),
            format!(
                "objects must be read-only (0444); first: {}",
                first.display()
            ),
            "make them read-only again (chmod a-w)",
            Repair::Recover,
        ));
    }
    Ok(())
}

/// A RUNNING marker: interrupted (its process is gone) or in progress.
fn check_marker(store: &Store, f: &mut Vec<Finding>) {
    let subject = store.running_marker_path().display().to_string();
    match store.read_marker() {
        Ok(Some(m)) if !pid_alive(m.pid) || m.pid == std::process::id() => f.push(Finding::new(
            Severity::Error,
            Check::Marker,
            subject,
            format!(
                "{} (pid {}) was interrupted; mutating commands refuse to run",
                m.op, m.pid
            ),
            format!("ckptfs recover {}", store.root().display()),
            Repair::Recover,
        )),
        Ok(Some(m)) => f.push(Finding::new(
            Severity::Info,
            Check::Marker,
            subject,
            format!("{} (pid {}) is running", m.op, m.pid),
            "nothing to do",
            Repair::Manual,
        )),
        Ok(None) => {}
        Err(e) => f.push(Finding::new(
            Severity::Error,
            Check::Marker,
            subject,
            e.to_string(),
            format!("ckptfs recover {}", store.root().display()),
            Repair::Recover,
        )),
    }
}

/// Stale run state of processes that are gone: pins, control sockets, pid files, temp files.
/// A directory that does not list counts as holding none (the other checks still run).
fn check_run_state(store: &Store, f: &mut Vec<Finding>) {
    for p in inventory::dead_pins(store).unwrap_or_default() {
        f.push(Finding::new(
            Severity::Warning,
            Check::Pin,
            p.display().to_string(),
            "pin of a process that exited",
            "ckptfs recover (or gc) removes it",
            Repair::Recover,
        ));
    }
    for p in inventory::unreadable_mount_records(store) {
        f.push(Finding::new(
            Severity::Warning,
            Check::Mount,
            p.display().to_string(),
            "workspace mount record that does not parse (a power loss cut it; its mounts are gone)",
            "ckptfs recover removes it",
            Repair::Recover,
        ));
    }
    for p in inventory::dead_sockets(store) {
        f.push(Finding::new(
            Severity::Warning,
            Check::Socket,
            p.display().to_string(),
            "control socket nobody listens on (its daemon is gone)",
            "ckptfs recover removes it",
            Repair::Recover,
        ));
    }
    for p in inventory::dead_pid_files(store) {
        f.push(Finding::new(
            Severity::Warning,
            Check::Socket,
            p.display().to_string(),
            "pid file of a process that exited",
            "ckptfs recover removes it",
            Repair::Recover,
        ));
    }
    let temps = inventory::leftover_temps(store).unwrap_or_default();
    if let Some(first) = temps.first() {
        f.push(Finding::new(
            Severity::Warning,
            Check::Temp,
            format!("{} temp files", temps.len()),
            format!(
                "half-written files of finished processes, e.g. {}",
                first.display()
            ),
            "ckptfs recover removes them",
            Repair::Recover,
        ));
    }
}

/// For an ordinary account (or in its namespace): what its workspaces need from the machine
/// and lack, each with how to give it (docs/rootless.md). `/dev/fuse` and user namespaces
/// are warnings (no workspace mounts without them); subordinate ids and a delegated cgroup are
/// notes (workspaces work; the agent runs as the account, writers are not held).
fn check_rootless(f: &mut Vec<Finding>) {
    use crate::fs::userns;
    if !userns::is_ordinary() && !userns::in_child_userns() {
        return;
    }
    let mut note = |severity, subject: &str, detail: String, fix: &str| {
        f.push(Finding::new(
            severity,
            Check::Rootless,
            subject,
            detail,
            fix,
            Repair::Manual,
        ));
    };
    if let Err(e) = crate::daemon::check_fuse() {
        note(
            Severity::Warning,
            "/dev/fuse",
            e.to_string(),
            "as root: `chmod 0666 /dev/fuse` (Debian's fuse3 udev rule does it at boot); in a \
             container: `--device /dev/fuse`",
        );
    }
    if let Err(e) = userns::check_userns("workspaces without root") {
        note(
            Severity::Warning,
            "user namespaces",
            e.to_string(),
            "the sysctl the detail names, as root",
        );
    }
    if !userns::in_child_userns() {
        let uid = nix::unistd::geteuid().as_raw();
        if userns::subordinate_ids().is_none() {
            note(
                Severity::Info,
                "subordinate ids",
                format!(
                    "uid {uid} has no range in /etc/subuid and /etc/subgid, or newuidmap and \
                     newgidmap (Debian's uidmap) are missing: an agent in a workspace can only \
                     run as this account, which can write the store"
                ),
                "as root: `apt-get install uidmap` and `usermod --add-subuids 100000-165535 \
                 --add-subgids 100000-165535 USER`",
            );
        }
    }
    if crate::workspace::freeze::delegated_base().is_none() {
        note(
            Severity::Info,
            "cgroup",
            crate::workspace::freeze::NO_DELEGATION.to_string(),
            "run ckptfs in a cgroup delegated to this account; without one, `turn` refuses and \
             `exec` runs COMMAND in no cgroup of its own, whose writes checkpoints cannot hold",
        );
    }
}

/// Mounts of this store: live ones are noted, ones whose daemon is gone are errors. An
/// overlay under `parked/` is a branch a switch parked when a park record names it, and a
/// warning otherwise (`recover` detaches it).
fn check_mounts(store: &Store, f: &mut Vec<Finding>) {
    let parked: Vec<PathBuf> = crate::workspace::parked(store)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|p| p.at.into_values())
        .collect();
    for m in inventory::store_mounts(store) {
        if m.mountpoint.starts_with(store.parked_dir()) && !inventory::mount_is_dead(&m) {
            let known = parked.contains(&m.mountpoint);
            f.push(Finding::new(
                if known {
                    Severity::Info
                } else {
                    Severity::Warning
                },
                Check::Mount,
                m.mountpoint.display().to_string(),
                if known {
                    format!("{} is parked (a switch back moves it back)", m.source)
                } else {
                    format!(
                        "{} is mounted where parked trees go, but no park record names it",
                        m.source
                    )
                },
                if known {
                    "nothing to do (umount of the workspace detaches it)".to_string()
                } else {
                    "ckptfs recover detaches it".to_string()
                },
                if known {
                    Repair::Manual
                } else {
                    Repair::Recover
                },
            ));
        } else if inventory::mount_is_dead(&m) {
            f.push(Finding::new(
                Severity::Error,
                Check::Mount,
                m.mountpoint.display().to_string(),
                format!(
                    "mount {} of this store has no daemon (Transport endpoint is not connected)",
                    m.source
                ),
                format!(
                    "umount -l {} (ckptfs recover does it)",
                    m.mountpoint.display()
                ),
                Repair::Recover,
            ));
        } else {
            f.push(Finding::new(
                Severity::Info,
                Check::Mount,
                m.mountpoint.display().to_string(),
                format!("{} is mounted", m.source),
                "nothing to do",
                Repair::Manual,
            ));
        }
    }
}

/// Top-level entries the layout does not name, and symlinks where the store keeps its own
/// data (nothing of the store may live outside its root).
fn check_layout(store: &Store, f: &mut Vec<Finding>) -> Result<()> {
    for p in list_dir(store.root())? {
        let name = file_name(&p);
        let known = TOP_LEVEL.iter().any(|(n, _)| *n == name);
        if !known && !name.starts_with(".tmp-") {
            f.push(Finding::new(
                Severity::Info,
                Check::Layout,
                p.display().to_string(),
                "not part of the store layout",
                "move it out of the store if it is yours",
                Repair::Manual,
            ));
        }
        if fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
            f.push(Finding::new(
                Severity::Error,
                Check::Layout,
                p.display().to_string(),
                "a symlink in the store: store data would live outside the store root",
                "replace it with the real directory or file",
                Repair::Manual,
            ));
        }
    }
    // Inside checkpoints/ and refs/: symlinks, special files and foreign names (a store
    // copied or received from elsewhere is untrusted input), as `verify` finds them; objects/
    // has its own phase (`check_object_files`).
    for u in crate::upkeep::verify::scan_layout(store)? {
        if u.object.starts_with("objects") {
            continue;
        }
        f.push(Finding::new(
            Severity::Error,
            Check::Layout,
            u.object,
            u.detail,
            "move it out of the store (ckptfs never follows or reads it)",
            Repair::Manual,
        ));
    }
    Ok(())
}

/// STORE.json: every root keeps credentials out (the default exclude rules). Stores made
/// before the defaults covered every root keep their rules (nothing changes silently); this
/// notes what they lack.
fn check_config(store: &Store, f: &mut Vec<Finding>) {
    for (name, rc) in &store.config().roots {
        let missing: Vec<&str> = DEFAULT_EXCLUDES
            .iter()
            .map(|d| d.glob)
            .filter(|p| !rc.exclude.iter().any(|x| x == p))
            .collect();
        if missing.is_empty() {
            continue;
        }
        let shown: Vec<&str> = missing.iter().take(6).copied().collect();
        let more = if missing.len() > shown.len() {
            format!(" and {} more", missing.len() - shown.len())
        } else {
            String::new()
        };
        f.push(Finding::new(
            Severity::Info,
            Check::Security,
            format!("root {name}"),
            format!(
                "no exclude rule for {}{more} (of the {} default credential rules): credentials may be captured",
                shown.join(", "),
                DEFAULT_EXCLUDES.len()
            ),
            format!(
                "add them to STORE.json roots.{name}.exclude (`ckptfs init --help` and README's \
                 Security section list them; a new store gets them all), or keep them out on purpose"
            ),
            Repair::Manual,
        ));
    }
}

/// Branches and labels read and point at existing checkpoints.
fn check_refs(store: &Store, checkpoints: &HashSet<ObjectId>, f: &mut Vec<Finding>) -> Result<()> {
    for p in list_dir(&store.branches_dir())? {
        let name = file_name(&p);
        let Some(b) = name.strip_suffix(".json") else {
            continue;
        };
        match store.read_branch(b) {
            Ok(Some(br)) => {
                if let Some(h) = br.head.filter(|h| !checkpoints.contains(h)) {
                    f.push(Finding::new(Severity::Error, Check::Ref, format!("branch {b}"), format!("head {h} does not exist"), "unarchive the checkpoint from an archive, or point the branch at an existing checkpoint", Repair::Manual));
                }
            }
            Ok(None) => {}
            Err(e) => f.push(Finding::new(
                Severity::Error,
                Check::Ref,
                format!("branch {b}"),
                e.to_string(),
                "restore refs/branches from an archive",
                Repair::Manual,
            )),
        }
    }
    for p in list_dir(&store.labels_dir())? {
        let name = file_name(&p);
        if name.starts_with(".tmp-") {
            continue;
        }
        match store.read_label(&name) {
            Ok(Some(id)) if !checkpoints.contains(&id) => f.push(Finding::new(
                Severity::Error,
                Check::Ref,
                format!("label {name}"),
                format!("points at missing checkpoint {id}"),
                "unarchive the checkpoint from an archive",
                Repair::Manual,
            )),
            Ok(_) => {}
            Err(e) => f.push(Finding::new(
                Severity::Error,
                Check::Ref,
                format!("label {name}"),
                e.to_string(),
                "restore refs/labels from an archive",
                Repair::Manual,
            )),
        }
    }
    Ok(())
}

/// Every workspace's base checkpoint exists.
fn check_workspaces(store: &Store, checkpoints: &HashSet<ObjectId>, f: &mut Vec<Finding>) {
    for (b, id) in inventory::workspace_bases(store) {
        if !checkpoints.contains(&id) {
            f.push(Finding::new(
                Severity::Error,
                Check::Ref,
                format!("workspace {b}"),
                format!("base checkpoint {id} of its upper layer does not exist"),
                "unarchive the checkpoint from an archive; until then the workspace cannot be mounted",
                Repair::Manual,
            ));
        }
    }
}

/// Every record reads, and every object a checkpoint reaches is present with the size its tree
/// records (a full re-hash is `verify`). Returns the objects reached.
fn check_objects(
    store: &Store,
    checkpoints: &HashSet<ObjectId>,
    f: &mut Vec<Finding>,
) -> Result<HashSet<ObjectId>> {
    const FIX: &str = "run `ckptfs verify` to see which checkpoints use it; restore it by \
                       unarchiving an archive that has it";
    let mut seen: HashSet<ObjectId> = HashSet::new();
    let mut stack: Vec<ObjectId> = Vec::new();
    let mut chunks: Vec<(ObjectId, u32)> = Vec::new();
    for id in checkpoints {
        match store.read_checkpoint(id) {
            Ok(c) => stack.extend(c.roots.values().map(|r| r.tree)),
            Err(e) => f.push(Finding::new(
                Severity::Error,
                Check::Object,
                format!("checkpoint {id}"),
                e.to_string(),
                "delete the record if it is garbage, or restore it from an archive",
                Repair::Manual,
            )),
        }
    }
    let mut bad = 0usize;
    let trees = Progress::items("doctor trees", "trees", None);
    while let Some(t) = stack.pop() {
        if !seen.insert(t) {
            continue;
        }
        trees.add_items(1);
        match store.read_object(&t).and_then(|d| Tree::decode(&d)) {
            Ok(tree) => {
                for e in &tree.entries {
                    match &e.kind {
                        EntryKind::File { chunks: cs } => {
                            chunks.extend(cs.iter().map(|c| (c.id, c.len)))
                        }
                        EntryKind::Dir { tree, .. } => stack.push(*tree),
                        EntryKind::Symlink { .. } => {}
                    }
                }
            }
            Err(e) => {
                bad += 1;
                if bad <= MAX_OBJECT_FINDINGS {
                    f.push(Finding::new(
                        Severity::Error,
                        Check::Object,
                        format!("tree {t}"),
                        e.to_string(),
                        FIX,
                        Repair::Manual,
                    ));
                }
            }
        }
    }
    trees.finish();
    let objects = Progress::items("doctor objects", "chunks", Some(chunks.len() as u64));
    for (id, len) in chunks {
        objects.add_items(1);
        if !seen.insert(id) {
            continue;
        }
        let problem = match store.locate_object(&id) {
            // A clone's objects stay on its remote until first read.
            None if store.remote_holds(&id) => None,
            None => Some("missing".to_string()),
            Some((p, compressed)) => match object_len(&p, compressed) {
                Ok(n) if n == u64::from(len) => None,
                Ok(n) => Some(format!("has {n} bytes, the tree says {len}")),
                Err(e) => Some(e.to_string()),
            },
        };
        if let Some(problem) = problem {
            bad += 1;
            if bad <= MAX_OBJECT_FINDINGS {
                f.push(Finding::new(
                    Severity::Error,
                    Check::Object,
                    format!("object {id}"),
                    problem,
                    FIX,
                    Repair::Manual,
                ));
            }
        }
    }
    objects.finish();
    if bad > MAX_OBJECT_FINDINGS {
        f.push(Finding::new(
            Severity::Error,
            Check::Object,
            format!("{} more objects", bad - MAX_OBJECT_FINDINGS),
            "missing or wrong size",
            "run `ckptfs verify`",
            Repair::Manual,
        ));
    }
    Ok(seen)
}

/// What is under `objects/`, looked at without following anything: a fan-out directory that
/// is a symlink, or an object that is a symlink or not a regular file, is an error (object data
/// would live outside the store, and a repair could reach through it).
///
/// # Errors
/// I/O listing `objects/` or a fan-out directory.
fn check_object_files(store: &Store, f: &mut Vec<Finding>) -> Result<()> {
    const FIX: &str = "replace it with the real file (unarchive an archive that has it), or \
                       remove it and run `ckptfs verify`";
    let objects = match Dir::open(&store.objects_dir()) {
        Ok(d) => d,
        // Missing or a symlink itself: the layout check reports the top level.
        Err(_) => return Ok(()),
    };
    let mut found = 0usize;
    let mut push = |f: &mut Vec<Finding>, subject: PathBuf, problem: String| {
        found += 1;
        if found <= MAX_OBJECT_FINDINGS {
            f.push(Finding::new(
                Severity::Error,
                Check::Object,
                subject.display().to_string(),
                problem,
                FIX,
                Repair::Manual,
            ));
        }
    };
    for fan in objects.entries()? {
        let Some(st) = objects.stat(&fan)? else {
            continue;
        };
        let is_fan = fan.len() == 2 && fan.as_bytes().iter().all(u8::is_ascii_hexdigit);
        if st.is_symlink() {
            push(
                f,
                objects.display_path(&fan),
                "a symlink where an object directory should be: objects would live outside \
                 the store"
                    .into(),
            );
            continue;
        }
        if !is_fan || !st.is_dir() {
            continue;
        }
        let dir = objects.open_dir(&fan)?;
        for name in dir.entries()? {
            let Some(st) = dir.stat(&name)? else {
                continue;
            };
            let text = name.to_string_lossy();
            let hex = text.strip_suffix(".zst").unwrap_or(&text);
            let is_object = ObjectId::parse(&format!("{}{hex}", fan.to_string_lossy())).is_ok();
            if st.is_symlink() || (is_object && !st.is_file()) {
                push(
                    f,
                    dir.display_path(&name),
                    format!("{} where an object file should be", st.kind().describe()),
                );
            }
        }
    }
    if found > MAX_OBJECT_FINDINGS {
        f.push(Finding::new(
            Severity::Error,
            Check::Object,
            format!(
                "{} more entries under objects/",
                found - MAX_OBJECT_FINDINGS
            ),
            "symlinks or special files where objects should be",
            FIX,
            Repair::Manual,
        ));
    }
    Ok(())
}

/// Objects no checkpoint reaches (gc sweeps them).
fn check_garbage(store: &Store, reached: &HashSet<ObjectId>, f: &mut Vec<Finding>) -> Result<()> {
    let garbage = object_files(store)?
        .into_iter()
        .filter(|(_, id)| !reached.contains(id))
        .count();
    if garbage > 0 {
        f.push(Finding::new(
            Severity::Info,
            Check::Garbage,
            format!("{garbage} objects"),
            "no checkpoint reaches them",
            format!("ckptfs gc {}", store.root().display()),
            Repair::Gc,
        ));
    }
    Ok(())
}

/// Uncompressed length of an object file.
fn object_len(p: &Path, compressed: bool) -> Result<u64> {
    if !compressed {
        return fs::symlink_metadata(p)
            .map(|m| m.len())
            .map_err(|e| Error::io(p, e));
    }
    // Never through a symlink, never blocking on a FIFO (check_object_files reports them).
    let mut f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(p)
        .map_err(|e| Error::io(p, e))?;
    let mut dec = zstd::stream::read::Decoder::new(&mut f).map_err(|e| Error::io(p, e))?;
    io::copy(&mut dec, &mut io::sink())
        .map_err(|e| Error::Corrupt(format!("{}: bad zstd data ({e})", p.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_serialise_to_the_strings_of_the_json_output() {
        let f = Finding::new(
            Severity::Warning,
            Check::Permissions,
            "s",
            "d",
            "x",
            Repair::Manual,
        );
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["severity"], "warning");
        assert_eq!(v["check"], "permissions");
        assert_eq!(v["repair"], "");
        for r in [Repair::Recover, Repair::Gc, Repair::Manual] {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
        for s in [Severity::Error, Severity::Warning, Severity::Info] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for c in [
            Check::Format,
            Check::Permissions,
            Check::Ref,
            Check::Object,
            Check::Marker,
            Check::Pin,
            Check::Socket,
            Check::Temp,
            Check::Mount,
            Check::Layout,
            Check::Security,
            Check::Garbage,
        ] {
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
        }
        assert_eq!(format!("{:<7}|", Severity::Info), "info   |");
    }
}
