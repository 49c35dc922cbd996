//! Times as users read them: now, UTC and local renderings of Unix nanoseconds.

use std::time::{SystemTime, UNIX_EPOCH};

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
}
