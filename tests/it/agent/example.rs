//! examples/agent-room.sh end to end, with each agent: turns bound to one native session, a
//! native fork of turn 1 and a turn there, back on main, `agent log`, `agent transcript`, and
//! the login kept out.

use std::process::Command;

use crate::support::agent::{agent_installed, Agent};
use crate::support::*;

fn run_example(agent: Agent) {
    if !agent_installed(agent) {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("ckptfs-example-")
        .tempdir_in("/var/tmp")
        .unwrap();
    chmod(tmp.path(), 0o755);
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/agent-room.sh");
    let o = Command::new("sh")
        .arg(script)
        .arg(&work)
        .env("CKPTFS", bin())
        .env("AGENT", agent.name())
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    let _ = Command::new(bin())
        .args(["umount", s(&work.join("room"))])
        .output();
    unmount_all_under(tmp.path());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        out.matches(": ok, checkpoint").count(),
        4,
        "3 turns and a fork: {out}"
    );
    assert!(out.contains("reply: Wrote README.md."), "{out}");
    assert!(out.contains("not found: ok"), "{out}");
    // agent log: four lines, the fork among them.
    let log: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.contains("every turn and fork"))
        .skip(1)
        .take_while(|l| !l.starts_with("=="))
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(log.len(), 4, "{out}");
    assert_eq!(log.iter().filter(|l| l.contains(" fork ")).count(), 1);
}

#[test]
fn the_codex_example_runs_its_story() {
    run_example(Agent::Codex);
}

#[test]
fn the_claude_example_runs_its_story() {
    run_example(Agent::Claude);
}
