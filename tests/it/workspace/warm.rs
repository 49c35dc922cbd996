//! The overlay warm-up after a fold (docs/workspaces.md, "Warming the new overlay"): a
//! child walks the overlays a fold mounted, looking every entry up, through a detached copy
//! of their mounts, so the agent's next turn finds their inodes built; it never holds the
//! workspace, and whatever mounts or unmounts an overlay first stops it.

use crate::support::*;

use std::path::Path;

/// 20 directories of 50 files under `src/`.
fn populate(room: &Path) {
    for d in 0..20 {
        for f in 0..50 {
            write(&room.join(format!("src/d{d:02}/f{f:02}.txt")), b"x\n");
        }
    }
}

#[test]
fn after_a_fold_the_new_overlay_is_walked_in_the_background_and_the_walk_ends() {
    let w = Workspace::new(populate);
    write(&w.path("turn.txt"), b"work\n");
    let t0 = now_ns();
    let r = w.checkpoint_json("turn");
    assert_eq!(r["fold"]["folded"], true, "{r}");
    let rec = warm_record_after(&w.store, t0);
    let o = &rec["overlays"];
    assert_eq!(o.as_array().map(Vec::len), Some(1), "{rec}");
    assert_eq!(o[0]["mountpoint"], w.room(), "{rec}");
    assert_eq!(o[0]["complete"], true, "{rec}");
    assert!(o[0].get("error").is_none(), "{rec}");
    // Every directory listed and every entry looked up: the root's 2, src's 20, 20 x 50.
    assert_eq!(o[0]["dirs"], 22, "{rec}");
    assert_eq!(o[0]["entries"], 2 + 20 + 1000, "{rec}");
    assert_eq!(o[0]["looked_up"], 2 + 20 + 1000, "{rec}");
    eventually("the warm-up exits", || warm_processes(&w.store).is_empty());
    // A checkpoint that does not fold (a file open inside) starts none.
    let t1 = now_ns();
    let f = std::fs::File::open(w.path("turn.txt")).unwrap();
    write(&w.path("turn2.txt"), b"more\n");
    let r = w.checkpoint_json("held");
    assert_eq!(r["fold"]["folded"], false, "{r}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let last = warm_record(&w.store);
    assert!(last["finished_ns"].as_i64() < Some(t1), "{last}");
    drop(f);
}

#[test]
fn a_warm_up_under_way_holds_neither_the_next_fold_nor_umount_nor_the_next_mount() {
    let w = Workspace::new(populate);
    let hold = [("CKPTFS_TEST_WARM_HOLD_MS", "120000")];
    write(&w.path("turn1.txt"), b"one\n");
    let o = run_env(["checkpoint", w.room(), "-m", "one", "--json"], &hold);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["fold"]["folded"], true, "{r}");
    let first = warm_processes(&w.store);
    assert_eq!(first.len(), 1, "a warm-up holding its copy of the overlay");
    // The copy is no user of the workspace's mount: the next checkpoint folds, and stops it.
    write(&w.path("turn2.txt"), b"two\n");
    let o = run_env(["checkpoint", w.room(), "-m", "two", "--json"], &hold);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["fold"]["folded"], true, "{r}");
    assert!(
        r["fold"]["holders"].as_array().is_none_or(Vec::is_empty),
        "{r}"
    );
    let second = warm_processes(&w.store);
    assert_eq!(second.len(), 1, "{second:?}");
    assert_ne!(
        second, first,
        "the first warm-up was stopped by the second fold"
    );
    // umount stops it and waits for it: its record is written (stopped early) before
    // umount returns, and the same upper layer mounts again at once.
    let t0 = now_ns();
    ok(["umount", w.room()]);
    let rec = warm_record(&w.store);
    assert!(rec["finished_ns"].as_i64() > Some(t0), "{rec}");
    assert_eq!(rec["overlays"][0]["complete"], false, "{rec}");
    ok(["mount", w.store(), "--branch", "main"]);
    assert_eq!(std::fs::read(w.path("turn2.txt")).unwrap(), b"two\n");
    eventually("no warm-up is left", || warm_processes(&w.store).is_empty());
    // And the workspace works on: a turn, a checkpoint that folds.
    write(&w.path("turn3.txt"), b"three\n");
    let r = w.checkpoint_json("three");
    assert_eq!(r["fold"]["folded"], true, "{r}");
}
