//! Runtime fingerprints: every turn records one; a changed agent binary makes `turn`,
//! `exec` and `mount --branch` refuse, naming the field, unless `--accept-runtime-change`,
//! which is audited; a real interpreter's fingerprint is the same on two runs.

use std::fs;

use crate::support::*;

#[test]
fn a_changed_binary_refuses_resume_and_the_override_is_audited() {
    let w = Workspace::new(|room| write(&room.join("a.txt"), b"one\n"));
    let agent = w.tmp.path().join("agent");
    fs::write(&agent, b"#!/bin/sh\necho v1\n").unwrap();
    let agent_s = agent.to_str().unwrap();
    ok([
        "fingerprint",
        w.store(),
        "--file",
        agent_s,
        "--command",
        "uname -s",
    ]);
    if !turns_can_run(&w) {
        return;
    }
    let rec = record_of(&w.store, "main");
    // The program of a declared command is stored as the absolute path PATH gave.
    let uname = format!("{} -s", sh("command -v uname").trim());
    let field = rec["runtime"]["files"][agent_s]
        .as_str()
        .unwrap()
        .to_string();
    assert!(field.starts_with("sha256:"), "{field}");
    assert_eq!(rec["runtime"]["commands"][&uname], "Linux", "{rec}");
    // Same runtime: the branch compares clean.
    ok(["fingerprint", w.store(), "--branch", "main"]);

    // The "upgrade": a new binary at the same path.
    fs::write(&agent, b"#!/bin/sh\necho v2\n").unwrap();
    let before_head = head(&w.store, "main");
    let file_field = format!("file:{agent_s}");
    refused(
        1,
        ["turn", "--as-root", w.room(), "--", "true"],
        &[&file_field, "--accept-runtime-change"],
    );
    refused(
        1,
        ["exec", "--as-root", w.room(), "--", "true"],
        &[&file_field],
    );
    let o = run(["fingerprint", w.store(), "--branch", "main"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains(&file_field), "{}", stdout(&o));
    ok(["umount", w.room()]);
    refused(1, ["mount", w.store(), "--branch", "main"], &[&file_field]);
    assert_eq!(
        head(&w.store, "main"),
        before_head,
        "refusals record nothing"
    );
    // Only the changed field is named.
    let line = refused(1, ["mount", w.store(), "--branch", "main"], &[]);
    assert!(
        !line.contains("platform.") && !line.contains("command:"),
        "{line}"
    );

    // The override: the turn runs, the change is audited, the new fingerprint recorded.
    let o = run([
        "turn",
        "--as-root",
        w.store(),
        "--branch",
        "main",
        "--accept-runtime-change",
        "--json",
        "--",
        "true",
    ]);
    assert!(o.status.success(), "{o:?}");
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["runtime"]["accepted"], true);
    let accepted: Vec<_> = audit(&w.store)
        .into_iter()
        .filter(|l| l["op"] == "accept-runtime-change")
        .collect();
    assert_eq!(accepted.len(), 1, "{accepted:?}");
    assert_eq!(accepted[0]["args"]["branch"], "main");
    assert_eq!(
        accepted[0]["result"]["differences"][0]["field"],
        file_field.as_str()
    );
    let rec = record_of(&w.store, "main");
    assert_eq!(rec["turn"]["accepted_runtime_change"], true);
    assert_ne!(rec["runtime"]["files"][agent_s].as_str().unwrap(), field);
    // From then on the branch's runtime is the new one: no flag needed.
    assert!(turn(&w, &[], &["true"]).status.success());
    ok(["fingerprint", w.store(), "--branch", "main"]);

    // Forking from a turn before the upgrade carries the old fingerprint with it.
    let turns = turns(&w.store);
    let old = turns.iter().rev().find(|t| t["outcome"] == "ok").unwrap()["checkpoint"]
        .as_str()
        .unwrap()
        .to_string();
    ok(["fork", w.store(), &old, "--name", "before-upgrade"]);
    refused(
        1,
        [
            "turn",
            "--as-root",
            w.store(),
            "--branch",
            "before-upgrade",
            "--",
            "true",
        ],
        &[&file_field, "before-upgrade"],
    );
}

#[test]
fn a_real_interpreter_has_the_same_fingerprint_on_two_runs() {
    let e = Env::new();
    if sh("command -v python3").trim().is_empty() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    // A bare --file name is stored as the path PATH gives now; commands name Debian's
    // Python (root's PATH may start with a pyenv shim, which needs the caller's environment
    // that a declared command does not get).
    let python3 = sh("command -v python3").trim().to_string();
    let version = format!("{PYTHON} --version");
    ok([
        "fingerprint",
        &e.s(),
        "--file",
        "python3",
        "--command",
        &version,
        "--command",
        "python3 -c 'import sys; print(sys.implementation.cache_tag)'",
    ]);
    let first = ok_json(["fingerprint", &e.s()]);
    let second = ok_json(["fingerprint", &e.s()]);
    assert_eq!(first["fingerprint"], second["fingerprint"]);
    let fp = &first["fingerprint"];
    assert!(
        fp["files"][&python3]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "{fp}"
    );
    assert!(fp["commands"][&version]
        .as_str()
        .unwrap()
        .starts_with("Python 3"));
    for k in ["os", "kernel", "arch", "libc"] {
        assert!(!fp["platform"][k].as_str().unwrap().is_empty(), "{k}: {fp}");
    }
    // The declaration is in STORE.json; --clear takes it out again.
    let cfg: serde_json::Value =
        serde_json::from_slice(&fs::read(e.store.join("STORE.json")).unwrap()).unwrap();
    assert_eq!(cfg["runtime"]["files"][0], python3.as_str());
    ok(["fingerprint", &e.s(), "--clear"]);
    assert!(ok_json(["fingerprint", &e.s()])["fingerprint"]["files"].is_null());
    // A branch's own declaration is used instead of the store's; --clear with --branch
    // takes it back. (The branch must be one: a declaration for none is refused.)
    ok(["fingerprint", &e.s(), "--command", &version]);
    capture(&e.store, &[]);
    ok(["fork", &e.s(), "main", "alt"]);
    ok([
        "fingerprint",
        &e.s(),
        "--branch",
        "alt",
        "--command",
        "echo alt-runtime",
    ]);
    let alt = ok_json(["fingerprint", &e.s(), "--branch", "alt"]);
    let echo = alt["declared"]["commands"][0].as_str().unwrap().to_string();
    assert!(
        echo.starts_with('/') && echo.ends_with("/echo alt-runtime"),
        "{alt}"
    );
    assert_eq!(alt["fingerprint"]["commands"][&echo], "alt-runtime");
    assert!(alt["fingerprint"]["commands"].get(&version).is_none());
    let store_fp = ok_json(["fingerprint", &e.s()]);
    assert!(store_fp["fingerprint"]["commands"][&version].is_string());
    assert!(store_fp["fingerprint"]["commands"].get(&echo).is_none());
    ok(["fingerprint", &e.s(), "--branch", "alt", "--clear"]);
    let alt = ok_json(["fingerprint", &e.s(), "--branch", "alt"]);
    assert_eq!(alt["declared"]["commands"][0], version.as_str(), "{alt}");
    refused(
        2,
        ["fingerprint", &e.s(), "--branch", "a/b", "--command", "x"],
        &["branch"],
    );
    // Bad declarations: one line, exit 2.
    refused(
        2,
        ["fingerprint", &e.s(), "--file", "rel/path"],
        &["absolute"],
    );
    refused(2, ["fingerprint", &e.s(), "--command", " "], &["--command"]);
}

#[test]
fn only_a_declared_command_s_stdout_is_its_runtime() {
    let w = Workspace::new(|room| write(&room.join("a.txt"), b"one\n"));
    // stdout stable, stderr different on every run (as an environment-dependent warning).
    ok([
        "fingerprint",
        w.store(),
        "--command",
        "echo v1; date +%N >&2",
    ]);
    if !turns_can_run(&w) {
        return;
    }
    // The next turn and a remount compare clean.
    let o = turn(&w, &[], &["true"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    ok(["umount", w.room()]);
    ok(["mount", w.store(), "--branch", "main"]);
    let rec = record_of(&w.store, "main");
    assert_eq!(rec["runtime"]["command_output"], "stdout", "{rec}");
    let out: Vec<&serde_json::Value> = rec["runtime"]["commands"]
        .as_object()
        .unwrap()
        .values()
        .collect();
    assert_eq!(out, vec!["v1"], "{rec}");
    // What stdout says is still compared (the new declaration is accepted once).
    ok(["fingerprint", w.store(), "--command", "date +%N"]);
    let o = turn(&w, &["--accept-runtime-change"], &["true"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    refused(
        1,
        ["turn", "--as-root", w.room(), "--", "true"],
        &["command:"],
    );
}
