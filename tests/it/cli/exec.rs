//! `ckptfs exec`'s exit status is a shell's: the command's own status (a death by signal
//! stays one), 127 for a command not found, 126 for one found but not executable.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::process::Output;

use crate::support::*;

fn exec(w: &Workspace, command: &[&str]) -> Output {
    let mut args = vec!["exec", "--as-root", w.room(), "--"];
    args.extend_from_slice(command);
    run(&args)
}

#[test]
fn exec_exits_as_a_shell_would() {
    let w = Workspace::new(|room| {
        fs::write(room.join("data.txt"), b"not a program\n").unwrap();
        fs::write(
            room.join("orphan.sh"),
            b"#!/nonexistent/interpreter\necho hi\n",
        )
        .unwrap();
        fs::set_permissions(room.join("orphan.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    });
    let first = exec(&w, &["true"]);
    if !first.status.success() {
        eprintln!(
            "SKIPPED: `ckptfs exec` cannot run here (no cgroup?): {}",
            String::from_utf8_lossy(&first.stderr)
        );
        return;
    }
    let code = |command: &[&str]| {
        let o = exec(&w, command);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // The command's own status.
    assert_eq!(code(&["sh", "-c", "exit 3"]).0, Some(3));
    assert_eq!(code(&["false"]).0, Some(1));
    // Not found: 127, on PATH or by path, with one line saying so.
    for missing in ["/nonexistent", "no-such-command-ckptfs"] {
        let (c, err) = code(&[missing]);
        assert_eq!(c, Some(127), "{missing}: {err}");
        assert!(
            err.contains("command not found") && err.contains(missing) && err.lines().count() == 1,
            "{err}"
        );
    }
    // Found but not executable: 126 (no x bit, a directory, a missing interpreter).
    let data = w.path("data.txt");
    let orphan = w.path("orphan.sh");
    for (what, path) in [
        ("no x bit", data.to_str().unwrap()),
        ("a directory", w.room()),
        ("bad interpreter", orphan.to_str().unwrap()),
    ] {
        let (c, err) = code(&[path]);
        assert_eq!(c, Some(126), "{what}: {err}");
        assert!(err.contains("cannot execute"), "{what}: {err}");
    }
    // ckptfs becomes the command: a death by signal is the command's, which a shell reports
    // as 128+N.
    let o = exec(&w, &["sh", "-c", "kill -TERM $$"]);
    assert_eq!(o.status.signal(), Some(libc::SIGTERM), "{o:?}");
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{}' exec --as-root '{}' -- sh -c 'kill -KILL $$'; echo $?",
            bin(),
            w.room()
        ))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "137");
    // Errors of ckptfs itself keep their codes.
    let elsewhere = tempdir();
    assert_eq!(
        run(["exec", s(elsewhere.path()), "--", "true"])
            .status
            .code(),
        Some(1)
    );
}
