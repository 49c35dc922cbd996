//! Hostile rooms: an unprivileged agent (`nobody`) attacks a root-run ckptfs through the trees
//! it may write. Each race loops the attacker's swap for a bounded time while root checkpoints
//! or restores; the assertions hold whatever the interleaving: no checkpoint ever records a
//! file from outside the roots, no restore writes outside its target, no operation hangs.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

/// A store with root `ws` at `t/room`, the room owned by `nobody`, holding `d/f000..`.
fn room_with_dir(t: &Path, files: &[String]) -> (String, PathBuf) {
    let room = t.join("room");
    fs::create_dir_all(room.join("d")).unwrap();
    for n in files {
        write(&room.join("d").join(n), &vec![b'a'; 32 << 10]);
    }
    chown_tree(&room, NOBODY);
    let store = t.join("store");
    ok([
        "init",
        s(&store),
        "--root",
        &format!("ws={}", room.display()),
    ]);
    (s(&store).to_string(), room)
}

#[test]
fn capture_never_follows_a_directory_swapped_for_a_symlink() {
    let t = open_tmp();
    let files = names(200);
    let secret = secret_dir(t.path(), "secret", &files);
    let (store, room) = room_with_dir(t.path(), &files);
    let _a = Attacker::start(
        &room,
        &format!(
            "    try:\n        os.rename('d', 'd.real'); os.symlink({:?}, 'd'); os.unlink('d'); os.rename('d.real', 'd')\n    except OSError as e:\n        print(e)\n",
            secret.display()
        ),
        60,
    );
    let mut recorded = 0;
    let start = Instant::now();
    while recorded < 40 && start.elapsed() < Duration::from_secs(40) {
        let args = ["capture", store.as_str(), "-m", "race"];
        let (o, done) = run_bounded(args, Duration::from_secs(30));
        assert!(done, "capture hung");
        if o.status.success() {
            recorded += 1;
        } else {
            assert_clean_failure(&args, &o);
        }
    }
    eprintln!("{recorded} captures recorded during the race");
    drop(_a);
    // Settle the room and record it once more, so there is at least one checkpoint to check.
    let _ = fs::rename(room.join("d.real"), room.join("d"));
    ok_bounded(["capture", &store, "-m", "settled"], SLOW);
    let bad = checkpoints_with_secret(&store, t.path());
    assert!(
        bad.is_empty(),
        "checkpoints recorded a file from outside the root: {bad:?}"
    );
}

#[test]
fn capture_never_hangs_on_a_file_swapped_for_a_fifo() {
    let t = open_tmp();
    let (store, room) = room_with_dir(t.path(), &[]);
    // Big files are read first, on every core; the small one last, when the walk is long
    // past: it spends half its time as a FIFO. The big ones are touched before each capture
    // (as the agent's next turn would), so that every capture reads them again.
    for i in 0..4 {
        write(&room.join(format!("d/big{i}")), &vec![i as u8; 24 << 20]);
    }
    write(&room.join("d/small"), b"small");
    chown_tree(&room, NOBODY);
    let _a = Attacker::start(
        &room.join("d"),
        "    try:\n        os.rename('small', 'small.x'); os.mkfifo('small'); time.sleep(0.03); os.unlink('small'); os.rename('small.x', 'small'); time.sleep(0.03)\n    except OSError:\n        pass\n",
        60,
    );
    let start = Instant::now();
    let mut outcomes = std::collections::BTreeMap::new();
    let mut runs = 0;
    while runs < 25 && start.elapsed() < Duration::from_secs(40) {
        for i in 0..4 {
            let st = Command::new("touch")
                .arg(room.join(format!("d/big{i}")))
                .status()
                .unwrap();
            assert!(st.success());
        }
        let args = ["capture", store.as_str(), "-m", "fifo race"];
        let (o, done) = run_bounded(args, Duration::from_secs(15));
        assert!(done, "capture hung on a FIFO (run {runs}, {outcomes:?})");
        if !o.status.success() {
            assert_clean_failure(&args, &o);
        }
        *outcomes.entry(fifo_race_outcome(&o)).or_insert(0) += 1;
        runs += 1;
    }
    eprintln!("capture outcomes under the FIFO race: {outcomes:?}");
}

#[test]
fn restore_never_writes_through_a_swapped_staging_directory() {
    let t = open_tmp();
    // A checkpoint with many directories, so that staging takes a while.
    let src = t.path().join("room");
    for i in 0..300 {
        let d = src.join(format!("dir{i:03}"));
        write(&d.join("file"), format!("content {i}").as_bytes());
    }
    let store = t.path().join("store");
    let store = s(&store);
    ok(["init", store, "--root", &format!("ws={}", src.display())]);
    ok(["capture", store, "-m", "one"]);
    // The target's parent belongs to the attacker; a root-owned directory elsewhere is the
    // victim it tries to make root write into.
    let parent = t.path().join("agent-owned");
    fs::create_dir(&parent).unwrap();
    chown_tree(&parent, NOBODY);
    let victim = t.path().join("victim");
    fs::create_dir(&victim).unwrap();
    chmod(&victim, 0o755);
    let _a = Attacker::start(
        &parent,
        &format!(
            "    for n in os.listdir('.'):\n        if n.startswith('.ckptfs-restore') and not n.endswith('.moved'):\n            try:\n                os.rename(n, n + '.moved'); os.symlink({:?}, n)\n            except OSError:\n                pass\n",
            victim.display()
        ),
        60,
    );
    let target = parent.join("target");
    for i in 0..6 {
        let to = format!("{}{i}", target.display());
        let args = [
            "restore",
            store,
            "main",
            "--root",
            "ws",
            "--to",
            to.as_str(),
        ];
        let (o, done) = run_bounded(args, Duration::from_secs(60));
        assert!(done, "restore hung");
        if !o.status.success() {
            assert_clean_failure(&args, &o);
        }
        let written: Vec<_> = fs::read_dir(&victim).unwrap().collect();
        assert!(
            written.is_empty(),
            "restore wrote into {} through a swapped symlink: {} entries",
            victim.display(),
            written.len()
        );
    }
    // Nothing root-owned was chowned to the attacker or chmodded outside the target.
    assert_eq!(fs::metadata(&victim).unwrap().uid(), 0);
    assert_eq!(fs::metadata(&victim).unwrap().mode() & 0o7777, 0o755);
}
