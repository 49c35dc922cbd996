//! Real clients inside a live workspace: git, SQLite (WAL and rollback journal), tar, cargo.
//! Each one works in the mount, survives a checkpoint and a switch away and back, and its data
//! is byte-exact afterwards.

use std::fs;
use std::process::Command;

use crate::support::*;

fn seed(room: &std::path::Path) {
    fs::create_dir_all(room.join("proj")).unwrap();
    fs::write(room.join("proj/README"), "a project\n").unwrap();
}

/// Checkpoint, switch to a fork, switch back: the workspace must show the checkpoint again.
fn round_trip_through_switch(w: &Workspace) {
    let id = w.checkpoint("client state");
    ok(["fork", w.store(), &id, "--name", "elsewhere"]);
    ok(["switch", w.room(), "--to", "elsewhere"]);
    ok(["switch", w.room(), "--to", "main"]);
}

#[test]
fn git_repository_in_a_workspace() {
    let w = Workspace::new(seed);
    let repo = w.path("proj");
    let git = |args: &str| {
        sh(&format!(
            "cd '{}' && git -c user.name=t -c user.email=t@e -c init.defaultBranch=main {args}",
            repo.display()
        ))
    };
    git("init -q");
    for i in 0..50 {
        fs::write(
            repo.join(format!("f{i}.txt")),
            format!("file {i}\n").repeat(100),
        )
        .unwrap();
    }
    git("add -A");
    git("commit -qm first");
    fs::write(repo.join("f1.txt"), "changed\n").unwrap();
    git("commit -qam second");
    git("gc -q");
    git("fsck --strict");
    assert!(git("status --porcelain").is_empty());
    round_trip_through_switch(&w);
    git("fsck --strict");
    assert_eq!(git("log --format=%s"), "second\nfirst\n");
    assert!(git("status --porcelain").is_empty());
}

/// Runs SQL through the sqlite3 shell (on stdin: 10k inserts exceed an argument's size limit).
fn sqlite(db: &std::path::Path, sql: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("sqlite3")
        .arg(db)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(sql.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "sqlite3 {sql}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn sqlite_wal_and_rollback_journal() {
    let w = Workspace::new(seed);
    for (name, mode) in [("wal.db", "wal"), ("journal.db", "delete")] {
        let db = w.path(name);
        let mut sql = format!(
            "PRAGMA journal_mode={mode}; CREATE TABLE t(i INTEGER PRIMARY KEY, v TEXT); BEGIN;"
        );
        for i in 0..10_000 {
            sql.push_str(&format!(
                "INSERT INTO t(v) VALUES('row {i} padding padding');"
            ));
        }
        sql.push_str("COMMIT;");
        sqlite(&db, &sql);
        assert_eq!(sqlite(&db, "PRAGMA integrity_check;"), "ok");
    }
    round_trip_through_switch(&w);
    for name in ["wal.db", "journal.db"] {
        let db = w.path(name);
        assert_eq!(sqlite(&db, "PRAGMA integrity_check;"), "ok");
        assert_eq!(sqlite(&db, "SELECT count(*) FROM t;"), "10000");
    }
    // The checkpoint itself holds a consistent database: restore it and check it there.
    let out = w.tmp.path().join("restored");
    ok(["restore", w.store(), "main", "--to", out.to_str().unwrap()]);
    assert_eq!(
        sqlite(&out.join("journal.db"), "SELECT count(*) FROM t;"),
        "10000"
    );
}

#[test]
fn tar_round_trip_is_byte_exact() {
    let w = Workspace::new(seed);
    let src = w.tmp.path().join("src");
    fs::create_dir_all(src.join("a/b")).unwrap();
    fs::write(src.join("a/b/c.txt"), "content").unwrap();
    fs::write(
        src.join("bin"),
        (0..=255u8).cycle().take(1 << 20).collect::<Vec<u8>>(),
    )
    .unwrap();
    std::os::unix::fs::symlink("a/b/c.txt", src.join("link")).unwrap();
    let tarball = w.tmp.path().join("x.tar");
    sh(&format!(
        "tar -C '{}' -cf '{}' .",
        src.display(),
        tarball.display()
    ));
    fs::create_dir(w.path("unpacked")).unwrap();
    sh(&format!(
        "tar -C '{}' -xpf '{}'",
        w.path("unpacked").display(),
        tarball.display()
    ));
    round_trip_through_switch(&w);
    sh(&format!(
        "diff -r --no-dereference '{}' '{}'",
        src.display(),
        w.path("unpacked").display()
    ));
    let again = w.tmp.path().join("y.tar");
    sh(&format!(
        "tar -C '{}' -cf '{}' .",
        w.path("unpacked").display(),
        again.display()
    ));
    let list = |t: &std::path::Path| sh(&format!("tar -tvf '{}' | sort", t.display()));
    assert_eq!(list(&tarball), list(&again));
}

#[test]
fn cargo_builds_a_crate_in_a_workspace() {
    let w = Workspace::new(seed);
    let dir = w.path("hello");
    fs::create_dir_all(dir.join("src")).unwrap();
    fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"hello\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    fs::write(
        dir.join("src/main.rs"),
        "fn main() { println!(\"hi from the workspace\"); }\n",
    )
    .unwrap();
    let run = || {
        let o = Command::new("cargo")
            .args(["run", "--quiet", "--offline"])
            .current_dir(&dir)
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert_eq!(run(), "hi from the workspace\n");
    round_trip_through_switch(&w);
    assert_eq!(run(), "hi from the workspace\n");
}

/// A database is stored in page-aligned blocks: a transaction that rewrites a few scattered
/// rows of an 8 MB database adds about those pages' blocks to the store (content-defined
/// 256 KiB chunks would each hold one of them), and the checkpoint is byte-exact.
#[test]
fn sqlite_updates_store_only_the_blocks_they_touch() {
    let w = Workspace::new(seed);
    let db = w.path("agent.sqlite");
    let mut sql = String::from("CREATE TABLE kv(id INTEGER PRIMARY KEY, v TEXT); BEGIN;");
    for i in 0..4000 {
        sql.push_str(&format!(
            "INSERT INTO kv(v) VALUES(printf('%.2000c', '{}'));",
            i % 10
        ));
    }
    sql.push_str("COMMIT;");
    sqlite(&db, &sql);
    let size = fs::metadata(&db).unwrap().len();
    assert!(size > 8_000_000, "{size}");
    w.checkpoint("database");
    // 20 rows spread over the file.
    sqlite(
        &db,
        "BEGIN; UPDATE kv SET v = printf('%.2000c', 'x') WHERE id % 200 = 7; COMMIT;",
    );
    let v = w.checkpoint_json("update");
    let new_bytes = v["checkpoint"]["stats"]["new_bytes"].as_u64().unwrap();
    assert!(
        new_bytes < 40 * 16384,
        "20 rewritten rows added {new_bytes} bytes to the store"
    );
    let id = v["id"].as_str().unwrap();
    assert!(
        w.cat(id, "agent.sqlite") == fs::read(&db).unwrap(),
        "the database differs in the checkpoint"
    );
}

/// Runs git in `repo` (identity and branch name fixed); returns stdout.
fn git_in(repo: &std::path::Path, args: &str) -> String {
    sh(&format!(
        "cd '{}' && git -c user.name=t -c user.email=t@e -c init.defaultBranch=main {args}",
        repo.display()
    ))
}

/// (low 32 bits of st_ino, st_ctime in ns) of a path: what git's index keeps of them.
fn git_stat(p: &std::path::Path) -> (u32, i128) {
    use std::os::unix::fs::MetadataExt;
    let m = fs::symlink_metadata(p).unwrap();
    (
        m.ino() as u32,
        i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
    )
}

/// git's index caches every file's stat data (inode number, ctime, mtime, size) and re-reads a
/// file whose stat differs. A workspace shows files with the inode numbers (low 32 bits,
/// which is what the index keeps) and ctimes they were captured with, so an index written
/// before the capture, or before a checkpoint and a remount, still matches: `git diff-files`,
/// which compares without refreshing, lists nothing, and `git status` reads no file.
#[test]
fn git_index_stays_fresh_across_capture_switch_and_remount() {
    let mut native = Vec::new();
    let w = Workspace::new(|room| {
        seed(room);
        let repo = room.join("proj");
        git_in(&repo, "init -q");
        for i in 0..40 {
            fs::write(repo.join(format!("f{i}.txt")), format!("file {i}\n")).unwrap();
        }
        git_in(&repo, "add -A");
        git_in(&repo, "commit -qm first");
        for name in ["f1.txt", "f2.txt", ".git/index", "f7.txt"] {
            native.push(git_stat(&repo.join(name)));
        }
    });
    let repo = w.path("proj");
    // The index was written natively, before the capture.
    for (name, was) in ["f1.txt", "f2.txt", ".git/index", "f7.txt"]
        .iter()
        .zip(&native)
    {
        assert_eq!(git_stat(&repo.join(name)), *was, "{name}: stat as captured");
    }
    let stale = || git_in(&repo, "diff-files --name-only");
    assert_eq!(
        stale(),
        "",
        "files stat-dirty right after mounting the capture"
    );

    // A turn: a modified file, a new one, a renamed one (metadata-only copy with a
    // redirect), a chmod (metadata-only copy), and one opened for writing without a change.
    fs::write(repo.join("f1.txt"), "changed\n").unwrap();
    fs::write(repo.join("new.txt"), "new\n").unwrap();
    git_in(&repo, "mv f5.txt moved.txt");
    sh(&format!("chmod +x '{}'", repo.join("f6.txt").display()));
    fs::OpenOptions::new()
        .append(true)
        .open(repo.join("f7.txt"))
        .unwrap();
    git_in(&repo, "add -A");
    git_in(&repo, "commit -qm second");
    assert_eq!(git_in(&repo, "status --porcelain"), "");
    assert_eq!(stale(), "");
    // Edited, new, renamed, chmod-ed, copied up unchanged, untouched.
    let turned = [
        "f1.txt",
        "new.txt",
        "moved.txt",
        "f6.txt",
        "f7.txt",
        "f9.txt",
    ];
    let before: Vec<_> = turned.iter().map(|n| git_stat(&repo.join(n))).collect();

    round_trip_through_switch(&w);
    // Its checkpoint folded the upper layer (nobody inside): as after the remount below, the
    // file copied up unchanged shows the stat it was captured with again.
    let s = stale();
    assert!(
        s.is_empty() || s == "f7.txt\n",
        "files stat-dirty after a switch away and back: {s}"
    );

    // A remount drops the checkpointed upper layer: every file now comes from the store.
    ok(["umount", w.room()]);
    ok(["mount", w.store(), "--branch", "main"]);
    assert!(
        fs::read_dir(w.store.join("upper/main/.top-ws/ws"))
            .map_or(true, |mut d| d.next().is_none()),
        "the upper layer was not dropped, so the remount proves nothing"
    );
    for (name, was) in turned.iter().zip(&before) {
        let now = git_stat(&repo.join(name));
        if *name == "f7.txt" {
            // Opened for writing without a change: copied up, but recorded as the file it
            // was copied from (so the workspace did not turn dirty): the captured stat.
            assert_eq!(now.0, was.0, "{name}: inode number");
            assert_eq!(now, native[3], "{name}: stat as first captured");
        } else {
            assert_eq!(now, *was, "{name}: stat after the remount");
        }
    }
    // git compares whole seconds of ctime: the unchanged copy differs from what git saw only
    // when its copy-up fell in another second than its capture.
    let s = stale();
    assert!(
        s.is_empty() || s == "f7.txt\n",
        "stat-dirty after the remount: {s}"
    );
    assert_eq!(git_in(&repo, "status --porcelain"), "");
    git_in(&repo, "fsck --strict");
}
