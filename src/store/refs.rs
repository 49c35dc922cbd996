//! Refs: branches (movable heads with a lifecycle), labels (immutable names: created once,
//! never moved or overwritten; only an explicit, audited `label delete` removes one, and the
//! name can then be created again) and tombstones of forgotten checkpoints.

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::id::ObjectId;
use crate::store::object::read_regular_file;
use crate::store::Store;

/// The largest branch or label file read (a few hundred bytes in practice).
const MAX_REF_BYTES: u64 = 64 << 10;

/// The branch a fresh store captures to.
pub const DEFAULT_BRANCH: &str = "main";

/// refs/branches/NAME.json.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Branch {
    pub head: Option<ObjectId>,
    pub forked_from: Option<ObjectId>,
    /// "active" or "archived".
    pub state: String,
    pub created_ns: i64,
    pub updated_ns: i64,
}

impl Store {
    /// Reads a branch, `None` if it does not exist.
    pub fn read_branch(&self, name: &str) -> Result<Option<Branch>> {
        check_name("branch", name)?;
        let p = self.branch_path(name);
        // Bounded, not followed, never blocking: a store from elsewhere is untrusted input.
        let what = format!("branch {name}");
        match read_regular_file(&p, MAX_REF_BYTES, false, &what)? {
            Some(data) => serde_json::from_slice(&data)
                .map(Some)
                .map_err(|e| Error::Corrupt(format!("{}: {e}", p.display()))),
            None => Ok(None),
        }
    }

    /// Writes a branch record (atomic replace). Callers hold the store lock.
    pub fn write_branch(&self, name: &str, b: &Branch) -> Result<()> {
        check_name("branch", name)?;
        let data = serde_json::to_vec_pretty(b)
            .map_err(|e| Error::Invalid(format!("encoding branch {name}: {e}")))?;
        atomic::write_atomic_replace(&self.branch_path(name), &data, 0o600)
    }

    /// Moves branch `name` from `expected` to `new` (compare-and-swap). Creates the branch when
    /// it does not exist and `expected` is `None`.
    ///
    /// # Errors
    /// `Conflict` when the head is not `expected` (someone else moved it).
    pub fn advance_branch(
        &self,
        name: &str,
        expected: Option<ObjectId>,
        new: ObjectId,
    ) -> Result<()> {
        let now = crate::text::time::now_ns();
        let mut b = match self.read_branch(name)? {
            Some(b) => b,
            None => Branch {
                head: None,
                forked_from: None,
                state: "active".into(),
                created_ns: now,
                updated_ns: now,
            },
        };
        if b.head != expected {
            return Err(Error::Conflict(format!(
                "branch {name} moved during the operation (expected {}, found {})",
                expected.map_or("none".into(), |i| i.short()),
                b.head.map_or("none".into(), |i| i.short())
            )));
        }
        b.head = Some(new);
        b.updated_ns = now;
        self.write_branch(name, &b)
    }

    /// Every branch, sorted by name.
    pub fn list_branches(&self) -> Result<Vec<(String, Branch)>> {
        let dir = self.branches_dir();
        let mut out = Vec::new();
        for ent in fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let ent = ent.map_err(|e| Error::io(&dir, e))?;
            let fname = ent.file_name();
            let Some(name) = fname.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if check_name("branch", name).is_err() {
                continue;
            }
            if let Some(b) = self.read_branch(name)? {
                out.push((name.to_string(), b));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Reads a label, `None` if it does not exist.
    pub fn read_label(&self, name: &str) -> Result<Option<ObjectId>> {
        check_name("label", name)?;
        let p = self.label_path(name);
        let what = format!("label {name}");
        match read_regular_file(&p, MAX_REF_BYTES, false, &what)? {
            Some(data) => std::str::from_utf8(&data)
                .ok()
                .and_then(|s| ObjectId::parse(s.trim()).ok())
                .map(Some)
                .ok_or_else(|| Error::Corrupt(format!("label file {} is not an id", p.display()))),
            None => Ok(None),
        }
    }

    /// Creates label `name` -> `id`. Labels are immutable.
    ///
    /// # Errors
    /// `Conflict` if the label exists (even when it points at `id`... unless it is the same id,
    /// which is success).
    pub fn create_label(&self, name: &str, id: &ObjectId) -> Result<()> {
        check_name("label", name)?;
        if self.read_branch(name)?.is_some() {
            return Err(Error::Conflict(format!(
                "label {name}: a branch already has that name"
            )));
        }
        let created =
            atomic::write_atomic_new(&self.label_path(name), format!("{id}\n").as_bytes(), 0o444)?;
        if !created {
            let existing = self.read_label(name)?;
            if existing != Some(*id) {
                return Err(Error::Conflict(format!(
                    "label {name} already exists (-> {}); labels are immutable",
                    existing.map_or("?".into(), |i| i.short())
                )));
            }
        }
        Ok(())
    }

    /// Deletes label `name` durably (unlink, then fsync of `refs/labels/`). Deleting a label
    /// that is not there is no error ([`LabelDeletion::Missing`]); a label file that does not
    /// read is deleted too. Callers hold the store lock and write the audit line
    /// (`Store::mutate`).
    ///
    /// # Errors
    /// `Usage` for a bad name; I/O reading, unlinking or syncing.
    pub fn delete_label(&self, name: &str) -> Result<LabelDeletion> {
        let what = match self.read_label(name) {
            Ok(None) => return Ok(LabelDeletion::Missing),
            Ok(Some(id)) => LabelDeletion::Deleted(id),
            Err(Error::Corrupt(m)) => LabelDeletion::DeletedUnreadable(m),
            Err(e) => return Err(e),
        };
        atomic::remove_file(&self.label_path(name))?;
        atomic::sync_path(&self.labels_dir())?;
        Ok(what)
    }

    /// Every label, sorted by name.
    ///
    /// # Errors
    /// I/O listing `refs/labels/`; `Corrupt` for a label file that is not an id (see
    /// [`Store::list_labels_lenient`] for listings that go on).
    pub fn list_labels(&self) -> Result<Vec<(String, ObjectId)>> {
        let (labels, mut bad) = self.list_labels_lenient()?;
        match bad.pop() {
            Some(e) => Err(e),
            None => Ok(labels),
        }
    }

    /// Every readable label, sorted by name, and an error for each label file that does not
    /// read (for listings such as `log`, which report it and go on).
    ///
    /// # Errors
    /// I/O listing `refs/labels/`.
    pub fn list_labels_lenient(&self) -> Result<(Vec<NamedId>, Vec<Error>)> {
        let dir = self.labels_dir();
        let mut out = Vec::new();
        let mut bad = Vec::new();
        for ent in fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let ent = ent.map_err(|e| Error::io(&dir, e))?;
            let Some(name) = ent.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if check_name("label", &name).is_err() {
                continue;
            }
            match self.read_label(&name) {
                Ok(Some(id)) => out.push((name, id)),
                Ok(None) => {}
                Err(e) => bad.push(e),
            }
        }
        out.sort();
        Ok((out, bad))
    }

    /// Writes the tombstone of a forgotten checkpoint (never replaced: an existing one is
    /// success, so a rerun of `forget` is idempotent).
    ///
    /// # Errors
    /// I/O creating `refs/forgotten/` or writing the file.
    pub fn write_tombstone(&self, t: &Tombstone) -> Result<()> {
        let dir = self.forgotten_dir();
        if !dir.is_dir() {
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .or_else(|e| match e.kind() {
                    io::ErrorKind::AlreadyExists => Ok(()),
                    _ => Err(Error::io(&dir, e)),
                })?;
            if let Some(refs) = dir.parent() {
                atomic::sync_path(refs)?;
            }
        }
        let data = serde_json::to_vec_pretty(t)
            .map_err(|e| Error::Invalid(format!("encoding tombstone {}: {e}", t.id)))?;
        atomic::write_atomic_new(&self.forgotten_path(&t.id), &data, 0o444)?;
        Ok(())
    }

    /// The tombstone of forgotten checkpoint `id`, `None` when it has none.
    ///
    /// # Errors
    /// I/O reading it; `Corrupt` when it does not decode or names another id.
    pub fn read_tombstone(&self, id: &ObjectId) -> Result<Option<Tombstone>> {
        let p = self.forgotten_path(id);
        match fs::read(&p) {
            Ok(data) => {
                let t: Tombstone = serde_json::from_slice(&data)
                    .map_err(|e| Error::Corrupt(format!("{}: {e}", p.display())))?;
                if t.id != *id {
                    return Err(Error::Corrupt(format!(
                        "{}: names checkpoint {}",
                        p.display(),
                        t.id
                    )));
                }
                Ok(Some(t))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&p, e)),
        }
    }

    /// Ids of every tombstone, sorted (empty when `refs/forgotten/` does not exist).
    ///
    /// # Errors
    /// I/O listing the directory.
    pub fn list_tombstones(&self) -> Result<Vec<ObjectId>> {
        let mut out: Vec<ObjectId> = crate::fs::json_records(&self.forgotten_dir())?
            .into_iter()
            .filter_map(|(_, hex)| ObjectId::parse(&hex).ok())
            .collect();
        out.sort();
        Ok(out)
    }
}

/// A ref's name and the checkpoint it names.
pub type NamedId = (String, ObjectId);

/// What [`Store::delete_label`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelDeletion {
    /// There was no such label.
    Missing,
    /// The label named this checkpoint and is gone.
    Deleted(ObjectId),
    /// The label file did not read (the message says why) and is gone.
    DeletedUnreadable(String),
}

/// `refs/forgotten/<id>.json`: what is left of a checkpoint `forget` removed. Only what the
/// history needs to go on past the gap; nothing of its content (no trees, no message).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Tombstone {
    pub id: ObjectId,
    pub parents: Vec<ObjectId>,
    pub branch: String,
    pub time_ns: i64,
    pub forgotten_ns: i64,
}

/// Checks a name used as a file name inside the store (branch, label, root): 1-100 chars of
/// `[A-Za-z0-9._-]`, not starting with `.` or `-`.
///
/// # Errors
/// `Usage` naming the kind and the value.
pub fn check_name(kind: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "invalid {kind} name {name:?}: use 1-100 characters of A-Z a-z 0-9 . _ - (not starting with . or -)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("branch", "main").is_ok());
        assert!(check_name("branch", "a/b").is_err());
        assert!(check_name("branch", "..").is_err());
        assert!(check_name("branch", "").is_err());
    }
}
