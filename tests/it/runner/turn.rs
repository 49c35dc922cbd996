//! `ckptfs turn`, on real workspace mounts: a successful turn is exactly one checkpoint with
//! its metadata and fingerprint; a failing, killed or crashed turn records nothing on the
//! branch, keeps its writes in the upper layer, and leaves the store recoverable with the
//! failure in the audit log; another mutating command during a turn is refused, naming it.

use std::fs;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

fn room_file(w: &Workspace, name: &str) -> String {
    w.path(name).to_str().unwrap().to_string()
}

#[test]
fn a_successful_turn_adds_exactly_one_checkpoint_with_meta_and_fingerprint() {
    let w = Workspace::new(|room| write(&room.join("notes.md"), b"start\n"));
    if !turns_can_run(&w) {
        return;
    }
    let before = log_ids(&w.store, &["--branch", "main"]);
    let meta_file = w.tmp.path().join("meta.json");
    fs::write(
        &meta_file,
        br#"{"thread": "th-1", "turn": 7, "reply": "done"}"#,
    )
    .unwrap();
    let script = format!("echo turn7 >> {}", room_file(&w, "notes.md"));
    let (o, r) = turn_json(
        &w,
        &[
            "--meta",
            "thread=th-9",
            "--meta-file",
            meta_file.to_str().unwrap(),
            "--label",
            "t7",
        ],
        &["sh", "-c", &script],
    );
    assert!(o.status.success(), "{o:?}");
    assert_eq!(r["outcome"], "ok");
    let after = log_ids(&w.store, &["--branch", "main"]);
    assert_eq!(after.len(), before.len() + 1, "exactly one new checkpoint");
    let id = r["checkpoint"].as_str().unwrap();
    assert_eq!(after[0], id);
    assert_eq!(w.cat(id, "notes.md"), b"start\nturn7\n");
    let c = record_of(&w.store, "t7");
    // --meta wins over the file's key; the file's other keys keep their JSON types.
    assert_eq!(c["meta"]["thread"], "th-9");
    assert_eq!(c["meta"]["turn"], 7);
    assert_eq!(c["meta"]["reply"], "done");
    assert_eq!(c["turn"]["exit_status"], 0);
    assert_eq!(c["turn"]["command"][0], "sh");
    assert!(c["turn"]["ended_ns"].as_i64() >= c["turn"]["started_ns"].as_i64());
    assert_eq!(c["runtime"]["platform"]["os"], "Linux");
    assert!(c["runtime"]["platform"]["libc"].is_string(), "{c}");
    assert_eq!(c["turn"]["id"], r["turn"]);
    // log shows and selects by meta; show prints it.
    assert_eq!(
        log_ids(&w.store, &["--meta", "turn=7"]),
        vec![id.to_string()]
    );
    assert!(log_ids(&w.store, &["--meta", "turn=8"]).is_empty());
    let shown = ok(["show", w.store(), id]);
    assert!(shown.contains("meta       thread=th-9"), "{shown}");
    assert!(shown.contains("runtime    platform.kernel"), "{shown}");
    // The audit log has the start and the outcome, and log --turns lists it.
    let lines = audit(&w.store);
    let t = r["turn"].as_str().unwrap();
    assert!(lines
        .iter()
        .any(|l| l["op"] == "turn-start" && l["args"]["turn"] == t));
    assert!(lines
        .iter()
        .any(|l| l["op"] == "turn" && l["args"]["turn"] == t && l["result"]["outcome"] == "ok"));
    let listed = turns(&w.store);
    assert_eq!(listed[0]["turn"], t);
    assert_eq!(listed[0]["outcome"], "ok");
    assert_eq!(listed[0]["checkpoint"], id);
    // The checkpoint was held: the workspace's cgroup is recorded with the mount.
    let st = ok_json(["status", w.store()]);
    assert!(
        !st[0]["freeze_cgroups"].as_array().unwrap().is_empty(),
        "{st}"
    );
}

#[test]
fn a_failing_or_killed_command_records_nothing_and_keeps_its_writes() {
    let w = Workspace::new(|room| write(&room.join("a.txt"), b"one\n"));
    if !turns_can_run(&w) {
        return;
    }
    let before_head = head(&w.store, "main");
    let count = checkpoints(&w.store).len();
    // Exit 1: the status is the command's, nothing is recorded.
    let script = format!("echo failed >> {}; exit 1", room_file(&w, "a.txt"));
    let (o, r) = turn_json(&w, &[], &["sh", "-c", &script]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert_eq!(r["outcome"], "failed");
    assert!(r["checkpoint"].is_null());
    assert_eq!(head(&w.store, "main"), before_head);
    assert_eq!(checkpoints(&w.store).len(), count);
    // The write stays in the workspace, and status says whose it is.
    assert_eq!(fs::read(w.path("a.txt")).unwrap(), b"one\nfailed\n");
    let st = ok_json(["status", w.store()]);
    assert_eq!(st[0]["turn"]["state"], "failed", "{st}");
    assert_eq!(st[0]["turn"]["turn"], r["turn"]);
    let text = ok(["status", w.store()]);
    assert!(text.contains("turn --retry"), "{text}");
    // The next turn is refused while those writes are there, naming the failed turn.
    let t = r["turn"].as_str().unwrap();
    refused(
        1,
        ["turn", "--as-root", w.room(), "--", "true"],
        &[t, "--retry", "switch --discard"],
    );
    // --retry sets them aside (displaced/) and runs again.
    let (o, r2) = turn_json(&w, &["--retry"], &["sh", "-c", "exit 0"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(r2["outcome"], "ok");
    let aside = r2["set_aside"].as_str().expect("set aside");
    assert_eq!(
        fs::read(format!("{aside}/.top-ws/ws/a.txt")).unwrap(),
        b"one\nfailed\n"
    );
    assert_eq!(fs::read(w.path("a.txt")).unwrap(), b"one\n");
    let id = r2["checkpoint"].as_str().unwrap();
    assert_eq!(w.cat(id, "a.txt"), b"one\n");

    // SIGKILL of COMMAND: 128+9, nothing recorded, the outcome says killed.
    let before_head = head(&w.store, "main");
    let script = format!("echo k >> {}; kill -KILL $$", room_file(&w, "a.txt"));
    let (o, r) = turn_json(&w, &[], &["sh", "-c", &script]);
    assert_eq!(o.status.code(), Some(137), "{o:?}");
    assert_eq!(r["outcome"], "killed");
    assert_eq!(r["signal"], 9);
    assert_eq!(head(&w.store, "main"), before_head);
    let listed = turns(&w.store);
    assert_eq!(listed[0]["outcome"], "killed");
    assert_eq!(listed[2]["outcome"], "failed");
    assert_eq!(listed[2]["exit_status"], 1);
    recover_and_verify(&w.store, "after failed turns");
    // switch --discard is the other way out; then turns run again.
    ok(["switch", w.room(), "--to", "main", "--discard"]);
    assert!(turn(&w, &[], &["true"]).status.success());

    // A command that cannot run: 127, recorded as cannot-run.
    let (o, r) = turn_json(&w, &[], &["/nonexistent/agent"]);
    assert_eq!(o.status.code(), Some(127), "{o:?}");
    assert_eq!(r["outcome"], "cannot-run");
    assert!(String::from_utf8_lossy(&o.stderr).contains("command not found"));
}

#[test]
fn a_killed_runner_leaves_the_store_recoverable_with_the_failure_recorded() {
    let w = Workspace::new(|room| write(&room.join("a.txt"), b"one\n"));
    if !turns_can_run(&w) {
        return;
    }
    let before_head = head(&w.store, "main");
    let ready = w.tmp.path().join("ready");
    let script = format!(
        "echo crash >> {}; touch {}; exec sleep 600",
        room_file(&w, "a.txt"),
        ready.display()
    );
    let runner = Command::new(bin())
        .args(["turn", "--as-root", w.room(), "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut runner = KillOnDrop(runner);
    eventually("the turn's command starts", || ready.exists());
    let marker: serde_json::Value =
        serde_json::from_slice(&fs::read(w.store.join("run/RUNNING.json")).unwrap()).unwrap();
    let cg = CgroupKiller(marker["args"]["cgroup"].as_str().unwrap().into());
    let t = marker["args"]["turn"].as_str().unwrap().to_string();
    // SIGKILL of `ckptfs turn` itself; its command lives on in the cgroup.
    runner.0.kill().unwrap();
    runner.0.wait().unwrap();
    assert!(!cg.empty());
    // Mutating commands refuse, naming the unfinished turn; recover waits for its processes.
    refused(
        1,
        ["checkpoint", w.room()],
        &[&t, "did not finish", "recover"],
    );
    refused(1, ["recover", w.store()], &[&t, "still run", "cgroup.kill"]);
    assert_eq!(turns(&w.store)[0]["outcome"], "interrupted");
    assert!(cg.kill_all() > 0);
    eventually("the turn's processes are gone", || cg.empty());
    let out = ok(["recover", w.store()]);
    assert!(out.contains("recorded as crashed"), "{out}");
    recover_and_verify(&w.store, "after the runner was killed");
    // Nothing on the branch; the failure is in the audit log and in log --turns.
    assert_eq!(head(&w.store, "main"), before_head);
    assert!(audit(&w.store).iter().any(|l| l["op"] == "turn"
        && l["args"]["turn"] == t.as_str()
        && l["result"]["outcome"] == "crashed"));
    assert_eq!(turns(&w.store)[0]["outcome"], "crashed");
    // Its writes stay for the operator to decide; --retry sets them aside.
    assert_eq!(fs::read(w.path("a.txt")).unwrap(), b"one\ncrash\n");
    let st = ok_json(["status", w.store()]);
    assert_eq!(st[0]["turn"]["outcome"], "crashed", "{st}");
    let (o, r) = turn_json(&w, &["--retry"], &["true"]);
    assert!(o.status.success(), "{o:?}");
    assert!(r["set_aside"].is_string());
    assert_eq!(w.cat(r["checkpoint"].as_str().unwrap(), "a.txt"), b"one\n");
}

#[test]
fn another_turn_or_checkpoint_during_a_turn_is_refused_naming_it() {
    let w = Workspace::new(|room| write(&room.join("a.txt"), b"one\n"));
    if !turns_can_run(&w) {
        return;
    }
    let ready = w.tmp.path().join("ready");
    let go = w.tmp.path().join("go");
    let script = format!(
        "echo two >> {}; touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        room_file(&w, "a.txt"),
        ready.display(),
        go.display()
    );
    let runner = Command::new(bin())
        .args([
            "turn",
            "--as-root",
            w.room(),
            "--json",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut runner = KillOnDrop(runner);
    eventually("the turn's command starts", || ready.exists());
    let running = turns(&w.store);
    assert_eq!(running[0]["outcome"], "running");
    let t = running[0]["turn"].as_str().unwrap().to_string();
    refused(1, ["checkpoint", w.room()], &[&t, "is running"]);
    refused(
        1,
        ["turn", "--as-root", w.room(), "--", "true"],
        &[&t, "is running"],
    );
    refused(
        1,
        ["exec", "--as-root", w.room(), "--", "true"],
        &[&t, "is running"],
    );
    refused(
        1,
        ["switch", w.room(), "--to", "main", "--discard"],
        &[&t, "is running"],
    );
    let st = ok_json(["status", w.store()]);
    assert_eq!(st[0]["turn"]["state"], "running", "{st}");
    // Let it finish: one checkpoint with the write.
    fs::write(&go, b"").unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(runner.0.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(wait_for(Duration::from_secs(60), || matches!(
        runner.0.try_wait(),
        Ok(Some(_))
    )));
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["outcome"], "ok", "{out}");
    assert_eq!(
        w.cat(r["checkpoint"].as_str().unwrap(), "a.txt"),
        b"one\ntwo\n"
    );
    // The refused commands left nothing behind: the next turn runs.
    assert!(turn(&w, &[], &["true"]).status.success());
}

#[test]
fn a_turn_mounts_the_branch_when_given_the_store() {
    let w = Workspace::new(|room| write(&room.join("a.txt"), b"one\n"));
    if !turns_can_run(&w) {
        return;
    }
    ok(["umount", w.room()]);
    let script = format!("echo m >> {}", room_file(&w, "a.txt"));
    let o = run([
        "turn",
        "--as-root",
        w.store(),
        "--branch",
        "main",
        "--json",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(o.status.success(), "{o:?}");
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["mounted"], true);
    assert!(mounted(&w.room));
    assert_eq!(
        w.cat(r["checkpoint"].as_str().unwrap(), "a.txt"),
        b"one\nm\n"
    );
    // Bad input: one line, exit 2, nothing run.
    refused(
        2,
        [
            "turn",
            "--as-root",
            w.store(),
            "--branch",
            "main",
            "--meta",
            "bad key=1",
            "--",
            "true",
        ],
        &["meta key"],
    );
    refused(
        2,
        [
            "turn",
            "--as-root",
            w.store(),
            "--branch",
            "main",
            "--meta",
            "novalue",
            "--",
            "true",
        ],
        &["KEY=VALUE"],
    );
}
