//! Remotes under faults, on real Garage nodes: a node killed during a push, the server gone
//! under a lazy view, an object altered through the S3 API, a 3-node cluster losing a node
//! during a push and a lazy walk, two machines pushing one branch at once, and remote gc
//! refused while a push is in flight.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::support::*;

/// A source tree with `mb` MiB of random data in 1 MiB files plus a few small files.
fn room(src: &Path, mb: usize) {
    for i in 0..mb {
        write(
            &src.join(format!("big/{i}.bin")),
            &random_bytes(i as u64 + 1, 1 << 20),
        );
    }
    for i in 0..20 {
        write(
            &src.join(format!("small/{i}.txt")),
            format!("small file {i}\n").as_bytes(),
        );
    }
    write(
        &src.join("cold/file.txt"),
        b"read only once the server is back\n",
    );
}

struct Two {
    dir: tempfile::TempDir,
    key: PathBuf,
    src: PathBuf,
    room: PathBuf,
    a: PathBuf,
    b: PathBuf,
}

/// Store A with root `work` at `room/`, `src` captured into it, remote origin at `prefix`.
fn two(g: &Garage, prefix: &str, mb: usize) -> Two {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "pw");
    let src = dir.path().join("src");
    let room_dir = dir.path().join("room");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    room(&src, mb);
    ok([
        "init",
        s(&a),
        "--root",
        &format!("work={}", room_dir.display()),
    ]);
    capture(&a, &["--from", &format!("work={}", src.display())]);
    add_remote(g, &a, prefix, &key);
    Two {
        dir,
        key,
        src,
        room: room_dir,
        a,
        b,
    }
}

/// Starts `push STORE` with uploads paced (one pack each `pace_ms`), output piped.
fn spawn_push(g: &Garage, store: &Path, pace_ms: u64, extra: &[&str]) -> KillOnDrop {
    let mut c = cmd(["push", s(store)]);
    c.args(extra);
    g.apply_env(&mut c)
        .env("CKPTFS_REMOTE_PACE_MS", pace_ms.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    KillOnDrop(c.spawn().expect("push"))
}

fn finish(mut k: KillOnDrop) -> (bool, String) {
    let status = k.0.wait().expect("wait");
    let mut err = String::new();
    if let Some(e) = k.0.stderr.as_mut() {
        e.read_to_string(&mut err).unwrap();
    }
    (status.success(), err)
}

#[test]
fn node_killed_during_push_leaves_nothing_dangling_and_the_next_push_resumes() {
    let mut g = Garage::start();
    let t = two(&g, "kill", 40);
    let p = spawn_push(&g, &t.a, 400, &[]);
    eventually("a first pack on the remote", || {
        !g.s3_list("kill/packs/").is_empty()
    });
    g.kill(0);
    let (ok_, err) = finish(p);
    assert!(!ok_, "the push succeeded with its server killed");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
    g.restart(0);
    // Nothing published: no ref, no record, no index naming a pack that is not there.
    assert!(g.s3_list("kill/refs/").is_empty());
    assert!(g.s3_list("kill/records/").is_empty());
    let packs_before = g.s3_list("kill/packs/").len();
    assert!(packs_before >= 1);
    // The next push recovers what went up and uploads the rest only.
    let r = rok_json(&g, ["push", s(&t.a)]);
    assert!(r["recovered"].as_u64().unwrap() >= 1, "{r}");
    let total = r["recovered"].as_u64().unwrap() + r["objects"].as_u64().unwrap();
    assert!(r["objects"].as_u64().unwrap() < total, "{r}");
    let v = rok_json(&g, ["verify", s(&t.a), "--remote", "origin"]);
    assert_eq!(v["findings"].as_array().unwrap().len(), 0, "{v}");
    // And a clone reads it all back exactly.
    clone_remote(&g, "kill", &t.b, &t.key);
    let to = t.dir.path().join("restored");
    rok(&g, ["restore", s(&t.b), "main", "--to", s(&to)]);
    assert_trees_equal(&t.src, &to);
}

/// The log of the one view daemon of `store`.
fn view_log(store: &Path) -> String {
    let mut out = String::new();
    for e in fs::read_dir(store.join("run/views")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "log") {
            out.push_str(&fs::read_to_string(&p).unwrap_or_default());
        }
    }
    out
}

#[test]
fn server_down_under_a_lazy_view_gives_eio_then_recovers() {
    let mut g = Garage::start();
    let t = two(&g, "down", 2);
    rok(&g, ["push", s(&t.a)]);
    clone_remote(&g, "down", &t.b, &t.key);
    let _m = MountGuard::new(&t.room);
    rok(&g, ["mount", s(&t.b), "main:work"]);
    let fetched = t.room.join("small/1.txt");
    assert_eq!(fs::read(&fetched).unwrap(), b"small file 1\n");
    // Listing is served once trees are here (prefetched behind the first).
    eventually("the trees prefetched", || {
        fs::read_dir(t.room.join("small")).is_ok()
    });
    g.kill(0);
    // Nothing has opened cold/ or its files: its content was never fetched.
    let cold = t.room.join("cold/file.txt");
    let e = fs::read(&cold).expect_err("read of an unfetched file with the server down");
    let log = view_log(&t.b);
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}: {log}");
    assert!(
        log.contains("cold/file.txt") && log.contains("object"),
        "no log line names the path and object: {log}"
    );
    // Fetched files keep working, the mount stays.
    assert_eq!(fs::read(&fetched).unwrap(), b"small file 1\n");
    assert!(mounted(&t.room));
    g.restart(0);
    eventually("reads work again", || {
        fs::read(&cold).is_ok_and(|d| d == b"read only once the server is back\n")
    });
    rok(&g, ["umount", s(&t.room)]);
}

#[test]
fn object_altered_on_the_remote_is_eio_and_a_verify_finding() {
    let g = Garage::start();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "pw");
    let src = dir.path().join("src");
    let room_dir = dir.path().join("room");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    // One pack, almost all of it the chunks of big.bin.
    write(&src.join("big.bin"), &random_bytes(9, 3 << 20));
    write(&src.join("note.txt"), b"a note\n");
    ok([
        "init",
        s(&a),
        "--root",
        &format!("work={}", room_dir.display()),
    ]);
    capture(&a, &["--from", &format!("work={}", src.display())]);
    add_remote(&g, &a, "alt", &key);
    rok(&g, ["push", s(&a)]);
    // Two packs: the trees, and the data (almost all of it big.bin's chunks).
    let packs = g.s3_list("alt/packs/");
    assert_eq!(packs.len(), 2, "{packs:?}");
    let data_pack = packs
        .iter()
        .max_by_key(|k| g.s3_get(k).unwrap().len())
        .unwrap()
        .clone();
    let mut bytes = g.s3_get(&data_pack).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    g.s3_put(&data_pack, &bytes);

    clone_remote(&g, "alt", &b, &key);
    let args: Vec<String> = ["cat", s(&b), "main:work/big.bin"].map(String::from).into();
    let o = rrun(&g, &args);
    assert!(!o.status.success(), "cat of an altered object succeeded");
    assert!(o.stdout.len() < 3 << 20, "wrong bytes given out");
    assert_eq!(rok(&g, ["cat", s(&b), "main:work/note.txt"]), "a note\n");
    {
        let _m = MountGuard::new(&room_dir);
        rok(&g, ["mount", s(&b), "main:work"]);
        let e = fs::read(room_dir.join("big.bin")).expect_err("read of altered bytes");
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert_eq!(fs::read(room_dir.join("note.txt")).unwrap(), b"a note\n");
        rok(&g, ["umount", s(&room_dir)]);
    }
    let args: Vec<String> = ["verify", s(&a), "--remote", "origin", "--json"]
        .map(String::from)
        .into();
    let o = rrun(&g, &args);
    assert_eq!(o.status.code(), Some(1), "{}", describe(&args, &o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let findings = v["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{v}");
    let paths = findings[0]["paths"].to_string();
    assert!(paths.contains("work/big.bin"), "{v}");
}

#[test]
fn three_node_cluster_survives_a_node_lost_during_push_and_lazy_walk() {
    let mut g = Garage::cluster(3);
    let t = two(&g, "c3", 24);
    let p = spawn_push(&g, &t.a, 300, &[]);
    eventually("a first pack on the remote", || {
        !g.s3_list("c3/packs/").is_empty()
    });
    g.kill(2);
    let (ok_, err) = finish(p);
    assert!(ok_, "push with one of three nodes down failed: {err}");
    g.restart(2);
    clone_remote(&g, "c3", &t.b, &t.key);
    let _m = MountGuard::new(&t.room);
    rok(&g, ["mount", s(&t.b), "main:work"]);
    // Walk and read everything, losing a node on the way.
    for (walked, e) in fs::read_dir(t.room.join("big")).unwrap().enumerate() {
        let e = e.unwrap();
        if walked == 3 {
            // Node 2 again: 0 and 1 have stayed connected all along, so they are the
            // quorum (a node just restarted is not yet reconnected from every side).
            g.kill(2);
        }
        let want = fs::read(t.src.join("big").join(e.file_name())).unwrap();
        let got = fs::read(e.path())
            .unwrap_or_else(|err| panic!("{:?}: {err}\n{}", e.path(), view_log(&t.b)));
        assert!(got == want, "{:?}", e.path());
    }
    assert_trees_equal(&t.src, &t.room);
    rok(&g, ["umount", s(&t.room)]);
}

#[test]
fn two_machines_pushing_one_branch_one_wins_nothing_lost() {
    let g = Garage::start();
    let t = two(&g, "race", 1);
    rok(&g, ["push", s(&t.a)]);
    clone_remote(&g, "race", &t.b, &t.key);
    write(&t.src.join("small/1.txt"), b"A's turn\n");
    let ha = capture(&t.a, &["--from", &format!("work={}", t.src.display())]);
    write(&t.src.join("small/1.txt"), b"B's turn\n");
    write(&t.src.join("big/extra.bin"), &random_bytes(77, 9 << 20));
    let hb = capture(&t.b, &["--from", &format!("work={}", t.src.display())]);
    let pa = spawn_push(&g, &t.a, 200, &[]);
    let pb = spawn_push(&g, &t.b, 200, &[]);
    let (oka, erra) = finish(pa);
    let (okb, errb) = finish(pb);
    assert!(
        oka != okb,
        "exactly one push must win: A {oka} {erra} / B {okb} {errb}"
    );
    let loser = if oka { &errb } else { &erra };
    assert!(
        loser.contains("locked by") || loser.contains("not an ancestor"),
        "{loser}"
    );
    assert_eq!(loser.trim_end().lines().count(), 1, "{loser}");
    let winner_head = if oka { &ha } else { &hb };
    let out = rok(&g, ["fetch", s(&t.a), "--json"]);
    let f: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(f["branches"]["main"], winner_head.as_str(), "{f}");
    let v = rok_json(&g, ["verify", s(&t.a), "--remote", "origin"]);
    assert!(v["findings"].as_array().unwrap().is_empty(), "{v}");
}

#[test]
fn remote_gc_plans_applies_and_waits_for_pushes() {
    let g = Garage::start();
    let t = two(&g, "gc", 12);
    // A push in flight holds the lock: gc is refused, naming it.
    let p = spawn_push(&g, &t.a, 500, &[]);
    eventually("the push holds the lock and sent a pack", || {
        !g.s3_list("gc/locks/").is_empty() && !g.s3_list("gc/packs/").is_empty()
    });
    let args: Vec<String> = ["gc", s(&t.a), "--remote", "origin"]
        .map(String::from)
        .into();
    let o = rrun(&g, &args);
    let err = assert_error_output(&args, &o, 1);
    assert!(err.contains("locked by") && err.contains("pid"), "{err}");
    // The push dies: its packs are garbage no index names, its lock is a dead process's.
    drop(p);
    let orphans = g.s3_list("gc/packs/");
    assert!(!orphans.is_empty());
    let dry = rok_json(&g, ["gc", s(&t.a), "--remote", "origin", "--dry-run"]);
    assert_eq!(dry["applied"], false);
    let planned: Vec<String> = dry["packs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    let mut want: Vec<String> = orphans
        .iter()
        .map(|k| k.trim_start_matches("gc/").to_string())
        .collect();
    want.sort();
    let mut got = planned.clone();
    got.sort();
    assert_eq!(got, want, "{dry}");
    assert_eq!(
        g.s3_list("gc/packs/").len(),
        orphans.len(),
        "a dry run deleted"
    );
    let applied = rok_json(&g, ["gc", s(&t.a), "--remote", "origin"]);
    assert_eq!(applied["applied"], true);
    assert_eq!(
        applied["packs"], dry["packs"],
        "the dry run planned something else"
    );
    assert!(g.s3_list("gc/packs/").is_empty());
    // A full push afterwards, and nothing left to collect.
    rok(&g, ["push", s(&t.a)]);
    let v = rok_json(&g, ["verify", s(&t.a), "--remote", "origin"]);
    assert!(v["findings"].as_array().unwrap().is_empty(), "{v}");
    assert_eq!(v["checkpoints"], 1);
    let again = rok_json(&g, ["gc", s(&t.a), "--remote", "origin", "--dry-run"]);
    assert!(again["packs"].as_array().unwrap().is_empty(), "{again}");
    assert!(again["records"].as_array().unwrap().is_empty(), "{again}");
}
