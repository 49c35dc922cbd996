//! Small helpers shared by the store and the CLI: time formatting and name validation.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(_) => 0,
    }
}

/// `YYYY-MM-DDTHH:MM:SS` in UTC for a Unix time in nanoseconds.
pub fn format_utc(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Permission bits as JSON shows them everywhere: four octal digits, e.g. "0644", "4755".
pub fn mode_octal(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

/// [`format_utc`] with the `Z` that marks it as UTC: `YYYY-MM-DDTHH:MM:SSZ` (RFC 3339), for
/// output a reader might take for local time.
pub fn format_rfc3339(ns: i64) -> String {
    format!("{}Z", format_utc(ns))
}

/// How [`format_local`] writes a time: date, time and the zone's UTC offset.
const LOCAL_FORMAT: &str = "%Y-%m-%d %H:%M:%S %:z";

/// A Unix time in nanoseconds as local time for people, `2026-12-01 12:03:04 +01:00`: in the
/// zone `TZ` names (an IANA name such as `Europe/Paris`, or a POSIX rule such as
/// `EST5EDT`), else the system's (`/etc/localtime`), else UTC. 26 characters wide (years
/// 0-9999, offsets in whole minutes), so it lines up in tables. Machine output uses
/// [`format_rfc3339`].
pub fn format_local(ns: i64) -> String {
    let tz = jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC);
    match jiff::Timestamp::from_nanosecond(i128::from(ns)) {
        Ok(t) => t.to_zoned_datetime(tz).strftime(LOCAL_FORMAT).to_string(),
        Err(_) => format_rfc3339(ns),
    }
}

/// [`format_local`] of a time written in UTC as [`format_utc`] or [`format_rfc3339`] write it
/// (reports keep their times so); a string that is neither comes back unchanged.
pub fn local_of_utc(s: &str) -> String {
    let t = s.strip_suffix('Z').unwrap_or(s);
    match t.parse::<jiff::civil::DateTime>() {
        Ok(dt) => match jiff::tz::TimeZone::UTC.to_timestamp(dt) {
            Ok(t) => format_local(i64::try_from(t.as_nanosecond()).unwrap_or(i64::MAX)),
            Err(_) => s.to_string(),
        },
        Err(_) => s.to_string(),
    }
}

/// The UTC calendar year and month (1-12) of a Unix time in nanoseconds.
pub fn utc_year_month(ns: i64) -> (i64, u32) {
    let (y, m, _) = civil_from_days(ns.div_euclid(1_000_000_000).div_euclid(86_400));
    (y, m)
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
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

/// The system directories ckptfs finds the programs it starts in (`bash`, `fusermount3`, a
/// declared runtime command's bare name), and the PATH it gives them: never the caller's PATH,
/// which may name a directory an agent writes.
pub const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The absolute path of the program `name` in [`SYSTEM_PATH`] (`/usr/bin/NAME` when none
/// holds it, so the error names that).
pub fn system_program(name: &str) -> std::path::PathBuf {
    SYSTEM_PATH
        .split(':')
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| std::path::Path::new("/usr/bin").join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00");
        assert_eq!(format_utc(1_795_946_400_000_000_000), "2026-11-29T10:00:00");
    }

    #[test]
    fn local_times_follow_the_zone() {
        // 2026-11-29T10:00:00Z
        let ns = 1_795_946_400_000_000_000;
        assert_eq!(
            local_of_utc("2026-11-29T10:00:00Z"),
            local_of_utc("2026-11-29T10:00:00")
        );
        assert_eq!(local_of_utc("not a time"), "not a time");
        assert_eq!(format_local(ns).len(), 26, "{}", format_local(ns));
        assert_eq!(local_of_utc("2026-11-29T10:00:00Z"), format_local(ns));
    }

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

    #[test]
    fn names() {
        assert!(check_name("branch", "main").is_ok());
        assert!(check_name("branch", "a/b").is_err());
        assert!(check_name("branch", "..").is_err());
        assert!(check_name("branch", "").is_err());
    }
}
