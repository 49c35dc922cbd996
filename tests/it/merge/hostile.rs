//! A merge of branches an agent crafted: symlinks where the other side has files or
//! directories, symlinks to secrets, and files too big to merge. The merge reads only the
//! store (never a path a symlink names), keeps symlinks as symlinks, and bounds what it reads.

use std::fs;
use std::os::unix::fs::symlink;

use crate::support::*;

#[test]
fn symlinks_planted_on_one_side_are_merged_as_links_never_followed() {
    let t = tempdir();
    let secret = t.path().join("secret");
    fs::create_dir(&secret).expect("mkdir");
    write(&secret.join("key"), b"SECRET-KEY\n");
    let env = Env::new();
    write(&env.ws().join("notes.md"), b"a\nb\nc\n");
    write(&env.ws().join("dir/file"), b"f\n");
    write(&env.ws().join("plain"), b"p\n");
    env.capture_id(&[]);
    ok(["fork", &env.s(), "main", "feat"]);
    write(&env.ws().join("notes.md"), b"A\nb\nc\n");
    write(&env.ws().join("dir/ours"), b"ours\n");
    env.capture_id(&[]);
    // Theirs: the text file, the directory and a plain file become links to the secret.
    fs::remove_file(env.ws().join("notes.md")).expect("rm");
    symlink(secret.join("key"), env.ws().join("notes.md")).expect("symlink");
    fs::remove_dir_all(env.ws().join("dir")).expect("rm dir");
    symlink(&secret, env.ws().join("dir")).expect("symlink");
    fs::remove_file(env.ws().join("plain")).expect("rm");
    symlink("../../secret/key", env.ws().join("plain")).expect("symlink");
    env.capture_id(&["-b", "feat"]);

    let o = run(["merge", &env.s(), "feat", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let kinds: Vec<(&str, &str)> = r["conflicts"]
        .as_array()
        .expect("conflicts")
        .iter()
        .filter_map(|c| Some((c["path"].as_str()?, c["kind"].as_str()?)))
        .collect();
    assert!(kinds.contains(&("ws/notes.md", "type")), "{kinds:?}");
    assert!(kinds.contains(&("ws/dir", "type")), "{kinds:?}");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("SECRET-KEY"));

    // Taking their side records the links as links; the untouched one came over cleanly.
    ok(["merge", &env.s(), "feat", "--take", "theirs"]);
    let ls = ok(["ls", &env.s(), "main:ws"]);
    assert!(ls.contains("notes.md -> "), "{ls}");
    assert!(ls.contains("plain -> ../../secret/key"), "{ls}");
    let to = env.path("restored");
    env.restore("main", &to);
    let walk = contents(&to);
    assert!(
        walk.values()
            .all(|v| !String::from_utf8_lossy(v).contains("SECRET-KEY")),
        "the secret's bytes were copied into the merge"
    );
    ok(["verify", &env.s()]);
}

#[test]
fn files_too_big_for_a_driver_are_a_conflict_not_read() {
    let env = Env::new();
    // 65 MiB of text: over the text driver's 64 MiB bound.
    let line = b"a line of a very large text file that both sides edit\n";
    let big: Vec<u8> = line.iter().copied().cycle().take(65 << 20).collect();
    write(&env.ws().join("big.txt"), &big);
    env.capture_id(&[]);
    ok(["fork", &env.s(), "main", "feat"]);
    let mut ours = big.clone();
    ours[0] = b'A';
    write(&env.ws().join("big.txt"), &ours);
    env.capture_id(&[]);
    let mut theirs = big;
    let n = theirs.len();
    theirs[n - 2] = b'Z';
    write(&env.ws().join("big.txt"), &theirs);
    env.capture_id(&["-b", "feat"]);
    let st = env.s();
    let (o, finished) = run_bounded(
        ["merge", &st, "feat", "--json"],
        std::time::Duration::from_secs(120),
    );
    assert!(finished, "the merge hung");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("too large to merge as text"), "{out}");
}
