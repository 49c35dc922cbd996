//! A room pushed to Garage and cloned into a second store continues the same native session
//! at the same paths: the next turn resumes the session the branch binds, with its whole
//! history (what "resume on another machine" is: `clone` + `agent turn`).

use serde_json::json;

use crate::support::agent::{prompts_in, Agent, AgentRoom};
use crate::support::*;

fn continue_from_clone(agent: Agent, g: &Garage) {
    let script = json!({"turns": [
        {"prompt": "before the push", "steps": [{"shell": "echo here > here.txt"}],
         "reply": "written here"},
        {"prompt": "after the clone", "steps": [{"shell": "cat here.txt > there.txt"}],
         "reply": "read it there"}
    ]});
    let Some(r) = AgentRoom::new(agent, &script) else {
        return;
    };
    let t1 = r.turn_ok("before the push", &[]);
    let session = t1["binding"]["session"].as_str().unwrap().to_string();
    let key = key_file(r.tmp.path(), "agent-clone");
    let prefix = format!("agent-{}", agent.name());
    add_remote(g, &r.store, &prefix, &key);
    rok(g, ["push", s(&r.store)]);
    // The lent login is in no object the remote holds (packs, indexes, refs, records).
    let keys = g.s3_list(&format!("{prefix}/"));
    assert!(!keys.is_empty());
    for k in &keys {
        let data = g.s3_get(k).unwrap_or_default();
        let secret = r.secret.as_bytes();
        assert!(
            !data.windows(secret.len()).any(|w| w == secret),
            "{k} holds the login"
        );
    }
    // The first machine lets go of the room; the second clones the store.
    ok(["umount", s(&r.room)]);
    let second = r.tmp.path().join("store2");
    clone_remote(g, &prefix, &second, &key);
    let mut a: Vec<String> = vec!["agent".into(), "turn".into(), s(&second).into()];
    a.extend([
        "--message".into(),
        "after the clone".into(),
        "--json".into(),
    ]);
    if agent == Agent::Codex {
        a.push("--agent-arg=-c".into());
        a.push(format!(
            "--agent-arg=model_providers.ckpt.base_url=\"{}/v1\"",
            r.server.base_url()
        ));
    }
    let mut c = r.cmd(&a);
    g.apply_env(&mut c);
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{}",
        crate::support::agent::show(&a, &o)
    );
    let rep: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        rep["binding"]["session"], session,
        "the same native session"
    );
    assert_eq!(rep["parent"], t1["checkpoint"]);
    let last = r.server.turn_requests().last().cloned().unwrap();
    assert_eq!(
        prompts_in(&last),
        vec!["before the push", "after the clone"]
    );
    assert_eq!(std::fs::read(r.room.join("there.txt")).unwrap(), b"here\n");
    let _ = std::process::Command::new(bin())
        .args(["umount", s(&r.room)])
        .output();
}

#[test]
fn a_cloned_room_continues_the_same_native_session() {
    let g = Garage::start();
    continue_from_clone(Agent::Codex, &g);
    continue_from_clone(Agent::Claude, &g);
}
