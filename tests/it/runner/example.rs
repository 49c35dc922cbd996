//! examples/runner.sh, the runner contract end to end on real mounts: turns of a fake agent
//! (JSONL transcript, file edits, SQLite), one failing and retried, a fork from an earlier turn
//! resumed there, and the refusal after a simulated upgrade of the agent.

use std::process::Command;

use crate::support::*;

/// Unmounts what the example mounted under its work dir, even after a failed assert.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new(bin())
            .args(["umount", s(&self.0.join("room"))])
            .output();
        unmount_all_under(&self.0);
    }
}

#[test]
fn the_example_runner_runs_its_story() {
    // Open to everyone: the agent runs as nobody, under the work dir.
    let tmp = open_tmp();
    let work = tmp.path().join("work");
    let _guard = Unmount(work.clone());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/runner.sh");
    let o = Command::new("sh")
        .arg(script)
        .arg(&work)
        .env("CKPTFS", bin())
        .output()
        .unwrap();
    let out = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    if !o.status.success() && out.contains("cgroup") && out.contains("creating") {
        eprintln!("SKIPPED: no cgroup can be made here: {out}");
        return;
    }
    assert!(o.status.success(), "{out}");
    assert!(out.contains("turn exited 1"), "{out}");
    assert!(out.contains("refusing to run a turn"), "{out}");
    assert!(out.contains("refused (exit 1)"), "{out}");
    assert!(out.contains("runtime change accepted"), "{out}");
    let store = work.join("store");
    // Six turns: five ok, the failed one recorded as failed, nothing of it on main.
    let turns = turns(&store);
    let outcomes: Vec<&str> = turns
        .iter()
        .map(|t| t["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        ["ok", "ok", "ok", "failed", "ok", "ok"],
        "{turns:?}"
    );
    assert!(turns
        .iter()
        .all(|t| (t["outcome"] == "ok") == t["checkpoint"].is_string()));
    // main: turns 1, 2 and the retried 3; alt: turn 1, then its own two.
    let main = log_ids(&store, &["--branch", "main"]);
    let alt = log_ids(&store, &["--branch", "alt"]);
    assert_eq!(main.len(), 4, "{main:?}");
    assert_eq!(alt.len(), 4, "{alt:?}");
    assert_eq!(main[2], alt[2], "alt forks from turn 1");
    let thread = record_of(&store, "turn-1")["meta"]["thread"]
        .as_str()
        .unwrap()
        .to_string();
    let transcript = |id: &str| {
        String::from_utf8(cat(&store, &format!("{id}:agent/sessions/{thread}.jsonl"))).unwrap()
    };
    assert_eq!(
        transcript(&main[0]).lines().count(),
        6,
        "three turns on main"
    );
    let on_alt = transcript(&alt[0]);
    assert_eq!(on_alt.lines().count(), 6, "{on_alt}");
    assert!(on_alt.contains("try another plan") && !on_alt.contains("implement step"));
    // The failed turn's label was never made; its writes went to displaced/.
    assert!(run(["show", s(&store), "never"]).status.code() == Some(1));
    let last = record_of(&store, "alt");
    assert_eq!(last["meta"]["reply"], "done: after the upgrade");
    assert_eq!(last["turn"]["accepted_runtime_change"], true);
    assert!(audit(&store)
        .iter()
        .any(|l| l["op"] == "accept-runtime-change"));
    recover_and_verify(&store, "after the example");
}
