//! Concurrency: capture || gc, two captures on one branch: serialized by the store lock,
//! nothing reachable lost.

use std::fs;
use std::path::Path;

use crate::support::*;

fn variants(root: &Path) -> Vec<std::path::PathBuf> {
    (0..3)
        .map(|i| {
            let d = root.join(format!("v{i}"));
            make_room(&d, 15, 100 + i);
            d
        })
        .collect()
}

#[test]
fn capture_and_gc_run_side_by_side() {
    let t = tempdir();
    let vs = variants(t.path());
    let store = t.path().join("store");
    init(&store, &vs[0]);
    capture(&store, &[]);
    // Tree ids do not depend on the store: capture each variant once elsewhere to know them.
    let probe = t.path().join("probe");
    init(&probe, &vs[0]);
    let trees: Vec<String> = vs
        .iter()
        .map(|v| {
            let id = capture(&probe, &["--from", &format!("workspace={}", s(v))]);
            tree_of(&probe, &id)
        })
        .collect();
    let rounds = 6;
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for i in 0..rounds {
                let v = &vs[i % vs.len()];
                capture(&store, &["--from", &format!("workspace={}", s(v))]);
            }
        });
        sc.spawn(|| {
            for _ in 0..rounds {
                ok(["gc", s(&store), "--keep-last", "2"]);
            }
        });
    });
    ok(["verify", s(&store)]);
    let last = &trees[(rounds - 1) % vs.len()];
    assert_eq!(&tree_of(&store, "main"), last);
    // The history that is left is walkable, and restores.
    let log = ok_json(["log", s(&store), "--branch", "main"]);
    assert!(!log.as_array().unwrap().is_empty());
    let dest = t.path().join("restored");
    ok(["restore", s(&store), "main", "--to", s(&dest)]);
    assert_eq!(contents(&dest), contents(&vs[(rounds - 1) % vs.len()]));
    let (_, f) = {
        let o = run(["doctor", s(&store), "--json"]);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    assert!(!f.contains("\"error\""), "{f}");
}

#[test]
fn two_captures_on_one_branch_serialize() {
    let t = tempdir();
    let vs = variants(t.path());
    let store = t.path().join("store");
    init(&store, &vs[0]);
    let first = capture(&store, &[]);
    let ids: Vec<String> = std::thread::scope(|sc| {
        let hs: Vec<_> = [&vs[1], &vs[2]]
            .into_iter()
            .map(|v| {
                let store = &store;
                sc.spawn(move || capture(store, &["--from", &format!("workspace={}", s(v))]))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let h = head(&store, "main").unwrap();
    assert!(ids.contains(&h));
    let other = ids.iter().find(|i| **i != h).unwrap();
    // The later capture's parent is the earlier one: neither was lost.
    assert_eq!(show(&store, &h)["parents"][0], other.as_str());
    assert_eq!(show(&store, other)["parents"][0], first.as_str());
    ok(["verify", s(&store)]);
    assert!(
        fs::read_to_string(store.join("audit.jsonl"))
            .unwrap()
            .lines()
            .count()
            >= 3
    );
}
