//! gc: table-driven retention policies, dry run == apply, pins, ephemeral and cache paths.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::support::*;

/// main: 5 checkpoints (the 2nd labelled `keep`), feat: 3 checkpoints. Returns (ids main, ids feat).
fn fixture(root: &Path) -> (Vec<String>, Vec<String>) {
    let room = root.join("room");
    make_room(&room, 12, 1);
    let store = root.join("store");
    init(&store, &room);
    let mut main = Vec::new();
    for i in 0..5 {
        fs::write(
            room.join(format!("turn{i}")),
            format!("turn {i}\n").repeat(2000),
        )
        .unwrap();
        main.push(capture(&store, &["-m", &format!("main {i}")]));
        if i == 1 {
            ok(["label", s(&store), &main[1], "keep"]);
        }
    }
    let mut feat = Vec::new();
    for i in 0..3 {
        fs::write(
            room.join(format!("feat{i}")),
            format!("feat {i}\n").repeat(3000),
        )
        .unwrap();
        feat.push(capture(&store, &["-b", "feat"]));
    }
    (main, feat)
}

#[test]
fn retention_policies_table() {
    let base = tempdir();
    let (main, feat) = fixture(base.path());
    // (flags, checkpoints of main kept, of feat kept)
    let cases: Vec<(Vec<&str>, Vec<usize>, Vec<usize>)> = vec![
        (vec![], vec![0, 1, 2, 3, 4], vec![0, 1, 2]),
        (vec!["--keep-last", "1"], vec![1, 4], vec![2]),
        (vec!["--keep-last", "2"], vec![1, 3, 4], vec![1, 2]),
        (
            vec!["--keep-last", "10"],
            vec![0, 1, 2, 3, 4],
            vec![0, 1, 2],
        ),
        (
            vec!["--keep-within", "1h"],
            vec![0, 1, 2, 3, 4],
            vec![0, 1, 2],
        ),
        (vec!["--keep-daily", "1"], vec![1, 4], vec![2]),
        (vec!["--keep-weekly", "3"], vec![1, 4], vec![2]),
        (
            vec!["--keep-last", "3", "--keep-daily", "1"],
            vec![1, 2, 3, 4],
            vec![0, 1, 2],
        ),
    ];
    for (i, (flags, want_main, want_feat)) in cases.iter().enumerate() {
        let work = base.path().join(format!("case{i}"));
        fs::create_dir(&work).unwrap();
        let store = work.join("store");
        copy_dir(&base.path().join("store"), &store);
        let mut dry = vec!["gc", s(&store), "--json", "--dry-run"];
        dry.extend(flags.iter().copied());
        let planned = ok_json(&dry);
        let before = checkpoints(&store);
        assert_eq!(before.len(), 8, "dry run deleted nothing");
        let applied = ok_json(applied_args(&store, flags));
        assert_eq!(
            planned, applied,
            "case {flags:?}: dry run report differs from apply"
        );
        let after = checkpoints(&store);
        let mut want: Vec<String> = want_main.iter().map(|&k| main[k].clone()).collect();
        want.extend(want_feat.iter().map(|&k| feat[k].clone()));
        want.sort();
        assert_eq!(after, want, "case {flags:?}");
        assert_eq!(
            applied["pruned"].as_array().unwrap().len(),
            8 - want.len(),
            "case {flags:?}"
        );
        ok(["verify", s(&store)]);
        // log follows parents until the first pruned one.
        let log = ok_json(["log", s(&store), "--branch", "main"]);
        assert!(!log.as_array().unwrap().is_empty());
        assert_eq!(log[0]["id"], main[4]);
        // A second gc with the same policy has nothing left to prune.
        let again = ok_json(applied_args(&store, flags));
        assert_eq!(again["pruned"].as_array().unwrap().len(), 0);
        assert_eq!(again["objects_removed"], 0);
        // Audit log records the gc.
        let audit = fs::read_to_string(store.join("audit.jsonl")).unwrap();
        assert!(audit.lines().any(|l| l.contains("\"op\":\"gc\"")));
    }
}

fn applied_args<'a>(store: &'a Path, flags: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["gc", s(store), "--json"];
    v.extend_from_slice(flags);
    v
}

#[test]
fn pruning_frees_objects_and_keeps_every_kept_checkpoint_whole() {
    let base = tempdir();
    let (main, _) = fixture(base.path());
    let store = base.path().join("store");
    let r = ok_json(["gc", s(&store), "--keep-last", "1"]);
    assert!(r["objects_removed"].as_u64().unwrap() > 0);
    assert!(r["bytes_freed"].as_u64().unwrap() > 0);
    assert_eq!(r["kept"]["label"], 1);
    ok(["verify", s(&store)]);
    // The labelled checkpoint still restores completely.
    let dest = base.path().join("restored");
    ok(["restore", s(&store), "keep", "--to", s(&dest)]);
    assert!(dest.join("turn1").exists() && !dest.join("turn2").exists());
    let _ = main;
}

#[test]
fn retention_defaults_from_store_json() {
    let base = tempdir();
    let (main, feat) = fixture(base.path());
    let store = base.path().join("store");
    let cfg_path = store.join("STORE.json");
    let mut cfg: serde_json::Value = serde_json::from_slice(&fs::read(&cfg_path).unwrap()).unwrap();
    cfg["retention"] = serde_json::json!({"keep_last": 1});
    fs::write(&cfg_path, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    let r = ok_json(["gc", s(&store)]);
    assert_eq!(r["policy_source"], "STORE.json");
    let mut want = vec![main[1].clone(), main[4].clone(), feat[2].clone()];
    want.sort();
    assert_eq!(checkpoints(&store), want);
    // A bad duration in STORE.json is a clear error.
    cfg["retention"] = serde_json::json!({"keep_within": "soon"});
    fs::write(&cfg_path, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    let o = run(["gc", s(&store)]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("keep_within"), "{}", stderr(&o));
}

fn write_pin(store: &Path, pid: u32, all: bool, checkpoints: &[&str]) {
    let dir = store.join("run/pins");
    fs::create_dir_all(&dir).unwrap();
    let pin = serde_json::json!({"pid": pid, "owner": "test", "all": all,
        "checkpoints": checkpoints, "branches": []});
    fs::write(dir.join(format!("test-{pid}.json")), pin.to_string()).unwrap();
}

#[test]
fn live_pins_protect_checkpoints_dead_pins_do_not() {
    let base = tempdir();
    let (main, _) = fixture(base.path());
    let store = base.path().join("store");
    let mut holder = Command::new("sleep").arg("60").spawn().unwrap();
    write_pin(&store, holder.id(), false, &[&main[0]]);
    let r = ok_json(["gc", s(&store), "--keep-last", "1"]);
    assert_eq!(r["kept"]["pinned"], 1, "{r}");
    assert!(checkpoints(&store).contains(&main[0]));
    assert!(!checkpoints(&store).contains(&main[2]));
    ok(["verify", s(&store)]);
    // A pin with all: true keeps every checkpoint.
    let mut holder2 = Command::new("sleep").arg("60").spawn().unwrap();
    write_pin(&store, holder2.id(), true, &[]);
    let n = checkpoints(&store).len();
    let r = ok_json(["gc", s(&store), "--keep-last", "1"]);
    assert_eq!(r["pruned"].as_array().unwrap().len(), 0);
    assert_eq!(checkpoints(&store).len(), n);
    // Once the processes are gone, their pins are ignored and removed.
    holder.kill().unwrap();
    holder.wait().unwrap();
    holder2.kill().unwrap();
    holder2.wait().unwrap();
    let r = ok_json(["gc", s(&store), "--keep-last", "1"]);
    assert!(!checkpoints(&store).contains(&main[0]), "{r}");
    let removed: Vec<String> = r["paths_removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap().to_string())
        .collect();
    assert!(
        removed.iter().any(|p| p.starts_with("run/pins/test-")),
        "{removed:?}"
    );
    ok(["verify", s(&store)]);
}

#[test]
fn ephemeral_and_cache_paths() {
    let base = tempdir();
    let (main, _) = fixture(base.path());
    let store = base.path().join("store");
    // A temp file of a dead process, an upper of a deleted branch, one of a live branch,
    // something displaced.
    fs::write(store.join("tmp/.tmp-obj-4194000.7"), b"partial").unwrap();
    fs::create_dir_all(store.join("upper/gone/workspace")).unwrap();
    fs::write(store.join("upper/gone/workspace/x"), b"x").unwrap();
    fs::create_dir_all(store.join("upper/main/workspace")).unwrap();
    fs::create_dir_all(store.join("displaced/ws-old")).unwrap();
    fs::write(store.join("run/daemon-x.pid"), b"4194002\n").unwrap();
    let mut live = Command::new("sleep").arg("60").spawn().unwrap();
    fs::write(
        store.join("run/daemon-live.pid"),
        format!("{}\n", live.id()),
    )
    .unwrap();
    let stat_caches_before = fs::read_dir(store.join("cache/stat")).unwrap().count();
    assert!(stat_caches_before > 0);
    let dry = ok_json(["gc", s(&store), "--keep-last", "1", "--dry-run"]);
    let r = ok_json(["gc", s(&store), "--keep-last", "1"]);
    assert_eq!(dry, r);
    let removed: Vec<&str> = r["paths_removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert!(removed.contains(&"tmp/.tmp-obj-4194000.7"), "{removed:?}");
    assert!(removed.contains(&"upper/gone"), "{removed:?}");
    assert!(removed.contains(&"run/daemon-x.pid"), "{removed:?}");
    assert!(store.join("run/daemon-live.pid").exists());
    live.kill().unwrap();
    live.wait().unwrap();
    assert!(!removed.iter().any(|p| p.starts_with("upper/main")));
    assert!(removed.iter().any(|p| p.starts_with("cache/stat/")));
    assert_eq!(r["kept_for_review"][0], "displaced/ws-old");
    assert!(store.join("displaced/ws-old").exists());
    assert!(store.join("upper/main/workspace").exists());
    assert!(!store.join("upper/gone").exists());
    // Stat caches of kept checkpoints stay (the next capture stays incremental).
    let cached: Vec<String> = fs::read_dir(store.join("cache/stat"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(cached.iter().any(|c| c.starts_with(&main[4])), "{cached:?}");
    // --prune-displaced and --clear-cache.
    let r = ok_json(["gc", s(&store), "--prune-displaced", "--clear-cache"]);
    assert!(!store.join("displaced/ws-old").exists(), "{r}");
    assert_eq!(fs::read_dir(store.join("cache")).unwrap().count(), 0);
    ok(["verify", s(&store)]);
    capture(&store, &[]);
}

#[test]
fn gc_text_output_explains_itself() {
    let base = tempdir();
    fixture(base.path());
    let store = base.path().join("store");
    let out = ok(["gc", s(&store), "--keep-last", "1", "--dry-run"]);
    assert!(out.contains("dry run"), "{out}");
    assert!(out.contains("would prune"), "{out}");
    assert!(out.contains("would free"), "{out}");
    let o = run(["gc", s(&store), "--keep-within", "bogus"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
