//! What an agent's room can do to the operator's terminal and identity: `turn` and `exec` run
//! the agent as the workspace's owner (never root unless asked), and the names it writes are
//! quoted in every human listing (never raw escape sequences or newlines), while `--json`
//! carries them exactly.

mod support;

use std::fs;

use support::*;

/// `id -u` of COMMAND run by `turn` or `exec` with `extra` arguments, or the failure.
fn uid_under(verb: &str, w: &Workspace, extra: &[&str]) -> std::process::Output {
    let mut args = vec![verb, w.room()];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "id", "-u"]);
    run(&args)
}

fn uid_of(o: &std::process::Output) -> String {
    assert!(o.status.success(), "{}", describe_output("id -u", o));
    // `turn` prints its report on stderr: stdout is COMMAND's.
    stdout(o).trim().to_string()
}

#[test]
fn turn_and_exec_run_as_the_workspace_owner() {
    let w = Workspace::for_nobody(&[], |room| fs::write(room.join("f"), b"x").unwrap());
    for verb in ["exec", "turn"] {
        let o = uid_under(verb, &w, &[]);
        assert_eq!(uid_of(&o), NOBODY.to_string(), "{verb} as the owner");
        let o = uid_under(verb, &w, &["--user", "nobody"]);
        assert_eq!(uid_of(&o), NOBODY.to_string(), "{verb} --user nobody");
        let o = uid_under(verb, &w, &["--as-root"]);
        assert_eq!(uid_of(&o), "0", "{verb} --as-root");
    }
    // HOME, USER and LOGNAME are the agent's, as sudo sets them.
    let o = run([
        "exec",
        w.room(),
        "--",
        "sh",
        "-c",
        "echo $USER $LOGNAME $HOME; id -G",
    ]);
    let out = stdout(&o);
    assert!(out.starts_with("nobody nobody "), "{out}");
    assert!(
        !out.split_whitespace().any(|g| g == "0"),
        "root's group kept: {out}"
    );
    // The report says who ran.
    let r = ok_json(["turn", w.room(), "--json", "--", "true"]);
    assert_eq!(r["uid"], NOBODY, "{r}");
}

#[test]
fn a_root_owned_room_is_refused_without_a_flag() {
    let w = Workspace::new(|room| fs::write(room.join("f"), b"x").unwrap());
    for verb in ["exec", "turn"] {
        let o = uid_under(verb, &w, &[]);
        let err = assert_error_output(&[verb.to_string()], &o, 2);
        assert!(
            err.contains("--user") && err.contains("--as-root") && err.lines().count() == 1,
            "{err}"
        );
        assert!(stdout(&o).is_empty(), "COMMAND ran: {}", stdout(&o));
        let o = uid_under(verb, &w, &["--user", "nobody"]);
        assert_eq!(uid_of(&o), NOBODY.to_string(), "{verb} --user nobody");
    }
}
