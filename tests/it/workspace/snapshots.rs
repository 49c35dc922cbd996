//! Reflink snapshots, with the store on XFS or btrfs (an image on a loop device): a checkpoint
//! after a small change to big files reads only the changed parts and records exactly the
//! files' bytes; a file rewritten in place without pause is captured at one instant without
//! holding its writer; one snapshot per big file is kept, and `status` keeps none. Snapshots
//! serve an upper layer that lives across checkpoints, as it does while a process is inside
//! the workspace (with nobody inside, a checkpoint folds the upper away: docs/workspaces.md),
//! so each test keeps a shell inside.

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::*;

/// Deterministic bytes that do not compress or repeat (xorshift), as text lines.
fn noise_lines(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b"abcdefghijklmnopqrstuvwxyz{}:,\""[(x >> 40) as usize % 31]
        })
        .collect();
    for i in (99..len).step_by(100) {
        out[i] = b'\n';
    }
    out
}

/// A workspace whose store is on an image of filesystem `fs` (`xfs`, `btrfs`) in the temp
/// dir (unmounted by `Workspace`'s drop), over a room made by `populate`. `None` (the test
/// skipped, saying why) where the machine cannot mount a loop device.
fn workspace_on(fs_type: &str, populate: impl FnOnce(&Path)) -> Option<Workspace> {
    Workspace::on_image(&[&format!("mkfs.{fs_type}"), "-q", "-f"], &[], populate)
}

fn snapshots(w: &Workspace) -> Vec<PathBuf> {
    let dir = w.store.join("upper/main/.snapshots-ws");
    match fs::read_dir(&dir) {
        Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

fn overwrite(p: &Path, at: u64, data: &[u8]) {
    let mut f = fs::OpenOptions::new().write(true).open(p).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(data).unwrap();
}

fn append(p: &Path, data: &[u8]) {
    let mut f = fs::OpenOptions::new().append(true).open(p).unwrap();
    f.write_all(data).unwrap();
}

/// Asserts that checkpoint `id` holds exactly the workspace's files `rels`.
fn assert_exact(w: &Workspace, id: &str, rels: &[&str]) {
    for &rel in rels {
        assert!(
            w.cat(id, rel) == fs::read(w.path(rel)).unwrap(),
            "{rel} differs in checkpoint {id}"
        );
    }
}

#[test]
fn on_xfs_a_checkpoint_reads_only_the_changed_parts_of_big_files() {
    reads_only_the_changed_parts("xfs");
}

#[test]
fn on_btrfs_a_checkpoint_reads_only_the_changed_parts_of_big_files() {
    reads_only_the_changed_parts("btrfs");
}

fn reads_only_the_changed_parts(fs_type: &str) {
    let Some(w) = workspace_on(fs_type, |room| {
        fs::write(room.join("log.jsonl"), noise_lines(1, 6 << 20)).unwrap();
        fs::write(room.join("db.bin"), noise_lines(2, 3 << 20)).unwrap();
        fs::write(room.join("small.txt"), b"small\n").unwrap();
    }) else {
        return;
    };
    let _inside = InsideShell::start(&w.room);
    let (log, db) = (w.path("log.jsonl"), w.path("db.bin"));
    // First change: nothing to compare with yet, so both files are read whole, and a
    // snapshot of each is kept.
    append(&log, &noise_lines(3, 1000));
    overwrite(&db, 1 << 20, b"first in-place edit");
    let r = w.checkpoint_json("one");
    assert_eq!(r["files_read"], 2, "{r}");
    assert_eq!(r["bytes_unread"], 0, "{r}");
    assert_exact(&w, r["id"].as_str().unwrap(), &["log.jsonl", "db.bin"]);
    assert_eq!(snapshots(&w).len(), 2, "{:?}", snapshots(&w));

    // Second change, as small: all but the blocks around it are known unchanged.
    append(&log, &noise_lines(4, 3000));
    overwrite(&db, (2 << 20) + 5, b"second in-place edit");
    fs::write(w.path("small.txt"), b"changed\n").unwrap();
    // Past the clock tick of these writes: a file changed in the tick a checkpoint starts in
    // is read again by the next one, which the third checkpoint below must not do.
    std::thread::sleep(std::time::Duration::from_millis(30));
    let r = w.checkpoint_json("two");
    let unread = r["bytes_unread"].as_u64().unwrap();
    assert!(
        unread > (9 << 20) - (256 << 10),
        "only {unread} bytes unread: {r}"
    );
    assert!(unread <= r["bytes_read"].as_u64().unwrap(), "{r}");
    assert_exact(&w, r["id"].as_str().unwrap(), &["log.jsonl", "db.bin"]);
    // The snapshots of checkpoint one gave way to those of checkpoint two.
    let snaps = snapshots(&w);
    assert_eq!(snaps.len(), 2, "{snaps:?}");

    // Truncated into the middle and written back with a change: the truncated blocks are new,
    // whatever the snapshot held there before.
    let data = fs::read(&db).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&db)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let mut back = data[1 << 20..].to_vec();
    back[4096] ^= 1;
    append(&db, &back);
    let r = w.checkpoint_json("three");
    assert_exact(&w, r["id"].as_str().unwrap(), &["log.jsonl", "db.bin"]);
    // The log, untouched since its clone, is taken from the stat cache (the clone left its
    // stat as it was): only the database is read.
    assert_eq!(r["files_read"], 1, "{r}");
    let unread = r["bytes_unread"].as_u64().unwrap();
    assert!((1 << 20..2 << 20).contains(&unread), "{unread}: {r}");

    // `status` reads changed files through snapshots too, and keeps none of them.
    append(&log, b"{\"more\":1}\n");
    let before: Vec<PathBuf> = snapshots(&w);
    let st = ok(["status", w.store(), "--json"]);
    assert!(
        st.contains("\"files_changed\":1") || st.contains("\"files_changed\": 1"),
        "{st}"
    );
    let mut after = snapshots(&w);
    after.sort();
    let mut before = before;
    before.sort();
    assert_eq!(before, after);
    // And the recorded checkpoints check out.
    ok(["verify", w.store()]);
}

/// A file rewritten in many scattered places (a database) costs more to clone than to read:
/// after one comparison it is read whole, without snapshots, and captured exactly.
#[test]
fn on_xfs_a_file_rewritten_in_many_places_is_read_whole_from_then_on() {
    let Some(w) = workspace_on("xfs", |room| {
        fs::write(room.join("db.bin"), noise_lines(5, 4 << 20)).unwrap();
    }) else {
        return;
    };
    let _inside = InsideShell::start(&w.room);
    let db = w.path("db.bin");
    let scatter = |seed: u64| {
        for k in 0..40u64 {
            overwrite(&db, k * 100_000 + seed, b"scattered rewrite");
        }
    };
    scatter(1);
    let r = w.checkpoint_json("one");
    assert_eq!(r["bytes_unread"], 0, "{r}");
    assert_eq!(snapshots(&w).len(), 1);
    // Compared once, through the snapshot: then declined, and its snapshot gone.
    scatter(2);
    let r = w.checkpoint_json("two");
    assert!(r["bytes_unread"].as_u64().unwrap() > 3 << 20, "{r}");
    assert!(snapshots(&w).is_empty(), "{:?}", snapshots(&w));
    assert!(w.cat(r["id"].as_str().unwrap(), "db.bin") == fs::read(&db).unwrap());
    // From then on read whole, as on any filesystem.
    scatter(3);
    let r = w.checkpoint_json("three");
    assert_eq!(r["bytes_unread"], 0, "{r}");
    assert!(snapshots(&w).is_empty(), "{:?}", snapshots(&w));
    assert!(w.cat(r["id"].as_str().unwrap(), "db.bin") == fs::read(&db).unwrap());
}

#[test]
fn on_xfs_a_file_rewritten_without_pause_is_captured_at_one_instant_without_a_hold() {
    captured_at_one_instant("xfs");
}

#[test]
fn on_btrfs_a_file_rewritten_without_pause_is_captured_at_one_instant_without_a_hold() {
    captured_at_one_instant("btrfs");
}

fn captured_at_one_instant(fs_type: &str) {
    let Some(w) = workspace_on(fs_type, |room| {
        fs::write(room.join("db.bin"), (b"000000000000\n").repeat(160000)).unwrap();
    }) else {
        return;
    };
    let _inside = InsideShell::start(&w.room);
    let path = w.path("db.bin");
    let writer = KillOnDrop(
        Command::new("python3")
            .args(["-c", REWRITER])
            .arg(&path)
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until_rewritten(&path);
    let mut states = std::collections::HashSet::new();
    for i in 0..6 {
        let r = w.checkpoint_json(&format!("rewrite {i}"));
        let data = w.cat(r["id"].as_str().unwrap(), "db.bin");
        assert_eq!(data.len(), 13 * 160000);
        let first = &data[..13];
        assert!(
            lines_all_equal(&data),
            "checkpoint {i} captured a mix of two states of the file"
        );
        states.insert(first.to_vec());
    }
    assert!(states.len() > 1, "the writer never moved on: {states:?}");
    drop(writer);
}

/// Clears the immutable flag it set on a directory, even when the test fails.
struct Immutable(PathBuf);

impl Immutable {
    fn set(dir: PathBuf) -> Immutable {
        sh(&format!("chattr +i '{}'", dir.display()));
        Immutable(dir)
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

/// A checkpoint that fails after reading (here: its record cannot be written) leaves the
/// clones it made; `gc` removes them, and keeps those the next checkpoint reads through.
#[test]
fn on_xfs_gc_removes_the_snapshots_of_a_failed_checkpoint() {
    let Some(w) = workspace_on("xfs", |room| {
        fs::write(room.join("log.jsonl"), noise_lines(6, 6 << 20)).unwrap();
        fs::write(room.join("db.bin"), noise_lines(7, 3 << 20)).unwrap();
    }) else {
        return;
    };
    let _inside = InsideShell::start(&w.room);
    let (log, db) = (w.path("log.jsonl"), w.path("db.bin"));
    append(&log, &noise_lines(8, 1000));
    overwrite(&db, 1 << 20, b"first in-place edit");
    w.checkpoint_json("one");
    let mut named = snapshots(&w);
    named.sort();
    assert_eq!(named.len(), 2, "{named:?}");

    append(&log, &noise_lines(9, 2000));
    overwrite(&db, 2 << 20, b"second in-place edit");
    {
        let _guard = Immutable::set(w.store.join("checkpoints"));
        let o = run(["checkpoint", w.room(), "-m", "fails"]);
        assert!(!o.status.success(), "the checkpoint was to fail");
    }
    let left = snapshots(&w);
    assert_eq!(
        left.len(),
        4,
        "the failed checkpoint's clones stay: {left:?}"
    );

    let out = ok(["gc", w.store(), "--json"]);
    assert!(out.contains("reflink snapshot no checkpoint uses"), "{out}");
    let mut kept = snapshots(&w);
    kept.sort();
    assert_eq!(kept, named, "gc keeps exactly the last checkpoint's clones");

    // Which the next checkpoint still reads through: only the edited parts are read.
    let r = w.checkpoint_json("two");
    assert!(r["bytes_unread"].as_u64().unwrap() > 8 << 20, "{r}");
    assert_exact(&w, r["id"].as_str().unwrap(), &["log.jsonl", "db.bin"]);
    ok(["verify", w.store()]);
}

/// Prints how many pages of the file named by its argument the page cache holds (mincore).
const RESIDENT: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
p = libc.mmap(None, size, 1, 1, fd, 0)
vec = ctypes.create_string_buffer((size + 4095) // 4096)
assert libc.mincore(p, size, vec) == 0, ctypes.get_errno()
print(sum(b & 1 for b in vec.raw))
"#;

fn resident_pages(p: &Path) -> u64 {
    let o = Command::new("python3")
        .args(["-c", RESIDENT])
        .arg(p)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

/// A clone's pages are not in the page cache (it is a new inode): where no process holds the
/// file open for writing, a checkpoint reads the live file instead, under a read lease, and
/// leaves the clone unread. A file a writer holds open is read through its clone.
#[test]
fn on_xfs_a_file_no_writer_holds_is_read_from_the_page_cache_not_its_clone() {
    let Some(w) = workspace_on("xfs", |room| {
        fs::write(room.join("log.jsonl"), noise_lines(10, 6 << 20)).unwrap();
    }) else {
        return;
    };
    let _inside = InsideShell::start(&w.room);
    let log = w.path("log.jsonl");
    let only_snapshot = |w: &Workspace| {
        let s = snapshots(w);
        assert_eq!(s.len(), 1, "{s:?}");
        s.into_iter().next().unwrap()
    };
    // First checkpoint after the copy-up: read whole, from the live file.
    append(&log, &noise_lines(11, 1000));
    let r = w.checkpoint_json("one");
    assert_eq!(r["files_read"], 1, "{r}");
    assert_exact(&w, r["id"].as_str().unwrap(), &["log.jsonl"]);
    assert_eq!(resident_pages(&only_snapshot(&w)), 0, "the clone was read");

    // A writer holds the log open: the appended part is read through the new clone.
    let holder = holder(&[
        "python3",
        "-c",
        "import sys, time; f = open(sys.argv[1], 'a'); print('ready', flush=True); time.sleep(60)",
        log.to_str().unwrap(),
    ])
    .expect("the holder did not start");
    append(&log, &noise_lines(12, 5000));
    let r = w.checkpoint_json("two");
    assert!(r["bytes_unread"].as_u64().unwrap() > 5 << 20, "{r}");
    assert_exact(&w, r["id"].as_str().unwrap(), &["log.jsonl"]);
    assert!(
        resident_pages(&only_snapshot(&w)) > 0,
        "the clone was not read"
    );

    // The writer gone, the next change is read from the live file again.
    drop(holder);
    append(&log, &noise_lines(13, 5000));
    let r = w.checkpoint_json("three");
    assert!(r["bytes_unread"].as_u64().unwrap() > 5 << 20, "{r}");
    assert_exact(&w, r["id"].as_str().unwrap(), &["log.jsonl"]);
    assert_eq!(resident_pages(&only_snapshot(&w)), 0, "the clone was read");
}
