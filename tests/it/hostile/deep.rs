//! Hostile depth: directory chains far deeper than any stack, made by the agent (`nobody`) in
//! a live workspace or found in a plain directory, and tree chains in a crafted store. Every
//! command exits with a clear error or succeeds, never with a signal (a stack overflow is
//! SIGABRT); a failed checkpoint leaves no marker that blocks the next one; a chain exactly at
//! the bound (`MAX_TREE_DEPTH`) goes through every walk.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::support::*;
use ckptfs::store::tree::{Entry, EntryKind, Tree, MAX_TREE_DEPTH};

/// How long one command over a deep chain may take before it counts as hung.
const LIMIT: Duration = Duration::from_secs(300);

/// A python program that makes a chain of `argv[2]` directories `d` below `argv[1]` by
/// directory fds (the paths outgrow PATH_MAX), then adds a file `f` at the bottom.
const MAKE_CHAIN: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_DIRECTORY)
for _ in range(int(sys.argv[2])):
    os.mkdir("d", dir_fd=fd)
    sub = os.open("d", os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = sub
os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
"#;

fn make_chain(dir: &Path, depth: usize) {
    let o = std::process::Command::new(PYTHON)
        .args(["-c", MAKE_CHAIN, s(dir), &depth.to_string()])
        .output()
        .expect("python3");
    assert!(o.status.success(), "{}", describe_output("make chain", &o));
}

/// Asserts `o` ended by itself (no signal): a success, or one clean error line holding every
/// word of `words`.
fn no_signal(what: &str, o: &Output, words: &[&str]) {
    assert!(
        o.status.signal().is_none(),
        "{what}: killed by signal {:?}\n{}",
        o.status.signal(),
        describe_output(what, o)
    );
    if !o.status.success() {
        let args = [what];
        let line = assert_clean_failure(&args, o);
        for w in words {
            assert!(line.contains(w), "{what}: no {w:?} in {line:?}");
        }
    }
}

/// Runs `args` within `LIMIT`; it must finish by itself.
fn bounded(args: &[&str]) -> Output {
    let (o, finished) = run_bounded(args, LIMIT);
    assert!(finished, "hung: {}", describe_output(&args.join(" "), &o));
    o
}

/// Runs `args`: it must fail cleanly, naming the bound.
fn refuses_deep(args: &[&str]) {
    let o = bounded(args);
    assert!(
        !o.status.success(),
        "{}",
        describe_output(&args.join(" "), &o)
    );
    no_signal(&args.join(" "), &o, &[&MAX_TREE_DEPTH.to_string()]);
}

#[test]
fn capture_and_diff_dir_refuse_a_100k_chain_and_the_next_capture_works() {
    let env = Env::new();
    small_tree(env.ws());
    let first = env.capture_id(&[]);
    let ws = env.ws().to_path_buf();
    std::fs::create_dir(ws.join("deep")).unwrap();
    make_chain(&ws.join("deep"), 100_000);
    refuses_deep(&["capture", &env.s(), "-m", "deep"]);
    let dir = format!("ws={}", ws.display());
    refuses_deep(&["diff", &env.s(), &first, "--dir", &dir]);
    // No marker left: once the chain is gone, the next capture works.
    sh(&format!("rm -rf {}", s(&ws.join("deep"))));
    env.capture_id(&[]);
}

#[test]
fn a_chain_at_the_bound_goes_through_every_walk() {
    let env = Env::new();
    // ws/d/.../d: the deepest directory is at MAX_TREE_DEPTH.
    make_chain(env.ws(), MAX_TREE_DEPTH);
    let id = env.capture_id(&[]);
    let to = env.path("restored");
    let store = env.s();
    let dir = format!("ws={}", env.ws().display());
    for args in [
        vec!["log", &store],
        vec!["verify", &store],
        vec!["stats", &store],
        vec!["find", &store, "f"],
        vec!["diff", &store, &id, "--dir", &dir],
        vec!["restore", &store, &id, "--to", s(&to)],
        vec!["gc", &store],
        vec!["doctor", &store],
    ] {
        let o = bounded(&args);
        assert!(
            o.status.success(),
            "{}",
            describe_output(&args.join(" "), &o)
        );
    }
    let restored = sh(&format!("cd {} && find . -name f | wc -l", s(&to)));
    assert_eq!(restored.trim(), "1");
    // One more level is refused.
    sh(&format!("rm -rf {}", s(&to)));
    std::fs::create_dir(env.ws().join("one")).unwrap();
    make_chain(&env.ws().join("one"), MAX_TREE_DEPTH);
    refuses_deep(&["capture", &store]);
}

/// A tree object of one directory entry `d` pointing at `child`.
fn chain_link(child: &str) -> Tree {
    Tree {
        entries: vec![Entry {
            name: b"d".to_vec(),
            kind: EntryKind::Dir {
                tree: ckptfs::ObjectId::parse(child).unwrap(),
                subdirs: 1,
            },
            mode: 0o755,
            uid: 0,
            gid: 0,
            mtime_ns: 1,
            size: 1,
            xattrs: vec![],
            ctime_ns: 0,
            ino: 0,
            nlink: 0,
        }],
    }
}

/// A store with a plain first checkpoint of a small tree, and a crafted one whose root `ws`
/// is a chain of `depth` directories `d`: (first, crafted).
fn crafted_chain(env: &Env, depth: usize) -> (String, String) {
    small_tree(env.ws());
    let first = env.capture_id(&[]);
    let mut id = put_raw_object(&env.store, &Tree { entries: vec![] }.encode());
    for _ in 0..depth {
        id = put_raw_object(&env.store, &chain_link(&id).encode());
    }
    let cp = put_checkpoint_with_tree(&env.store, &first, "ws", &id);
    (first, cp)
}

#[test]
fn a_crafted_100k_tree_chain_fails_cleanly_in_every_stored_walk() {
    let env = Env::new();
    let (first, cp) = crafted_chain(&env, 100_000);
    let store = env.s();
    let to = env.path("restored");
    let archive = env.path("a.ckpt");
    let mut killed = Vec::new();
    for args in [
        vec!["log", &store],
        vec!["ls", &store, &cp],
        vec!["diff", &store, &first, &cp],
        vec!["diff", &store, &cp, &first],
        vec!["find", &store, "f"],
        vec!["stats", &store],
        vec!["verify", &store],
        vec!["restore", &store, &cp, "--to", s(&to)],
        vec!["export", &store, "--all", "--to", s(&archive)],
        vec!["doctor", &store],
        vec!["gc", &store, "--dry-run"],
        vec!["merge", &store, &cp, "--dry-run"],
        vec!["merge", &store, &cp, "--no-ff"],
    ] {
        let o = bounded(&args);
        if let Some(sig) = o.status.signal() {
            killed.push(format!("{} (signal {sig})", args.join(" ")));
        }
    }
    // Whatever a command left deep is removed by `rm` before any assert: the temp dir's own
    // cleanup recurses.
    let root = env.path("");
    let staging = sh(&format!(
        "find {} -mindepth 1 -maxdepth 1 -name '.ckptfs-restore-*'",
        s(&root)
    ));
    sh(&format!("rm -rf {}", s(&to)));
    sh(&format!(
        "find {} -mindepth 1 -maxdepth 1 -name '.*' -exec rm -rf {{}} +",
        s(&root)
    ));
    assert!(killed.is_empty(), "killed: {killed:#?}");
    assert!(staging.trim().is_empty(), "restore left {staging}");
}

/// A workspace on a crafted checkpoint whose tree chain goes past the bound: the agent's own
/// changes are shallow, but a hard link makes the checkpoint walk the whole base tree for link
/// groups, which must stop at the bound with a clean error (no tree deeper than any walk
/// handles is recorded, and no stack overflows).
#[test]
fn a_hard_link_over_a_crafted_chain_past_the_bound_fails_the_checkpoint_cleanly() {
    let env = Env::new();
    let (_, cp) = crafted_chain(&env, MAX_TREE_DEPTH + 8);
    let store = env.s();
    ok(["fork", &store, &cp, "deep"]);
    let _g = MountGuard::new(env.ws());
    ok(["mount", &store, "--branch", "deep"]);
    std::fs::write(env.ws().join("x"), b"linked").unwrap();
    std::fs::hard_link(env.ws().join("x"), env.ws().join("y")).unwrap();
    refuses_deep(&["checkpoint", s(env.ws()), "-m", "links"]);
}

/// The workspace tests: `nobody` makes the chain inside its own room.
fn nobody_chain(w: &Workspace, depth: usize) {
    let room = w.path("deep");
    nobody_ok(&format!("mkdir {}", s(&room)));
    let o = as_nobody(&[PYTHON, "-c", MAKE_CHAIN, s(&room), &depth.to_string()]);
    assert!(
        o.status.success(),
        "{}",
        describe_output("chain as nobody", &o)
    );
}

fn no_marker(w: &Workspace) {
    let markers = sh(&format!("find {} -maxdepth 1 -name 'RUNNING*'", w.store()));
    assert!(markers.trim().is_empty(), "marker left: {markers}");
}

#[test]
fn an_agent_chain_in_a_workspace_fails_the_checkpoint_cleanly_and_blocks_nothing() {
    for depth in [10_000, 100_000] {
        let w = Workspace::for_nobody(&[], small_tree);
        nobody_chain(&w, depth);
        let o = bounded(&["status", w.store()]);
        no_signal("status", &o, &[]);
        let o = bounded(&["status", w.store(), "--short"]);
        no_signal("status --short", &o, &[]);
        refuses_deep(&["checkpoint", w.room(), "-m", "deep"]);
        no_marker(&w);
        refuses_deep(&["checkpoint", w.room(), "-m", "deep again"]);
        no_marker(&w);
        let dir = format!("ws={}", w.room());
        refuses_deep(&["diff", w.store(), "main", "--dir", &dir]);
        // Once the agent removes its chain, the next checkpoint works.
        nobody_ok(&format!("rm -rf {}", s(&w.path("deep"))));
        w.checkpoint("after");
    }
}

#[test]
fn a_turn_whose_agent_makes_a_deep_chain_reports_a_failed_checkpoint() {
    let w = Workspace::for_nobody(&[], small_tree);
    if !turns_can_run(&w) {
        return;
    }
    let deep = w.path("deep");
    nobody_ok(&format!("mkdir {}", s(&deep)));
    let depth = 10_000.to_string();
    let agent = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        PYTHON,
    ];
    let mut command = agent.to_vec();
    command.extend(["-c", MAKE_CHAIN, s(&deep), &depth]);
    let o = turn(&w, &[], &command);
    assert!(!o.status.success(), "{}", describe_output("turn", &o));
    assert!(
        o.status.signal().is_none(),
        "{}",
        describe_output("turn", &o)
    );
    // The checkpoint's error, then turn's own summary line.
    let err = stderr(&o);
    assert!(
        err.contains(&MAX_TREE_DEPTH.to_string()) && err.contains("checkpoint-failed"),
        "{}",
        describe_output("turn", &o)
    );
    no_marker(&w);
    sh(&format!("rm -rf {}", s(&deep)));
    assert!(turn(&w, &[], &["true"]).status.success());
}
