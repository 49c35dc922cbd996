//! View daemons end with their mounts, whatever an agent put in the tree (issue 28, point 5).
//! A directory of 200k entries, folded into the workspace's base, is listed by `nobody`
//! through the workspace in bounded time (each READDIRPLUS used to decode the whole
//! directory again: quadratic, minutes), and once the workspace is unmounted the lower views'
//! daemons exit and leave no FUSE connection behind (the warm-up of that directory kept a
//! detached view alive). SIGTERM to a view daemon whose mount was detached while held ends
//! it too (it used to do nothing). Real FUSE and overlay mounts; the agent is `nobody`.

use crate::support::*;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Entries the agent makes in one directory.
const ENTRIES: usize = 200_000;
/// Hang detectors, not speed assertions (the figures are in docs/benchmarks.md).
const LIST_BOUND: Duration = Duration::from_secs(120);
const EXIT_BOUND: Duration = Duration::from_secs(20);
/// The kernel's list of FUSE connections (fusectl), by device minor.
const FUSECTL: &str = "/sys/fs/fuse/connections";

/// Mounts fusectl where the kernel lists FUSE connections, if it is not.
fn ensure_fusectl() {
    let listed = fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains(&format!(" {FUSECTL} ")) && l.contains(" - fusectl "));
    if !listed {
        let o = Command::new("mount")
            .args(["-t", "fusectl", "fusectl", FUSECTL])
            .output()
            .expect("run mount");
        assert!(
            o.status.success(),
            "{}",
            describe_output("mount fusectl", &o)
        );
    }
}

/// The device minor (the fusectl connection name) of every FUSE mount of `store`.
fn connections_of(store: &Path) -> Vec<String> {
    let ours = format!("ckptfs:{}:", store.display());
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" - fuse.ckptfs ") && l.contains(&ours))
        .filter_map(|l| {
            l.split(' ')
                .nth(2)?
                .split_once(':')
                .map(|(_, m)| m.to_string())
        })
        .collect()
}

/// Pids of the running (not zombie) processes whose command line names `needle`.
fn processes_naming(needle: &str) -> Vec<u32> {
    live_processes(|args| {
        args.contains(&&b"browse"[..])
            && args
                .iter()
                .any(|a| String::from_utf8_lossy(a).contains(needle))
    })
}

/// Aborts the connections named (clean-up after a failed assert: no daemon left hanging).
fn abort_all(conns: &[String]) {
    for c in conns {
        let _ = fs::write(Path::new(FUSECTL).join(c).join("abort"), b"1");
    }
}

/// Runs `ls -f DIR` as nobody, killed after `limit`; the number of names and whether it
/// finished.
fn list_as_nobody(dir: &Path, limit: Duration) -> (usize, bool) {
    let mut child = nobody_command(&["ls", "-f", s(dir)])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run ls");
    let out = child.stdout.take().expect("stdout");
    let counter =
        std::thread::spawn(move || std::io::BufRead::lines(std::io::BufReader::new(out)).count());
    let t0 = Instant::now();
    let finished = loop {
        if child.try_wait().expect("wait ls").is_some() {
            break true;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (counter.join().unwrap_or(0), finished)
}

#[test]
fn a_folded_huge_directory_lists_and_its_daemons_exit_on_umount() {
    ensure_fusectl();
    let w = Workspace::for_nobody(&[], |room| write(&room.join("a"), b"a\n"));
    // The agent makes 200k entries in one directory (one Python loop: seconds).
    let made = format!(
        "import os\nos.mkdir('{big}')\nfor i in range({ENTRIES}):\n    \
         os.close(os.open('{big}/f%06d' % i, os.O_CREAT | os.O_WRONLY, 0o644))\n",
        big = w.path("big").display()
    );
    let o = as_nobody(&[PYTHON, "-c", &made]);
    assert!(
        o.status.success(),
        "{}",
        describe_output("make entries", &o)
    );
    let report = w.checkpoint_json("200k entries");
    assert_eq!(report["fold"]["folded"], true, "{report}");

    let conns = connections_of(&w.store);
    assert!(!conns.is_empty(), "no lower view mounted");
    // Listed through the workspace, now served by the lower view alone.
    let (names, finished) = list_as_nobody(&w.path("big"), LIST_BOUND);
    if !finished {
        abort_all(&conns);
    }
    assert!(
        finished,
        "ls -f of {ENTRIES} entries as nobody hung: {names} names after {LIST_BOUND:?}"
    );
    assert_eq!(names, ENTRIES + 2, "ls -f lists every entry, . and ..");

    ok(["umount", w.room()]);
    let gone = wait_for(EXIT_BOUND, || processes_naming(w.store()).is_empty());
    let left = processes_naming(w.store());
    let live: Vec<String> = conns
        .iter()
        .filter(|c| Path::new(FUSECTL).join(c).exists())
        .cloned()
        .collect();
    abort_all(&live);
    assert!(
        gone,
        "view daemons {left:?} of the store still run {EXIT_BOUND:?} after umount"
    );
    assert!(
        live.is_empty(),
        "FUSE connections {live:?} of the store are left after umount (before it: {conns:?})"
    );
}

/// A background `ckptfs browse` of a fresh store at `<tmp>/view`; the daemon's pid.
fn browse_daemon(env: &Env, tmp: &Path) -> (PathBuf, u32) {
    let mp = tmp.join("view");
    fs::create_dir_all(&mp).unwrap();
    let before: Vec<u32> = processes_naming(&env.s());
    ok(["browse", &env.s(), s(&mp)]);
    let pid = processes_naming(&env.s())
        .into_iter()
        .find(|p| !before.contains(p))
        .expect("the browse daemon");
    (mp, pid)
}

#[test]
fn sigterm_ends_a_view_daemon_even_when_its_mount_was_detached_while_held() {
    ensure_fusectl();
    let env = Env::new();
    write(&env.ws().join("d/f"), b"x\n");
    env.capture(&[]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let _guard = MountGuard::new(&tmp.path().join("view"));

    // Attached: SIGTERM unmounts and exits.
    let (mp, pid) = browse_daemon(&env, tmp.path());
    assert!(mounted(&mp));
    let pid_t = nix::unistd::Pid::from_raw(pid as i32);
    nix::sys::signal::kill(pid_t, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(
        wait_for(EXIT_BOUND, || !processes_naming(&env.s()).contains(&pid)),
        "daemon {pid} still runs after SIGTERM"
    );
    assert!(!mounted(&mp), "SIGTERM left the view mounted");

    // Detached while a process holds it (its cwd is inside): SIGTERM still ends the daemon,
    // and no FUSE connection of the store is left.
    let (mp, pid) = browse_daemon(&env, tmp.path());
    let conns = connections_of(&env.store);
    let holder = holder(&[
        "sh",
        "-c",
        &format!("cd {}/checkpoints && echo ready && exec sleep 600", s(&mp)),
    ])
    .expect("a holder in the view");
    let o = Command::new("umount").arg("-l").arg(&mp).output().unwrap();
    assert!(o.status.success(), "{}", describe_output("umount -l", &o));
    let pid_t = nix::unistd::Pid::from_raw(pid as i32);
    nix::sys::signal::kill(pid_t, nix::sys::signal::Signal::SIGTERM).unwrap();
    let gone = wait_for(EXIT_BOUND, || !processes_naming(&env.s()).contains(&pid));
    // The holder's directory is dead now; once it goes, so does the connection.
    drop(holder);
    let live = || -> Vec<String> {
        conns
            .iter()
            .filter(|c| Path::new(FUSECTL).join(c).exists())
            .cloned()
            .collect()
    };
    wait_for(Duration::from_secs(5), || live().is_empty());
    let left = live();
    abort_all(&left);
    assert!(gone, "daemon {pid} of a detached view ignored SIGTERM");
    assert!(
        left.is_empty(),
        "FUSE connections {left:?} left after SIGTERM"
    );
}
