//! The lent login reaches the model server and nothing else: after turns, its bytes are in
//! no object, record or audit line of the store (kept uncompressed here so raw bytes are
//! compared), not in an exported archive, not in the home, and in no log line of ckptfs (run
//! at debug level).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde_json::json;

use crate::support::agent::{Agent, AgentRoom};
use crate::support::*;

fn holds(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Every file under `dir` whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(p);
            } else if t.is_file() && holds(&fs::read(&p).unwrap_or_default(), needle) {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

fn secret_stays_out(agent: Agent) {
    let script = json!({"turns": [
        {"prompt": "first", "steps": [{"shell": "echo one > one.txt"}], "reply": "one done"},
        {"prompt": "second", "reply": "two done"}
    ]});
    let Some(r) = AgentRoom::new(agent, &script) else {
        return;
    };
    let secret = r.secret.as_bytes();
    // Root's file, which the agent points the login's name at between turns: lending the
    // login must not write through it (nor taking it back remove it).
    let target = r.tmp.path().join("roots-file");
    std::fs::write(&target, "untouched\n").unwrap();
    let login_name = match agent {
        Agent::Codex => "auth.json",
        Agent::Claude => ".credentials.json",
    };
    let mut logs = Vec::new();
    for p in ["first", "second"] {
        if p == "second" {
            let link = r.home.join(login_name);
            nobody_ok(&format!("ln -s {} {}", target.display(), link.display()));
        }
        let (o, rep) = r.turn(p, &[]);
        assert_eq!(
            rep["outcome"],
            "ok",
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        logs.extend_from_slice(&o.stdout);
        logs.extend_from_slice(&o.stderr);
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched\n");
    assert_eq!(std::fs::symlink_metadata(&target).unwrap().uid(), 0);
    assert!(
        std::fs::symlink_metadata(r.home.join(login_name)).is_err(),
        "taken back"
    );
    // The login was lent: the model server got it with every turn's requests.
    let reqs = r.server.turn_requests();
    assert!(!reqs.is_empty());
    assert!(
        reqs.iter()
            .all(|q| q["auth"].as_str().unwrap_or("").contains(&r.secret)),
        "the agent authenticated with the lent login"
    );
    // ... and taken back: not in the home, not in the store, not in ckptfs's output. The
    // upper layers the turns' folds took out are removed in the background: wait for that.
    wait_folded_removed(&r.store);
    assert!(files_holding(&r.home, secret).is_empty());
    assert!(
        files_holding(&r.store, secret).is_empty(),
        "{:?}",
        files_holding(&r.store, secret)
    );
    assert!(!holds(&logs, secret), "a log line holds the login");
    let rec = record_of(&r.store, "main");
    assert!(!rec.to_string().contains(&r.secret));
    // The path of the login file is recorded, never its bytes; an archive holds neither.
    assert_eq!(rec["meta"]["agent.auth_source"], s(&r.auth));
    let out = r.tmp.path().join("room.ckpt");
    r.ok(&["export", s(&r.store), "--all", "--out", s(&out)]);
    let tar = zstd::decode_all(fs::File::open(&out).unwrap()).unwrap();
    assert!(holds(&tar, b"one done"), "the archive holds the turns");
    assert!(!holds(&tar, secret), "the archive holds the login");
}

#[test]
fn codex_login_never_reaches_the_store() {
    secret_stays_out(Agent::Codex);
}

#[test]
fn claude_login_never_reaches_the_store() {
    secret_stays_out(Agent::Claude);
}
