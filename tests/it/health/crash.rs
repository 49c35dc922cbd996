//! Crash tests by fault injection (redb-style): for capture, restore, gc, archive and
//! unarchive, count the operation's durable I/O steps (`CKPTFS_FAULT=count`), then run it again
//! failing (`fail:N`) or aborting (`abort:N`) at up to 50 spread steps N in each mode. After
//! every run `recover` then `verify` must be clean and the store must show the old state or the
//! new one, never a mix. Plus SIGKILL at random times against a real capture.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::*;

/// Fault points per mode (all of them when the operation has fewer steps): with both modes,
/// 60 spread points per operation.
const POINTS: u64 = 30;

struct Fixture {
    dir: tempfile::TempDir,
    /// Checkpoints on main, oldest first; [1] is labelled `l1`.
    ids: Vec<String>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempdir();
        let room = dir.path().join("room");
        make_room(&room, 30, 11);
        let store = dir.path().join("store");
        init(&store, &room);
        let mut ids = Vec::new();
        for i in 0..4 {
            fs::write(
                room.join(format!("turn{i}.log")),
                format!("turn {i}\n").repeat(4000),
            )
            .unwrap();
            ids.push(capture(&store, &[]));
        }
        ok(["label", s(&store), &ids[1], "l1"]);
        // A changed copy of the room for capture --from.
        let new_room = dir.path().join("room-new");
        copy_dir(&room, &new_room);
        fs::write(new_room.join("d1/f1.txt"), "changed\n".repeat(3000)).unwrap();
        fs::write(new_room.join("added.bin"), vec![7u8; 200_000]).unwrap();
        fs::remove_file(new_room.join("d2/f2.txt")).unwrap();
        Fixture { dir, ids }
    }
    fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }
    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
    /// A fresh work directory holding a copy of the store.
    fn work(&self, name: &str) -> (PathBuf, PathBuf) {
        let w = self.dir.path().join(name);
        fs::create_dir(&w).unwrap();
        let st = w.join("store");
        copy_dir(&self.store(), &st);
        (w, st)
    }
}

/// Runs `check(work, store, output)` for each fault point of both modes, two at a time.
fn fault_loop(
    fx: &Fixture,
    name: &str,
    steps: u64,
    args: &(dyn Fn(&Path, &Path) -> Vec<String> + Sync),
    prepare: &(dyn Fn(&Path) + Sync),
    check: &(dyn Fn(&Path, &Path, &str) + Sync),
) {
    let mut cases = Vec::new();
    for mode in ["fail", "abort"] {
        for n in spread(steps, POINTS) {
            cases.push((mode, n));
        }
    }
    eprintln!("{name}: {steps} I/O steps, {} fault runs", cases.len());
    par_for(&cases, |(mode, n)| {
        let ctx = format!("{name} {mode}:{n}/{steps}");
        let (w, st) = fx.work(&format!("{name}-{mode}-{n}"));
        prepare(&w);
        let o = run_fault(args(&w, &st), mode, *n);
        if *mode == "abort" {
            assert!(!o.status.success(), "{ctx}: abort did not happen");
        }
        check(&w, &st, &ctx);
        fs::remove_dir_all(&w).ok();
    });
}

#[test]
fn capture_crashes_leave_old_or_new_state() {
    let fx = Fixture::new();
    let old_head = fx.ids[3].clone();
    let new_room = fx.path("room-new");
    let args = |_: &Path, st: &Path| -> Vec<String> {
        vec![
            "capture".into(),
            s(st).into(),
            "--from".into(),
            format!("workspace={}", s(&new_room)),
            "-m".into(),
            "new".into(),
        ]
    };
    // Reference run: the new tree.
    let (_, refst) = fx.work("capture-ref");
    let a = args(Path::new(""), &refst);
    let steps = io_steps(&a);
    let new_tree = tree_of(&refst, "main");
    fault_loop(&fx, "capture", steps, &args, &|_| {}, &|_, st, ctx| {
        recover_and_verify(st, ctx);
        let h = head(st, "main").unwrap();
        if h != old_head {
            assert_eq!(
                tree_of(st, &h),
                new_tree,
                "{ctx}: head is neither old nor new"
            );
            assert_eq!(show(st, &h)["parents"][0], old_head.as_str(), "{ctx}");
        }
        // The store keeps working: a capture after recovery succeeds.
        ok([
            "capture",
            s(st),
            "--from",
            &format!("workspace={}", s(&new_room)),
        ]);
        ok(["verify", s(st)]);
    });
}

#[test]
fn restore_crashes_leave_old_or_new_directory() {
    let fx = Fixture::new();
    let prepare = |w: &Path| {
        let dest = w.join("dest");
        fs::create_dir(&dest).unwrap();
        fs::write(dest.join("old.txt"), b"old content").unwrap();
    };
    let args = |w: &Path, st: &Path| -> Vec<String> {
        vec![
            "restore".into(),
            s(st).into(),
            "l1".into(),
            "--to".into(),
            s(&w.join("dest")).into(),
        ]
    };
    let (rw, rst) = fx.work("restore-ref");
    prepare(&rw);
    let a = args(&rw, &rst);
    let steps = io_steps(&a);
    let new_snap = contents(&rw.join("dest"));
    let mut old_snap = std::collections::BTreeMap::new();
    old_snap.insert("old.txt".to_string(), b"old content".to_vec());
    fault_loop(&fx, "restore", steps, &args, &prepare, &|w, st, ctx| {
        recover_and_verify(st, ctx);
        let snap = contents(&w.join("dest"));
        assert!(
            snap == old_snap || snap == new_snap,
            "{ctx}: destination is a mix: {:?}",
            snap.keys().collect::<Vec<_>>()
        );
        let leftovers: Vec<String> = fs::read_dir(w)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".ckptfs-restore"))
            .collect();
        assert!(
            leftovers.is_empty(),
            "{ctx}: staging left behind: {leftovers:?}"
        );
    });
}

#[test]
fn gc_crashes_leave_a_clean_store_and_a_rerun_finishes() {
    let fx = Fixture::new();
    let args = |_: &Path, st: &Path| -> Vec<String> {
        vec!["gc".into(), s(st).into(), "--keep-last".into(), "1".into()]
    };
    let (_, rst) = fx.work("gc-ref");
    let a = args(Path::new(""), &rst);
    let steps = io_steps(&a);
    let final_set = checkpoints(&rst);
    assert_eq!(final_set.len(), 2);
    let all = checkpoints(fx.store());
    let heads = |st: &Path| {
        (
            head(st, "main"),
            fs::read_to_string(st.join("refs/labels/l1")).ok(),
        )
    };
    let before = heads(&fx.store());
    fault_loop(&fx, "gc", steps, &args, &|_| {}, &|_, st, ctx| {
        recover_and_verify(st, ctx);
        let now = checkpoints(st);
        for k in &final_set {
            assert!(now.contains(k), "{ctx}: kept checkpoint {k} was deleted");
        }
        for c in &now {
            assert!(all.contains(c), "{ctx}");
        }
        assert_eq!(heads(st), before, "{ctx}: refs changed");
        ok(["gc", s(st), "--keep-last", "1"]);
        assert_eq!(checkpoints(st), final_set, "{ctx}: rerun did not finish");
        ok(["verify", s(st)]);
    });
}

#[test]
fn archive_crashes_leave_no_half_archive() {
    let fx = Fixture::new();
    let expected_head = fx.ids[3].clone();
    let args = |w: &Path, st: &Path| -> Vec<String> {
        vec![
            "archive".into(),
            s(st).into(),
            "main".into(),
            "--out".into(),
            s(&w.join("out/a.ckar")).into(),
            "--split".into(),
            "64K".into(),
        ]
    };
    let prepare = |w: &Path| fs::create_dir(w.join("out")).unwrap();
    let (rw, rst) = fx.work("archive-ref");
    prepare(&rw);
    let a = args(&rw, &rst);
    let steps = io_steps(&a);
    fault_loop(&fx, "archive", steps, &args, &prepare, &|w, st, ctx| {
        recover_and_verify(st, ctx);
        let temps: Vec<String> = fs::read_dir(w.join("out"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("ckptfs-tmp"))
            .collect();
        assert!(temps.is_empty(), "{ctx}: partial files left: {temps:?}");
        let target = w.join("imported");
        let o = run(["unarchive", s(&w.join("out/a.ckar")), s(&target)]);
        if w.join("out/a.ckar.sha256").exists() {
            assert!(
                o.status.success(),
                "{ctx}: complete archive refused: {}",
                stderr(&o)
            );
            ok(["verify", s(&target)]);
            assert_eq!(
                head(&target, "main").as_deref(),
                Some(expected_head.as_str())
            );
        } else {
            assert!(
                !o.status.success(),
                "{ctx}: archive without sidecar accepted"
            );
            assert!(!target.exists(), "{ctx}");
        }
    });
}

#[test]
fn unarchive_crashes_leave_old_or_new_state() {
    let fx = Fixture::new();
    let file = fx.path("a.ckar");
    ok(["archive", s(&fx.store()), "main", "--out", s(&file)]);
    let expected_head = fx.ids[3].clone();
    let relocated = fx.path("relocated/room");
    let args = |w: &Path, _: &Path| -> Vec<String> {
        vec![
            "unarchive".into(),
            s(&file).into(),
            s(&w.join("target")).into(),
            "--relocate".into(),
            format!("workspace={}", s(&relocated)),
        ]
    };
    let (rw, _) = fx.work("unarchive-ref");
    let a = args(&rw, Path::new(""));
    let steps = io_steps(&a);
    fault_loop(&fx, "unarchive", steps, &args, &|_| {}, &|w, _, ctx| {
        let target = w.join("target");
        if target.join("STORE.json").exists() {
            recover_and_verify(&target, ctx);
        }
        // Otherwise it failed before the store existed: nothing imported (an interrupted init
        // leaves a skeleton that the rerun below reuses).
        if target.join("STORE.json").exists() {
            if let Some(h) = head(&target, "main") {
                assert_eq!(h, expected_head, "{ctx}");
            }
        }
        // A rerun finishes the import.
        ok([
            "unarchive",
            s(&file),
            s(&target),
            "--relocate",
            &format!("workspace={}", s(&relocated)),
        ]);
        assert_eq!(
            head(&target, "main").as_deref(),
            Some(expected_head.as_str()),
            "{ctx}"
        );
        ok(["verify", s(&target)]);
    });
}

#[test]
fn sigkill_during_capture() {
    let t = tempdir();
    let room = t.path().join("room");
    make_room(&room, 300, 5);
    let store = t.path().join("store");
    init(&store, &room);
    let old = capture(&store, &[]);
    let new_room = t.path().join("room-new");
    make_room(&new_room, 320, 6);
    let args = ["capture", s(&store), "--from"];
    let from = format!("workspace={}", s(&new_room));
    // Reference duration and tree on a copy.
    let refst = t.path().join("ref");
    copy_dir(&store, &refst);
    let started = Instant::now();
    ok(["capture", s(&refst), "--from", &from]);
    let full = started.elapsed();
    let new_tree = tree_of(&refst, "main");
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut outcomes = (0, 0);
    for i in 0..10 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Between a quarter of the way and just past the end of a full run.
        let span = full.as_micros() as u64;
        let delay = Duration::from_micros(span / 4 + x % (span - span / 4 + span / 10 + 1));
        let st = t.path().join(format!("s{i}"));
        copy_dir(&store, &st);
        let mut child = cmd([args[0], s(&st), args[2], &from])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        child.kill().ok();
        child.wait().unwrap();
        let ctx = format!("kill after {delay:?} of {full:?}");
        recover_and_verify(&st, &ctx);
        let h = head(&st, "main").unwrap();
        if h == old {
            outcomes.0 += 1;
        } else {
            assert_eq!(tree_of(&st, &h), new_tree, "{ctx}");
            outcomes.1 += 1;
        }
        fs::remove_dir_all(&st).ok();
    }
    eprintln!("sigkill: {} old, {} new", outcomes.0, outcomes.1);
}
