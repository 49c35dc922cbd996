//! Parking (src/workspace/park.rs): `switch` keeps the overlay of the branch it leaves
//! mounted read-only under `/run/ckptfs/<id>/parked/`, and a switch back moves that very
//! mount back, with the inodes the kernel cached for it. A switch back that would mount
//! something else (another base, another place) evicts the park and mounts fresh with nothing
//! lost; `umount`, `gc`, `recover` and `branch delete` evict; a record whose mounts vanished
//! is ignored. Real mounts, real git.

use crate::support::*;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn populate(room: &Path) {
    write(&room.join("src/a.py"), b"print('a')\n");
    write(&room.join("notes.md"), b"# notes\n");
}

fn ino(p: &Path) -> u64 {
    fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .ino()
}

/// A workspace on `main` with a checkpointed marker, and a branch `alt` to switch to.
fn with_alt() -> Workspace {
    let w = Workspace::new(populate);
    write(&w.path("marker.txt"), b"written before the switch\n");
    w.checkpoint("marker");
    ok(["fork", w.store(), "main", "--name", "alt"]);
    w
}

fn rows_of_kind<'a>(status: &'a Value, kind: &str) -> Vec<&'a Value> {
    status
        .as_array()
        .expect("status rows")
        .iter()
        .filter(|r| r["kind"] == kind)
        .collect()
}

#[test]
fn a_switch_back_moves_the_very_same_overlay_back() {
    let w = with_alt();
    let id = mount_id(&w.room).expect("main is mounted");
    let a_ino = ino(&w.path("src/a.py"));

    let v = ok_json(["switch", w.room(), "--to", "alt"]);
    assert_eq!(v["parked_left"], true, "{v}");
    assert_eq!(v["folded_left"], false, "{v}");
    let parked = parked_at(&w.store, "main", "ws");
    assert_eq!(
        mount_id(&parked),
        Some(id),
        "main's overlay is parked, not a new one"
    );
    assert_ne!(mount_id(&w.room), Some(id), "the room shows alt");
    assert!(park_record(&w.store, "main").is_file());
    // Read-only while parked: a process left there later cannot write into main.
    let e = fs::write(parked.join("new.txt"), b"x").expect_err("a parked tree is read-only");
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    // A directory held open in the parked tree keeps its overlay alive whatever happens (so
    // its mount id and device number cannot be reused by a fresh mount).
    let held = fs::File::open(parked.join("src")).unwrap();
    let dev = held.metadata().unwrap().dev();

    // status and branch list say main is parked, and where.
    let st = ok_json(["status", w.store()]);
    let p = rows_of_kind(&st, "parked");
    assert_eq!(p.len(), 1, "{st}");
    assert_eq!(p[0]["branch"], "main", "{st}");
    assert_eq!(p[0]["mountpoints"]["ws"], w.room(), "{st}");
    assert_eq!(p[0]["at"]["ws"], s(&parked), "{st}");
    let bl = ok_json(["branch", "list", w.store()]);
    let main = bl
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "main")
        .expect("main listed");
    assert_eq!(main["parked"], true, "{bl}");
    assert_eq!(main["mounted"], false, "{bl}");
    assert!(ok(["status", w.store()]).contains("parked: branch main"));
    assert!(ok(["doctor", w.store()]).contains("is parked"));

    let v = ok_json(["switch", w.room(), "--to", "main"]);
    assert_eq!(v["resumed"], true, "{v}");
    assert_eq!(
        mount_id(&w.room),
        Some(id),
        "the very same overlay mount is back"
    );
    assert_eq!(
        fs::metadata(&w.room).unwrap().dev(),
        dev,
        "the same overlay"
    );
    assert_eq!(
        held.metadata().unwrap().ino(),
        ino(&w.path("src")),
        "the directory held open is the one shown"
    );
    drop(held);
    assert_eq!(ino(&w.path("src/a.py")), a_ino);
    assert_eq!(
        fs::read(w.path("marker.txt")).unwrap(),
        b"written before the switch\n"
    );
    assert!(!park_record(&w.store, "main").exists());
    assert!(!parked.exists(), "its parking place is removed");
    // alt is parked in turn; main is writable again, and its checkpoints record.
    assert!(park_record(&w.store, "alt").is_file());
    write(&w.path("after.txt"), b"after the switch back\n");
    let c = w.checkpoint("after the switch back");
    assert_eq!(w.cat(&c, "after.txt"), b"after the switch back\n");
    assert_eq!(w.cat(&c, "marker.txt"), b"written before the switch\n");
}

#[test]
fn a_tree_someone_is_left_in_is_not_parked() {
    let w = with_alt();
    let mut sh = InsideShell::start(&w.path("src"));
    let v = ok_json(["switch", w.room(), "--to", "alt"]);
    assert_eq!(v["parked_left"], false, "{v}");
    assert!(!park_record(&w.store, "main").exists());
    assert!(sh.run("echo x > new.txt").contains("Read-only"));
    drop(sh);
    let v = ok_json(["switch", w.room(), "--to", "main"]);
    assert_eq!(v["resumed"], false, "{v}");
    assert_eq!(
        fs::read(w.path("marker.txt")).unwrap(),
        b"written before the switch\n"
    );
}

#[test]
fn a_park_that_does_not_match_is_evicted_and_the_branch_mounted_fresh() {
    let w = with_alt();
    // Changes of main waiting in its upper (checkpointed first, so not dirty, and kept in
    // the upper by the park: nothing is folded while parked).
    write(&w.path("waiting.txt"), b"in the upper\n");
    ok(["switch", w.room(), "--to", "alt", "--checkpoint-first"]);
    let st = ok_json(["status", w.store()]);
    let p = rows_of_kind(&st, "parked");
    assert!(p[0]["upper_bytes"].as_u64().unwrap() > 0, "{st}");

    // The record names another base than the one main's upper applies to (what a reset of
    // the branch would do): the switch back evicts, then mounts fresh.
    let rec_path = park_record(&w.store, "main");
    let mut rec: Value = serde_json::from_slice(&fs::read(&rec_path).unwrap()).unwrap();
    let first = log_ids(&w.store, &["--branch", "main"])
        .last()
        .cloned()
        .unwrap();
    assert_ne!(rec["base"], first.as_str());
    rec["base"] = first.as_str().into();
    fs::write(&rec_path, serde_json::to_vec(&rec).unwrap()).unwrap();

    let v = ok_json(["switch", w.room(), "--to", "main"]);
    assert_eq!(v["resumed"], false, "{v}");
    assert!(!park_record(&w.store, "main").exists());
    assert!(!mounted(&parked_at(&w.store, "main", "ws")));
    for (f, want) in [
        ("marker.txt", &b"written before the switch\n"[..]),
        ("waiting.txt", b"in the upper\n"),
    ] {
        assert_eq!(fs::read(w.path(f)).unwrap(), want, "{f}");
    }
    assert_eq!(ok_json(["status", w.room()])[0]["dirty"], false);
}

#[test]
fn a_branch_parked_from_one_place_mounts_fresh_at_another() {
    let w = with_alt();
    ok(["fork", w.store(), "main", "--name", "other"]);
    let elsewhere = w.tmp.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    ok([
        "mount",
        w.store(),
        "--branch",
        "other",
        "--at",
        s(&elsewhere),
        "--relocate",
    ]);
    let _guard = MountGuard::new(&elsewhere);
    ok(["switch", w.room(), "--to", "alt"]);
    assert!(park_record(&w.store, "main").is_file());
    // main, parked from the room, is asked for at `elsewhere`: evicted, then mounted there.
    let v = ok_json(["switch", s(&elsewhere), "--to", "main"]);
    assert_eq!(v["resumed"], false, "{v}");
    assert!(!park_record(&w.store, "main").exists());
    assert!(!mounted(&parked_at(&w.store, "main", "ws")));
    assert_eq!(
        fs::read(elsewhere.join("marker.txt")).unwrap(),
        b"written before the switch\n"
    );
    ok(["umount", s(&elsewhere)]);

    // The same for `mount --branch` at another place: main is parked again, then mounted
    // at `third`: evicted first, then mounted fresh there.
    ok(["switch", w.room(), "--to", "main"]);
    ok(["switch", w.room(), "--to", "alt"]);
    assert!(park_record(&w.store, "main").is_file());
    let third = w.tmp.path().join("third");
    fs::create_dir(&third).unwrap();
    ok([
        "mount",
        w.store(),
        "--branch",
        "main",
        "--at",
        s(&third),
        "--relocate",
    ]);
    let _guard = MountGuard::new(&third);
    assert!(!park_record(&w.store, "main").exists());
    assert!(!mounted(&parked_at(&w.store, "main", "ws")));
    assert_eq!(
        fs::read(third.join("marker.txt")).unwrap(),
        b"written before the switch\n"
    );
    ok(["umount", s(&third)]);
}

#[test]
fn a_park_whose_mounts_vanished_is_ignored() {
    let w = with_alt();
    let id = mount_id(&w.room).expect("mounted");
    ok(["switch", w.room(), "--to", "alt"]);
    let parked = parked_at(&w.store, "main", "ws");
    assert_eq!(mount_id(&parked), Some(id));
    // What a reboot does to every mount (the record, in the store, stays).
    let o = Command::new("umount")
        .arg("-l")
        .arg(&parked)
        .output()
        .unwrap();
    assert!(o.status.success());
    let v = ok_json(["switch", w.room(), "--to", "main"]);
    assert_eq!(v["resumed"], false, "{v}");
    assert!(!park_record(&w.store, "main").exists());
    assert_eq!(
        fs::read(w.path("marker.txt")).unwrap(),
        b"written before the switch\n"
    );
}

#[test]
fn an_unreadable_park_record_is_evicted_not_a_failure() {
    let w = with_alt();
    ok(["switch", w.room(), "--to", "alt"]);
    // What another build's record, or a damaged one, looks like to this one.
    fs::write(
        park_record(&w.store, "main"),
        b"{\"not\": \"a park record\"}",
    )
    .unwrap();
    let bl = ok_json(["branch", "list", w.store()]);
    assert!(
        bl.as_array().unwrap().iter().all(|b| b["parked"] == false),
        "{bl}"
    );
    let v = ok_json(["switch", w.room(), "--to", "main"]);
    assert_eq!(v["resumed"], false, "{v}");
    assert!(!park_record(&w.store, "main").exists());
    assert!(mounts_under(&parked_dir(&w.store).join("main")).is_empty());
    assert_eq!(
        fs::read(w.path("marker.txt")).unwrap(),
        b"written before the switch\n"
    );
}

#[test]
fn parks_are_bounded_and_umount_leaves_nothing_mounted() {
    let w = with_alt();
    for b in ["third", "fourth"] {
        ok(["fork", w.store(), "main", "--name", b]);
    }
    for b in ["alt", "third", "fourth"] {
        ok(["switch", w.room(), "--to", b]);
    }
    // main, alt and third were left; at most two stay parked: main (the oldest) went.
    assert_eq!(park_records(&w.store), ["alt", "third"]);
    assert!(mounted(&parked_at(&w.store, "alt", "ws")));
    assert!(!mounted(&parked_at(&w.store, "main", "ws")));

    ok(["umount", w.room()]);
    let dir = store_mounts_dir(&w.store);
    assert!(
        wait_for(std::time::Duration::from_secs(10), || mounts_under(&dir)
            .is_empty()),
        "mounts left under {}: {:?}",
        dir.display(),
        mounts_under(&dir)
    );
    assert!(park_records(&w.store).is_empty());
    assert!(!dir.exists(), "{} is removed", dir.display());
}

#[test]
fn gc_recover_and_branch_delete_evict() {
    let w = with_alt();
    ok(["fork", w.store(), "main", "--name", "third"]);
    ok(["switch", w.room(), "--to", "alt"]);
    ok(["gc", w.store()]);
    assert!(park_records(&w.store).is_empty());
    assert!(!mounted(&parked_at(&w.store, "main", "ws")));

    ok(["switch", w.room(), "--to", "third"]);
    assert_eq!(park_records(&w.store), ["alt"]);
    // A parked mount no record names is a doctor warning that recover repairs.
    fs::remove_file(park_record(&w.store, "alt")).unwrap();
    let o = run(["doctor", w.store()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("no park record names it"), "{out}");
    let out = ok(["recover", w.store()]);
    assert!(out.contains("parked"), "{out}");
    assert!(park_records(&w.store).is_empty());
    assert!(!mounted(&parked_at(&w.store, "alt", "ws")));

    ok(["switch", w.room(), "--to", "main"]);
    assert_eq!(park_records(&w.store), ["third"]);
    ok(["branch", "delete", w.store(), "third"]);
    assert!(park_records(&w.store).is_empty());
    assert!(!mounted(&parked_at(&w.store, "third", "ws")));
    assert!(mounts_under(&parked_dir(&w.store)).is_empty());
}

#[test]
fn git_status_after_a_switch_back_changes_nothing() {
    let w = Workspace::new(|room| {
        for d in 0..4 {
            write(&room.join(format!("src/m{d}/f.rs")), b"fn f() {}\n");
        }
        // Written long before the index: no racily clean entry makes git rewrite it later.
        let old = (std::time::SystemTime::now() - std::time::Duration::from_secs(86_400))
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64;
        for d in 0..4 {
            set_mtime(&room.join(format!("src/m{d}/f.rs")), old);
        }
    });
    git(&w.room, &["init", "-q", "-b", "main"]);
    git(&w.room, &["add", "-A"]);
    git(&w.room, &["commit", "-qm", "initial"]);
    git(&w.room, &["config", "core.untrackedCache", "true"]);
    git(&w.room, &["update-index", "--untracked-cache"]);
    git(&w.room, &["status", "--porcelain"]);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    git(&w.room, &["status", "--porcelain"]);
    // The checkpoint folds (a new overlay): git may refresh its index once after it.
    w.checkpoint("the repository");
    git(&w.room, &["status", "--porcelain"]);
    ok(["fork", w.store(), "main", "--name", "alt"]);
    let index = w.path(".git/index");
    let before = (modified(&index), fs::read(&index).unwrap());

    ok(["switch", w.room(), "--to", "alt", "--checkpoint-first"]);
    let v = ok_json(["switch", w.room(), "--to", "main", "--checkpoint-first"]);
    assert_eq!(v["resumed"], true, "{v}");
    assert_eq!(git(&w.room, &["status", "--porcelain"]), "");
    assert!(
        modified(&index) == before.0 && fs::read(&index).unwrap() == before.1,
        "git rewrote its index after a switch away and back"
    );
}
