//! The audit log: `audit.jsonl`, one JSON object per operation, appended and synced by
//! [`Store::mutate`](crate::store::Store::mutate). Lines record the operation, its arguments
//! (names, ids, paths) and its result counts; never file contents.

use std::fs;

use crate::error::{Error, Result};
use crate::store::Store;

impl Store {
    /// Reads every audit line (for status/doctor and tests).
    pub fn read_audit(&self) -> Result<Vec<serde_json::Value>> {
        let p = self.audit_path();
        let text = fs::read_to_string(&p).map_err(|e| Error::io(&p, e))?;
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }
}
