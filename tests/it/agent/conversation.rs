//! Three turns that run tools, each one checkpoint bound to the native session; a native fork
//! at turn 1 that sends no model request and continues from exactly turn 1; the original
//! branch still carries its whole history; `agent log` and `agent transcript`.

use serde_json::{json, Value};

use crate::support::agent::{prompts_in, Agent, AgentRoom};
use crate::support::*;

fn script() -> Value {
    json!({"turns": [
        {"prompt": "turn one: make hello", "steps": [{"shell": "echo hi > hello.txt"},
            {"patch": {"path": "notes.md", "text": "one\ntwo"}}], "reply": "made hello and notes"},
        {"prompt": "turn two: list", "steps": [{"shell": "ls > listing.txt"}],
            "reply": "listed the room"},
        {"prompt": "turn three: count", "steps": [{"shell": "wc -l notes.md > count.txt"}],
            "reply": "counted the notes"},
        {"prompt": "fork turn: branch off", "steps": [{"shell": "echo forked > fork.txt"}],
            "reply": "on the fork"},
        {"prompt": "turn four: again", "reply": "still here"}
    ]})
}

fn head_of(r: &AgentRoom, branch: &str) -> String {
    head(&r.store, branch).unwrap()
}

fn conversation(agent: Agent) {
    let Some(r) = AgentRoom::new(agent, &script()) else {
        return;
    };
    let store = s(&r.store).to_string();
    if agent == Agent::Claude {
        // Its default config: the policy every turn uses, and the model.
        let cfg: Value =
            serde_json::from_slice(&std::fs::read(r.home.join("settings.json")).unwrap()).unwrap();
        assert_eq!(cfg["permissions"]["defaultMode"], "bypassPermissions");
        assert_eq!(cfg["model"], "test-model");
    }
    let start = head_of(&r, "main");
    let t1 = r.turn_ok("turn one: make hello", &["--label", "t1"]);
    let t2 = r.turn_ok("turn two: list", &[]);
    let t3 = r.turn_ok("turn three: count", &[]);
    validate("agent-turn", &t1, "agent turn --json");
    // Each turn is exactly one checkpoint, on top of the one before.
    let ids: Vec<String> = [&t1, &t2, &t3]
        .iter()
        .map(|t| t["checkpoint"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        log_ids(&r.store, &["--branch", "main"]),
        vec![
            ids[2].clone(),
            ids[1].clone(),
            ids[0].clone(),
            start.clone()
        ]
    );
    // Bound: one native session, a distinct completed turn each, the final reply and its
    // hash, the session file growing, the model and policy, the agent as nobody.
    let b: Vec<&Value> = [&t1, &t2, &t3].iter().map(|t| &t["binding"]).collect();
    let session = b[0]["session"].as_str().unwrap();
    assert!(b.iter().all(|x| x["session"] == session), "{b:?}");
    assert_ne!(b[0]["turn"], b[1]["turn"]);
    assert_eq!(b[0]["reply"], "made hello and notes");
    assert_eq!(b[2]["reply"], "counted the notes");
    assert_eq!(b[0]["agent"], agent.name());
    assert_eq!(b[0]["model"], "test-model");
    assert!(b[0]["policy"].is_object());
    assert!(b[1]["session_file_len"].as_u64() > b[0]["session_file_len"].as_u64());
    assert_eq!(t1["uid"], NOBODY);
    let sha = sha256_hex(b"made hello and notes");
    assert_eq!(b[0]["reply_sha256"], sha);
    // The checkpoint record carries the same keys, flat (`log --meta` finds a session).
    let rec = record_of(&r.store, "t1");
    assert_eq!(rec["meta"]["agent.session"], session);
    assert_eq!(
        log_ids(
            &r.store,
            &[
                "--meta",
                &format!("agent.turn={}", b[1]["turn"].as_str().unwrap())
            ]
        ),
        vec![ids[1].clone()]
    );
    // The tools' work is in the checkpoints, turn by turn.
    assert_eq!(
        cat(&r.store, &format!("{}:workspace/hello.txt", ids[0])),
        b"hi\n"
    );
    // (Codex's apply_patch ends the file with a newline, Claude Code's Write does not.)
    let notes = cat(&r.store, &format!("{}:workspace/notes.md", ids[0]));
    assert_eq!(String::from_utf8_lossy(&notes).trim_end(), "one\ntwo");
    assert!(cat(&r.store, &format!("{}:workspace/listing.txt", ids[1])).starts_with(b"hello.txt"));
    // The model server saw each prompt once (a tool result is not a new prompt).
    let sent = r.server.prompts_sent();
    for p in [
        "turn one: make hello",
        "turn two: list",
        "turn three: count",
    ] {
        assert_eq!(sent.get(p), Some(&1), "{sent:?}");
    }

    // A native fork at turn 1: no model request, the workspace shows turn 1's files only.
    let before = r.server.requests().len();
    let f = r.fork("t1", "alt");
    assert_eq!(
        r.server.requests().len(),
        before,
        "a fork sends no model request"
    );
    assert_eq!(f["outcome"], "ok");
    validate("agent-fork", &f, "agent fork --json");
    let fb = &f["binding"];
    assert_ne!(fb["session"], session, "the fork is a session of its own");
    assert_eq!(fb["forked_from"]["session"], session);
    assert_eq!(fb["forked_from"]["checkpoint"], ids[0]);
    assert_eq!(fb["reply"], "made hello and notes");
    assert!(r.room.join("hello.txt").exists());
    assert!(
        !r.room.join("listing.txt").exists(),
        "turn 2's file is not on the fork"
    );
    // The fork's next turn sends exactly turn 1's history plus the new prompt.
    let tf = r.turn_ok("fork turn: branch off", &["--branch", "alt"]);
    assert_eq!(tf["binding"]["session"], fb["session"]);
    let last = r.server.turn_requests().last().cloned().unwrap();
    assert_eq!(
        prompts_in(&last),
        vec!["turn one: make hello", "fork turn: branch off"],
        "{last}"
    );
    // The parent is untouched; back on main, the next turn carries the whole history.
    assert_eq!(head_of(&r, "main"), ids[2]);
    ok(["switch", s(&r.room), "--to", "main"]);
    assert!(!r.room.join("fork.txt").exists());
    let t4 = r.turn_ok("turn four: again", &[]);
    assert_eq!(t4["binding"]["session"], session);
    let last = r.server.turn_requests().last().cloned().unwrap();
    assert_eq!(
        prompts_in(&last),
        vec![
            "turn one: make hello",
            "turn two: list",
            "turn three: count",
            "turn four: again"
        ]
    );

    // agent log: every turn and the fork, newest first, with the native ids.
    let log: Value = serde_json::from_str(&r.ok(&["agent", "log", &store, "--json"])).unwrap();
    validate("agent-log", &log, "agent log --json");
    let rows = log.as_array().unwrap();
    assert_eq!(rows.len(), 6, "{log}");
    assert_eq!(rows[0]["checkpoint"], t4["checkpoint"]);
    assert_eq!(rows.iter().filter(|x| x["kind"] == "fork").count(), 1);
    assert!(rows.iter().all(|x| x["outcome"] == "ok"));
    let text = r.ok(&["agent", "log", &store, "--branch", "alt"]);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.contains("on the fork"), "{text}");
    // agent transcript: the native history as the checkpoint holds it.
    let tr = r.ok(&["agent", "transcript", &store, &ids[1]]);
    assert!(tr.lines().all(|l| serde_json::from_str::<Value>(l).is_ok()));
    assert!(tr.contains("turn two: list") && tr.contains("listed the room"));
    assert!(
        !tr.contains("turn three: count"),
        "only up to that checkpoint"
    );
    // ... and a fork's includes its ancestors' turns.
    let tr = r.ok(&[
        "agent",
        "transcript",
        &store,
        tf["checkpoint"].as_str().unwrap(),
    ]);
    assert!(tr.contains("turn one: make hello") && tr.contains("fork turn: branch off"));
    assert!(!tr.contains("turn two: list"));
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

#[test]
fn codex_turns_forks_and_resumes_natively() {
    conversation(Agent::Codex);
}

#[test]
fn claude_turns_forks_and_resumes_natively() {
    conversation(Agent::Claude);
}
