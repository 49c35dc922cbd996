//! Hostile input and other users: commands run as `nobody` (uid/gid 65534, through `setpriv`,
//! without supplementary groups), an `Attacker` loop as `nobody`, temp dirs `nobody` may
//! traverse, and hand-built trees and archive streams that say what the test wants.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use ckptfs::store::tree::{Chunk, Entry, EntryKind, Tree};

use super::cli::{describe_output, ok_bounded, s};
use super::tree::{chmod, write};

/// nobody's uid and gid (Debian's `nobody:nogroup`).
pub const NOBODY: u32 = 65534;

/// Debian's Python: the one first on root's PATH may be a pyenv shim under `/root`, which
/// `nobody` may not run.
pub const PYTHON: &str = "/usr/bin/python3";

/// The shell `nobody_ok` and `nobody_denied` run their scripts with.
pub const SH: &str = "/bin/sh";

/// A command running `argv` (program and arguments) as `nobody:nogroup` without
/// supplementary groups, with `PATH=/usr/bin:/bin` (so a bare `python3` is Debian's, too) and
/// `/` as working directory (the test's may be closed to `nobody`).
pub fn nobody_command(argv: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={NOBODY}"))
        .arg(format!("--regid={NOBODY}"))
        .arg("--clear-groups")
        .args(argv)
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/");
    c
}

/// Runs `argv` (program and arguments, e.g. `[PYTHON, "-c", code]`) as `nobody`; its output,
/// whatever the exit status.
pub fn as_nobody(argv: &[&str]) -> Output {
    nobody_command(argv).output().expect("run setpriv")
}

/// nobody's stdout of the shell script `script`; panics unless it succeeds.
pub fn nobody_ok(script: &str) -> String {
    let o = as_nobody(&[SH, "-c", script]);
    assert!(
        o.status.success(),
        "{}",
        describe_output(&format!("as nobody: {script}"), &o)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Panics unless the shell script `script` fails for `nobody` with "Permission denied"
/// (EACCES).
pub fn nobody_denied(script: &str) {
    let o = as_nobody(&[SH, "-c", script]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("Permission denied"),
        "{}",
        describe_output(&format!("expected EACCES for nobody: {script}"), &o)
    );
}

/// An attacker: `body` (Python statements indented by four spaces, which may use `os` and
/// `time`) looped as `nobody` in `dir` for up to `secs` seconds; killed on drop.
pub struct Attacker(Child);

impl Attacker {
    /// Starts the loop and asserts it is running (as `nobody`) 300 ms later.
    pub fn start(dir: &Path, body: &str, secs: u64) -> Attacker {
        let script = format!(
            "import os, time\nos.chdir({dir:?})\nend = time.time() + {secs}\nwhile time.time() < end:\n{body}"
        );
        let child = nobody_command(&[PYTHON, "-c", &script])
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

/// A temp dir everyone may traverse (0755; tempfile makes them 0700), removed on drop.
pub fn open_tmp() -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tempdir");
    chmod(t.path(), 0o755);
    t
}

/// A tree of one file entry `name` (0644, root's, mtime 1 ns) whose size and chunks are
/// whatever the caller says, consistent or not.
pub fn one_file_tree(name: &[u8], size: u64, chunks: Vec<Chunk>) -> Tree {
    Tree {
        entries: vec![Entry {
            name: name.to_vec(),
            kind: EntryKind::File { chunks },
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime_ns: 1,
            size,
            xattrs: vec![],
            ctime_ns: 0,
            ino: 0,
            nlink: 0,
        }],
    }
}

/// An archive stream as `ckptfs archive` writes one (zstd over tar), of these entries (name,
/// bytes) in order, each a regular file 0444: for crafted archives.
pub fn archive_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut tb = tar::Builder::new(Vec::new());
    for (name, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o444);
        h.set_entry_type(tar::EntryType::Regular);
        tb.append_data(&mut h, name, *data).expect("tar entry");
    }
    zstd::encode_all(&tb.into_inner().expect("tar")[..], 3).expect("zstd")
}

/// What a file outside every root holds in the attack tests; no checkpoint may ever hold it.
pub const SECRET: &str = "ROOT-ONLY-SECRET-0123456789";

/// How long a command on a tree or store an attacker touched may take.
pub const SLOW: Duration = Duration::from_secs(120);

/// `f000`, `f001`...: `n` file names.
pub fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("f{i:03}")).collect()
}

/// A root-only directory `t/NAME` outside every root holding `names` with the secret in
/// each, and the secret in a directory's name and in a symlink's target too (what a walk
/// that follows a swapped component records without reading any file).
pub fn secret_dir(t: &Path, name: &str, names: &[String]) -> PathBuf {
    let d = t.join(name);
    fs::create_dir(&d).unwrap();
    for n in names {
        write(&d.join(n), SECRET.as_bytes());
        chmod(&d.join(n), 0o600);
    }
    fs::create_dir(d.join(format!("dir-{SECRET}"))).unwrap();
    std::os::unix::fs::symlink(format!("/{SECRET}"), d.join("link")).unwrap();
    chmod(&d, 0o711);
    d
}

/// Every checkpoint of the store, restored as root into a fresh directory under `t` and
/// searched for the secret (in contents, names and symlink targets): the checkpoints that
/// hold it.
pub fn checkpoints_with_secret(store: &str, t: &Path) -> Vec<String> {
    let log: serde_json::Value =
        serde_json::from_str(&ok_bounded(["log", store, "--json"], SLOW)).unwrap();
    let mut bad = Vec::new();
    for (i, c) in log.as_array().unwrap().iter().enumerate() {
        let id = c["id"].as_str().unwrap();
        let to = t.join(format!("check-{i}"));
        ok_bounded(["restore", store, id, "--root", "ws", "--to", s(&to)], SLOW);
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

/// What one operation under a FIFO race came to: `recorded`, `refused: a fifo` or
/// `refused: other` (the race tests tally these; a failure must already be a clean one).
pub fn fifo_race_outcome(o: &Output) -> &'static str {
    if o.status.success() {
        "recorded"
    } else if String::from_utf8_lossy(&o.stderr).contains("fifo") {
        "refused: a fifo"
    } else {
        "refused: other"
    }
}
