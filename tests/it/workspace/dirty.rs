//! One definition of dirty (docs/workspaces.md): a workspace is dirty when a checkpoint now
//! would record a tree that differs from the branch head in anything but directory mtimes.
//! `status`, `branch list`, `switch` and `checkpoint` agree, with real git in the workspace.

use crate::support::*;

use std::fs;
use std::path::Path;

/// A git repository of a few commits in the room.
fn git_repo(room: &Path) {
    for (i, name) in ["a.txt", "src/b.rs", "src/deep/c.md"].iter().enumerate() {
        write(&room.join(name), format!("line {i}\n").as_bytes());
    }
    git(room, &["init", "-q"]);
    git(room, &["add", "-A"]);
    git(room, &["commit", "-qm", "first"]);
    write(&room.join("a.txt"), b"line 0\nline 1\n");
    git(room, &["commit", "-qam", "second"]);
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "{}",
        describe_output(&format!("git {args:?}"), &out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn status(w: &Workspace) -> serde_json::Value {
    let rows = ok_json(["status", w.store(), "--json"]);
    rows.as_array()
        .and_then(|r| r.iter().find(|r| r["kind"] == "workspace").cloned())
        .expect("a workspace row")
}

fn branch_dirty(w: &Workspace, name: &str) -> bool {
    let rows = ok_json(["branch", "list", w.store(), "--json"]);
    rows.as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == name).cloned())
        .expect("branch row")["dirty"]
        .as_bool()
        .expect("dirty is a bool")
}

/// Brings the workspace to a checkpoint that records git's index as the workspace shows it:
/// a `git status` in a new place refreshes the index's stat data (a real change), and so may
/// the first after a fold, which shows the files from the new checkpoint.
/// git also rewrites an index whose entries are "racily clean" (changed in the second the
/// index was written) on every status until that second is over: hence the pause.
fn settle(w: &Workspace) -> String {
    for _ in 0..8 {
        std::thread::sleep(std::time::Duration::from_millis(400));
        git(&w.room, &["status", "--short"]);
        let r = w.checkpoint_json("settled");
        if r["recorded"] == false {
            return r["id"].as_str().expect("id").to_string();
        }
    }
    panic!("git keeps rewriting its index after every checkpoint");
}

#[test]
fn read_only_git_commands_leave_the_workspace_clean() {
    let w = Workspace::new(git_repo);
    let head = settle(&w);
    // Read-only git: status creates and removes .git/index.lock (the .git directory's mtime
    // changes, in the upper layer), log and diff read.
    for args in [
        &["status"][..],
        &["status", "--short"],
        &["log", "--oneline"],
        &["diff"],
    ] {
        git(&w.room, args);
    }
    assert!(
        w.store.join("upper/main/.top-ws/ws/.git").is_dir(),
        "the test needs .git copied up with a new mtime"
    );
    let st = status(&w);
    assert_eq!(st["dirty"], false, "status after read-only git: {st}");
    assert!(!branch_dirty(&w, "main"), "branch list says dirty");
    // A checkpoint of nothing new says so and records nothing.
    let before = log_ids(&w.store, &[]).len();
    let r = w.checkpoint_json("nothing");
    assert_eq!(r["recorded"], false, "{r}");
    assert_eq!(r["id"], head.as_str(), "{r}");
    assert_eq!(
        log_ids(&w.store, &[]).len(),
        before,
        "a checkpoint was recorded"
    );
    let text = ok(["checkpoint", w.room(), "-m", "again"]);
    assert!(text.contains("nothing new"), "{text}");
    assert_eq!(head_of(&w), head);
    // A switch needs no flag and makes no checkpoint; back again, git sees no change.
    ok(["fork", w.store(), &head, "--name", "other"]);
    let r = ok_json(["switch", w.room(), "--to", "other", "--json"]);
    assert_eq!(r["checkpointed"], serde_json::Value::Null, "{r}");
    ok(["switch", w.room(), "--to", "main"]);
    assert_eq!(head_of(&w), head, "switching moved the head");
    assert_eq!(log_ids(&w.store, &[]).len(), before);
    assert_eq!(git(&w.room, &["status", "--short"]), "");
    // `--checkpoint-first` of a clean workspace records nothing either.
    let r = ok_json([
        "switch",
        w.room(),
        "--to",
        "other",
        "--checkpoint-first",
        "--json",
    ]);
    assert_eq!(r["checkpointed"], serde_json::Value::Null, "{r}");
    ok(["switch", w.room(), "--to", "main"]);
    // --allow-empty records one anyway.
    let r = ok_json([
        "checkpoint",
        w.room(),
        "-m",
        "empty",
        "--allow-empty",
        "--json",
    ]);
    assert_eq!(r["recorded"], true, "{r}");
    assert_ne!(r["id"], head.as_str());
    assert_eq!(log_ids(&w.store, &[]).len(), before + 1);
    // umount agrees too: nothing left un-checkpointed.
    git(&w.room, &["status"]);
    let out = ok(["umount", w.room()]);
    assert!(!out.contains("un-checkpointed"), "{out}");
}

fn head_of(w: &Workspace) -> String {
    head(&w.store, "main").expect("main has a head")
}

#[test]
fn status_branch_list_switch_and_checkpoint_agree_on_changes() {
    let w = Workspace::new(git_repo);
    settle(&w);
    // Each kind of change is dirty for all four, then recorded by one checkpoint.
    type Change = fn(&Path);
    let changes: [(&str, Change); 6] = [
        ("a new file", |r| write(&r.join("new.txt"), b"new\n")),
        ("an edit of the same size", |r| {
            write(&r.join("src/b.rs"), b"LINE 1\n")
        }),
        ("a chmod", |r| chmod(&r.join("a.txt"), 0o600)),
        ("a touch", |r| set_mtime(&r.join("src/deep/c.md"), 12345)),
        ("a removal", |r| {
            fs::remove_file(r.join("src/deep/c.md")).unwrap()
        }),
        ("a git commit", |r| {
            write(&r.join("a.txt"), b"third\n");
            git(r, &["commit", "-qam", "third"]);
        }),
    ];
    ok(["fork", w.store(), "main", "--name", "other"]);
    for (what, change) in changes {
        change(&w.room);
        assert_eq!(status(&w)["dirty"], true, "{what}: status");
        assert!(branch_dirty(&w, "main"), "{what}: branch list");
        let err = fails(1, ["switch", w.room(), "--to", "other"]);
        assert!(err.contains("un-checkpointed"), "{what}: {err}");
        let r = w.checkpoint_json(what);
        assert_eq!(r["recorded"], true, "{what}: {r}");
        assert_eq!(status(&w)["dirty"], false, "{what}: after the checkpoint");
        assert!(!branch_dirty(&w, "main"), "{what}: branch list after");
    }
    // A change the stat shows is refused naming the file, before any file is read.
    write(&w.room.join("big.bin"), &vec![7u8; 4 << 20]);
    let err = fails(1, ["switch", w.room(), "--to", "other"]);
    assert!(err.contains("ws/big.bin"), "{err}");
    let out = ok(["umount", w.room()]);
    assert!(out.contains("un-checkpointed changes"), "{out}");
}

/// Issue 35, gap 1: a file that stays in the upper layer (`--no-fold`, the normal case with
/// an agent inside) edited to the same size is recorded with its new bytes, also when its
/// mtime is put back: the walk of the upper layer may reuse chunks only for a file whose
/// identity and change time say it was not written. (A mutation reusing them whenever the
/// size was unchanged passed every test before this one.)
#[test]
fn a_same_size_edit_of_a_file_kept_in_the_upper_layer_is_recorded() {
    let w = Workspace::new(|room| write(&room.join("keep.txt"), b"base\n"));
    let f = w.path("f.txt");
    write(&f, b"dddd");
    let first = ok_json(["checkpoint", w.room(), "--no-fold"]);
    let first = first["id"].as_str().unwrap().to_string();
    assert_eq!(w.cat(&first, "f.txt"), b"dddd");
    let mtime = fs::metadata(&f).unwrap().modified().unwrap();
    // Same size, new bytes.
    write(&f, b"eeee");
    let second = ok_json(["checkpoint", w.room(), "--no-fold"]);
    let second = second["id"].as_str().unwrap().to_string();
    assert_eq!(
        w.cat(&second, "f.txt"),
        b"eeee",
        "a same-size edit was missed"
    );
    // Same size, new bytes, and the old mtime put back (`touch -d`, or a tool that keeps
    // times): only the change time tells.
    write(&f, b"ffff");
    fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let third = ok_json(["checkpoint", w.room(), "--no-fold"]);
    let third = third["id"].as_str().unwrap().to_string();
    assert_eq!(
        w.cat(&third, "f.txt"),
        b"ffff",
        "an edit with its mtime put back was missed"
    );
}

/// The upper walk reads what changed since the last checkpoint and no more: a file already
/// recorded comes from the stat cache (the report's `files_read` and `bytes_read` count only
/// the file written since).
#[test]
fn a_checkpoint_reads_only_the_upper_files_written_since_the_last() {
    let w = Workspace::new(|room| write(&room.join("keep.txt"), b"base\n"));
    // Each write well before its checkpoint: a file changed in the clock tick a walk starts
    // in is read again at the next one.
    let settle = || std::thread::sleep(std::time::Duration::from_millis(50));
    write(&w.path("a.txt"), b"aaaa");
    settle();
    let r = ok_json(["checkpoint", w.room(), "--no-fold"]);
    let read = |r: &serde_json::Value| (r["files_read"].as_u64(), r["bytes_read"].as_u64());
    assert_eq!(read(&r), (Some(1), Some(4)), "{r}");
    write(&w.path("b.txt"), b"bbbbbb");
    settle();
    let r = ok_json(["checkpoint", w.room(), "--no-fold"]);
    assert_eq!(read(&r), (Some(1), Some(6)), "a.txt read again: {r}");
}

/// A file of the base whose mode changes twice without a fold keeps its bytes in both
/// checkpoints: overlayfs copies up only its metadata (the upper file is a hole with a
/// `metacopy` xattr), and the second change, to a file the stat cache knows, is not taken for
/// a data copy.
#[test]
fn a_metadata_only_copy_up_changed_again_keeps_its_bytes() {
    let w = Workspace::new(|room| write(&room.join("m.txt"), b"lower bytes\n"));
    let f = w.path("m.txt");
    for mode in [0o600, 0o640] {
        chmod(&f, mode);
        let r = ok_json(["checkpoint", w.room(), "--no-fold"]);
        let id = r["id"].as_str().unwrap().to_string();
        assert_eq!(w.cat(&id, "m.txt"), b"lower bytes\n", "mode {mode:o}: {r}");
    }
}

/// Hard links made in the workspace and recorded without a fold stay one file: a restore of
/// the checkpoint gives one inode with both names.
#[test]
fn hard_links_in_the_upper_layer_are_recorded_as_links() {
    use std::os::unix::fs::MetadataExt;
    let w = Workspace::new(|room| write(&room.join("keep.txt"), b"base\n"));
    write(&w.path("a.txt"), b"linked\n");
    fs::hard_link(w.path("a.txt"), w.path("b.txt")).unwrap();
    let r = ok_json(["checkpoint", w.room(), "--no-fold"]);
    let id = r["id"].as_str().unwrap().to_string();
    let out = w.tmp.path().join("out");
    ok(["restore", w.store(), &format!("{id}:ws"), "--to", s(&out)]);
    let ino = |n: &str| fs::metadata(out.join(n)).unwrap().ino();
    assert_eq!(ino("a.txt"), ino("b.txt"), "recorded as two files: {r}");
}

/// An edit of a file in a directory of the upper layer, the directory itself untouched (its
/// stat key the same): the directory is merged again, not taken whole from the last
/// checkpoint, so the edit is recorded.
#[test]
fn an_edit_in_an_untouched_upper_directory_is_recorded() {
    let w = Workspace::new(|room| write(&room.join("keep.txt"), b"base\n"));
    let f = w.path("sub/f.txt");
    write(&f, b"dddd");
    let r = ok_json(["checkpoint", w.room(), "--no-fold"]);
    assert_eq!(w.cat(r["id"].as_str().unwrap(), "sub/f.txt"), b"dddd");
    fs::write(&f, b"eeeeee").unwrap();
    let r = ok_json(["checkpoint", w.room(), "--no-fold"]);
    assert_eq!(
        w.cat(r["id"].as_str().unwrap(), "sub/f.txt"),
        b"eeeeee",
        "the directory was taken whole: {r}"
    );
}

/// A file opened for writing and closed unwritten is copied up whole, yet nothing changed:
/// the workspace stays clean and the next checkpoint records nothing (the copy keeps the
/// lower file's inode number and ctime), with the upper layer kept or folded.
#[test]
fn a_file_opened_for_writing_and_left_unwritten_leaves_the_workspace_clean() {
    let w = Workspace::new(git_repo);
    let head = settle(&w);
    for (round, fold) in [(0, &[][..]), (1, &["--no-fold"][..])] {
        for name in ["a.txt", "src/deep/c.md"] {
            let f = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(w.path(name))
                .unwrap();
            drop(f);
        }
        assert!(
            w.store
                .join("upper/main/.top-ws/ws/src/deep/c.md")
                .is_file(),
            "round {round}: the test needs a copy-up"
        );
        let st = status(&w);
        assert_eq!(st["dirty"], false, "round {round}: status: {st}");
        let mut args = vec!["checkpoint", w.room(), "-m", "unwritten", "--json"];
        args.extend_from_slice(fold);
        let r = ok_json(args);
        assert_eq!(r["recorded"], false, "round {round}: {r}");
        assert_eq!(r["id"], head.as_str(), "round {round}: {r}");
    }
    // Recorded beside a real change, the unwritten copies are the entries they were: their
    // directory is the very tree it was.
    write(&w.path("new.txt"), b"new\n");
    let r = ok_json(["checkpoint", w.room(), "-m", "new", "--no-fold", "--json"]);
    assert_eq!(r["recorded"], true, "{r}");
    let deep = |id: &str| subtree(&w, id, &["src", "deep"]);
    assert_eq!(
        deep(r["id"].as_str().unwrap()),
        deep(&head),
        "src/deep holds only an unwritten copy, yet its tree changed"
    );
}

/// The tree id of the directory `path` below root `ws` of checkpoint `id`.
fn subtree(w: &Workspace, id: &str, path: &[&str]) -> String {
    use ckptfs::store::tree::{EntryKind, Tree};
    let s = ckptfs::store::Store::open(&w.store).unwrap();
    let shown: serde_json::Value = ok_json(["show", w.store(), id]);
    let mut tree =
        ckptfs::id::ObjectId::parse(shown["checkpoint"]["roots"]["ws"]["tree"].as_str().unwrap())
            .unwrap();
    for name in path {
        let t = Tree::decode(&s.read_object(&tree).unwrap()).unwrap();
        let e = t.get(name.as_bytes()).expect("directory in the tree");
        let EntryKind::Dir { tree: sub, .. } = e.kind else {
            panic!("{name} is not a directory");
        };
        tree = sub;
    }
    tree.to_string()
}

/// Hundreds of files kept in the upper layer in one directory (the root): the next checkpoint
/// without a fold `lstat`s their cached paths from several threads, all in one group, and
/// records exactly the one rewritten and the one removed.
#[test]
fn many_files_kept_in_one_upper_directory_are_checked_and_recorded() {
    let w = Workspace::new(git_repo);
    for i in 0..300 {
        write(&w.path(&format!("n{i:03}")), format!("{i}\n").as_bytes());
    }
    let first = ok_json(["checkpoint", w.room(), "-m", "many", "--no-fold", "--json"]);
    assert_eq!(first["recorded"], true, "{first}");
    std::thread::sleep(std::time::Duration::from_millis(60));
    write(&w.path("n150"), b"rewritten\n");
    fs::remove_file(w.path("n299")).unwrap();
    let r = ok_json(["checkpoint", w.room(), "-m", "one", "--no-fold", "--json"]);
    let id = r["id"].as_str().expect("id");
    let diff = ok(["diff", w.store(), first["id"].as_str().unwrap(), id]);
    let changed: Vec<&str> = diff.lines().collect();
    assert_eq!(changed.len(), 2, "{diff}");
    assert!(
        diff.contains("ws/n150") && diff.contains("ws/n299"),
        "{diff}"
    );
    assert_eq!(w.cat(id, "n150"), b"rewritten\n");
    assert_eq!(w.cat(id, "n000"), b"0\n");
}
