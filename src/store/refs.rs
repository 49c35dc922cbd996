//! Refs: branches (movable heads with a lifecycle) and labels (immutable names).

use std::fs;
use std::io;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::{fsio, Store};
use crate::util::check_name;

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
        match fs::read(&p) {
            Ok(data) => serde_json::from_slice(&data)
                .map(Some)
                .map_err(|e| Error::Corrupt(format!("{}: {e}", p.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&p, e)),
        }
    }

    /// Writes a branch record (atomic replace). Callers hold the store lock.
    pub fn write_branch(&self, name: &str, b: &Branch) -> Result<()> {
        check_name("branch", name)?;
        let data = serde_json::to_vec_pretty(b)
            .map_err(|e| Error::Invalid(format!("encoding branch {name}: {e}")))?;
        fsio::write_atomic_replace(&self.branch_path(name), &data, 0o600)
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
        let now = crate::util::now_ns();
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
        match fs::read_to_string(&p) {
            Ok(s) => ObjectId::parse(s.trim())
                .map(Some)
                .map_err(|_| Error::Corrupt(format!("label file {} is not an id", p.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&p, e)),
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
            fsio::write_atomic_new(&self.label_path(name), format!("{id}\n").as_bytes(), 0o444)?;
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

    /// Every label, sorted by name.
    pub fn list_labels(&self) -> Result<Vec<(String, ObjectId)>> {
        let dir = self.labels_dir();
        let mut out = Vec::new();
        for ent in fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let ent = ent.map_err(|e| Error::io(&dir, e))?;
            let Some(name) = ent.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if check_name("label", &name).is_err() {
                continue;
            }
            if let Some(id) = self.read_label(&name)? {
                out.push((name, id));
            }
        }
        out.sort();
        Ok(out)
    }
}
