//! Power loss (issue 35): each command runs once under strace; tests/powerloss/crashsim.py
//! rebuilds from the trace the states a machine could come back in had power failed after any
//! step (only what was fsynced kept: "synced"; every directory operation kept but file bytes
//! only as synced: "journaled", ext4's delayed-allocation case), and on each state `recover`
//! and `verify` must pass and every branch head must be the old or the new one, its record
//! there. See docs/testing.md for why a trace and not a FUSE layer.

use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::support::*;

/// Runs crashsim on `command` (the binary's arguments); its report.
fn crashsim(
    store: &Path,
    track: &[&Path],
    heads: &[(&str, &str)],
    checks: &[Vec<String>],
    env: &[(&str, &str)],
    command: &[&str],
) -> Value {
    crashsim_full(store, track, heads, checks, env, &[], command)
}

/// `crashsim` of a workspace's store: `before_checks` (its unmount) runs once the command is
/// done, so no state's `recover` meets the live workspace's mounts.
fn crashsim_with(
    store: &Path,
    heads: &[(&str, &str)],
    checks: &[Vec<String>],
    before_checks: &[&str],
    command: &[&str],
) -> Value {
    crashsim_full(store, &[], heads, checks, &[], before_checks, command)
}

fn crashsim_full(
    store: &Path,
    track: &[&Path],
    heads: &[(&str, &str)],
    checks: &[Vec<String>],
    env: &[(&str, &str)],
    before_checks: &[&str],
    command: &[&str],
) -> Value {
    let work = store.with_file_name("crashsim");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/powerloss/crashsim.py");
    let mut c = std::process::Command::new("python3");
    c.arg(script)
        .args(["--ckptfs", bin(), "--store", s(store), "--work", s(&work)]);
    for t in track {
        c.args(["--track", s(t)]);
    }
    for (b, ids) in heads {
        c.arg("--head").arg(format!("{b}={ids}"));
    }
    for k in checks {
        c.arg("--check").arg(serde_json::to_string(k).unwrap());
    }
    if !before_checks.is_empty() {
        c.arg("--before-checks")
            .arg(serde_json::to_string(before_checks).unwrap());
    }
    c.arg("--").arg(bin()).args(command);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("running crashsim.py");
    assert!(
        o.status.success(),
        "crashsim: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "crashsim's report: {e}: {}",
            String::from_utf8_lossy(&o.stdout)
        )
    });
    assert!(
        v.get("error").is_none(),
        "the command failed under strace: {v}"
    );
    v
}

/// Asserts a report found no bad state among at least `min` states.
fn holds(v: &Value, min: u64) {
    eprintln!("crashsim: {v}");
    assert_eq!(v["failed_states"], 0, "states that lose data: {v:#}");
    assert!(
        v["states"].as_u64().unwrap_or(0) >= min,
        "too few crash states: {v}"
    );
}

/// A store of root `r` with one capture, and the room changed since (a file modified, one
/// removed, a directory added): what the next capture records.
fn store_with_changes(t: &Path) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let room = t.join("room");
    write(&room.join("a.txt"), b"first\n");
    write(&room.join("gone.txt"), b"gone\n");
    write(&room.join("keep/b.bin"), &[7u8; 9000]);
    let store = t.join("store");
    ok(["init", s(&store), "--root", &format!("r={}", s(&room))]);
    let old = capture(&store, &[]);
    write(&room.join("a.txt"), b"first\nsecond\n");
    fs::remove_file(room.join("gone.txt")).unwrap();
    write(&room.join("new/deep/c.txt"), b"new\n");
    (store, room, old)
}

#[test]
fn a_capture_survives_power_loss_at_every_step() {
    let t = tempdir();
    let (store, _room, old) = store_with_changes(t.path());
    let heads = format!("{old},@after");
    let v = crashsim(
        &store,
        &[],
        &[("main", &heads)],
        &[],
        &[],
        &["capture", s(&store)],
    );
    holds(&v, 30);
}

/// The states catch what they exist for: with the temp file's fsync left out of
/// `write_atomic_replace` (CKPTFS_FAULT=skip-sync:replace), a branch ref can come back empty.
#[test]
fn the_power_loss_states_catch_a_missing_fsync() {
    let t = tempdir();
    let (store, _room, old) = store_with_changes(t.path());
    let heads = format!("{old},@after");
    let v = crashsim(
        &store,
        &[],
        &[("main", &heads)],
        &[],
        &[("CKPTFS_FAULT", "skip-sync:replace")],
        &["capture", s(&store)],
    );
    assert!(
        v["failed_states"].as_u64().unwrap_or(0) > 0,
        "not caught: {v:#}"
    );
    assert!(v.to_string().contains("branch main"), "{v:#}");
}

#[test]
fn a_merge_survives_power_loss_at_every_step() {
    let t = tempdir();
    let (store, room, _) = store_with_changes(t.path());
    ok(["fork", s(&store), "main", "feat"]);
    let ours = capture(&store, &[]);
    write(&room.join("a.txt"), b"first\nsecond\nthird\n");
    write(&room.join("theirs.bin"), &[9u8; 70_000]);
    let theirs = capture(&store, &["-b", "feat"]);
    let v = crashsim(
        &store,
        &[],
        &[("main", &format!("{ours},@after")), ("feat", &theirs)],
        &[],
        &[],
        &["merge", s(&store), "feat"],
    );
    holds(&v, 5);
}

#[test]
fn gc_survives_power_loss_at_every_step() {
    let t = tempdir();
    let (store, room, _) = store_with_changes(t.path());
    for i in 0..3 {
        write(
            &room.join(format!("turn{i}.txt")),
            format!("{i}\n").as_bytes(),
        );
        write(&room.join("a.txt"), format!("a {i}\n").as_bytes());
        capture(&store, &[]);
    }
    let v = crashsim(
        &store,
        &[],
        &[("main", "@after")],
        &[],
        &[],
        &["gc", s(&store), "--keep-last", "1"],
    );
    holds(&v, 10);
}

#[test]
fn an_import_into_a_store_survives_power_loss_at_every_step() {
    let t = tempdir();
    let (store, room, _) = store_with_changes(t.path());
    // The archive: a branch of another store with the same root name.
    let other = t.path().join("other");
    ok(["init", s(&other), "--root", &format!("r={}", s(&room))]);
    write(&room.join("theirs.txt"), b"theirs\n");
    ok(["capture", s(&other), "--branch", "feature"]);
    let file = t.path().join("f.ckar");
    ok(["export", s(&other), "feature", "--out", s(&file)]);
    let v = crashsim(
        &store,
        &[],
        &[("feature", "none,@after")],
        &[],
        &[],
        &["import", s(&store), s(&file)],
    );
    holds(&v, 10);
}

/// An archive is committed by its sidecar: in every state, an archive with its sidecar
/// imports and verifies, and one without is refused.
#[test]
fn an_export_survives_power_loss_at_every_step() {
    let t = tempdir();
    let (store, _room, _) = store_with_changes(t.path());
    let out = t.path().join("out");
    fs::create_dir(&out).unwrap();
    let check = format!(
        "if [ -e {{1}}/x.ckar.sha256 ]; then {b} import {{1}}/new {{1}}/x.ckar >/dev/null && \
         {b} verify {{1}}/new >/dev/null; else ! {b} import {{1}}/new {{1}}/x.ckar 2>/dev/null; fi",
        b = bin()
    );
    let v = crashsim(
        &store,
        &[&out],
        &[("main", "@after")],
        &[vec!["sh".into(), "-c".into(), check]],
        &[],
        &["export", s(&store), "main", "--out", s(&out.join("x.ckar"))],
    );
    holds(&v, 6);
}

/// After a crash at any step of a checkpoint (fold included: the upper layer is recorded,
/// then set aside and emptied), the work is somewhere: recorded in the new head, or still in
/// an upper layer (kept or set aside) of the store when the head is the old one.
fn no_work_lost(store_old: &str, file: &str, says: &str) -> Vec<String> {
    let script = format!(
        "h=$(sed -n 's/.*\"head\": *\"\\([0-9a-f]*\\)\".*/\\1/p' {{store}}/refs/branches/main.json); \
         if [ \"$h\" = {store_old} ]; then grep -rqs {says} {{store}}/upper --include={file}; \
         else {b} cat {{store}} main:ws/{file} | grep -q {says}; fi",
        b = bin()
    );
    vec!["sh".into(), "-c".into(), script]
}

#[test]
fn a_checkpoint_with_its_fold_survives_power_loss_at_every_step() {
    let w = Workspace::new(|room| write(&room.join("a.txt"), b"a\n"));
    let old = head(&w.store, "main").unwrap();
    write(&w.path("a.txt"), b"a\nmore\n");
    write(&w.path("n.txt"), b"new-work\n");
    let heads = format!("{old},@after");
    let v = crashsim_with(
        &w.store,
        &[("main", &heads)],
        &[no_work_lost(&old, "n.txt", "new-work")],
        &[bin(), "umount", w.room()],
        &["checkpoint", w.room()],
    );
    holds(&v, 30);
    assert_ne!(
        head(&w.store, "main").unwrap(),
        old,
        "the checkpoint was made"
    );
}

/// The turn's own steps (claim, checkpoint, fold, audit). The agent's writes are its own
/// program's (not followed by the trace), so here the store alone is checked.
#[test]
fn a_turn_survives_power_loss_at_every_step() {
    let w = Workspace::new(|room| write(&room.join("a.txt"), b"a\n"));
    let old = head(&w.store, "main").unwrap();
    let heads = format!("{old},@after");
    let v = crashsim_with(
        &w.store,
        &[("main", &heads)],
        &[],
        &[bin(), "umount", w.room()],
        &[
            "turn",
            w.room(),
            "--as-root",
            "--",
            "sh",
            "-c",
            &format!("echo turn-work > {}", s(&w.path("t.txt"))),
        ],
    );
    holds(&v, 30);
    let now = head(&w.store, "main").unwrap();
    assert_eq!(
        w.cat(&now, "t.txt"),
        b"turn-work\n",
        "the turn recorded its work"
    );
    assert_ne!(
        head(&w.store, "main").unwrap(),
        old,
        "the turn was recorded"
    );
}

/// `switch --checkpoint-first`: the changes are recorded on the branch left, then the other
/// branch is mounted at the same paths. In every state both heads are old or new and the
/// change is somewhere: in main's new head, or still in an upper layer or set aside.
#[test]
fn a_switch_survives_power_loss_at_every_step() {
    let w = Workspace::new(|room| write(&room.join("a.txt"), b"a\n"));
    ok(["fork", w.store(), "main", "feature"]);
    let (main, feature) = (
        head(&w.store, "main").unwrap(),
        head(&w.store, "feature").unwrap(),
    );
    write(&w.path("a.txt"), b"a\nswitched-away\n");
    let check = format!(
        "grep -rqs switched-away {{store}}/upper {{store}}/displaced || \
         {} cat {{store}} main:ws/a.txt | grep -q switched-away",
        bin()
    );
    let (m, f) = (format!("{main},@after"), format!("{feature},@after"));
    let v = crashsim_with(
        &w.store,
        &[("main", &m), ("feature", &f)],
        &[vec!["sh".into(), "-c".into(), check]],
        &[bin(), "umount", w.room()],
        &["switch", w.room(), "--to", "feature", "--checkpoint-first"],
    );
    holds(&v, 30);
}
