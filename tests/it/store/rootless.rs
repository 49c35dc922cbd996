//! ckptfs for an ordinary account (no root): a real user, made by the test, runs the store
//! commands and the read-only views on a store of its own, with /dev/fuse open to users as
//! Debian's fuse3 udev rule leaves it. Its workspaces, in a user namespace of their own, are
//! the machine binary's (`tests/machine/rootless.rs`): a namespace copies every mount of the
//! machine, the other tests' workspaces too.

use crate::support::operator::{owner, Operator};
use crate::support::*;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

#[test]
fn an_ordinary_account_keeps_history_and_browses_it_without_root() {
    let u = Operator::new();
    let o = u.sh("mkdir -p room/sub && echo one > room/notes.md && echo x > room/sub/b");
    assert!(o.status.success(), "{}", describe_output("setup", &o));
    let (store, room) = (u.path("store"), u.path("room"));
    u.ok(&["init", &store, "--root", &format!("ws={room}")]);
    let first = u.ok(&["capture", &store, "-q", "-m", "one", "--json"]);
    let first: serde_json::Value = serde_json::from_str(&first).expect("json");
    let first = first["id"].as_str().expect("id").to_string();
    assert!(u.sh("echo two > room/notes.md").status.success());
    u.ok(&["capture", &store, "-q", "-m", "two"]);
    // Everything the store holds is the user's.
    assert_eq!(owner(Path::new(&store)), owner(&u.home));
    let log = u.ok(&["log", &store]);
    assert_eq!(log.lines().count(), 2, "{log}");
    let listed: serde_json::Value =
        serde_json::from_str(&u.ok(&["log", &store, "--json"])).expect("log --json");
    let second = listed[0]["id"].as_str().expect("the newest id").to_string();
    assert_ne!(second, first);
    assert_eq!(u.ok(&["cat", &store, "main:ws/notes.md"]), "two\n");
    assert!(u
        .ok(&["diff", &store, &first, "main"])
        .contains("ws/notes.md"));
    u.ok(&["verify", &store]);
    // History commands: show, find, stats, labels, a fork merged back, forget.
    assert!(u.ok(&["show", &store, &first]).contains(&first[..12]));
    assert!(u.ok(&["find", &store, "notes.md"]).contains("notes.md"));
    u.ok(&["stats", &store]);
    u.ok(&["label", &store, &first, "first"]);
    assert_eq!(u.ok(&["cat", &store, "first:ws/notes.md"]), "one\n");
    u.ok(&["fork", &store, "main", "try"]);
    assert!(u.sh("echo three > room/sub/b").status.success());
    u.ok(&["capture", &store, "-q", "-b", "try", "-m", "on try"]);
    let merged = u.ok(&["merge", &store, "try", "--json"]);
    assert!(merged.contains("\"fast-forward\""), "{merged}");
    assert_eq!(u.ok(&["cat", &store, "main:ws/sub/b"]), "three\n");
    u.ok(&["forget", &store, &second]);
    assert!(!u
        .run(&["cat", &store, &format!("{second}:ws/notes.md")])
        .status
        .success());
    u.ok(&["gc", &store]);
    // Export, import into a second store, restore.
    let archive = u.path("all.ckpt");
    u.ok(&["export", &store, "--all", "--out", &archive]);
    let other = u.path("other");
    u.ok(&["init", &other, "--root", &format!("ws={}", u.path("room2"))]);
    u.ok(&["import", &other, &archive]);
    assert_eq!(u.ok(&["cat", &other, "main:ws/notes.md"]), "two\n");
    let to = u.path("restored");
    u.ok(&["restore", &store, &format!("{first}:ws"), "--to", &to]);
    assert_eq!(fs::read(Path::new(&to).join("notes.md")).unwrap(), b"one\n");
    // A read-only view of a checkpoint and of the whole history, through fusermount3.
    assert!(u.sh("mkdir -p view hist").status.success());
    let view = u.path("view");
    u.ok(&["mount", &store, &first, &view]);
    let _g = MountGuard::new(Path::new(&view));
    // The user's FUSE mount (no allow_other) is the user's alone: read as the user.
    assert_eq!(u.read("view/notes.md"), "one\n");
    assert!(
        fs::read(Path::new(&view).join("notes.md")).is_err(),
        "root read it"
    );
    u.ok(&["umount", &view]);
    assert!(
        !mounted(Path::new(&view)),
        "the user's umount left {view} mounted"
    );
    let hist = u.path("hist");
    u.ok(&["browse", &store, &hist]);
    let _h = MountGuard::new(Path::new(&hist));
    assert_eq!(u.read("hist/branches/main/ws/notes.md"), "two\n");
    u.ok(&["umount", &hist]);
    assert!(!mounted(Path::new(&hist)));
    // Without /dev/fuse open to users, the view's error names it.
    fs::set_permissions("/dev/fuse", fs::Permissions::from_mode(0o600)).expect("chmod");
    let o = u.run(&["mount", &store, &first, &view]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/dev/fuse"), "{err}");
}

#[test]
fn an_ordinary_account_pushes_to_a_remote_and_reads_a_lazy_clone() {
    let g = Garage::start();
    let u = Operator::new();
    let o = u
        .sh("mkdir -p room && echo one > room/notes.md && head -c 300000 /dev/urandom > room/blob");
    assert!(o.status.success(), "{}", describe_output("setup", &o));
    let (store, room) = (u.path("store"), u.path("room"));
    u.ok(&["init", &store, "--root", &format!("ws={room}")]);
    u.ok(&["capture", &store, "-q", "-m", "one"]);
    assert!(u.sh("echo secret > key && chmod 600 key").status.success());
    let key = u.path("key");
    let env = g.env();
    let ok = |args: &[&str]| {
        let o = u.run_env(args, &env);
        assert!(
            o.status.success(),
            "{}",
            describe_output(&args.join(" "), &o)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let url = g.url("rootless");
    let endpoint = g.endpoint();
    let mut reach = vec![
        "--endpoint",
        &endpoint,
        "--region",
        "garage",
        "--key-file",
        &key,
    ];
    let mut add = vec!["remote", "add", &store, "origin", &url];
    add.append(&mut reach.clone());
    add.extend(crate::support::remote::FAST_KDF);
    ok(&add);
    ok(&["push", &store, "origin", "main"]);
    // A clone made by the account: records now, objects when read.
    let clone = u.path("clone");
    let mut c = vec!["clone", &url, &clone];
    c.append(&mut reach);
    ok(&c);
    assert_eq!(ok(&["cat", &clone, "main:ws/notes.md"]), "one\n");
    let blob = u.run_env(&["cat", &clone, "main:ws/blob"], &env);
    assert_eq!(
        blob.stdout,
        fs::read(Path::new(&room).join("blob")).unwrap()
    );
    // Everything the clone holds is the account's.
    assert_eq!(owner(Path::new(&clone)), owner(&u.home));
    ok(&["verify", &clone]);
}
