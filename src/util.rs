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

/// Parses a duration such as `90s`, `30m`, `36h`, `7d`, `2w` or `1d12h` into nanoseconds.
///
/// # Errors
/// `Usage` describing the accepted forms.
pub fn parse_duration(s: &str) -> Result<i64> {
    let bad = || {
        Error::Usage(format!(
            "bad duration {s:?}: use a number with a unit s, m, h, d or w (e.g. 36h, 7d, 1d12h)"
        ))
    };
    if s.is_empty() {
        return Err(bad());
    }
    let mut total: i64 = 0;
    let mut num = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let unit: i64 = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 7 * 86_400,
            _ => return Err(bad()),
        };
        let n: i64 = num.parse().map_err(|_| bad())?;
        num.clear();
        total = n
            .checked_mul(unit)
            .and_then(|v| v.checked_mul(1_000_000_000))
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
    }
    if !num.is_empty() {
        return Err(bad());
    }
    Ok(total)
}

/// Parses a size such as `4096`, `100K`, `64M`, `2G` (binary units) into bytes.
///
/// # Errors
/// `Usage` when it is not a positive size.
pub fn parse_size(s: &str) -> Result<u64> {
    let bad = || {
        Error::Usage(format!(
            "bad size {s:?}: use bytes or a K, M, G suffix (e.g. 512M)"
        ))
    };
    let t = s.trim();
    let (digits, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(bad()),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let v = n.checked_mul(mult).ok_or_else(bad)?;
    if v == 0 {
        return Err(bad());
    }
    Ok(v)
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
    fn formats_utc() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00");
        assert_eq!(format_utc(1_795_946_400_000_000_000), "2026-11-29T10:00:00");
    }

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("90s").unwrap(), 90_000_000_000);
        assert_eq!(parse_duration("1d12h").unwrap(), 36 * 3600 * 1_000_000_000);
        assert!(parse_duration("7").is_err());
        assert!(parse_duration("x").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(parse_size("2K").unwrap(), 2048);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert!(parse_size("0").is_err());
        assert!(parse_size("1Q").is_err());
    }

    #[test]
    fn names() {
        assert!(check_name("branch", "main").is_ok());
        assert!(check_name("branch", "a/b").is_err());
        assert!(check_name("branch", "..").is_err());
        assert!(check_name("branch", "").is_err());
    }
}
