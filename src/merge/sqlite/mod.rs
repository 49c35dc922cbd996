//! The SQLite driver of `merge`: three versions of one database (base, ours, theirs) merged
//! row by row through SQLite's own session extension. The changes base -> theirs are a
//! changeset (`sqlite3session_diff` of theirs against the base) applied onto a copy of ours;
//! what cannot be combined is a [`RowConflict`] named by table and primary key.
//!
//! One call of [`merge_databases`]:
//! 1. every file must sit directly in `scratch` and be a regular file; a version larger than
//!    [`Limits::max_bytes`] (with its `-wal`) is not read: the whole file is one conflict
//!    (table `*`, why `too-large`) and `out` is not written;
//! 2. ours (and its `-wal`) is copied to `out`; two hardened connections are opened
//!    ([`open_hardened`]): `diff` (main = base, `theirs` attached) and `out`;
//! 3. a plan per table and per index, trigger and view from the three schemas ([`Planner`]);
//! 4. the changeset base -> theirs of the tables merged row by row ([`diff_theirs`]); `diff`
//!    is closed, `out` attaches theirs;
//! 5. onto `out`: tables taken whole from theirs, the changeset (conflict handler
//!    [`judge`]), indexes/triggers/views taken from theirs, new foreign-key violations;
//! 6. `integrity_check`, then `out` is closed as one file: SQLite checkpoints and deletes
//!    the `-wal` when its last connection closes (the connection holds the lock exclusively,
//!    so there is never a `-shm`). Ours' journal mode stays recorded in the header: a WAL
//!    database comes out as a WAL database with no sidecar.
//!
//! Untrusted input (the databases come from an agent's tree): connections refuse symlinks
//! (`SQLITE_OPEN_NOFOLLOW`), run in defensive mode with an untrusted schema, triggers, views
//! and foreign-key actions off, no extension loading (SQLite's default, never enabled here),
//! `cell_size_check`, no mmap, a bounded page cache and heap (`hard_heap_limit`), and a
//! progress handler that interrupts everything after [`Limits::max_time`]. Schema text from
//! theirs is executed only as one `CREATE` statement of the kind it claims to be, and only if
//! it lands in `main` as the very same text.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use rusqlite::fallible_streaming_iterator::FallibleStreamingIterator;
use rusqlite::hooks::Action;
use rusqlite::session::{Changeset, ChangesetItem, ConflictAction, ConflictType, Session};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The 16 bytes every SQLite 3 database file starts with (file format, section 1.3.1).
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Virtual machine steps between two looks at the clock (the progress handler).
const PROGRESS_STEPS: i32 = 100;

/// Page cache of each connection, in KiB (`PRAGMA cache_size` takes KiB when negative): the
/// least each database gets (see [`size_cache`]).
const CACHE_KIB: u64 = 16 * 1024;

/// A database's page cache may grow to hold all of it, up to this share of
/// [`Limits::max_memory`] (three databases are open at once: base, theirs, ours).
const CACHE_SHARE_OF_HEAP: u64 = 8;

/// A key value longer than this is cut in a conflict report.
const MAX_KEY_VALUE_CHARS: usize = 120;

/// Whether these are the first bytes of a SQLite database file ("SQLite format 3\0").
pub fn is_sqlite(head: &[u8]) -> bool {
    head.starts_with(SQLITE_MAGIC)
}

/// One row (or table) the merge could not combine.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RowConflict {
    /// The table (or, for `schema` conflicts of an index, trigger or view, that object).
    pub table: String,
    /// The primary key as `col=value[,col=value]` (values rendered like SQL literals, text
    /// quoted, blobs x'..'), or None for a table-level conflict.
    pub key: Option<String>,
    /// "both" (the same row changed both ways, differently), "deleted-changed" (deleted on one
    /// side, changed on the other), "constraint" (applying their change breaks a constraint
    /// here: UNIQUE, FOREIGN KEY, NOT NULL, CHECK), "schema" (the table's schema changed on
    /// either side: schema changes are not merged), "no-primary-key" (a table without a
    /// primary key that both sides changed: sessions cannot track it), "virtual-table" (their
    /// side changed a virtual table or its shadow tables: not merged), "too-large" (table `*`:
    /// a version is larger than [`Limits::max_bytes`]).
    pub why: String,
}

/// Bounds of one merge.
#[derive(Clone, Debug)]
pub struct Limits {
    /// A version larger than this (file plus `-wal`) is not read: a `too-large` conflict.
    pub max_bytes: u64,
    /// Conflicts listed at most; more are only counted ([`Merged::conflicts_unlisted`]).
    pub max_conflicts: usize,
    /// Wall time of the whole merge; past it SQLite is interrupted and the merge is an error.
    pub max_time: Duration,
    /// SQLite's heap (`PRAGMA hard_heap_limit`). The limit is process-wide and the pragma
    /// only ever lowers it.
    pub max_memory: u64,
    /// `--take theirs`: a row changed both ways (or deleted here and changed there) gets
    /// theirs' change where SQLite can replace the row (data and insert conflicts); ours is
    /// kept otherwise. The conflicts are still listed.
    pub prefer_theirs: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_bytes: 1 << 30,
            max_conflicts: 1000,
            max_time: Duration::from_secs(60),
            max_memory: 1 << 30,
            prefer_theirs: false,
        }
    }
}

/// What [`merge_databases`] did.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Merged {
    /// What could not be combined, at most [`Limits::max_conflicts`].
    pub conflicts: Vec<RowConflict>,
    /// Conflicts past [`Limits::max_conflicts`], counted but not listed.
    pub conflicts_unlisted: u64,
    /// Rows of theirs written into the result (changes applied plus rows of tables taken
    /// whole from theirs).
    pub rows_applied: u64,
}

/// Which version a failure concerns; errors name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Side {
    Base,
    Ours,
    Theirs,
    /// The copy of ours being merged into.
    Merged,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Base => "base",
            Side::Ours => "ours",
            Side::Theirs => "theirs",
            Side::Merged => "merged",
        })
    }
}

/// Merges three versions of one database: ours plus the row changes base -> theirs.
/// `base`, `ours`, `theirs` and `out` must be files directly in `scratch` (each input may have
/// a `-wal` beside it, which is replayed); `out` is written as one file that passes
/// `integrity_check`, with every change that does not conflict, also when some do.
///
/// # Errors
/// A version that does not open, is not a database or is corrupt: an error naming it (`base`,
/// `ours`, `theirs`); a path outside `scratch`; I/O; the time or memory limit exceeded.
pub fn merge_databases(
    scratch: &Path,
    base: &Path,
    ours: &Path,
    theirs: &Path,
    out: &Path,
    limits: &Limits,
) -> Result<Merged> {
    let deadline = Instant::now() + limits.max_time;
    let scratch = fs::canonicalize(scratch).map_err(|e| Error::io(scratch, e))?;
    let mut sizes = HashMap::new();
    for (side, path) in [
        (Side::Base, base),
        (Side::Ours, ours),
        (Side::Theirs, theirs),
    ] {
        sizes.insert(side, check_input(&scratch, path, side)?);
    }
    let largest = sizes.values().copied().max().unwrap_or(0);
    let size = |side| sizes.get(&side).copied().unwrap_or(0);
    check_place(&scratch, out, Side::Merged)?;
    if largest > limits.max_bytes {
        let too_large = RowConflict {
            table: "*".into(),
            key: None,
            why: "too-large".into(),
        };
        return Ok(Merged {
            conflicts: vec![too_large],
            ..Merged::default()
        });
    }
    copy_with_wal(ours, out)?;
    let diff = open_hardened(base, Side::Base, deadline, limits)?;
    attach(&diff, theirs, Side::Theirs)?;
    size_cache(&diff, "main", size(Side::Base), limits).map_err(|e| sql_error(Side::Base, e))?;
    size_cache(&diff, "theirs", size(Side::Theirs), limits)
        .map_err(|e| sql_error(Side::Theirs, e))?;
    let merged = open_hardened(out, Side::Ours, deadline, limits)?;
    size_cache(&merged, "main", size(Side::Ours), limits).map_err(|e| sql_error(Side::Ours, e))?;
    check_readable(&diff, "main", Side::Base)?;
    check_readable(&diff, "theirs", Side::Theirs)?;
    check_readable(&merged, "main", Side::Ours)?;

    let plan = Planner::new(&diff, &merged)?.plan()?;
    let state = Arc::new(Mutex::new(ApplyState::new(
        limits.max_conflicts,
        limits.prefer_theirs,
    )));
    lock(&state)?.extend(plan.conflicts.iter().cloned());
    let changes = diff_theirs(&diff, &plan)?;
    diff.close().map_err(|(_, e)| sql_error(Side::Base, e))?;
    attach(&merged, theirs, Side::Theirs)?;
    size_cache(&merged, "theirs", size(Side::Theirs), limits)
        .map_err(|e| sql_error(Side::Theirs, e))?;
    let rows = apply_plan(&merged, &plan, changes, &state)?;
    finish(merged, out)?;
    let state = lock(&state)?;
    Ok(Merged {
        conflicts: state.conflicts.clone(),
        conflicts_unlisted: state.unlisted,
        rows_applied: rows.saturating_sub(state.omitted),
    })
}

/// The error of a SQLite failure on `side`: corruption is [`Error::Corrupt`]; the time and
/// memory limits say so.
fn sql_error(side: Side, e: rusqlite::Error) -> Error {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => {
            Error::Corrupt(format!("{side} SQLite database: {e}"))
        }
        Some(ErrorCode::OperationInterrupted) => Error::Invalid(format!(
            "merging SQLite databases: gave up at the time limit (while reading {side})"
        )),
        Some(ErrorCode::OutOfMemory) => Error::Invalid(format!(
            "merging SQLite databases: out of the memory limit (while reading {side})"
        )),
        _ => Error::Invalid(format!("{side} SQLite database: {e}")),
    }
}

/// Failures that end the merge even where a refusal would otherwise be a conflict: the
/// limits, corruption, I/O.
fn is_fatal(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(
            ErrorCode::OperationInterrupted
                | ErrorCode::OutOfMemory
                | ErrorCode::DatabaseCorrupt
                | ErrorCode::NotADatabase
                | ErrorCode::SystemIoFailure
                | ErrorCode::DiskFull
        )
    )
}

/// `path` with `suffix` appended to its name (`x.db` -> `x.db-wal`), as SQLite names sidecars.
fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Refuses a path that is not a name directly inside `scratch` (already canonical).
fn check_place(scratch: &Path, path: &Path, side: Side) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let canon = fs::canonicalize(parent).map_err(|e| Error::io(parent, e))?;
    if canon != scratch || path.file_name().is_none() {
        return Err(Error::Invalid(format!(
            "{side} SQLite database {}: not in the merge's scratch directory {}",
            path.display(),
            scratch.display()
        )));
    }
    Ok(())
}

/// Checks an input's place and type; returns its size with its `-wal`.
fn check_input(scratch: &Path, path: &Path, side: Side) -> Result<u64> {
    check_place(scratch, path, side)?;
    let mut size = 0;
    for file in [path.to_path_buf(), sidecar(path, "-wal")] {
        match fs::symlink_metadata(&file) {
            Ok(m) if m.file_type().is_file() => size += m.len(),
            Ok(_) => {
                return Err(Error::Invalid(format!(
                    "{side} SQLite database {}: not a regular file",
                    file.display()
                )))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && file != path => {}
            Err(e) => return Err(Error::io(&file, e)),
        }
    }
    Ok(size)
}

/// Copies ours (and its `-wal`) to `out`, removing stale sidecars of `out` first: a leftover
/// `-journal` would be rolled back into the copy.
fn copy_with_wal(ours: &Path, out: &Path) -> Result<()> {
    for suffix in ["-wal", "-shm", "-journal"] {
        let stale = sidecar(out, suffix);
        match fs::remove_file(&stale) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(Error::io(&stale, e)),
            _ => {}
        }
    }
    fs::copy(ours, out).map_err(|e| Error::io(out, e))?;
    let wal = sidecar(ours, "-wal");
    if wal.exists() {
        let to = sidecar(out, "-wal");
        fs::copy(&wal, &to).map_err(|e| Error::io(&to, e))?;
    }
    Ok(())
}

/// Opens `path` read-write (never creating it, never through a symlink) and hardens the
/// connection against a crafted file.
fn open_hardened(
    path: &Path,
    side: Side,
    deadline: Instant,
    limits: &Limits,
) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW
        | OpenFlags::SQLITE_OPEN_EXRESCODE;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| sql_error(side, e))?;
    harden(&conn, deadline, limits).map_err(|e| sql_error(side, e))?;
    Ok(conn)
}

fn harden(conn: &Connection, deadline: Instant, limits: &Limits) -> rusqlite::Result<()> {
    for (knob, on) in [
        (DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true),
        (DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA, false),
        (DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false),
        (DbConfig::SQLITE_DBCONFIG_ENABLE_VIEW, false),
        // No ON DELETE CASCADE and the like: foreign keys are checked after the merge.
        (DbConfig::SQLITE_DBCONFIG_ENABLE_FKEY, false),
        (DbConfig::SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER, false),
        (DbConfig::SQLITE_DBCONFIG_WRITABLE_SCHEMA, false),
        (DbConfig::SQLITE_DBCONFIG_ENABLE_ATTACH_CREATE, false),
    ] {
        conn.set_db_config(knob, on)?;
    }
    conn.progress_handler(PROGRESS_STEPS, Some(move || Instant::now() >= deadline))?;
    // locking_mode before the first read: the WAL index then lives in heap memory (no -shm).
    conn.execute_batch(&format!(
        "PRAGMA cell_size_check=ON; PRAGMA mmap_size=0; PRAGMA cache_size=-{CACHE_KIB};
         PRAGMA locking_mode=EXCLUSIVE; PRAGMA hard_heap_limit={};",
        limits.max_memory
    ))
}

/// Lets schema `db`'s page cache hold the whole database (`bytes`, with its `-wal`), so that
/// each page is read from the file once (the checks, then the session diff, read every page
/// again), between [`CACHE_KIB`] and a share of the heap limit. An attached database starts
/// with SQLite's default (2 MiB). Only memory, never a result, depends on it: SQLite recycles
/// cached pages when the heap nears its limit.
fn size_cache(conn: &Connection, db: &str, bytes: u64, limits: &Limits) -> rusqlite::Result<()> {
    let most = (limits.max_memory / CACHE_SHARE_OF_HEAP) >> 10;
    let kib = (bytes >> 10).saturating_add(1024).min(most).max(CACHE_KIB);
    conn.execute_batch(&format!("PRAGMA {db}.cache_size=-{kib};"))
}

/// `ATTACH`es `path` as `theirs` (a bound parameter: no URI, no SQL in the name).
fn attach(conn: &Connection, path: &Path, side: Side) -> Result<()> {
    let name = path.to_str().ok_or_else(|| {
        Error::Invalid(format!(
            "{side} SQLite database {}: the path is not UTF-8",
            path.display()
        ))
    })?;
    conn.execute("ATTACH DATABASE ?1 AS theirs", [name])
        .map_err(|e| sql_error(side, e))?;
    Ok(())
}

/// `PRAGMA quick_check` of schema `db`: a corrupt version is an error naming it.
fn check_readable(conn: &Connection, db: &str, side: Side) -> Result<()> {
    let found = integrity(conn, db, "quick_check").map_err(|e| sql_error(side, e))?;
    match found {
        None => Ok(()),
        Some(m) => Err(Error::Corrupt(format!("{side} SQLite database: {m}"))),
    }
}

/// Runs `PRAGMA db.<pragma>(10)`: None when it says ok, else its findings.
fn integrity(conn: &Connection, db: &str, pragma: &str) -> rusqlite::Result<Option<String>> {
    let mut stmt = conn.prepare(&format!("PRAGMA {db}.{pragma}(10)"))?;
    let found: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(match found.as_slice() {
        [ok] if ok == "ok" => None,
        _ => Some(found.join("; ")),
    })
}

/// A name quoted as an SQL identifier.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// One row of `sqlite_schema`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Object {
    kind: String,
    name: String,
    table: String,
    sql: Option<String>,
}

/// The schema of one version, by name folded to ASCII lower case (as SQLite compares names).
#[derive(Debug, Default)]
struct Schema {
    objects: BTreeMap<String, Object>,
}

impl Schema {
    fn read(conn: &Connection, db: &str) -> rusqlite::Result<Schema> {
        let mut stmt = conn.prepare(&format!(
            "SELECT type, name, tbl_name, sql FROM {db}.sqlite_schema"
        ))?;
        let rows = stmt.query_map([], |r| {
            Ok(Object {
                kind: r.get(0)?,
                name: r.get(1)?,
                table: r.get(2)?,
                sql: r.get(3)?,
            })
        })?;
        let mut objects = BTreeMap::new();
        for o in rows {
            let o = o?;
            objects.insert(o.name.to_ascii_lowercase(), o);
        }
        Ok(Schema { objects })
    }

    fn table(&self, key: &str) -> Option<&Object> {
        self.objects.get(key).filter(|o| o.kind == "table")
    }

    fn table_sql(&self, key: &str) -> Option<String> {
        self.table(key).map(|o| o.sql.clone().unwrap_or_default())
    }

    /// An index, trigger or view (not a table).
    fn other(&self, key: &str) -> Option<&Object> {
        self.objects.get(key).filter(|o| o.kind != "table")
    }

    /// The indexes and triggers of table `key`.
    fn dependents(&self, key: &str) -> BTreeMap<&str, &Object> {
        self.objects
            .iter()
            .filter(|(_, o)| o.kind != "table" && o.table.eq_ignore_ascii_case(key))
            .map(|(k, o)| (k.as_str(), o))
            .collect()
    }

    fn keys_of(&self, tables: bool) -> impl Iterator<Item = &String> {
        self.objects.iter().filter_map(move |(k, o)| {
            let internal = k.starts_with("sqlite_");
            ((o.kind == "table") == tables && !internal).then_some(k)
        })
    }
}

fn is_virtual(o: &Object) -> bool {
    let sql = o.sql.as_deref().unwrap_or_default();
    sql.get(..20)
        .is_some_and(|head| head.eq_ignore_ascii_case("CREATE VIRTUAL TABLE"))
}

/// The columns of a table as a changeset has them (`table_xinfo`, hidden and generated
/// columns left out), with which belong to the primary key.
struct Columns {
    names: Vec<String>,
    pk: Vec<bool>,
    /// Every column name, generated ones too.
    all: Vec<String>,
}

impl Columns {
    fn read(conn: &Connection, db: &str, table: &str) -> rusqlite::Result<Columns> {
        let literal = format!("'{}'", table.replace('\'', "''"));
        let mut stmt = conn.prepare(&format!("PRAGMA {db}.table_xinfo({literal})"))?;
        let mut rows = stmt.query([])?;
        let mut cols = Columns {
            names: Vec::new(),
            pk: Vec::new(),
            all: Vec::new(),
        };
        while let Some(r) = rows.next()? {
            let name: String = r.get(1)?;
            let pk: i64 = r.get(5)?;
            let hidden: i64 = r.get(6)?;
            if hidden == 0 {
                cols.names.push(name.clone());
                cols.pk.push(pk > 0);
            }
            cols.all.push(name);
        }
        Ok(cols)
    }

    fn has_pk(&self) -> bool {
        self.pk.iter().any(|&p| p)
    }
}

/// A digest of a table's rows as a multiset (sorted by every column), to tell whether a side
/// changed them.
fn table_digest(conn: &Connection, db: &str, table: &str) -> rusqlite::Result<[u8; 32]> {
    let from = format!("{db}.{}", ident(table));
    let n = conn
        .prepare(&format!("SELECT * FROM {from}"))?
        .column_count();
    let order: Vec<String> = (1..=n).map(|i| i.to_string()).collect();
    let mut stmt = conn.prepare(&format!(
        "SELECT * FROM {from} ORDER BY {}",
        order.join(",")
    ))?;
    let mut rows = stmt.query([])?;
    let mut h = Sha256::new();
    while let Some(row) = rows.next()? {
        h.update(b"r");
        for i in 0..n {
            match row.get_ref(i)? {
                ValueRef::Null => h.update([0]),
                ValueRef::Integer(v) => {
                    h.update([1]);
                    h.update(v.to_le_bytes());
                }
                ValueRef::Real(v) => {
                    h.update([2]);
                    h.update(v.to_bits().to_le_bytes());
                }
                ValueRef::Text(b) | ValueRef::Blob(b) => {
                    h.update([3]);
                    h.update((b.len() as u64).to_le_bytes());
                    h.update(b);
                }
            }
        }
    }
    Ok(h.finalize().into())
}

/// What the merge does with one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TablePlan {
    /// Same schema on all sides, with a primary key: theirs' row changes through the changeset.
    Merge,
    /// Created on both sides with the same schema: merged row by row against an empty base.
    CreateBoth,
    /// Created on theirs only: created in the result with theirs' rows.
    Create,
    /// Changed on theirs only, in a way rows cannot carry (schema, or rows of a table
    /// without a primary key): theirs' table replaces ours'.
    Replace,
    /// Dropped on theirs, untouched on ours.
    Drop,
    /// Nothing of theirs to bring.
    Keep,
    Conflict(&'static str),
}

#[derive(Debug, Default)]
struct Plan {
    tables: BTreeMap<String, TablePlan>,
    /// Indexes, triggers and views to take from theirs (changed there, untouched here).
    take: Vec<String>,
    conflicts: Vec<RowConflict>,
    base: Schema,
    ours: Schema,
    theirs: Schema,
}

impl Plan {
    fn with(&self, wanted: &[TablePlan]) -> impl Iterator<Item = &String> {
        let wanted = wanted.to_vec();
        self.tables
            .iter()
            .filter(move |(_, p)| wanted.contains(p))
            .map(|(k, _)| k)
    }

    fn name_of(&self, key: &str) -> String {
        [&self.theirs, &self.ours, &self.base]
            .iter()
            .find_map(|s| s.objects.get(key))
            .map_or_else(|| key.to_owned(), |o| o.name.clone())
    }
}

/// Decides the [`Plan`] from the three schemas, reading rows only where a decision needs to
/// know whether a side changed them.
struct Planner<'a> {
    diff: &'a Connection,
    merged: &'a Connection,
    plan: Plan,
    digests: HashMap<(Side, String), [u8; 32]>,
}

impl<'a> Planner<'a> {
    fn new(diff: &'a Connection, merged: &'a Connection) -> Result<Planner<'a>> {
        let plan = Plan {
            base: Schema::read(diff, "main").map_err(|e| sql_error(Side::Base, e))?,
            theirs: Schema::read(diff, "theirs").map_err(|e| sql_error(Side::Theirs, e))?,
            ours: Schema::read(merged, "main").map_err(|e| sql_error(Side::Ours, e))?,
            ..Plan::default()
        };
        Ok(Planner {
            diff,
            merged,
            plan,
            digests: HashMap::new(),
        })
    }

    fn plan(mut self) -> Result<Plan> {
        let schemas = [&self.plan.base, &self.plan.ours, &self.plan.theirs];
        let tables: BTreeSet<String> = schemas
            .iter()
            .flat_map(|s| s.keys_of(true))
            .cloned()
            .collect();
        let others: BTreeSet<String> = schemas
            .iter()
            .flat_map(|s| s.keys_of(false))
            .cloned()
            .collect();
        let virtuals: Vec<String> = schemas
            .iter()
            .flat_map(|s| s.objects.iter())
            .filter(|(_, o)| is_virtual(o))
            .map(|(k, _)| k.clone())
            .collect();
        for key in tables {
            let shadow = virtuals.iter().any(|v| {
                *v == key
                    || key
                        .strip_prefix(v.as_str())
                        .is_some_and(|r| r.starts_with('_'))
            });
            let decision = if shadow {
                self.plan_virtual(&key)?
            } else {
                self.plan_table(&key)?
            };
            if let TablePlan::Conflict(why) = decision {
                self.conflict(&key, why);
            }
            self.plan.tables.insert(key, decision);
        }
        for key in others {
            self.plan_other(&key);
        }
        Ok(self.plan)
    }

    fn conflict(&mut self, key: &str, why: &str) {
        let table = self.plan.name_of(key);
        self.plan.conflicts.push(RowConflict {
            table,
            key: None,
            why: why.to_owned(),
        });
    }

    fn plan_table(&mut self, key: &str) -> Result<TablePlan> {
        use TablePlan::*;
        let b = self.plan.base.table_sql(key);
        let o = self.plan.ours.table_sql(key);
        let t = self.plan.theirs.table_sql(key);
        Ok(match (b, o, t) {
            (None, None, Some(_)) => Create,
            (None, Some(o), Some(t)) if o == t => {
                if self.has_pk(key)? {
                    CreateBoth
                } else if self.same(Side::Ours, Side::Theirs, key)? {
                    Keep
                } else {
                    Conflict("no-primary-key")
                }
            }
            (None, Some(_), Some(_)) => Conflict("schema"),
            (None, _, None) => Keep,
            (Some(_), None, None) => Keep,
            (Some(b), None, Some(t)) => {
                if b == t && self.same(Side::Base, Side::Theirs, key)? {
                    Keep
                } else {
                    Conflict("schema")
                }
            }
            (Some(b), Some(o), None) => {
                if b == o && self.ours_untouched(key)? {
                    Drop
                } else {
                    Conflict("schema")
                }
            }
            (Some(b), Some(o), Some(t)) => self.plan_kept_table(key, &b, &o, &t)?,
        })
    }

    /// A table all three versions have.
    fn plan_kept_table(&mut self, key: &str, b: &str, o: &str, t: &str) -> Result<TablePlan> {
        use TablePlan::*;
        let theirs_rows_same = |p: &mut Self| p.same(Side::Base, Side::Theirs, key);
        Ok(if b == t && o == b {
            if self.has_pk(key)? {
                Merge
            } else if theirs_rows_same(self)? || self.same(Side::Ours, Side::Theirs, key)? {
                Keep
            } else if self.ours_untouched(key)? {
                Replace
            } else {
                Conflict("no-primary-key")
            }
        } else if b == t {
            if theirs_rows_same(self)? {
                Keep
            } else {
                Conflict("schema")
            }
        } else if o == b {
            if self.ours_untouched(key)? {
                Replace
            } else {
                Conflict("schema")
            }
        } else if o == t && self.same(Side::Ours, Side::Theirs, key)? {
            Keep
        } else {
            Conflict("schema")
        })
    }

    /// A virtual table or one of its shadow tables: never merged; a change on theirs is a
    /// conflict.
    fn plan_virtual(&mut self, key: &str) -> Result<TablePlan> {
        let b = self.plan.base.table(key).cloned();
        let t = self.plan.theirs.table(key).cloned();
        let changed = match (&b, &t) {
            (Some(b), Some(t)) if b.sql == t.sql && !is_virtual(t) => {
                !self.same(Side::Base, Side::Theirs, key)?
            }
            (b, t) => b.as_ref().map(|o| &o.sql) != t.as_ref().map(|o| &o.sql),
        };
        Ok(if changed {
            TablePlan::Conflict("virtual-table")
        } else {
            TablePlan::Keep
        })
    }

    /// An index, trigger or view: theirs' version when ours did not change it.
    fn plan_other(&mut self, key: &str) {
        let sql = |s: &Schema| s.other(key).map(|o| o.sql.clone());
        let (b, o, t) = (
            sql(&self.plan.base),
            sql(&self.plan.ours),
            sql(&self.plan.theirs),
        );
        if t == b || o == t {
            return;
        }
        // Objects of a table that is created, replaced or dropped go with it.
        let table = [&self.plan.theirs, &self.plan.ours]
            .iter()
            .find_map(|s| s.other(key))
            .map(|o| o.table.to_ascii_lowercase());
        let moved = [TablePlan::Create, TablePlan::Replace, TablePlan::Drop];
        if table.is_some_and(|t| self.plan.tables.get(&t).is_some_and(|p| moved.contains(p))) {
            return;
        }
        if o == b {
            self.plan.take.push(key.to_owned());
        } else {
            self.conflict(key, "schema");
        }
    }

    fn has_pk(&self, key: &str) -> Result<bool> {
        let name = self.plan.name_of(key);
        let cols =
            Columns::read(self.diff, "theirs", &name).map_err(|e| sql_error(Side::Theirs, e))?;
        Ok(cols.has_pk())
    }

    /// Whether ours left table `key` as the base had it: schema, indexes, triggers, rows.
    fn ours_untouched(&mut self, key: &str) -> Result<bool> {
        let deps = |s: &Schema| -> Vec<Option<String>> {
            s.dependents(key).values().map(|o| o.sql.clone()).collect()
        };
        if self.plan.base.table_sql(key) != self.plan.ours.table_sql(key)
            || deps(&self.plan.base) != deps(&self.plan.ours)
        {
            return Ok(false);
        }
        self.same(Side::Base, Side::Ours, key)
    }

    /// Whether two sides hold the same rows in table `key`.
    fn same(&mut self, a: Side, b: Side, key: &str) -> Result<bool> {
        Ok(self.digest(a, key)? == self.digest(b, key)?)
    }

    fn digest(&mut self, side: Side, key: &str) -> Result<[u8; 32]> {
        if let Some(d) = self.digests.get(&(side, key.to_owned())) {
            return Ok(*d);
        }
        let (conn, db, schema) = match side {
            Side::Base => (self.diff, "main", &self.plan.base),
            Side::Theirs => (self.diff, "theirs", &self.plan.theirs),
            Side::Ours | Side::Merged => (self.merged, "main", &self.plan.ours),
        };
        let name = schema.table(key).map_or(key, |o| o.name.as_str());
        let d = table_digest(conn, db, name).map_err(|e| sql_error(side, e))?;
        self.digests.insert((side, key.to_owned()), d);
        Ok(d)
    }
}

/// Runs `sql` from a schema as the one `CREATE` statement of the kind its row claims, and
/// says whether it landed in `main` as the very same text (not in `temp`, not renamed).
fn create_object(conn: &Connection, obj: &Object) -> rusqlite::Result<bool> {
    let Some(sql) = obj.sql.as_deref() else {
        return Ok(false);
    };
    let heads: &[&str] = match obj.kind.as_str() {
        "table" => &["CREATE TABLE "],
        "index" => &["CREATE INDEX ", "CREATE UNIQUE INDEX "],
        "trigger" => &["CREATE TRIGGER "],
        "view" => &["CREATE VIEW "],
        _ => &[],
    };
    let claimed = heads.iter().any(|h| {
        sql.get(..h.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(h))
    });
    if !claimed {
        return Ok(false);
    }
    // `execute` prepares one statement and refuses any that follows it.
    conn.execute(sql, [])?;
    let landed: Option<Option<String>> = conn
        .query_row(
            "SELECT sql FROM main.sqlite_schema WHERE type = ?1 AND name = ?2",
            [&obj.kind, &obj.name],
            |r| r.get(0),
        )
        .optional()?;
    Ok(landed.flatten().as_deref() == Some(sql))
}

/// The changeset base -> theirs of the tables merged row by row, with their column names
/// (for naming keys) and its number of changes.
struct Changes {
    changeset: Changeset,
    columns: HashMap<String, Vec<String>>,
    ops: u64,
}

/// Diffs theirs against the base (in `diff`: main = base) for the tables merged row by row.
/// A table created on both sides is first created empty in the base.
fn diff_theirs(diff: &Connection, plan: &Plan) -> Result<Changes> {
    let on_base = |e| sql_error(Side::Base, e);
    for key in plan.with(&[TablePlan::CreateBoth]) {
        let created = match plan.theirs.table(key) {
            Some(t) => create_object(diff, t).map_err(on_base)?,
            None => false,
        };
        if !created {
            return Err(Error::Invalid(format!(
                "theirs SQLite database: table {} could not be created in the base",
                plan.name_of(key)
            )));
        }
    }
    let on_theirs = |e| sql_error(Side::Theirs, e);
    let mut session = Session::new_with_name(diff, "theirs").map_err(on_theirs)?;
    let mut columns = HashMap::new();
    for key in plan.with(&[TablePlan::Merge, TablePlan::CreateBoth]) {
        let name = plan.name_of(key);
        session
            .diff::<&str, &str>("main", name.as_str())
            .map_err(on_theirs)?;
        let cols = Columns::read(diff, "theirs", &name).map_err(on_theirs)?;
        columns.insert(key.clone(), cols.names);
    }
    let changeset = session.changeset().map_err(on_theirs)?;
    drop(session);
    let mut ops = 0;
    let mut it = changeset.iter().map_err(on_theirs)?;
    while it.next().map_err(on_theirs)?.is_some() {
        ops += 1;
    }
    drop(it);
    Ok(Changes {
        changeset,
        columns,
        ops,
    })
}

/// What the conflict handler collects while the changeset is applied.
struct ApplyState {
    conflicts: Vec<RowConflict>,
    unlisted: u64,
    /// Changes not applied: conflicts, and changes ours already had.
    omitted: u64,
    max: usize,
    /// Replace the row with theirs' change where SQLite allows (see [`Limits::prefer_theirs`]).
    prefer_theirs: bool,
    /// A failure inside the handler (it can only abort; this says why).
    failure: Option<String>,
}

impl ApplyState {
    fn new(max: usize, prefer_theirs: bool) -> ApplyState {
        ApplyState {
            conflicts: Vec::new(),
            unlisted: 0,
            omitted: 0,
            max,
            prefer_theirs,
            failure: None,
        }
    }

    fn push(&mut self, c: RowConflict) {
        if self.conflicts.len() < self.max {
            self.conflicts.push(c);
        } else {
            self.unlisted += 1;
        }
    }

    fn extend(&mut self, cs: impl IntoIterator<Item = RowConflict>) {
        for c in cs {
            self.push(c);
        }
    }
}

fn lock(state: &Mutex<ApplyState>) -> Result<MutexGuard<'_, ApplyState>> {
    state
        .lock()
        .map_err(|_| Error::Invalid("merging SQLite rows: a conflict handler panicked".into()))
}

fn merged_err(e: rusqlite::Error) -> Error {
    sql_error(Side::Merged, e)
}

/// Brings theirs' changes into `merged` (ours' copy, theirs attached): tables dropped,
/// created or replaced, the changeset, indexes/triggers/views, then foreign keys checked.
/// Returns the rows written.
fn apply_plan(
    merged: &Connection,
    plan: &Plan,
    changes: Changes,
    state: &Arc<Mutex<ApplyState>>,
) -> Result<u64> {
    let before = foreign_key_violations(merged)?;
    for key in plan.with(&[TablePlan::Drop]) {
        if let Some(o) = plan.ours.table(key) {
            let drop = format!("DROP TABLE main.{}", ident(&o.name));
            merged.execute_batch(&drop).map_err(merged_err)?;
        }
    }
    // An index theirs dropped or changed must not refuse theirs' rows.
    for key in &plan.take {
        if let Some(o) = plan.ours.other(key).filter(|o| o.kind == "index") {
            let drop = format!("DROP INDEX IF EXISTS main.{}", ident(&o.name));
            merged.execute_batch(&drop).map_err(merged_err)?;
        }
    }
    let mut rows = 0;
    for key in plan.with(&[TablePlan::Create, TablePlan::Replace]) {
        rows += take_table(merged, plan, key, state)?;
    }
    rows += apply_changes(merged, changes, state)?;
    for key in &plan.take {
        take_object(merged, plan, key, state)?;
    }
    if let (Some(before), Some(after)) = (before, foreign_key_violations(merged)?) {
        for (table, rowid) in after.difference(&before) {
            let key = match rowid {
                Some(r) => Some(key_of_rowid(merged, table, *r).map_err(merged_err)?),
                None => None,
            };
            lock(state)?.push(RowConflict {
                table: table.clone(),
                key,
                why: "constraint".into(),
            });
        }
    }
    Ok(rows)
}

/// Runs `step` in a savepoint: kept when it says `Some`; rolled back when it says `None` or
/// fails short of [`is_fatal`], and then the why of the conflict.
fn attempt(
    conn: &Connection,
    step: impl FnOnce() -> rusqlite::Result<Option<u64>>,
) -> Result<std::result::Result<u64, &'static str>> {
    conn.execute_batch("SAVEPOINT merge_step")
        .map_err(merged_err)?;
    let outcome = match step() {
        Ok(Some(n)) => Ok(n),
        Ok(None) => Err("schema"),
        Err(e) if is_fatal(&e) => return Err(merged_err(e)),
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {
            Err("constraint")
        }
        Err(_) => Err("schema"),
    };
    let end = if outcome.is_ok() {
        "RELEASE merge_step"
    } else {
        "ROLLBACK TO merge_step; RELEASE merge_step"
    };
    conn.execute_batch(end).map_err(merged_err)?;
    Ok(outcome)
}

/// Theirs' table `key` (schema, rows, indexes, triggers) in place of ours' (if any); a
/// conflict if it cannot be created here.
fn take_table(
    merged: &Connection,
    plan: &Plan,
    key: &str,
    state: &Mutex<ApplyState>,
) -> Result<u64> {
    let Some(theirs) = plan.theirs.table(key) else {
        return Ok(0);
    };
    let outcome = attempt(merged, || {
        if let Some(o) = plan.ours.table(key) {
            merged.execute_batch(&format!("DROP TABLE main.{}", ident(&o.name)))?;
        }
        if !create_object(merged, theirs)? {
            return Ok(None);
        }
        let rows = copy_rows(merged, &theirs.name)?;
        for dep in plan.theirs.dependents(key).values() {
            if dep.sql.is_some() && !create_object(merged, dep)? {
                return Ok(None);
            }
        }
        Ok(Some(rows))
    })?;
    match outcome {
        Ok(rows) => Ok(rows),
        Err(why) => {
            lock(state)?.push(RowConflict {
                table: theirs.name.clone(),
                key: None,
                why: why.into(),
            });
            Ok(0)
        }
    }
}

/// Copies every row of `theirs.name` into `main.name` (same schema), keeping rowids of a
/// table without a primary key.
fn copy_rows(merged: &Connection, name: &str) -> rusqlite::Result<u64> {
    let cols = Columns::read(merged, "theirs", name)?;
    let mut list: Vec<String> = cols.names.iter().map(|c| ident(c)).collect();
    let rowid_named = cols
        .all
        .iter()
        .any(|c| ["rowid", "_rowid_", "oid"].contains(&c.to_ascii_lowercase().as_str()));
    let table = ident(name);
    if !cols.has_pk() && !rowid_named {
        list.insert(0, "_rowid_".into());
    }
    let list = list.join(", ");
    let n = merged.execute(
        &format!("INSERT INTO main.{table} ({list}) SELECT {list} FROM theirs.{table}"),
        [],
    )?;
    Ok(n as u64)
}

/// Theirs' index, trigger or view `key` in place of ours' (ours left it as the base had it).
fn take_object(
    merged: &Connection,
    plan: &Plan,
    key: &str,
    state: &Mutex<ApplyState>,
) -> Result<()> {
    let outcome = attempt(merged, || {
        if let Some(o) = plan.ours.other(key) {
            let kind = match o.kind.as_str() {
                "index" => "INDEX",
                "trigger" => "TRIGGER",
                "view" => "VIEW",
                _ => return Ok(None),
            };
            merged.execute_batch(&format!("DROP {kind} IF EXISTS main.{}", ident(&o.name)))?;
        }
        Ok(match plan.theirs.other(key) {
            Some(t) => create_object(merged, t)?.then_some(0),
            None => Some(0),
        })
    })?;
    if let Err(why) = outcome {
        lock(state)?.push(RowConflict {
            table: plan.name_of(key),
            key: None,
            why: why.into(),
        });
    }
    Ok(())
}

/// Applies the changeset to `merged`, each conflict judged by [`judge`]. Returns the
/// changes it holds (those not applied are counted in [`ApplyState::omitted`]).
fn apply_changes(
    merged: &Connection,
    changes: Changes,
    state: &Arc<Mutex<ApplyState>>,
) -> Result<u64> {
    let Changes {
        changeset,
        columns,
        ops,
    } = changes;
    let tables: BTreeSet<String> = columns.keys().cloned().collect();
    let shared = Arc::clone(state);
    let applied = merged.apply(
        &changeset,
        Some(move |t: &str| tables.contains(&t.to_ascii_lowercase())),
        move |kind, item| {
            let Ok(mut s) = shared.lock() else {
                return ConflictAction::SQLITE_CHANGESET_ABORT;
            };
            let replaceable = matches!(
                kind,
                ConflictType::SQLITE_CHANGESET_DATA | ConflictType::SQLITE_CHANGESET_CONFLICT
            );
            match judge(kind, &item, &columns) {
                Ok(Verdict::Same) => {
                    s.omitted += 1;
                    ConflictAction::SQLITE_CHANGESET_OMIT
                }
                Ok(Verdict::Take) => ConflictAction::SQLITE_CHANGESET_REPLACE,
                Ok(Verdict::Conflict(c)) => {
                    s.push(c);
                    if s.prefer_theirs && replaceable {
                        ConflictAction::SQLITE_CHANGESET_REPLACE
                    } else {
                        s.omitted += 1;
                        ConflictAction::SQLITE_CHANGESET_OMIT
                    }
                }
                Err(e) => {
                    s.failure = Some(e.to_string());
                    ConflictAction::SQLITE_CHANGESET_ABORT
                }
            }
        },
    );
    if let Some(f) = lock(state)?.failure.take() {
        return Err(Error::Invalid(format!("merging SQLite rows: {f}")));
    }
    applied.map_err(merged_err)?;
    Ok(ops)
}

/// How a change that met a conflict is treated.
enum Verdict {
    /// Ours already has it: skipped, no conflict.
    Same,
    /// Applied anyway (theirs' update of columns ours left as they were).
    Take,
    Conflict(RowConflict),
}

/// The conflict handler: see the module doc of `merge` for the table of cases.
fn judge(
    kind: ConflictType,
    item: &ChangesetItem,
    columns: &HashMap<String, Vec<String>>,
) -> rusqlite::Result<Verdict> {
    use ConflictType::*;
    if kind == SQLITE_CHANGESET_FOREIGN_KEY {
        // Not raised (foreign keys are off while applying; they are checked after).
        return Ok(Verdict::Conflict(RowConflict {
            table: "*".into(),
            key: None,
            why: "constraint".into(),
        }));
    }
    let op = item.op()?;
    let code = op.code();
    let n = usize::try_from(op.number_of_columns()).unwrap_or(0);
    let why = match kind {
        SQLITE_CHANGESET_DATA if code == Action::SQLITE_UPDATE => match update_verdict(item, n)? {
            Some(v) => return Ok(v),
            None => "both",
        },
        // Theirs deleted a row ours changed.
        SQLITE_CHANGESET_DATA => "deleted-changed",
        // Deleted on both sides.
        SQLITE_CHANGESET_NOTFOUND if code == Action::SQLITE_DELETE => return Ok(Verdict::Same),
        SQLITE_CHANGESET_NOTFOUND => "deleted-changed",
        SQLITE_CHANGESET_CONFLICT if code == Action::SQLITE_INSERT && same_row(item, n)? => {
            return Ok(Verdict::Same)
        }
        SQLITE_CHANGESET_CONFLICT => "both",
        SQLITE_CHANGESET_CONSTRAINT => "constraint",
        _ => "both",
    };
    let table = op.table_name().to_owned();
    let names = columns.get(&table.to_ascii_lowercase());
    let key = render_key(item, code, n, names)?;
    Ok(Verdict::Conflict(RowConflict {
        table,
        key: Some(key),
        why: why.into(),
    }))
}

/// A value of a change, or None where the change holds none (a column an update left alone).
fn present(v: rusqlite::Result<ValueRef<'_>>) -> rusqlite::Result<Option<ValueRef<'_>>> {
    match v {
        Ok(v) => Ok(Some(v)),
        Err(rusqlite::Error::InvalidColumnIndex(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Theirs' update of a row ours changed as well: the same when ours already has every new
/// value, taken when each column theirs changed is the base's or theirs' value here, else
/// None (both changed one column differently).
fn update_verdict(item: &ChangesetItem, n: usize) -> rusqlite::Result<Option<Verdict>> {
    let mut take = false;
    for col in 0..n {
        let Some(new) = present(item.new_value(col))? else {
            continue;
        };
        let current = item.conflict(col)?;
        if current == new {
            continue;
        }
        if present(item.old_value(col))? == Some(current) {
            take = true;
        } else {
            return Ok(None);
        }
    }
    Ok(Some(if take { Verdict::Take } else { Verdict::Same }))
}

/// Whether ours' row is exactly theirs' inserted one.
fn same_row(item: &ChangesetItem, n: usize) -> rusqlite::Result<bool> {
    for col in 0..n {
        if present(item.new_value(col))? != Some(item.conflict(col)?) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The primary key of a change as `col=value[,col=value]`.
fn render_key(
    item: &ChangesetItem,
    code: Action,
    n: usize,
    names: Option<&Vec<String>>,
) -> rusqlite::Result<String> {
    let pk = item.pk()?;
    let mut parts = Vec::new();
    for (col, &in_pk) in pk.iter().enumerate().take(n) {
        if in_pk == 0 {
            continue;
        }
        let value = if code == Action::SQLITE_INSERT {
            item.new_value(col)?
        } else {
            item.old_value(col)?
        };
        let name = names
            .and_then(|ns| ns.get(col))
            .map_or_else(|| format!("column{col}"), Clone::clone);
        parts.push(format!("{name}={}", sql_literal(value)));
    }
    Ok(parts.join(","))
}

/// A value as an SQL literal (text quoted, blobs `x'..'`), cut past [`MAX_KEY_VALUE_CHARS`].
fn sql_literal(v: ValueRef<'_>) -> String {
    match v {
        ValueRef::Null => "NULL".into(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => format!("{f:?}"),
        ValueRef::Text(t) => {
            let text = String::from_utf8_lossy(t);
            let mut cut: String = text.chars().take(MAX_KEY_VALUE_CHARS).collect();
            if cut.len() < text.len() {
                cut.push_str("...");
            }
            format!("'{}'", cut.replace('\'', "''"))
        }
        ValueRef::Blob(b) => {
            let shown = &b[..b.len().min(MAX_KEY_VALUE_CHARS / 2)];
            let hex: String = shown.iter().map(|x| format!("{x:02x}")).collect();
            let more = if shown.len() < b.len() { "..." } else { "" };
            format!("x'{hex}{more}'")
        }
    }
}

/// Rows that break a foreign key: (table, rowid; None in a table without rowid).
type Violations = BTreeSet<(String, Option<i64>)>;

/// The rows `PRAGMA foreign_key_check` names, or None when the check itself fails (a schema
/// whose foreign keys SQLite cannot check: then none are judged, with a warning).
fn foreign_key_violations(conn: &Connection) -> Result<Option<Violations>> {
    let read = || -> rusqlite::Result<Violations> {
        let mut stmt = conn.prepare("PRAGMA main.foreign_key_check")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect()
    };
    match read() {
        Ok(v) => Ok(Some(v)),
        Err(e) if is_fatal(&e) => Err(merged_err(e)),
        Err(e) => {
            log::warn!("merged SQLite database: foreign keys not checked: {e}");
            Ok(None)
        }
    }
}

/// The primary key of row `rowid` of `table` in `main`, as [`render_key`] writes it
/// (`rowid=N` for a table without one).
fn key_of_rowid(conn: &Connection, table: &str, rowid: i64) -> rusqlite::Result<String> {
    let cols = Columns::read(conn, "main", table)?;
    let pk: Vec<&String> = cols
        .names
        .iter()
        .zip(&cols.pk)
        .filter_map(|(n, &p)| p.then_some(n))
        .collect();
    if pk.is_empty() {
        return Ok(format!("rowid={rowid}"));
    }
    let select: Vec<String> = pk.iter().map(|c| ident(c)).collect();
    let sql = format!(
        "SELECT {} FROM main.{} WHERE _rowid_ = ?1",
        select.join(", "),
        ident(table)
    );
    conn.query_row(&sql, [rowid], |r| {
        let mut parts = Vec::new();
        for (i, name) in pk.iter().enumerate() {
            parts.push(format!("{name}={}", sql_literal(r.get_ref(i)?)));
        }
        Ok(parts.join(","))
    })
}

/// Checks the result and closes it as one file (see the module doc).
fn finish(merged: Connection, out: &Path) -> Result<()> {
    merged
        .execute_batch("DETACH DATABASE theirs")
        .map_err(merged_err)?;
    if let Some(found) = integrity(&merged, "main", "integrity_check").map_err(merged_err)? {
        return Err(Error::Corrupt(format!(
            "merged SQLite database fails integrity_check: {found}"
        )));
    }
    merged.close().map_err(|(_, e)| merged_err(e))?;
    for suffix in ["-wal", "-shm", "-journal"] {
        let left = sidecar(out, suffix);
        if left.try_exists().map_err(|e| Error::io(&left, e))? {
            return Err(Error::Invalid(format!(
                "merged SQLite database: {} is left beside it",
                left.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
