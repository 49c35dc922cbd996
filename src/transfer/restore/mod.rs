//! `restore`: a copy restore for when FUSE is not wanted, at any grain: a whole root, a
//! directory, one file or symlink; to a path outside the roots (`--to`), or back into its
//! own place in its root (`--in-place`, or `--to` that place), or every root of a
//! checkpoint at once (`--in-place` without a root).
//!
//! A target's parent may be writable by an agent, who can rename or replace any entry in it
//! at any moment. So each target is resolved once and held: outside the roots, its parent
//! is canonicalized (a symlink on the way owned by someone else is refused) and opened as a
//! [`safe::Dir`], and the held directory's real path is the one checked (not inside a root,
//! not overlapping the store); inside a root, the root is opened at its configured path and
//! the parent reached beneath it with no symlink followed. Everything after that goes
//! through held fds, never a path. A target under a mounted workspace is refused.
//!
//! 1. Check: every tree and chunk needed is read and hashed before any target is touched.
//! 2. Stage: for each target, a fresh `.ckptfs-restore-<pid>-<8 hex>` directory beside it
//!    (0700, ours, checked to be the one created), and in it the tree (or the one entry),
//!    `tree`, materialized through held directory fds: each entry created exclusively
//!    (`O_CREAT|O_EXCL`, `mkdirat`, `symlinkat`) in a directory this restore created, from
//!    names that tree decoding validated, its metadata given to its fd (or, for a symlink,
//!    to its name in the held directory, not followed). Nobody else can enter the staging
//!    directory. Holes (all-zero 4 KiB blocks) stay holes. `--include`/`--exclude` filter
//!    what is materialized (paths relative to the restored directory, exclude-rule globs).
//! 3. Swap: what is at the target is moved aside, never deleted (an empty directory, for a
//!    directory restore, is removed): to `NAME.ckptfs-aside-<time>-<pid>` beside it, or, in
//!    place, to the store's `displaced/<time>-<pid>-restore-ROOT[-PATH]` (beside it when
//!    that is another filesystem); then `tree` is renamed to the target
//!    (`RENAME_NOREPLACE`) and the staging directories removed once every target is in.
//!    Each step is recorded in the RUNNING marker ([`RestoreMarker`]) with the identities
//!    of what was made and moved, so `recover` (and a failure here) rolls every target
//!    back until all are swapped in, touching only what this restore made or moved.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::fs::safe::{Dir, Stat};
use crate::history::walk::Located;
use crate::id::ObjectId;
use crate::meta::{apply_meta_at, apply_meta_fd, Meta};
use crate::progress::Progress;
use crate::store::exclude::Excluder;
use crate::store::tree::{Chunk, Entry, EntryKind};
use crate::store::Store;

mod rollback;
pub use rollback::*;

mod stage;
pub use stage::*;

/// Hole granularity for sparse restore.
const HOLE_BLOCK: usize = 4096;

/// The staging directory's name prefix (`recover`, `doctor` and the tests know it).
pub const STAGING_PREFIX: &str = ".ckptfs-restore-";

/// The name of the tree inside the staging directory: what becomes DIR.
const STAGED_TREE: &str = "tree";

/// The longest file name (`NAME_MAX`): an aside name keeps to it whatever DIR's length.
const NAME_MAX: usize = 255;

/// A directory entry's identity (device, inode): what `recover` checks before it removes or
/// moves back anything, so that a name an agent swapped meanwhile is left alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryId {
    pub dev: u64,
    pub ino: u64,
}

impl EntryId {
    pub fn of(st: &Stat) -> EntryId {
        EntryId {
            dev: st.dev,
            ino: st.ino,
        }
    }

    pub fn matches(&self, st: &Stat) -> bool {
        self.dev == st.dev && self.ino == st.ino
    }
}

/// The progress of one target in the RUNNING marker (for `recover`). Paths are real paths.
/// The staging directory is in DIR's parent; the aside entry too, unless `aside_in_store`
/// (then it is in the store's `displaced/`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RestorePhase {
    pub dir: PathBuf,
    pub staging: PathBuf,
    /// The staging directory, once created (`None`: not yet, so it can only be empty).
    #[serde(default)]
    pub staging_id: Option<EntryId>,
    pub aside: Option<PathBuf>,
    /// What was at DIR when it was moved aside.
    #[serde(default)]
    pub aside_id: Option<EntryId>,
    /// DIR's parent is inside a root (an agent's tree): `recover` opens the root's real path
    /// here and reaches the parent beneath it by `parent_rel`, never following a symlink.
    #[serde(default)]
    pub within: Option<PathBuf>,
    #[serde(default)]
    pub parent_rel: Option<PathBuf>,
    /// The aside entry is in the store's `displaced/`, not in DIR's parent.
    #[serde(default)]
    pub aside_in_store: bool,
    /// The staged tree (what is renamed to DIR).
    #[serde(default)]
    pub staged_id: Option<EntryId>,
    /// The rename of the staged tree to DIR was started (written before it is made).
    #[serde(default)]
    pub swapped: bool,
    /// An empty directory at DIR was removed to make room.
    #[serde(default)]
    pub removed_empty: bool,
}

/// The marker phase of a restore: every target, and whether all of them were swapped in.
/// Until `done`, `recover` undoes the swaps made, so that a restore of several roots leaves
/// all of them old or all of them new.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RestoreMarker {
    pub targets: Vec<RestorePhase>,
    #[serde(default)]
    pub done: bool,
}

/// Where a restore writes.
#[derive(Clone, Copy, Debug)]
pub enum Destination<'a> {
    /// A path: a directory is restored as it (like `cp -rT`); a file into it when it is an
    /// existing directory, else as it (like `cp`). Refused inside a root, unless it is the
    /// entry's own place there.
    To(&'a Path),
    /// The entry's own place: its root's recorded path, and its path in the root.
    InPlace,
}

/// Filters of a directory restore.
#[derive(Clone, Debug, Default)]
pub struct RestoreOptions {
    /// Globs: only what matches (and the directories holding it) is restored; a directory
    /// that matches is restored whole. Empty: everything.
    pub include: Vec<String>,
    /// Globs: what matches is not restored (a directory with all it holds).
    pub exclude: Vec<String>,
}

/// `--include`/`--exclude`, compiled. Paths are relative to the restored directory, with
/// the semantics of exclude rules (`store::exclude`): a glob without `/` matches a name at
/// any depth.
struct Filter {
    include: Option<Excluder>,
    exclude: Option<Excluder>,
}

impl Filter {
    fn compile(opts: &RestoreOptions) -> Result<Option<Filter>> {
        let one = |flag: &str, globs: &[String]| -> Result<Option<Excluder>> {
            if globs.is_empty() {
                return Ok(None);
            }
            // Its message names the flag once: `--include: bad pattern "[": ...`.
            Excluder::compile(flag, globs)
                .map(Some)
                .map_err(|e| match e {
                    Error::Usage(m) => Error::Usage(m.replacen(
                        &format!("root {flag}: bad exclude"),
                        &format!("{flag}: bad"),
                        1,
                    )),
                    other => other,
                })
        };
        let f = Filter {
            include: one("--include", &opts.include)?,
            exclude: one("--exclude", &opts.exclude)?,
        };
        Ok((f.include.is_some() || f.exclude.is_some()).then_some(f))
    }

    fn excluded(&self, rel: &Path, name: &OsStr) -> bool {
        self.exclude.as_ref().is_some_and(|x| x.excluded(rel, name))
    }

    fn included(&self, rel: &Path, name: &OsStr) -> bool {
        self.include.as_ref().is_none_or(|x| x.excluded(rel, name))
    }
}

/// What a restore did, for one target.
#[derive(Clone, Debug, Serialize)]
pub struct RestoreReport {
    pub checkpoint: ObjectId,
    pub root: String,
    /// The path restored, relative to the root (empty: the root itself).
    pub path: String,
    /// `dir`, `file` or `symlink`: the entry type, named as `ls` and `find` name it.
    pub r#type: &'static str,
    /// `directory`, `file` or `symlink`: the same as `type`, kept for scripts written before
    /// it (docs/json.md, "Changes").
    pub kind: &'static str,
    pub dir: PathBuf,
    pub files: u64,
    pub bytes: u64,
    /// Where what was at DIR was moved (beside it, or under the store's `displaced/`).
    pub moved_aside: Option<PathBuf>,
}

/// The target of a restore, resolved once: its parent held, and its real path, on which
/// the checks are made.
struct Target {
    parent: Dir,
    name: OsString,
    /// The real path of the parent held (for the marker and messages).
    parent_real: PathBuf,
    /// Inside a root: the root's real path and the parent's path below it.
    within: Option<(PathBuf, PathBuf)>,
}

impl Target {
    /// A path the operator named, outside the roots. Its parent is canonicalized and held; a
    /// symlink on the way that someone else owns (an agent could have planted it) is refused,
    /// and the held directory must be the one checked.
    fn resolve(dir: &Path) -> Result<Target> {
        let dir = crate::store::absolute(dir)?;
        let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
            return Err(Error::Usage(format!(
                "--to {}: not a usable path",
                dir.display()
            )));
        };
        refuse_foreign_symlinks(parent)?;
        let canon = std::fs::canonicalize(parent).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::NotFound(format!("directory {}", parent.display())),
            _ => Error::io(parent, e),
        })?;
        let parent = Dir::open(&canon)?;
        let parent_real = parent.real_path()?;
        if parent_real != canon {
            return Err(Error::Invalid(format!(
                "{} changed while being resolved (a component was swapped); nothing was written",
                canon.display()
            )));
        }
        Ok(Target {
            parent,
            name: name.to_os_string(),
            parent_real,
            within: None,
        })
    }

    /// `comps` in root `root` (its recorded path): the root itself (whose parent is the
    /// operator's), or an entry below it, whose parent is reached from the held root
    /// beneath it, never through a symlink.
    fn in_root(store: &Store, root: &str, comps: &[Vec<u8>]) -> Result<Target> {
        let rc = store
            .config()
            .roots
            .get(root)
            .ok_or_else(|| Error::NotFound(format!("root {root} in this store's config")))?;
        let Some((last, dirs)) = comps.split_last() else {
            return Target::resolve(&rc.path);
        };
        let canon = std::fs::canonicalize(&rc.path).map_err(|e| Error::io(&rc.path, e))?;
        let top = Dir::open(&canon)?;
        let top_real = top.real_path()?;
        let rel: PathBuf = dirs.iter().map(|c| OsStr::from_bytes(c)).collect();
        let parent = if rel.as_os_str().is_empty() {
            top
        } else {
            top.open_dir(&rel).map_err(|e| match e {
                Error::Io { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                    Error::NotFound(format!(
                        "{}: the directory holding it is gone (restore that directory, or use --to)",
                        top_real.join(&rel).display()
                    ))
                }
                e => e,
            })?
        };
        Ok(Target {
            parent_real: top_real.join(&rel),
            parent,
            name: OsStr::from_bytes(last).to_os_string(),
            within: Some((top_real, rel)),
        })
    }

    fn real(&self) -> PathBuf {
        self.parent_real.join(&self.name)
    }

    fn in_parent(&self, name: &OsStr) -> PathBuf {
        self.parent_real.join(name)
    }
}

/// Refuses a path whose components include a symlink owned by someone other than us (root,
/// running as root): one an agent planted could send the restore anywhere.
fn refuse_foreign_symlinks(path: &Path) -> Result<()> {
    let me = nix::unistd::geteuid().as_raw();
    let mut p = PathBuf::new();
    for c in path.components() {
        p.push(c);
        match std::fs::symlink_metadata(&p) {
            Ok(md) if md.file_type().is_symlink() && md.uid() != me => {
                return Err(Error::Usage(format!(
                    "{} is a symlink owned by uid {}: not followed (give the real path)",
                    p.display(),
                    md.uid()
                )));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(&p, e)),
        }
    }
    Ok(())
}

/// Refuses a target inside a root (other than `place`, the entry's own place), or
/// overlapping the store. Made on the path as given (so a target below a missing directory
/// gets the usage error) and again on the real path once its parent is held; each root and
/// the store are compared by the path configured and by their real path.
fn check_overlap(store: &Store, dir: &Path) -> Result<()> {
    for (name, rc) in &store.config().roots {
        for root in both(&rc.path) {
            if dir.starts_with(&root) {
                return Err(Error::Usage(format!(
                    "--to {} is inside root {name} ({}); restore to the path of what is \
                     restored there (or --in-place), or outside the root",
                    dir.display(),
                    rc.path.display()
                )));
            }
        }
    }
    for store_root in both(store.root()) {
        if dir.starts_with(&store_root) || store_root.starts_with(dir) {
            return Err(Error::Usage(format!(
                "--to {} overlaps the store {}",
                dir.display(),
                store.root().display()
            )));
        }
    }
    Ok(())
}

/// `p` as configured and as its real path.
fn both(p: &Path) -> [PathBuf; 2] {
    let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    [p.to_path_buf(), real]
}

/// The entry's own place: its root's path (as configured and real) joined with its path.
fn places(store: &Store, loc: &Located) -> Vec<PathBuf> {
    let Some(rc) = store.config().roots.get(&loc.root) else {
        return Vec::new();
    };
    let rel: PathBuf = loc.path.iter().map(|c| OsStr::from_bytes(c)).collect();
    both(&rc.path).iter().map(|r| r.join(&rel)).collect()
}

/// Refuses a target under a mounted workspace: the overlay would show (or hide) what the
/// restore writes under it.
fn refuse_live_workspace(store: &Store, real: &Path) -> Result<()> {
    for st in crate::workspace::states(store)? {
        let hit = st
            .roots
            .values()
            .find(|r| both(&r.mountpoint).iter().any(|m| real.starts_with(m)));
        if let Some(r) = hit {
            if crate::workspace::is_live(store, &st)? {
                return Err(Error::Conflict(format!(
                    "{} is under the mounted workspace {} ({}): a restore there would write \
                     under a live overlay; use `ckptfs switch` to put the workspace on the \
                     checkpoint, or restore inside the workspace after `ckptfs checkpoint`",
                    real.display(),
                    st.branch,
                    r.mountpoint.display()
                )));
            }
        }
    }
    Ok(())
}

/// What is staged: a directory tree (with the metadata of its top), or one entry.
enum Source<'a> {
    Tree { tree: ObjectId, meta: Meta<'a> },
    Entry(&'a Entry),
}

/// One target of a restore and its progress.
struct Job<'a> {
    root: String,
    path: String,
    source: Source<'a>,
    target: Target,
    /// In place: the store's `displaced/`, where what is there now goes.
    displaced: Option<Dir>,
    phase: RestorePhase,
    staging: Option<(OsString, Dir)>,
    counts: (u64, u64),
}

impl Job<'_> {
    fn kind(&self) -> &'static str {
        match &self.source {
            Source::Tree { .. } => "directory",
            Source::Entry(e) => match e.kind {
                EntryKind::Dir { .. } => "directory",
                EntryKind::File { .. } => "file",
                EntryKind::Symlink { .. } => "symlink",
            },
        }
    }
}

/// Restores the root at `loc` (the root itself or a directory in it) to `dir`.
///
/// # Errors
/// As [`restore_to`].
pub fn restore(store: &Store, loc: &Located, dir: &Path) -> Result<RestoreReport> {
    restore_to(store, loc, Destination::To(dir), &RestoreOptions::default())
}

/// Restores what is at `loc` (a root, a directory, a file or a symlink) to `dest`.
///
/// # Errors
/// `Usage` when the target is inside a root (other than the entry's own place) or overlaps
/// the store (by real paths), or for filters on a single entry; `Conflict` when a mounted
/// workspace covers the target; `Corrupt`/`NotFound` for a bad object (before anything at
/// the target changes); `Invalid` when a directory this restore created was replaced under it.
pub fn restore_to(
    store: &Store,
    loc: &Located,
    dest: Destination<'_>,
    opts: &RestoreOptions,
) -> Result<RestoreReport> {
    let source = source_of(loc)?;
    let filter = Filter::compile(opts)?;
    if filter.is_some() && !matches!(source, Source::Tree { .. }) {
        return Err(Error::Usage(
            "--include/--exclude filter the restore of a directory; this is a single entry".into(),
        ));
    }
    let places = places(store, loc);
    let (target, in_place) = match dest {
        Destination::InPlace => (Target::in_root(store, &loc.root, &loc.path)?, true),
        Destination::To(dir) => {
            let abs = crate::store::absolute(dir)?;
            if places.contains(&abs) {
                (Target::in_root(store, &loc.root, &loc.path)?, true)
            } else {
                // On the path as given first: a target below a missing directory inside a
                // root gets the usage error, not "not found".
                let given = check_overlap(store, &abs);
                let mut t = match (Target::resolve(&abs), given) {
                    (Ok(t), _) => t,
                    (Err(_), Err(e)) | (Err(e), Ok(())) => return Err(e),
                };
                let entry = matches!(source, Source::Entry(_));
                if entry {
                    t = into_existing_dir(t, loc)?;
                }
                if places.contains(&t.real()) {
                    (Target::in_root(store, &loc.root, &loc.path)?, true)
                } else {
                    // A single entry restored into an existing directory lands at DIR/NAME:
                    // that is the path to check (DIR itself may well hold the store, as
                    // /tmp does).
                    if !entry {
                        check_overlap(store, &abs)?;
                    }
                    check_overlap(store, &t.real())?;
                    (t, false)
                }
            }
        }
    };
    let job = new_job(store, loc, source, target, in_place)?;
    let mut reports = run(store, loc, vec![job], filter.as_ref())?;
    Ok(reports.remove(0))
}

/// Restores every root of checkpoint `loc.checkpoint` at its recorded path, each root's
/// current content moved to the store's `displaced/`: all of them, or (rolled back) none.
///
/// # Errors
/// As [`restore_to`].
pub fn restore_all_in_place(
    store: &Store,
    loc: &Located,
    opts: &RestoreOptions,
) -> Result<Vec<RestoreReport>> {
    let filter = Filter::compile(opts)?;
    let mut jobs = Vec::new();
    for (root, r) in &loc.record.roots {
        let meta = Meta {
            mode: r.mode,
            uid: r.uid,
            gid: r.gid,
            mtime_ns: r.mtime_ns,
            xattrs: &r.xattrs,
        };
        let source = Source::Tree { tree: r.tree, meta };
        let target = Target::in_root(store, root, &[])?;
        let mut job = new_job(store, loc, source, target, true)?;
        job.root = root.clone();
        jobs.push(job);
    }
    run(store, loc, jobs, filter.as_ref())
}

/// What `loc` stages.
fn source_of(loc: &Located) -> Result<Source<'_>> {
    Ok(match &loc.entry {
        None => {
            let r = loc.record.roots.get(&loc.root).ok_or_else(|| {
                Error::NotFound(format!("root {} in {}", loc.root, loc.checkpoint.short()))
            })?;
            Source::Tree {
                tree: r.tree,
                meta: Meta {
                    mode: r.mode,
                    uid: r.uid,
                    gid: r.gid,
                    mtime_ns: r.mtime_ns,
                    xattrs: &r.xattrs,
                },
            }
        }
        Some(
            e @ Entry {
                kind: EntryKind::Dir { tree, .. },
                ..
            },
        ) => Source::Tree {
            tree: *tree,
            meta: Meta::of_entry(e),
        },
        Some(e) => Source::Entry(e),
    })
}

/// A single entry restored to an existing directory goes into it, under its own name (as
/// `cp` does). The directory is opened beneath its held parent: a symlink there is not
/// followed (it is moved aside and replaced, like a file).
fn into_existing_dir(t: Target, loc: &Located) -> Result<Target> {
    match t.parent.stat(&t.name)? {
        Some(st) if st.is_dir() => {
            let Some(name) = loc.path.last() else {
                return Ok(t);
            };
            let dir = t.parent.open_dir(&t.name)?;
            if !dir.stat_self()?.same_object(&st) {
                return Err(Error::Invalid(format!(
                    "{} changed while being resolved; nothing was written",
                    t.real().display()
                )));
            }
            let parent_real = dir.real_path()?;
            Ok(Target {
                parent: dir,
                name: OsStr::from_bytes(name).to_os_string(),
                parent_real,
                within: None,
            })
        }
        _ => Ok(t),
    }
}

fn new_job<'a>(
    store: &Store,
    loc: &Located,
    source: Source<'a>,
    target: Target,
    in_place: bool,
) -> Result<Job<'a>> {
    let real = target.real();
    refuse_live_workspace(store, &real)?;
    let displaced = if in_place {
        let d = store.displaced_dir();
        std::fs::create_dir_all(&d).map_err(|e| Error::io(&d, e))?;
        Some(Dir::open(&d)?)
    } else {
        None
    };
    let phase = RestorePhase {
        dir: real,
        staging: PathBuf::new(),
        staging_id: None,
        aside: None,
        aside_id: None,
        within: target.within.as_ref().map(|w| w.0.clone()),
        parent_rel: target.within.as_ref().map(|w| w.1.clone()),
        aside_in_store: false,
        staged_id: None,
        swapped: false,
        removed_empty: false,
    };
    let path = loc
        .path
        .iter()
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join("/");
    Ok(Job {
        root: loc.root.clone(),
        path,
        source,
        target,
        displaced,
        phase,
        staging: None,
        counts: (0, 0),
    })
}

/// Checks every object, then stages every job, then swaps them all in; a failure before
/// the last swap rolls every job back (as `recover` would).
fn run(
    store: &Store,
    loc: &Located,
    mut jobs: Vec<Job<'_>>,
    filter: Option<&Filter>,
) -> Result<Vec<RestoreReport>> {
    // 1. Check every needed object first.
    let checking = Progress::bytes("restore check", "chunks", None);
    let mut total = 0u64;
    for j in &jobs {
        match &j.source {
            Source::Tree { tree, .. } => total += check_objects_shown(store, tree, &checking)?,
            Source::Entry(e) => {
                if let EntryKind::File { chunks } = &e.kind {
                    for c in chunks {
                        store.read_chunk(c)?;
                        checking.add_bytes(u64::from(c.len));
                    }
                }
                total += e.size;
            }
        }
    }
    checking.finish();
    // The bytes of every file restored (a filter may restore fewer).
    let writing = Progress::bytes("restore", "files", Some(total));
    let targets: Vec<&Path> = jobs.iter().map(|j| j.phase.dir.as_path()).collect();
    let args = serde_json::json!({"checkpoint": loc.checkpoint, "root": loc.root, "to": targets});
    store.mutate("restore", args, |m| {
        let mut marker = RestoreMarker::default();
        let mut record = |jobs: &[Job<'_>], done: bool| {
            marker.targets = jobs.iter().map(|j| j.phase.clone()).collect();
            marker.done = done;
            m.set_phase(serde_json::to_value(&marker).unwrap_or_default())
        };
        // 2. Stage.
        let mut staged = Ok(());
        for i in 0..jobs.len() {
            staged = stage(store, &mut jobs, i, filter, &mut record, &writing);
            if staged.is_err() {
                break;
            }
        }
        if let Err(e) = staged {
            for j in &jobs {
                if let Some((name, dir)) = &j.staging {
                    discard_staging(&j.target, name, dir);
                }
            }
            return Err(e);
        }
        writing.finish();
        // 3. Swap.
        let mut swapped = Ok(());
        for i in 0..jobs.len() {
            swapped = swap(store, &mut jobs, i, &mut record);
            if swapped.is_err() {
                break;
            }
        }
        // Until the marker says done, the restore is not: a failure to say so rolls back too.
        if swapped.is_ok() {
            swapped = record(&jobs, true);
        }
        if let Err(e) = swapped {
            for j in jobs.iter().rev() {
                match roll_back(&j.phase, true) {
                    Ok(actions) => actions.iter().for_each(|a| log::warn!("{a}")),
                    Err(r) => log::warn!(
                        "could not roll back the restore of {}: {r}; `ckptfs recover` retries",
                        j.phase.dir.display()
                    ),
                }
            }
            return Err(e);
        }
        for j in &jobs {
            if let Some((name, dir)) = &j.staging {
                remove_staging(&j.target, name, dir);
            }
            // `displaced/` first: once the parent's entry (the restored tree) is durable, the
            // tree it replaced must be durable where it was moved, or a power loss between
            // the two syncs loses it (the parent's sync need not carry the other directory).
            if let Some(d) = &j.displaced {
                d.sync()?;
            }
            atomic::fault_point("fsync").map_err(|e| Error::io(&j.target.parent_real, e))?;
            j.target.parent.sync()?;
        }
        let reports: Vec<RestoreReport> = jobs
            .iter()
            .map(|j| RestoreReport {
                checkpoint: loc.checkpoint,
                root: j.root.clone(),
                path: j.path.clone(),
                r#type: match j.kind() {
                    "directory" => "dir",
                    k => k,
                },
                kind: j.kind(),
                dir: j.phase.dir.clone(),
                files: j.counts.0,
                bytes: j.counts.1,
                moved_aside: j.phase.aside.clone(),
            })
            .collect();
        let summary = serde_json::to_value(&reports).unwrap_or_default();
        Ok((reports, summary))
    })
}
