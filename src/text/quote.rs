//! Names from agent trees, made safe to print on a terminal (human output only; `--json`
//! carries names unchanged).
//!
//! A name an agent wrote can hold escape sequences (retitle or recolour the operator's
//! terminal), newlines (forge output lines) or bytes that are not UTF-8. As git does with
//! `core.quotePath` (and GNU `ls --quoting-style=c`), such a name is shown in double quotes
//! with C escapes: `\n`, `\t`, `\r`, `\a`, `\b`, `\f`, `\v`, `\"`, `\\`, and three octal
//! digits per byte for every other control character (`\033` for ESC), for C1 controls and
//! the bidirectional overrides (as their UTF-8 bytes), and for each byte of invalid UTF-8.
//! A name without any of those is shown as it is (spaces and printable Unicode included).
//!
//! No crate was taken: `shell-escape` keeps newlines and ESC raw inside single quotes (it
//! protects a shell, not a terminal), and std's `escape_debug` also escapes quotes and
//! apostrophes in every message and writes `\u{1b}`, which no shell or git reader knows.

use std::borrow::Cow;
use std::fmt::Write;
use std::path::Path;

/// Whether `c` is shown escaped: C0 and C1 controls, DEL, the line and paragraph separators
/// and the bidirectional embeddings, overrides and isolates (they reorder what follows).
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

/// Appends the escape of `c` (unsafe, or `"`/`\` when `quoted`).
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        '\u{7}' => out.push_str("\\a"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\u{b}' => out.push_str("\\v"),
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        _ => {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                push_octal(out, b);
            }
        }
    }
}

fn push_octal(out: &mut String, b: u8) {
    // Writing to a String cannot fail.
    let _infallible = write!(out, "\\{b:03o}");
}

/// `bytes` as a terminal may show it: unchanged when it holds only printable UTF-8 and
/// neither `"` nor `\`, else in double quotes with C escapes (see the module doc).
pub fn name(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(bytes) {
        if !s.chars().any(|c| is_unsafe(c) || c == '"' || c == '\\') {
            return Cow::Borrowed(s);
        }
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if is_unsafe(c) || c == '"' || c == '\\' {
                push_escaped(&mut out, c);
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            push_octal(&mut out, *b);
        }
    }
    out.push('"');
    Cow::Owned(out)
}

/// A path, quoted as [`name`] quotes its bytes.
pub fn path(p: &Path) -> Cow<'_, str> {
    name(p.as_os_str().as_encoded_bytes())
}

/// A line of text (a message, a value) with its unsafe characters escaped in place (no
/// surrounding quotes; `"` and `\` stay as they are): a whole error message whose parts may
/// come from a tree prints as one line.
pub fn text(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_unchanged() {
        for n in ["a.txt", "dir/with space/ü ñ 日本", "-x", "'single'"] {
            assert_eq!(name(n.as_bytes()), n);
        }
    }

    #[test]
    fn controls_quotes_and_bad_utf8_are_escaped() {
        let cases: &[(&[u8], &str)] = &[
            (b"\x1b]0;pwned\x07", r#""\033]0;pwned\a""#),
            (b"\x1b[31mred", r#""\033[31mred""#),
            (b"a\nb\tc\r", r#""a\nb\tc\r""#),
            (b"q\"b\\", r#""q\"b\\""#),
            (b"bad\xff\xfe", r#""bad\377\376""#),
            (b"\x7f", r#""\177""#),
            ("c1\u{9b}".as_bytes(), r#""c1\302\233""#),
            ("rtl\u{202e}".as_bytes(), r#""rtl\342\200\256""#),
        ];
        for (raw, shown) in cases {
            assert_eq!(name(raw), *shown, "{raw:?}");
            assert!(!name(raw).bytes().any(|b| b < 0x20 || b == 0x7f));
        }
    }

    #[test]
    fn text_escapes_in_place() {
        assert_eq!(text("can't \"x\""), "can't \"x\"");
        assert_eq!(text("a\x1b[2Jb\nc"), r"a\033[2Jb\nc");
    }
}
