//! Hardlinks as part of a checkpoint (store format 3, `CKT3` trees): captured as link groups
//! within a root, restored as links, shown by views as one inode with its link count, kept
//! joined by workspaces across copy-up, reported by `diff`; and a store made by the code before
//! them (format 2, `tests/data/store-v2-hardlinks.tar.gz`) reads exactly as before.

use crate::support::*;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

/// `a`, `sub/b` and `sub/deeper/c` are one file; `solo` another, with nlink 2 but its other
/// name outside the root; `plain` is not linked.
fn linked_room(room: &Path, outside: &Path) {
    write(&room.join("a"), b"shared bytes\n");
    fs::create_dir_all(room.join("sub/deeper")).unwrap();
    fs::hard_link(room.join("a"), room.join("sub/b")).unwrap();
    fs::hard_link(room.join("a"), room.join("sub/deeper/c")).unwrap();
    write(&room.join("solo"), b"solo\n");
    fs::hard_link(room.join("solo"), outside).unwrap();
    write(&room.join("plain"), b"plain\n");
}

fn st(p: &Path) -> fs::Metadata {
    fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Asserts `dir` holds the linked room: the three names one inode with nlink 3, the others
/// files of their own with nlink 1, all bytes right.
#[track_caller]
fn assert_linked(dir: &Path, what: &str) {
    let a = st(&dir.join("a"));
    for n in ["sub/b", "sub/deeper/c"] {
        let m = st(&dir.join(n));
        assert_eq!(m.ino(), a.ino(), "{what}: {n} is not a link of a");
        assert_eq!(m.nlink(), 3, "{what}: {n} link count");
        assert_eq!(fs::read(dir.join(n)).unwrap(), b"shared bytes\n", "{what}");
    }
    assert_eq!(a.nlink(), 3, "{what}: a's link count");
    for n in ["solo", "plain"] {
        let m = st(&dir.join(n));
        assert_eq!(m.nlink(), 1, "{what}: {n} has no other name in the root");
        assert_ne!(m.ino(), a.ino(), "{what}: {n}");
    }
}

fn tree_magic(store: &Path, id: &str) -> Vec<u8> {
    let rec = record(store, id);
    let tree = rec["roots"]["ws"]["tree"].as_str().unwrap().to_string();
    let path = store.join("objects").join(&tree[..2]).join(&tree[2..]);
    fs::read(path).unwrap()[..4].to_vec()
}

#[test]
fn a_linked_tree_round_trips_through_capture_restore_and_a_view() {
    let env = Env::new();
    linked_room(env.ws(), &env.path("outside-name"));
    let id = capture(&env.store, &[]);
    assert_eq!(
        tree_magic(&env.store, &id),
        b"CKT3",
        "the root holds a link"
    );
    let cfg: serde_json::Value =
        serde_json::from_slice(&fs::read(env.store.join("STORE.json")).unwrap()).unwrap();
    assert_eq!(cfg["version"], 3);
    // The recorded link counts are the names in the root: `ls` shows them.
    let ls = ok(["ls", &env.s(), &format!("{id}:ws/sub")]);
    assert!(ls.contains('b'), "{ls}");

    // restore --to: the names are links again.
    let out = env.path("restored");
    ok(["restore", &env.s(), &id, "--to", s(&out)]);
    assert_linked(&out, "restore");

    // A view: one inode (st_ino, st_nlink) for the three names, also after a cache drop.
    let mnt = env.path("view");
    fs::create_dir_all(&mnt).unwrap();
    let _g = MountGuard::new(&mnt);
    ok(["mount", &env.s(), &id, s(&mnt)]);
    assert_linked(&mnt, "view");
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    assert_linked(&mnt, "view after a cache drop");
    // What tar -c and rsync -H rely on: tar stores the later names as links.
    let tarball = env.path("t.tar");
    let st = Command::new("tar")
        .arg("-cf")
        .arg(&tarball)
        .arg("-C")
        .arg(&mnt)
        .arg(".")
        .status()
        .unwrap();
    assert!(st.success());
    let listing = Command::new("tar")
        .arg("-tvf")
        .arg(&tarball)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert_eq!(
        listing.matches(" link to ").count(),
        2,
        "tar sees two links: {listing}"
    );
}

#[test]
fn diff_reports_links_made_and_broken() {
    let env = Env::new();
    write(&env.ws().join("a"), b"x\n");
    write(&env.ws().join("b"), b"x\n");
    let first = capture(&env.store, &[]);
    fs::remove_file(env.ws().join("b")).unwrap();
    fs::hard_link(env.ws().join("a"), env.ws().join("b")).unwrap();
    let second = capture(&env.store, &[]);
    let d = ok(["diff", &env.s(), &first, &second]);
    assert!(
        d.contains("links     ws/a (names in the root: 2, was 1)\n"),
        "{d}"
    );
    assert!(
        d.contains("links     ws/b (names in the root: 2, was 1)\n"),
        "{d}"
    );
    let back = ok(["diff", &env.s(), &second, &first]);
    assert!(
        back.contains("links     ws/b (names in the root: 1, was 2)\n"),
        "{back}"
    );
    let j = ok_json(["diff", &env.s(), &first, &second, "--json"]);
    let b = j
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == "ws/b" && c["change"] == "links")
        .unwrap_or_else(|| panic!("{j}"));
    assert_eq!(
        (b["nlink"].as_u64(), b["nlink_before"].as_u64()),
        (Some(2), Some(1))
    );
}

/// The fixture: a format-2 store made by the build before hardlinks, holding one checkpoint
/// of `a` and `sub/b` (hardlinked when captured), `c` and a symlink `l -> a`.
fn old_store(tmp: &Path) -> std::path::PathBuf {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/store-v2-hardlinks.tar.gz");
    let st = Command::new("tar")
        .arg("-xzf")
        .arg(&fixture)
        .arg("-C")
        .arg(tmp)
        .status()
        .unwrap();
    assert!(st.success());
    tmp.join("store")
}

#[test]
fn a_store_made_before_hardlinks_reads_as_before_and_stays_format_2() {
    let tmp = tempfile::tempdir().unwrap();
    let store = old_store(tmp.path());
    let id = "f33d2d832cff942514c22e982a74869ff67fc24bd9ebf19bdd8c26ca9a913a7c";
    assert!(ok(["verify", s(&store)]).contains("0 findings"));
    // What the old build listed (modes, owners, sizes, times, targets), in today's `ls`
    // layout (the old one printed `-0644     0     0            7 2026-12-01T11:53:00 a`).
    assert_eq!(
        stdout(&run_env(["ls", s(&store), "main:ws/"], &[("TZ", "UTC")])),
        "-rw-r--r--  root  root  7  2026-12-01 11:53:00 +00:00  a\n\
         -rw-r--r--  root  root  6  2026-12-01 11:53:00 +00:00  c\n\
         lrwxrwxrwx  root  root  1  2026-12-01 11:53:00 +00:00  l -> a\n\
         drwxr-xr-x  root  root  -  2026-12-01 11:53:00 +00:00  sub\n"
    );
    assert_eq!(tree_magic(&store, id), b"CKT2");
    // Each name is a file of its own, as the old build restored it.
    let out = tmp.path().join("out");
    ok(["restore", s(&store), id, "--to", s(&out)]);
    assert_eq!(fs::read(out.join("a")).unwrap(), b"linked\n");
    assert_eq!(fs::read(out.join("sub/b")).unwrap(), b"linked\n");
    assert_ne!(st(&out.join("a")).ino(), st(&out.join("sub/b")).ino());
    assert_eq!(st(&out.join("a")).nlink(), 1);
    // A new capture into it records no links and leaves it at format 2, so the old build
    // still reads everything in it.
    let room = tmp.path().join("room");
    linked_room(&room, &tmp.path().join("outside-name"));
    let new = ok_json([
        "capture",
        s(&store),
        "--from",
        &format!("ws={}", room.display()),
    ]);
    let new = new["id"].as_str().unwrap();
    assert_eq!(tree_magic(&store, new), b"CKT2");
    let cfg: serde_json::Value =
        serde_json::from_slice(&fs::read(store.join("STORE.json")).unwrap()).unwrap();
    assert_eq!(cfg["version"], 2);
}

/// Asserts the names in `names` are one inode with `n` links holding `bytes`.
#[track_caller]
fn assert_group(dir: &Path, names: &[&str], n: u64, bytes: &[u8], what: &str) {
    let first = st(&dir.join(names[0]));
    for name in names {
        let m = st(&dir.join(name));
        assert_eq!(
            m.ino(),
            first.ino(),
            "{what}: {name} is not a link of {}",
            names[0]
        );
        assert_eq!(m.nlink(), n, "{what}: {name}'s link count");
        assert_eq!(
            fs::read(dir.join(name)).unwrap(),
            bytes,
            "{what}: {name}'s bytes"
        );
    }
}

#[test]
fn a_workspace_keeps_links_joined_across_copy_up_checkpoints_and_remounts() {
    let w = Workspace::new(|room| {
        let outside = room.parent().unwrap().join("outside-name");
        linked_room(room, &outside);
    });
    let all = ["a", "sub/b", "sub/deeper/c"];
    assert_linked(&w.room, "workspace");
    // Write through one name, read through the others (overlayfs index=on).
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(w.path("sub/b"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"appended\n").unwrap();
    drop(f);
    let now = b"shared bytes\nappended\n";
    assert_group(&w.room, &all, 3, now, "after a write through sub/b");
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    assert_group(&w.room, &all, 3, now, "after a cache drop");

    // The checkpoint records what the workspace shows: every name the new bytes, one group.
    let id = w.checkpoint("wrote through one name");
    for n in all {
        assert_eq!(w.cat(&id, n), now, "{n} in the checkpoint");
    }
    let mnt = w.tmp.path().join("view");
    fs::create_dir_all(&mnt).unwrap();
    {
        let _g = MountGuard::new(&mnt);
        ok(["mount", w.store(), &id, s(&mnt)]);
        assert_group(&mnt, &all, 3, now, "a view of the checkpoint");
    }
    ok(["umount", w.room()]);
    ok(["mount", w.store(), "--branch", "main"]);
    assert_group(&w.room, &all, 3, now, "after umount + mount");

    // A link made in the workspace, and a name removed from a group.
    fs::hard_link(w.path("plain"), w.path("sub/plain-too")).unwrap();
    fs::remove_file(w.path("sub/deeper/c")).unwrap();
    let id = w.checkpoint("linked plain, removed c");
    let out = w.tmp.path().join("restored");
    ok(["restore", w.store(), &id, "--to", s(&out)]);
    assert_group(&out, &["a", "sub/b"], 2, now, "restore: the group lost c");
    assert_group(
        &out,
        &["plain", "sub/plain-too"],
        2,
        b"plain\n",
        "restore: a new group",
    );
    assert!(!out.join("sub/deeper/c").exists());
}

#[test]
fn a_remount_of_a_workspace_with_unrecorded_changes_keeps_links_and_numbers() {
    let w = Workspace::new(|room| {
        let outside = room.parent().unwrap().join("outside-name");
        linked_room(room, &outside);
    });
    let all = ["a", "sub/b", "sub/deeper/c"];
    fs::write(w.path("sub/b"), b"rewritten\n").unwrap();
    fs::write(w.path("plain"), b"plain, changed\n").unwrap();
    let before: Vec<u64> = ["a", "plain"]
        .iter()
        .map(|n| st(&w.path(n)).ino())
        .collect();
    // Unmounted with the changes unrecorded: the lower view's daemon goes, a new one serves
    // the next mount, and overlayfs must still find the lower files of its copies.
    ok(["umount", w.room()]);
    ok(["mount", w.store(), "--branch", "main"]);
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    assert_group(&w.room, &all, 3, b"rewritten\n", "after a remount");
    let after: Vec<u64> = ["a", "plain"]
        .iter()
        .map(|n| st(&w.path(n)).ino())
        .collect();
    assert_eq!(
        after, before,
        "copied-up files keep their numbers across a remount"
    );
}

/// A name of a lower link group removed, and nothing else changed: the upper layer then holds
/// no linked file, only a whiteout at the root, yet the group lost a name, so the checkpoint
/// records the other two as a group of two (a view shows their link count), not of three.
#[test]
fn a_name_removed_from_a_lower_group_leaves_a_group_of_the_others() {
    let w = Workspace::new(|room| {
        let outside = room.parent().unwrap().join("outside-name");
        linked_room(room, &outside);
    });
    fs::remove_file(w.path("a")).unwrap();
    let left = ["sub/b", "sub/deeper/c"];
    assert_group(&w.room, &left, 2, b"shared bytes\n", "the workspace");
    let id = w.checkpoint("removed a");
    let mnt = w.tmp.path().join("view");
    fs::create_dir_all(&mnt).unwrap();
    let _g = MountGuard::new(&mnt);
    ok(["mount", w.store(), &id, s(&mnt)]);
    assert!(!mnt.join("a").exists(), "a is gone from the checkpoint");
    assert_group(
        &mnt,
        &left,
        2,
        b"shared bytes\n",
        "a view of the checkpoint",
    );
}

/// A linked file beside a directory whose path from the root is longer than the depth bound
/// counts in levels (five names of 250 bytes): the checkpoint's pass over the link groups walks
/// that stored directory by its path, and counts its depth in levels, not in bytes.
#[test]
fn a_hard_link_beside_a_long_stored_path_checkpoints() {
    let long: Vec<String> = (0..5).map(|i| format!("{i}{}", "n".repeat(249))).collect();
    let deep = long.join("/");
    let w = Workspace::new(|room| {
        fs::create_dir_all(room.join(&deep)).unwrap();
        write(&room.join(&deep).join("f"), b"far\n");
        write(&room.join("plain"), b"plain\n");
    });
    fs::hard_link(w.path("plain"), w.path("plain-too")).unwrap();
    let id = w.checkpoint("a link beside a long path");
    assert_eq!(w.cat(&id, &format!("{deep}/f")), b"far\n");
    let out = w.tmp.path().join("restored");
    ok(["restore", w.store(), &id, "--to", s(&out)]);
    assert_group(&out, &["plain", "plain-too"], 2, b"plain\n", "restore");
    assert_eq!(fs::read(out.join(&deep).join("f")).unwrap(), b"far\n");
}
