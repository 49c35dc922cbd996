//! Sizes, durations and modes as users type and read them (parse errors are usage errors).

use crate::error::{Error, Result};

/// Permission bits as JSON shows them everywhere: four octal digits, e.g. "0644", "4755".
pub fn mode_octal(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

/// How a retention duration is written, for errors and `gc --help`.
pub const DURATION_HELP: &str = "a number and a unit: s, min, h, d, w, mo (month = 30.44 days), \
     y (year = 365.25 days), combined as 1y6mo or 1h30min; a bare m is refused as ambiguous";

/// Parses a retention duration such as `90min`, `36h`, `7d`, `7days`, `1week`, `2mo`,
/// `2months`, `1y`, `1y6mo`, `1h30min` or `1.5h` into nanoseconds.
///
/// The arithmetic is `humantime`'s: a month is 30.44 days and a year 365.25 days (fixed
/// lengths, not calendar months). Units are the ones humantime takes (`min`/`minutes`,
/// `h`/`hours`, `d`/`days`, `w`/`weeks`, `M`/`months`, `y`/`years`, ...) plus `mo`/`mos` for
/// months. A bare `m` is refused: restic reads `2m` as two months, humantime and most other
/// tools as two minutes, and guessing wrong prunes months of history.
///
/// # Errors
/// `Usage` for an empty, zero, unitless, ambiguous (`m`), unknown-unit or overflowing value,
/// naming the value and the accepted forms.
pub fn parse_duration(s: &str) -> Result<i64> {
    let bad = |why: &str| Error::Usage(format!("bad duration {s:?}: {why}; use {DURATION_HELP}"));
    let t = s.trim();
    if t.is_empty() {
        return Err(bad("empty"));
    }
    // Rewrite units humantime lacks (`mo`) and refuse the ambiguous one (`m`); humantime
    // checks the rest.
    let mut canonical = String::with_capacity(t.len() + 8);
    let mut chars = t.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if !c.is_alphabetic() {
            canonical.push(c);
            continue;
        }
        let mut end = i + c.len_utf8();
        while let Some(&(j, d)) = chars.peek() {
            if !d.is_alphabetic() {
                break;
            }
            end = j + d.len_utf8();
            chars.next();
        }
        match &t[i..end] {
            "m" => {
                return Err(Error::Usage(format!(
                    "ambiguous duration {s:?}: `m` is minutes to some tools and months to restic; \
                     write `min` for minutes or `mo` for months"
                )))
            }
            "mo" | "mos" => canonical.push_str("months"),
            unit => canonical.push_str(unit),
        }
    }
    let d = humantime::parse_duration(&canonical).map_err(|e| bad(&e.to_string()))?;
    if d.is_zero() {
        return Err(bad("zero keeps nothing (leave the rule out instead)"));
    }
    i64::try_from(d.as_nanos()).map_err(|_| bad("too long"))
}

/// Parses a size: a whole number of bytes with an optional unit, `B`, `K`, `M`, `G` or `T`,
/// each also written `KB`/`KiB`, `MB`/`MiB`..., in any case, with or without a space
/// (`4096`, `16K`, `64 MiB`, `512MB`, `2g`, `0`).
///
/// Every unit is a power of 1024: `KB`, `KiB` and `K` all mean 1024 bytes. These sizes are
/// memory and disk budgets, and `64MB` has meant 64 MiB in ckptfs from the start. Zero is a
/// size; a caller that needs a positive one checks.
///
/// # Errors
/// `Usage` naming the value and the accepted forms, also when it does not fit in 64 bits.
pub fn parse_size(s: &str) -> Result<u64> {
    let bad = || {
        Error::Usage(format!(
            "bad size {s:?}: use a number of bytes with an optional unit B, K, M, G or T \
             (also KB/KiB, MB/MiB...: all powers of 1024), e.g. 64M or 512MB"
        ))
    };
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (digits, unit) = (t[..split].trim_end(), &t[split..]);
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

/// Human-readable byte count (KiB/MiB/GiB).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_table() {
        const S: i64 = 1_000_000_000;
        const MIN: i64 = 60 * S;
        const H: i64 = 60 * MIN;
        const D: i64 = 24 * H;
        const MO: i64 = 2_630_016 * S; // 30.44 days
        const Y: i64 = 31_557_600 * S; // 365.25 days
        let ok: &[(&str, i64)] = &[
            ("90s", 90 * S),
            ("90min", 90 * MIN),
            ("90 minutes", 90 * MIN),
            ("1h30min", 90 * MIN),
            ("2h 30min", 150 * MIN),
            ("1.5h", 90 * MIN),
            ("36h", 36 * H),
            ("1d12h", 36 * H),
            ("7d", 7 * D),
            ("7days", 7 * D),
            ("1w", 7 * D),
            ("1week", 7 * D),
            ("2w", 14 * D),
            ("2mo", 2 * MO),
            ("2months", 2 * MO),
            ("1month", MO),
            ("2M", 2 * MO),
            ("1y", Y),
            ("1year", Y),
            ("2years", 2 * Y),
            ("1y6mo", Y + 6 * MO),
            (" 7d ", 7 * D),
        ];
        for (s, want) in ok {
            assert_eq!(parse_duration(s).ok(), Some(*want), "{s:?}");
        }
        let bad: &[(&str, &str)] = &[
            ("2m", "ambiguous"),
            ("1h30m", "ambiguous"),
            ("2 m", "ambiguous"),
            ("", "empty"),
            ("   ", "empty"),
            ("0d", "zero"),
            ("0min", "zero"),
            ("7", "unit"),
            ("x", "bad duration"),
            ("7q", "unknown"),
            ("7 fortnights", "unknown"),
            ("-1d", "bad duration"),
            ("d", "bad duration"),
            ("1e3d", "bad duration"),
            ("999999999999y", "bad duration"),
            ("300y", "too long"),
        ];
        for (s, word) in bad {
            match parse_duration(s) {
                Err(Error::Usage(m)) => {
                    assert!(m.contains(word), "{s:?}: {m:?} should say {word:?}");
                    assert!(
                        m.contains(&format!("{s:?}")),
                        "{s:?}: {m:?} names the value"
                    );
                    assert!(!m.contains('\n'), "{s:?}: one line: {m:?}");
                }
                other => panic!("{s:?} should be refused, got {other:?}"),
            }
        }
        // The ambiguity error tells the user what to write instead.
        let Err(Error::Usage(m)) = parse_duration("2m") else {
            panic!()
        };
        assert!(m.contains("min") && m.contains("mo"), "{m}");
    }

    #[test]
    fn sizes_table() {
        const K: u64 = 1 << 10;
        let ok: &[(&str, u64)] = &[
            ("0", 0),
            ("100", 100),
            ("4096", 4096),
            ("1048576", 1 << 20),
            ("+5", 5),
            (" 7 ", 7),
            ("10B", 10),
            ("10b", 10),
            ("2K", 2 * K),
            ("2k", 2 * K),
            ("16K", 16 * K),
            ("1KB", K),
            ("1kb", K),
            ("1KiB", K),
            ("1kib", K),
            ("64M", 64 << 20),
            ("64m", 64 << 20),
            ("64MB", 64 << 20),
            ("64MiB", 64 << 20),
            ("64 M", 64 << 20),
            ("64 MiB", 64 << 20),
            ("128MiB", 128 << 20),
            ("512MB", 512 << 20),
            ("1G", 1 << 30),
            ("1GiB", 1 << 30),
            ("4gb", 4 << 30),
            ("2T", 2 << 40),
            ("2TiB", 2 << 40),
            ("3tb", 3 << 40),
            ("16777215T", 16_777_215 << 40),
        ];
        for (s, want) in ok {
            assert_eq!(parse_size(s).ok(), Some(*want), "{s:?}");
        }
        let bad = [
            "",
            " ",
            "lots",
            "K",
            "MB",
            "1Q",
            "1KQ",
            "1iB",
            "1 K B",
            "1.5G",
            "-1",
            "1e3",
            "16777216T",
            "18446744073709551616",
        ];
        for s in bad {
            assert!(
                matches!(parse_size(s), Err(Error::Usage(_))),
                "{s:?} should be refused"
            );
        }
    }
}
