//! SQLite databases in WAL mode: the agent's writes sit in `NAME-wal` until a checkpoint of
//! the database copies them into `NAME`. A database whose file or `-wal` changed on both sides
//! is merged by rows with its `-wal` replayed, and the merged file holds everything: the
//! `-wal` and `-shm` beside it are removed from the merged tree.

use std::collections::HashMap;

use super::tree::TreeMerge;
use crate::error::Result;
use crate::store::tree::{Entry, Tree};

/// Databases of one directory merged with their sidecars: name -> the `-wal` of base, ours,
/// theirs.
pub type Groups = HashMap<Vec<u8>, [Option<Entry>; 3]>;

/// What an entry of the directory is to the merge.
pub enum Role<'g> {
    Database([Option<&'g Entry>; 3]),
    Sidecar,
    None,
}

fn with_suffix(name: &[u8], suffix: &[u8]) -> Vec<u8> {
    [name, suffix].concat()
}

/// Finds the databases of a directory (`[base, ours, theirs]`) that must be merged with
/// their `-wal`.
pub fn groups(m: &TreeMerge<'_>, path: &str, trees: [&Tree; 3]) -> Result<Groups> {
    let mut out = Groups::new();
    let [tb, to, tt] = trees;
    for wal in to.entries.iter().chain(&tt.entries) {
        let Some(name) = wal.name.strip_suffix(b"-wal") else {
            continue;
        };
        if out.contains_key(name) {
            continue;
        }
        let wal_name = wal.name.as_slice();
        let changed = |t: &Tree, n: &[u8]| t.get(n) != tb.get(n);
        let ours_changed = changed(to, name) || changed(to, wal_name);
        let theirs_changed = changed(tt, name) || changed(tt, wal_name);
        let files = [to, tt]
            .iter()
            .all(|t| t.get(name).is_some_and(|e| e.kind_name() == "file"));
        if !(ours_changed && theirs_changed && files) {
            continue;
        }
        let Some(db) = to.get(name) else { continue };
        if !m.content_is_sqlite(db, path)? {
            continue;
        }
        out.insert(
            name.to_vec(),
            [tb, to, tt].map(|t| t.get(wal_name).cloned()),
        );
    }
    Ok(out)
}

/// The role of entry `name` given the directory's groups.
pub fn role<'g>(groups: &'g Groups, name: &[u8]) -> Role<'g> {
    if let Some(wals) = groups.get(name) {
        return Role::Database([wals[0].as_ref(), wals[1].as_ref(), wals[2].as_ref()]);
    }
    for suffix in [b"-wal".as_slice(), b"-shm"] {
        if let Some(db) = name.strip_suffix(suffix) {
            if groups.contains_key(db) && name == with_suffix(db, suffix).as_slice() {
                return Role::Sidecar;
            }
        }
    }
    Role::None
}
