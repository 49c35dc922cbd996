//! What an agent's room can do to the operator's terminal and identity: `turn` and `exec` run
//! the agent as the workspace's owner (never root unless asked), and the names it writes are
//! quoted in every human listing (never raw escape sequences or newlines), while `--json`
//! carries them exactly.

use std::fs;

use crate::support::*;

/// `id -u` of COMMAND run by `turn` or `exec` with `extra` arguments, or the failure.
fn uid_under(verb: &str, w: &Workspace, extra: &[&str]) -> std::process::Output {
    let mut args = vec![verb, w.room()];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "id", "-u"]);
    run(&args)
}

fn uid_of(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{}", describe_output("id -u", o));
    // `turn` prints its report on stderr: stdout is COMMAND's.
    stdout(o).trim().to_string()
}

#[test]
fn turn_and_exec_run_as_the_workspace_owner() {
    let w = Workspace::for_nobody(&[], |room| fs::write(room.join("f"), b"x").unwrap());
    for verb in ["exec", "turn"] {
        let o = uid_under(verb, &w, &[]);
        assert_eq!(uid_of(&o), NOBODY.to_string(), "{verb} as the owner");
        let o = uid_under(verb, &w, &["--user", "nobody"]);
        assert_eq!(uid_of(&o), NOBODY.to_string(), "{verb} --user nobody");
        let o = uid_under(verb, &w, &["--as-root"]);
        assert_eq!(uid_of(&o), "0", "{verb} --as-root");
    }
    // HOME, USER and LOGNAME are the agent's, as sudo sets them.
    let o = run([
        "exec",
        w.room(),
        "--",
        "sh",
        "-c",
        "echo $USER $LOGNAME $HOME; id -G",
    ]);
    let out = stdout(&o);
    assert!(out.starts_with("nobody nobody "), "{out}");
    assert!(
        !out.split_whitespace().any(|g| g == "0"),
        "root's group kept: {out}"
    );
    // The report says who ran.
    let r = ok_json(["turn", w.room(), "--json", "--", "true"]);
    assert_eq!(r["uid"], NOBODY, "{r}");
}

#[test]
fn a_root_owned_room_is_refused_without_a_flag() {
    let w = Workspace::new(|room| fs::write(room.join("f"), b"x").unwrap());
    for verb in ["exec", "turn"] {
        let o = uid_under(verb, &w, &[]);
        let err = assert_error_output(&[verb.to_string()], &o, 2);
        assert!(
            err.contains("--user") && err.contains("--as-root") && err.lines().count() == 1,
            "{err}"
        );
        assert!(stdout(&o).is_empty(), "COMMAND ran: {}", stdout(&o));
        let o = uid_under(verb, &w, &["--user", "nobody"]);
        assert_eq!(uid_of(&o), NOBODY.to_string(), "{verb} --user nobody");
    }
}

/// Names an agent can write: a terminal title change, a colour change, a forged output line,
/// bytes that are not UTF-8.
const TITLE: &str = "t\x1b]0;pwned\x07.txt";
const RED: &str = "\x1b[31mred.txt";
const FORGED: &str = "x\nFORGED ws-fake.txt";
const BAD: &[u8] = b"bad\xff.txt";

fn hostile_names(dir: &std::path::Path, tag: &str) {
    use std::os::unix::ffi::OsStrExt;
    for n in [TITLE, RED, FORGED] {
        fs::write(dir.join(format!("{tag}{n}")), b"agent\n").unwrap();
    }
    let mut bad = tag.as_bytes().to_vec();
    bad.extend_from_slice(BAD);
    fs::write(dir.join(std::ffi::OsStr::from_bytes(&bad)), b"agent\n").unwrap();
}

thread_local! {
    /// What `assert_safe` found unsafe, so one run names every listing at fault.
    static UNSAFE: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Records (for [`assert_none_unsafe`]) whether `o`'s stdout or stderr holds an escape
/// sequence, a bell, a line the agent forged, or bytes that are not UTF-8; returns stdout.
fn assert_safe(what: &str, o: &std::process::Output) -> String {
    for (stream, bytes) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        let text = String::from_utf8_lossy(bytes);
        let problem = if std::str::from_utf8(bytes).is_err() {
            Some("raw invalid UTF-8")
        } else if text.contains(['\x1b', '\x07']) {
            Some("raw ESC or BEL")
        } else if text.lines().any(|l| l.trim_start().starts_with("FORGED")) {
            Some("a forged line")
        } else {
            None
        };
        if let Some(p) = problem {
            UNSAFE.with(|u| {
                u.borrow_mut()
                    .push(format!("{what}: {p} on {stream}: {text:?}"))
            });
        }
    }
    stdout(o)
}

/// Records a quoted form missing from a listing.
fn shown(present: bool, msg: String) {
    if !present {
        UNSAFE.with(|u| u.borrow_mut().push(format!("not shown quoted: {msg}")));
    }
}

fn assert_none_unsafe() {
    let found = UNSAFE.with(|u| u.take());
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The quoted forms the human output shows.
const TITLE_SHOWN: &str = r#"t\033]0;pwned\a.txt"#;
const FORGED_SHOWN: &str = r#"x\nFORGED ws-fake.txt"#;
const BAD_SHOWN: &str = r#"bad\377.txt"#;

#[test]
fn names_from_the_room_are_quoted_in_every_human_listing() {
    let w = Workspace::new(|room| hostile_names(room, "base-"));
    // The agent writes more in the mounted room, and a reply with an escape.
    hostile_names(&w.room, "new-");
    let reply = w.tmp.path().join("reply.json");
    fs::write(
        &reply,
        br#"{"note": "done\u001b]0;pwned\u0007\nFORGED line"}"#,
    )
    .unwrap();

    let listing = |what: &str, args: &[&str]| {
        let o = run(args);
        assert!(o.status.success(), "{}", describe_output(what, &o));
        assert_safe(what, &o)
    };
    let out = listing("ls", &["ls", w.store(), "main:ws"]);
    for form in [TITLE_SHOWN, FORGED_SHOWN, BAD_SHOWN] {
        shown(out.contains(form), format!("ls: {form} not in {out}"));
    }
    let out = listing("ls -r", &["ls", w.store(), "main", "-r"]);
    shown(out.contains(TITLE_SHOWN), out.clone());
    let out = listing("status", &["status", w.store()]);
    shown(out.contains(&format!("ws/new-{FORGED_SHOWN}")), out.clone());
    let out = listing("status --short", &["status", w.store(), "--short"]);
    shown(out.contains(&format!("ws/new-{TITLE_SHOWN}")), out.clone());
    listing(
        "diff --workspace",
        &["diff", w.store(), "main", "--workspace", w.room()],
    );
    let plain = w.tmp.path().join("plain");
    fs::create_dir(&plain).unwrap();
    hostile_names(&plain, "dir-");
    let dir = format!("ws={}", s(&plain));
    let out = listing("diff --dir", &["diff", w.store(), "main", "--dir", &dir]);
    shown(out.contains(&format!("dir-{TITLE_SHOWN}")), out.clone());
    let base = ok_json(["status", w.store(), "--json"])[0]["base"]
        .as_str()
        .unwrap()
        .to_string();
    ok([
        "checkpoint",
        w.room(),
        "-m",
        "agent's names",
        "--meta-file",
        s(&reply),
    ]);
    for (what, extra) in [
        ("diff", &[][..]),
        ("diff --stat", &["--stat"][..]),
        ("diff --name-status", &["--name-status"][..]),
        ("diff -p", &["-p"][..]),
    ] {
        let mut args = vec!["diff", w.store(), &base, "main"];
        args.extend_from_slice(extra);
        let out = listing(what, &args);
        shown(out.contains(TITLE_SHOWN), format!("{what}: {out}"));
    }
    listing("show", &["show", w.store(), "main"]);
    listing("log", &["log", w.store()]);
    let out = listing("find", &["find", w.store(), "*pwned*", "*FORGED*", "bad*"]);
    shown(out.contains(TITLE_SHOWN), format!("find: {out}"));
    let history = format!("ws/new-{FORGED}");
    listing(
        "find --history",
        &["find", w.store(), "--history", &history],
    );
    // Errors naming a path from the tree.
    let missing = format!("main:ws/base-{TITLE}/nothing");
    let o = run(["cat", w.store(), &missing]);
    assert!(!o.status.success());
    assert_safe("cat (error)", &o);
    let o = run(["ls", w.store(), &format!("main:ws/{FORGED}")]);
    assert!(!o.status.success());
    assert_safe("ls (error)", &o);

    // --json carries the names exactly (UTF-8 ones; invalid bytes are U+FFFD, as documented).
    assert_none_unsafe();
    let v = ok_json(["ls", w.store(), "main:ws", "--json"]);
    let paths: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    for n in [TITLE, RED, FORGED] {
        assert!(
            paths.contains(&format!("base-{n}").as_str()),
            "{n:?}: {paths:?}"
        );
    }
    let v = ok_json(["diff", w.store(), &base, "main", "--json"]);
    assert!(
        v.to_string()
            .contains(&serde_json::to_string(&format!("ws/new-{FORGED}")).unwrap()),
        "{v}"
    );
}
