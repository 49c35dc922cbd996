//! `log -n N` and `log --since WHEN` (a duration back from now or an RFC 3339 time), and the
//! times `log` prints: local time with its offset in text, `time_rfc3339` beside the
//! zoneless `time` in JSON.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::support::*;
use serde_json::Value;

const SEC: i64 = 1_000_000_000;
/// 2026-12-01T08:00:00Z.
const DEC_1_8AM: i64 = 1_796_112_000 * SEC;

fn now_ns() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    )
    .unwrap()
}

fn log_ids(env: &Env, extra: &[&str]) -> Vec<String> {
    let store = env.s();
    let mut args = vec!["log", &store];
    args.extend_from_slice(extra);
    let v: Value = ok_json(&args);
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn since_a_duration_and_max_count() {
    let now = now_ns();
    let (env, ids) = store_at_times(&[
        now - 3 * 3600 * SEC, // 0: 3h ago
        now - 3600 * SEC,     // 1: 1h ago
        now - 10 * 60 * SEC,  // 2: 10 minutes ago
        DEC_1_8AM - 400 * 86_400 * SEC,
    ]);
    let (h3, h1, m10, old) = (&*ids[0], &*ids[1], &*ids[2], &*ids[3]);
    assert_eq!(log_ids(&env, &[]), vec![m10, h1, h3, old]);
    assert_eq!(log_ids(&env, &["-n", "2"]), vec![m10, h1]);
    assert_eq!(log_ids(&env, &["--max-count", "1"]), vec![m10]);
    assert!(log_ids(&env, &["-n", "0"]).is_empty());
    for (since, want) in [
        ("2h", vec![m10, h1]),
        ("90min", vec![m10, h1]),
        ("30m", vec![m10]), // m is minutes
        ("2h 30m", vec![m10, h1]),
        ("4h", vec![m10, h1, h3]),
        ("1week", vec![m10, h1, h3]),
        ("7days", vec![m10, h1, h3]),
        ("5min", vec![]),
    ] {
        assert_eq!(log_ids(&env, &["--since", since]), want, "--since {since}");
    }
    assert_eq!(log_ids(&env, &["--since", "4h", "-n", "1"]), vec![m10]);
    // The text listing and the graph take the same selection.
    let text = ok(["log", &env.s(), "--since", "2h"]);
    assert_eq!(text.lines().count(), 2, "{text}");
    let graph = ok(["log", &env.s(), "--graph", "-n", "3"]);
    assert_eq!(
        graph.lines().filter(|l| l.contains('*')).count(),
        3,
        "{graph}"
    );
}

#[test]
fn since_an_rfc3339_time_is_inclusive() {
    let (env, ids) = store_at_times(&[
        DEC_1_8AM - SEC,        // 0: 07:59:59Z
        DEC_1_8AM,              // 1: 08:00:00Z exactly
        DEC_1_8AM + 3600 * SEC, // 2: 09:00:00Z
    ]);
    for (since, want) in [
        ("2026-12-01T08:00:00Z", vec![&*ids[2], &*ids[1]]),
        ("2026-12-01 08:00:00", vec![&*ids[2], &*ids[1]]),
        ("2026-12-01T09:00:00+01:00", vec![&*ids[2], &*ids[1]]),
        ("2026-12-01T03:00:00-05:00", vec![&*ids[2], &*ids[1]]),
        ("2026-12-01T08:00:01Z", vec![&*ids[2]]),
        ("2026-12-01", vec![&*ids[2], &*ids[1], &*ids[0]]),
        ("2026-12-02", vec![]),
    ] {
        assert_eq!(log_ids(&env, &["--since", since]), want, "--since {since}");
    }
    for bad in [
        "yesterday",
        "2026-13-01",
        "2026-12-01T08:00:00+1",
        "-2h",
        "",
    ] {
        let err = fails(2, ["log", &env.s(), &format!("--since={bad}")]);
        assert!(err.contains("--since"), "{bad}: {err}");
    }
}

#[test]
fn log_times_say_their_zone() {
    let (env, ids) = store_at_times(&[DEC_1_8AM + 12 * 60 * SEC + 3 * SEC]);
    // Text is local time with its offset (tests/cli_conventions.rs tries other zones).
    let utc = [("TZ", "UTC")];
    let text = stdout(&run_env(["log", &env.s()], &utc));
    assert!(text.contains("2026-12-01 08:12:03 +00:00"), "{text}");
    let graph = stdout(&run_env(["log", &env.s(), "--graph"], &utc));
    assert!(graph.contains("2026-12-01 08:12:03 +00:00"), "{graph}");
    let show = stdout(&run_env(["show", &env.s(), &ids[0]], &utc));
    assert!(show.contains("2026-12-01 08:12:03 +00:00"), "{show}");
    // JSON: every time is RFC 3339 in UTC (`time` had no zone before).
    let row = &ok_json(["log", &env.s()])[0];
    assert_eq!(row["time"], "2026-12-01T08:12:03Z");
    assert_eq!(row["time_rfc3339"], "2026-12-01T08:12:03Z");
    assert_eq!(row["time_ns"], DEC_1_8AM + 12 * 60 * SEC + 3 * SEC);
}

#[test]
fn max_count_follows_a_branch() {
    let env = Env::new();
    small_tree(env.ws());
    let a = env.capture_id(&["-m", "a"]);
    std::fs::write(env.ws().join("a.txt"), "b\n").unwrap();
    let b = env.capture_id(&["-m", "b"]);
    std::fs::write(env.ws().join("a.txt"), "c\n").unwrap();
    let c = env.capture_id(&["-m", "c"]);
    assert_eq!(
        log_ids(&env, &["--branch", "main", "-n", "2"]),
        vec![&*c, &*b]
    );
    assert_eq!(
        log_ids(&env, &["--branch", "main", "--since", "1h"]),
        vec![&*c, &*b, &*a]
    );
    let help = ok(["log", "--help"]);
    assert!(
        help.contains("--max-count") && help.contains("--since") && help.contains("m is minutes"),
        "{help}"
    );
}
