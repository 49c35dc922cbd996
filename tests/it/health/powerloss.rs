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
    // A restore's marker names what it made and moved by inode number (see crashsim.py's
    // remap_inodes).
    if command.first() == Some(&"restore") {
        c.arg("--remap-inodes");
    }
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

/// The check of a restore's states: the target holds the tree it held (and the store has not
/// recorded the restore as done) or the restored one, whole; in the second case the tree it
/// held is whole in the store's `displaced/` or beside the target; no staging directory is
/// left. `{1}` is the target's parent (the tracked directory), `name` the target's name.
fn restored_or_not(name: &str, old: &Path, new: &Path) -> Vec<String> {
    let script = format!(
        "t={{1}}/{name}; same() {{ diff -r --no-dereference \"$1\" \"$2\" >/dev/null 2>&1; }}; \
         if same \"$t\" {new}; then \
           for d in {{store}}/displaced/* {{1}}/{name}.ckptfs-aside-*; do \
             same \"$d\" {old} && exit_ok=1; done; \
           [ -n \"$exit_ok\" ] || {{ echo 'restored, but the tree it replaced is lost'; exit 1; }}; \
         elif same \"$t\" {old}; then \
           if grep '\"op\":\"restore\"' {{store}}/audit.jsonl | grep -F '/{name}\"' \
              | grep -q '\"ok\":true'; then \
             echo 'the store recorded the restore, the target holds the old tree'; exit 1; fi; \
         else echo 'the target is neither tree:'; diff -r --no-dereference \"$t\" {new}; exit 1; fi; \
         if ls -a {{1}} | grep -q ckptfs-restore; then echo 'a staging directory is left'; exit 1; fi",
        old = s(old),
        new = s(new),
    );
    vec!["sh".into(), "-c".into(), script]
}

/// A tree at `dir` for a restore to replace, and its copy at `copy`.
fn old_tree(dir: &Path, copy: &Path) {
    write(&dir.join("a.txt"), b"changed since\n");
    write(&dir.join("added/x.bin"), &[3u8; 20_000]);
    std::os::unix::fs::symlink("added/x.bin", dir.join("link")).unwrap();
    copy_dir(dir, copy);
}

/// `restore --in-place` of a root, and `restore --to DIR` over a tree there: after a power
/// loss at any step and `recover`, the target holds its old tree or the restored one, whole,
/// and the old one, when replaced, is whole where the restore moved it.
#[test]
fn a_restore_survives_power_loss_at_every_step() {
    let t = tempdir();
    let place = t.path().join("place");
    let room = place.join("room");
    write(&room.join("a.txt"), b"as captured\n");
    write(&room.join("keep/b.bin"), &random_bytes(5, 70_000));
    write(&room.join("keep/deep/c.txt"), b"c\n");
    std::os::unix::fs::symlink("keep/deep/c.txt", room.join("link")).unwrap();
    let new = t.path().join("ref-new");
    copy_dir(&room, &new);
    let store = t.path().join("store");
    ok(["init", s(&store), "--root", &format!("r={}", s(&room))]);
    let id = capture(&store, &[]);
    fs::remove_dir_all(room.join("keep")).unwrap();
    fs::remove_file(room.join("link")).unwrap();
    let old = t.path().join("ref-old");
    old_tree(&room, &old);
    let spec = format!("{id}:r");
    let v = crashsim(
        &store,
        &[&place],
        &[("main", &id)],
        &[restored_or_not("room", &old, &new)],
        &[],
        &["restore", s(&store), &spec, "--in-place"],
    );
    holds(&v, 20);
    // --to a directory outside the roots: the old tree is set aside beside it.
    let out = t.path().join("out");
    let old_out = t.path().join("ref-old-out");
    old_tree(&out.join("dir"), &old_out);
    let v = crashsim(
        &store,
        &[&out],
        &[("main", &id)],
        &[restored_or_not("dir", &old_out, &new)],
        &[],
        &["restore", s(&store), &spec, "--to", s(&out.join("dir"))],
    );
    holds(&v, 20);
}
