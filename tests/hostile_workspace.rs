//! Hostile workspaces: an unprivileged agent (`nobody`) writes a mounted workspace while root
//! checkpoints it. The checkpoint walks the overlay's upper layer, which the agent controls
//! through the mount (it can swap a directory for a symlink, or a file for a FIFO, at any
//! instant); whatever the interleaving, no checkpoint records anything from outside the
//! workspace, and none hangs. A special file the agent leaves behind fails only the
//! checkpoints that do not exclude it: `status` names it, and the branch still mounts.

use std::fs;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;
/// What a file outside the workspace holds; no checkpoint may ever contain it.
const SECRET: &str = "ROOT-ONLY-SECRET-0123456789";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ckptfs")
}

/// Runs ckptfs, killed after `limit`; returns its output and whether it finished in time.
fn run_bounded(args: &[&str], limit: Duration) -> (Output, bool) {
    let mut child = Command::new(bin())
        .args(args)
        .env_remove("CKPTFS_FAULT")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ckptfs");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return (child.wait_with_output().expect("output"), true);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            return (child.wait_with_output().expect("output"), false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run(args: &[&str]) -> Output {
    let (o, done) = run_bounded(args, Duration::from_secs(120));
    assert!(done, "ckptfs {args:?} hung");
    o
}

fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "ckptfs {args:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A failure must be one clean line, never a panic.
fn assert_clean_failure(args: &[&str], o: &Output) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("panicked") && o.status.code() != Some(101),
        "ckptfs {args:?} panicked: {err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "ckptfs {args:?}: {err}");
}

/// The attacker: a Python loop run as `nobody` in `dir`, killed on drop.
struct Attacker(Child);

impl Attacker {
    fn start(dir: &Path, body: &str, secs: u64) -> Attacker {
        let script = format!(
            "import os, time\nos.chdir({dir:?})\nend = time.time() + {secs}\nwhile time.time() < end:\n{body}"
        );
        let child = Command::new("setpriv")
            .args([
                &format!("--reuid={NOBODY}"),
                &format!("--regid={NOBODY}"),
                "--clear-groups",
                // Debian's interpreter: one under root's home is not for `nobody` to run.
                "/usr/bin/python3",
                "-c",
                &script,
            ])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn attacker");
        // Let it start looping; it must really be running as `nobody`.
        std::thread::sleep(Duration::from_millis(300));
        let mut a = Attacker(child);
        assert!(
            a.0.try_wait().expect("attacker").is_none(),
            "the attacker did not start"
        );
        a
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn chown_tree(p: &Path, uid: u32) {
    let st = Command::new("chown")
        .args(["-R", &format!("{uid}:{uid}")])
        .arg(p)
        .status()
        .expect("chown");
    assert!(st.success());
}

/// A store with one root `ws` at `<tmp>/room` (owned by `nobody`, as an agent's room is),
/// captured once on `main` and mounted writable; unmounted on drop, even after a failed
/// assert. The temp dir is traversable by everyone, so `nobody` reaches the room.
struct Workspace {
    tmp: tempfile::TempDir,
    store: PathBuf,
    room: PathBuf,
}

impl Workspace {
    fn new(init_args: &[&str], populate: impl FnOnce(&Path)) -> Workspace {
        let tmp = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let store = tmp.path().join("store");
        let room = tmp.path().join("room");
        fs::create_dir_all(&room).expect("mkdir room");
        populate(&room);
        chown_tree(&room, NOBODY);
        let root = format!("ws={}", room.display());
        let mut args = vec!["init", s(&store), "--root", &root];
        args.extend_from_slice(init_args);
        ok(&args);
        ok(&["capture", s(&store), "-m", "initial"]);
        let w = Workspace { tmp, store, room };
        ok(&["mount", w.store(), "--branch", "main"]);
        w
    }

    fn store(&self) -> &str {
        s(&self.store)
    }
    fn room(&self) -> &str {
        s(&self.room)
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = Command::new(bin()).args(["umount", s(&self.room)]).output();
        // Whatever is still mounted under the temp dir (the lower view, a failed mount).
        let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let prefix = self.tmp.path().to_string_lossy().to_string();
        let mut points: Vec<String> = info
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
            .filter(|m| m.starts_with(&prefix))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for m in points {
            let _ = Command::new("umount").arg("-l").arg(&m).output();
        }
    }
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("f{i:03}")).collect()
}

/// A root-only directory `t/NAME` outside the workspace holding `names` with the secret in
/// each, and the secret in a directory's name and in a symlink's target too (what a walk
/// that follows a swapped component records without reading any file).
fn secret_dir(t: &Path, name: &str, names: &[String]) -> PathBuf {
    let d = t.join(name);
    fs::create_dir(&d).unwrap();
    for n in names {
        fs::write(d.join(n), SECRET).unwrap();
        fs::set_permissions(d.join(n), fs::Permissions::from_mode(0o600)).unwrap();
    }
    fs::create_dir(d.join(format!("dir-{SECRET}"))).unwrap();
    std::os::unix::fs::symlink(format!("/{SECRET}"), d.join("link")).unwrap();
    fs::set_permissions(&d, fs::Permissions::from_mode(0o711)).unwrap();
    d
}

/// Every checkpoint of the store, restored as root into a fresh directory and searched for
/// the secret (in contents, names and symlink targets): the checkpoints that hold it.
fn checkpoints_with_secret(store: &str, t: &Path) -> Vec<String> {
    let log: serde_json::Value = serde_json::from_str(&ok(&["log", store, "--json"])).unwrap();
    let mut bad = Vec::new();
    for (i, c) in log.as_array().unwrap().iter().enumerate() {
        let id = c["id"].as_str().unwrap();
        let to = t.join(format!("check-{i}"));
        ok(&["restore", store, id, "--root", "ws", "--to", s(&to)]);
        let contents = Command::new("grep")
            .args(["-rl", SECRET])
            .arg(&to)
            .output()
            .unwrap();
        let listing = Command::new("find")
            .arg(&to)
            .args(["-printf", "%P -> %l\\n"])
            .output()
            .unwrap();
        let listing = String::from_utf8_lossy(&listing.stdout);
        let named: Vec<&str> = listing.lines().filter(|l| l.contains(SECRET)).collect();
        if !contents.stdout.is_empty() || !named.is_empty() {
            bad.push(format!(
                "{id}: {}{named:?}",
                String::from_utf8_lossy(&contents.stdout)
            ));
        }
        fs::remove_dir_all(&to).unwrap();
    }
    bad
}

#[test]
fn checkpoint_never_follows_a_directory_swapped_for_a_symlink() {
    let files = names(200);
    let w = Workspace::new(&[], |room| {
        fs::create_dir(room.join("d")).unwrap();
        for n in &files {
            fs::write(room.join("d").join(n), vec![b'a'; 32 << 10]).unwrap();
        }
        fs::create_dir(room.join("e")).unwrap();
        fs::write(room.join("e/kept"), b"kept").unwrap();
    });
    // `d` is swapped for a directory with the same file names, `e` for one with only a
    // directory and a symlink (so a walk that follows it has no file to fail on).
    let secret = secret_dir(w.tmp.path(), "outside", &files);
    let secret_names = secret_dir(w.tmp.path(), "outside-names", &[]);
    // The agent's turn rewrote every file, so the upper layer holds them all: a walk that
    // lists the outside directory through the swapped `d` finds each name there too.
    for n in &files {
        let p = w.room.join("d").join(n);
        let mut f = fs::OpenOptions::new().append(true).open(&p).unwrap();
        std::io::Write::write_all(&mut f, b"turn\n").unwrap();
    }
    ok(&["checkpoint", w.room(), "-m", "turn"]);
    let swap = |name: &str, to: &Path| {
        format!(
            "    for step in (lambda: os.rename('{name}', '{name}.real'), lambda: os.symlink({to:?}, '{name}'), lambda: time.sleep(0.002), lambda: os.unlink('{name}'), lambda: os.rename('{name}.real', '{name}'), lambda: time.sleep(0.002)):\n        try:\n            step()\n        except OSError:\n            pass\n",
        )
    };
    let _a = Attacker::start(&w.room, &swap("d", &secret), 60);
    let _b = Attacker::start(&w.room, &swap("e", &secret_names), 60);
    let (mut recorded, mut refused) = (0, 0);
    let start = Instant::now();
    while recorded + refused < 40 && start.elapsed() < Duration::from_secs(40) {
        let args = ["checkpoint", w.room(), "-m", "race"];
        let (o, done) = run_bounded(&args, Duration::from_secs(30));
        assert!(done, "checkpoint hung");
        if o.status.success() {
            recorded += 1;
        } else {
            assert_clean_failure(&args, &o);
            if refused < 5 {
                eprintln!("refused: {}", String::from_utf8_lossy(&o.stderr).trim());
            }
            refused += 1;
        }
    }
    eprintln!("{recorded} checkpoints recorded, {refused} refused during the race");
    drop(_a);
    drop(_b);
    // Settle the room and record it once more.
    for name in ["d", "e"] {
        let p = w.room.join(name);
        if fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
            fs::remove_file(&p).unwrap();
        }
        if !p.exists() {
            fs::rename(w.room.join(format!("{name}.real")), &p).unwrap();
        }
    }
    ok(&["checkpoint", w.room(), "-m", "settled"]);
    let bad = checkpoints_with_secret(w.store(), w.tmp.path());
    assert!(
        bad.is_empty(),
        "checkpoints recorded what lies outside the workspace: {bad:?}"
    );
}

#[test]
fn checkpoint_never_hangs_on_a_file_swapped_for_a_fifo() {
    let w = Workspace::new(&[], |room| {
        fs::create_dir(room.join("d")).unwrap();
    });
    // Written through the mount, so they are upper files that every checkpoint reads again
    // once touched (as the agent's next turn would); big ones first, on every core, the small
    // one last: it spends half its time as a FIFO.
    for i in 0..4 {
        fs::write(w.room.join(format!("d/big{i}")), vec![i as u8; 16 << 20]).unwrap();
    }
    fs::write(w.room.join("d/small"), b"small").unwrap();
    chown_tree(&w.room.join("d"), NOBODY);
    let _a = Attacker::start(
        &w.room.join("d"),
        "    try:\n        os.rename('small', 'small.x'); os.mkfifo('small'); time.sleep(0.03); os.unlink('small'); os.rename('small.x', 'small'); time.sleep(0.03)\n    except OSError:\n        pass\n",
        60,
    );
    let start = Instant::now();
    let mut outcomes = std::collections::BTreeMap::new();
    let mut runs = 0;
    while runs < 20 && start.elapsed() < Duration::from_secs(40) {
        for i in 0..4 {
            let st = Command::new("touch")
                .arg(w.room.join(format!("d/big{i}")))
                .status()
                .unwrap();
            assert!(st.success());
        }
        let args = ["checkpoint", w.room(), "-m", "fifo race"];
        let (o, done) = run_bounded(&args, Duration::from_secs(15));
        assert!(done, "checkpoint hung on a FIFO (run {runs}, {outcomes:?})");
        if !o.status.success() {
            assert_clean_failure(&args, &o);
        }
        let err = String::from_utf8_lossy(&o.stderr);
        let kind = if o.status.success() {
            "recorded"
        } else if err.contains("fifo") {
            "refused: a fifo"
        } else {
            "refused: other"
        };
        *outcomes.entry(kind).or_insert(0) += 1;
        runs += 1;
    }
    eprintln!("checkpoint outcomes under the FIFO race: {outcomes:?}");
    // `status` must not hang on it either.
    let args = ["status", w.store(), "--json"];
    let (o, done) = run_bounded(&args, Duration::from_secs(15));
    assert!(done, "status hung on a FIFO");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_fifo_fails_only_the_checkpoints_that_do_not_exclude_it_and_the_branch_still_mounts() {
    // Sockets are excluded by the root's rules: never reported, never in the way.
    let w = Workspace::new(&["--exclude", "ws=*.sock"], |room| {
        fs::write(room.join("a.txt"), b"one").unwrap();
        fs::write(room.join("gone.txt"), b"to delete").unwrap();
    });
    let fifo = w.room.join("pipe.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(w.room.join("agent.sock")).unwrap();
    fs::write(w.room.join("a.txt"), b"two").unwrap();
    // A whiteout (a deleted lower file) is a char device 0/0 in the upper: a deletion, not a
    // special file.
    fs::remove_file(w.room.join("gone.txt")).unwrap();

    let args = ["checkpoint", w.room(), "-m", "with a fifo"];
    let o = run(&args);
    assert!(!o.status.success(), "a checkpoint recorded a FIFO");
    assert_clean_failure(&args, &o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("pipe.fifo") && err.contains("fifo"), "{err}");

    // `status` says why, and does not say clean.
    let rows: serde_json::Value =
        serde_json::from_str(&ok(&["status", w.store(), "--json"])).unwrap();
    let ws = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "workspace")
        .expect("workspace row");
    assert_eq!(ws["dirty"], true, "{ws}");
    assert_eq!(
        ws["special_files"],
        serde_json::json!([{"path": s(&fifo), "kind": "fifo"}]),
        "{ws}"
    );
    let human = ok(&["status", w.store()]);
    assert!(
        human.contains(&format!("not checkpointable: {} is a fifo", fifo.display())),
        "{human}"
    );
    assert!(!human.contains("clean"), "{human}");

    // Excluded, it is left out and the rest is recorded.
    let id = {
        let out = ok(&[
            "checkpoint",
            w.room(),
            "-m",
            "fifo excluded",
            "--exclude",
            "*.fifo",
            "--json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["id"].as_str().unwrap().to_string()
    };
    let to = w.tmp.path().join("restored");
    ok(&["restore", w.store(), &id, "--root", "ws", "--to", s(&to)]);
    assert_eq!(fs::read(to.join("a.txt")).unwrap(), b"two");
    assert!(!to.join("pipe.fifo").exists() && !to.join("gone.txt").exists());
    assert!(!to.join("agent.sock").exists());
    // Still there, so still not clean.
    let human = ok(&["status", w.store()]);
    assert!(human.contains("not checkpointable"), "{human}");

    // The branch mounts again, with the FIFO and the changes kept in its upper layer.
    drop(_sock);
    ok(&["umount", w.room()]);
    ok(&["mount", w.store(), "--branch", "main"]);
    let m = fs::symlink_metadata(&fifo).expect("the FIFO after the mount");
    assert!(m.file_type().is_fifo());
    assert_eq!(fs::read(w.room.join("a.txt")).unwrap(), b"two");
    assert!(!w.room.join("gone.txt").exists());
}
