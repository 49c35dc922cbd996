//! History and inspection: log, show, ls, cat, diff, labels (immutable), branches, short ids,
//! `--json` on every listing.

use std::fs;

use crate::support::*;
use serde_json::json;

#[test]
fn labels_are_immutable() {
    let env = Env::new();
    small_tree(env.ws());
    let a = env.capture_id(&["--label", "v1"]);
    write(&env.ws().join("a.txt"), b"changed");
    let b = env.capture_id(&[]);
    assert_eq!(ok_json(["show", &env.s(), "v1"])["id"], a.as_str());

    // Moving a label is refused, with the label named; it still points where it did.
    let err = fails(1, ["label", &env.s(), &b, "v1"]);
    assert!(err.contains("v1") && err.contains("immutable"), "{err}");
    assert_eq!(ok_json(["show", &env.s(), "v1"])["id"], a.as_str());
    let label_file = env.store.join("refs/labels/v1");
    assert!(fs::read_to_string(&label_file).unwrap().starts_with(&a));

    // A capture asking for an existing label fails before recording anything.
    let before = env.checkpoints();
    let err = fails(1, ["capture", &env.s(), "--label", "v1"]);
    assert!(err.contains("v1"), "{err}");
    assert_eq!(env.checkpoints(), before);

    // Re-labelling the same checkpoint with the same name is idempotent; a new name works.
    ok(["label", &env.s(), &a, "v1"]);
    ok(["label", &env.s(), &b[..10], "v2"]);
    assert_eq!(ok_json(["show", &env.s(), "v2"])["id"], b.as_str());
    // A label cannot shadow a branch.
    let err = fails(1, ["label", &env.s(), &a, "main"]);
    assert!(err.contains("main"), "{err}");
    // Bad label names are usage errors.
    fails(2, ["label", &env.s(), &a, "../x"]);
}

#[test]
fn log_show_ls_cat_diff_and_branches() {
    let env = Env::new();
    small_tree(env.ws());
    let a = env.capture_id(&["-m", "first", "--label", "base"]);
    // Change one file, add one, remove one, change a mode, retarget a symlink.
    write(&env.ws().join("a.txt"), b"alpha 2\n");
    write(&env.ws().join("sub/new.txt"), b"new\n");
    fs::remove_file(env.ws().join("sub/deeper/c.bin")).unwrap();
    chmod(&env.ws().join("sub/b.txt"), 0o600);
    fs::remove_file(env.ws().join("link")).unwrap();
    std::os::unix::fs::symlink("a.txt", env.ws().join("link")).unwrap();
    let b = env.capture_id(&["-m", "second"]);
    // A second branch forked from nothing.
    let c = env.capture_id(&["--branch", "experiment", "-m", "other"]);

    // log: newest first, labels shown, --branch follows parents.
    let log = ok_json(["log", &env.s()]);
    let ids: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![c.as_str(), b.as_str(), a.as_str()]);
    assert_eq!(log[2]["labels"], json!(["base"]));
    let main_log = ok_json(["log", &env.s(), "--branch", "main"]);
    let ids: Vec<&str> = main_log
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![b.as_str(), a.as_str()]);
    let text = ok(["log", &env.s()]);
    assert_eq!(text.lines().count(), 3);
    assert!(text.contains("[base]") && text.contains("second"), "{text}");

    // show by short prefix, label and branch.
    let s = ok_json(["show", &env.s(), &b[..8]]);
    assert_eq!(s["id"], b.as_str());
    assert_eq!(s["checkpoint"]["message"], "second");
    assert_eq!(s["checkpoint"]["parents"], json!([a]));
    assert_eq!(ok_json(["show", &env.s(), "experiment"])["id"], c.as_str());
    assert!(ok(["show", &env.s(), "base"]).contains(&a));

    // ls of a subdirectory, text and JSON.
    let ls = ok_json(["ls", &env.s(), &format!("{b}:ws/sub")]);
    let names: Vec<&str> = ls
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["b.txt", "deeper", "new.txt"]);
    assert_eq!(ls[0]["mode"], "0600");
    assert!(ok(["ls", &env.s(), "base"]).contains("link -> sub/b.txt"));
    // cat an old version.
    let o = run(["cat", &env.s(), "base:ws/a.txt"]);
    assert_eq!(o.stdout, b"alpha\n");
    fails(2, ["cat", &env.s(), "base:ws/sub"]);
    let err = fails(1, ["cat", &env.s(), "base:ws/nope.txt"]);
    assert!(err.contains("nope.txt"), "{err}");

    // diff names every kind of change.
    let d = ok_json(["diff", &env.s(), &a, &b]);
    let mut got: Vec<(String, String)> = d
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["change"].as_str().unwrap().into(),
                c["path"].as_str().unwrap().into(),
            )
        })
        .collect();
    got.sort();
    let mut want: Vec<(String, String)> = [
        ("modified", "ws/a.txt"),
        ("modified", "ws/link"),
        ("mode", "ws/sub/b.txt"),
        ("removed", "ws/sub/deeper/c.bin"),
        ("added", "ws/sub/new.txt"),
    ]
    .iter()
    .map(|(x, y)| (x.to_string(), y.to_string()))
    .collect();
    want.sort();
    assert_eq!(got, want);
    assert!(ok(["diff", &env.s(), &a, &b]).contains("ws/sub/new.txt"));

    // branch list.
    let br = ok_json(["branch", "list", &env.s()]);
    let names: Vec<(&str, &str)> = br
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["name"].as_str().unwrap(), b["head"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        vec![("experiment", c.as_str()), ("main", b.as_str())]
    );
    assert!(ok(["branch", "list", &env.s()]).contains("experiment"));

    // Every mutating operation left one audit line.
    let audit = fs::read_to_string(env.store.join("audit.jsonl")).unwrap();
    let ops: Vec<String> = audit
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["op"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ops, vec!["capture", "capture", "capture"]);
}

#[test]
fn help_texts_describe_every_command() {
    let top = ok(["--help"]);
    for c in [
        "init", "capture", "restore", "recover", "log", "show", "ls", "cat", "diff", "label",
        "branch", "verify",
    ] {
        assert!(top.contains(c), "top-level help lacks {c}");
        let h = ok([c, "--help"]);
        assert!(h.len() > 80, "{c} --help is too thin: {h}");
    }
    assert!(ok(["capture", "--help"]).contains("--exclude"));
    assert!(ok(["restore", "--help"]).contains("--to"));
    // Listings all offer --json.
    for c in [
        &["log"][..],
        &["show"],
        &["ls"],
        &["diff"],
        &["verify"],
        &["branch", "list"],
    ] {
        let mut args: Vec<&str> = c.to_vec();
        args.push("--help");
        assert!(ok(&args).contains("--json"), "{c:?} has no --json");
    }
}

#[test]
fn show_lists_the_labels_that_name_a_checkpoint_now() {
    let env = Env::new();
    small_tree(env.ws());
    let a = env.capture_id(&["--label", "first"]);
    ok(["label", &env.s(), &a, "later"]);
    let v = ok_json(["show", &env.s(), &a]);
    assert_eq!(v["labels"], json!(["first", "later"]), "{v}");
    let text = ok(["show", &env.s(), &a]);
    assert!(
        text.contains("label      first") && text.contains("label      later"),
        "{text}"
    );
    // A deleted label is no longer listed (the record keeps the name it was made with).
    ok(["label", "delete", &env.s(), "first"]);
    let v = ok_json(["show", &env.s(), &a]);
    assert_eq!(v["labels"], json!(["later"]), "{v}");
    assert_eq!(v["checkpoint"]["label"], "first", "{v}");
}

#[test]
fn log_graph_draws_a_fork_joining_above_the_checkpoint_it_forked_from() {
    let env = Env::new();
    small_tree(env.ws());
    let c1 = env.capture_id(&["-m", "c1"]);
    write(&env.ws().join("a.txt"), b"2");
    env.capture_id(&["-m", "c2"]);
    ok(["fork", &env.s(), &c1, "--name", "side"]);
    write(&env.ws().join("a.txt"), b"3");
    env.capture_id(&["-b", "side", "-m", "c3"]);
    let graph = ok(["log", &env.s(), "--graph"]);
    let lines: Vec<&str> = graph.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains(&c1[..12]))
        .unwrap_or_else(|| panic!("{graph}"));
    // The other lane joins on the line just above c1, and nothing is drawn below it.
    assert!(at > 0 && lines[at - 1].contains('/'), "{graph}");
    assert!(lines[at].starts_with("* "), "{graph}");
    assert_eq!(at, lines.len() - 1, "{graph}");
}
