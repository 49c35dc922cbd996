//! Line-based three-way merge of text, with the semantics of `git merge-file` (the `diffy`
//! crate's merge: Myers diffs of base->ours and base->theirs, hunks that touch the same lines
//! conflict), markers as git writes them (`<<<<<<< ours`, `=======`, `>>>>>>> theirs`).

use diffy::{ConflictStyle, MergeOptions};

use super::Take;

/// Marker length git uses.
const GIT_MARKER_LEN: usize = 7;
/// Markers this long separate the sides when `--take` resolves hunks: a line of the inputs
/// starting with one is checked for (then the whole file is taken instead).
const TAKE_MARKER_LEN: usize = 32;

/// The merge of one text file.
#[derive(Debug, PartialEq, Eq)]
pub struct TextMerge {
    /// The merged bytes: clean, or with git's conflict markers, or (with `--take`) the taken
    /// side in each conflicting hunk.
    pub bytes: Vec<u8>,
    /// How many hunks conflict (before `--take`).
    pub conflicts: usize,
}

fn options(len: usize) -> MergeOptions {
    let mut o = MergeOptions::new();
    o.set_conflict_style(ConflictStyle::Merge)
        .set_conflict_marker_length(len);
    o
}

fn starts_marker(line: &[u8], c: u8, len: usize) -> bool {
    line.len() >= len && line[..len].iter().all(|b| *b == c)
}

fn has_marker_lines(data: &[u8]) -> bool {
    data.split(|b| *b == b'\n').any(|l| {
        [b'<', b'=', b'>']
            .iter()
            .any(|c| starts_marker(l, *c, TAKE_MARKER_LEN))
    })
}

/// Merges three versions of a text file.
pub fn merge_text(base: &[u8], ours: &[u8], theirs: &[u8], take: Option<Take>) -> TextMerge {
    let marked = match options(GIT_MARKER_LEN).merge_bytes(base, ours, theirs) {
        Ok(clean) => {
            return TextMerge {
                bytes: clean,
                conflicts: 0,
            }
        }
        Err(marked) => marked,
    };
    let Some(take) = take else {
        let conflicts = marked
            .split(|b| *b == b'\n')
            .filter(|l| l.starts_with(b"<<<<<<< ours"))
            .count();
        return TextMerge {
            bytes: marked,
            conflicts: conflicts.max(1),
        };
    };
    if [base, ours, theirs].iter().any(|d| has_marker_lines(d)) {
        let whole = if take == Take::Ours { ours } else { theirs };
        return TextMerge {
            bytes: whole.to_vec(),
            conflicts: 1,
        };
    }
    let long = options(TAKE_MARKER_LEN)
        .merge_bytes(base, ours, theirs)
        .unwrap_or_else(|m| m);
    resolve(&long, take)
}

/// Keeps one side of every conflict marked with [`TAKE_MARKER_LEN`]-long markers.
fn resolve(marked: &[u8], take: Take) -> TextMerge {
    #[derive(PartialEq)]
    enum In {
        Clean,
        Ours,
        Theirs,
    }
    let mut state = In::Clean;
    let mut out = Vec::with_capacity(marked.len());
    let mut conflicts = 0;
    for line in marked.split_inclusive(|b| *b == b'\n') {
        let marker = |c| starts_marker(line, c, TAKE_MARKER_LEN);
        match state {
            In::Clean if marker(b'<') => {
                conflicts += 1;
                state = In::Ours;
                continue;
            }
            In::Ours if marker(b'=') => {
                state = In::Theirs;
                continue;
            }
            In::Theirs if marker(b'>') => {
                state = In::Clean;
                continue;
            }
            _ => {}
        }
        let keep = match state {
            In::Clean => true,
            In::Ours => take == Take::Ours,
            In::Theirs => take == Take::Theirs,
        };
        if keep {
            out.extend_from_slice(line);
        }
    }
    TextMerge {
        bytes: out,
        conflicts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_to_different_lines_merge_cleanly() {
        let m = merge_text(b"a\nb\nc\n", b"A\nb\nc\n", b"a\nb\nC\n", None);
        assert_eq!(m.bytes, b"A\nb\nC\n");
        assert_eq!(m.conflicts, 0);
    }

    #[test]
    fn the_same_line_changed_both_ways_is_marked_as_git_marks_it() {
        let m = merge_text(b"a\nb\n", b"x\nb\n", b"y\nb\n", None);
        assert_eq!(m.conflicts, 1);
        assert_eq!(
            String::from_utf8_lossy(&m.bytes),
            "<<<<<<< ours\nx\n=======\ny\n>>>>>>> theirs\nb\n"
        );
    }

    #[test]
    fn take_keeps_one_side_of_each_conflicting_hunk_and_both_clean_changes() {
        let base = b"a\nb\nc\nd\n";
        let ours = b"x\nb\nc\nD\n";
        let theirs = b"y\nB\nc\nd\n";
        let o = merge_text(base, ours, theirs, Some(Take::Ours));
        let t = merge_text(base, ours, theirs, Some(Take::Theirs));
        assert_eq!(o.conflicts, 1);
        assert_eq!(String::from_utf8_lossy(&o.bytes), "x\nb\nc\nD\n");
        assert_eq!(String::from_utf8_lossy(&t.bytes), "y\nB\nc\nD\n");
    }

    #[test]
    fn inputs_with_long_marker_lines_are_taken_whole() {
        let m = "<".repeat(40) + "\n";
        let ours = format!("{m}o\n");
        let r = merge_text(b"b\n", ours.as_bytes(), b"t\n", Some(Take::Ours));
        assert_eq!(r.bytes, ours.as_bytes());
    }
}
