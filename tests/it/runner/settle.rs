//! Where a turn runs and when it ends: COMMAND runs in the branch's workspace as it is after
//! the turn's own mount or `--retry` (not in the overlay a switch took away), the processes
//! it leaves behind are waited for before its checkpoint, and a COMMAND that cannot run exits
//! 127 or 126 as a shell's does.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::support::*;

/// `ckptfs turn --as-root ROOM EXTRA... --json -- COMMAND...` run from `cwd`.
fn turn_from(
    w: &Workspace,
    cwd: &std::path::Path,
    extra: &[&str],
    command: &[&str],
) -> (std::process::Output, serde_json::Value) {
    let o = Command::new(bin())
        .current_dir(cwd)
        .args(["turn", "--as-root", w.room(), "--json"])
        .args(extra)
        .arg("--")
        .args(command)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("no report ({e}): {}", String::from_utf8_lossy(&o.stderr)));
    (o, v)
}

#[test]
fn a_retry_started_inside_the_room_runs_in_the_workspace_not_the_tree_set_aside() {
    let w = Workspace::new(|room| write(&room.join("sub/notes.md"), b"start\n"));
    if !turns_can_run(&w) {
        return;
    }
    let sub = w.path("sub");
    // A failed turn leaves a write behind.
    let (o, r) = turn_from(&w, &sub, &[], &["sh", "-c", "echo half > half.txt; exit 3"]);
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    assert_eq!(r["outcome"], "failed");
    // --retry from the same shell directory: the retry's switch takes the overlay the
    // caller stands in away (read-only); COMMAND must still write into the workspace.
    let (o, r) = turn_from(
        &w,
        &sub,
        &["--retry"],
        &["sh", "-c", "pwd > where.txt && echo done > made.txt"],
    );
    assert!(o.status.success(), "{o:?}");
    assert_eq!(r["outcome"], "ok");
    let id = r["checkpoint"].as_str().unwrap();
    assert_eq!(w.cat(id, "sub/made.txt"), b"done\n");
    assert_eq!(
        String::from_utf8(w.cat(id, "sub/where.txt"))
            .unwrap()
            .trim(),
        sub.to_str().unwrap()
    );
    assert!(
        !w.path("sub/half.txt").exists(),
        "the failed turn's write was set aside"
    );
}

#[test]
fn what_a_turn_leaves_running_is_waited_for_before_its_checkpoint_and_the_next_turn() {
    let w = Workspace::new(|room| write(&room.join("notes.md"), b"start\n"));
    if !turns_can_run(&w) {
        return;
    }
    // COMMAND exits at once; a helper it started writes a second later (as an agent's git
    // or shell-snapshot helpers do).
    let late = w.path("late.txt");
    let script = format!(
        "(sleep 1; echo late > {}) >/dev/null 2>&1 </dev/null & exit 0",
        late.display()
    );
    let (o, r) = turn_json(&w, &[], &["sh", "-c", &script]);
    assert!(o.status.success(), "{o:?}");
    let id = r["checkpoint"].as_str().unwrap();
    assert_eq!(
        w.cat(id, "late.txt"),
        b"late\n",
        "the checkpoint waited for the helper"
    );
    assert!(r.get("left_running").is_none(), "{r}");
    // A helper of the next turn's predecessor still running when it starts: it waits.
    let script = "(sleep 1) >/dev/null 2>&1 </dev/null & exit 0";
    let o = turn(&w, &["--no-fold"], &["sh", "-c", script]);
    assert!(o.status.success(), "{o:?}");
    let o = turn(&w, &[], &["true"]);
    assert!(o.status.success(), "the next turn waited: {o:?}");
}

#[test]
fn a_command_that_cannot_run_exits_127_or_126_as_a_shell_does() {
    let w = Workspace::new(|room| write(&room.join("notes.md"), b"start\n"));
    if !turns_can_run(&w) {
        return;
    }
    let (o, r) = turn_json(&w, &[], &["no-such-agent-command"]);
    assert_eq!(o.status.code(), Some(127), "{o:?}");
    assert_eq!(r["outcome"], "cannot-run");
    let script = w.tmp.path().join("agent.sh");
    fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).unwrap();
    let (o, r) = turn_json(&w, &[], &[script.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(126), "{o:?}");
    assert_eq!(r["outcome"], "cannot-run");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cannot execute"),
        "{o:?}"
    );
}

/// `ckptfs turn ROOM --json -- COMMAND...` from `cwd`, as the room's owner (no `--as-root`).
fn turn_as_owner(
    w: &Workspace,
    cwd: &std::path::Path,
    extra: &[&str],
    command: &[&str],
) -> std::process::Output {
    Command::new(bin())
        .current_dir(cwd)
        .args(["turn", w.room()])
        .args(extra)
        .arg("--")
        .args(command)
        .output()
        .unwrap()
}

#[test]
fn the_callers_place_is_entered_with_the_agents_rights_not_roots() {
    // Root's secret, readable by anyone who reaches `inner`, but `vault` (0700) keeps
    // everyone else from reaching it.
    let w = Workspace::for_nobody(&[], |room| write(&room.join("notes.md"), b"start\n"));
    let vault = w.tmp.path().join("vault");
    write(&vault.join("inner/secret.txt"), b"root's secret\n");
    chmod(&vault.join("inner"), 0o755);
    chmod(&vault, 0o700);
    let inner = vault.join("inner");
    // The agent records `sub` as a symlink to it...
    let sub = w.path("sub");
    let link = format!("ln -s {} {}", inner.display(), sub.display());
    let o = turn_as_owner(&w, w.tmp.path(), &[], &["sh", "-c", &link]);
    if !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("cgroup") {
        eprintln!("SKIPPED: no cgroup here");
        return;
    }
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // ... then a failed turn makes `sub` a real directory, and the operator's shell goes in.
    let remake = format!("rm {0} && mkdir {0}; exit 1", sub.display());
    let o = turn_as_owner(&w, w.tmp.path(), &[], &["sh", "-c", &remake]);
    assert_eq!(o.status.code(), Some(1));
    assert!(sub.is_dir() && !sub.is_symlink());
    // The retry from there: the place is the recorded symlink again. Entered as root it led
    // the agent into `inner`, past `vault`; entered as the agent, it cannot.
    let o = turn_as_owner(&w, &sub, &["--retry"], &["cat", "secret.txt"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !out.contains("root's secret"),
        "the agent read through root's chdir: {out}"
    );
    assert!(
        !o.status.success(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
