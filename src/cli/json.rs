//! JSON shapes shared by several commands, so each is one representation everywhere (see
//! docs/json.md): a checkpoint record as `show`, `capture` and `checkpoint` print it.

use serde_json::Value;

use ckptfs::store::checkpoint::Checkpoint;

/// A checkpoint record as JSON shows it: its fields, each root's `mode` as four octal digits
/// (`"0755"`, as `ls`, `find` and `diff` give modes) and `time_rfc3339` beside `time_ns`.
/// (The record on disk keeps its own encoding: its hash is its id.)
pub(crate) fn checkpoint(c: &Checkpoint) -> Value {
    let mut v = serde_json::to_value(c).unwrap_or_default();
    fix_checkpoint(&mut v);
    v
}

/// [`checkpoint`]'s changes, in place, on a serialized record.
pub(crate) fn fix_checkpoint(v: &mut Value) {
    if let Some(roots) = v.get_mut("roots").and_then(Value::as_object_mut) {
        for r in roots.values_mut() {
            if let Some(m) = r.get("mode").and_then(Value::as_u64) {
                r["mode"] = Value::from(ckptfs::units::mode_octal(m as u32));
            }
        }
    }
    if let Some(t) = v.get("time_ns").and_then(Value::as_i64) {
        v["time_rfc3339"] = Value::from(ckptfs::text::time::format_rfc3339(t));
    }
}

/// A UTC time as the audit log keeps it (`YYYY-MM-DDTHH:MM:SS`, `text::time::format_utc`) with the
/// `Z` every time in JSON output has (docs/json.md, "Conventions"); a time that has its `Z`
/// already, or a string that is no such time, comes back unchanged.
pub(crate) fn rfc3339_of_utc(s: &str) -> String {
    let bare = s.len() == 19
        && s.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            10 => b == b'T',
            13 | 16 => b == b':',
            _ => b.is_ascii_digit(),
        });
    if bare {
        format!("{s}Z")
    } else {
        s.to_string()
    }
}

pub(crate) use ckptfs::history::timeline::labels_of;

#[cfg(test)]
mod tests {
    #[test]
    fn audit_times_get_their_zone() {
        assert_eq!(
            super::rfc3339_of_utc("2026-12-01T11:56:34"),
            "2026-12-01T11:56:34Z"
        );
        assert_eq!(
            super::rfc3339_of_utc("2026-12-01T11:56:34Z"),
            "2026-12-01T11:56:34Z"
        );
        assert_eq!(super::rfc3339_of_utc(""), "");
        assert_eq!(
            super::rfc3339_of_utc("2026-12-01 11:56:34"),
            "2026-12-01 11:56:34"
        );
    }
}
