//! `doctor`: check the store's invariants and say how to fix each finding. Every check runs;
//! findings are collected as data (`--json`), never stopping at the first.
//!
//! Checks: format version known; store directory 0700 and object files 0444 (read-only);
//! refs point at existing checkpoints; every object a checkpoint reaches exists and has the
//! right size (full re-hash is `verify`); no stale RUNNING marker, dead pins, dead control
//! sockets or pid files; no leftover temp/staging files; no stale mounts of this store in
//! `/proc/self/mountinfo` (fsname `ckptfs:<store>...`); no unknown top-level entries or
//! symlinks in the store's own directories (nothing of the store's lives outside its root);
//! a `home` root keeps credentials out (default exclude rules).
//!
//! Findings marked `repair: "recover"` are fixed by `ckptfs recover`.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::ops::gc::{list_dir, object_files};
use crate::store::lock::pid_alive;
use crate::store::tree::{EntryKind, Tree};
use crate::store::{fsio, Store, DEFAULT_HOME_EXCLUDES, HOME_ROOT};

/// Top-level names a store may contain.
const KNOWN_TOP: &[&str] = &[
    "STORE.json",
    "objects",
    "checkpoints",
    "refs",
    "tmp",
    "run",
    "upper",
    "displaced",
    "cache",
    "audit.jsonl",
    "lock",
    "HEAD",
];

/// One problem (or note) found by doctor.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Finding {
    /// "error" (data at risk or wrong), "warning" (should be fixed), "info".
    pub severity: String,
    /// Short name of the check: "format", "permissions", "ref", "object", "marker", "pin",
    /// "socket", "temp", "mount", "layout", "security", "garbage".
    pub check: String,
    pub subject: String,
    pub detail: String,
    /// How to fix it.
    pub fix: String,
    /// "recover" when `ckptfs recover` repairs it, "gc" when gc cleans it, "" otherwise.
    pub repair: String,
}

/// Everything doctor found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DoctorReport {
    pub store: PathBuf,
    pub checkpoints: usize,
    pub objects_checked: usize,
    pub findings: Vec<Finding>,
}

impl DoctorReport {
    /// True when some finding is an error or warning.
    pub fn has_problems(&self) -> bool {
        self.findings.iter().any(|f| f.severity != "info")
    }
}

fn finding(
    sev: &str,
    check: &str,
    subject: impl Into<String>,
    detail: impl Into<String>,
    fix: impl Into<String>,
    repair: &str,
) -> Finding {
    Finding {
        severity: sev.into(),
        check: check.into(),
        subject: subject.into(),
        detail: detail.into(),
        fix: fix.into(),
        repair: repair.into(),
    }
}

/// One line of /proc/self/mountinfo.
#[derive(Clone, Debug, Default)]
pub struct MountEntry {
    pub mount_point: PathBuf,
    pub fstype: String,
    pub source: String,
    pub super_options: String,
}

fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let code = std::str::from_utf8(&b[i + 1..i + 4])
                .ok()
                .and_then(|o| u8::from_str_radix(o, 8).ok());
            if let Some(v) = code {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount table of this process.
///
/// # Errors
/// I/O reading `/proc/self/mountinfo`.
pub fn mount_table() -> Result<Vec<MountEntry>> {
    let p = Path::new("/proc/self/mountinfo");
    let text = fs::read_to_string(p).map_err(|e| Error::io(p, e))?;
    Ok(parse_mountinfo(&text))
}

/// Parses mountinfo text (fields: id parent maj:min root mountpoint opts [optional...] - fstype source superopts).
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.len() < 5 || fields.len() < dash + 3 {
            continue;
        }
        out.push(MountEntry {
            mount_point: PathBuf::from(unescape_mountinfo(fields[4])),
            fstype: fields[dash + 1].to_string(),
            source: unescape_mountinfo(fields[dash + 2]),
            super_options: fields
                .get(dash + 3)
                .map(|s| unescape_mountinfo(s))
                .unwrap_or_default(),
        });
    }
    out
}

/// Mounts whose fsname names this store (`ckptfs:<store>` or `ckptfs:<store>:...`).
pub fn store_mounts(store: &Store) -> Vec<MountEntry> {
    let want = format!("ckptfs:{}", store.root().display());
    mount_table()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.source == want || m.source.starts_with(&format!("{want}:")))
        .collect()
}

/// True when the mount point answers "Transport endpoint is not connected" (daemon gone).
pub fn mount_is_dead(m: &MountEntry) -> bool {
    matches!(fs::metadata(&m.mount_point), Err(e) if e.raw_os_error() == Some(libc::ENOTCONN))
}

/// A socket younger than this may belong to a daemon between bind(2) and listen(2).
const SOCKET_GRACE_SECS: u64 = 30;

/// Files under `run/`, recursively, with their metadata, without entering a mount: the
/// workspaces' lower view (`run/lower`) is the whole history through FUSE, and walking it
/// would read every checkpoint's tree (and hand the kernel, and so the view's pin, every
/// checkpoint).
fn run_files(store: &Store) -> Vec<(PathBuf, fs::Metadata)> {
    let Ok(top) = fs::symlink_metadata(store.run_dir()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut stack = vec![store.run_dir()];
    while let Some(d) = stack.pop() {
        for p in list_dir(&d).unwrap_or_default() {
            let Ok(md) = fs::symlink_metadata(&p) else {
                continue;
            };
            if md.is_dir() {
                if md.dev() == top.dev() {
                    stack.push(p);
                }
            } else {
                out.push((p, md));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Socket files under `run/` (recursively) that nobody listens on (and older than a grace
/// period, so a daemon that is just starting is not mistaken for a dead one).
pub fn dead_sockets(store: &Store) -> Vec<PathBuf> {
    run_files(store)
        .into_iter()
        .filter(|(p, md)| {
            md.file_type().is_socket()
                && md
                    .modified()
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age.as_secs() >= SOCKET_GRACE_SECS)
                && std::os::unix::net::UnixStream::connect(p).is_err()
        })
        .map(|(p, _)| p)
        .collect()
}

/// `*.pid` files under `run/` (recursively) whose process is gone.
pub fn dead_pid_files(store: &Store) -> Vec<PathBuf> {
    run_files(store)
        .into_iter()
        .filter(|(p, _)| {
            p.extension().and_then(|x| x.to_str()) == Some("pid")
                && fs::read_to_string(p)
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok())
                    .is_some_and(|pid| !pid_alive(pid))
        })
        .map(|(p, _)| p)
        .collect()
}

/// Dead pins (`run/pins/*.json` whose pid is gone).
pub fn dead_pins(store: &Store) -> Vec<PathBuf> {
    list_dir(&store.pins_dir())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.extension().and_then(|x| x.to_str()) == Some("json"))
        .filter(|p| {
            fs::read(p)
                .ok()
                .and_then(|d| serde_json::from_slice::<crate::store::pin::Pin>(&d).ok())
                .is_some_and(|pin| !pid_alive(pin.pid))
        })
        .collect()
}

/// Temp files left by processes that are gone (tmp/ and `.tmp-*` in the store's directories).
pub fn leftover_temps(store: &Store) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in [
        store.tmp_dir(),
        store.root().to_path_buf(),
        store.checkpoints_dir(),
        store.branches_dir(),
        store.labels_dir(),
        store.run_dir(),
        store.pins_dir(),
    ] {
        let in_tmp = dir == store.tmp_dir();
        for p in list_dir(&dir).unwrap_or_default() {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if p.is_dir() || !(in_tmp || name.starts_with(".tmp-")) {
                continue;
            }
            if fsio::temp_owner_pid(&name).map_or(true, |pid| !pid_alive(pid)) {
                out.push(p);
            }
        }
    }
    out
}

/// Object files that are writable by anyone (should be 0444).
pub fn writable_objects(store: &Store) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for (p, _) in object_files(store)? {
        if let Ok(md) = fs::symlink_metadata(&p) {
            if md.mode() & 0o222 != 0 {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// Runs every check on the store at `path`. A store that does not open gives one finding.
pub fn doctor(path: &Path) -> Result<DoctorReport> {
    let root = crate::store::absolute(path)?;
    let mut report = DoctorReport {
        store: root.clone(),
        ..Default::default()
    };
    let store = match Store::open(&root) {
        Ok(s) => s,
        Err(e) => {
            report.findings.push(finding(
                "error",
                "format",
                root.display().to_string(),
                e.to_string(),
                "use a ckptfs build that knows this format, or restore STORE.json from an archive \
                 (`ckptfs unarchive`)",
                "",
            ));
            return Ok(report);
        }
    };
    let f = &mut report.findings;

    // Permissions.
    if let Ok(md) = fs::metadata(store.root()) {
        if md.mode() & 0o077 != 0 {
            f.push(finding(
                "warning",
                "permissions",
                store.root().display().to_string(),
                format!("store directory is mode {:04o}; it should be 0700 (history holds private files)", md.mode() & 0o7777),
                format!("chmod 700 {}", store.root().display()),
                "recover",
            ));
        }
    }
    let writable = writable_objects(&store)?;
    if !writable.is_empty() {
        f.push(finding(
            "warning",
            "permissions",
            format!("{} object files", writable.len()),
            format!(
                "objects must be read-only (0444); first: {}",
                writable[0].display()
            ),
            "make them read-only again (chmod a-w)",
            "recover",
        ));
    }

    // Marker.
    match store.read_marker() {
        Ok(Some(m)) if !pid_alive(m.pid) || m.pid == std::process::id() => f.push(finding(
            "error",
            "marker",
            store.running_marker_path().display().to_string(),
            format!(
                "{} (pid {}) was interrupted; mutating commands refuse to run",
                m.op, m.pid
            ),
            format!("ckptfs recover {}", store.root().display()),
            "recover",
        )),
        Ok(Some(m)) => f.push(finding(
            "info",
            "marker",
            store.running_marker_path().display().to_string(),
            format!("{} (pid {}) is running", m.op, m.pid),
            "nothing to do",
            "",
        )),
        Ok(None) => {}
        Err(e) => f.push(finding(
            "error",
            "marker",
            store.running_marker_path().display().to_string(),
            e.to_string(),
            format!("ckptfs recover {}", store.root().display()),
            "recover",
        )),
    }
    for p in dead_pins(&store) {
        f.push(finding(
            "warning",
            "pin",
            p.display().to_string(),
            "pin of a process that exited",
            "ckptfs recover (or gc) removes it",
            "recover",
        ));
    }
    for p in dead_sockets(&store) {
        f.push(finding(
            "warning",
            "socket",
            p.display().to_string(),
            "control socket nobody listens on (its daemon is gone)",
            "ckptfs recover removes it",
            "recover",
        ));
    }
    for p in dead_pid_files(&store) {
        f.push(finding(
            "warning",
            "socket",
            p.display().to_string(),
            "pid file of a process that exited",
            "ckptfs recover removes it",
            "recover",
        ));
    }
    let temps = leftover_temps(&store);
    if !temps.is_empty() {
        f.push(finding(
            "warning",
            "temp",
            format!("{} temp files", temps.len()),
            format!(
                "half-written files of finished processes, e.g. {}",
                temps[0].display()
            ),
            "ckptfs recover removes them",
            "recover",
        ));
    }

    // Mounts.
    for m in store_mounts(&store) {
        if mount_is_dead(&m) {
            f.push(finding(
                "error",
                "mount",
                m.mount_point.display().to_string(),
                format!(
                    "mount {} of this store has no daemon (Transport endpoint is not connected)",
                    m.source
                ),
                format!(
                    "umount -l {} (ckptfs recover does it)",
                    m.mount_point.display()
                ),
                "recover",
            ));
        } else {
            f.push(finding(
                "info",
                "mount",
                m.mount_point.display().to_string(),
                format!("{} is mounted", m.source),
                "nothing to do",
                "",
            ));
        }
    }

    // Layout: unknown entries, symlinks where the store keeps its own data.
    for p in list_dir(store.root())? {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !KNOWN_TOP.contains(&name.as_str()) && !name.starts_with(".tmp-") {
            f.push(finding(
                "info",
                "layout",
                p.display().to_string(),
                "not part of the store layout",
                "move it out of the store if it is yours",
                "",
            ));
        }
        if fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
            f.push(finding(
                "error",
                "layout",
                p.display().to_string(),
                "a symlink in the store: store data would live outside the store root",
                "replace it with the real directory or file",
                "",
            ));
        }
    }

    // Security: credentials in a home root.
    if let Some(rc) = store.config().roots.get(HOME_ROOT) {
        let missing: Vec<&str> = DEFAULT_HOME_EXCLUDES
            .iter()
            .copied()
            .filter(|p| !rc.exclude.iter().any(|x| x == p))
            .collect();
        if !missing.is_empty() {
            f.push(finding(
                "info",
                "security",
                format!("root {HOME_ROOT}"),
                format!(
                    "no exclude rule for {}: credentials may be captured",
                    missing.join(", ")
                ),
                "add the rules to STORE.json roots.home.exclude (or keep them out on purpose)",
                "",
            ));
        }
    }

    // Refs.
    let checkpoints: HashSet<ObjectId> = store.list_checkpoints()?.into_iter().collect();
    report.checkpoints = checkpoints.len();
    for p in list_dir(&store.branches_dir())? {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(b) = name.strip_suffix(".json") else {
            continue;
        };
        match store.read_branch(b) {
            Ok(Some(br)) => {
                if let Some(h) = br.head {
                    if !checkpoints.contains(&h) {
                        f.push(finding("error", "ref", format!("branch {b}"), format!("head {h} does not exist"), "unarchive the checkpoint from an archive, or point the branch at an existing checkpoint", ""));
                    }
                }
            }
            Ok(None) => {}
            Err(e) => f.push(finding(
                "error",
                "ref",
                format!("branch {b}"),
                e.to_string(),
                "restore refs/branches from an archive",
                "",
            )),
        }
    }
    for p in list_dir(&store.labels_dir())? {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with(".tmp-") {
            continue;
        }
        match store.read_label(&name) {
            Ok(Some(id)) if !checkpoints.contains(&id) => f.push(finding(
                "error",
                "ref",
                format!("label {name}"),
                format!("points at missing checkpoint {id}"),
                "unarchive the checkpoint from an archive",
                "",
            )),
            Ok(_) => {}
            Err(e) => f.push(finding(
                "error",
                "ref",
                format!("label {name}"),
                e.to_string(),
                "restore refs/labels from an archive",
                "",
            )),
        }
    }

    for (b, id) in crate::ops::gc::workspace_bases(&store) {
        if !checkpoints.contains(&id) {
            f.push(finding(
                "error",
                "ref",
                format!("workspace {b}"),
                format!("base checkpoint {id} of its upper layer does not exist"),
                "unarchive the checkpoint from an archive; until then the workspace cannot be mounted",
                "",
            ));
        }
    }

    // Reachable objects: present, right size.
    let mut seen: HashSet<ObjectId> = HashSet::new();
    let mut stack: Vec<ObjectId> = Vec::new();
    let mut chunks: Vec<(ObjectId, u32)> = Vec::new();
    for id in &checkpoints {
        match store.read_checkpoint(id) {
            Ok(c) => stack.extend(c.roots.values().map(|r| r.tree)),
            Err(e) => f.push(finding(
                "error",
                "object",
                format!("checkpoint {id}"),
                e.to_string(),
                "delete the record if it is garbage, or restore it from an archive",
                "",
            )),
        }
    }
    let mut bad = 0usize;
    while let Some(t) = stack.pop() {
        if !seen.insert(t) {
            continue;
        }
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
                if bad <= 50 {
                    f.push(finding("error", "object", format!("tree {t}"), e.to_string(), "run `ckptfs verify` to see which checkpoints use it; restore it by unarchiving an archive that has it", ""));
                }
            }
        }
    }
    for (id, len) in chunks {
        if !seen.insert(id) {
            continue;
        }
        let problem = match store.locate_object(&id) {
            None => Some("missing".to_string()),
            Some((p, compressed)) => match object_len(&p, compressed) {
                Ok(n) if n == u64::from(len) => None,
                Ok(n) => Some(format!("has {n} bytes, the tree says {len}")),
                Err(e) => Some(e.to_string()),
            },
        };
        if let Some(problem) = problem {
            bad += 1;
            if bad <= 50 {
                f.push(finding("error", "object", format!("object {id}"), problem, "run `ckptfs verify` to see which checkpoints use it; restore it by unarchiving an archive that has it", ""));
            }
        }
    }
    if bad > 50 {
        f.push(finding(
            "error",
            "object",
            format!("{} more objects", bad - 50),
            "missing or wrong size",
            "run `ckptfs verify`",
            "",
        ));
    }
    report.objects_checked = seen.len();
    let garbage = object_files(&store)?
        .into_iter()
        .filter(|(_, id)| !seen.contains(id))
        .count();
    if garbage > 0 {
        report.findings.push(finding(
            "info",
            "garbage",
            format!("{garbage} objects"),
            "no checkpoint reaches them",
            format!("ckptfs gc {}", store.root().display()),
            "gc",
        ));
    }
    Ok(report)
}

/// Uncompressed length of an object file.
fn object_len(p: &Path, compressed: bool) -> Result<u64> {
    if !compressed {
        return fs::symlink_metadata(p)
            .map(|m| m.len())
            .map_err(|e| Error::io(p, e));
    }
    let mut f = fs::File::open(p).map_err(|e| Error::io(p, e))?;
    let mut dec = zstd::stream::read::Decoder::new(&mut f).map_err(|e| Error::io(p, e))?;
    io::copy(&mut dec, &mut io::sink())
        .map_err(|e| Error::Corrupt(format!("{}: bad zstd data ({e})", p.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mountinfo() {
        let t =
            "36 35 98:0 / /mnt/a\\040b rw,noatime master:1 - fuse ckptfs:/s:main rw,user_id=0\n\
                 37 35 98:0 / /x rw - overlay overlay rw,upperdir=/s/upper/b/r\nbroken line\n";
        let m = parse_mountinfo(t);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mount_point, PathBuf::from("/mnt/a b"));
        assert_eq!(m[0].source, "ckptfs:/s:main");
        assert!(m[1].super_options.contains("upperdir=/s/upper/b/r"));
    }
}
