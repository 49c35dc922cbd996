//! A turn that does not complete records nothing: HTTP 500 from the model, a stream cut
//! before completion, a timeout, the agent killed, the runner killed (then `recover`). Each
//! time the branch head stays, `status` names the failed turn, and `--retry` then succeeds.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::agent::{show, Agent, AgentRoom};
use crate::support::*;

fn script() -> Value {
    json!({"turns": [
        {"prompt": "fail with 500", "steps": [{"shell": "echo a > a.txt"}], "reply": "a ok",
         "fail": "http500", "fail_times": 1},
        {"prompt": "cut the stream", "reply": "b ok", "fail": "cut", "fail_times": 1},
        {"prompt": "hang for a timeout", "reply": "c ok", "fail": "hang", "fail_times": 1},
        {"prompt": "hang until the agent is killed", "reply": "d ok", "fail": "hang",
         "fail_times": 1},
        {"prompt": "hang until the runner is killed", "steps": [{"shell": "echo e > e.txt"}],
         "reply": "e ok", "fail": "hang", "fail_times": 1}
    ]})
}

/// The turn fails, recording nothing; `status` names it; `--retry` then records it.
fn fails_then_retries(r: &AgentRoom, prompt: &str, extra: &[&str], why: &str) {
    let before = head(&r.store, "main").unwrap();
    let (o, rep) = r.turn(prompt, extra);
    assert!(
        !o.status.success(),
        "{}",
        show(&["agent", "turn", prompt], &o)
    );
    assert_ne!(rep["outcome"], "ok");
    validate("agent-turn", &rep, "agent turn --json (failed)");
    assert!(rep["checkpoint"].is_null());
    let err = rep["error"].as_str().unwrap_or("");
    assert!(err.contains(why), "{prompt}: {err}");
    assert_eq!(
        head(&r.store, "main").unwrap(),
        before,
        "{prompt}: nothing recorded"
    );
    retry(r, prompt, &before);
}

fn retry(r: &AgentRoom, prompt: &str, head_before: &str) {
    let rep = r.turn_ok(prompt, &["--retry"]);
    assert_eq!(rep["parent"], head_before);
    assert_eq!(
        head(&r.store, "main").unwrap(),
        rep["checkpoint"].as_str().unwrap()
    );
}

/// The workspace cgroup of the running turn (from its audit start line).
fn turn_cgroup(r: &AgentRoom) -> PathBuf {
    let l = audit(&r.store)
        .into_iter()
        .rev()
        .find(|l| l["op"] == "turn-start")
        .expect("a turn started");
    PathBuf::from(l["args"]["cgroup"].as_str().unwrap())
}

/// Starts `agent turn PROMPT` in the background and waits until the model server holds its
/// request.
fn start_hanging(r: &AgentRoom, prompt: &str) -> KillOnDrop {
    let mut a: Vec<String> = vec!["agent".into(), "turn".into(), s(&r.store).into()];
    a.extend(["--message".into(), prompt.into(), "--json".into()]);
    if r.agent == Agent::Codex {
        a.push("--agent-arg=-c".into());
        a.push(format!(
            "--agent-arg=model_providers.ckpt.base_url=\"{}/v1\"",
            r.server.base_url()
        ));
    }
    let child = r
        .cmd(&a)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let child = KillOnDrop(child);
    assert!(
        wait_for(Duration::from_secs(60), || r
            .server
            .turn_requests()
            .iter()
            .any(|q| q["prompt"] == prompt)),
        "the model server never saw {prompt:?}"
    );
    child
}

fn failures(agent: Agent) {
    let Some(r) = AgentRoom::new(agent, &script()) else {
        return;
    };
    fails_then_retries(&r, "fail with 500", &[], "");
    fails_then_retries(&r, "cut the stream", &[], "");
    fails_then_retries(&r, "hang for a timeout", &["--timeout", "3s"], "timed out");

    // The agent killed mid-turn.
    let head0 = head(&r.store, "main").unwrap();
    let mut runner = start_hanging(&r, "hang until the agent is killed");
    let cg = CgroupKiller(turn_cgroup(&r));
    assert!(
        cg.kill_all() > 0,
        "the agent runs in the workspace's cgroup"
    );
    let status = runner.0.wait().unwrap();
    assert!(!status.success());
    assert_eq!(head(&r.store, "main").unwrap(), head0);
    let st = ok_json(["status", s(&r.store)]);
    assert!(st.to_string().contains("\"state\":\"failed\""), "{st}");
    retry(&r, "hang until the agent is killed", &head0);

    // The runner killed mid-turn: its marker stays, recover records the crash once the
    // agent is gone, and the lent login a killed runner leaves is taken back by the retry.
    let head0 = head(&r.store, "main").unwrap();
    let mut runner = start_hanging(&r, "hang until the runner is killed");
    let cg = CgroupKiller(turn_cgroup(&r));
    runner.0.kill().unwrap();
    runner.0.wait().unwrap();
    let login = r.home.join(match agent {
        Agent::Codex => "auth.json",
        Agent::Claude => ".credentials.json",
    });
    assert!(login.exists(), "the killed runner left the lent login");
    let o = run(["checkpoint", s(&r.room)]);
    assert!(
        !o.status.success(),
        "the store stays claimed by the unfinished turn"
    );
    cg.kill_all();
    eventually("the agent's processes are gone", || cg.empty());
    ok(["recover", s(&r.store)]);
    assert_eq!(turns(&r.store)[0]["outcome"], "crashed");
    assert_eq!(head(&r.store, "main").unwrap(), head0);
    retry(&r, "hang until the runner is killed", &head0);
    assert!(!login.exists(), "the login is taken back after the turn");
    let rec = record_of(&r.store, "main");
    assert!(rec.to_string().contains("e ok"));
}

#[test]
fn codex_turns_that_fail_record_nothing() {
    failures(Agent::Codex);
}

#[test]
fn claude_turns_that_fail_record_nothing() {
    failures(Agent::Claude);
}
