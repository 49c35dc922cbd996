//! git in a workspace keeps its caches across a switch away and back and across a remount:
//! `git status` shows no change and rewrites no index, with and without the untracked cache
//! (which keys on directories' inode numbers and times). Real git, real mounts.

use crate::support::*;

use std::fs;
use std::path::Path;
use std::process::Command;

fn repo(room: &Path) {
    for d in 0..6 {
        for f in 0..8 {
            write(
                &room.join(format!("src/m{d}/sub{}/f{f}.rs", f % 2)),
                format!("fn f{d}_{f}() {{}}\n").as_bytes(),
            );
        }
    }
    write(&room.join("README.md"), b"# repo\n");
    // Written long before the index: no racily clean entry makes git rewrite it later.
    age(room);
    git(room, &["init", "-q", "-b", "main"]);
    git(room, &["add", "-A"]);
    git(room, &["commit", "-qm", "initial"]);
    git(room, &["config", "core.untrackedCache", "true"]);
    git(room, &["update-index", "--untracked-cache"]);
    // One untracked file and directory, so the untracked cache has something to remember.
    write(&room.join("notes/todo.txt"), b"later\n");
    let day_ago = day_ago();
    for p in ["notes/todo.txt", "notes", ""] {
        set_mtime(&room.join(p), day_ago);
    }
    git(room, &["status", "--porcelain"]);
}

fn day_ago() -> i64 {
    (std::time::SystemTime::now() - std::time::Duration::from_secs(86_400))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// Sets the mtime of everything in `dir` but `.git` (and of `dir`) to a day ago.
fn age(dir: &Path) {
    let day_ago = day_ago();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().is_some_and(|n| n == ".git") {
            continue;
        }
        if p.is_dir() {
            age(&p);
        } else {
            set_mtime(&p, day_ago);
        }
    }
    set_mtime(dir, day_ago);
}

/// (mtime, bytes) of `.git/index`.
fn index_state(w: &Workspace) -> (std::time::SystemTime, Vec<u8>) {
    let p = w.path(".git/index");
    (modified(&p), fs::read(&p).unwrap())
}

#[track_caller]
fn assert_status_rewrites_nothing(
    w: &Workspace,
    before: &(std::time::SystemTime, Vec<u8>),
    after: &str,
) {
    let status = git(&w.room, &["status", "--porcelain"]);
    assert_eq!(status, "?? notes/\n", "git status after {after}");
    let now = index_state(w);
    assert!(
        now.0 == before.0 && now.1 == before.1,
        "git rewrote its index after {after}: the stat data or the untracked cache it holds no \
         longer matches the workspace"
    );
}

#[test]
fn git_status_after_a_switch_back_and_a_remount_changes_nothing() {
    let w = Workspace::new(repo);
    // The first status in a workspace may rewrite the index once: the root directory's ctime
    // is its upper copy's once something in it changed (docs/inodes.md). Settle it, record it.
    git(&w.room, &["status", "--porcelain"]);
    w.checkpoint("after the first status");
    ok(["umount", w.room()]);
    ok(["mount", w.store(), "--branch", "main"]);
    git(&w.room, &["status", "--porcelain"]);
    let before = index_state(&w);
    assert_status_rewrites_nothing(&w, &before, "a second status");

    let head = log_ids(&w.store, &[])[0].clone();
    ok(["fork", w.store(), &head, "--name", "alt"]);
    let away_and_back = || {
        ok(["switch", w.room(), "--to", "alt", "--checkpoint-first"]);
        ok(["switch", w.room(), "--to", "main", "--checkpoint-first"]);
    };
    away_and_back();
    // The switch parked main's overlay and moved it back (tests/workspace_park.rs); had it
    // folded the upper layer instead (a park evicted), the root directory would show the
    // lower one's ctime again (its number stays, docs/inodes.md): git's untracked cache
    // re-reads at most that one directory, and every file keeps its stat data (checked
    // without the cache below).
    let root_only = |after: &str| {
        let (status, stats) = traced_status(&w.room);
        assert_eq!(status, "?? notes/\n", "git status after {after}");
        for (what, at_most) in [
            ("directory-invalidation", 1),
            ("opendir", 1),
            ("directories-visited", 1000),
        ] {
            assert!(stats[what] <= at_most, "after {after}, {what}: {stats:?}");
        }
    };
    root_only("a switch away and back");

    // A checkpoint folded into the base at the next mount: every file and directory keeps
    // its number and times, but the root directory's ctime is the lower one's again, so
    // git's untracked cache re-reads that one directory, and no other.
    let remount = || {
        ok(["checkpoint", w.room(), "-m", "again"]);
        ok(["umount", w.room()]);
        ok(["mount", w.store(), "--branch", "main"]);
        fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    };
    remount();
    root_only("a checkpoint and a remount");
    // Without the untracked cache, the index holds the stat data of files only: unchanged.
    git(&w.room, &["config", "core.untrackedCache", "false"]);
    git(&w.room, &["update-index", "--no-untracked-cache"]);
    git(&w.room, &["status", "--porcelain"]);
    remount();
    let before = index_state(&w);
    remount();
    assert_status_rewrites_nothing(&w, &before, "a checkpoint, a remount and a cache drop");
    away_and_back();
    assert_status_rewrites_nothing(&w, &before, "a switch away and back (no untracked cache)");
}

/// `git status --porcelain` with its trace2 performance data: the output and the
/// `read_directory` counters (directories visited, opendir, invalidations).
fn traced_status(dir: &Path) -> (String, std::collections::BTreeMap<String, u64>) {
    let trace = dir.parent().unwrap().join("trace2.txt");
    let _ = fs::remove_file(&trace);
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["status", "--porcelain"])
        .env("GIT_TRACE2_PERF", &trace)
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut stats = std::collections::BTreeMap::new();
    for line in fs::read_to_string(&trace).unwrap().lines() {
        if let Some(kv) = line.rsplit("....").next() {
            if let Some((k, v)) = kv.split_once(':') {
                if let Ok(n) = v.trim().parse::<u64>() {
                    stats.insert(k.trim().to_string(), n);
                }
            }
        }
    }
    assert!(
        stats.contains_key("opendir"),
        "no read_directory data in the trace"
    );
    (String::from_utf8_lossy(&out.stdout).into_owned(), stats)
}
