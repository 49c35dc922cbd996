//! Health of stores with live workspaces (kernel overlay mounts): gc keeps what a mounted
//! workspace stands on, and a `checkpoint` of a live workspace failed or aborted at its I/O
//! steps leaves the old state or the new one.

use std::fs;
use std::process::Command;

use crate::support::*;

fn populate(room: &std::path::Path) {
    fs::create_dir_all(room.join("src")).unwrap();
    fs::write(room.join("notes.md"), "notes\n").unwrap();
    fs::write(room.join("src/a.py"), "print(1)\n".repeat(500)).unwrap();
}

#[test]
fn gc_keeps_what_a_live_workspace_stands_on() {
    let w = Workspace::new(populate);
    let base = checkpoints(w.store())[0].clone();
    // A shell inside holds the fold, so the workspace keeps standing on its first base.
    let _inside = InsideShell::start(&w.room);
    let mut ids = Vec::new();
    for i in 0..3 {
        fs::write(w.path(&format!("turn{i}.txt")), format!("turn {i}\n")).unwrap();
        ids.push(w.checkpoint(&format!("turn {i}")));
    }
    let r = ok_json(["gc", w.store(), "--keep-last", "1", "--clear-cache"]);
    let left = checkpoints(w.store());
    let st: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(format!("{}/upper/main/base.json", w.store())).unwrap(),
    )
    .unwrap();
    let ws_base = st["base"].as_str().unwrap().to_string();
    assert!(left.contains(&ws_base), "workspace base pruned: {r}");
    assert!(left.contains(ids.last().unwrap()));
    assert_eq!(ws_base, base);
    // With the workspace mounted, the policy still prunes what nothing stands on.
    assert!(
        !left.contains(&ids[0]) && !left.contains(&ids[1]),
        "turns 0 and 1 kept: {r}"
    );
    assert_eq!(left.len(), 2, "{r}");
    // The mounted workspace still reads everything, including the lower layer.
    assert_eq!(
        fs::read_to_string(w.path("src/a.py")).unwrap(),
        "print(1)\n".repeat(500)
    );
    assert_eq!(fs::read_to_string(w.path("turn0.txt")).unwrap(), "turn 0\n");
    fs::write(w.path("after-gc.txt"), "x").unwrap();
    let id = w.checkpoint("after gc");
    assert_eq!(
        ok(["cat", w.store(), &format!("{id}:ws/src/a.py")]),
        "print(1)\n".repeat(500)
    );
    assert!(ok(["verify", w.store()]).contains("0 findings"));
    let o = run(["doctor", w.store(), "--json"]);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let problems: Vec<&serde_json::Value> = d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "error")
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn checkpoint_of_a_live_workspace_under_faults() {
    let w = Workspace::new(populate);
    fs::write(w.path("count.txt"), "0").unwrap();
    let steps = io_steps(["checkpoint", w.room(), "-m", "count"]);
    let points = spread(steps, 12);
    let mut n_iter = 0;
    for mode in ["fail", "abort"] {
        for &n in &points {
            n_iter += 1;
            let content = format!("iteration {n_iter}");
            fs::write(w.path("count.txt"), &content).unwrap();
            let old = head(w.store(), "main").unwrap();
            let o = run_fault(["checkpoint", w.room(), "-m", "faulty"], mode, n);
            let ctx = format!("checkpoint {mode}:{n}/{steps}: {}", stderr(&o));
            let r = run(["recover", w.store()]);
            assert!(r.status.success(), "{ctx}: recover: {}", stderr(&r));
            assert!(ok(["verify", w.store()]).contains("0 findings"), "{ctx}");
            let new = head(w.store(), "main").unwrap();
            if new != old {
                assert_eq!(
                    ok(["cat", w.store(), &format!("{new}:ws/count.txt")]),
                    content,
                    "{ctx}: new head is not the workspace's state"
                );
            }
            // The workspace keeps working: the next checkpoint records the same state.
            let id = w.checkpoint("after fault");
            assert_eq!(
                ok(["cat", w.store(), &format!("{id}:ws/count.txt")]),
                content,
                "{ctx}"
            );
        }
    }
}

/// The branch the workspace at `room` shows, by its state file and its mounts.
fn shown_branch(w: &Workspace) -> String {
    let st = ok_json(["status", w.room()]);
    let row = &st.as_array().unwrap()[0];
    assert_eq!(row["live"], true, "{st}");
    row["branch"].as_str().unwrap().to_string()
}

#[test]
fn switch_under_faults_leaves_the_old_workspace_or_the_new_one() {
    let w = Workspace::new(populate);
    fs::write(w.path("notes.md"), "main\n").unwrap();
    w.checkpoint("main");
    let main_head = head(w.store(), "main").unwrap();
    ok(["fork", w.store(), "main", "--name", "alt"]);
    ok(["switch", w.room(), "--to", "alt"]);
    fs::write(w.path("notes.md"), "alt\n").unwrap();
    w.checkpoint("alt");
    ok(["switch", w.room(), "--to", "main"]);
    let steps = io_steps(["switch", w.room(), "--to", "alt"]);
    ok(["switch", w.room(), "--to", "main"]);
    for mode in ["fail", "abort"] {
        for n in 1..=steps {
            let o = run_fault(["switch", w.room(), "--to", "alt"], mode, n);
            let ctx = format!("switch {mode}:{n}/{steps}: {}", stderr(&o));
            let r = run(["recover", w.store()]);
            assert!(r.status.success(), "{ctx}: recover: {}", stderr(&r));
            // Old state or new state: the room shows one whole branch, and status agrees.
            let notes = fs::read_to_string(w.path("notes.md")).unwrap();
            let branch = shown_branch(&w);
            match branch.as_str() {
                "main" => assert_eq!(notes, "main\n", "{ctx}"),
                "alt" => assert_eq!(notes, "alt\n", "{ctx}"),
                other => panic!("{ctx}: unexpected branch {other}"),
            }
            assert!(ok(["verify", w.store()]).contains("0 findings"), "{ctx}");
            let detached = format!("{}/", detached_dir(&w.store).display());
            assert!(
                !fs::read_to_string("/proc/self/mountinfo")
                    .unwrap()
                    .contains(&detached),
                "{ctx}: an old overlay was left mounted in {detached}"
            );
            // recover evicts every park: nothing is left parked, and no record.
            assert!(mounts_under(&parked_dir(&w.store)).is_empty(), "{ctx}");
            assert!(park_records(&w.store).is_empty(), "{ctx}");
            if branch == "alt" {
                ok(["switch", w.room(), "--to", "main"]);
            }
            assert_eq!(head(w.store(), "main").unwrap(), main_head, "{ctx}");
        }
    }
}

#[test]
fn checkpoints_and_gc_run_side_by_side() {
    let w = Workspace::new(populate);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for i in 0..8 {
                fs::write(w.path(&format!("turn{i}.txt")), format!("turn {i}\n")).unwrap();
                w.checkpoint(&format!("turn {i}"));
            }
        });
        sc.spawn(|| {
            for _ in 0..8 {
                ok(["gc", w.store(), "--keep-last", "2"]);
            }
        });
    });
    assert!(ok(["verify", w.store()]).contains("0 findings"));
    let id = w.checkpoint("last");
    for i in 0..8 {
        assert_eq!(
            ok(["cat", w.store(), &format!("{id}:ws/turn{i}.txt")]),
            format!("turn {i}\n")
        );
    }
}

#[test]
fn gc_never_removes_what_an_open_browse_view_shows() {
    let tmp = tempfile::tempdir().unwrap();
    let room = tmp.path().join("room");
    let store = tmp.path().join("store");
    let mnt = tmp.path().join("browse");
    fs::create_dir_all(&room).unwrap();
    fs::create_dir_all(&mnt).unwrap();
    let (st, rm, mn) = (s(&store), s(&room), s(&mnt));
    ok(["init", st, "--root", &format!("ws={rm}")]);
    let mut ids = Vec::new();
    for i in 0..4 {
        fs::write(room.join("f.txt"), format!("version {i}\n")).unwrap();
        ids.push(capture(st, &[]));
    }
    ok(["browse", st, mn]);
    let guard = MountGuard::new(&mnt);
    let gc = ok_json(["gc", st, "--keep-last", "1"]);
    for (i, id) in ids.iter().enumerate() {
        let p = mnt.join("checkpoints").join(id).join("ws/f.txt");
        let got = fs::read_to_string(&p);
        assert_eq!(got.unwrap(), format!("version {i}\n"), "{gc}");
    }
    drop(guard);
    // Without the view, the same policy prunes the old ones.
    ok(["gc", st, "--keep-last", "1"]);
    assert!(ok(["verify", st]).contains("0 findings"));
    assert_eq!(
        fs::read_dir(store.join("checkpoints")).unwrap().count(),
        1,
        "gc --keep-last 1 without a view keeps only the head"
    );
}

/// Checkpoint ids the live pins of the store's lower views list (the full and the bare one;
/// a view holding nothing is left out).
fn lower_pins(store: &str) -> Vec<Vec<String>> {
    live_pins(std::path::Path::new(store), "lower-")
        .into_iter()
        .filter(|ids| !ids.is_empty())
        .collect()
}

/// A process working in a workspace that `umount` detached (it had its cwd there) keeps
/// reading the old base through the lower view; gc keeps that base while it does, and prunes
/// it once the process has left.
#[test]
fn gc_keeps_the_base_a_detached_overlay_still_reads() {
    let w = Workspace::new(populate);
    let first = checkpoints(w.store())[0].clone();
    let inside = KillOnDrop(
        Command::new("sleep")
            .arg("600")
            .current_dir(&w.room)
            .spawn()
            .unwrap(),
    );
    let pid = inside.0.id();
    fs::write(w.path("turn.txt"), "turn\n").unwrap();
    let head = w.checkpoint("turn");
    ok(["umount", w.room()]);
    // Resumed: every change is in the head, so the head is the new base, and the first
    // checkpoint is neither a base nor a head any more.
    ok(["mount", w.store(), "--branch", "main"]);
    let st = fs::read_to_string(format!("{}/upper/main/base.json", w.store())).unwrap();
    assert!(st.contains(&head), "{st}");
    assert!(
        lower_pins(w.store()).iter().any(|p| p.contains(&first)),
        "{:?}",
        lower_pins(w.store())
    );
    let gc = ok(["gc", w.store(), "--keep-last", "1", "--json"]);
    assert!(checkpoints(w.store()).contains(&first), "{gc}");
    let old = format!("/proc/{pid}/cwd/src/a.py");
    assert_eq!(fs::read_to_string(&old).unwrap(), "print(1)\n".repeat(500));
    drop(inside);
    // The detached overlay goes with its last user, the old lower view with it.
    eventually("no lower view pins the first checkpoint", || {
        !lower_pins(w.store()).iter().any(|p| p.contains(&first))
    });
    let gc = ok(["gc", w.store(), "--keep-last", "1", "--json"]);
    assert!(!checkpoints(w.store()).contains(&first), "{gc}");
    assert_eq!(
        fs::read_to_string(w.path("src/a.py")).unwrap(),
        "print(1)\n".repeat(500)
    );
    assert!(ok(["verify", w.store()]).contains("0 findings"));
}

/// After `switch`, the lower view keeps the old base pinned while the kernel holds its
/// directory, and unpins it once the kernel forgets it (here: the shell left and the
/// caches were dropped).
#[test]
fn the_lower_view_unpins_a_base_the_kernel_forgot() {
    let w = Workspace::new(populate);
    let first = checkpoints(w.store())[0].clone();
    ok(["fork", w.store(), &first, "--name", "other"]);
    fs::write(w.path("turn.txt"), "turn\n").unwrap();
    let head = w.checkpoint("turn");
    // A new mount's base is the head it was mounted at: remount so main stands on `head`.
    ok(["umount", w.room()]);
    ok(["mount", w.store(), "--branch", "main"]);
    assert_eq!(lower_pins(w.store()), vec![vec![head.clone()]]);
    ok(["switch", w.room(), "--to", "other"]);
    // The kernel still caches the old overlay's lower directory: both stay pinned.
    let mut both = vec![first.clone(), head.clone()];
    both.sort();
    assert_eq!(lower_pins(w.store()), vec![both]);
    // The tree left is parked (docs/workspaces.md), its overlay mounted on main's base: gc
    // evicts the park, detaching it.
    ok(["gc", w.store()]);
    eventually("the lower view unpins main's old base", || {
        // Drops unused dentries and inodes: the kernel forgets the old base's directory.
        fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
        lower_pins(w.store()) == vec![vec![first.clone()]]
    });
    assert_eq!(
        fs::read_to_string(w.path("src/a.py")).unwrap(),
        "print(1)\n".repeat(500)
    );
}
