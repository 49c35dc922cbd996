//! Capture's refusals and guarantees: special files fail closed (unless excluded), a file that
//! keeps changing fails the capture naming it with the store unchanged, two captures at once
//! serialize, several roots are one atomic checkpoint, progress shows on a terminal.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::support::*;

#[test]
fn sockets_and_fifos_fail_closed_unless_excluded() {
    let env = Env::new();
    small_tree(env.ws());
    let sock = env.ws().join("sub/agent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let fifo = env.ws().join("pipe");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();

    let before = env.durable_state();
    let err = fails(1, ["capture", &env.s()]);
    // Walk order is sorted, so the fifo ("pipe") is met before "sub/agent.sock".
    assert!(
        err.contains(&fifo.display().to_string()) && err.contains("fifo"),
        "{err}"
    );
    assert!(err.contains("--exclude"), "no hint: {err}");
    assert_eq!(
        env.durable_state(),
        before,
        "a failed capture changed the store"
    );

    fs::remove_file(&fifo).unwrap();
    let err = fails(1, ["capture", &env.s()]);
    assert!(
        err.contains(&sock.display().to_string()) && err.contains("socket"),
        "{err}"
    );
    assert_eq!(env.durable_state(), before);

    // Excluded, the capture succeeds and the socket is not recorded.
    let id = env.capture_id(&["--exclude", "*.sock"]);
    let ls = ok_json(["ls", &env.s(), &format!("{id}:ws/sub")]);
    assert!(ls
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["path"] != "agent.sock"));
    assert_eq!(ls.as_array().unwrap().len(), 2);

    // A device node too (root only; skipped silently elsewhere).
    let dev = env.ws().join("null-dev");
    if nix::sys::stat::mknod(
        &dev,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
        nix::sys::stat::makedev(1, 3),
    )
    .is_ok()
    {
        let err = fails(1, ["capture", &env.s(), "--exclude", "*.sock"]);
        assert!(err.contains("null-dev") && err.contains("device"), "{err}");
    }
}

#[test]
fn a_file_that_keeps_changing_fails_the_capture_naming_it() {
    let env = Env::new();
    small_tree(env.ws());
    let base = env.capture_id(&[]);
    let hot = env.ws().join("hot.jsonl");
    write(&hot, &random_bytes(1, 4 * 1024 * 1024));
    let before = env.durable_state();

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, hot) = (stop.clone(), hot.clone());
        std::thread::spawn(move || {
            let mut f = OpenOptions::new().append(true).open(&hot).unwrap();
            // A steady agent-like writer: one 512-byte line per millisecond.
            let line = [b'x'; 512];
            while !stop.load(Ordering::Relaxed) {
                f.write_all(&line).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
    };
    let o = run(["capture", &env.s()]);
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let err = assert_error_output(&["capture".into()], &o, 1);
    assert!(err.contains(&hot.display().to_string()), "{err}");
    assert!(err.contains("changing"), "{err}");
    assert_eq!(
        env.durable_state(),
        before,
        "a failed capture changed the store"
    );
    assert_eq!(ok_json(["show", &env.s(), "main"])["id"], base.as_str());
    // Once the writer is quiet the same capture succeeds.
    env.capture_id(&[]);
}

#[test]
fn two_captures_at_once_serialize_and_both_land() {
    let env = Env::new();
    small_tree(env.ws());
    // Enough data that the first capture still holds the lock when the second starts.
    write(&env.ws().join("big"), &random_bytes(5, 24 * 1024 * 1024));
    let spawn = |msg: &str| {
        cmd(["capture", &env.s(), "-m", msg, "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let p1 = spawn("one");
    let p2 = spawn("two");
    let (o1, o2) = (
        p1.wait_with_output().unwrap(),
        p2.wait_with_output().unwrap(),
    );
    assert!(
        o1.status.success(),
        "{}",
        String::from_utf8_lossy(&o1.stderr)
    );
    assert!(
        o2.status.success(),
        "{}",
        String::from_utf8_lossy(&o2.stderr)
    );
    let log = ok_json(["log", &env.s(), "--branch", "main"]);
    let log = log.as_array().unwrap();
    assert_eq!(log.len(), 2, "branch must hold both checkpoints");
    // Serialized: the later one has the earlier one as parent.
    assert_eq!(log[0]["parents"][0], log[1]["id"]);
    assert!(log[1]["parents"].as_array().unwrap().is_empty());
    let mut msgs: Vec<&str> = log.iter().map(|e| e["message"].as_str().unwrap()).collect();
    msgs.sort();
    assert_eq!(msgs, vec!["one", "two"]);
    // No leftovers of either run.
    assert!(!env.store.join("run/RUNNING.json").exists());
    assert_eq!(fs::read_dir(env.store.join("tmp")).unwrap().count(), 0);
}

#[test]
fn several_roots_are_captured_as_one_checkpoint() {
    let env = Env::with_roots(&["home", "ws"], &[]);
    small_tree(env.root("ws"));
    write(
        &env.root("home").join("sessions/s1.jsonl"),
        b"{\"turn\":1}\n",
    );
    let v = env.capture(&["-m", "both"]);
    let id = v["id"].as_str().unwrap();
    assert_eq!(
        env.checkpoints(),
        vec![id.to_string()],
        "exactly one record"
    );
    let roots = v["checkpoint"]["roots"].as_object().unwrap();
    assert_eq!(roots.keys().collect::<Vec<_>>(), vec!["home", "ws"]);
    assert_eq!(
        run(["cat", &env.s(), &format!("{id}:home/sessions/s1.jsonl")]).stdout,
        b"{\"turn\":1}\n"
    );
    assert_eq!(
        run(["cat", &env.s(), &format!("{id}:ws/a.txt")]).stdout,
        b"alpha\n"
    );
    // With several roots, ls and restore need the root named.
    let err = fails(2, ["ls", &env.s(), id]);
    assert!(err.contains("home") && err.contains("ws"), "{err}");
    let out = env.path("home-copy");
    ok([
        "restore",
        &env.s(),
        id,
        "--root",
        "home",
        "--to",
        &out.display().to_string(),
    ]);
    assert_trees_equal(env.root("home"), &out);

    // If one root cannot be captured, nothing is recorded for the other either.
    fs::remove_dir_all(env.root("home")).unwrap();
    let before = env.durable_state();
    let err = fails(1, ["capture", &env.s()]);
    assert!(err.contains("home"), "{err}");
    assert_eq!(env.durable_state(), before);

    // --from captures a root from elsewhere.
    let elsewhere = env.path("elsewhere");
    write(&elsewhere.join("f"), b"from elsewhere");
    let id2 = env.capture_id(&["--from", &format!("home={}", elsewhere.display())]);
    assert_eq!(
        run(["cat", &env.s(), &format!("{id2}:home/f")]).stdout,
        b"from elsewhere"
    );
}

#[test]
fn progress_is_shown_on_a_terminal_only() {
    let env = Env::new();
    write(&env.ws().join("big"), &random_bytes(8, 48 * 1024 * 1024));
    // Not a terminal: stderr stays empty.
    let o = run(["capture", &env.s()]);
    assert!(o.status.success());
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Under a pseudo-terminal (script(1)), a progress line appears.
    write(&env.ws().join("big"), &random_bytes(9, 48 * 1024 * 1024));
    let line = format!("{} capture {}", bin(), env.s());
    let o = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .output();
    let Ok(o) = o else {
        eprintln!("script(1) not available; skipping the terminal half");
        return;
    };
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("capture [") && text.contains("elapsed"),
        "no progress on a terminal: {text:?}"
    );
}

/// Stores of format 2 record each entry's ctime and inode number (tree encoding `CKT2`),
/// which `ls`-style reads and views rely on; a version-1 store keeps writing `CKT1` trees,
/// which the builds that made it can still read, and reads the same otherwise.
#[test]
fn format_2_trees_record_ctime_and_inode_and_version_1_stores_keep_theirs() {
    use std::os::unix::fs::MetadataExt;
    for version in [1u64, 2] {
        let env = Env::new();
        small_tree(env.ws());
        let cfg_path = env.store.join("STORE.json");
        let mut cfg: serde_json::Value =
            serde_json::from_slice(&fs::read(&cfg_path).unwrap()).unwrap();
        assert_eq!(cfg["version"], 3, "new stores are format 3");
        cfg["version"] = version.into();
        fs::write(&cfg_path, serde_json::to_vec(&cfg).unwrap()).unwrap();
        let id = env.capture_id(&[]);
        let rec = record(&env.store, &id);
        let tree = rec["roots"]["ws"]["tree"].as_str().unwrap();
        let raw = fs::read(env.object_file(tree)).unwrap(); // uncompressed by default
        let want: &[u8] = if version == 1 { b"CKT1" } else { b"CKT2" };
        assert_eq!(&raw[..4], want, "store version {version}");
        if version == 2 {
            let m = fs::symlink_metadata(env.ws().join("a.txt")).unwrap();
            let found = raw.windows(8).any(|w| w == m.ino().to_le_bytes());
            assert!(found, "a.txt's inode number is not in its tree");
        }
        let out = env.path("out");
        env.restore(&id, &out);
        assert_trees_equal(env.ws(), &out);
    }
}
