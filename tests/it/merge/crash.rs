//! A merge interrupted at every durable write step (an I/O error or the process killed there),
//! and a merge's power-loss states (tests/powerloss/crashsim.py): `recover` then `verify`
//! pass, and `main` is the old head or the merge, whose tree is the merged tree.

use std::fs;
use std::path::{Path, PathBuf};

use crate::support::*;

/// A store (in `dir`) whose `main` and `feat` diverged with text, append and binary changes;
/// returns (store, main's head).
fn diverged(dir: &Path) -> (PathBuf, String) {
    let room = dir.join("room");
    write(&room.join("notes.md"), b"a\nb\nc\nd\n");
    write(&room.join("log.jsonl"), &b"{\"t\":0}\n".repeat(3000));
    write(&room.join("data/blob"), &random_bytes(3, 200_000));
    let store = dir.join("store");
    ok(["init", s(&store), "--root", &format!("ws={}", s(&room))]);
    capture(&store, &[]);
    ok(["fork", s(&store), "main", "feat"]);
    write(&room.join("notes.md"), b"A\nb\nc\nd\n");
    let mut log = fs::read(room.join("log.jsonl")).expect("log");
    log.extend_from_slice(b"{\"t\":\"ours\"}\n");
    write(&room.join("log.jsonl"), &log);
    let old = capture(&store, &[]);
    write(&room.join("notes.md"), b"a\nb\nc\nD\n");
    write(&room.join("log.jsonl"), &b"{\"t\":0}\n".repeat(3000));
    fs::OpenOptions::new()
        .append(true)
        .open(room.join("log.jsonl"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"{\"t\":\"theirs\"}\n"))
        .expect("append");
    write(&room.join("data/new"), &random_bytes(4, 100_000));
    capture(&store, &["-b", "feat"]);
    (store, old)
}

#[test]
fn a_merge_interrupted_at_every_step_leaves_the_old_head_or_the_merge() {
    let t = tempdir();
    let (store, old) = diverged(t.path());
    let args = |st: &Path| vec!["merge".to_string(), s(st).into(), "feat".into()];
    let reference = t.path().join("ref");
    copy_dir(&store, &reference);
    let steps = io_steps(args(&reference));
    let merged_tree = tree_of(&reference, "main");
    let mut cases = Vec::new();
    for mode in ["fail", "abort"] {
        for n in spread(steps, 15) {
            cases.push((mode, n));
        }
    }
    par_for(&cases, |(mode, n)| {
        let ctx = format!("merge {mode}:{n}/{steps}");
        let st = t.path().join(format!("{mode}-{n}"));
        copy_dir(&store, &st);
        let o = run_fault(args(&st), mode, *n);
        assert!(!o.status.success(), "{ctx}: the fault did not happen");
        recover_and_verify(&st, &ctx);
        let h = head(&st, "main").expect("main");
        if h != old {
            assert_eq!(
                tree_of(&st, &h),
                merged_tree,
                "{ctx}: neither old nor merged"
            );
            assert_eq!(show(&st, &h)["parents"][0], old.as_str(), "{ctx}");
        }
        let tmp: Vec<_> = fs::read_dir(st.join("tmp"))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(tmp.is_empty(), "{ctx}: recover left {tmp:?} in tmp/");
        // The merge can be run again and finishes.
        ok(["merge", s(&st), "feat"]);
        assert_eq!(tree_of(&st, "main"), merged_tree, "{ctx}");
        fs::remove_dir_all(&st).ok();
    });
}
