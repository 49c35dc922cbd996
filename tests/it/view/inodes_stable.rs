//! Stable inode numbers (docs/inodes.md): every file and directory of a workspace keeps its
//! `st_ino` across walks, cache drops, copy-ups (chmod, write, rename), a checkpoint with an
//! unmount and a mount, and a switch away and back; a view shows the number the capture
//! recorded, in every checkpoint. Real overlay and FUSE mounts.

use crate::support::*;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

type Numbers = BTreeMap<PathBuf, u64>;

fn numbers(root: &Path) -> Numbers {
    let mut out: Numbers = inodes(root).into_iter().collect();
    out.insert(PathBuf::from("."), fs::metadata(root).unwrap().ino());
    out
}

fn drop_caches() {
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
}

fn populate(room: &Path) {
    small_tree(room);
    for d in 0..4 {
        for f in 0..5 {
            write(&room.join(format!("src/m{d}/f{f}.rs")), b"fn main() {}\n");
        }
    }
    fs::create_dir_all(room.join("empty")).unwrap();
}

/// Asserts the workspace shows `expect` exactly (same paths, same numbers).
#[track_caller]
fn assert_same(w: &Workspace, expect: &Numbers, after: &str) {
    let now = numbers(&w.room);
    let changed: Vec<_> = expect
        .iter()
        .filter(|(p, n)| now.get(*p) != Some(n))
        .map(|(p, n)| format!("{}: {n} -> {:?}", p.display(), now.get(p)))
        .collect();
    assert!(
        changed.is_empty() && now.len() == expect.len(),
        "after {after}, inode numbers changed: {changed:?} ({} entries, expected {})",
        now.len(),
        expect.len()
    );
}

#[test]
fn workspace_numbers_survive_cache_drops_copy_ups_remounts_and_switches() {
    let w = Workspace::new(populate);
    let mut expect = numbers(&w.room);
    // Uniform st_dev (xino): every entry is on the overlay's device.
    let dev = fs::metadata(&w.room).unwrap().dev();
    assert!(inodes(&w.room)
        .iter()
        .all(|(p, _)| fs::symlink_metadata(w.room.join(p)).unwrap().dev() == dev));
    assert_same(&w, &expect, "a second walk");
    drop_caches();
    assert_same(&w, &expect, "a cache drop");

    // Copy-up by chmod (metadata only), by write, by rename of a file and of a directory.
    fs::set_permissions(w.path("a.txt"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_same(&w, &expect, "chmod");
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(w.path("sub/b.txt"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"more\n").unwrap();
    drop(f);
    assert_same(&w, &expect, "a write");
    // After a cache drop, overlayfs finds the written copy's lower file by its file handle;
    // a second lookup revalidates what it found (no directory listing in between).
    drop_caches();
    for _ in 0..2 {
        let m = fs::symlink_metadata(w.path("sub/b.txt")).expect("stat of a copy after a drop");
        assert_eq!(m.ino(), expect[Path::new("sub/b.txt")]);
    }
    fs::rename(w.path("src/m0/f0.rs"), w.path("src/m1/moved.rs")).unwrap();
    let n = expect.remove(Path::new("src/m0/f0.rs")).unwrap();
    expect.insert(PathBuf::from("src/m1/moved.rs"), n);
    fs::rename(w.path("src/m2"), w.path("src/m2-renamed")).unwrap();
    expect = expect
        .into_iter()
        .map(|(p, n)| match p.strip_prefix("src/m2") {
            Ok(rest) => (Path::new("src/m2-renamed").join(rest), n),
            Err(_) => (p, n),
        })
        .collect();
    assert_same(&w, &expect, "renames");
    drop_caches();
    assert_same(&w, &expect, "copy-ups and a cache drop");
    // Looked up again: overlayfs revalidates the lower file it found through the copy's
    // origin (a dentry the kernel made from a file handle), and must keep it.
    assert_same(&w, &expect, "copy-ups, a cache drop and another walk");
    assert_eq!(
        fs::read(w.path("sub/b.txt")).unwrap(),
        b"beta\nmore\n",
        "a copy read after its origin was revalidated"
    );

    // Checkpoint, unmount, mount (a new lower view daemon, the upper folded into the base).
    w.checkpoint("turn 1");
    ok(["umount", w.room()]);
    ok(["mount", w.store(), "--branch", "main"]);
    // The workspace root included: it is a lower directory of a nested overlay, not the
    // overlay's root (which would show the new upper directory's number).
    assert_same(&w, &expect, "checkpoint + umount + mount");
    drop_caches();
    assert_same(&w, &expect, "a remount and a cache drop");

    // Switch away (another checkpoint) and back.
    let first = log_ids(&w.store, &[]).last().cloned().unwrap();
    ok(["fork", w.store(), &first, "--name", "alt"]);
    ok(["switch", w.room(), "--to", "alt"]);
    assert!(w.path("src/m2").is_dir(), "alt is the first checkpoint");
    ok(["switch", w.room(), "--to", "main"]);
    // Whether the switch away folded the upper layer of main or not, the root keeps its
    // number (checkpoint + umount + mount above gave it a fresh upper already).
    assert_same(&w, &expect, "a switch away and back");
}

#[test]
fn a_view_shows_the_captured_numbers_in_every_checkpoint() {
    let env = Env::new();
    let src = env.ws().to_path_buf();
    populate(&src);
    let native = numbers(&src);
    let first = capture(&env.store, &[]);
    write(&src.join("sub/b.txt"), b"changed\n");
    write(&src.join("new.txt"), b"new\n");
    let second = capture(&env.store, &[]);
    let native2 = numbers(&src);
    let mnt = env.path("view");
    fs::create_dir_all(&mnt).unwrap();
    for (id, expect) in [(&first, &native), (&second, &native2)] {
        let _g = MountGuard::new(&mnt);
        ok(["mount", &env.s(), id, s(&mnt)]);
        let shown = numbers(&mnt);
        for (p, n) in expect {
            if p != Path::new(".") {
                assert_eq!(shown.get(p), Some(n), "{} in {id}", p.display());
            }
        }
        drop_caches();
        assert_eq!(numbers(&mnt), shown, "a cache drop in a view");
    }
}

/// An upper layer made by a build before nested overlays (`upper/B/ROOT/`, the overlay's own
/// upper directory) is mounted as it was and its changes recorded; the fold that follows
/// replaces it with a nested one, and from then on the root keeps its number.
#[test]
fn an_upper_from_before_nested_overlays_is_used_then_replaced() {
    let w = Workspace::new(populate);
    write(&w.path("legacy.txt"), b"written under the old layout\n");
    ok(["umount", w.room()]);
    // What an older build left: the root's upper layer as the overlay's upper directory.
    let top = w.store.join("upper/main/.top-ws");
    let legacy = w.store.join("upper/main/ws");
    fs::rename(top.join("ws"), &legacy).unwrap();
    fs::remove_dir(&top).unwrap();
    // Its work dir's index named that upper directory (overlayfs checks): a fresh one here.
    fs::remove_dir_all(w.store.join("upper/main/.work-ws")).unwrap();
    ok(["mount", w.store(), "--branch", "main"]);
    let upperdir = |w: &Workspace| {
        let opts = mount_options(&w.room).unwrap();
        opts.split(',')
            .find_map(|o| o.strip_prefix("upperdir="))
            .unwrap()
            .to_string()
    };
    assert_eq!(upperdir(&w), legacy.display().to_string());
    assert_eq!(
        fs::read(w.path("legacy.txt")).unwrap(),
        b"written under the old layout\n"
    );
    let r = w.checkpoint_json("the old layout's changes");
    assert_eq!(r["fold"]["folded"], true, "{r}");
    assert!(!legacy.exists(), "the fold took the old upper away");
    assert_eq!(upperdir(&w), top.display().to_string());
    assert_eq!(
        fs::read(w.path("legacy.txt")).unwrap(),
        b"written under the old layout\n"
    );
    let expect = numbers(&w.room);
    write(&w.path("after.txt"), b"a change under the new layout\n");
    w.checkpoint("nested");
    ok(["umount", w.room()]);
    ok(["mount", w.store(), "--branch", "main"]);
    let now = numbers(&w.room);
    assert_eq!(
        now[Path::new(".")],
        expect[Path::new(".")],
        "the root's number"
    );
    assert_eq!(
        now[Path::new("legacy.txt")],
        expect[Path::new("legacy.txt")]
    );
}
