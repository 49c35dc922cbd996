//! A capture that fails at any durable I/O step (as on a full disk: `CKPTFS_FAULT=fail:N`
//! strikes a write after its file exists) leaves no temp file behind, and no record that
//! `log` lists without it being on its branch.

use std::fs;
use std::path::{Path, PathBuf};

use crate::support::*;

/// The ids `log` lists, sorted (the test compares sets).
fn sorted_log_ids(store: &Path, extra: &[&str]) -> Vec<String> {
    let mut ids = log_ids(store, extra);
    ids.sort();
    ids
}

/// Temp files anywhere in the store: `tmp/*`, `.tmp-*`, stat caches' `*.tmp`.
fn temp_files(dir: &Path, out: &mut Vec<String>) {
    for e in fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        let name = p.file_name().expect("name").to_string_lossy().into_owned();
        let in_tmp = p.parent().and_then(|d| d.file_name()) == Some("tmp".as_ref());
        if p.is_dir() {
            temp_files(&p, out);
        } else if in_tmp || name.starts_with(".tmp-") || name.ends_with(".tmp") {
            out.push(p.display().to_string());
        }
    }
}

/// A store whose second capture writes new objects, a record, the branch ref, a stat cache.
fn fixture(dir: &Path) -> PathBuf {
    let room = dir.join("room");
    fs::create_dir_all(room.join("sub")).expect("mkdir");
    write(&room.join("a.txt"), b"alpha\n");
    let store = dir.join("store");
    ok(["init", s(&store), "--root", &format!("ws={}", s(&room))]);
    ok(["capture", s(&store), "-m", "first"]);
    write(&room.join("sub/b.txt"), &[7u8; 300_000]);
    write(&room.join("c.txt"), b"gamma\n");
    store
}

#[test]
fn a_capture_failing_at_any_step_leaves_no_temp_files_and_no_stray_record() {
    let probe = tempdir();
    let store = fixture(probe.path());
    let steps = io_steps(["capture", s(&store), "-m", "second"]);
    assert!(steps > 8, "{steps} steps");

    for n in 1..=steps {
        let dir = tempdir();
        let store = fixture(dir.path());
        let before = sorted_log_ids(&store, &[]);
        let o = run_fault(["capture", s(&store), "-m", "second"], "fail", n);
        let what = describe_output(&format!("capture with fail:{n}"), &o);
        let mut temps = Vec::new();
        temp_files(&store, &mut temps);
        assert_eq!(temps, Vec::<String>::new(), "step {n}: {what}");
        let all = sorted_log_ids(&store, &[]);
        let on_main = sorted_log_ids(&store, &["-b", "main"]);
        assert_eq!(all, on_main, "step {n}: a record off the branch: {what}");
        if !o.status.success() {
            let e = stderr(&o);
            assert!(e.contains("injected fault"), "step {n}: {e}");
            assert!(all.len() == before.len() || all.len() == before.len() + 1);
        }
    }
}

#[test]
fn a_workspace_checkpoint_failing_at_any_step_leaves_no_stray_record() {
    let populate = |room: &Path| {
        fs::create_dir_all(room.join("sub")).expect("mkdir");
        write(&room.join("a.txt"), b"alpha\n");
    };
    let edit = |w: &Workspace| {
        write(&w.path("sub/b.txt"), &[7u8; 300_000]);
        write(&w.path("c.txt"), b"gamma\n");
    };
    let probe = Workspace::new(populate);
    edit(&probe);
    let steps = io_steps(["checkpoint", probe.room(), "-m", "second"]);
    assert!(steps > 4, "{steps} steps");
    drop(probe);
    for n in spread(steps, 12) {
        let w = Workspace::new(populate);
        edit(&w);
        let before = sorted_log_ids(&w.store, &[]);
        let o = run_fault(["checkpoint", w.room(), "-m", "second"], "fail", n);
        let what = describe_output(&format!("checkpoint with fail:{n}"), &o);
        let all = sorted_log_ids(&w.store, &[]);
        let on_main = sorted_log_ids(&w.store, &["-b", "main"]);
        assert_eq!(all, on_main, "step {n}: a record off the branch: {what}");
        if !o.status.success() {
            assert!(stderr(&o).contains("injected fault"), "step {n}: {what}");
            assert!(all.len() == before.len() || all.len() == before.len() + 1);
        }
    }
}

/// The fault hook's own contract, which every fault loop relies on: steps count from one,
/// so `fail:N` for the N steps `count` reports strikes the last of them and `fail:N+1`
/// none; `stop:N` stops the process at step N until it is continued.
///
/// The strikes are counted on `label`, whose steps hold no object. (A capture's commit once
/// took one step per object fan-out directory it synced, and its tree objects' ids hold the
/// files' mtimes and inode numbers: about one capture of this fixture in forty wrote two of its
/// four objects into one directory and took a step fewer than the probe counted, so this test
/// failed at random. A commit now takes one such step per object.)
#[test]
fn fault_injection_strikes_exactly_the_counted_steps() {
    let probe = tempdir();
    let label = |store: &Path| {
        [
            "label".to_string(),
            s(store).to_string(),
            "main".into(),
            "l".into(),
        ]
    };
    let steps = io_steps(label(&fixture(probe.path())));
    assert!(steps > 4, "{steps} steps");
    for (n, strikes) in [(1, true), (steps, true), (steps + 1, false)] {
        let dir = tempdir();
        let store = fixture(dir.path());
        let o = run_fault(label(&store), "fail", n);
        let what = describe_output(&format!("label with fail:{n} of {steps}"), &o);
        assert_eq!(!o.status.success(), strikes, "{what}");
        if strikes {
            let said = format!("injected fault at I/O step {n} ");
            assert!(stderr(&o).contains(&said), "{what}");
        }
    }

    let dir = tempdir();
    let store = fixture(dir.path());
    let err_file = dir.path().join("capture.err");
    let mut c = cmd(["capture", s(&store), "-m", "second"])
        .env(FAULT_ENV, "stop:1")
        .stdout(std::process::Stdio::null())
        .stderr(fs::File::create(&err_file).expect("create"))
        .spawn()
        .expect("spawn ckptfs");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(c.id()).expect("pid"));
    let t0 = std::time::Instant::now();
    let stopped = loop {
        if let Some(st) = c.try_wait().expect("wait") {
            break Err(st);
        }
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('T'))
        {
            break Ok(());
        }
        if t0.elapsed() > std::time::Duration::from_secs(30) {
            let _ = c.kill();
            let _ = c.wait();
            panic!("capture with stop:1 neither stopped nor ended");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    if let Err(st) = stopped {
        panic!("capture with stop:1 ended ({st}) without stopping");
    }
    let said = fs::read_to_string(&err_file).expect("read stderr");
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT");
    assert!(c.wait().expect("wait").success());
    assert!(said.contains("injected stop at I/O step 1 "), "{said}");
}

/// A commit's fault steps depend on how many objects it writes, not on their ids: a capture
/// of two new files whose chunks share a fan-out directory (`objects/ab/`) takes as many
/// steps as one of two files whose chunks do not, so every crash loop's count holds.
#[test]
fn a_commit_takes_as_many_steps_whichever_fan_outs_its_objects_share() {
    let fan_out = |d: &[u8]| ckptfs::ObjectId::of(d).to_hex()[..2].to_string();
    let contents: Vec<Vec<u8>> = (0..64)
        .map(|i| format!("file {i}\n").into_bytes())
        .collect();
    let (a, b) = (0..contents.len())
        .flat_map(|i| (i + 1..contents.len()).map(move |j| (i, j)))
        .find(|&(i, j)| fan_out(&contents[i]) == fan_out(&contents[j]))
        .expect("two of 64 contents share a first byte");
    let c = (0..contents.len())
        .find(|&k| fan_out(&contents[k]) != fan_out(&contents[a]))
        .expect("a content in another fan-out");
    let steps = |x: &[u8], y: &[u8]| {
        let dir = tempdir();
        let room = dir.path().join("room");
        fs::create_dir_all(&room).expect("mkdir");
        write(&room.join("keep"), b"keep\n");
        let store = dir.path().join("store");
        ok(["init", s(&store), "--root", &format!("ws={}", s(&room))]);
        ok(["capture", s(&store), "-m", "first"]);
        write(&room.join("x"), x);
        write(&room.join("y"), y);
        io_steps(["capture", s(&store), "-m", "second"])
    };
    assert_eq!(
        steps(&contents[a], &contents[b]),
        steps(&contents[a], &contents[c]),
        "a capture's steps with two chunks in one fan-out, and in two"
    );
}
