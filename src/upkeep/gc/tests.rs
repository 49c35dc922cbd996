//! Unit tests of `gc`.

use super::*;

fn id(n: u8) -> ObjectId {
    ObjectId([n; 32])
}

const H: i64 = 3600 * 1_000_000_000;

#[test]
fn reasons_serialise_to_the_strings_of_the_json_output() {
    let reasons = [
        KeepReason::BranchHead,
        KeepReason::Label,
        KeepReason::Pinned,
        KeepReason::WorkspaceBase,
        KeepReason::Policy,
        KeepReason::Last,
        KeepReason::Within,
        KeepReason::Hourly,
        KeepReason::Daily,
        KeepReason::Weekly,
        KeepReason::Monthly,
        KeepReason::Yearly,
        KeepReason::Branch,
        KeepReason::NoPolicy,
        KeepReason::PinKeepsAll,
    ];
    let kept: BTreeMap<KeepReason, usize> = reasons.iter().map(|r| (*r, 1)).collect();
    let json = serde_json::to_value(&kept).unwrap();
    let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
    let mut names: Vec<&str> = reasons.iter().map(|r| r.as_str()).collect();
    names.sort_unstable();
    // JSON names are the text's with `_` for spaces (keys never hold spaces).
    let ids: Vec<String> = names.iter().map(|n| n.replace(' ', "_")).collect();
    assert_eq!(
        keys,
        ids.iter().collect::<Vec<_>>(),
        "JSON keys, in name order"
    );
    let listed: Vec<&str> = kept.keys().map(|r| r.as_str()).collect();
    assert_eq!(
        listed, names,
        "the text output lists reasons in name order too"
    );
    for g in [
        Garbage::ClearedCache,
        Garbage::StaleStatCache,
        Garbage::LeftoverTemp,
        Garbage::DeadPin,
        Garbage::DeadSocket,
        Garbage::DeadPidFile,
        Garbage::OrphanUpper,
        Garbage::UnusedSnapshot,
        Garbage::Displaced,
    ] {
        assert_eq!(serde_json::to_value(g).unwrap(), g.as_str());
    }
    for p in [
        PolicySource::CommandLine,
        PolicySource::StoreConfig,
        PolicySource::None,
    ] {
        assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
    }
}

/// Nanoseconds of a UTC time, `YYYY-MM-DDTHH:MM:SS`.
fn at(s: &str) -> i64 {
    let t = humantime::parse_rfc3339(&format!("{s}Z")).unwrap();
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap();
    i64::try_from(d.as_nanos()).unwrap()
}

fn policy(f: impl FnOnce(&mut RetentionPolicy)) -> RetentionPolicy {
    let mut p = RetentionPolicy::default();
    f(&mut p);
    p
}

#[test]
fn policies_table() {
    // Checkpoints every 6 hours over 4 weeks, newest = id 111.
    let now = 1_795_946_400_000_000_000; // 2026-11-29T10:00:00 (a Sunday)
    let items: Vec<(ObjectId, i64)> = (0u8..112)
        .map(|i| (id(i), now - (111 - i64::from(i)) * 6 * H))
        .collect();
    let cases: Vec<(RetentionPolicy, usize)> = vec![
        (policy(|p| p.keep_last = Some(3)), 3),
        (policy(|p| p.keep_last = Some(0)), 0),
        (policy(|p| p.keep_last = Some(500)), 112),
        // Strictly less than a day older than the newest: 4 (restic's `After`).
        (policy(|p| p.keep_within = Some("1d".into())), 4),
        (policy(|p| p.keep_within = Some("25h".into())), 5),
        (policy(|p| p.keep_hourly = Some(3)), 3),
        (policy(|p| p.keep_daily = Some(7)), 7),
        (policy(|p| p.keep_weekly = Some(2)), 2),
        (policy(|p| p.keep_monthly = Some(5)), 1), // all in November 2026
        (policy(|p| p.keep_yearly = Some(5)), 1),
        (
            policy(|p| {
                p.keep_last = Some(4);
                p.keep_daily = Some(2);
            }),
            4,
        ),
        (
            policy(|p| {
                p.keep_last = Some(1);
                p.keep_daily = Some(3);
            }),
            3,
        ),
        (policy(|p| p.keep_weekly = Some(10)), 5),
    ];
    for (pol, want) in cases {
        let kept = select_by_policy(&items, &pol).unwrap();
        assert_eq!(kept.len(), want, "{pol:?}");
        if want > 0 {
            assert!(kept.contains_key(&id(111)), "newest kept by {pol:?}");
        }
    }
    // keep-daily keeps the newest of each day.
    let kept = select_by_policy(&items, &policy(|p| p.keep_daily = Some(2))).unwrap();
    let days: BTreeSet<i64> = items
        .iter()
        .filter(|(i, _)| kept.contains_key(i))
        .map(|(_, t)| t.div_euclid(NS_PER_DAY))
        .collect();
    assert_eq!(days.len(), 2);
    // Every rule that keeps a checkpoint is named, in rule order.
    let both = policy(|p| {
        p.keep_last = Some(1);
        p.keep_daily = Some(1);
        p.keep_yearly = Some(1);
    });
    let kept = select_by_policy(&items, &both).unwrap();
    assert_eq!(
        kept[&id(111)],
        vec![KeepReason::Last, KeepReason::Daily, KeepReason::Yearly]
    );
}

#[test]
fn bucket_boundaries_are_utc_iso_weeks_and_calendar_months() {
    // (times, policy, indices kept): each pair straddles one boundary.
    let t = [
        at("2025-12-28T23:59:59"), // 0: Sunday, ISO week 52 of 2025
        at("2025-12-29T00:00:00"), // 1: Monday, ISO week 1 of 2026, still year 2025
        at("2025-12-31T23:59:59"), // 2: last second of 2025, same ISO week as 1
        at("2026-01-01T00:00:00"), // 3: 2026, same ISO week
        at("2026-01-31T23:00:00"), // 4: January
        at("2026-02-01T00:30:00"), // 5: February, hour 00
        at("2026-02-01T00:59:59"), // 6: February, hour 00
        at("2026-02-01T01:00:00"), // 7: hour 01
    ];
    let items: Vec<(ObjectId, i64)> = t
        .iter()
        .enumerate()
        .map(|(i, t)| (id(i as u8), *t))
        .collect();
    let cases: Vec<(RetentionPolicy, Vec<u8>)> = vec![
        (policy(|p| p.keep_hourly = Some(3)), vec![4, 6, 7]),
        (policy(|p| p.keep_daily = Some(4)), vec![2, 3, 4, 7]),
        (policy(|p| p.keep_weekly = Some(5)), vec![0, 3, 7]),
        (policy(|p| p.keep_monthly = Some(3)), vec![2, 4, 7]),
        (policy(|p| p.keep_yearly = Some(3)), vec![2, 7]),
        (policy(|p| p.keep_yearly = Some(1)), vec![7]),
    ];
    for (pol, want) in cases {
        let kept = select_by_policy(&items, &pol).unwrap();
        let want: BTreeSet<ObjectId> = want.into_iter().map(id).collect();
        let got: BTreeSet<ObjectId> = kept.keys().copied().collect();
        assert_eq!(got, want, "{pol:?}");
    }
}
