//! Bad input: every case gets one line naming the thing at fault, exit 2 for usage errors
//! and 1 otherwise, and never a panic.

use std::fs;

use crate::support::*;

#[test]
fn bad_stores() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    let missing = env.path("no-such-store").display().to_string();
    let foreign = env.path("foreign");
    write(&foreign.join("README"), b"not a store");
    let foreign = foreign.display().to_string();
    let a_file = env.path("plain-file");
    write(&a_file, b"x");
    let a_file = a_file.display().to_string();

    // (args, exit code, words the line must contain)
    let cases: Vec<(Vec<String>, i32, Vec<&str>)> = vec![
        (
            vec!["log".into(), missing.clone()],
            1,
            vec![&missing, "not found"],
        ),
        (vec!["capture".into(), missing.clone()], 1, vec![&missing]),
        (
            vec!["verify".into(), foreign.clone()],
            1,
            vec![&foreign, "not a ckptfs store"],
        ),
        (
            vec!["show".into(), a_file.clone(), "x".into()],
            1,
            vec![&a_file, "not a directory"],
        ),
    ];
    for (args, code, words) in cases {
        let err = fails(code, &args);
        for w in words {
            assert!(err.contains(w), "{args:?}: {err:?} lacks {w:?}");
        }
    }

    // Corrupt STORE.json, then a newer format version.
    let cfg = env.store.join("STORE.json");
    let good = fs::read(&cfg).unwrap();
    let set = |data: &[u8]| {
        fs::set_permissions(&cfg, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        fs::write(&cfg, data).unwrap();
    };
    set(b"{ not json");
    let err = fails(1, ["log", &env.s()]);
    assert!(err.contains("STORE.json") && err.contains("JSON"), "{err}");
    let mut v: serde_json::Value = serde_json::from_slice(&good).unwrap();
    v["version"] = 99.into();
    set(v.to_string().as_bytes());
    let err = fails(1, ["log", &env.s()]);
    assert!(
        err.contains("99") && err.contains("newer") && err.contains("upgrade"),
        "{err}"
    );
    assert!(
        !err.contains("corrupt"),
        "a newer store is not corrupt: {err}"
    );
    v["version"] = 1.into();
    v["format"] = "something-else".into();
    set(v.to_string().as_bytes());
    let err = fails(1, ["log", &env.s()]);
    assert!(err.contains("format"), "{err}");
    set(&good);
    ok(["show", &env.s(), &id]);
}

#[test]
fn bad_checkpoints_and_paths() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    // Make a prefix ambiguous with a second record name sharing 6 digits (resolve only looks
    // at names to decide ambiguity).
    let twin = format!("{}{}", &id[..6], "0".repeat(58));
    let twin = if twin == id {
        format!("{}{}", &id[..6], "1".repeat(58))
    } else {
        twin
    };
    fs::copy(
        env.store.join("checkpoints").join(&id),
        env.store.join("checkpoints").join(&twin),
    )
    .unwrap();

    let s = env.s();
    let dest = env.path("out").display().to_string();
    let inside_root = env.ws().join("nested/out").display().to_string();
    let cases: Vec<(Vec<&str>, i32, Vec<&str>)> = vec![
        (
            vec!["show", &s, "deadbeef"],
            1,
            vec!["deadbeef", "not found"],
        ),
        (vec!["show", &s, "no-such-label"], 1, vec!["no-such-label"]),
        (vec!["show", &s, &id[..6]], 2, vec![&id[..6], "ambiguous"]),
        (vec!["show", &s, ""], 2, vec!["empty"]),
        (vec!["ls", &s, "main:nosuchroot"], 2, vec!["nosuchroot"]),
        (vec!["ls", &s, "main:ws/missing/dir"], 1, vec!["ws/missing"]),
        (
            vec!["cat", &s, "main:ws/a.txt/x"],
            1,
            vec!["a.txt", "not a directory"],
        ),
        (
            vec!["restore", &s, "main", "--to", &inside_root],
            2,
            vec![&inside_root, "inside root ws"],
        ),
        (
            vec!["restore", &s, "main", "--to", &s],
            2,
            vec!["overlaps the store"],
        ),
        (
            // A file restores now (tests/restore_grain.rs); filters are for directories.
            vec![
                "restore",
                &s,
                "main:ws/a.txt",
                "--to",
                &dest,
                "--include",
                "*",
            ],
            2,
            vec!["--include", "directory"],
        ),
        (
            vec![
                "restore",
                &s,
                "main",
                "--root",
                "ws",
                "--to",
                "/nonexistent-parent/x",
            ],
            1,
            vec!["/nonexistent-parent"],
        ),
        (
            vec!["capture", &s, "--branch", "bad/name"],
            2,
            vec!["bad/name", "branch"],
        ),
        (
            vec!["capture", &s, "--from", "nosuch=/tmp"],
            2,
            vec!["nosuch"],
        ),
        (vec!["capture", &s, "--from", "ws"], 2, vec!["--from"]),
        (vec!["capture", &s, "--exclude", "a[b"], 2, vec!["a[b"]),
        (vec!["log", &s, "--branch", "nope"], 1, vec!["nope"]),
        (vec!["verify", &s, "--all", &id], 2, vec!["--all"]),
        (vec!["frobnicate"], 2, vec!["frobnicate"]),
        (vec!["restore", &s, "main"], 2, vec!["--to"]),
    ];
    for (args, code, words) in cases {
        let err = fails(code, &args);
        for w in words {
            assert!(err.contains(w), "{args:?}: {err:?} lacks {w:?}");
        }
    }
    assert!(!std::path::Path::new(&dest).exists());
    assert!(!env.ws().join("nested").exists());
}

#[test]
fn bad_init() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s").display().to_string();
    let root = tmp.path().join("r");
    fs::create_dir(&root).unwrap();
    let r = format!("ws={}", root.display());
    let nonempty = tmp.path().join("full");
    write(&nonempty.join("f"), b"x");
    let nonempty = nonempty.display().to_string();
    let inside = format!("ws={}", tmp.path().join("s/inner").display());
    let cases: Vec<(Vec<&str>, i32, Vec<&str>)> = vec![
        (
            vec!["init", &store, "--root", "ws=relative/path"],
            2,
            vec!["relative/path", "not absolute"],
        ),
        (vec!["init", &store, "--root", "ws=/"], 2, vec!["ws"]),
        (
            vec!["init", &store, "--root", "ws=/a/../b"],
            2,
            vec!["/a/../b"],
        ),
        (
            vec!["init", &store, "--root", "bad name=/x"],
            2,
            vec!["bad name"],
        ),
        (
            vec!["init", &store, "--root", "noequals"],
            2,
            vec!["noequals"],
        ),
        (
            vec!["init", &store, "--root", &r, "--root", &r],
            2,
            vec!["twice"],
        ),
        (
            vec!["init", &store, "--root", &inside],
            2,
            vec!["inside the store"],
        ),
        (
            vec!["init", &nonempty, "--root", &r],
            1,
            vec![&nonempty, "not a ckptfs store"],
        ),
        (
            vec!["init", &store, "--root", &r, "--exclude", "other=*.x"],
            2,
            vec!["other"],
        ),
        (vec!["init", &store], 2, vec!["--root"]),
    ];
    for (args, code, words) in cases {
        let err = fails(code, &args);
        for w in words {
            assert!(err.contains(w), "{args:?}: {err:?} lacks {w:?}");
        }
    }
    assert!(
        !tmp.path().join("s").exists(),
        "a failed init left a store behind"
    );
    ok(["init", &store, "--root", &r]);
    let err = fails(1, ["init", &store, "--root", &r]);
    assert!(err.contains("already a ckptfs store"), "{err}");
}
