//! `ckptfs merge` into a mounted workspace, as `git merge` into a work tree: the merge is
//! written into the workspace; a clean one is recorded at once (two parents); conflicts are
//! left there (text with git's markers), `status` lists them, the next checkpoint records
//! the merge once they are resolved; `--take` resolves in place; `--abort` puts the
//! workspace back; a dirty workspace is refused; hard links theirs added are links in it.

use crate::support::*;

use std::fs;
use std::path::Path;

use serde_json::Value;

const NOTES: &[u8] = b"one\ntwo\nthree\nfour\nfive\n";

fn populate(room: &Path) {
    write(&room.join("notes.md"), NOTES);
    write(&room.join("a.txt"), b"a\n");
    write(&room.join("sub/keep.txt"), b"keep\n");
}

/// Records on branch `feat` (forked from main's head) the room `populate` makes, changed by
/// `theirs`: captured from a directory of its own, so the workspace is not touched.
fn theirs(w: &Workspace, change: impl FnOnce(&Path)) -> String {
    ok(["fork", w.store(), "main", "feat"]);
    let dir = w.tmp.path().join("theirs");
    fs::create_dir_all(&dir).unwrap();
    populate(&dir);
    change(&dir);
    let from = format!("ws={}", dir.display());
    ok([
        "capture",
        w.store(),
        "-q",
        "--from",
        &from,
        "-b",
        "feat",
        "-m",
        "theirs",
    ]);
    head(&w.store, "feat").expect("feat head")
}

fn merge(w: &Workspace, extra: &[&str]) -> (Option<i32>, Value) {
    let mut args: Vec<String> = vec![
        "merge".into(),
        w.room().into(),
        "feat".into(),
        "--json".into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let o = run(&args);
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("merge --json: {e}: {}", describe(&args, &o)));
    validate("merge", &v, &args.join(" "));
    (o.status.code(), v)
}

fn workspace_row(w: &Workspace) -> Value {
    let all = ok_json(["status", w.store(), "--json"]);
    validate("status", &all, "status --json");
    all.as_array()
        .and_then(|r| r.iter().find(|r| r["kind"] == "workspace").cloned())
        .expect("a workspace row")
}

fn read(w: &Workspace, rel: &str) -> String {
    String::from_utf8_lossy(&fs::read(w.path(rel)).expect("read")).into_owned()
}

/// Ours changes line one; theirs changes it too (a conflict), and line five (clean), adds a
/// file and deletes another.
fn conflicting(w: &Workspace) -> (String, String) {
    let feat = theirs(w, |d| {
        write(&d.join("notes.md"), b"uno\ntwo\nthree\nfour\ncinco\n");
        write(&d.join("theirs.txt"), b"added there\n");
        fs::remove_file(d.join("a.txt")).unwrap();
    });
    fs::write(w.path("notes.md"), b"ONE\ntwo\nthree\nfour\nfive\n").unwrap();
    let ours = w.checkpoint("ours");
    (ours, feat)
}

#[test]
fn conflicts_are_left_marked_in_the_workspace_and_the_checkpoint_after_resolving_has_two_parents() {
    let w = Workspace::new(populate);
    let (ours, feat) = conflicting(&w);
    let (code, r) = merge(&w, &[]);
    assert_eq!(code, Some(1), "{r}");
    assert_eq!(r["outcome"], "conflicts", "{r}");
    assert_eq!(r["workspace"]["in_progress"], true, "{r}");
    assert_eq!(r["conflicts"][0]["path"], "ws/notes.md", "{r}");
    // In the workspace: git's markers, theirs' clean changes, theirs' add and delete.
    assert_eq!(
        read(&w, "notes.md"),
        "<<<<<<< ours\nONE\n=======\nuno\n>>>>>>> theirs\ntwo\nthree\nfour\ncinco\n"
    );
    assert_eq!(read(&w, "theirs.txt"), "added there\n");
    assert!(!w.path("a.txt").exists());
    assert_eq!(head(&w.store, "main").as_deref(), Some(ours.as_str()));

    let m = &workspace_row(&w)["merge"];
    assert_eq!(m["source"], "feat", "{m}");
    assert_eq!(m["conflicts"][0]["resolved"], false, "{m}");
    let text = ok(["status", w.store()]);
    assert!(text.contains("1 of 1 conflicts unresolved"), "{text}");

    // A checkpoint while a conflict is open records the workspace, not the merge.
    let c = w.checkpoint_json("still merging");
    validate("checkpoint", &c, "checkpoint --json");
    assert_eq!(c["merge"]["recorded"], false, "{c}");
    assert_eq!(c["merge"]["unresolved"][0], "ws/notes.md", "{c}");
    let mid = c["id"].as_str().unwrap().to_string();
    assert_eq!(show(&w.store, &mid)["parents"].as_array().unwrap().len(), 1);
    // Another merge is refused while this one is in progress.
    let again = fails(1, ["merge", w.store(), "feat", "--no-ff"]);
    assert!(again.contains("in progress"), "{again}");

    // Resolved by hand: status says so, and the checkpoint records the merge.
    fs::write(w.path("notes.md"), b"One\ntwo\nthree\nfour\ncinco\n").unwrap();
    assert_eq!(workspace_row(&w)["merge"]["conflicts"][0]["resolved"], true);
    let c = w.checkpoint_json("");
    assert_eq!(c["merge"]["recorded"], true, "{c}");
    let id = c["id"].as_str().unwrap().to_string();
    let parents = show(&w.store, &id)["parents"].clone();
    assert_eq!(parents, serde_json::json!([mid, feat]));
    assert_eq!(show(&w.store, &id)["message"], "merge feat into main");
    assert_eq!(w.cat(&id, "notes.md"), b"One\ntwo\nthree\nfour\ncinco\n");
    assert_eq!(w.cat(&id, "theirs.txt"), b"added there\n");
    assert!(workspace_row(&w).get("merge").is_none());
    // feat is merged: merging it again changes nothing.
    let (code, r) = merge(&w, &[]);
    assert_eq!((code, r["outcome"].as_str()), (Some(0), Some("up-to-date")));
    ok(["verify", w.store()]);
}

#[test]
fn a_clean_merge_into_a_mounted_workspace_is_recorded_at_once() {
    let w = Workspace::new(populate);
    let feat = theirs(&w, |d| {
        write(&d.join("notes.md"), b"one\ntwo\nthree\nfour\ncinco\n");
        write(&d.join("sub/new.txt"), b"new\n");
    });
    fs::write(w.path("notes.md"), b"ONE\ntwo\nthree\nfour\nfive\n").unwrap();
    let ours = w.checkpoint("ours");
    let (code, r) = merge(&w, &[]);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(r["outcome"], "merged", "{r}");
    assert_eq!(r["workspace"]["in_progress"], false, "{r}");
    let id = r["checkpoint"].as_str().expect("checkpoint").to_string();
    assert_eq!(head(&w.store, "main").as_deref(), Some(id.as_str()));
    assert_eq!(
        show(&w.store, &id)["parents"],
        serde_json::json!([ours, feat])
    );
    assert_eq!(read(&w, "notes.md"), "ONE\ntwo\nthree\nfour\ncinco\n");
    assert_eq!(read(&w, "sub/new.txt"), "new\n");
    assert_eq!(w.cat(&id, "notes.md"), b"ONE\ntwo\nthree\nfour\ncinco\n");
    let row = workspace_row(&w);
    assert_eq!(row["dirty"], false, "{row}");
}

#[test]
fn take_resolves_in_the_workspace_and_abort_puts_it_back() {
    let w = Workspace::new(populate);
    let (ours, _feat) = conflicting(&w);
    let (code, _) = merge(&w, &[]);
    assert_eq!(code, Some(1));
    // --take theirs on the conflicting path: theirs' hunk, both sides' clean changes.
    let (code, r) = merge(&w, &["--take", "theirs", "--", "ws/notes.md"]);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(read(&w, "notes.md"), "uno\ntwo\nthree\nfour\ncinco\n");
    let m = workspace_row(&w)["merge"].clone();
    assert_eq!(m["conflicts"][0]["resolved"], true, "{m}");
    assert_eq!(m["conflicts"][0]["taken"], "theirs", "{m}");

    // Abort: the workspace holds ours again, every change since the merge undone.
    fs::write(w.path("extra.txt"), b"written during the merge\n").unwrap();
    let out = ok_json(["merge", w.room(), "--abort", "--json"]);
    validate("merge", &out, "merge --abort --json");
    assert_eq!(out["restored"], ours.as_str(), "{out}");
    assert_eq!(read(&w, "notes.md"), "ONE\ntwo\nthree\nfour\nfive\n");
    assert_eq!(read(&w, "a.txt"), "a\n");
    assert!(!w.path("theirs.txt").exists());
    assert!(!w.path("extra.txt").exists());
    let row = workspace_row(&w);
    assert!(row.get("merge").is_none(), "{row}");
    assert_eq!(row["dirty"], false, "{row}");
    assert_eq!(head(&w.store, "main").as_deref(), Some(ours.as_str()));
    let again = fails(1, ["merge", w.room(), "--abort"]);
    assert!(again.contains("no merge is in progress"), "{again}");
}

#[test]
fn a_dirty_workspace_is_refused_and_a_fast_forward_writes_theirs_into_it() {
    let w = Workspace::new(populate);
    let feat = theirs(&w, |d| write(&d.join("theirs.txt"), b"t\n"));
    fs::write(w.path("scratch.txt"), b"not checkpointed\n").unwrap();
    let out = fails(1, ["merge", w.room(), "feat"]);
    assert!(out.contains("un-checkpointed changes"), "{out}");
    assert!(!w.path("theirs.txt").exists());
    fs::remove_file(w.path("scratch.txt")).unwrap();
    // main has not moved since the fork: a fast-forward, written into the workspace.
    let (code, r) = merge(&w, &[]);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(r["outcome"], "fast-forward", "{r}");
    assert_eq!(head(&w.store, "main").as_deref(), Some(feat.as_str()));
    assert_eq!(read(&w, "theirs.txt"), "t\n");
    let row = workspace_row(&w);
    assert_eq!(row["dirty"], false, "{row}");
}

/// The merge's content in the workspace: ours' line one, theirs' line five and new file.
fn holds_the_merge(w: &Workspace) -> bool {
    fs::read(w.path("notes.md")).ok().as_deref() == Some(b"ONE\ntwo\nthree\nfour\ncinco\n")
        && w.path("sub/new.txt").exists()
}

fn holds_ours(w: &Workspace) -> bool {
    fs::read(w.path("notes.md")).ok().as_deref() == Some(b"ONE\ntwo\nthree\nfour\nfive\n")
        && !w.path("sub/new.txt").exists()
}

#[test]
fn a_merge_into_a_workspace_killed_at_every_step_is_recorded_whole_or_put_back() {
    let setup = || {
        let w = Workspace::new(populate);
        let feat = theirs(&w, |d| {
            write(&d.join("notes.md"), b"one\ntwo\nthree\nfour\ncinco\n");
            write(&d.join("sub/new.txt"), b"new\n");
        });
        fs::write(w.path("notes.md"), b"ONE\ntwo\nthree\nfour\nfive\n").unwrap();
        let ours = w.checkpoint("ours");
        (w, ours, feat)
    };
    let steps = {
        let (w, _, _) = setup();
        io_steps(["merge", w.room(), "feat"])
    };
    for n in spread(steps, 8) {
        let ctx = format!("merge into a workspace, killed at step {n}/{steps}");
        let (w, ours, feat) = setup();
        let o = run_fault(["merge", w.room(), "feat"], "abort", n);
        assert!(!o.status.success(), "{ctx}: the fault did not happen");
        recover_and_verify(&w.store, &ctx);
        let m = workspace_row(&w)["merge"].clone();
        if m["interrupted"] == true {
            // Cut short while writing the workspace: never a merge; --abort puts it back.
            let c = w.checkpoint_json("after the crash");
            assert_ne!(c["merge"]["recorded"], true, "{ctx}: {c}");
            ok(["merge", w.room(), "--abort"]);
            assert!(holds_ours(&w), "{ctx}: not put back");
            continue;
        }
        if m.is_object() {
            // Written whole: the next checkpoint records it.
            assert!(holds_the_merge(&w), "{ctx}");
            let c = w.checkpoint_json("");
            assert_eq!(c["merge"]["recorded"], true, "{ctx}: {c}");
        }
        let h = head(&w.store, "main").expect("main");
        let parents = show(&w.store, &h)["parents"].clone();
        if h == ours {
            assert!(holds_ours(&w), "{ctx}: old head, workspace changed");
        } else {
            assert_eq!(parents[1], feat.as_str(), "{ctx}: {parents}");
            assert!(holds_the_merge(&w), "{ctx}");
            assert_eq!(w.cat(&h, "notes.md"), b"ONE\ntwo\nthree\nfour\ncinco\n");
        }
        assert!(workspace_row(&w).get("merge").is_none(), "{ctx}");
        ok(["verify", w.store()]);
    }
}

/// While a merge is in progress, the agent swaps a directory of the workspace for a symlink
/// to a directory outside it: `--take` and `--abort` write nothing there.
#[test]
fn a_directory_swapped_for_a_symlink_during_a_merge_is_never_followed() {
    // The room is nobody's, and nobody (the agent) makes the swap.
    let w = Workspace::for_nobody(&[], populate);
    let _feat = theirs(&w, |d| {
        write(&d.join("sub/keep.txt"), b"theirs\n");
        write(&d.join("notes.md"), b"uno\n");
    });
    fs::write(w.path("sub/keep.txt"), b"ours\n").unwrap();
    fs::write(w.path("notes.md"), b"ONE\n").unwrap();
    w.checkpoint("ours");
    let (code, r) = merge(&w, &[]);
    assert_eq!(code, Some(1), "{r}");
    let outside = w.tmp.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    write(&outside.join("keep.txt"), b"not the workspace's\n");
    nobody_ok(&format!(
        "mv {} {} && ln -s {} {}",
        w.path("sub").display(),
        w.path("sub-moved").display(),
        outside.display(),
        w.path("sub").display()
    ));
    let o = run([
        "merge",
        w.room(),
        "feat",
        "--take",
        "theirs",
        "--",
        "ws/sub/keep.txt",
    ]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert_eq!(
        fs::read(outside.join("keep.txt")).unwrap(),
        b"not the workspace's\n"
    );
    // The abort replaces the symlink itself with the directory it was.
    ok(["merge", w.room(), "--abort"]);
    assert_eq!(
        fs::read(outside.join("keep.txt")).unwrap(),
        b"not the workspace's\n"
    );
    assert!(fs::symlink_metadata(w.path("sub")).unwrap().is_dir());
    assert_eq!(read(&w, "sub/keep.txt"), "ours\n");
    assert!(!w.path("sub-moved").exists());
}

/// Hard links theirs added are written into the workspace as links: each name is placed
/// under a temporary name and renamed, and the later names link to the first one's final
/// name (`restore::Links::renamed`), not to the temporary one that is gone.
#[test]
fn hard_links_theirs_added_are_written_into_the_workspace_as_links() {
    use std::os::unix::fs::MetadataExt;
    let w = Workspace::new(populate);
    let feat = theirs(&w, |d| {
        write(&d.join("sub/linked.txt"), b"one file, three names\n");
        fs::hard_link(d.join("sub/linked.txt"), d.join("sub/alias.txt")).unwrap();
        fs::hard_link(d.join("sub/linked.txt"), d.join("other.txt")).unwrap();
    });
    fs::write(w.path("notes.md"), b"ONE\ntwo\nthree\nfour\nfive\n").unwrap();
    let ours = w.checkpoint("ours");
    let (code, r) = merge(&w, &[]);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(r["outcome"], "merged", "{r}");
    let id = r["checkpoint"].as_str().expect("checkpoint");
    assert_eq!(
        show(&w.store, id)["parents"],
        serde_json::json!([ours, feat])
    );
    let names = ["sub/linked.txt", "sub/alias.txt", "other.txt"];
    let md: Vec<_> = names
        .iter()
        .map(|n| fs::metadata(w.path(n)).expect(n))
        .collect();
    for (n, m) in names.iter().zip(&md) {
        assert_eq!(read(&w, n), "one file, three names\n", "{n}");
        assert_eq!(m.ino(), md[0].ino(), "{n} is not a link to {}", names[0]);
        assert_eq!(m.nlink(), 3, "{n}");
    }
    assert_eq!(workspace_row(&w)["dirty"], false);
}
