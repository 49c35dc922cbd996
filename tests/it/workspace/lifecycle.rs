//! Live workspaces: checkpoint, switch with a busy cwd, fork independence, dirty refusal,
//! discard, branch lifecycle, survival of a crashed daemon.

use std::fs;
use std::io::Write;
use std::process::Command;

use crate::support::*;

fn populate(room: &std::path::Path) {
    fs::create_dir_all(room.join("src/pkg")).unwrap();
    fs::write(room.join("src/pkg/a.py"), "print('a')\n").unwrap();
    fs::write(room.join("notes.md"), "# notes\n").unwrap();
    fs::write(room.join("big.bin"), vec![7u8; 3 << 20]).unwrap();
    std::os::unix::fs::symlink("src/pkg", room.join("pkg")).unwrap();
}

#[test]
fn checkpoint_records_changes_and_keeps_untouched_subtrees() {
    let w = Workspace::new(populate);
    assert!(mounted(&w.room));
    fs::write(w.path("notes.md"), "# notes\nmore\n").unwrap();
    fs::create_dir(w.path("new")).unwrap();
    fs::write(w.path("new/file.txt"), "hello").unwrap();
    fs::remove_file(w.path("pkg")).unwrap();
    fs::rename(w.path("src"), w.path("src2")).unwrap(); // a lower directory: no EXDEV
    let id = w.checkpoint("turn 1");
    let ls = ok(["ls", w.store(), &format!("{id}:ws"), "-r"]);
    assert!(ls.contains("src2/pkg/a.py"), "{ls}");
    assert!(ls.contains("new/file.txt"));
    assert!(
        !ls.contains(" pkg ->"),
        "deleted symlink still listed: {ls}"
    );
    assert!(!ls.lines().any(|l| l.ends_with(" src")), "{ls}");
    assert_eq!(
        ok(["cat", w.store(), &format!("{id}:ws/notes.md")]),
        "# notes\nmore\n"
    );
    assert_eq!(
        ok(["cat", w.store(), &format!("{id}:ws/src2/pkg/a.py")]),
        "print('a')\n"
    );
    let log: serde_json::Value = ok_json(["log", w.store(), "--branch", "main"]);
    let parent = log[1]["id"].as_str().unwrap().to_string();
    let diff = ok(["diff", w.store(), &parent, &id]);
    for want in [
        "modified  ws/notes.md",
        "added     ws/new",
        "removed   ws/pkg",
        "added     ws/src2",
    ] {
        assert!(diff.contains(want), "missing {want:?} in diff:\n{diff}");
    }
    // An unchanged big file is neither re-read nor re-stored on the next checkpoint.
    let v: serde_json::Value = ok_json(["show", w.store(), &id]);
    assert_eq!(v["checkpoint"]["stats"]["files"], 4); // a.py, notes.md, big.bin, new/file.txt
    let before = ok(["checkpoint", w.room(), "--json", "--allow-empty"]);
    let b: serde_json::Value = serde_json::from_str(&before).unwrap();
    assert_eq!(b["checkpoint"]["stats"]["new_objects"], 0, "{before}");
    assert!(ok(["verify", w.store()]).contains("0 findings"));
}

#[test]
fn switch_back_and_forth_with_a_shell_inside() {
    let w = Workspace::new(populate);
    fs::write(w.path("notes.md"), "main version\n").unwrap();
    let main1 = w.checkpoint("main work");
    ok(["fork", w.store(), &main1, "--name", "alt"]);
    // A shell keeps its cwd inside the mount during every switch.
    let mut shell = Command::new("sh")
        .arg("-c")
        .arg("sleep 60")
        .current_dir(w.path("src"))
        .spawn()
        .unwrap();
    ok(["switch", w.room(), "--to", "alt"]);
    fs::write(w.path("notes.md"), "alt version\n").unwrap();
    fs::write(w.path("alt-only.txt"), "x").unwrap();
    let alt1 = w.checkpoint("alt work");
    for _ in 0..3 {
        ok(["switch", w.room(), "--to", "main"]);
        assert_eq!(
            fs::read_to_string(w.path("notes.md")).unwrap(),
            "main version\n"
        );
        assert!(!w.path("alt-only.txt").exists());
        assert_eq!(fs::read(w.path("big.bin")).unwrap(), vec![7u8; 3 << 20]);
        ok(["switch", w.room(), "--to", "alt"]);
        assert_eq!(
            fs::read_to_string(w.path("notes.md")).unwrap(),
            "alt version\n"
        );
        assert!(w.path("alt-only.txt").exists());
    }
    assert!(
        shell.try_wait().unwrap().is_none(),
        "the shell inside must survive switches"
    );
    shell.kill().unwrap();
    let _ = shell.wait();
    // Switching to a checkpoint that is no branch head starts a new branch.
    let out = ok(["switch", w.room(), "--to", &main1[..12], "--name", "retry"]);
    assert!(out.contains("retry"), "{out}");
    assert_eq!(
        fs::read_to_string(w.path("notes.md")).unwrap(),
        "main version\n"
    );
    let branches = ok(["branch", "list", w.store(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&branches).unwrap();
    let retry = v
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "retry")
        .unwrap();
    assert_eq!(retry["forked_from"], main1.as_str());
    assert_eq!(retry["mounted"], true);
    let _ = alt1;
}

#[test]
fn switch_refuses_a_branch_mounted_elsewhere() {
    let w = Workspace::new(populate);
    ok(["fork", w.store(), "main", "other"]);
    let elsewhere = w.tmp.path().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    ok([
        "mount",
        w.store(),
        "--branch",
        "other",
        "--at",
        s(&elsewhere),
        "--relocate",
    ]);
    fs::write(elsewhere.join("notes.md"), "written in other\n").unwrap();
    ok(["checkpoint", s(&elsewhere), "-m", "other's own"]);
    // Two overlays on other's one upper layer would corrupt it: refused, naming where.
    let head = ok_json(["log", w.store(), "-b", "other", "-n", "1", "--json"])[0]["id"]
        .as_str()
        .expect("id")
        .to_string();
    for target in ["other", &head] {
        let o = run(["switch", w.room(), "--to", target, "--checkpoint-first"]);
        assert_eq!(
            o.status.code(),
            Some(1),
            "switch to {target}: {}",
            stderr(&o)
        );
        let err = stderr(&o);
        assert!(err.contains("branch other is already mounted at"), "{err}");
        assert!(err.contains(s(&elsewhere)), "{err}");
    }
    // Nothing moved: main still here, other still there with its change.
    assert_eq!(fs::read_to_string(w.path("notes.md")).unwrap(), "# notes\n");
    assert_eq!(
        fs::read_to_string(elsewhere.join("notes.md")).unwrap(),
        "written in other\n"
    );
    ok(["umount", s(&elsewhere)]);
    ok(["switch", w.room(), "--to", "other", "--checkpoint-first"]);
    assert_eq!(
        fs::read_to_string(w.path("notes.md")).unwrap(),
        "written in other\n"
    );
}

#[test]
fn switch_refuses_dirty_state_unless_told() {
    let w = Workspace::new(populate);
    ok(["fork", w.store(), "main", "--name", "other"]);
    fs::write(w.path("notes.md"), "unsaved\n").unwrap();
    let o = run(["switch", w.room(), "--to", "other"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("un-checkpointed"), "{err}");
    assert_eq!(fs::read_to_string(w.path("notes.md")).unwrap(), "unsaved\n");
    // --discard sets the change aside under displaced/, never deleting it.
    ok(["switch", w.room(), "--to", "other", "--discard"]);
    assert_eq!(fs::read_to_string(w.path("notes.md")).unwrap(), "# notes\n");
    let found = sh(&format!("grep -rl unsaved {}/displaced", w.store()));
    assert!(found.contains("notes.md"), "{found}");
    // --checkpoint-first records the change on the branch being left.
    fs::write(w.path("notes.md"), "other work\n").unwrap();
    ok(["switch", w.room(), "--to", "main", "--checkpoint-first"]);
    assert_eq!(ok(["cat", w.store(), "other:ws/notes.md"]), "other work\n");
    assert_eq!(fs::read_to_string(w.path("notes.md")).unwrap(), "# notes\n");
}

#[test]
fn forks_are_independent() {
    let w = Workspace::new(populate);
    let base = ok_json(["checkpoint", w.room(), "-m", "base", "--allow-empty"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    ok(["fork", w.store(), &base, "--name", "f1"]);
    fs::write(w.path("notes.md"), "main after fork\n").unwrap();
    w.checkpoint("main moves on");
    ok(["switch", w.room(), "--to", "f1"]);
    assert_eq!(fs::read_to_string(w.path("notes.md")).unwrap(), "# notes\n");
    fs::write(w.path("notes.md"), "fork work\n").unwrap();
    w.checkpoint("fork work");
    assert_eq!(
        ok(["cat", w.store(), "main:ws/notes.md"]),
        "main after fork\n"
    );
    assert_eq!(ok(["cat", w.store(), "f1:ws/notes.md"]), "fork work\n");
    let graph = ok(["log", w.store(), "--graph"]);
    assert!(
        graph.contains("(f1)") && graph.contains("(main)"),
        "{graph}"
    );
    assert!(
        graph.lines().filter(|l| l.contains('*')).count() >= 4,
        "{graph}"
    );
}

#[test]
fn branch_archive_unarchive_delete() {
    let w = Workspace::new(populate);
    ok(["fork", w.store(), "main", "--name", "old"]);
    ok(["branch", "archive", w.store(), "old"]);
    assert!(!ok(["branch", "list", w.store()]).contains("old"));
    assert!(ok(["branch", "list", w.store(), "--all"]).contains("archived"));
    ok(["branch", "unarchive", w.store(), "old"]);
    assert!(ok(["branch", "list", w.store()]).contains("old"));
    // main is mounted: delete refuses.
    let o = run(["branch", "delete", w.store(), "main"]);
    assert_eq!(o.status.code(), Some(1));
    ok(["branch", "delete", w.store(), "old"]);
    assert!(!ok(["branch", "list", w.store(), "--all"]).contains("old"));
    // The checkpoint it pointed at is still there (only gc removes checkpoints).
    assert!(ok(["verify", w.store()]).contains("0 findings"));
}

#[test]
fn fsynced_data_survives_unmount_and_resume() {
    let w = Workspace::new(populate);
    {
        let mut f = fs::File::create(w.path("precious.txt")).unwrap();
        f.write_all(b"fsynced data").unwrap();
        f.sync_all().unwrap();
    }
    // Simulate a crash of the mount: detach it behind ckptfs's back.
    sh(&format!("umount -l {}", w.room()));
    assert!(!mounted(&w.room));
    ok(["mount", w.store(), "--branch", "main"]);
    assert_eq!(
        fs::read_to_string(w.path("precious.txt")).unwrap(),
        "fsynced data"
    );
    let st = ok(["status", w.store()]);
    assert!(st.contains("changed since the last checkpoint"), "{st}");
}

/// Rounds of mixed changes (new, edited, deleted, renamed files and directories, a replaced
/// directory, chmod, symlinks, xattrs, hard links to lower and to new files), each
/// checkpointed: every checkpoint records what a plain `capture` of what the mount shows
/// records: the same entries, the same totals (files, bytes, directories, symlinks), and the
/// inode numbers the mount showed for files, directories and symlinks. Once with a fold at
/// every checkpoint, once with `--no-fold` (the upper layer kept, as with an agent inside:
/// directories untouched since the last checkpoint are taken whole from the upper cache, with
/// what they added to the totals).
#[test]
fn checkpoint_equals_a_capture_of_what_the_mount_shows() {
    checkpoints_equal_captures(&[]);
}

#[test]
fn checkpoint_without_a_fold_equals_a_capture_of_what_the_mount_shows() {
    checkpoints_equal_captures(&["--no-fold"]);
}

fn checkpoints_equal_captures(options: &[&str]) {
    let w = Workspace::new(|room| {
        populate(room);
        for d in 0..6 {
            for f in 0..5 {
                let p = room.join(format!("tree/d{d}/sub{}", f % 2));
                fs::create_dir_all(&p).unwrap();
                fs::write(p.join(format!("f{f}.txt")), format!("{d} {f}\n").repeat(50)).unwrap();
            }
        }
    });
    let p = |rel: &str| w.path(rel);
    // Each subtle change sits in a subtree nothing else touches that round, so only the
    // stat keys below an unchanged directory can reveal it.
    let rounds: Vec<Box<dyn Fn()>> = vec![
        Box::new(|| {
            // Enough new files that, kept in the upper layer, the next checkpoints `lstat`
            // the cached paths from several threads (from 256 on).
            for d in 0..4 {
                fs::create_dir_all(p(&format!("many/m{d}"))).unwrap();
                for f in 0..80 {
                    fs::write(p(&format!("many/m{d}/{f}")), format!("{d}.{f}\n")).unwrap();
                }
            }
            fs::write(p("tree/d0/sub0/f0.txt"), "edited\n").unwrap();
            fs::write(p("tree/d1/new.txt"), "new\n").unwrap();
            fs::remove_file(p("tree/d2/sub1/f1.txt")).unwrap();
            std::os::unix::fs::symlink("sub0/f0.txt", p("tree/d5/link")).unwrap();
        }),
        Box::new(|| {
            // A deep edit under directories the last checkpoint already merged.
            append(&p("tree/d0/sub0/f0.txt"), b"more\n");
            fs::rename(p("tree/d3"), p("tree/d3-moved")).unwrap();
        }),
        Box::new(|| {
            fs::remove_dir_all(p("tree/d4")).unwrap();
            fs::create_dir_all(p("tree/d4/fresh")).unwrap();
            fs::write(p("tree/d4/fresh/x"), "x").unwrap();
            xattr::set(p("tree/d1/sub1/f1.txt"), "user.k", b"v").unwrap();
        }),
        Box::new(|| {
            // Nothing but a chown of a symlink, and a same-size rewrite elsewhere.
            sh(&format!("chown -h 1:1 '{}'", p("tree/d5/link").display()));
            fs::write(p("tree/d2/sub0/f2.txt"), "2 9\n".repeat(50)).unwrap();
        }),
        Box::new(|| {
            let mode = std::os::unix::fs::PermissionsExt::from_mode(0o600);
            fs::set_permissions(p("tree/d0/sub0/f4.txt"), mode).unwrap();
        }),
        Box::new(|| {
            fs::rename(p("tree/d3-moved/sub0"), p("tree/d1/sub0-from-d3")).unwrap();
            fs::remove_file(p("tree/d5/link")).unwrap();
            fs::write(p("notes.md"), "# notes\nround 5\n").unwrap();
            fs::write(p("many/m2/7"), "rewritten among many\n").unwrap();
            fs::remove_file(p("many/m3/0")).unwrap();
        }),
        Box::new(|| {
            // Hard links: a second name for a lower file (both names copied up, one file),
            // and a new linked pair in a new directory beside a new symlink.
            fs::hard_link(p("tree/d0/sub1/f1.txt"), p("tree/d2/linked")).unwrap();
            fs::create_dir_all(p("tree/d5/pair")).unwrap();
            fs::write(p("tree/d5/pair/one"), "pair\n".repeat(30)).unwrap();
            fs::hard_link(p("tree/d5/pair/one"), p("tree/d5/pair/two")).unwrap();
            std::os::unix::fs::symlink("one", p("tree/d5/pair/to-one")).unwrap();
        }),
        Box::new(|| {
            // The pair grown through one name: after a fold the other name is still a lower
            // entry of the same merged directory, and shows (and records) the new size.
            append(&p("tree/d5/pair/two"), b"grown beside its other name\n");
        }),
        Box::new(|| {
            // A linked copy grown through one name, one name of the new pair removed.
            append(&p("tree/d2/linked"), b"grown through its second name\n");
            fs::remove_file(p("tree/d5/pair/one")).unwrap();
        }),
        Box::new(|| {
            // Metadata-only copies (chmod) renamed: in their directory (a relative redirect)
            // and into another one (an absolute redirect).
            let mode = std::os::unix::fs::PermissionsExt::from_mode(0o640);
            fs::set_permissions(p("tree/d1/sub0/f2.txt"), mode).unwrap();
            fs::rename(p("tree/d1/sub0/f2.txt"), p("tree/d1/sub0/f2-renamed.txt")).unwrap();
            let mode = std::os::unix::fs::PermissionsExt::from_mode(0o640);
            fs::set_permissions(p("tree/d5/sub1/f3.txt"), mode).unwrap();
            fs::rename(p("tree/d5/sub1/f3.txt"), p("tree/d5/moved-f3.txt")).unwrap();
        }),
        Box::new(|| {
            // The linked copy's first name gone, a whole directory of lower files removed.
            fs::remove_file(p("tree/d0/sub1/f1.txt")).unwrap();
            fs::remove_dir_all(p("tree/d2/sub0")).unwrap();
        }),
    ];
    for (i, round) in rounds.iter().enumerate() {
        round();
        // Past the racy window, so this checkpoint caches what it merged and the next one
        // reuses every directory it can.
        std::thread::sleep(std::time::Duration::from_millis(60));
        let msg = format!("round {i}");
        let mut args = vec!["checkpoint", w.room(), "-m", &msg];
        args.extend_from_slice(options);
        let id = ok_json(args)["id"].as_str().expect("id").to_string();
        let room = format!("ws={}", w.room());
        let cmp = format!("cmp{i}");
        let out = ok([
            "capture",
            w.store(),
            "--branch",
            &cmp,
            "--from",
            &room,
            "--json",
        ]);
        let cap: serde_json::Value = serde_json::from_str(&out).unwrap();
        let cap_id = cap["id"].as_str().unwrap();
        let tree = |c: &str| {
            let v: serde_json::Value = ok_json(["show", w.store(), c]);
            let stats = &v["checkpoint"]["stats"];
            (
                v["checkpoint"]["roots"]["ws"]["tree"].clone(),
                ["files", "bytes", "dirs", "symlinks"].map(|k| stats[k].clone()),
            )
        };
        let ours = tree(&id);
        let theirs = tree(cap_id);
        assert!(
            ours.0.is_string() && ours.1[0].as_u64() > Some(20) && ours.1[2].as_u64() > Some(10),
            "{ours:?}"
        );
        assert_eq!(
            ours.1, theirs.1,
            "round {i}: totals (files, bytes, dirs, symlinks)"
        );
        // Same content, types, modes, owners, mtimes and xattrs (`diff` names a link group by
        // its full inode number, which differs: compared below)...
        let diff = ok(["diff", w.store(), cap_id, &id]);
        let differs: Vec<&str> = diff.lines().filter(|l| !l.starts_with("links ")).collect();
        assert!(
            differs.is_empty(),
            "round {i}: the checkpoint differs from a capture of the mount: {diff}"
        );
        // ... and each entry's inode number (the low 32 bits: a capture of the mount records
        // the view's 64-bit numbers) and link count, each file's ctime as the mount showed
        // them, and every directory's and symlink's mtime (which `diff` does not compare).
        let files = |t: &serde_json::Value| stat_of_files(&w.store, t.as_str().unwrap());
        assert_eq!(
            files(&ours.0),
            files(&theirs.0),
            "round {i}: inode numbers, link counts and ctimes"
        );
    }
}

/// Appends `data` to the file at `path`.
fn append(path: &std::path::Path, data: &[u8]) {
    let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(data).unwrap();
}

/// One entry of [`stat_of_files`]: path, low 32 bits of the inode number, link count (0 for
/// an entry recorded without links; a directory's subdirectories, which give its link count),
/// ctime (files) or mtime (directories and symlinks).
type Shown = (String, u32, u32, i64);

/// [`Shown`] of every entry below a tree.
fn stat_of_files(store: &std::path::Path, tree: &str) -> Vec<Shown> {
    use ckptfs::store::tree::{EntryKind, Tree};
    fn walk(s: &ckptfs::store::Store, id: &ckptfs::id::ObjectId, pre: &str, out: &mut Vec<Shown>) {
        let t = Tree::decode(&s.read_object(id).unwrap()).unwrap();
        for e in t.entries {
            let p = format!("{pre}/{}", String::from_utf8_lossy(&e.name));
            match e.kind {
                EntryKind::Dir { tree, subdirs } => {
                    out.push((p.clone(), e.ino as u32, subdirs, e.mtime_ns));
                    walk(s, &tree, &p, out)
                }
                EntryKind::File { .. } => out.push((p, e.ino as u32, e.nlink, e.ctime_ns)),
                EntryKind::Symlink { .. } => out.push((p, e.ino as u32, 0, e.mtime_ns)),
            }
        }
    }
    let s = ckptfs::store::Store::open(store).unwrap();
    let mut out = Vec::new();
    walk(
        &s,
        &ckptfs::id::ObjectId::parse(tree).unwrap(),
        "",
        &mut out,
    );
    out
}

/// Overlayfs marks copied-up files and directories with `trusted.overlay.*` xattrs (origin,
/// impure, ...): a checkpoint records the user's xattrs and none of those.
#[test]
fn checkpoints_keep_user_xattrs_and_no_overlay_ones() {
    let w = Workspace::new(populate);
    fs::write(w.path("notes.md"), "# notes\nchanged\n").unwrap(); // copy-up
    fs::write(w.path("src/pkg/b.py"), "b\n").unwrap(); // copies up src and src/pkg
    xattr::set(w.path("src/pkg/a.py"), "user.tag", b"kept").unwrap();
    // The kernel writes `origin` only where the lower layer decodes file handles; write it as
    // the kernel would, so the test does not depend on that.
    let upper = w.store.join("upper/main/.top-ws/ws");
    for rel in ["notes.md", "src/pkg"] {
        xattr::set(upper.join(rel), "trusted.overlay.origin", b"\0\xfb\x21").unwrap();
    }
    let id = w.checkpoint("xattrs");
    let view = lower_view(&w.store).join(format!("checkpoints/{id}/ws"));
    for rel in ["notes.md", "src", "src/pkg", "src/pkg/a.py", "src/pkg/b.py"] {
        let names: Vec<String> = xattr::list(view.join(rel))
            .unwrap()
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        assert!(
            !names.iter().any(|n| n.starts_with("trusted.overlay.")),
            "{rel} in checkpoint {id} has {names:?}"
        );
    }
    assert_eq!(
        xattr::get(view.join("src/pkg/a.py"), "user.tag").unwrap(),
        Some(b"kept".to_vec())
    );
}

/// A changed big file reuses its previous chunks where they still match (the lower file's at
/// the first checkpoint, the last checkpoint's after): appends, in-place overwrites and an
/// insertion all come back byte-exact, and the store verifies.
#[test]
fn edited_big_files_checkpoint_byte_exact() {
    let noise = |seed, len| random_bytes(seed, len);
    let base = noise(3, 6 << 20);
    let b2 = base.clone();
    let w = Workspace::new(move |room| {
        populate(room);
        fs::write(room.join("db.bin"), &b2).unwrap();
    });
    let path = w.path("db.bin");
    let mut data = base;
    type Edit<'a> = &'a dyn Fn(&mut Vec<u8>);
    let edits: [Edit; 3] = [
        &|d| d.extend(noise(4, 300_000)),
        &|d| d[2 << 20..(2 << 20) + 4096].copy_from_slice(&noise(5, 4096)),
        &|d| {
            let tail = d.split_off(3 << 20);
            d.extend(noise(6, 999));
            d.extend(tail);
        },
    ];
    for (i, edit) in edits.iter().enumerate() {
        edit(&mut data);
        fs::write(&path, &data).unwrap();
        let id = w.checkpoint(&format!("edit {i}"));
        assert!(
            w.cat(&id, "db.bin") == data,
            "edit {i}: checkpoint content differs"
        );
    }
    assert!(ok(["verify", w.store()]).contains("0 findings"));
}

#[test]
fn checkpoint_while_appending_captures_a_prefix() {
    let w = Workspace::new(populate);
    let path = w.path("transcript.jsonl");
    fs::write(&path, "").unwrap();
    let p2 = path.clone();
    let writer = std::thread::spawn(move || {
        let mut f = fs::OpenOptions::new().append(true).open(&p2).unwrap();
        for i in 0..20000 {
            f.write_all(format!("{{\"turn\":{i},\"text\":\"some words here\"}}\n").as_bytes())
                .unwrap();
        }
    });
    let mut ids = Vec::new();
    while !writer.is_finished() {
        ids.push(w.checkpoint("during append"));
    }
    writer.join().unwrap();
    let full = fs::read(&path).unwrap();
    for id in &ids {
        let got = w.cat(id, "transcript.jsonl");
        assert!(
            full.starts_with(&got),
            "checkpoint {id} holds {} bytes that are not a prefix of the file",
            got.len()
        );
    }
    assert!(!ids.is_empty());
}

#[test]
fn killed_lower_view_daemon_then_remount_keeps_fsynced_data() {
    let w = Workspace::new(populate);
    {
        let mut f = fs::File::create(w.path("survivor.txt")).unwrap();
        f.write_all(b"written before the crash").unwrap();
        f.sync_all().unwrap();
    }
    // SIGKILL the daemon serving the workspace's lower layer (the lower view its lowerdir
    // is in: the bare one, the room having no xattrs).
    let views: serde_json::Value = ok_json(["status", w.store()]);
    let opts = mount_options(&w.room).expect("the workspace is mounted");
    let pid = views
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            let at = format!("lowerdir={}/", m["mountpoint"].as_str().unwrap_or("-"));
            opts.contains(&at)
        })
        .find_map(|m| m["state"]["pid"].as_i64())
        .expect("the lower view daemon is listed");
    sh(&format!("kill -9 {pid}"));
    std::thread::sleep(std::time::Duration::from_millis(500));
    // Resume: the stale overlay is replaced, nothing written is lost, lower files read again.
    ok(["mount", w.store(), "--branch", "main"]);
    assert_eq!(
        fs::read_to_string(w.path("survivor.txt")).unwrap(),
        "written before the crash"
    );
    assert_eq!(
        fs::read_to_string(w.path("src/pkg/a.py")).unwrap(),
        "print('a')\n"
    );
    let id = w.checkpoint("after crash");
    assert_eq!(
        ok(["cat", w.store(), &format!("{id}:ws/survivor.txt")]),
        "written before the crash"
    );
}

#[test]
fn workspace_checkpoints_apply_the_roots_exclude_rules() {
    let w = Workspace::with_init_args(
        &["--exclude", "ws=*.pem", "--exclude", "ws=cache/**"],
        populate,
    );
    fs::write(w.path("server.pem"), "-----BEGIN PRIVATE KEY-----").unwrap();
    fs::create_dir_all(w.path("cache")).unwrap();
    fs::write(w.path("cache/blob"), "x").unwrap();
    fs::write(w.path("kept.txt"), "kept").unwrap();
    let id = w.checkpoint("with secrets around");
    let ls = ok(["ls", w.store(), &format!("{id}:ws"), "-r"]);
    assert!(ls.contains("kept.txt"), "{ls}");
    assert!(
        !ls.contains("server.pem"),
        "an excluded file was checkpointed: {ls}"
    );
    assert!(
        !ls.contains("cache/blob"),
        "an excluded path was checkpointed: {ls}"
    );
    // The file itself stays in the workspace.
    assert!(w.path("server.pem").exists());
}

#[test]
fn metadata_changes_copy_no_data_and_checkpoint_exactly() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let w = Workspace::new(|room| {
        populate(room);
        fs::create_dir_all(room.join("deep/er")).unwrap();
        fs::write(room.join("deep/er/moved.txt"), "moved bytes\n").unwrap();
    });
    let upper = w.store.join("upper/main/.top-ws/ws");
    // chmod, chown and utimes of lower files: metadata-only copy-ups (no bytes in the upper).
    fs::set_permissions(w.path("big.bin"), fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(w.path("notes.md"), Some(4321), Some(8765)).unwrap();
    sh(&format!(
        "python3 -c 'import os; os.utime(\"{}\", ns=(0, 1_234_567_890_123_456_789))'",
        w.path("src/pkg/a.py").display()
    ));
    // A renamed lower file across directories (redirect) and within one.
    fs::rename(w.path("deep/er/moved.txt"), w.path("src/arrived.txt")).unwrap();
    fs::set_permissions(w.path("src/arrived.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    let copied = fs::metadata(upper.join("big.bin")).unwrap();
    assert!(
        copied.blocks() * 512 < 1 << 20,
        "chmod copied big.bin's bytes up ({} blocks)",
        copied.blocks()
    );
    assert!(
        xattr::get(upper.join("big.bin"), "trusted.overlay.metacopy")
            .unwrap()
            .is_some(),
        "no metacopy xattr: the overlay copied data"
    );
    let id = w.checkpoint("metadata only");
    let spec = |p: &str| format!("{id}:ws/{p}");
    assert!(
        ok(["cat", w.store(), &spec("big.bin")]) == "\x07".repeat(3 << 20),
        "big.bin keeps its bytes"
    );
    assert_eq!(ok(["cat", w.store(), &spec("notes.md")]), "# notes\n");
    assert_eq!(
        ok(["cat", w.store(), &spec("src/arrived.txt")]),
        "moved bytes\n"
    );
    let ls = ok(["ls", w.store(), &format!("{id}:ws"), "-r", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&ls).unwrap();
    let entry = |p: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|e| e["path"] == p)
            .unwrap_or_else(|| panic!("{p} missing in {ls}"))
            .clone()
    };
    assert_eq!(entry("big.bin")["mode"], "0600", "{ls}");
    assert_eq!(entry("notes.md")["uid"], 4321);
    assert_eq!(entry("notes.md")["gid"], 8765);
    assert_eq!(
        entry("src/pkg/a.py")["mtime_ns"].as_i64().unwrap(),
        1_234_567_890_123_456_789
    );
    assert_eq!(entry("src/arrived.txt")["mode"], "0640");
    assert!(!ls.contains("moved.txt"), "{ls}");
    // Nothing was read back to build it: same content ids, no new chunk objects.
    let show: serde_json::Value = ok_json(["show", w.store(), &id]);
    assert_eq!(show["checkpoint"]["stats"]["files_read"], 0, "{show}");
    // The workspace itself still reads the right bytes, and a fresh mount of the checkpoint too.
    assert_eq!(fs::read(w.path("big.bin")).unwrap(), vec![7u8; 3 << 20]);
    assert!(ok(["verify", w.store()]).contains("0 findings"));
}

/// Overlayfs makes every whiteout a hard link of one shared inode, so each deletion changes
/// the ctime of every earlier whiteout. A checkpoint must still leave the directories holding
/// those earlier whiteouts unmerged (their tree ids reused), or every checkpoint after a
/// deletion merges again every directory that ever had one.
#[test]
fn a_deletion_leaves_directories_with_older_whiteouts_unmerged() {
    let w = Workspace::new(|room| {
        for d in 0..4 {
            for sub in 0..2 {
                let p = room.join(format!("tree/d{d}/sub{sub}"));
                fs::create_dir_all(&p).unwrap();
                for f in 0..3 {
                    fs::write(p.join(format!("f{f}.txt")), format!("{d}{sub}{f}\n")).unwrap();
                }
            }
        }
    });
    // A shell inside holds the fold: the upper (and its whiteouts) stays across checkpoints.
    let _inside = InsideShell::start(&w.room);
    let checkpoint = |msg: &str| -> serde_json::Value {
        // Past the racy window, so the checkpoint caches what it merged.
        std::thread::sleep(std::time::Duration::from_millis(60));
        w.checkpoint_json(msg)
    };
    fs::remove_file(w.path("tree/d0/sub0/f0.txt")).unwrap();
    checkpoint("first deletion");
    let whiteout = w.store.join("upper/main/.top-ws/ws/tree/d0/sub0/f0.txt");
    let ctime = |p: &std::path::Path| {
        let m = fs::symlink_metadata(p).unwrap();
        (
            std::os::unix::fs::MetadataExt::ctime_nsec(&m),
            std::os::unix::fs::MetadataExt::ctime(&m),
        )
    };
    let before = ctime(&whiteout);
    fs::remove_file(w.path("tree/d3/sub1/f1.txt")).unwrap();
    assert_ne!(
        ctime(&whiteout),
        before,
        "the premise: a new whiteout changes the ctime of the earlier one (shared inode)"
    );
    let v = checkpoint("second deletion");
    // The root, tree, tree/d3 and tree/d3/sub1: not tree/d0 or tree/d0/sub0.
    assert_eq!(v["dirs_merged"], 4, "{v}");
    let id = v["id"].as_str().unwrap();
    let ls = ok(["ls", w.store(), &format!("{id}:ws"), "-r"]);
    assert!(!ls.contains("d0/sub0/f0.txt"), "{ls}");
    assert!(!ls.contains("d3/sub1/f1.txt"), "{ls}");
    assert!(ls.contains("d0/sub0/f1.txt"), "{ls}");
    // A file back where a whiteout was is a change like any other.
    fs::write(w.path("tree/d0/sub0/f0.txt"), "back\n").unwrap();
    let v = checkpoint("recreated");
    assert_eq!(v["dirs_merged"], 4, "{v}");
    let id = v["id"].as_str().unwrap();
    assert_eq!(
        ok(["cat", w.store(), &format!("{id}:ws/tree/d0/sub0/f0.txt")]),
        "back\n"
    );
}
