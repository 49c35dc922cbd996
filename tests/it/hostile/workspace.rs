//! Hostile workspaces: an unprivileged agent (`nobody`) writes a mounted workspace while root
//! checkpoints it. The checkpoint walks the overlay's upper layer, which the agent controls
//! through the mount (it can swap a directory for a symlink, or a file for a FIFO, at any
//! instant); whatever the interleaving, no checkpoint records anything from outside the
//! workspace, and none hangs. A special file the agent leaves behind fails only the
//! checkpoints that do not exclude it: `status` names it, and the branch still mounts.

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

#[test]
fn checkpoint_never_follows_a_directory_swapped_for_a_symlink() {
    let files = names(200);
    let w = Workspace::for_nobody(&[], |room| {
        fs::create_dir(room.join("d")).unwrap();
        for n in &files {
            fs::write(room.join("d").join(n), vec![b'a'; 32 << 10]).unwrap();
        }
        fs::create_dir(room.join("e")).unwrap();
        fs::write(room.join("e/kept"), b"kept").unwrap();
    });
    // `d` is swapped for a directory with the same file names, `e` for one with only a
    // directory and a symlink (so a walk that follows it has no file to fail on).
    let secret = secret_dir(w.tmp.path(), "outside", &files);
    let secret_names = secret_dir(w.tmp.path(), "outside-names", &[]);
    // The agent's turn rewrote every file, so the upper layer holds them all: a walk that
    // lists the outside directory through the swapped `d` finds each name there too.
    for n in &files {
        let p = w.room.join("d").join(n);
        let mut f = fs::OpenOptions::new().append(true).open(&p).unwrap();
        std::io::Write::write_all(&mut f, b"turn\n").unwrap();
    }
    ok_bounded(["checkpoint", w.room(), "-m", "turn"], SLOW);
    let swap = |name: &str, to: &Path| {
        format!(
            "    for step in (lambda: os.rename('{name}', '{name}.real'), lambda: os.symlink({to:?}, '{name}'), lambda: time.sleep(0.002), lambda: os.unlink('{name}'), lambda: os.rename('{name}.real', '{name}'), lambda: time.sleep(0.002)):\n        try:\n            step()\n        except OSError:\n            pass\n",
        )
    };
    let _a = Attacker::start(&w.room, &swap("d", &secret), 60);
    let _b = Attacker::start(&w.room, &swap("e", &secret_names), 60);
    let (mut recorded, mut refused) = (0, 0);
    let start = Instant::now();
    while recorded + refused < 40 && start.elapsed() < Duration::from_secs(40) {
        let args = ["checkpoint", w.room(), "-m", "race"];
        let (o, done) = run_bounded(args, Duration::from_secs(30));
        assert!(done, "checkpoint hung");
        if o.status.success() {
            recorded += 1;
        } else {
            assert_clean_failure(&args, &o);
            if refused < 5 {
                eprintln!("refused: {}", stderr(&o).trim());
            }
            refused += 1;
        }
    }
    eprintln!("{recorded} checkpoints recorded, {refused} refused during the race");
    drop(_a);
    drop(_b);
    // Settle the room and record it once more.
    for name in ["d", "e"] {
        let p = w.room.join(name);
        if fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
            fs::remove_file(&p).unwrap();
        }
        if !p.exists() {
            fs::rename(w.room.join(format!("{name}.real")), &p).unwrap();
        }
    }
    ok_bounded(["checkpoint", w.room(), "-m", "settled"], SLOW);
    let bad = checkpoints_with_secret(w.store(), w.tmp.path());
    assert!(
        bad.is_empty(),
        "checkpoints recorded what lies outside the workspace: {bad:?}"
    );
}

#[test]
fn checkpoint_never_hangs_on_a_file_swapped_for_a_fifo() {
    let w = Workspace::for_nobody(&[], |room| {
        fs::create_dir(room.join("d")).unwrap();
    });
    // Written through the mount, so they are upper files that every checkpoint reads again
    // once touched (as the agent's next turn would); big ones first, on every core, the small
    // one last: it spends half its time as a FIFO.
    for i in 0..4 {
        fs::write(w.room.join(format!("d/big{i}")), vec![i as u8; 16 << 20]).unwrap();
    }
    fs::write(w.room.join("d/small"), b"small").unwrap();
    chown_tree(&w.room.join("d"), NOBODY);
    let _a = Attacker::start(
        &w.room.join("d"),
        "    try:\n        os.rename('small', 'small.x'); os.mkfifo('small'); time.sleep(0.03); os.unlink('small'); os.rename('small.x', 'small'); time.sleep(0.03)\n    except OSError:\n        pass\n",
        60,
    );
    let start = Instant::now();
    let mut outcomes = std::collections::BTreeMap::new();
    let mut runs = 0;
    while runs < 20 && start.elapsed() < Duration::from_secs(40) {
        for i in 0..4 {
            let st = Command::new("touch")
                .arg(w.room.join(format!("d/big{i}")))
                .status()
                .unwrap();
            assert!(st.success());
        }
        let args = ["checkpoint", w.room(), "-m", "fifo race"];
        let (o, done) = run_bounded(args, Duration::from_secs(15));
        assert!(done, "checkpoint hung on a FIFO (run {runs}, {outcomes:?})");
        if !o.status.success() {
            assert_clean_failure(&args, &o);
        }
        *outcomes.entry(fifo_race_outcome(&o)).or_insert(0) += 1;
        runs += 1;
    }
    eprintln!("checkpoint outcomes under the FIFO race: {outcomes:?}");
    // `status` must not hang on it either.
    let args = ["status", w.store(), "--json"];
    let (o, done) = run_bounded(args, Duration::from_secs(15));
    assert!(done, "status hung on a FIFO");
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_fifo_fails_only_the_checkpoints_that_do_not_exclude_it_and_the_branch_still_mounts() {
    // Sockets are excluded by the root's rules: never reported, never in the way.
    let w = Workspace::for_nobody(&["--exclude", "ws=*.sock"], |room| {
        fs::write(room.join("a.txt"), b"one").unwrap();
        fs::write(room.join("gone.txt"), b"to delete").unwrap();
    });
    let fifo = w.room.join("pipe.fifo");
    mkfifo(&fifo);
    let _sock = std::os::unix::net::UnixListener::bind(w.room.join("agent.sock")).unwrap();
    fs::write(w.room.join("a.txt"), b"two").unwrap();
    // A whiteout (a deleted lower file) is a char device 0/0 in the upper: a deletion, not a
    // special file.
    fs::remove_file(w.room.join("gone.txt")).unwrap();

    let args = ["checkpoint", w.room(), "-m", "with a fifo"];
    let (o, done) = run_bounded(args, SLOW);
    assert!(done, "ckptfs {args:?} hung");
    assert!(!o.status.success(), "a checkpoint recorded a FIFO");
    assert_clean_failure(&args, &o);
    let err = stderr(&o);
    assert!(err.contains("pipe.fifo") && err.contains("fifo"), "{err}");

    // `status` says why, and does not say clean.
    let rows: serde_json::Value =
        serde_json::from_str(&ok_bounded(["status", w.store(), "--json"], SLOW)).unwrap();
    let ws = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "workspace")
        .expect("workspace row");
    assert_eq!(ws["dirty"], true, "{ws}");
    assert_eq!(
        ws["special_files"],
        serde_json::json!([{"path": s(&fifo), "kind": "fifo"}]),
        "{ws}"
    );
    let human = ok_bounded(["status", w.store()], SLOW);
    assert!(
        human.contains(&format!("not checkpointable: {} is a fifo", fifo.display())),
        "{human}"
    );
    assert!(!human.contains("clean"), "{human}");

    // Excluded, it is left out and the rest is recorded.
    let id = {
        let out = ok_bounded(
            [
                "checkpoint",
                w.room(),
                "-m",
                "fifo excluded",
                "--exclude",
                "*.fifo",
                "--json",
            ],
            SLOW,
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["id"].as_str().unwrap().to_string()
    };
    let to = w.tmp.path().join("restored");
    ok_bounded(
        ["restore", w.store(), &id, "--root", "ws", "--to", s(&to)],
        SLOW,
    );
    assert_eq!(fs::read(to.join("a.txt")).unwrap(), b"two");
    assert!(!to.join("pipe.fifo").exists() && !to.join("gone.txt").exists());
    assert!(!to.join("agent.sock").exists());
    // Still there, so still not clean.
    let human = ok_bounded(["status", w.store()], SLOW);
    assert!(human.contains("not checkpointable"), "{human}");

    // The branch mounts again, with the FIFO and the changes kept in its upper layer.
    drop(_sock);
    ok_bounded(["umount", w.room()], SLOW);
    ok_bounded(["mount", w.store(), "--branch", "main"], SLOW);
    let m = fs::symlink_metadata(&fifo).expect("the FIFO after the mount");
    assert!(m.file_type().is_fifo());
    assert_eq!(fs::read(w.room.join("a.txt")).unwrap(), b"two");
    assert!(!w.room.join("gone.txt").exists());
}

/// The agent (`nobody`) keeps a shell in its room across a switch and a fold: the fold waits
/// for it, naming it, and after the switch its writes fail with EROFS in the tree left
/// behind, never landing in the branch it left or the one now shown; `status` names the tree.
#[test]
fn an_agent_left_inside_cannot_write_into_a_branch_it_was_switched_away_from() {
    let w = Workspace::for_nobody(&[], |room| {
        write(&room.join("sub/a.txt"), b"a\n");
    });
    ok(["fork", w.store(), "main", "--name", "other"]);
    let mut sh = InsideShell::start_as_nobody(&w.path("sub"));
    assert_eq!(sh.run("echo turn >> a.txt && echo ok"), "ok\n");
    // A checkpoint with the agent inside records its write but cannot fold: it says who.
    let r = w.checkpoint_json("with the agent inside");
    assert_eq!(r["fold"]["folded"], false, "{r}");
    let held_by_shell = r["fold"]["holders"]
        .as_array()
        .is_some_and(|h| h.iter().any(|x| x["pid"] == sh.pid()));
    assert!(held_by_shell, "{r}");
    let r = ok_json(["switch", w.room(), "--to", "other", "--json"]);
    assert_eq!(r["left_behind_writable"], false, "{r}");
    let out = sh.run("echo stray > stray.txt && echo wrote");
    assert!(out.contains("Read-only file system"), "{out}");
    let out = sh.run("echo more >> a.txt && echo wrote");
    assert!(out.contains("Read-only file system"), "{out}");
    let rows = ok_json(["status", w.store(), "--json"]);
    let named = rows.as_array().is_some_and(|rows| {
        rows.iter().any(|l| {
            l["kind"] == "left-behind"
                && l["branch"] == "main"
                && l["holders"]
                    .as_array()
                    .is_some_and(|h| h.iter().any(|x| x["pid"] == sh.pid()))
        })
    });
    assert!(named, "{rows}");
    // Neither branch got the stray writes.
    assert!(!w.path("sub/stray.txt").exists());
    assert_eq!(fs::read(w.path("sub/a.txt")).unwrap(), b"a\n");
    let main = ok(["cat", w.store(), "main:ws/sub/a.txt"]);
    assert_eq!(main, "a\nturn\n");
    assert!(
        run(["cat", w.store(), "main:ws/sub/stray.txt"])
            .status
            .code()
            != Some(0)
    );
    drop(sh);
}

/// A fold past its budget carries the agent's newest files into a fresh upper layer, as root:
/// it carries regular files only, never follows what the agent planted (a symlink to a secret
/// file, a directory symlink, a name with escape codes, a hard-linked pair, a setuid file of
/// its own), and the workspace after it shows exactly what the head
/// records, with nothing from outside in any checkpoint.
#[test]
fn a_fold_keeping_the_agents_files_carries_nothing_it_planted() {
    let w = Workspace::for_nobody(&[], |room| {
        fs::write(room.join("transcript.jsonl"), b"{}\n").unwrap();
    });
    w.remount_with_fold_budget("4M");
    let secret = secret_dir(w.tmp.path(), "outside", &["secret".to_string()]);
    let red = "\u{1b}[31mred\u{7}";
    nobody_ok(&format!(
        "cd {room} && big='head -c 300000 /dev/zero' && $big >> transcript.jsonl && \
         mkdir -p a/b && $big > a/b/f && ln -s {secret}/secret a/link && \
         ln -s {secret} a/dirlink && $big > '{red}' && $big > suid && chmod 4755 suid && \
         $big > l1 && ln l1 l2 && head -c 3000000 /dev/zero > bulk",
        room = w.room.display(),
        secret = secret.display()
    ));
    let dir_before = fs::symlink_metadata(w.room.join("a/b")).unwrap();
    let r = ok_json(["checkpoint", w.room(), "-m", "turn", "--json"]);
    assert_eq!(r["fold"]["folded"], true, "{r}");
    assert!(r["fold"]["kept_files"].as_u64() >= Some(4), "{r}");
    // The directory made anew above a kept file is the agent's, as it was, with its times.
    let dir_after = fs::symlink_metadata(w.room.join("a/b")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (
            dir_after.uid(),
            dir_after.mode(),
            dir_after.mtime(),
            dir_after.mtime_nsec()
        ),
        (
            dir_before.uid(),
            dir_before.mode(),
            dir_before.mtime(),
            dir_before.mtime_nsec()
        )
    );
    assert_eq!(dir_after.uid(), NOBODY);
    let upper = w.store.join("upper/main/.top-ws/ws");
    for kept in ["transcript.jsonl", "a/b/f", red, "suid"] {
        let m = fs::symlink_metadata(upper.join(kept)).unwrap();
        assert!(m.is_file(), "{kept} not kept");
    }
    for folded in ["a/link", "a/dirlink", "l1", "l2", "bulk"] {
        assert!(
            fs::symlink_metadata(upper.join(folded)).is_err(),
            "{folded} carried"
        );
    }
    // The workspace shows what the head records: the symlinks as symlinks, the links
    // joined, the setuid file nobody's with its mode.
    assert_eq!(
        fs::read_link(w.room.join("a/link")).unwrap(),
        secret.join("secret")
    );
    assert_eq!(fs::read(w.room.join(red)).unwrap(), vec![0; 300_000]);
    let suid = fs::symlink_metadata(w.room.join("suid")).unwrap();
    assert_eq!(suid.uid(), NOBODY);
    assert_eq!(suid.mode() & 0o7777, 0o4755);
    let l1 = fs::symlink_metadata(w.room.join("l1")).unwrap();
    assert_eq!(l1.nlink(), 2);
    nobody_ok(&format!(
        "cd {} && echo again >> transcript.jsonl && echo more >> a/b/f && touch a/b/new",
        w.room.display()
    ));
    ok(["checkpoint", w.room(), "-m", "after"]);
    let status = ok_json(["status", w.room(), "--json"]);
    assert_eq!(status[0]["dirty"], false, "{status}");
    assert!(checkpoints_with_secret(w.store(), w.tmp.path()).is_empty());
    let secret_now = fs::read_to_string(secret.join("secret")).unwrap();
    assert_eq!(secret_now, SECRET);
}

/// The overlay warm-up after a fold walks the agent's tree as root: a FIFO, symlinks to a
/// root-only directory and to `/`, a name of escape codes and a chain of 300 directories
/// neither block it, nor lead it outside the workspace, nor keep it past its depth bound.
#[test]
fn the_warm_up_after_a_fold_follows_nothing_the_agent_planted() {
    let w = Workspace::for_nobody(&[], |room| {
        fs::write(room.join("notes.md"), b"notes\n").unwrap();
    });
    let secret = secret_dir(w.tmp.path(), "outside", &names(300));
    let red = "\u{1b}[31mred\u{7}";
    nobody_ok(&format!(
        "cd {room} && ln -s {secret} secret && ln -s / up && \
         mkdir '{red}' && touch '{red}/f' && \
         python3 -c \"import os; os.makedirs('/'.join(['deep'] + ['d'] * 300))\"",
        room = w.room.display(),
        secret = secret.display()
    ));
    let t0 = now_ns();
    // The warm-up waits 2 s before it walks; meanwhile the agent makes a FIFO (which no
    // checkpoint takes) in the new overlay.
    let o = run_env(
        ["checkpoint", w.room(), "-m", "planted", "--json"],
        &[("CKPTFS_TEST_WARM_HOLD_MS", "2000")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["fold"]["folded"], true, "{r}");
    nobody_ok(&format!("mkfifo {}/pipe", w.room.display()));
    let rec = warm_record_after(&w.store, t0);
    let o = &rec["overlays"][0];
    // Cut at the depth bound (256 levels below the root), so not complete.
    assert_eq!(o["complete"], false, "{rec}");
    // The root's 6 entries, red's 1, and one per level down the chain, as far as the bound:
    // nothing of the 300 files behind `secret`, nothing of `/`.
    let looked_up = o["looked_up"].as_u64().unwrap();
    assert!((250..=270).contains(&looked_up), "{rec}");
    assert_eq!(o["entries"].as_u64(), Some(looked_up), "{rec}");
    eventually("the warm-up exits", || warm_processes(&w.store).is_empty());
    // The FIFO was never opened: a writer would find no reader (ENXIO) rather than block.
    let pipe = w.room.join("pipe");
    assert!(fs::symlink_metadata(&pipe).unwrap().file_type().is_fifo());
    let secret_now = fs::read_to_string(secret.join("f000")).unwrap();
    assert_eq!(secret_now, SECRET);
}
