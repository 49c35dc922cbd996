//! The upper layer's lifecycle while a workspace stays mounted (docs/workspaces.md): a
//! checkpoint with nobody inside folds the upper into the base (bytes stored once); someone
//! inside holds it, and status says who and how much waits; a switch leaves the tree it took
//! away read-only, naming who is still inside; and no mount is inside the store.

use crate::support::*;

use std::fs;
use std::path::Path;

fn populate(room: &Path) {
    write(&room.join("notes.md"), b"# notes\n");
    write(&room.join("sub/deep/a.txt"), b"a\n");
}

/// Regular files (and their bytes) under `dir`, not following symlinks.
fn files_under(dir: &Path) -> (u64, u64) {
    let mut acc = (0, 0);
    let Ok(rd) = fs::read_dir(dir) else {
        return acc;
    };
    for e in rd.flatten() {
        let m = fs::symlink_metadata(e.path()).unwrap();
        if m.is_dir() {
            let (n, b) = files_under(&e.path());
            acc = (acc.0 + n, acc.1 + b);
        } else if m.is_file() {
            acc = (acc.0 + 1, acc.1 + m.len());
        }
    }
    acc
}

fn workspace_row(w: &Workspace) -> serde_json::Value {
    ok_json(["status", w.store(), "--json"])
        .as_array()
        .and_then(|r| r.iter().find(|r| r["kind"] == "workspace").cloned())
        .expect("a workspace row")
}

fn left_behind_rows(w: &Workspace) -> Vec<serde_json::Value> {
    ok_json(["status", w.store(), "--json"])
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["kind"] == "left-behind")
        .cloned()
        .collect()
}

#[test]
fn a_checkpoint_with_nobody_inside_leaves_no_recorded_bytes_in_the_upper() {
    let w = Workspace::new(populate);
    let big = random_bytes(7, 3 << 20);
    write(&w.path("sub/big.bin"), &big);
    fs::write(w.path("notes.md"), "# notes\nmore\n").unwrap();
    fs::remove_file(w.path("sub/deep/a.txt")).unwrap();
    let upper = w.store.join("upper/main/.top-ws/ws");
    assert!(
        files_under(&upper).1 >= 3 << 20,
        "the test needs a copied-up upper"
    );
    let r = w.checkpoint_json("turn");
    assert_eq!(r["fold"]["folded"], true, "{r}");
    assert_eq!(
        r["fold"]["upper_bytes"].as_u64(),
        Some((3 << 20) + 13),
        "{r}"
    );
    // Two files (big.bin, notes.md); the whiteout of a.txt is no file.
    assert_eq!(r["fold"]["upper_files"], 2, "{r}");
    // The upper layer holds nothing (no file, no whiteout); the folded one is removed.
    assert_eq!(files_under(&upper), (0, 0));
    // Not even the root's directory: overlayfs makes it again at the first change.
    let top = upper.parent().unwrap();
    assert_eq!(fs::read_dir(top).unwrap().count(), 0, "upper not empty");
    wait_folded_removed(&w.store);
    // The workspace shows the same tree, now from the checkpoint, and is clean.
    assert_eq!(fs::read(w.path("sub/big.bin")).unwrap(), big);
    assert_eq!(
        fs::read_to_string(w.path("notes.md")).unwrap(),
        "# notes\nmore\n"
    );
    assert!(!w.path("sub/deep/a.txt").exists());
    let row = workspace_row(&w);
    assert_eq!(row["dirty"], false, "{row}");
    assert_eq!(row["base"], row["head"], "{row}");
    assert_eq!(row["fold_waiting"]["upper_bytes"], 0, "{row}");
    // It keeps working as a workspace: the next turn is recorded, and folded too.
    fs::write(w.path("sub/big.bin"), b"small now\n").unwrap();
    let id = w.checkpoint("next");
    assert_eq!(w.cat(&id, "sub/big.bin"), b"small now\n");
    assert_eq!(files_under(&upper), (0, 0));
    // Folds back to back, nothing touching the workspace in between (the kernel's "in use?"
    // answer marks an unused mount expired: a second ask with no use between would unmount
    // it): it stays mounted.
    for i in 0..3 {
        let r = ok_json([
            "checkpoint",
            w.room(),
            "-m",
            &format!("empty {i}"),
            "--allow-empty",
        ]);
        assert_eq!(r["fold"]["folded"], true, "{r}");
        assert!(mounted(&w.room), "fold {i} left the workspace unmounted");
    }
    assert_eq!(fs::read(w.path("sub/big.bin")).unwrap(), b"small now\n");
    // Nothing is left mounted aside once the old overlays are detached.
    eventually("the old overlays are detached", || {
        mounts_under(&detached_dir(&w.store)).is_empty()
    });
}

#[test]
fn no_fold_keeps_the_upper_until_a_checkpoint_that_folds() {
    let w = Workspace::new(populate);
    let upper = w.store.join("upper/main/.top-ws/ws");
    let log = random_bytes(5, 2 << 20);
    write(&w.path("log.jsonl"), &log);
    let r = ok_json([
        "checkpoint",
        w.room(),
        "-m",
        "turn 1",
        "--no-fold",
        "--json",
    ]);
    assert_eq!(r["recorded"], true, "{r}");
    assert_eq!(r["fold"]["folded"], false, "{r}");
    assert_eq!(r["fold"]["reason"], "--no-fold", "{r}");
    assert_eq!(r["fold"]["upper_bytes"].as_u64(), Some(2 << 20), "{r}");
    // The upper keeps the file (an append copies nothing up again), and says so in status.
    assert_eq!(files_under(&upper).1, 2 << 20);
    let row = workspace_row(&w);
    assert_eq!(
        row["fold_waiting"]["upper_bytes"].as_u64(),
        Some(2 << 20),
        "{row}"
    );
    let text = ok([
        "checkpoint",
        w.room(),
        "-m",
        "turn 2",
        "--no-fold",
        "--allow-empty",
    ]);
    assert!(text.contains("waiting to be folded: --no-fold"), "{text}");
    // The checkpoint after, without the flag, folds it all.
    fs::OpenOptions::new()
        .append(true)
        .open(w.path("log.jsonl"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"appended\n"))
        .unwrap();
    let r = w.checkpoint_json("turn 3");
    assert_eq!(r["fold"]["folded"], true, "{r}");
    assert_eq!(files_under(&upper), (0, 0));
    let mut want = log.clone();
    want.extend_from_slice(b"appended\n");
    assert_eq!(fs::read(w.path("log.jsonl")).unwrap(), want);
    // `turn --no-fold` leaves the turn's writes in the upper too.
    let script = format!("printf x >> {}", w.path("log.jsonl").display());
    ok([
        "turn",
        "--as-root",
        w.room(),
        "--no-fold",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(files_under(&upper).1 > 2 << 20, "turn --no-fold folded");
    ok(["turn", "--as-root", w.room(), "--", "true"]);
    assert_eq!(
        files_under(&upper),
        (0, 0),
        "turn without --no-fold did not fold"
    );
    // Nothing recorded and nothing waiting: the report still says why nothing was folded.
    let r = ok_json(["checkpoint", w.room(), "-m", "none", "--no-fold", "--json"]);
    assert_eq!(r["recorded"], false, "{r}");
    assert_eq!(r["fold"]["folded"], false, "{r}");
    assert_eq!(r["fold"]["reason"], "--no-fold", "{r}");
    assert_eq!(r["fold"]["upper_bytes"], 0, "{r}");
}

#[test]
fn an_open_file_holds_the_fold_and_status_names_its_process() {
    let w = Workspace::new(populate);
    write(&w.path("log.jsonl"), &random_bytes(3, 1 << 20));
    let path = w.path("notes.md");
    let script = format!(
        "import time; f = open('{}'); print('ready', flush=True); time.sleep(600)",
        path.display()
    );
    let h = holder(&["python3", "-c", &script]).expect("holder ready");
    let pid = h.0.id();
    let r = w.checkpoint_json("turn");
    assert_eq!(r["fold"]["folded"], false, "{r}");
    let named = |v: &serde_json::Value| {
        v["holders"].as_array().is_some_and(|hs| {
            hs.iter()
                .any(|x| x["pid"] == pid && x["how"] == "open file")
        })
    };
    assert!(named(&r["fold"]), "{r}");
    let row = workspace_row(&w);
    let waiting = &row["fold_waiting"];
    assert!(waiting["upper_bytes"].as_u64().unwrap() >= 1 << 20, "{row}");
    assert!(named(waiting), "{row}");
    let text = ok(["status", w.store()]);
    assert!(
        text.contains("waiting to be folded") && text.contains(&format!("pid {pid}")),
        "{text}"
    );
    // Once it leaves, the next checkpoint (of nothing new) folds.
    drop(h);
    let r = w.checkpoint_json("after");
    assert_eq!(r["recorded"], false, "{r}");
    assert_eq!(r["fold"]["folded"], true, "{r}");
    assert_eq!(files_under(&w.store.join("upper/main/.top-ws/ws")), (0, 0));
    assert_eq!(workspace_row(&w)["fold_waiting"]["upper_bytes"], 0);
}

#[test]
fn a_shell_left_in_a_switched_away_tree_cannot_write_into_the_branch_it_left() {
    let w = Workspace::new(populate);
    ok(["fork", w.store(), "main", "--name", "other"]);
    let mut sh = InsideShell::start(&w.path("sub"));
    let r = ok_json(["switch", w.room(), "--to", "other", "--json"]);
    let named = r["left_behind"]
        .as_array()
        .is_some_and(|l| l.iter().any(|h| h["pid"] == sh.pid() && h["how"] == "cwd"));
    assert!(named, "{r}");
    assert_eq!(r["left_behind_writable"], false, "{r}");
    // The shell still sees the tree it was in, but its writes fail: never into main.
    assert_eq!(sh.run("cat deep/a.txt"), "a\n");
    let out = sh.run("echo stray > stray.txt && echo wrote");
    assert!(out.contains("Read-only file system"), "{out}");
    let out = sh.run("rm deep/a.txt && echo removed");
    assert!(out.contains("Read-only file system"), "{out}");
    // Status names it, in the tree of main left behind.
    let rows = left_behind_rows(&w);
    assert!(
        rows.iter().any(|l| l["branch"] == "main"
            && l["readonly"] == true
            && l["holders"]
                .as_array()
                .unwrap()
                .iter()
                .any(|h| h["pid"] == sh.pid())),
        "{rows:?}"
    );
    // `cd "$PWD"` brings it to the branch now shown, where it writes.
    assert_eq!(
        sh.run("cd \"$PWD\" && echo here > here.txt && echo wrote"),
        "wrote\n"
    );
    let id = w.checkpoint("other's");
    assert_eq!(w.cat(&id, "sub/here.txt"), b"here\n");
    drop(sh);
    ok(["switch", w.room(), "--to", "main"]);
    assert!(!w.path("sub/stray.txt").exists());
    assert!(!w.path("sub/here.txt").exists());
    assert_eq!(workspace_row(&w)["dirty"], false);
    // Nobody inside any more: the next switch detaches the trees left behind.
    ok(["switch", w.room(), "--to", "other"]);
    eventually("the trees left behind are detached", || {
        left_behind_rows(&w).is_empty()
    });
}

/// A file open for writing would keep the tree a switch takes away writable (the kernel
/// refuses to make it read-only): the switch refuses, naming the process, and `--kill` ends
/// it. Nothing is left behind writable.
#[test]
fn a_file_open_for_writing_refuses_a_switch() {
    let w = Workspace::new(populate);
    ok(["fork", w.store(), "main", "--name", "other"]);
    let path = w.path("notes.md");
    let script = format!(
        "import time; f = open('{}', 'a'); print('ready', flush=True); time.sleep(600)",
        path.display()
    );
    let mut h = holder(&["python3", "-c", &script]).expect("holder ready");
    let pid = h.0.id();
    refused(
        1,
        ["switch", w.room(), "--to", "other"],
        &[
            &format!("pid {pid}"),
            "open for writing",
            s(&path),
            "--kill",
        ],
    );
    // Nothing changed: still main, writable.
    assert!(workspace_row(&w)["branch"] == "main");
    write(&w.path("sub/more.txt"), b"more\n");
    fs::remove_file(w.path("sub/more.txt")).unwrap();
    let r = ok_json(["switch", w.room(), "--to", "other", "--kill", "--json"]);
    assert_eq!(r["left_behind_writable"], false, "{r}");
    assert!(
        wait_for(std::time::Duration::from_secs(20), || matches!(
            h.0.try_wait(),
            Ok(Some(_))
        )),
        "the writer still runs"
    );
    assert!(left_behind_rows(&w).iter().all(|l| l["readonly"] == true));
}

#[test]
fn no_mount_is_inside_the_store() {
    let w = Workspace::new(populate);
    write(&w.path("sub/big.bin"), &random_bytes(9, 1 << 20));
    w.checkpoint("one");
    ok(["fork", w.store(), "main", "--name", "other"]);
    // A tree left behind stays mounted while the shell is inside it.
    let _sh = InsideShell::start(&w.path("sub"));
    ok(["switch", w.room(), "--to", "other"]);
    assert!(!left_behind_rows(&w).is_empty());
    let inside: Vec<_> = mounts()
        .into_iter()
        .filter(|(mp, _)| mp.starts_with(&w.store))
        .collect();
    assert!(inside.is_empty(), "mounts inside the store: {inside:?}");
    let du = |args: &[&str]| {
        let o = std::process::Command::new("du")
            .args(args)
            .arg(&w.store)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", describe_output("du", &o));
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(du(&["-sx"]), du(&["-s"]));
    let find = |xdev: bool| {
        let mut c = std::process::Command::new("find");
        c.arg(&w.store);
        if xdev {
            c.arg("-xdev");
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", describe_output("find", &o));
        String::from_utf8_lossy(&o.stdout).lines().count()
    };
    assert_eq!(find(true), find(false));
    // The lower view is where the store's id says, and the store's doctor knows it.
    assert!(mounted(&lower_view(&w.store)));
    let doc = ok(["doctor", w.store()]);
    assert!(doc.contains(s(&lower_view(&w.store))), "{doc}");
}

#[test]
fn a_lower_view_an_older_build_mounted_in_the_store_is_released_by_umount() {
    let w = Workspace::new(populate);
    // What builds before /run/ckptfs did: the view mounted at STORE/run/lower.
    let legacy = w.store.join("run/lower");
    fs::create_dir_all(&legacy).unwrap();
    ok(["browse", w.store(), s(&legacy)]);
    assert!(mounted(&legacy));
    ok(["umount", w.room()]);
    assert!(!mounted(&legacy), "the old-location view is still mounted");
    assert!(!mounted(&lower_view(&w.store)));
    let left: Vec<_> = mounts()
        .into_iter()
        .filter(|(_, src)| src.starts_with(&format!("ckptfs:{}:", w.store())))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn what_checkpoints_exclude_stays_in_the_upper_and_holds_the_fold() {
    let w = Workspace::with_init_args(&["--exclude", "ws=*.pem"], populate);
    fs::write(w.path("server.pem"), "secret").unwrap();
    fs::write(w.path("notes.md"), "# notes\nturn\n").unwrap();
    let r = w.checkpoint_json("turn");
    assert_eq!(r["fold"]["folded"], false, "{r}");
    assert!(
        r["fold"]["reason"]
            .as_str()
            .unwrap()
            .contains("ws/server.pem"),
        "{r}"
    );
    assert_eq!(fs::read_to_string(w.path("server.pem")).unwrap(), "secret");
    // A switch away and back, and a remount, keep it too.
    ok(["fork", w.store(), "main", "--name", "other"]);
    ok(["switch", w.room(), "--to", "other"]);
    ok(["switch", w.room(), "--to", "main"]);
    assert_eq!(fs::read_to_string(w.path("server.pem")).unwrap(), "secret");
    ok(["umount", w.room()]);
    ok(["mount", w.store(), "--branch", "main"]);
    assert_eq!(fs::read_to_string(w.path("server.pem")).unwrap(), "secret");
    // Once it is gone, the fold happens.
    fs::remove_file(w.path("server.pem")).unwrap();
    let r = w.checkpoint_json("gone");
    assert_eq!(r["fold"]["folded"], true, "{r}");
}

/// Whether a file can be created in the workspace now.
fn writable(w: &Workspace) -> bool {
    let probe = w.path(".probe");
    let ok = fs::write(&probe, b"x").is_ok();
    let _ = fs::remove_file(&probe);
    ok
}

#[test]
fn a_fold_interrupted_at_any_step_loses_nothing() {
    fold_interrupted(None);
}

/// As above, for a fold past its budget that keeps the files written last (`hot`).
#[test]
fn a_fold_keeping_hot_files_interrupted_at_any_step_loses_nothing() {
    fold_interrupted(Some("2M"));
}

fn fold_interrupted(budget: Option<&str>) {
    let w = Workspace::new(|room| {
        populate(room);
        write(&room.join("log.jsonl"), &vec![b'x'; 300 << 10]);
    });
    if let Some(b) = budget {
        w.remount_with_fold_budget(b);
    }
    // Past the budget every round: 2 MiB written once, folded; the appended log is kept.
    let bulk = |round: u32| {
        if budget.is_some() {
            let mut f = fs::OpenOptions::new()
                .append(true)
                .open(w.path("log.jsonl"))
                .unwrap();
            std::io::Write::write_all(&mut f, format!("round {round}\n").as_bytes()).unwrap();
            write(
                &w.path(&format!("bulk/{round}.bin")),
                &random_bytes(u64::from(round), 2 << 20),
            );
        }
    };
    fs::write(w.path("notes.md"), "counting\n").unwrap();
    bulk(0);
    let steps = io_steps(["checkpoint", w.room(), "-m", "count"]);
    let mut round = 0;
    for mode in ["fail", "abort"] {
        for n in 1..=steps {
            round += 1;
            let text = format!("round {round}\n");
            fs::write(w.path("notes.md"), &text).unwrap();
            write(&w.path(&format!("r/{round}.txt")), text.as_bytes());
            bulk(round);
            let o = run_fault(["checkpoint", w.room(), "-m", "faulty"], mode, n);
            let ctx = format!("checkpoint {mode}:{n}/{steps}: {}", stderr(&o));
            let was_writable = writable(&w);
            let r = run(["recover", w.store()]);
            assert!(r.status.success(), "{ctx}: recover: {}", stderr(&r));
            let said = stdout(&r);
            if was_writable {
                // Nothing to roll back: recover says nothing about the overlays.
                assert!(
                    !said.contains("writable again") && !said.contains("stays read-only"),
                    "{ctx}: recover said {said}"
                );
            }
            if !writable(&w) {
                // Interrupted after the fold took the upper: umount and mount resume it.
                // Said by the failed checkpoint itself, or by recover after a crash.
                let out = stdout(&r);
                assert!(
                    out.contains("stays read-only") || stderr(&o).contains("failed half-way"),
                    "{ctx}: recover said {out}"
                );
                ok(["umount", w.room()]);
                let mut again = vec!["mount", w.store(), "--branch", "main"];
                if let Some(b) = budget {
                    again.extend(["--fold-budget", b]);
                }
                ok(again);
                assert!(writable(&w), "{ctx}: not writable after a remount");
            }
            // Nothing lost: the workspace shows every round's file and the last text.
            assert_eq!(
                fs::read_to_string(w.path("notes.md")).unwrap(),
                text,
                "{ctx}"
            );
            for i in 1..=round {
                assert!(
                    w.path(&format!("r/{i}.txt")).exists(),
                    "{ctx}: r/{i}.txt lost"
                );
            }
            if budget.is_some() {
                assert_eq!(
                    fs::read(w.path(&format!("bulk/{round}.bin"))).unwrap(),
                    random_bytes(u64::from(round), 2 << 20),
                    "{ctx}"
                );
            }
            assert!(ok(["verify", w.store()]).contains("0 findings"), "{ctx}");
            // A write after recover lands in the branch's upper layer (an overlay made
            // writable again over an upper the fold took would lose it).
            let after = format!("after/{round}.txt");
            write(&w.path(&after), b"after");
            // The next checkpoint records it all and folds.
            let r = w.checkpoint_json("after the fault");
            let id = r["id"].as_str().unwrap();
            assert_eq!(w.cat(id, "notes.md"), text.as_bytes(), "{ctx}");
            assert_eq!(w.cat(id, &after), b"after", "{ctx}");
            if budget.is_some() {
                // bulk/ is past the budget again: the fold keeps the appended log.
                bulk(round + 1000);
                let r = w.checkpoint_json("hot");
                assert_eq!(r["fold"]["folded"], true, "{ctx}: {r}");
                assert!(r["fold"]["kept_files"].as_u64() >= Some(1), "{ctx}: {r}");
                assert_eq!(workspace_row(&w)["dirty"], false, "{ctx}");
            }
        }
    }
}

/// `mount --fold-budget`: below the budget the upper layer is kept (the files the agent
/// writes need no copy-up after a checkpoint: the same inode takes the next append), every
/// checkpoint still records exactly what the workspace holds; past it, the fold happens and
/// keeps only the files written last.
#[test]
fn below_the_fold_budget_the_upper_is_kept_and_every_checkpoint_is_exact() {
    let w = Workspace::new(populate);
    ok(["umount", w.room()]);
    let st = ok_json([
        "mount",
        w.store(),
        "--branch",
        "main",
        "--fold-budget",
        "8M",
        "--json",
    ]);
    validate("mount", &st, "mount --fold-budget --json");
    assert_eq!(st["fold_budget"], 8 << 20, "{st}");
    let upper = w.store.join("upper/main/.top-ws/ws");
    let log = w.path("transcript.jsonl");
    let mut expect = b"{\"turn\":0}\n".repeat(30_000);
    fs::write(&log, &expect).unwrap();
    let r = w.checkpoint_json("turn 0");
    assert_eq!(r["fold"]["folded"], false, "{r}");
    assert!(
        r["fold"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("fold budget"),
        "{r}"
    );
    // status says what is kept, recorded and beside the store (bytes kept twice).
    let status = ok_json(["status", w.room(), "--json"]);
    validate("status", &status, "status with a kept upper");
    assert_kept_reported(&w, &status, expect.len() as u64, "fold budget");
    let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).unwrap());
    let kept = ino(&upper.join("transcript.jsonl"));
    // Turns of appends, a rewrite, a truncation and a rename: each checkpoint is exact, and
    // the transcript is never copied up again.
    for turn in 1..=6u32 {
        let line = format!("{{\"turn\":{turn}}}\n");
        let mut f = fs::OpenOptions::new().append(true).open(&log).unwrap();
        std::io::Write::write_all(&mut f, line.as_bytes()).unwrap();
        drop(f);
        expect.extend_from_slice(line.as_bytes());
        match turn {
            3 => fs::write(w.path("notes.md"), format!("rewritten {turn}\n")).unwrap(),
            4 => fs::OpenOptions::new()
                .write(true)
                .open(w.path("notes.md"))
                .and_then(|f| f.set_len(3))
                .unwrap(),
            5 => fs::rename(w.path("notes.md"), w.path("sub/notes.md")).unwrap(),
            _ => {}
        }
        let id = w.checkpoint(&format!("turn {turn}"));
        assert_eq!(w.cat(&id, "transcript.jsonl"), expect, "turn {turn}");
        assert_eq!(
            ino(&upper.join("transcript.jsonl")),
            kept,
            "turn {turn}: copied up"
        );
        let notes = if turn >= 5 {
            "sub/notes.md"
        } else {
            "notes.md"
        };
        assert_eq!(
            w.cat(&id, notes),
            fs::read(w.path(notes)).unwrap(),
            "turn {turn}"
        );
        assert_eq!(workspace_row(&w)["dirty"], false, "turn {turn}");
    }
    // Past the budget the fold happens: the big file goes to the store only, the transcript
    // stays (written last, within half the budget); the notes, too small to be worth it, go.
    write(&w.path("big.bin"), &random_bytes(9, 9 << 20));
    let r = w.checkpoint_json("over budget");
    assert_eq!(r["fold"]["folded"], true, "{r}");
    assert_eq!(r["fold"]["kept_files"], 1, "{r}");
    assert!(!upper.join("big.bin").exists());
    assert_eq!(files_under(&upper).0, 1);
    assert_eq!(ino(&upper.join("transcript.jsonl")), kept, "copied up");
    assert_eq!(fs::read(&log).unwrap(), expect);
    ok(["verify", w.store()]);
}

/// `status` (its JSON given) and `stats` report at least `bytes` of the upper layer as
/// recorded and kept beside the store, for the reason that holds `why`.
fn assert_kept_reported(w: &Workspace, status: &serde_json::Value, bytes: u64, why: &str) {
    let f = &status[0]["fold_waiting"];
    assert!(f["upper_bytes"].as_u64() >= Some(bytes), "{status}");
    assert!(f["reason"].as_str().unwrap_or("").contains(why), "{status}");
    let text = ok(["status", w.room()]);
    assert!(
        text.contains("recorded and kept beside the store"),
        "{text}"
    );
    let stats = ok_json(["stats", w.store(), "--json"]);
    validate("stats", &stats, "stats with a kept upper");
    assert!(
        stats["store"]["upper_bytes"].as_u64() >= Some(bytes),
        "{stats}"
    );
}

/// The value of option `key` in a mount's option string (`lowerdir=...`).
fn option_value(opts: &str, key: &str) -> Option<String> {
    opts.split(',')
        .find_map(|o| o.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
}

/// Asserts that `run/mounts/main.json` and `upper/main/base.json` describe what is mounted:
/// the base is the branch's head, and each root's lower, upper and work directories are the
/// overlay's own (`lowerdir=`, `upperdir=`, `workdir=` in mountinfo). A nested root (every
/// upper made now) stacks the overlay on the parents of the recorded lower and upper.
fn record_matches_mounts(w: &Workspace, ctx: &str) {
    let head = head(&w.store, "main").expect("a head");
    let rec: serde_json::Value =
        serde_json::from_slice(&fs::read(w.store.join("run/mounts/main.json")).unwrap()).unwrap();
    assert_eq!(rec["base"], head.as_str(), "{ctx}: record's base: {rec:#}");
    let base: serde_json::Value =
        serde_json::from_slice(&fs::read(w.store.join("upper/main/base.json")).unwrap()).unwrap();
    assert_eq!(base["base"], head.as_str(), "{ctx}: upper/main/base.json");
    let root = &rec["roots"]["ws"];
    let field = |k: &str| Path::new(root[k].as_str().expect(k)).to_path_buf();
    assert_eq!(field("mountpoint"), w.room, "{ctx}: {rec:#}");
    let opts = mount_options(&w.room).expect("the workspace is mounted");
    let lower = field("lower");
    assert!(
        lower.to_string_lossy().contains(&head),
        "{ctx}: the recorded lower {} is not the head {head}'s",
        lower.display()
    );
    let layer = |k: &str| option_value(&opts, k).unwrap_or_else(|| panic!("no {k} in {opts}"));
    assert_eq!(
        Path::new(&layer("lowerdir")),
        lower.parent().unwrap(),
        "{ctx}: the overlay's lower is not the recorded one ({opts})"
    );
    assert_eq!(
        Path::new(&layer("upperdir")),
        field("upper").parent().unwrap(),
        "{ctx}: {opts}"
    );
    assert_eq!(Path::new(&layer("workdir")), field("work"), "{ctx}: {opts}");
}

/// After a fold the mount record is the workspace's new one: its base the new head, its
/// lower the head's (the overlay's `lowerdir=`), not the roots mounted before the fold.
#[test]
fn after_a_fold_the_mount_record_describes_the_new_overlay() {
    let w = Workspace::new(populate);
    record_matches_mounts(&w, "mounted");
    for i in 0..2 {
        write(&w.path(&format!("turn{i}.txt")), b"work\n");
        let r = w.checkpoint_json(&format!("turn {i}"));
        assert_eq!(r["fold"]["folded"], true, "{r}");
        record_matches_mounts(&w, &format!("after fold {i}"));
    }
    // What reads the record (status) agrees, and a remount from it shows the work.
    let row = workspace_row(&w);
    assert_eq!(row["base"], row["head"], "{row}");
    ok(["umount", w.room()]);
    ok(["mount", w.store(), "--branch", "main"]);
    record_matches_mounts(&w, "remounted");
    assert_eq!(fs::read(w.path("turn1.txt")).unwrap(), b"work\n");
}

/// Past the fold budget the fold keeps the files written last (up to half the budget) in the
/// fresh upper layer: the transcript a turn appends to is never copied up again and keeps its
/// inode number, in the upper layer and in the workspace; a checkpoint right after a fold
/// records nothing new and reads nothing; every checkpoint of 20 turns of appends, rewrites,
/// truncations and renames of the kept files restores exactly.
#[test]
fn past_the_fold_budget_the_files_written_last_stay_and_every_turn_restores_exactly() {
    let transcript = b"{\"turn\":0}\n".repeat(30_000);
    let w = Workspace::new(|room| {
        populate(room);
        write(&room.join("sessions/transcript.jsonl"), &transcript);
    });
    w.remount_with_fold_budget("4M");
    let upper = w.store.join("upper/main/.top-ws/ws");
    let log = w.path("sessions/transcript.jsonl");
    let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::symlink_metadata(p).unwrap());
    let shown = ino(&log);
    let mut expect = transcript.clone();
    let mut upper_ino = None;
    let mut folds = 0;
    // Each turn's checkpoint and the files it should hold.
    type Files = Vec<(String, Vec<u8>)>;
    let mut history: Vec<(String, Files)> = Vec::new();
    for turn in 1..=20u32 {
        let line = format!("{{\"turn\":{turn}}}\n");
        let mut f = fs::OpenOptions::new().append(true).open(&log).unwrap();
        std::io::Write::write_all(&mut f, line.as_bytes()).unwrap();
        drop(f);
        expect.extend_from_slice(line.as_bytes());
        // A file born in the workspace, kept hot and worked on.
        let notes = w.path("hot/notes.md");
        match turn % 5 {
            1 => write(&notes, format!("turn {turn}\n").repeat(40_000).as_bytes()),
            2 => {
                let mut f = fs::OpenOptions::new().append(true).open(&notes).unwrap();
                std::io::Write::write_all(&mut f, b"appended\n").unwrap();
            }
            3 => fs::OpenOptions::new()
                .write(true)
                .open(&notes)
                .and_then(|f| f.set_len(300_000))
                .unwrap(),
            4 => {
                fs::rename(&notes, w.path("hot/renamed.md")).unwrap();
                fs::rename(w.path("hot/renamed.md"), &notes).unwrap();
            }
            _ => fs::write(&notes, format!("rewritten {turn}\n").repeat(30_000)).unwrap(),
        }
        // 3 MiB a turn of files written once: past the budget every other turn.
        write(
            &w.path(&format!("bulk/{turn}.bin")),
            &random_bytes(u64::from(turn), 3 << 20),
        );
        // Past the stat cache's racy window (a turn takes longer): the kept files' entries
        // are cached, so the checkpoint after a fold has nothing to read.
        std::thread::sleep(std::time::Duration::from_millis(60));
        let r = w.checkpoint_json(&format!("turn {turn}"));
        let id = r["id"].as_str().unwrap().to_string();
        assert_eq!(
            w.cat(&id, "sessions/transcript.jsonl"),
            expect,
            "turn {turn}"
        );
        let now = ino(&upper.join("sessions/transcript.jsonl"));
        assert_eq!(
            *upper_ino.get_or_insert(now),
            now,
            "turn {turn}: copied up again"
        );
        assert_eq!(
            ino(&log),
            shown,
            "turn {turn}: the transcript's number changed"
        );
        if r["fold"]["folded"] == true {
            folds += 1;
            if folds == 1 {
                validate(
                    "checkpoint",
                    &r,
                    "checkpoint --json of a fold that kept files",
                );
                // status and stats count the kept bytes as beside the store (kept twice).
                let status = ok_json(["status", w.room(), "--json"]);
                validate("status", &status, "status after a fold that kept files");
                let kept = r["fold"]["kept_bytes"].as_u64().unwrap_or(u64::MAX);
                assert_kept_reported(&w, &status, kept, "last fold kept");
            }
            assert!(r["fold"]["kept_files"].as_u64() >= Some(2), "{r}");
            assert!(
                r["fold"]["kept_bytes"].as_u64() <= Some(2 << 20),
                "kept past half the budget: {r}"
            );
            // The bulk written once was folded: the upper holds only what was kept.
            assert!(files_under(&upper).1 <= 2 << 20, "turn {turn}");
            assert!(!upper.join(format!("bulk/{turn}.bin")).exists());
            // The workspace is exactly its head: nothing to record, nothing read again.
            assert_eq!(workspace_row(&w)["dirty"], false, "turn {turn}");
            let again = w.checkpoint_json(&format!("turn {turn}, again"));
            assert_eq!(again["recorded"], false, "turn {turn}: {again}");
            assert_eq!(again["files_read"], 0, "turn {turn}: {again}");
        }
        let files = ["sessions/transcript.jsonl", "hot/notes.md", "notes.md"]
            .iter()
            .map(|f| (f.to_string(), fs::read(w.path(f)).unwrap()))
            .collect();
        history.push((id, files));
    }
    assert!(folds >= 5, "only {folds} folds");
    for (id, files) in &history {
        for (f, bytes) in files {
            assert_eq!(&w.cat(id, f), bytes, "{id} {f}");
        }
    }
    // A restore of a middle turn elsewhere is byte-exact too.
    let (id, files) = &history[9];
    let out = w.tmp.path().join("restored");
    ok(["restore", w.store(), id, "--to", out.to_str().unwrap()]);
    for (f, bytes) in files {
        assert_eq!(&fs::read(out.join(f)).unwrap(), bytes, "{f}");
    }
    assert!(ok(["verify", w.store()]).contains("0 findings"));
}

/// The hot set prefers the files a turn wrote that existed before it (a transcript appended
/// every turn, copied up or born in an earlier turn) to newer files born in the turn and
/// written once (a download), and those to files the turn did not write.
#[test]
fn the_fold_keeps_what_every_turn_writes_before_what_a_turn_wrote_once() {
    let w = Workspace::new(|room| {
        populate(room);
        write(&room.join("transcript.jsonl"), &vec![b'x'; 1200 << 10]);
    });
    w.remount_with_fold_budget("4M");
    let upper = w.store.join("upper/main/.top-ws/ws");
    let append = |turn: u32| {
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(w.path("transcript.jsonl"))
            .unwrap();
        std::io::Write::write_all(&mut f, format!("turn {turn}\n").as_bytes()).unwrap();
    };
    // Turn 1: the transcript (copied up) is appended to, then a 1600 KiB download and a 4 MiB
    // bulk are born: both newer, neither fits beside the transcript in half the budget.
    w.checkpoint("before turn 1");
    append(1);
    std::thread::sleep(std::time::Duration::from_millis(20));
    write(&w.path("download.bin"), &random_bytes(1, 1600 << 10));
    write(&w.path("bulk.bin"), &random_bytes(2, 4 << 20));
    let r = w.checkpoint_json("turn 1");
    assert_eq!(r["fold"]["folded"], true, "{r}");
    assert!(upper.join("transcript.jsonl").exists(), "{r}");
    assert!(!upper.join("download.bin").exists(), "{r}");
    // Turn 2: a new log is born and a second 4 MiB bulk; turn 3 appends to both the log and
    // the transcript: the log, born before turn 3, now ranks with the transcript.
    append(2);
    write(&w.path("new.log"), &vec![b'l'; 400 << 10]);
    write(&w.path("bulk2.bin"), &random_bytes(3, 4 << 20));
    let r = w.checkpoint_json("turn 2");
    assert_eq!(r["fold"]["folded"], true, "{r}");
    append(3);
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(w.path("new.log"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"more\n").unwrap();
    drop(f);
    std::thread::sleep(std::time::Duration::from_millis(20));
    // 600 KiB: it fits beside the transcript, but not beside the transcript and the log.
    write(&w.path("download2.bin"), &random_bytes(4, 600 << 10));
    write(&w.path("bulk3.bin"), &random_bytes(5, 4 << 20));
    let r = w.checkpoint_json("turn 3");
    assert_eq!(r["fold"]["folded"], true, "{r}");
    assert!(upper.join("transcript.jsonl").exists(), "{r}");
    assert!(upper.join("new.log").exists(), "{r}");
    assert!(!upper.join("download2.bin").exists(), "{r}");
    assert!(!upper.join("bulk3.bin").exists(), "{r}");
    assert_eq!(workspace_row(&w)["dirty"], false);
}
