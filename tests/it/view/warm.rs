//! The workspaces' lower view warms a checkpoint root in the background (src/view/warm.rs):
//! once a workspace is mounted, its daemon lists every directory of the base and looks up
//! `.gitignore` in each, and the kernel then holds the dentry of every entry (and a negative
//! one for each absent `.gitignore`), so `lstat`s of every path of the workspace, without a
//! listing, and of a `.gitignore` in every directory (what a first `git status` does), send
//! the daemon no LOOKUP at all. `mount --branch` waits for that warm-up before it returns
//! (`--warm-wait`). Counted in the daemon's own request log (fuser's debug lines), on real
//! FUSE and overlay mounts.

use crate::support::*;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const DIRS: usize = 12;
const SUBDIRS: usize = 4;
const FILES: usize = 9;

fn populate(room: &Path) {
    for d in 0..DIRS {
        for s in 0..SUBDIRS {
            for f in 0..FILES {
                write(&room.join(format!("d{d}/s{s}/f{f}.txt")), b"x\n");
            }
        }
    }
}

/// The text of every view daemon log of the store.
fn view_logs(store: &Path) -> String {
    let mut all = String::new();
    if let Ok(rd) = fs::read_dir(store.join("run/views")) {
        for e in rd.flatten() {
            if e.path().extension().is_some_and(|x| x == "log") {
                all.push_str(&fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
    }
    all
}

/// Every path `populate` made, parents first: what a `git status` `lstat`s, from its index,
/// without listing any directory.
fn paths(room: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in 0..DIRS {
        out.push(room.join(format!("d{d}")));
        for s in 0..SUBDIRS {
            out.push(room.join(format!("d{d}/s{s}")));
            for f in 0..FILES {
                out.push(room.join(format!("d{d}/s{s}/f{f}.txt")));
            }
        }
    }
    out
}

/// A populated room and where its store goes, not made yet (each test makes and mounts it
/// its own way; the guard unmounts it).
fn unmounted_room() -> Workspace {
    let tmp = tempfile::tempdir().expect("tempdir");
    let w = Workspace {
        store: tmp.path().join("store"),
        room: tmp.path().join("room"),
        tmp,
    };
    fs::create_dir_all(&w.room).unwrap();
    populate(&w.room);
    w
}

#[test]
fn a_workspace_walk_after_the_warm_up_sends_the_lower_view_no_lookup() {
    let w = unmounted_room();
    git(&w.room, &["init", "-q"]);
    git(&w.room, &["add", "-A"]);
    git(&w.room, &["commit", "-qm", "populated"]);
    git(&w.room, &["status", "--porcelain"]);
    ok(["init", w.store(), "--root", &format!("ws={}", w.room())]);
    ok(["capture", w.store(), "-m", "initial"]);
    let counted = count(&w.room);
    let out = run_env(
        ["mount", w.store(), "--branch", "main"],
        &[(
            "RUST_LOG",
            "ckptfs::view::lower::warm=info,fuser::request=debug,ckptfs::workspace::mount=debug",
        )],
    );
    assert!(out.status.success(), "mount: {}", stderr(&out));

    // `mount --branch` returned once the warm-up was done: it says so, and the warm-up
    // reports what it listed, every directory and every entry of the base, already.
    assert!(
        stderr(&out).contains("ws: lower view warm after"),
        "mount did not wait for the warm-up: {}",
        stderr(&out)
    );
    let logs = view_logs(&w.store);
    let line = logs
        .lines()
        .find(|l| l.contains("warmed "))
        .unwrap_or_else(|| {
            panic!("no warm-up in the lower view's log when mount returned:\n{logs}")
        })
        .to_string();
    let (dirs, entries) = counted;
    assert!(
        line.contains(&format!(": {dirs} directories, {entries} entries listed")),
        "{line}"
    );
    assert!(!line.contains("stopped early"), "{line}");

    // The request log works: the overlay's own lookup of the root is in it.
    let before = view_logs(&w.store);
    assert!(before.contains(" LOOKUP name \"ws\""), "{before}");
    let all = paths(&w.room);
    assert_eq!(all.len(), DIRS + DIRS * SUBDIRS + DIRS * SUBDIRS * FILES);
    for p in &all {
        fs::symlink_metadata(p).expect("lstat");
    }
    let after = view_logs(&w.store);
    let new = after.get(before.len()..).unwrap_or_default();
    let lookups: Vec<&str> = new.lines().filter(|l| l.contains(" LOOKUP ")).collect();
    assert!(
        lookups.is_empty(),
        "{} lookups reached the lower view after its warm-up, e.g. {:?}",
        lookups.len(),
        lookups.first()
    );

    // A real first `git status`: it reads `.gitignore` (there is none) in every directory
    // holding a subdirectory, which the warm-up looked up. What still reaches the view are
    // git's probes of its own files in .git (MERGE_HEAD...), none of the tree's names.
    let status = git(&w.room, &["status", "--porcelain"]);
    assert_eq!(status, "", "the workspace is clean");
    let after_git = view_logs(&w.store);
    let new = after_git.get(after.len()..).unwrap_or_default();
    let mut names: Vec<String> = vec![".gitignore".into()];
    names.extend((0..DIRS).map(|d| format!("d{d}")));
    names.extend((0..SUBDIRS).map(|d| format!("s{d}")));
    names.extend((0..FILES).map(|f| format!("f{f}.txt")));
    let tree_names = |l: &&str| {
        l.contains(" LOOKUP ") && names.iter().any(|n| l.contains(&format!("name \"{n}\" ")))
    };
    let lookups: Vec<&str> = new.lines().filter(tree_names).collect();
    assert!(
        lookups.is_empty(),
        "git status sent {} lookups of the tree's names, e.g. {:?}",
        lookups.len(),
        lookups.first()
    );
    assert!(
        new.contains(" LOOKUP "),
        "git's probes of .git are in the request log"
    );
}

/// The directories (`dir` included) and entries (`dir` not included) below `dir`.
fn count(dir: &Path) -> (usize, usize) {
    let (mut dirs, mut entries) = (1, 0);
    for e in fs::read_dir(dir).expect("read_dir").flatten() {
        entries += 1;
        if e.file_type().expect("file type").is_dir() {
            let (d, n) = count(&e.path());
            dirs += d;
            entries += n;
        }
    }
    (dirs, entries)
}

fn git(dir: &Path, args: &[&str]) -> String {
    git_with(dir, &["core.untrackedCache=false"], args)
}

#[test]
fn mount_warm_wait_zero_returns_at_once_and_the_warm_up_goes_on() {
    let w = unmounted_room();
    ok(["init", w.store(), "--root", &format!("ws={}", w.room())]);
    ok(["capture", w.store(), "-m", "initial"]);

    // Bad values, and the option without --branch: one clear line each, nothing mounted.
    for bad in ["-1", "soon", "3601"] {
        let arg = format!("--warm-wait={bad}");
        let err = fails(2, ["mount", w.store(), "--branch", "main", &arg]);
        assert!(err.contains("--warm-wait"), "{err}");
    }
    let err = fails(2, ["mount", w.store(), "--warm-wait", "1"]);
    assert!(err.contains("--branch"), "{err}");
    assert!(!view_logs(&w.store).contains("warmed "));

    let out = run_env(
        ["mount", w.store(), "--branch", "main", "--warm-wait", "0"],
        &[(
            "RUST_LOG",
            "ckptfs::view::lower::warm=info,ckptfs::workspace::mount=debug",
        )],
    );
    assert!(out.status.success(), "mount: {}", stderr(&out));
    assert!(
        !stderr(&out).contains("lower view warm after"),
        "mount --warm-wait 0 waited: {}",
        stderr(&out)
    );
    // The warm-up runs all the same, in the background.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !view_logs(&w.store).contains("warmed ") {
        assert!(
            Instant::now() < deadline,
            "no warm-up after mount --warm-wait 0"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pids of the store's view daemons whose state file (`run/views/<pid>.json`) names a
/// mountpoint ending in `view` (`lower`, `lower-bare`).
fn view_pids(store: &Path, view: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in fs::read_dir(store.join("run/views")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_suffix(".json").and_then(|p| p.parse().ok()) else {
            continue;
        };
        let text = fs::read_to_string(e.path()).unwrap_or_default();
        if text.contains(&format!("/{view}\"")) {
            out.push(pid);
        }
    }
    out
}

/// Kills the process on drop (a test's shell that holds a detached overlay).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn mount_waits_for_the_daemon_mounted_now_not_one_left_detached() {
    let w = unmounted_room();
    ok(["init", w.store(), "--root", &format!("ws={}", w.room())]);
    ok(["capture", w.store(), "-m", "initial"]);
    ok(["mount", w.store(), "--branch", "main"]);
    let old = view_pids(&w.store, "lower-bare");
    assert_eq!(old.len(), 1, "one bare lower view daemon: {old:?}");
    let old = old[0];
    // A shell left in the workspace keeps its overlay, and so the old lower views and their
    // daemons, alive after the umount (detached); the old daemon's record lists the root.
    let shell = Killed(
        Command::new("sleep")
            .arg("600")
            .current_dir(w.room.join("d0"))
            .spawn()
            .expect("sleep"),
    );
    ok(["umount", w.room()]);
    assert!(
        view_pids(&w.store, "lower-bare").contains(&old),
        "the old daemon lives on"
    );

    let out = run_env(
        ["mount", w.store(), "--branch", "main"],
        &[(
            "RUST_LOG",
            "ckptfs::workspace::mount=debug,ckptfs::workspace::lower=debug",
        )],
    );
    assert!(out.status.success(), "mount: {}", stderr(&out));
    let new: Vec<u32> = view_pids(&w.store, "lower-bare")
        .into_iter()
        .filter(|p| *p != old)
        .collect();
    assert_eq!(new.len(), 1, "one new bare lower view daemon: {new:?}");
    let err = stderr(&out);
    assert!(
        err.contains(&format!("by the lower view daemon {}", new[0])),
        "mount waited on another daemon than the one mounted now ({}): {err}",
        new[0]
    );
    assert!(err.contains("ws: lower view warm after"), "{err}");
    ok(["umount", w.room()]);
    drop(shell);
}

#[test]
fn a_listing_of_the_checkpoint_directory_starts_its_roots_warm_ups_and_mount_waits_for_them() {
    let w = unmounted_room();
    let room2 = w.tmp.path().join("room2");
    populate(&room2);
    ok([
        "init",
        w.store(),
        "--root",
        &format!("ws={}", w.room()),
        "--root",
        &format!("ws2={}", s(&room2)),
    ]);
    ok(["capture", w.store(), "-m", "initial"]);
    let out = run_env(
        ["mount", w.store(), "--branch", "main", "--root", "ws"],
        &[("RUST_LOG", "ckptfs::view::lower::warm=info")],
    );
    assert!(out.status.success(), "mount: {}", stderr(&out));
    // The checkpoint directory in the lower view, from the overlay's lowerdir.
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info
        .lines()
        .find(|l| l.contains(&format!(" {} ", w.room())) && l.contains("lowerdir="))
        .expect("the workspace's overlay");
    let lower = line
        .split("lowerdir=")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    // (The overlay is nested: its lowerdir is the checkpoint directory, docs/inodes.md.)
    let checkpoint_dir = Path::new(lower).to_path_buf();
    assert!(
        checkpoint_dir.parent().unwrap().ends_with("checkpoints"),
        "{lower}"
    );
    // Listed (READDIRPLUS): the kernel gets ws2's entry without looking it up.
    let listed: Vec<String> = fs::read_dir(&checkpoint_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(listed.contains(&"ws2".to_string()), "{listed:?}");

    ok(["fork", w.store(), "main", "--name", "b2"]);
    let out = run_env(
        ["mount", w.store(), "--branch", "b2", "--root", "ws2"],
        &[(
            "RUST_LOG",
            "ckptfs::workspace::mount=debug,ckptfs::workspace::lower=debug",
        )],
    );
    assert!(out.status.success(), "mount b2: {}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("ws2: lower view warm after"), "{err}");
    let logs = view_logs(&w.store);
    assert!(
        logs.lines()
            .any(|l| l.contains("warmed ") && l.contains("/ws2: ")),
        "no warm-up of ws2 in the lower view's log:\n{logs}"
    );
    ok(["umount", s(&room2)]);
}

#[test]
fn switch_waits_for_the_warm_up_of_the_new_base() {
    let w = unmounted_room();
    ok(["init", w.store(), "--root", &format!("ws={}", w.room())]);
    ok(["capture", w.store(), "-m", "first"]);
    write(&w.room.join("d0/new.txt"), b"new\n");
    ok(["capture", w.store(), "-m", "second"]);
    let log = ok_json(["log", w.store(), "--json"]);
    let first = log[1]["id"].as_str().expect("id").to_string();
    // main is mounted at the second capture; the first was never shown by this lower view.
    let out = run_env(
        ["mount", w.store(), "--branch", "main"],
        &[("RUST_LOG", "ckptfs::view::lower::warm=info")],
    );
    assert!(out.status.success(), "mount: {}", stderr(&out));
    ok(["fork", w.store(), &first, "--name", "old"]);
    let out = run_env(
        ["switch", w.room(), "--to", "old"],
        &[(
            "RUST_LOG",
            "ckptfs::workspace::mount=debug,ckptfs::workspace::lower=debug",
        )],
    );
    assert!(out.status.success(), "switch: {}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("ws: lower view warm after"), "{err}");
    let logs = view_logs(&w.store);
    assert!(
        logs.lines()
            .any(|l| l.contains("warmed ") && l.contains(&format!("/{first}/ws: "))),
        "no warm-up of the first capture in the lower view's log:\n{logs}"
    );
    assert!(
        !w.room.join("d0/new.txt").exists(),
        "switched to the first capture"
    );
}
