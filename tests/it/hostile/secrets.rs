//! Credentials in an endpoint URL (`http://KEY:SECRET@host`) never reach the screen or the
//! store: `remote add` and `clone` refuse such an endpoint naming it without its userinfo,
//! and a remote recorded with one by an older version fails `push` without echoing it and is
//! shown by `remote list` without it. The servers are local stand-ins on 127.0.0.1 that
//! answer garbage (no external network).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

const KEY: &str = "AKIDLEAKEDUSER7";
const SECRET: &str = "hunter2SECRETzz9";

/// A listener on 127.0.0.1 that reads a little of each request and answers garbage. Lives
/// as long as the test process (its thread blocks in `accept`).
fn garbage_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("binding a local port");
    let port = l.local_addr().expect("local address").port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let _ = c.set_read_timeout(Some(Duration::from_millis(500)));
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(b"garbage \x01\x02 not http\r\n\r\n");
        }
    });
    port
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("binding a local port");
    l.local_addr().expect("local address").port()
}

fn endpoint(port: u16) -> String {
    format!("http://{KEY}:{SECRET}@127.0.0.1:{port}")
}

/// Runs the binary with static AWS credentials in the environment (so no instance-metadata
/// lookup leaves the machine), killed after a generous bound; the output.
fn run_s3(args: &[&str]) -> Output {
    let mut c = cmd(args);
    c.env("AWS_ACCESS_KEY_ID", "envkey")
        .env("AWS_SECRET_ACCESS_KEY", "envsecret")
        .env("AWS_REGION", "garage")
        .env("CKPTFS_PASSPHRASE", "pw")
        .env_remove("AWS_ENDPOINT")
        .env_remove("AWS_ENDPOINT_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawning ckptfs");
    let t0 = Instant::now();
    while child.try_wait().expect("waiting").is_none() {
        if t0.elapsed() > Duration::from_secs(180) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("collecting output")
}

/// Asserts neither the key nor the secret appears in `text` (`what` says where it is from).
fn assert_clean(what: &str, text: &str) {
    for w in [KEY, SECRET] {
        assert!(!text.contains(w), "{what} holds {w:?}:\n{text}");
    }
}

fn assert_output_clean(args: &[&str], o: &Output) {
    assert_clean(&format!("output of {args:?}"), &stdout(o));
    assert_clean(&format!("stderr of {args:?}"), &stderr(o));
}

/// Every file under `dir` (audit.jsonl, remotes/*/config.json, ...) free of the credentials.
fn assert_tree_clean(dir: &Path) {
    if !dir.exists() {
        return;
    }
    for e in walkdir(dir) {
        if let Ok(bytes) = std::fs::read(&e) {
            assert_clean(&e.display().to_string(), &String::from_utf8_lossy(&bytes));
        }
    }
}

fn walkdir(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(p),
                Ok(t) if t.is_file() => out.push(p),
                _ => {}
            }
        }
    }
    out
}

#[test]
fn remote_add_with_credentials_in_the_endpoint_echoes_and_stores_nothing() {
    let env = Env::new();
    for port in [garbage_server(), closed_port()] {
        let ep = endpoint(port);
        let args = [
            "remote",
            "add",
            &env.s(),
            "origin",
            "s3://ckpt/rooms/a",
            "--endpoint",
            &ep,
        ];
        let o = run_s3(&args);
        assert!(!o.status.success(), "{}", describe_output("remote add", &o));
        assert_output_clean(&args, &o);
        assert_tree_clean(&env.store);
        // The same with --json: the error is still free of it.
        let mut j = args.to_vec();
        j.push("--json");
        let o = run_s3(&j);
        assert_output_clean(&j, &o);
        assert_tree_clean(&env.store);
    }
    // An s3:// URL with a userinfo is refused without echoing it either.
    let bad = format!("s3://{KEY}:{SECRET}@ckpt/rooms");
    let args = ["remote", "add", &env.s(), "o2", &bad];
    let o = run_s3(&args);
    assert!(!o.status.success(), "{}", describe_output("remote add", &o));
    assert_output_clean(&args, &o);
    assert_tree_clean(&env.store);
}

#[test]
fn clone_with_credentials_in_the_endpoint_echoes_and_stores_nothing() {
    let tmp = tempdir();
    for (i, port) in [garbage_server(), closed_port()].into_iter().enumerate() {
        let dest = tmp.path().join(format!("clone{i}"));
        let ep = endpoint(port);
        let args = ["clone", "s3://ckpt/rooms/a", s(&dest), "--endpoint", &ep];
        let o = run_s3(&args);
        assert!(!o.status.success(), "{}", describe_output("clone", &o));
        assert_output_clean(&args, &o);
        assert_tree_clean(&dest);
    }
}

#[test]
fn a_recorded_endpoint_with_credentials_is_never_shown() {
    // A store whose remote was recorded with credentials in its endpoint (as older versions
    // did): `push` fails without echoing them, `remote list` shows the URL without them.
    let env = Env::new();
    write(&env.root("ws").join("f.txt"), b"hello\n");
    env.capture(&[]);
    let port = garbage_server();
    let cfg = serde_json::json!({
        "url": "s3://ckpt/rooms/a",
        "endpoint": endpoint(port),
        "region": "garage",
    });
    let dir = env.store.join("remotes/origin");
    std::fs::create_dir_all(dir.join("index")).unwrap();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();

    let store = env.s();
    for args in [
        vec!["push", store.as_str()],
        vec!["push", store.as_str(), "--json"],
        vec!["fetch", store.as_str()],
    ] {
        let o = run_s3(&args);
        assert!(!o.status.success(), "{}", describe_output("push", &o));
        assert_output_clean(&args, &o);
    }
    for args in [
        vec!["remote", "list", store.as_str()],
        vec!["remote", "list", store.as_str(), "--json"],
    ] {
        let o = run_s3(&args);
        assert!(o.status.success(), "{}", describe_output("remote list", &o));
        assert!(stdout(&o).contains("127.0.0.1"), "{}", stdout(&o));
        assert_output_clean(&args, &o);
    }
    let audit = std::fs::read_to_string(env.store.join("audit.jsonl")).unwrap_or_default();
    assert_clean("audit.jsonl", &audit);
}
