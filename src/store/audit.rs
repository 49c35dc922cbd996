//! The audit log: `audit.jsonl`, one JSON object per operation, appended and synced by
//! [`Store::mutate`](crate::store::Store::mutate). Lines record the operation, its arguments
//! (names, ids, paths) and its result counts; never file contents.

use std::fs;
use std::io::{Read, Seek, SeekFrom};

use crate::error::{Error, Result};
use crate::store::Store;

/// Bytes `find_audit_back` reads at a time.
const BACK_BLOCK: usize = 64 << 10;

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

    /// Reads the audit log from its end, newest line first, until `f` returns `Some` (what
    /// it found) or the log ends (`None`): a question about recent operations costs what
    /// they wrote, not the whole log. Lines that do not parse are skipped, as `read_audit`
    /// does.
    ///
    /// # Errors
    /// I/O opening or reading `audit.jsonl`.
    pub fn find_audit_back<R>(
        &self,
        mut f: impl FnMut(&serde_json::Value) -> Option<R>,
    ) -> Result<Option<R>> {
        let p = self.audit_path();
        let io = |e| Error::io(&p, e);
        let mut file = fs::File::open(&p).map_err(io)?;
        let mut end = file.seek(SeekFrom::End(0)).map_err(io)?;
        // The bytes after the last newline seen so far (a line split by a block boundary).
        let mut tail: Vec<u8> = Vec::new();
        while end > 0 {
            let start = end.saturating_sub(BACK_BLOCK as u64);
            let mut block = vec![0u8; (end - start) as usize];
            file.seek(SeekFrom::Start(start)).map_err(io)?;
            file.read_exact(&mut block).map_err(io)?;
            block.extend_from_slice(&tail);
            // Every line but the first is whole; the first may continue in the block before.
            let first_nl = if start == 0 {
                None
            } else {
                block.iter().position(|&b| b == b'\n')
            };
            let (head, whole) = match first_nl {
                Some(i) => block.split_at(i + 1),
                None if start == 0 => (&[][..], &block[..]),
                None => (&block[..], &[][..]),
            };
            for line in whole.split(|&b| b == b'\n').rev() {
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) {
                    if let Some(r) = f(&v) {
                        return Ok(Some(r));
                    }
                }
            }
            tail = head.to_vec();
            end = start;
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn find_audit_back_sees_every_line_newest_first_across_blocks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = crate::store::temp_store(dir.path());
        // Lines of varied lengths, so block boundaries fall inside lines.
        let mut want = Vec::new();
        for i in 0..3000u32 {
            let pad = "x".repeat((i as usize * 37) % 200);
            let v = serde_json::json!({"n": i, "pad": pad});
            store.append_audit(&v).expect("append");
            want.push(i);
        }
        let mut seen = Vec::new();
        let none: Option<()> = store
            .find_audit_back(|v| {
                if let Some(n) = v["n"].as_u64() {
                    seen.push(n as u32);
                }
                None
            })
            .expect("scan");
        assert!(none.is_none());
        want.reverse();
        // The store's own lines (init writes none with "n") are skipped by the filter.
        assert_eq!(seen, want);
        let found = store
            .find_audit_back(|v| (v["n"] == 2500).then(|| v["pad"].as_str().map(str::len)))
            .expect("scan");
        assert_eq!(found, Some(Some((2500 * 37) % 200)));
    }
}
