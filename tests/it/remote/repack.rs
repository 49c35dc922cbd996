//! Remote gc with repacking, on a real Garage node: a forget reaches the remote and
//! `gc --remote` shrinks it (packs partly garbage rewritten); every checkpoint left clones,
//! mounts and verifies exactly; the dry run's plan is the real run's and changes nothing; a
//! repack whose server dies mid-way leaves a remote that verifies, and a rerun finishes;
//! clone, fetch, pull and the repack draw progress on a terminal.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::support::*;
use serde_json::Value;

/// A store A with three checkpoints pushed in one push, so packs mix what stays with what
/// goes: `first` has `n` 1 MiB files and ten small ones; `mid` (labelled) removes every other
/// big file and the small ones, and adds one; `last` (main's head) changes that one. Then
/// `first` is forgotten on A.
struct History {
    dir: tempfile::TempDir,
    key: PathBuf,
    room: PathBuf,
    a: PathBuf,
    first: String,
    /// `mid` and `last` as restored on A before anything remote happened.
    ref_mid: PathBuf,
    ref_last: PathBuf,
}

fn history(g: &Garage, prefix: &str, n: usize) -> History {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "pw");
    let src = dir.path().join("src");
    let room = dir.path().join("room");
    let a = dir.path().join("a");
    for i in 0..n {
        write(
            &src.join(format!("f{i:02}.bin")),
            &random_bytes(i as u64 + 100, 1 << 20),
        );
    }
    for i in 0..10 {
        write(
            &src.join(format!("small/{i}.txt")),
            format!("small {i}\n").as_bytes(),
        );
    }
    ok(["init", s(&a), "--root", &format!("work={}", room.display())]);
    let from = format!("work={}", src.display());
    let first = capture(&a, &["--from", &from]);
    for i in (0..n).step_by(2) {
        fs::remove_file(src.join(format!("f{i:02}.bin"))).unwrap();
    }
    fs::remove_dir_all(src.join("small")).unwrap();
    write(&src.join("small/kept.txt"), b"mid\n");
    capture(&a, &["--from", &from, "-l", "mid"]);
    write(&src.join("small/kept.txt"), b"last\n");
    capture(&a, &["--from", &from]);
    let (ref_mid, ref_last) = (dir.path().join("ref-mid"), dir.path().join("ref-last"));
    ok(["restore", s(&a), "mid", "--to", s(&ref_mid)]);
    ok(["restore", s(&a), "main", "--to", s(&ref_last)]);
    add_remote(g, &a, prefix, &key);
    rok(g, ["push", s(&a)]);
    ok(["forget", s(&a), &first]);
    History {
        dir,
        key,
        room,
        a,
        first,
        ref_mid,
        ref_last,
    }
}

/// The plan without its `applied`: what a dry run and the real run must agree on.
fn plan_of(v: &Value) -> Value {
    let mut p = v.clone();
    p.as_object_mut().unwrap().remove("applied");
    p
}

fn keys_of(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

/// Every pack a gc report removes or repacks is gone from the remote at `prefix`.
fn assert_planned_packs_gone(g: &Garage, prefix: &str, done: &Value) {
    let now = g.s3_list(&format!("{prefix}/packs/"));
    let repacked = done["repacked"].as_array().unwrap().iter();
    let gone = keys_of(&done["packs"])
        .into_iter()
        .chain(repacked.map(|r| r["pack"].as_str().unwrap().to_string()));
    for k in gone {
        assert!(!now.contains(&format!("{prefix}/{k}")), "{k} left: {done}");
    }
}

/// A fresh clone of `prefix` at `b`: every checkpoint left restores exactly, the head mounts
/// exactly at its recorded path, and the remote verifies with `checkpoints` checkpoints.
fn assert_remote_exact(g: &Garage, h: &History, prefix: &str, b: &Path, checkpoints: u64) {
    let v = rok_json(g, ["verify", s(&h.a), "--remote", "origin"]);
    assert!(v["findings"].as_array().unwrap().is_empty(), "{v}");
    assert_eq!(v["checkpoints"], checkpoints, "{v}");
    clone_remote(g, prefix, b, &h.key);
    for (spec, want) in [("mid", &h.ref_mid), ("main", &h.ref_last)] {
        let to = h.dir.path().join(format!("{}-{spec}", b.display()));
        rok(g, ["restore", s(b), spec, "--to", s(&to)]);
        assert_trees_equal(want, &to);
    }
    let _m = MountGuard::new(&h.room);
    rok(g, ["mount", s(b), "main:work"]);
    assert_trees_equal(&h.ref_last, &h.room);
    rok(g, ["umount", s(&h.room)]);
    // The forgotten checkpoint did not come back with the clone.
    let o = rrun(g, ["show", s(b), &h.first]);
    assert!(
        !o.status.success(),
        "the forgotten checkpoint is on the clone"
    );
}

#[test]
fn forget_then_gc_remote_repacks_and_shrinks_the_remote_exactly_as_planned() {
    let g = Garage::start();
    let h = history(&g, "rp", 16);
    // A clone made before the gc: it must still read after a fetch.
    let early = h.dir.path().join("early");
    clone_remote(&g, "rp", &early, &h.key);
    // A mount of it, started before the gc: its daemon holds the index it read then.
    let early_mnt = h.dir.path().join("early-mnt");
    fs::create_dir_all(&early_mnt).unwrap();
    rok(&g, ["mount", s(&early), "mid:work", "--at", s(&early_mnt)]);
    let _unmount = MountGuard::new(&early_mnt);
    let before = remote_bytes(&g, "rp/packs/");
    let keys_before = remote_keys(&g, "rp");

    let gc = ["gc", s(&h.a), "--remote", "origin"];
    let dry = rok_json(&g, [&gc[..], &["--dry-run"]].concat());
    assert_eq!(dry["applied"], false);
    assert_eq!(
        remote_keys(&g, "rp"),
        keys_before,
        "a dry run changed the remote"
    );
    // The plan: the forget published, its record gone, every pack partly garbage repacked.
    assert_eq!(dry["forgotten"], serde_json::json!([h.first]), "{dry}");
    assert_eq!(dry["forgets_published"], 1, "{dry}");
    assert_eq!(dry["records"].as_array().unwrap().len(), 1, "{dry}");
    assert!(!dry["repacked"].as_array().unwrap().is_empty(), "{dry}");
    assert_eq!(dry["pack_bytes_before"], before, "{dry}");
    assert_eq!(dry["max_unused"], "5%");
    let live = dry["repacked_live_bytes"].as_u64().unwrap();
    assert!(live > 0 && live < dry["repacked_pack_bytes"].as_u64().unwrap());
    // Every pack is in the plan with its live and unused bytes and what happens to it.
    let usage = dry["pack_usage"].as_array().unwrap();
    let mut listed: Vec<String> = g
        .s3_list("rp/packs/")
        .iter()
        .map(|k| k.trim_start_matches("rp/").to_string())
        .collect();
    listed.sort();
    let planned: Vec<&str> = usage.iter().map(|u| u["pack"].as_str().unwrap()).collect();
    assert_eq!(planned, listed, "{dry}");
    let repack_live: u64 = usage
        .iter()
        .filter(|u| u["action"] == "repack")
        .map(|u| u["live_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(repack_live, live, "{dry}");
    for u in usage {
        let (b, l, un) = (
            u["bytes"].as_u64().unwrap(),
            u["live_bytes"].as_u64().unwrap(),
            u["unused_bytes"].as_u64().unwrap(),
        );
        assert!(l + un <= b, "{u}");
    }
    // The text of the dry run says the same.
    let text = rok(&g, [&gc[..], &["--dry-run"]].concat());
    assert!(
        text.contains("would remove 1 records") && text.contains("repack:"),
        "{text}"
    );

    let done = rok_json(&g, gc);
    assert_eq!(done["applied"], true);
    assert_eq!(
        plan_of(&done),
        plan_of(&dry),
        "the real run did something else"
    );
    // The remote shrank by what the plan said: half the data was the forgotten files'.
    let after = remote_bytes(&g, "rp/packs/");
    assert_eq!(after, done["pack_bytes_after"], "{done}");
    assert!(after < before * 2 / 3, "{before} -> {after}: {done}");
    assert!(done["unused_bytes_after"].as_u64().unwrap() <= after / 20);
    // The repacked packs and the forgotten record are gone; the tombstone stays.
    let packs_now = g.s3_list("rp/packs/");
    for r in done["repacked"].as_array().unwrap() {
        let k = format!("rp/{}", r["pack"].as_str().unwrap());
        assert!(!packs_now.contains(&k), "{k} still there");
    }
    for k in keys_of(&done["records"]) {
        assert!(g.s3_get(&format!("rp/{k}")).is_none(), "{k} still there");
    }
    assert_eq!(g.s3_list("rp/forgotten/").len(), 1);
    assert_eq!(g.s3_list("rp/index/").len(), 1);

    assert_remote_exact(&g, &h, "rp", &h.dir.path().join("b"), 2);
    // The clone made before still has the old index copies: a read of an object that moved
    // finds its pack gone, reads the index again and gets the right bytes, in a new process
    // (`cat`) and in the mount's daemon started before the gc, with no `fetch`.
    for (spec, want) in [("mid", &h.ref_mid), ("main", &h.ref_last)] {
        let o = rrun(
            &g,
            ["cat", s(&early), &format!("{spec}:work/small/kept.txt")],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(o.stdout, fs::read(want.join("small/kept.txt")).unwrap());
    }
    assert_trees_equal(&h.ref_mid, &early_mnt);
    // After a fetch it reads every byte, and it learnt the forget.
    let f = rok_json(&g, ["fetch", s(&early)]);
    assert_eq!(f["forgotten"], 1, "{f}");
    let to = h.dir.path().join("early-main");
    rok(&g, ["restore", s(&early), "main", "--to", s(&to)]);
    assert_trees_equal(&h.ref_last, &to);

    // Nothing left to do; and a push brings nothing back.
    let again = rok_json(&g, [&gc[..], &["--dry-run"]].concat());
    assert!(again["records"].as_array().unwrap().is_empty(), "{again}");
    assert!(again["packs"].as_array().unwrap().is_empty(), "{again}");
    assert!(again["repacked"].as_array().unwrap().is_empty(), "{again}");
    assert_eq!(again["forgets_published"], 0, "{again}");
    assert!(again["forgotten"].as_array().unwrap().is_empty(), "{again}");
    let p = rok_json(&g, ["push", s(&early)]);
    assert_eq!(p["records"], 0, "{p}");
    assert_eq!(p["objects"], 0, "{p}");
}

#[test]
fn max_unused_unlimited_never_repacks_and_a_bad_limit_is_one_clear_line() {
    let g = Garage::start();
    let h = history(&g, "mu", 8);
    let args = [
        "gc",
        s(&h.a),
        "--remote",
        "origin",
        "--max-unused",
        "50 percent",
    ];
    let o = rrun(&g, args);
    let err = assert_error_output(&args.map(String::from), &o, 2);
    assert!(err.contains("--max-unused"), "{err}");
    let args = ["gc", s(&h.a), "--max-unused", "5%"];
    let o = rrun(&g, args);
    assert!(
        !o.status.success(),
        "--max-unused without --remote accepted"
    );
    let before = remote_bytes(&g, "mu/packs/");
    let v = rok_json(
        &g,
        [
            "gc",
            s(&h.a),
            "--remote",
            "origin",
            "--max-unused",
            "unlimited",
        ],
    );
    assert!(v["repacked"].as_array().unwrap().is_empty(), "{v}");
    assert_eq!(v["max_unused_bytes"], Value::Null, "{v}");
    assert_eq!(v["forgets_published"], 1, "{v}");
    // Only whole packs went (none here: every pack holds something that stays).
    let after = remote_bytes(&g, "mu/packs/");
    assert_eq!(before - after, v["pack_bytes"].as_u64().unwrap(), "{v}");
    // The record is gone and the remote is whole.
    assert_eq!(v["records"].as_array().unwrap().len(), 1, "{v}");
    let vr = rok_json(&g, ["verify", s(&h.a), "--remote", "origin"]);
    assert!(vr["findings"].as_array().unwrap().is_empty(), "{vr}");
    // Then 0% repacks every pack with unused bytes.
    let z = rok_json(
        &g,
        ["gc", s(&h.a), "--remote", "origin", "--max-unused", "0%"],
    );
    assert!(!z["repacked"].as_array().unwrap().is_empty(), "{z}");
    assert_eq!(z["unused_bytes_after"], 0, "{z}");
    assert_remote_exact(&g, &h, "mu", &h.dir.path().join("b"), 2);
}

#[test]
fn a_repack_whose_server_dies_leaves_a_complete_remote_and_a_rerun_finishes() {
    let mut g = Garage::start();
    let h = history(&g, "die", 24);
    let packs_before = g.s3_list("die/packs/");
    // One new pack uploaded every 1.5 s; the server is killed once the first is there.
    let mut c = cmd(["gc", s(&h.a), "--remote", "origin", "--max-unused", "0%"]);
    g.apply_env(&mut c)
        .env("CKPTFS_REMOTE_PACE_MS", "1500")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut p = KillOnDrop(c.spawn().expect("gc"));
    eventually("a first new pack on the remote", || {
        g.s3_list("die/packs/")
            .iter()
            .any(|k| !packs_before.contains(k))
    });
    g.kill(0);
    let out = p.0.wait().expect("wait");
    let mut err = String::new();
    if let Some(e) = p.0.stderr.as_mut() {
        std::io::Read::read_to_string(e, &mut err).unwrap();
    }
    assert!(!out.success(), "gc succeeded with its server killed");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
    g.restart(0);
    // Nothing deleted yet; what went up is a pack no index names; the remote verifies.
    let packs_mid = g.s3_list("die/packs/");
    for k in &packs_before {
        assert!(
            packs_mid.contains(k),
            "{k} deleted before the new index was up"
        );
    }
    let orphans: Vec<&String> = packs_mid
        .iter()
        .filter(|k| !packs_before.contains(k))
        .collect();
    assert!(!orphans.is_empty());
    let v = rok_json(&g, ["verify", s(&h.a), "--remote", "origin"]);
    assert!(v["findings"].as_array().unwrap().is_empty(), "{v}");
    // The forget went first: the remote's history already steps over it.
    assert_eq!(v["checkpoints"], 2, "{v}");
    // The rerun (same host: the dead gc's lock is removed) plans the orphans away and
    // repacks again.
    let done = rok_json(
        &g,
        ["gc", s(&h.a), "--remote", "origin", "--max-unused", "0%"],
    );
    assert_eq!(done["applied"], true);
    assert_eq!(done["forgets_published"], 0, "{done}");
    assert!(!done["repacked"].as_array().unwrap().is_empty(), "{done}");
    let planned = keys_of(&done["packs"]);
    for o in &orphans {
        let k = o.trim_start_matches("die/").to_string();
        assert!(planned.contains(&k), "orphan {k} not collected: {done}");
    }
    assert_planned_packs_gone(&g, "die", &done);
    let packs_end = g.s3_list("die/packs/");
    for k in &orphans {
        assert!(!packs_end.contains(k), "{k} left after the rerun");
    }
    assert_remote_exact(&g, &h, "die", &h.dir.path().join("b"), 2);
}

/// What a drawn bar says: its phase name, and the rate and elapsed time.
fn assert_bar(out: &str, phase: &str, what: &str) {
    assert!(
        out.contains(phase) && out.contains("elapsed") && out.contains("/s"),
        "{what}: expected a progress bar for {phase:?} on the terminal, got:\n{out}"
    );
}

#[test]
fn clone_fetch_pull_and_repack_draw_progress_on_a_terminal() {
    let g = Garage::start();
    let h = history(&g, "pg", 4);
    let b = h.dir.path().join("b");
    let bs = s(&b).to_string();
    let url = g.url("pg");
    let reach = reach(&g, 0, &h.key);
    let mut clone: Vec<&str> = vec!["clone", &url, &bs];
    clone.extend(reach.iter().map(String::as_str));
    let (code, out) = on_terminal_remote(&g, &clone);
    assert_eq!(code, 0, "{out}");
    assert_bar(&out, "fetch index [", "clone");
    assert_bar(&out, "fetch records [", "clone");
    // New checkpoints on A, pushed; B fetches one, pulls the other.
    let src = h.dir.path().join("src");
    let from = format!("work={}", src.display());
    for (i, verb) in ["fetch", "pull"].iter().enumerate() {
        write(
            &src.join("small/kept.txt"),
            format!("turn {i}\n").as_bytes(),
        );
        capture(&h.a, &["--from", &from]);
        rok(&g, ["push", s(&h.a)]);
        let (code, out) = on_terminal_remote(&g, &[verb, &bs]);
        assert_eq!(code, 0, "{verb}: {out}");
        assert_bar(&out, "fetch records [", verb);
    }
    let (code, out) = on_terminal_remote(
        &g,
        &["gc", s(&h.a), "--remote", "origin", "--max-unused", "0%"],
    );
    assert_eq!(code, 0, "{out}");
    assert_bar(&out, "repack [", "gc --remote");
    assert!(out.contains("remote walk"), "{out}");
    // Not with --json or --quiet.
    let c = h.dir.path().join("c");
    let cs = s(&c).to_string();
    let mut clone: Vec<&str> = vec!["clone", &url, &cs, "--json"];
    clone.extend(reach.iter().map(String::as_str));
    let (code, out) = on_terminal_remote(&g, &clone);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("elapsed"), "{out}");
    write(&src.join("small/kept.txt"), b"quiet turn\n");
    capture(&h.a, &["--from", &from]);
    rok(&g, ["push", s(&h.a)]);
    let (code, out) = on_terminal_remote(&g, &["fetch", &bs, "-q"]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("elapsed"), "{out}");
}

/// Starts `gc STORE --remote origin --max-unused 0%` waiting `pace_ms` before each change it
/// makes to the remote.
fn spawn_paced_gc(g: &Garage, store: &Path, pace_ms: u64) -> KillOnDrop {
    let mut c = cmd(["gc", s(store), "--remote", "origin", "--max-unused", "0%"]);
    g.apply_env(&mut c)
        .env("CKPTFS_REMOTE_PACE_MS", pace_ms.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    KillOnDrop(c.spawn().expect("gc"))
}

#[test]
fn a_gc_killed_between_any_two_steps_leaves_a_complete_remote() {
    let g = Garage::start();
    let h = history(&g, "steps", 12);
    let verify_clean = |when: &str| {
        let v = rok_json(&g, ["verify", s(&h.a), "--remote", "origin"]);
        assert!(v["findings"].as_array().unwrap().is_empty(), "{when}: {v}");
        assert_eq!(v["checkpoints"], 2, "{when}: {v}");
    };
    let packs_at_start = g.s3_list("steps/packs/");
    // 1. Killed once the forget is published (before any pack is written).
    let p = spawn_paced_gc(&g, &h.a, 700);
    eventually("the tombstone published", || {
        !g.s3_list("steps/forgotten/").is_empty()
    });
    drop(p);
    verify_clean("after the tombstone");
    assert_eq!(g.s3_list("steps/packs/"), packs_at_start);
    // 2. Killed with the new index up and the old one not yet deleted: two index files.
    let p = spawn_paced_gc(&g, &h.a, 700);
    eventually("the new index beside the old", || {
        g.s3_list("steps/index/").len() >= 2
    });
    drop(p);
    verify_clean("with old and new index files");
    // 3. Killed once packs are being deleted, before the records go.
    let packs = g.s3_list("steps/packs/").len();
    let p = spawn_paced_gc(&g, &h.a, 700);
    eventually("a first pack deleted", || {
        g.s3_list("steps/packs/").len() < packs
    });
    drop(p);
    assert_eq!(
        g.s3_list("steps/records/").len(),
        3,
        "records went before packs"
    );
    verify_clean("with packs half deleted");
    // A last run finishes the job: the forgotten record and every old pack gone.
    let done = rok_json(
        &g,
        ["gc", s(&h.a), "--remote", "origin", "--max-unused", "0%"],
    );
    assert_eq!(done["applied"], true);
    assert_eq!(g.s3_list("steps/records/").len(), 2);
    assert_planned_packs_gone(&g, "steps", &done);
    assert_eq!(g.s3_list("steps/index/").len(), 1);
    assert_remote_exact(&g, &h, "steps", &h.dir.path().join("b"), 2);
}

#[test]
fn repack_small_merges_the_packs_of_many_small_pushes_within_max_repack_size() {
    let g = Garage::start();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "pw");
    let (src, room, a) = (
        dir.path().join("src"),
        dir.path().join("room"),
        dir.path().join("a"),
    );
    write(&src.join("base.bin"), &random_bytes(7, 200_000));
    ok(["init", s(&a), "--root", &format!("work={}", room.display())]);
    add_remote(&g, &a, "sm", &key);
    let from = format!("work={}", src.display());
    // A push per turn: each leaves a small data pack and a small tree pack.
    for turn in 0..5u64 {
        write(
            &src.join(format!("turn{turn}.bin")),
            &random_bytes(turn + 20, 30_000),
        );
        capture(&a, &["--from", &from]);
        rok(&g, ["push", s(&a)]);
    }
    let before = g.s3_list("sm/packs/");
    assert_eq!(before.len(), 10, "{before:?}");
    let gc = ["gc", s(&a), "--remote", "origin"];
    // Every byte is live: even 0% finds nothing to repack (a trailer is not unused).
    let v = rok_json(&g, [&gc[..], &["--max-unused", "0%", "--dry-run"]].concat());
    assert!(v["repacked"].as_array().unwrap().is_empty(), "{v}");
    assert_eq!(v["unused_bytes_before"], 0, "{v}");
    // A bound no pack fits under: nothing repacked.
    let v = rok_json(
        &g,
        [
            &gc[..],
            &["--repack-small", "--max-repack-size", "1", "--dry-run"],
        ]
        .concat(),
    );
    assert!(v["repacked"].as_array().unwrap().is_empty(), "{v}");
    assert_eq!(v["max_repack_bytes"], 1, "{v}");
    // Merged: one data pack and one tree pack, of exactly the planned bytes.
    let v = rok_json(&g, [&gc[..], &["--repack-small"]].concat());
    let repacked = v["repacked"].as_array().unwrap();
    assert_eq!(repacked.len(), 10, "{v}");
    assert!(repacked.iter().all(|r| r["reason"] == "small"), "{v}");
    assert_eq!(v["new_packs"], 2, "{v}");
    assert_eq!(g.s3_list("sm/packs/").len(), 2);
    assert_eq!(remote_bytes(&g, "sm/packs/"), v["pack_bytes_after"], "{v}");
    let vr = rok_json(&g, ["verify", s(&a), "--remote", "origin"]);
    assert!(vr["findings"].as_array().unwrap().is_empty(), "{vr}");
    assert_eq!(vr["checkpoints"], 5, "{vr}");
    let b = dir.path().join("b");
    clone_remote(&g, "sm", &b, &key);
    let to = dir.path().join("restored");
    rok(&g, ["restore", s(&b), "main", "--to", s(&to)]);
    assert_trees_equal(&src, &to);
}
