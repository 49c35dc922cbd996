//! What `agent init` and `agent turn` refuse, each in one line naming what is at fault: an
//! agent version the adapter was not tested with (unless accepted, audited), a home inside
//! the workspace, a store not made by `agent init`, a fork of a checkpoint with no turn.

use std::fs;

use crate::support::agent::{agent_installed, Agent};
use crate::support::*;

#[test]
fn an_untested_agent_version_is_refused_unless_accepted_and_audited() {
    if !agent_installed(Agent::Codex) {
        return;
    }
    let t = open_tmp();
    // An agent CLI that says it is another version (root's, outside the roots, in a
    // directory only root writes, under ancestors only root writes: /var/lib, not /tmp or
    // wherever the repository was cloned).
    let Ok(bin_dir) = tempfile::Builder::new()
        .prefix("ckptfs-test-")
        .tempdir_in("/var/lib")
    else {
        eprintln!("SKIPPED: cannot make a directory in /var/lib (not root?)");
        return;
    };
    chmod(bin_dir.path(), 0o755);
    let fake = bin_dir.path().join("codex-next");
    fs::write(&fake, "#!/bin/sh\necho 'codex-cli 0.170.0'\n").unwrap();
    chmod(&fake, 0o755);
    let room = t.path().join("room");
    let home = t.path().join("home");
    let store = t.path().join("store");
    let base = [
        "agent",
        "init",
        s(&store),
        "--agent",
        "codex",
        "--workspace",
        s(&room),
        "--home",
        s(&home),
        "--as-root",
        "--agent-binary",
        s(&fake),
    ];
    let o = run(base);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("0.170.0") && err.contains("0.169.0"), "{err}");
    assert!(err.contains("--accept-agent-version"), "{err}");
    assert!(!store.exists(), "nothing made");
    let mut accepted = base.to_vec();
    accepted.push("--accept-agent-version");
    let r = ok_json(accepted);
    validate("agent-init", &r, "agent init --json");
    assert_eq!(r["version_accepted"], true);
    let a = audit(&store);
    let line = a
        .iter()
        .find(|l| l["op"] == "accept-agent-version")
        .expect("audited");
    assert_eq!(line["args"]["version"], "0.170.0");
    let rec = record_of(&store, "main");
    assert_eq!(rec["meta"]["agent.version"], "0.170.0");
    assert_eq!(rec["meta"]["agent.version_accepted"], true);
}

/// Unmounts whatever is left under a temp dir, even after a failed assert.
struct UnmountUnder(std::path::PathBuf);

impl Drop for UnmountUnder {
    fn drop(&mut self) {
        unmount_all_under(&self.0);
    }
}

#[test]
fn bad_agent_input_is_refused_in_one_line() {
    if !agent_installed(Agent::Codex) {
        return;
    }
    let t = open_tmp();
    let _unmount = UnmountUnder(t.path().to_path_buf());
    let room = t.path().join("room");
    let store = t.path().join("store");
    // A home inside the workspace.
    let inner = room.join("home");
    let o = run([
        "agent",
        "init",
        s(&store),
        "--agent",
        "codex",
        "--workspace",
        s(&room),
        "--home",
        s(&inner),
        "--as-root",
    ]);
    refused_for(&o, "must not contain each other");
    // Relative paths.
    let o = run([
        "agent",
        "init",
        s(&store),
        "--agent",
        "codex",
        "--workspace",
        "room",
        "--home",
        "/var/tmp/h",
        "--as-root",
    ]);
    refused_for(&o, "absolute");
    // An unknown agent.
    let o = run([
        "agent",
        "init",
        s(&store),
        "--agent",
        "cursor",
        "--workspace",
        s(&room),
        "--home",
        "/var/tmp/h",
        "--as-root",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("codex or claude"));
    // A store that `agent init` did not make.
    let plain = t.path().join("plain");
    fs::create_dir_all(t.path().join("ws")).unwrap();
    ok([
        "init",
        s(&plain),
        "--root",
        &format!("ws={}", s(&t.path().join("ws"))),
    ]);
    ok(["capture", s(&plain)]);
    let o = run(["agent", "turn", s(&plain), "--message", "hi"]);
    refused_for(&o, "binds no agent session");
    // A fork of the init checkpoint (no turn yet).
    ok([
        "agent",
        "init",
        s(&store),
        "--agent",
        "codex",
        "--workspace",
        s(&room),
        "--home",
        s(&t.path().join("home")),
        "--as-root",
    ]);
    // Without --agent-config, the home gets the policy every turn uses, in the agent's own
    // config file (so the agent run by hand there behaves the same).
    let cfg = fs::read_to_string(t.path().join("home/config.toml")).unwrap();
    assert!(cfg.contains("approval_policy = \"never\""), "{cfg}");
    assert!(
        cfg.contains("sandbox_mode = \"danger-full-access\""),
        "{cfg}"
    );
    let o = run(["agent", "fork", s(&store), "main", "other"]);
    refused_for(&o, "no completed turn");
    assert!(head(&store, "other").is_none(), "no branch made");
    // Root, recorded at init, must be asked for again on each turn.
    let o = run(["agent", "turn", s(&store), "--message", "hi"]);
    refused_for(&o, "--as-root");
    assert!(
        mounts_under(t.path()).is_empty(),
        "refused before mounting anything"
    );
    // A binding that names other roots than the store's (as a store from elsewhere could)
    // is refused before anything runs or is written there.
    let mut meta = record_of(&store, "main")["meta"].clone();
    let elsewhere = t.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    meta["agent.home"] = s(&elsewhere).into();
    let mf = t.path().join("forged.json");
    fs::write(&mf, meta.to_string()).unwrap();
    ok(["capture", s(&store), "--meta-file", s(&mf)]);
    let o = run(["agent", "turn", s(&store), "--message", "hi", "--as-root"]);
    refused_for(&o, "not the store's");
    assert_eq!(
        fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing written there"
    );
}

/// `o` failed cleanly, in one line of stderr that holds `why`.
fn refused_for(o: &std::process::Output, why: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && o.status.code() != Some(101), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(why), "{err}");
}
