//! The SQLite driver's interface. Row-level merging through SQLite's session extension is
//! not built yet (docs/merge.md, "Not yet"): a database whose content changed on both sides
//! is a conflict naming the whole database, never a silent pick.

use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result};

/// Whether these are the first bytes of a SQLite database file.
pub fn is_sqlite(head: &[u8]) -> bool {
    head.starts_with(b"SQLite format 3\0")
}

/// One row (or table) the merge could not combine.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RowConflict {
    pub table: String,
    /// The primary key as `col=value[,col=value]`, or `None` for a table-level conflict.
    pub key: Option<String>,
    pub why: String,
}

/// Bounds on what the driver reads.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Bigger databases are a conflict, not read.
    pub max_bytes: u64,
    /// Conflicts listed at most.
    pub max_conflicts: usize,
    /// `--take theirs`: their side of each conflicting row.
    pub prefer_theirs: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_bytes: 1 << 30,
            max_conflicts: 1000,
            prefer_theirs: false,
        }
    }
}

/// What the driver made of one database.
pub struct Merged {
    pub conflicts: Vec<RowConflict>,
    pub rows_applied: u64,
}

/// Merges three versions of one database into `out`.
///
/// # Errors
/// Always, for now: row-level merging is not built yet.
pub fn merge_databases(
    _scratch: &Path,
    _base: &Path,
    _ours: &Path,
    _theirs: &Path,
    _out: &Path,
    _limits: &Limits,
) -> Result<Merged> {
    Err(Error::Invalid(
        "row-level SQLite merge is not built yet".into(),
    ))
}
