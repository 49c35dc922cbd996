//! Hostile rooms: an unprivileged agent (`nobody`) attacks a root-run ckptfs through the trees
//! it may write. Each race loops the attacker's swap for a bounded time while root checkpoints
//! or restores; the assertions hold whatever the interleaving: no checkpoint ever records a
//! file from outside the roots, no restore writes outside its target, no operation hangs.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;
/// What a file outside every root holds; no checkpoint may ever contain it.
const SECRET: &str = "ROOT-ONLY-SECRET-0123456789";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ckptfs")
}

/// Runs ckptfs, killed after `limit`; returns its output and whether it finished in time.
fn run_bounded(args: &[&str], limit: Duration) -> (Output, bool) {
    let mut child = Command::new(bin())
        .args(args)
        .env_remove("CKPTFS_FAULT")
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

fn ok(args: &[&str]) -> String {
    let (o, done) = run_bounded(args, Duration::from_secs(120));
    assert!(
        done && o.status.success(),
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

/// A temp dir everyone may traverse (tempfile makes them 0700), removed on drop.
fn open_tmp() -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    t
}

fn chown_tree(p: &Path, uid: u32) {
    let st = Command::new("chown")
        .args(["-R", &format!("{uid}:{uid}")])
        .arg(p)
        .status()
        .expect("chown");
    assert!(st.success());
}

/// A root-only directory outside every root, holding `names` with the secret in each.
fn secret_dir(t: &Path, names: &[String]) -> PathBuf {
    let s = t.join("secret");
    fs::create_dir(&s).unwrap();
    for n in names {
        fs::write(s.join(n), SECRET).unwrap();
        fs::set_permissions(s.join(n), fs::Permissions::from_mode(0o600)).unwrap();
    }
    fs::set_permissions(&s, fs::Permissions::from_mode(0o711)).unwrap();
    s
}

/// Every checkpoint of the store, restored as root into a fresh directory and searched for the
/// secret: returns the checkpoints that hold it.
fn checkpoints_with_secret(store: &str, t: &Path) -> Vec<String> {
    let log: serde_json::Value = serde_json::from_str(&ok(&["log", store, "--json"])).unwrap();
    let mut bad = Vec::new();
    for (i, c) in log.as_array().unwrap().iter().enumerate() {
        let id = c["id"].as_str().unwrap();
        let to = t.join(format!("check-{i}"));
        ok(&[
            "restore",
            store,
            id,
            "--root",
            "ws",
            "--to",
            to.to_str().unwrap(),
        ]);
        let out = Command::new("grep")
            .args(["-rl", SECRET])
            .arg(&to)
            .output()
            .unwrap();
        if !out.stdout.is_empty() {
            bad.push(format!("{id}: {}", String::from_utf8_lossy(&out.stdout)));
        }
        fs::remove_dir_all(&to).unwrap();
    }
    bad
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("f{i:03}")).collect()
}

/// A store with root `ws` at `t/room`, the room owned by `nobody`, holding `d/f000..`.
fn room_with_dir(t: &Path, files: &[String]) -> (String, PathBuf) {
    let room = t.join("room");
    fs::create_dir_all(room.join("d")).unwrap();
    for n in files {
        fs::write(room.join("d").join(n), vec![b'a'; 32 << 10]).unwrap();
    }
    chown_tree(&room, NOBODY);
    let store = t.join("store");
    ok(&[
        "init",
        store.to_str().unwrap(),
        "--root",
        &format!("ws={}", room.display()),
    ]);
    (store.to_str().unwrap().to_string(), room)
}

#[test]
fn capture_never_follows_a_directory_swapped_for_a_symlink() {
    let t = open_tmp();
    let files = names(200);
    let secret = secret_dir(t.path(), &files);
    let (store, room) = room_with_dir(t.path(), &files);
    let _a = Attacker::start(
        &room,
        &format!(
            "    try:\n        os.rename('d', 'd.real'); os.symlink({:?}, 'd'); os.unlink('d'); os.rename('d.real', 'd')\n    except OSError as e:\n        print(e)\n",
            secret.display()
        ),
        60,
    );
    let mut recorded = 0;
    let start = Instant::now();
    while recorded < 40 && start.elapsed() < Duration::from_secs(40) {
        let args = ["capture", store.as_str(), "-m", "race"];
        let (o, done) = run_bounded(&args, Duration::from_secs(30));
        assert!(done, "capture hung");
        if o.status.success() {
            recorded += 1;
        } else {
            assert_clean_failure(&args, &o);
        }
    }
    eprintln!("{recorded} captures recorded during the race");
    drop(_a);
    // Settle the room and record it once more, so there is at least one checkpoint to check.
    let _ = fs::rename(room.join("d.real"), room.join("d"));
    ok(&["capture", &store, "-m", "settled"]);
    let bad = checkpoints_with_secret(&store, t.path());
    assert!(
        bad.is_empty(),
        "checkpoints recorded a file from outside the root: {bad:?}"
    );
}

#[test]
fn capture_never_hangs_on_a_file_swapped_for_a_fifo() {
    let t = open_tmp();
    let (store, room) = room_with_dir(t.path(), &[]);
    // Big files are read first, on every core; the small one last, when the walk is long
    // past: it spends half its time as a FIFO. The big ones are touched before each capture
    // (as the agent's next turn would), so that every capture reads them again.
    for i in 0..4 {
        fs::write(room.join(format!("d/big{i}")), vec![i as u8; 24 << 20]).unwrap();
    }
    fs::write(room.join("d/small"), b"small").unwrap();
    chown_tree(&room, NOBODY);
    let _a = Attacker::start(
        &room.join("d"),
        "    try:\n        os.rename('small', 'small.x'); os.mkfifo('small'); time.sleep(0.03); os.unlink('small'); os.rename('small.x', 'small'); time.sleep(0.03)\n    except OSError:\n        pass\n",
        60,
    );
    let start = Instant::now();
    let mut outcomes = std::collections::BTreeMap::new();
    let mut runs = 0;
    while runs < 25 && start.elapsed() < Duration::from_secs(40) {
        for i in 0..4 {
            let st = Command::new("touch")
                .arg(room.join(format!("d/big{i}")))
                .status()
                .unwrap();
            assert!(st.success());
        }
        let args = ["capture", store.as_str(), "-m", "fifo race"];
        let (o, done) = run_bounded(&args, Duration::from_secs(15));
        assert!(done, "capture hung on a FIFO (run {runs}, {outcomes:?})");
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
    eprintln!("capture outcomes under the FIFO race: {outcomes:?}");
}

#[test]
fn restore_never_writes_through_a_swapped_staging_directory() {
    let t = open_tmp();
    // A checkpoint with many directories, so that staging takes a while.
    let src = t.path().join("room");
    for i in 0..300 {
        let d = src.join(format!("dir{i:03}"));
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("file"), format!("content {i}")).unwrap();
    }
    let store = t.path().join("store");
    let store = store.to_str().unwrap();
    ok(&["init", store, "--root", &format!("ws={}", src.display())]);
    ok(&["capture", store, "-m", "one"]);
    // The target's parent belongs to the attacker; a root-owned directory elsewhere is the
    // victim it tries to make root write into.
    let parent = t.path().join("agent-owned");
    fs::create_dir(&parent).unwrap();
    chown_tree(&parent, NOBODY);
    let victim = t.path().join("victim");
    fs::create_dir(&victim).unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o755)).unwrap();
    let _a = Attacker::start(
        &parent,
        &format!(
            "    for n in os.listdir('.'):\n        if n.startswith('.ckptfs-restore') and not n.endswith('.moved'):\n            try:\n                os.rename(n, n + '.moved'); os.symlink({:?}, n)\n            except OSError:\n                pass\n",
            victim.display()
        ),
        60,
    );
    let target = parent.join("target");
    for i in 0..6 {
        let to = format!("{}{i}", target.display());
        let args = [
            "restore",
            store,
            "main",
            "--root",
            "ws",
            "--to",
            to.as_str(),
        ];
        let (o, done) = run_bounded(&args, Duration::from_secs(60));
        assert!(done, "restore hung");
        if !o.status.success() {
            assert_clean_failure(&args, &o);
        }
        let written: Vec<_> = fs::read_dir(&victim).unwrap().collect();
        assert!(
            written.is_empty(),
            "restore wrote into {} through a swapped symlink: {} entries",
            victim.display(),
            written.len()
        );
    }
    // Nothing root-owned was chowned to the attacker or chmodded outside the target.
    assert_eq!(fs::metadata(&victim).unwrap().uid(), 0);
    assert_eq!(fs::metadata(&victim).unwrap().mode() & 0o7777, 0o755);
}
