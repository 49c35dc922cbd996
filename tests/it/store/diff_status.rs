//! Seeing what changed: `diff -p` against `diff -u` of the restored trees, rename detection,
//! `--stat`, `--name-status`, path filters, binary files, `diff --dir` and `--workspace`,
//! and `status` listing a mounted workspace's changed paths.

use std::collections::BTreeSet;
use std::fs;
use std::process::Command;

use crate::support::*;

/// Numbered lines, so edits at two ends make two hunks.
fn lines(n: usize, tag: &str) -> String {
    (0..n).map(|i| format!("line {i} {tag}\n")).collect()
}

/// A store whose `ws` root went from A to B: a.txt edited in two places, c.txt removed,
/// new.txt added, sub/b.txt edited. Returns (env, A, B).
fn two_checkpoints() -> (Env, String, String) {
    let env = Env::new();
    let ws = env.ws().to_path_buf();
    write(&ws.join("a.txt"), lines(40, "a").as_bytes());
    write(&ws.join("c.txt"), b"going away\n");
    write(&ws.join("sub/b.txt"), b"one\ntwo\nthree\n");
    let a = env.capture_id(&[]);
    let mut edited = lines(40, "a").replace("line 2 a\n", "line 2 CHANGED\n");
    edited = edited.replace("line 35 a\n", "line 35 a\ninserted\n");
    write(&ws.join("a.txt"), edited.as_bytes());
    fs::remove_file(ws.join("c.txt")).unwrap();
    write(&ws.join("new.txt"), b"brand\nnew\n");
    write(&ws.join("sub/b.txt"), b"one\nTWO\nthree"); // and no newline at the end
    let b = env.capture_id(&[]);
    (env, a, b)
}

/// The hunks of a unified diff: every line from an `@@` on, without the file headers.
fn hunks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_hunk = false;
    for l in text.lines() {
        if l.starts_with("--- ") || l.starts_with("+++ ") || l.starts_with("diff ") {
            in_hunk = false;
            continue;
        }
        if l.starts_with("@@") {
            in_hunk = true;
        }
        if in_hunk {
            out.push(l.to_string());
        }
    }
    out
}

#[test]
fn patch_has_the_hunks_of_diff_u_of_the_restored_trees() {
    let (env, a, b) = two_checkpoints();
    let (da, db) = (env.path("restored-a"), env.path("restored-b"));
    env.restore(&a, &da);
    env.restore(&b, &db);
    let theirs = Command::new("diff")
        .env("LC_ALL", "C")
        .args(["-ruN", s(&da), s(&db)])
        .output()
        .expect("diff(1)");
    assert_eq!(theirs.status.code(), Some(1), "{}", stderr(&theirs));
    let ours = ok(["diff", &env.s(), &a, &b, "-p"]);
    let want = hunks(&stdout(&theirs));
    assert!(want.len() > 10, "{}", stdout(&theirs));
    assert_eq!(
        hunks(&ours),
        want,
        "ours:\n{ours}\ndiff -ruN:\n{}",
        stdout(&theirs)
    );
    // Two hunks for a.txt, headers git's way.
    assert!(ours.contains("--- a/ws/a.txt\n+++ b/ws/a.txt\n"), "{ours}");
    assert!(ours.contains("--- /dev/null\n+++ b/ws/new.txt\n"), "{ours}");
    assert!(ours.contains("--- a/ws/c.txt\n+++ /dev/null\n"), "{ours}");
    assert!(ours.contains("\\ No newline at end of file"), "{ours}");
}

#[test]
fn a_renamed_directory_of_50_files_is_one_line() {
    let env = Env::new();
    for i in 0..50 {
        write(
            &env.ws().join(format!("old/f{i}.txt")),
            format!("file {i}\n").as_bytes(),
        );
    }
    write(&env.ws().join("keep.txt"), b"kept\n");
    let a = env.capture_id(&[]);
    fs::rename(env.ws().join("old"), env.ws().join("new")).unwrap();
    let b = env.capture_id(&[]);
    assert_eq!(
        ok(["diff", &env.s(), &a, &b, "-M"]),
        "renamed   ws/old -> ws/new\n"
    );
    assert_eq!(
        ok(["diff", &env.s(), &a, &b, "--name-status"]),
        "R\tws/old\tws/new\n"
    );
    let j = ok_json(["diff", &env.s(), &a, &b, "-M", "--json"]);
    assert_eq!(
        j,
        serde_json::json!([{"change": "renamed", "path": "ws/new", "from": "ws/old"}])
    );
    // The plain listing keeps its removed/added lines unless asked, and so does
    // --no-renames.
    let plain = ok(["diff", &env.s(), &a, &b]);
    assert_eq!(plain.lines().count(), 102, "{plain}");
    assert!(plain.contains("removed   ws/old\n") && plain.contains("added     ws/new\n"));
    let no = ok(["diff", &env.s(), &a, &b, "--name-status", "--no-renames"]);
    assert_eq!(no.lines().count(), 102, "{no}");
    // A file moved with its content is a rename too; a moved empty file is not.
    fs::rename(env.ws().join("keep.txt"), env.ws().join("new/kept.txt")).unwrap();
    let c = env.capture_id(&[]);
    assert_eq!(
        ok(["diff", &env.s(), &b, &c, "--name-status"]),
        "R\tws/keep.txt\tws/new/kept.txt\n"
    );
}

#[test]
fn stat_gives_sizes_before_and_after_and_a_total() {
    let env = Env::new();
    write(&env.ws().join("a.txt"), &[b'a'; 100]);
    write(&env.ws().join("c.txt"), &[b'c'; 30]);
    let a = env.capture_id(&[]);
    write(&env.ws().join("a.txt"), &[b'A'; 250]);
    fs::remove_file(env.ws().join("c.txt")).unwrap();
    write(&env.ws().join("new.txt"), &[b'n'; 10]);
    let b = env.capture_id(&[]);
    let out = ok(["diff", &env.s(), &a, &b, "--stat"]);
    let rows: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| l.split_once('|'))
        .map(|(p, r)| (p.trim().to_string(), r.trim().to_string()))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("ws/a.txt".to_string(), "100 -> 250 bytes".to_string()),
            ("ws/c.txt".to_string(), "30 -> - bytes".to_string()),
            ("ws/new.txt".to_string(), "- -> 10 bytes".to_string()),
        ],
        "{out}"
    );
    let total = out.lines().last().unwrap();
    assert!(
        total.contains("3 paths changed (1 added, 1 removed, 0 renamed), 130 -> 260 bytes (+130)"),
        "{out}"
    );
    let j = ok_json(["diff", &env.s(), &a, &b, "--stat", "--json"]);
    assert_eq!(j[0]["size_before"], 100, "{j}");
    assert_eq!(j[0]["size"], 250, "{j}");
}

#[test]
fn name_status_is_a_letter_a_tab_and_the_path() {
    let (env, a, b) = two_checkpoints();
    let out = ok(["diff", &env.s(), &a, &b, "--name-status"]);
    assert_eq!(
        out,
        "M\tws/a.txt\nD\tws/c.txt\nA\tws/new.txt\nM\tws/sub/b.txt\n"
    );
    // A change of mode alone is an M too, listed once with a content change.
    chmod(&env.ws().join("new.txt"), 0o600);
    write(&env.ws().join("a.txt"), b"short\n");
    chmod(&env.ws().join("a.txt"), 0o600);
    let c = env.capture_id(&[]);
    assert_eq!(
        ok(["diff", &env.s(), &b, &c, "--name-status"]),
        "M\tws/a.txt\nM\tws/new.txt\n"
    );
}

#[test]
fn paths_filter_to_a_root_path_and_below() {
    let env = Env::new();
    write(&env.ws().join("sub/x.txt"), b"x\n");
    write(&env.ws().join("subway.txt"), b"s\n");
    write(&env.ws().join("top.txt"), b"t\n");
    let a = env.capture_id(&[]);
    write(&env.ws().join("sub/x.txt"), b"x2\n");
    write(&env.ws().join("sub/deep/y.txt"), b"y\n");
    write(&env.ws().join("subway.txt"), b"s2\n");
    write(&env.ws().join("top.txt"), b"t2\n");
    let b = env.capture_id(&[]);
    let want = "added     ws/sub/deep\nadded     ws/sub/deep/y.txt\nmodified  ws/sub/x.txt\n";
    assert_eq!(ok(["diff", &env.s(), &a, &b, "--", "ws/sub"]), want);
    assert_eq!(ok(["diff", &env.s(), &a, &b, "--path", "ws/sub/"]), want);
    assert_eq!(
        ok(["diff", &env.s(), &a, &b, "--", "ws/sub/x.txt", "ws/top.txt"]),
        "modified  ws/sub/x.txt\nmodified  ws/top.txt\n"
    );
    assert_eq!(
        ok([
            "diff",
            &env.s(),
            &a,
            &b,
            "--name-status",
            "--",
            "ws/sub/deep"
        ]),
        "A\tws/sub/deep\nA\tws/sub/deep/y.txt\n"
    );
    assert_eq!(ok(["diff", &env.s(), &a, &b, "--", "ws/nothing"]), "");
}

#[test]
fn binary_files_are_one_line() {
    let env = Env::new();
    let mut nul = b"text before a NUL".to_vec();
    nul.push(0);
    write(&env.ws().join("nul.bin"), &nul);
    write(&env.ws().join("latin1.txt"), b"caf\xe9\n");
    write(&env.ws().join("plain.txt"), b"plain\n");
    let a = env.capture_id(&[]);
    nul.extend_from_slice(b"more");
    write(&env.ws().join("nul.bin"), &nul);
    write(&env.ws().join("latin1.txt"), b"caf\xe9 au lait\n");
    write(&env.ws().join("plain.txt"), b"plain too\n");
    let b = env.capture_id(&[]);
    let out = ok(["diff", &env.s(), &a, &b, "-p"]);
    assert!(
        out.contains("Binary files a/ws/nul.bin and b/ws/nul.bin differ\n"),
        "{out}"
    );
    assert!(
        out.contains("Binary files a/ws/latin1.txt and b/ws/latin1.txt differ\n"),
        "{out}"
    );
    assert!(out.contains("-plain\n+plain too\n"), "{out}");
    assert!(!out.contains("more"), "binary bytes printed: {out}");
}

#[test]
fn diff_against_a_plain_directory_writes_nothing() {
    let (env, _a, b) = two_checkpoints();
    let copy = env.path("copy");
    env.restore(&b, &copy);
    write(&copy.join("a.txt"), b"rewritten in the copy\n");
    write(&copy.join("only-here.txt"), b"fresh\n");
    fs::remove_file(copy.join("new.txt")).unwrap();
    let objects = env.objects();
    let out = ok(["diff", &env.s(), &b, "--dir", s(&copy)]);
    assert_eq!(
        out,
        "modified  ws/a.txt\nremoved   ws/new.txt\nadded     ws/only-here.txt\n"
    );
    // The same with the root named; and the patch reads the new bytes from the directory.
    let named = format!("ws={}", copy.display());
    let p = ok([
        "diff",
        &env.s(),
        &b,
        "--dir",
        &named,
        "-p",
        "--",
        "ws/only-here.txt",
    ]);
    assert!(p.contains("+fresh\n"), "{p}");
    assert_eq!(env.objects(), objects, "a dry run wrote to the store");
    // An unchanged copy has no difference.
    let same = env.path("same");
    env.restore(&b, &same);
    assert_eq!(ok(["diff", &env.s(), &b, "--dir", s(&same)]), "");
}

#[test]
fn status_lists_the_changed_paths_of_a_mounted_workspace() {
    let w = Workspace::new(|room| {
        fs::write(room.join("notes.md"), "# notes\n").unwrap();
        fs::write(room.join("old.txt"), "old\n").unwrap();
        fs::create_dir(room.join("src")).unwrap();
        fs::write(room.join("src/keep.py"), "pass\n").unwrap();
    });
    let base = head(&w.store, "main").expect("head");
    fs::write(w.path("notes.md"), "# notes\nmore\n").unwrap();
    fs::write(w.path("new.txt"), "hello").unwrap();
    fs::remove_file(w.path("old.txt")).unwrap();
    let short = ok(["status", w.room(), "--short"]);
    let got: BTreeSet<&str> = short.lines().collect();
    let want: BTreeSet<&str> = ["M ws/notes.md", "A ws/new.txt", "D ws/old.txt"].into();
    assert_eq!(got, want, "{short}");
    let long = ok(["status", w.room()]);
    assert!(long.contains("\n  M ws/notes.md\n"), "{long}");
    let j = ok_json(["status", w.room(), "--json"]);
    let changes = j[0]["changes"].as_array().expect("changes");
    let new = changes
        .iter()
        .find(|c| c["path"] == "ws/new.txt")
        .expect("new.txt");
    assert_eq!((&new["change"], &new["size"]), (&"added".into(), &5.into()));
    let notes = changes.iter().find(|c| c["path"] == "ws/notes.md").unwrap();
    assert_eq!(notes["change"], "modified");
    assert_eq!(
        (&notes["size_before"], &notes["size"]),
        (&8.into(), &13.into())
    );
    assert_eq!(j[0]["dirty"], true, "{j}");
    // The workspace as a diff side: its merged tree now, contents from the upper layer.
    let p = ok(["diff", w.store(), &base, "--workspace", w.room(), "-p"]);
    assert!(p.contains("--- a/ws/notes.md\n+++ b/ws/notes.md\n"), "{p}");
    assert!(p.contains(" # notes\n+more\n"), "{p}");
    assert!(p.contains("+hello\n\\ No newline at end of file\n"), "{p}");
    assert_eq!(
        ok(["diff", w.store(), &base, w.room(), "--name-status"]),
        "A\tws/new.txt\nM\tws/notes.md\nD\tws/old.txt\n"
    );
    // After a checkpoint there is nothing to list.
    w.checkpoint("turn");
    assert_eq!(ok(["status", w.room(), "--short"]), "");
    let j = ok_json(["status", w.room(), "--json"]);
    assert_eq!(j[0]["changes"], serde_json::json!([]), "{j}");
    assert_eq!(ok(["diff", w.store(), "main", "--workspace", w.room()]), "");
    // A later change is listed against that checkpoint, not the base.
    fs::write(w.path("src/keep.py"), "pass  # edited\n").unwrap();
    assert_eq!(ok(["status", w.room(), "--short"]), "M ws/src/keep.py\n");
}

#[test]
fn help_explains_each_flag() {
    let d = ok(["diff", "--help"]);
    for flag in [
        "--stat",
        "--name-status",
        "--patch",
        "--path",
        "--workspace",
        "--dir",
        "--find-renames",
        "--no-renames",
    ] {
        assert!(d.contains(flag), "diff --help lacks {flag}:\n{d}");
    }
    let st = ok(["status", "--help"]);
    assert!(st.contains("--short") && st.contains("changes"), "{st}");
}
