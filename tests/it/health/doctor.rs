//! doctor finds every broken invariant and says how to fix it; recover repairs the safe ones.
//! Security defaults: store 0700, objects 0444, credentials kept out of `home`, no file
//! contents in the audit log.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::support::*;

fn findings(store: &Path) -> (i32, Vec<serde_json::Value>) {
    let o = run(["doctor", s(store), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("doctor JSON: {e}: {}", stderr(&o)));
    (
        o.status.code().unwrap(),
        v["findings"].as_array().unwrap().clone(),
    )
}

fn has(f: &[serde_json::Value], check: &str, repair: &str) -> bool {
    f.iter().any(|x| {
        x["check"] == check && x["repair"] == repair && !x["fix"].as_str().unwrap().is_empty()
    })
}

#[test]
fn clean_store_is_clean() {
    let t = tempdir();
    let room = t.path().join("room");
    make_room(&room, 5, 3);
    let store = t.path().join("store");
    init(&store, &room);
    capture(&store, &[]);
    let (code, f) = findings(&store);
    assert_eq!(code, 0, "{f:?}");
    assert!(f.is_empty(), "{f:?}");
    let text = ok(["doctor", s(&store)]);
    assert!(text.contains("0 problems"), "{text}");
}

#[test]
fn finds_everything_and_recover_repairs_what_it_can() {
    let t = tempdir();
    let room = t.path().join("room");
    make_room(&room, 10, 4);
    let store = t.path().join("store");
    init(&store, &room);
    let a = capture(&store, &[]);
    fs::write(room.join("new"), "n".repeat(1000)).unwrap();
    capture(&store, &[]);
    // Break things.
    let dead_pid = 4_194_001u32;
    fs::write(
        store.join("run/RUNNING.json"),
        serde_json::json!({"pid": dead_pid, "op": "capture", "started_ns": 0, "args": {}})
            .to_string(),
    )
    .unwrap();
    fs::create_dir_all(store.join("run/pins")).unwrap();
    fs::write(
        store.join("run/pins/view-4194001.json"),
        serde_json::json!({"pid": dead_pid, "owner": "view", "all": true, "checkpoints": [], "branches": []}).to_string(),
    )
    .unwrap();
    fs::write(store.join("tmp/.tmp-obj-4194001.3"), b"half").unwrap();
    fs::write(store.join("refs/branches/.tmp-w-4194001.1"), b"half").unwrap();
    {
        let sock = store.join("run/ctl.sock");
        let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        drop(l);
        // Older than the grace period for daemons that are starting up.
        let st = std::process::Command::new("touch")
            .args(["-h", "-d", "2020-01-01"])
            .arg(&sock)
            .status()
            .unwrap();
        assert!(st.success());
    }
    fs::write(store.join("run/daemon.pid"), format!("{dead_pid}\n")).unwrap();
    fs::set_permissions(&store, fs::Permissions::from_mode(0o755)).unwrap();
    let fan = fs::read_dir(store.join("objects"))
        .unwrap()
        .map(|d| d.unwrap().path())
        .find(|d| fs::read_dir(d).unwrap().next().is_some())
        .unwrap();
    let obj = fs::read_dir(&fan).unwrap().next().unwrap().unwrap().path();
    fs::set_permissions(&obj, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(
        store.join("refs/labels/dangling"),
        format!("{}\n", "ab".repeat(32)),
    )
    .unwrap();
    fs::write(store.join("stray.txt"), b"?").unwrap();

    let (code, f) = findings(&store);
    assert_eq!(code, 1);
    for (check, repair) in [
        ("marker", "recover"),
        ("pin", "recover"),
        ("temp", "recover"),
        ("socket", "recover"),
        ("permissions", "recover"),
        ("ref", ""),
        ("layout", ""),
    ] {
        assert!(has(&f, check, repair), "no {check} finding: {f:#?}");
    }
    assert_eq!(
        f.iter().filter(|x| x["check"] == "permissions").count(),
        2,
        "{f:#?}"
    );
    assert_eq!(
        f.iter().filter(|x| x["check"] == "socket").count(),
        2,
        "{f:#?}"
    );

    let r = ok_json(["recover", s(&store)]);
    let actions = r["actions"].to_string();
    for word in [
        "pin",
        "ctl.sock",
        "daemon.pid",
        "read-only",
        "0700",
        "temp",
        "RUNNING",
    ] {
        assert!(
            actions.contains(word),
            "recover did not mention {word}: {actions}"
        );
    }
    let (_, f) = findings(&store);
    let left: Vec<&serde_json::Value> = f.iter().filter(|x| x["severity"] != "info").collect();
    assert_eq!(left.len(), 1, "{left:#?}");
    assert_eq!(left[0]["check"], "ref");
    assert_eq!(
        fs::metadata(&store).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(
        fs::metadata(&obj).unwrap().permissions().mode() & 0o777,
        0o444
    );
    fs::remove_file(store.join("refs/labels/dangling")).unwrap();
    fs::remove_file(store.join("stray.txt")).unwrap();
    let (code, f) = findings(&store);
    assert_eq!(code, 0, "{f:#?}");

    // A missing object and a wrong-sized one are errors that name the object.
    let tree = tree_of(&store, &a);
    let tree_path = store.join("objects").join(&tree[..2]).join(&tree[2..]);
    let chunk = fs::read_dir(&fan).unwrap().next().unwrap().unwrap().path();
    let chunk_is_tree = chunk == tree_path;
    fs::remove_file(&tree_path).unwrap();
    let (code, f) = findings(&store);
    assert_eq!(code, 1);
    assert!(
        f.iter()
            .any(|x| x["check"] == "object" && x["subject"].as_str().unwrap().contains(&tree)),
        "{f:#?}"
    );
    let _ = chunk_is_tree;
}

#[test]
fn unknown_format_is_a_finding() {
    let t = tempdir();
    let room = t.path().join("room");
    make_room(&room, 2, 3);
    let store = t.path().join("store");
    init(&store, &room);
    let p = store.join("STORE.json");
    let mut cfg: serde_json::Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
    cfg["version"] = 99.into();
    fs::write(&p, cfg.to_string()).unwrap();
    let (code, f) = findings(&store);
    assert_eq!(code, 1);
    assert_eq!(f[0]["check"], "format");
    assert!(f[0]["detail"].as_str().unwrap().contains("newer"), "{f:?}");
}

#[test]
fn credentials_stay_out_of_home_by_default() {
    let t = tempdir();
    let home = t.path().join("home");
    fs::create_dir_all(home.join("sub/.ssh")).unwrap();
    for name in [
        "auth.json",
        "sub/server-key.pem",
        ".env",
        "sub/.ssh/id_rsa",
        "sub/.ssh/id_rsa.pub",
        "x.key",
    ] {
        fs::write(home.join(name), b"SECRET-VALUE-123").unwrap();
    }
    fs::write(home.join("config.toml"), b"model = 1").unwrap();
    let store = t.path().join("store");
    ok(["init", s(&store), "--root", &format!("home={}", s(&home))]);
    let id = capture(&store, &["-m", "turn"]);
    let listing = ok_json(["ls", s(&store), &format!("{id}:home"), "-r"]);
    let paths: Vec<&str> = listing
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"config.toml"), "{paths:?}");
    // The public half of a key pair is no credential: captured.
    assert!(paths.contains(&"sub/.ssh/id_rsa.pub"), "{paths:?}");
    for secret in [
        "auth.json",
        "sub/server-key.pem",
        ".env",
        "sub/.ssh/id_rsa",
        "x.key",
    ] {
        assert!(!paths.contains(&secret), "{secret} was captured: {paths:?}");
    }
    let (_, f) = findings(&store);
    assert!(!f.iter().any(|x| x["check"] == "security"), "{f:?}");
    // Opting out is explicit, and doctor notes it.
    let store2 = t.path().join("store2");
    ok([
        "init",
        s(&store2),
        "--root",
        &format!("home={}", s(&home)),
        "--no-default-excludes",
    ]);
    let id2 = capture(&store2, &[]);
    let listing = ok(["ls", s(&store2), &format!("{id2}:home"), "-r"]);
    assert!(listing.contains("auth.json"));
    let (_, f) = findings(&store2);
    assert!(f.iter().any(|x| x["check"] == "security"), "{f:?}");
    // Audit lines never hold file contents, whatever ran.
    let out = t.path().join("a.ckar");
    ok(["archive", s(&store2), "--all", "--out", s(&out)]);
    ok(["gc", s(&store2), "--keep-last", "1"]);
    ok(["unarchive", s(&out), s(&t.path().join("store3"))]);
    for st in [&store, &store2, &t.path().join("store3")] {
        let audit = fs::read_to_string(st.join("audit.jsonl")).unwrap();
        assert!(
            !audit.contains("SECRET-VALUE"),
            "file contents in {}",
            st.display()
        );
        assert!(!audit.contains("model = 1"));
    }
    // Store 0700, objects 0444.
    assert_eq!(
        fs::metadata(&store).unwrap().permissions().mode() & 0o777,
        0o700
    );
    for fan in fs::read_dir(store.join("objects")).unwrap() {
        for o in fs::read_dir(fan.unwrap().path()).unwrap() {
            let m = fs::metadata(o.unwrap().path())
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(m, 0o444);
        }
    }
}
