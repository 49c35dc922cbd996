//! Careless input, table-driven (issue 34): each case is one command line a user or a script
//! might type; each must fail with one line on stderr naming what is at fault, the documented
//! exit code (2: what was typed is wrong, including names that do not exist where the command
//! needs them), and leave the store as it was (STORE.json, refs and the audit log unchanged,
//! no file written where the command would have written).

use std::fs;
use std::path::Path;

use crate::support::*;

/// One careless command line: `{store}` and `{tmp}` are filled in.
struct Case {
    args: &'static [&'static str],
    code: i32,
    says: &'static str,
}

const CASES: &[Case] = &[
    // Endpoints and regions that are not what they look like (were panics: issue 34, 1-2).
    Case {
        args: &[
            "remote",
            "add",
            "{store}",
            "o",
            "s3://b/p",
            "--endpoint",
            "notaurl",
        ],
        code: 2,
        says: "expected http://HOST",
    },
    Case {
        args: &[
            "remote",
            "add",
            "{store}",
            "o",
            "s3://b/p",
            "--endpoint",
            "",
        ],
        code: 2,
        says: "endpoint \"\"",
    },
    Case {
        args: &[
            "remote",
            "add",
            "{store}",
            "o",
            "s3://b/p",
            "--endpoint",
            "http://a b",
        ],
        code: 2,
        says: "endpoint",
    },
    Case {
        args: &[
            "remote",
            "add",
            "{store}",
            "o",
            "s3://b/p",
            "--endpoint",
            "http://admin:hunter2@host",
        ],
        code: 2,
        says: "credentials in the URL are refused",
    },
    Case {
        args: &[
            "remote",
            "add",
            "{store}",
            "o",
            "s3://b/p",
            "--endpoint",
            "http://127.0.0.1:9",
            "--region",
            "a\nb",
        ],
        code: 2,
        says: "a region is 1 to 64",
    },
    Case {
        args: &[
            "remote",
            "add",
            "{store}",
            "o",
            "s3://b/p",
            "--endpoint",
            "http://127.0.0.1:9",
            "--key-file",
            "/nonexistent/key",
        ],
        code: 2,
        says: "--key-file /nonexistent/key: no such file",
    },
    Case {
        args: &[
            "remote",
            "add",
            "{store}",
            "o",
            "s3://b/p",
            "--endpoint",
            "http://127.0.0.1:9",
            "--key-file",
            "/dev/null",
        ],
        code: 2,
        says: "--key-file /dev/null: not a regular file",
    },
    // Names that do not exist where the command needs them (5, 9).
    Case {
        args: &[
            "fingerprint",
            "{store}",
            "--branch",
            "nosuch",
            "--file",
            "/bin/sh",
        ],
        code: 2,
        says: "--branch nosuch: no such branch",
    },
    Case {
        args: &["fingerprint", "{store}", "--branch", "nosuch"],
        code: 2,
        says: "--branch nosuch: no such branch",
    },
    Case {
        args: &["gc", "{store}", "--keep-branch", "nosuch"],
        code: 2,
        says: "--keep-branch nosuch: no branch of that name",
    },
    // Sizes and counts that are surely typos (12, 25).
    Case {
        args: &[
            "export",
            "{store}",
            "--all",
            "--split",
            "1",
            "--out",
            "{tmp}/x.ckar",
        ],
        code: 2,
        says: "at least 4 KiB",
    },
    Case {
        args: &["gc", "{store}", "--keep-last", "0"],
        code: 2,
        says: "zero keeps nothing",
    },
    Case {
        args: &["gc", "{store}", "--keep-daily", "0"],
        code: 2,
        says: "zero keeps nothing",
    },
    Case {
        args: &["gc", "{store}", "--keep-within", "0d"],
        code: 2,
        says: "zero keeps nothing",
    },
    // Store paths mount options cannot carry (10), archives that are not files (19), digests
    // that are not digests (20), an output directory that is not there (21).
    Case {
        args: &["init", "{tmp}/with,comma/s", "--root", "r={tmp}/room"],
        code: 2,
        says: "a ',' cannot be carried",
    },
    Case {
        args: &["import", "{tmp}/new", "/dev/null"],
        code: 2,
        says: "archive /dev/null: not a regular file",
    },
    Case {
        args: &["import", "{store}", "/dev/null"],
        code: 2,
        says: "archive /dev/null: not a regular file",
    },
    Case {
        args: &[
            "import",
            "{tmp}/new",
            "{tmp}/room/a.txt",
            "--sha256",
            "nothex",
        ],
        code: 2,
        says: "--sha256 nothex: expected 64 hex digits",
    },
    Case {
        args: &["export", "{store}", "--all", "--out", "/nonexistent/dir/f"],
        code: 2,
        says: "directory /nonexistent/dir does not exist",
    },
    // A mount that would start views for a root that is not there (4), or make a mountpoint
    // it leaves behind (11).
    Case {
        args: &["mount", "{store}", "--branch", "main", "--root", "nosuch"],
        code: 2,
        says: "--root nosuch: no such root",
    },
    Case {
        args: &[
            "mount",
            "{store}",
            "--branch",
            "main",
            "--at",
            "/nonexistent/x",
            "--relocate",
        ],
        code: 2,
        says: "--at /nonexistent/x: no such directory",
    },
    // Roots that are not there (16-18): named, exit 2, instead of an empty diff or rc 1.
    Case {
        args: &["ls", "{store}", "main:nosuchroot"],
        code: 2,
        says: "no root \"nosuchroot\"",
    },
    Case {
        args: &["cat", "{store}", "main:nosuchroot/a.txt"],
        code: 2,
        says: "no root \"nosuchroot\"",
    },
    Case {
        args: &["restore", "{store}", "main:nosuchroot", "--to", "{tmp}/new"],
        code: 2,
        says: "no root \"nosuchroot\"",
    },
    Case {
        args: &["capture", "{store}", "--from", "nosuch={tmp}/room"],
        code: 2,
        says: "--from nosuch",
    },
    Case {
        args: &["diff", "{store}", "main", "main", "--", "nosuchroot/x"],
        code: 2,
        says: "no root \"nosuchroot\" on either side",
    },
    Case {
        args: &["diff", "{store}", "main", "--dir", "nosuch={tmp}/room"],
        code: 2,
        says: "no root \"nosuch\"",
    },
    Case {
        args: &["diff", "{store}", "main", "--dir", ""],
        code: 2,
        says: "--dir: give DIR",
    },
    Case {
        args: &["diff", "{store}", "main", "main", "--dir", "{tmp}/room"],
        code: 2,
        says: "not both",
    },
    // Globs checked before any work, named once (24).
    Case {
        args: &[
            "restore",
            "{store}",
            "main",
            "--to",
            "{tmp}/new",
            "--include",
            "[",
        ],
        code: 2,
        says: "--include: bad pattern \"[\"",
    },
    // clap's errors: said once (26).
    // Endpoints that parse as URLs only loosely: the S3 client unwrapped its own parse
    // (panics found by cli::parse_fuzz).
    Case {
        args: &[
            "remote",
            "add",
            "{store}",
            "o",
            "s3://b/p",
            "--endpoint",
            "http://a:notaport",
        ],
        code: 2,
        says: "invalid port number",
    },
    Case {
        args: &["clone", "s3://b/p", "{tmp}/new", "--endpoint", "http://["],
        code: 2,
        says: "endpoint \"http://[\"",
    },
    // Time-outs that are surely typos (13).
    Case {
        args: &[
            "remote",
            "add",
            "{store}",
            "o",
            "s3://b/p",
            "--timeout",
            "500ms",
        ],
        code: 2,
        says: "--timeout 500ms: give between 1s and 10m",
    },
    Case {
        args: &["completions", "nosuchshell"],
        code: 2,
        says: "invalid value 'nosuchshell'",
    },
];

fn fill(arg: &str, store: &Path, tmp: &Path) -> String {
    arg.replace("{store}", s(store)).replace("{tmp}", s(tmp))
}

/// What a failed command must not have changed.
fn state_of(store: &Path) -> (Vec<u8>, Vec<String>, Vec<u8>) {
    let config = fs::read(store.join("STORE.json")).unwrap();
    let mut refs: Vec<String> = Vec::new();
    for d in ["refs/branches", "refs/labels"] {
        if let Ok(rd) = fs::read_dir(store.join(d)) {
            refs.extend(
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned()),
            );
        }
    }
    refs.sort();
    let audit = fs::read(store.join("audit.jsonl")).unwrap_or_default();
    (config, refs, audit)
}

/// Unmounts what a case that misbehaved left mounted, even after a failed assert.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = cmd(["umount", s(&self.0.join("room"))]).output();
        unmount_all_under(&store_mounts_dir(&self.0.join("store")));
        unmount_all_under(self.0.as_path());
    }
}

#[test]
fn careless_command_lines_fail_in_one_line_with_the_documented_code_and_change_nothing() {
    let t = tempdir();
    let _unmount = Unmount(t.path().to_path_buf());
    let room = t.path().join("room");
    write(&room.join("a.txt"), b"a\n");
    fs::create_dir(t.path().join("with,comma")).unwrap();
    let store = t.path().join("store");
    ok(["init", s(&store), "--root", &format!("r={}", s(&room))]);
    ok(["capture", s(&store)]);
    let mut failures = Vec::new();
    for c in CASES {
        let args: Vec<String> = c.args.iter().map(|a| fill(a, &store, t.path())).collect();
        let before = state_of(&store);
        let nonexistent_before = Path::new("/nonexistent").exists();
        let o = run(&args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let line = format!("ckptfs {}", args.join(" "));
        if o.status.code() != Some(c.code) {
            failures.push(format!(
                "{line}: exit {:?}, expected {}: {err}",
                o.status.code(),
                c.code
            ));
        } else if err.trim_end().lines().count() != 1 || err.contains("panicked") {
            failures.push(format!("{line}: not one line: {err}"));
        } else if !err.contains(c.says) {
            failures.push(format!("{line}: does not say {:?}: {err}", c.says));
        } else if err.matches("--help").count() > 1 || err.matches("usage:").count() > 1 {
            failures.push(format!("{line}: says it twice: {err}"));
        } else if state_of(&store) != before {
            failures.push(format!("{line}: changed the store"));
        } else if ["x.ckar", "x.ckar.part001", "new", "with,comma/s"]
            .iter()
            .any(|f| t.path().join(f).exists())
            || (!nonexistent_before && Path::new("/nonexistent").exists())
        {
            failures.push(format!("{line}: wrote its output"));
        } else if !mounts_under(&store_mounts_dir(&store)).is_empty() {
            failures.push(format!("{line}: left the store's views mounted"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A stand-in server on 127.0.0.1 (a Python script that prints its port, then serves;
/// killed on drop).
struct StandIn(std::process::Child, u16);

/// Answers every request with `Content-Length: 10^12` and a few bytes, then hangs up.
const LIAR: &str = r#"
import socket, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
def serve(c):
    try:
        c.recv(65536)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n"
                  b"Last-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\nETag: \"x\"\r\n\r\n" + b"x" * 1000)
        c.close()
    except OSError:
        pass
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// Accepts every connection and never answers.
const SILENT: &str = r#"
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
print(s.getsockname()[1], flush=True)
held = []
while True:
    held.append(s.accept()[0])
"#;

/// Answers every request 403 (an instance metadata service that refuses).
const FORBIDDING: &str = r#"
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_PUT(self):
        self.send_response(403); self.send_header("Content-Length", "0"); self.end_headers()
    do_GET = do_PUT
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

impl StandIn {
    fn start(code: &str) -> StandIn {
        let mut child = std::process::Command::new("python3")
            .args(["-c", code])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let port = line.trim().parse().unwrap();
        StandIn(child, port)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.1)
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_server_that_announces_a_terabyte_is_refused_without_allocating_it() {
    let t = tempdir();
    let liar = StandIn::start(LIAR);
    let endpoint = liar.url();
    let key = t.path().join("key");
    fs::write(&key, "k\n").unwrap();
    let target = t.path().join("clone");
    let o = cmd([
        "clone",
        "s3://b/p",
        s(&target),
        "--endpoint",
        &endpoint,
        "--key-file",
        s(&key),
    ])
    .env("AWS_ACCESS_KEY_ID", "a")
    .env("AWS_SECRET_ACCESS_KEY", "b")
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    // Was: "memory allocation of 1000000000000 bytes failed", abort (134).
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("announces 1000000000000 bytes"), "{err}");
    assert!(!target.exists(), "nothing made");
}

#[test]
fn a_bad_exclude_glob_is_refused_also_when_there_is_nothing_to_record() {
    let w = Workspace::new(|room| write(&room.join("a.txt"), b"a\n"));
    let before = head(&w.store, "main");
    // A clean workspace: the glob was only compiled when there was something to record.
    let o = run(["checkpoint", w.room(), "--exclude", "["]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("--exclude: bad pattern"), "{err}");
    assert_eq!(head(&w.store, "main"), before);
}

#[test]
fn two_inits_of_one_path_at_once_one_wins_the_other_fails_naming_it() {
    let t = tempdir();
    for d in ["ra", "rb"] {
        fs::create_dir(t.path().join(d)).unwrap();
    }
    for round in 0..12 {
        let store = t.path().join(format!("s{round}"));
        let spawn = |root: &str| {
            cmd([
                "init",
                s(&store),
                "--root",
                &format!("r={}", s(&t.path().join(root))),
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
        };
        let (a, b) = (spawn("ra"), spawn("rb"));
        let (oa, ob) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        let won: Vec<&std::process::Output> = [&oa, &ob]
            .into_iter()
            .filter(|o| o.status.success())
            .collect();
        assert_eq!(won.len(), 1, "round {round}: {oa:?} {ob:?}");
        let lost = if oa.status.success() { &ob } else { &oa };
        let err = String::from_utf8_lossy(&lost.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(s(&store)), "names the store: {err}");
        // STORE.json is the winner's.
        let winner = if oa.status.success() { "ra" } else { "rb" };
        let cfg = fs::read_to_string(store.join("STORE.json")).unwrap();
        assert!(cfg.contains(&format!("/{winner}\"")), "{cfg}");
    }
}

/// Issue 34, 8: an archive is untrusted; a root it brings into an existing store is a
/// directory the next capture would read, so it is added only when the user names it.
#[test]
fn an_import_adds_a_root_to_an_existing_store_only_when_named() {
    let t = tempdir();
    let (mine, theirs) = (t.path().join("mine"), t.path().join("theirs"));
    write(&mine.join("a.txt"), b"a\n");
    write(&theirs.join("b.txt"), b"b\n");
    let (store, other) = (t.path().join("store"), t.path().join("other"));
    ok(["init", s(&store), "--root", &format!("r={}", s(&mine))]);
    ok(["capture", s(&store)]);
    ok(["init", s(&other), "--root", &format!("x={}", s(&theirs))]);
    ok(["capture", s(&other), "--branch", "elsewhere"]);
    let file = t.path().join("x.ckar");
    ok(["export", s(&other), "elsewhere", "--out", s(&file)]);
    let before = state_of(&store);
    let o = run(["import", s(&store), s(&file)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("root x") && err.contains("--add-root x"),
        "{err}"
    );
    assert!(err.contains(s(&theirs)), "names the archive's path: {err}");
    assert!(state_of(&store) == before, "nothing imported");
    // Named, it is added where the archive says, and said so.
    let u = ok_json(["import", s(&store), s(&file), "--add-root", "x", "--json"]);
    assert_eq!(u["roots_added"]["x"], s(&theirs));
    let cfg: serde_json::Value =
        serde_json::from_slice(&fs::read(store.join("STORE.json")).unwrap()).unwrap();
    assert_eq!(cfg["roots"]["x"]["path"], s(&theirs), "{cfg}");
    // --add-root of a root the store has, or the archive lacks, is refused.
    for (name, says) in [("x", "already has root x"), ("nope", "has no root nope")] {
        let o = run(["import", s(&store), s(&file), "--add-root", name]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(says), "{err}");
    }
}

/// Issue 34, 13: a server that accepts and never answers is given up after the remote's
/// --timeout (it was 60 s of silence), and a line says what is awaited meanwhile.
#[test]
fn a_server_that_never_answers_is_given_up_after_the_timeout_saying_what_it_waits_for() {
    let t = tempdir();
    let silent = StandIn::start(SILENT);
    let key = t.path().join("key");
    fs::write(&key, "k\n").unwrap();
    let target = t.path().join("clone");
    let mut c = cmd([
        "clone",
        "s3://b/p",
        s(&target),
        "--endpoint",
        &silent.url(),
        "--key-file",
        s(&key),
        "--timeout",
        "4s",
    ]);
    c.env("AWS_ACCESS_KEY_ID", "a")
        .env("AWS_SECRET_ACCESS_KEY", "b");
    let (o, finished) = run_command_bounded(c, std::time::Duration::from_secs(40));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(finished, "hung: {err}");
    assert_eq!(o.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert_eq!(lines.len(), 2, "a notice, then the error: {err}");
    assert!(
        lines[0].contains(&format!("waiting for {}", silent.url())) && lines[0].contains("4s"),
        "{err}"
    );
    assert!(
        lines[1].contains("s3://b/p")
            && lines[1].contains("no answer within the remote's --timeout"),
        "{err}"
    );
    assert!(!target.exists(), "nothing made");
}

/// Issue 34, 14: with no credentials anywhere, the instance metadata service is asked last;
/// its refusal is reported as the missing credentials, not as a 403 from an odd address.
#[test]
fn no_credentials_anywhere_is_said_as_such() {
    let t = tempdir();
    let room = t.path().join("room");
    fs::create_dir(&room).unwrap();
    let store = t.path().join("store");
    ok(["init", s(&store), "--root", &format!("r={}", s(&room))]);
    let imds = StandIn::start(FORBIDDING);
    let before = state_of(&store);
    let mut c = cmd([
        "remote",
        "add",
        s(&store),
        "o",
        "s3://b/p",
        "--endpoint",
        &imds.url(),
    ]);
    for v in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ] {
        c.env_remove(v);
    }
    // The metadata service moved to the stand-in (object_store reads this variable).
    c.env("AWS_METADATA_ENDPOINT", imds.url())
        .env("CKPTFS_PASSPHRASE", "x");
    let (o, finished) = run_command_bounded(c, std::time::Duration::from_secs(40));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(finished, "hung: {err}");
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("no S3 credentials") && err.contains("AWS_ACCESS_KEY_ID"),
        "{err}"
    );
    assert!(
        err.contains("403 Forbidden"),
        "says what the service said: {err}"
    );
    assert!(state_of(&store) == before, "no remote recorded");
    assert!(!store.join("remotes/o").exists());
}

/// Credentials the S3 client would put in a header and unwrap (a panic, found by fuzzing):
/// refused in one line naming where they came from, never showing them.
#[test]
fn credentials_no_header_can_carry_are_refused_naming_their_source_not_their_value() {
    let t = tempdir();
    let key = t.path().join("key");
    fs::write(&key, "k\n").unwrap();
    let creds = t.path().join("creds");
    fs::write(
        &creds,
        "[default]\naws_access_key_id = AKIA hunter2\naws_secret_access_key = s\n",
    )
    .unwrap();
    let target = t.path().join("clone");
    let base = |extra: &[&str]| {
        let mut args = vec![
            "clone",
            "s3://b/p",
            s(&target),
            "--endpoint",
            "http://127.0.0.1:9",
            "--key-file",
            s(&key),
        ];
        args.extend_from_slice(extra);
        cmd(args)
    };
    let mut from_env = base(&[]);
    from_env
        .env("AWS_ACCESS_KEY_ID", "a")
        .env("AWS_SECRET_ACCESS_KEY", "b")
        .env("AWS_SESSION_TOKEN", "tok\nhunter2");
    let mut from_file = base(&["--credentials", s(&creds)]);
    from_file.env_remove("AWS_ACCESS_KEY_ID");
    let mut metadata = base(&[]);
    metadata
        .env("AWS_ACCESS_KEY_ID", "a")
        .env("AWS_SECRET_ACCESS_KEY", "b")
        .env("AWS_METADATA_ENDPOINT", "http://a:bad");
    for (c, says) in [
        (from_env, "AWS_SESSION_TOKEN: not a credential"),
        (from_file, "[default] aws_access_key_id: not a credential"),
        (metadata, "AWS_METADATA_ENDPOINT \"http://a:bad\""),
    ] {
        let (o, finished) = run_command_bounded(c, std::time::Duration::from_secs(40));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(finished, "hung: {err}");
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{says}: {err}");
        assert!(!err.contains("hunter2"), "the value is never shown: {err}");
        assert!(!target.exists(), "nothing made");
    }
}
