//! gc retention as restic's `forget` rules: hourly/daily/weekly/monthly/yearly buckets at
//! UTC, ISO-week, month and year boundaries, `--keep-within` relative to the newest
//! checkpoint, `--keep-branch`, the refused `m`, and the dry run's table of reasons equal to
//! the real run's plan.
//!
//! Checkpoints at chosen times are records written straight into the store (copied from a
//! real capture, with `time_ns`, `branch`, `message` and `label` set), on a branch `agent`
//! that has no ref: no head is kept, so only the policy and labels decide.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::support::*;
use serde_json::Value;

/// The crafted checkpoints of `agent`, oldest first (index = position). 10 is labelled.
const TIMES: [&str; 11] = [
    "2024-06-15T12:00:00Z", // 0: 2024
    "2025-11-30T23:59:59Z", // 1: November 2025, Sunday of ISO week 48
    "2025-12-01T00:00:00Z", // 2: December, Monday of ISO week 49
    "2025-12-28T23:59:59Z", // 3: Sunday of ISO week 52
    "2025-12-29T00:00:00Z", // 4: Monday of ISO week 1 of 2026, still 2025
    "2025-12-31T23:59:59Z", // 5: last second of 2025, ISO week 1 of 2026
    "2026-01-01T00:00:00Z", // 6: 2026, hour 00
    "2026-01-01T10:15:00Z", // 7: hour 10
    "2026-01-01T10:45:00Z", // 8: hour 10
    "2026-01-01T11:00:00Z", // 9: the newest
    "2025-06-01T00:00:00Z", // 10: labelled `milestone`
];
const LABELLED: usize = 10;

fn ns(rfc3339: &str) -> i64 {
    let t = humantime::parse_rfc3339(rfc3339).unwrap();
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap();
    i64::try_from(d.as_nanos()).unwrap()
}

/// Writes a record like `template` with the given branch, time, message and label.
fn craft(
    store: &Path,
    template: &str,
    branch: &str,
    time: &str,
    msg: &str,
    label: Option<&str>,
) -> String {
    let mut v = record(store, template);
    v["branch"] = Value::from(branch);
    v["time_ns"] = Value::from(ns(time));
    v["message"] = Value::from(msg);
    v["label"] = label.map_or(Value::Null, Value::from);
    v["parents"] = Value::Array(Vec::new());
    let bytes = serde_json::to_vec(&v).unwrap();
    let id = ckptfs::ObjectId::of(&bytes).to_hex();
    fs::write(store.join("checkpoints").join(&id), &bytes).unwrap();
    id
}

struct Fixture {
    _dir: tempfile::TempDir,
    base: PathBuf,
    /// The real capture: head of `main`, always kept.
    head: String,
    /// `agent`'s crafted checkpoints, by index of [`TIMES`].
    agent: Vec<String>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempdir();
        let base = dir.path().to_path_buf();
        let room = base.join("room");
        make_room(&room, 4, 7);
        let store = base.join("store");
        init(&store, &room);
        let head = capture(&store, &["-m", "real"]);
        let agent = TIMES
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let label = (i == LABELLED).then_some("milestone");
                craft(&store, &head, "agent", t, &format!("turn {i}"), label)
            })
            .collect();
        Fixture {
            _dir: dir,
            base,
            head,
            agent,
        }
    }

    fn store(&self) -> PathBuf {
        self.base.join("store")
    }

    /// A fresh copy of the store for one case.
    fn copy(&self, name: &str) -> PathBuf {
        let work = self.base.join(name);
        fs::create_dir(&work).unwrap();
        let store = work.join("store");
        copy_dir(&self.store(), &store);
        store
    }

    /// The ids of `agent`'s checkpoints at these indices (the labelled one always added), plus
    /// the head of main, sorted.
    fn expect(&self, agent: &[usize]) -> Vec<String> {
        let mut v: Vec<String> = agent.iter().map(|&i| self.agent[i].clone()).collect();
        v.push(self.agent[LABELLED].clone());
        v.push(self.head.clone());
        v.sort();
        v.dedup();
        v
    }

    fn index(&self, id: &str) -> Option<usize> {
        self.agent.iter().position(|a| a == id)
    }
}

fn gc_args<'a>(store: &'a Path, flags: &[&'a str], dry: bool) -> Vec<&'a str> {
    let mut v = vec!["gc", s(store), "--json"];
    if dry {
        v.push("--dry-run");
    }
    v.extend_from_slice(flags);
    v
}

#[test]
fn each_rule_keeps_what_restic_keeps() {
    let f = Fixture::new();
    // (flags, indices of agent's checkpoints kept besides the labelled one), derived by hand
    // from restic's rules: newest first, one per period, the last N periods that have one.
    let cases: Vec<(Vec<&str>, Vec<usize>)> = vec![
        (vec!["--keep-last", "2"], vec![9, 8]),
        // Hours: 11, 10 (8 is the newest of it), 00 of Jan 1, then 23 of Dec 31.
        (vec!["--keep-hourly", "3"], vec![9, 8, 6]),
        (vec!["--keep-hourly", "4"], vec![9, 8, 6, 5]),
        // Days: Jan 1, Dec 31, Dec 29 (UTC: 23:59:59 and 00:00:00 are different days).
        (vec!["--keep-daily", "3"], vec![9, 5, 4]),
        // ISO weeks: Dec 29-Jan 4 (9 newest), Dec 22-28 (3), Dec 1-7 (2), Nov 24-30 (1).
        (vec!["--keep-weekly", "3"], vec![9, 3, 2]),
        (vec!["--keep-weekly", "4"], vec![9, 3, 2, 1]),
        // Months: Jan 2026, Dec 2025 (5, the newest of it), Nov 2025 (1).
        (vec!["--keep-monthly", "3"], vec![9, 5, 1]),
        // Years: 2026, 2025 (5), and the labelled June 2025 does not make 2024 wait: 2024 (0).
        (vec!["--keep-yearly", "3"], vec![9, 5, 0]),
        (vec!["--keep-yearly", "1"], vec![9]),
        // Within: strictly less than the duration older than the newest (11:00 Jan 1).
        (vec!["--keep-within", "2h"], vec![9, 8, 7]),
        (vec!["--keep-within", "1h30min"], vec![9, 8, 7]),
        (vec!["--keep-within", "30min"], vec![9, 8]),
        (vec!["--keep-within", "1d"], vec![9, 8, 7, 6, 5]),
        (vec!["--keep-within", "1week"], vec![9, 8, 7, 6, 5, 4, 3]),
        // 2 months = 60.88 days: back to Nov 1, not to June 2024.
        (
            vec!["--keep-within", "2mo"],
            vec![9, 8, 7, 6, 5, 4, 3, 2, 1],
        ),
        (vec!["--keep-within", "1y"], vec![9, 8, 7, 6, 5, 4, 3, 2, 1]),
        (vec!["--keep-daily", "1", "--keep-monthly", "2"], vec![9, 5]),
        (
            vec![
                "--keep-last",
                "1",
                "--keep-weekly",
                "2",
                "--keep-yearly",
                "3",
            ],
            vec![9, 3, 5, 0],
        ),
        (vec!["--keep-branch", "agent"], (0..TIMES.len()).collect()),
        (vec!["--keep-branch", "main"], vec![]),
    ];
    for (i, (flags, want)) in cases.iter().enumerate() {
        let store = f.copy(&format!("case{i}"));
        let planned = ok_json(gc_args(&store, flags, true));
        assert_eq!(
            checkpoints(&store).len(),
            TIMES.len() + 1,
            "{flags:?}: dry run deleted"
        );
        let applied = ok_json(gc_args(&store, flags, false));
        assert_eq!(planned, applied, "{flags:?}: the dry run is the plan");
        let left = checkpoints(&store);
        let want = f.expect(want);
        let name = |ids: &[String]| -> Vec<String> {
            ids.iter()
                .map(|id| f.index(id).map_or("head".into(), |i| i.to_string()))
                .collect()
        };
        assert_eq!(name(&left), name(&want), "{flags:?}: kept (agent indices)");
        // Every kept checkpoint's reasons are listed, every pruned one is marked.
        for d in applied["decisions"].as_array().unwrap() {
            let id = d["id"].as_str().unwrap().to_string();
            let pruned = d["pruned"].as_bool().unwrap();
            assert_eq!(pruned, !left.contains(&id), "{flags:?}: {d}");
            assert_eq!(pruned, d["kept"].as_array().unwrap().is_empty(), "{d}");
        }
        ok(["verify", s(&store)]);
    }
}

/// The reasons each checkpoint is kept for, by agent index, from a report's `decisions`.
fn reasons(f: &Fixture, r: &Value) -> Vec<(usize, Vec<String>)> {
    let mut out: Vec<(usize, Vec<String>)> = r["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| {
            let i = f.index(d["id"].as_str()?)?;
            let why = d["kept"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap().to_string())
                .collect();
            Some((i, why))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn dry_run_table_lists_every_reason_and_is_the_real_plan() {
    let f = Fixture::new();
    let flags = [
        "--keep-last",
        "1",
        "--keep-daily",
        "2",
        "--keep-monthly",
        "2",
    ];
    let store = f.copy("table");
    let dry = ok_json(gc_args(&store, &flags, true));
    let r = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut want = vec![
        (0, r(&[])),
        (1, r(&[])),
        (2, r(&[])),
        (3, r(&[])),
        (4, r(&[])),
        (5, r(&["daily", "monthly"])),
        (6, r(&[])),
        (7, r(&[])),
        (8, r(&[])),
        (9, r(&["last", "daily", "monthly"])),
        (10, r(&["label"])),
    ];
    want.sort();
    assert_eq!(reasons(&f, &dry), want, "{dry}");
    // `kept` still counts first reasons, every rule as `policy`.
    assert_eq!(dry["kept"]["policy"], 2, "{dry}");
    assert_eq!(dry["kept"]["label"], 1, "{dry}");
    assert_eq!(dry["kept"]["branch_head"], 1, "{dry}");
    assert_eq!(dry["pruned"].as_array().unwrap().len(), 8);
    let d9 = dry["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == f.agent[9])
        .unwrap();
    assert_eq!(d9["time"], "2026-01-01T11:00:00Z");
    assert_eq!(d9["branch"], "agent");
    assert_eq!(d9["message"], "turn 9");

    // The human table: one line per checkpoint with its reasons or `pruned`.
    let mut args = vec!["gc", s(&store), "--dry-run"];
    args.extend(flags);
    // Local time with its offset: UTC here, so the line can be checked.
    let text = stdout(&run_env(&args, &[("TZ", "UTC")]));
    let line = |i: usize| -> String {
        let short = &f.agent[i][..8];
        let found: Vec<&str> = text.lines().filter(|l| l.contains(short)).collect();
        assert_eq!(found.len(), 1, "one line for {i}: {text}");
        found[0].to_string()
    };
    let l9 = line(9);
    assert!(l9.contains("2026-01-01 11:00:00 +00:00"), "{l9}");
    assert!(l9.contains("agent") && l9.contains("\"turn 9\""), "{l9}");
    assert!(l9.ends_with("kept: last, daily, monthly"), "{l9}");
    assert!(line(5).ends_with("kept: daily, monthly"), "{text}");
    assert!(line(10).contains("[milestone]"), "{text}");
    assert!(line(10).ends_with("kept: label"), "{text}");
    for i in [0, 1, 2, 3, 4, 6, 7, 8] {
        assert!(line(i).ends_with("pruned"), "{i}: {text}");
    }
    assert!(line(9).find("agent").is_some());
    assert!(
        text.contains(&f.head[..8]) && text.contains("kept: branch head"),
        "{text}"
    );

    // Applying prunes exactly the rows marked pruned, and reports the same plan.
    let applied = ok_json(gc_args(&store, &flags, false));
    assert_eq!(applied, dry);
    let left: BTreeSet<String> = checkpoints(&store).into_iter().collect();
    let kept_rows: BTreeSet<String> = dry["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["pruned"] == false)
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(left, kept_rows);
}

#[test]
fn bare_m_is_refused_as_ambiguous_and_nothing_is_pruned() {
    let f = Fixture::new();
    let store = f.copy("m");
    let before = checkpoints(&store);
    for flags in [
        vec!["--keep-within", "2m"],
        vec!["--keep-within", "1h30m", "--dry-run"],
    ] {
        let mut args = vec!["gc", s(&store)];
        args.extend(flags.iter().copied());
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("ambiguous"), "{e}");
        assert!(
            e.contains("min") && e.contains("mo"),
            "suggests min or mo: {e}"
        );
        assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
    }
    assert_eq!(checkpoints(&store), before);
    // The units restic users write work.
    for d in ["2mo", "2months", "1y6mo", "7days", "1week", "90min", "1.5h"] {
        ok_json(["gc", s(&store), "--dry-run", "--json", "--keep-within", d]);
    }
    // Other bad durations are refused too, naming the value.
    for d in ["", "0d", "7", "7q", "300y"] {
        let o = run(["gc", s(&store), "--keep-within", d]);
        assert_eq!(o.status.code(), Some(2), "{d:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(&format!("{d:?}")), "{}", stderr(&o));
    }
    assert_eq!(checkpoints(&store), before);
}

#[test]
fn store_json_retention_parses_the_same_way() {
    let f = Fixture::new();
    let store = f.copy("config");
    let cfg_path = store.join("STORE.json");
    let mut cfg: Value = serde_json::from_slice(&fs::read(&cfg_path).unwrap()).unwrap();
    let before = checkpoints(&store);
    cfg["retention"] = serde_json::json!({"keep_within": "2m"});
    fs::write(&cfg_path, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    let o = run(["gc", s(&store)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("STORE.json") && stderr(&o).contains("ambiguous"),
        "{}",
        stderr(&o)
    );
    assert_eq!(checkpoints(&store), before, "nothing pruned");
    // The store still opens for everything else: captures go on.
    ok(["log", s(&store), "--branch", "main"]);
    // Months and the new rules from STORE.json.
    cfg["retention"] = serde_json::json!({"keep_within": "2mo", "keep_yearly": 3});
    fs::write(&cfg_path, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    let r = ok_json(["gc", s(&store), "--json"]);
    assert_eq!(r["policy_source"], "STORE.json");
    assert_eq!(
        checkpoints(&store),
        f.expect(&[9, 8, 7, 6, 5, 4, 3, 2, 1, 0])
    );
    assert!(
        reasons(&f, &r).contains(&(0, vec!["yearly".to_string()])),
        "{r}"
    );
}

#[test]
fn keep_tag_is_explained_and_help_documents_the_policy() {
    let f = Fixture::new();
    let store = f.copy("tag");
    for flag in ["--keep-tag", "--keep-label"] {
        let o = run(["gc", s(&store), flag, "milestone"]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("always kept"), "{}", stderr(&o));
    }
    let help = ok(["gc", "--help"]);
    for word in [
        "--keep-hourly",
        "--keep-monthly",
        "--keep-yearly",
        "--keep-branch",
        "UTC",
        "ISO",
        "30.44 days",
        "bare `m` is REFUSED",
        "2mo or 2min",
        "--keep-tag",
    ] {
        assert!(help.contains(word), "gc --help lacks {word:?}:\n{help}");
    }
}
