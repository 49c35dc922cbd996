//! Capture then copy-restore must give back the tree byte for byte: content, modes, mtimes
//! (ns), owners, symlinks (relative, dangling, absolute), xattrs, empty dirs, hidden files,
//! awkward names and sparse files. Run for both compression settings.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::Path;

use crate::support::*;

/// Builds a tree exercising everything a restore must reproduce.
fn rich_tree(root: &Path) {
    write(&root.join("plain.txt"), b"hello\n");
    write(&root.join("empty"), b"");
    write(&root.join(".hidden"), b"dot file\n");
    write(&root.join(".hidden-dir/.inner"), b"x");
    write(&root.join("with space.txt"), b"spaces");
    write(&root.join("new\nline"), b"newline in name");
    write(&root.join("ünïcødé-日本語.md"), "utf-8 name".as_bytes());
    let long = "L".repeat(255);
    write(&root.join(&long), b"255-byte name");
    // Non-UTF-8 name bytes.
    write(
        &root.join(std::ffi::OsStr::from_bytes(b"latin1-\xe9\xff")),
        b"raw bytes",
    );
    // Chunk-size boundaries (64 KiB min) and a multi-chunk file.
    write(&root.join("sizes/min"), &random_bytes(1, 64 * 1024));
    write(&root.join("sizes/min+1"), &random_bytes(2, 64 * 1024 + 1));
    write(
        &root.join("sizes/big"),
        &random_bytes(3, 5 * 1024 * 1024 + 17),
    );
    write(&root.join("sizes/zeros"), &vec![0u8; 300_000]);
    // Modes: executable, read-only, setuid/setgid/sticky, a 0700 dir and a read-only dir.
    write(&root.join("modes/exec.sh"), b"#!/bin/sh\n");
    chmod(&root.join("modes/exec.sh"), 0o755);
    write(&root.join("modes/ro"), b"ro");
    chmod(&root.join("modes/ro"), 0o444);
    write(&root.join("modes/suid"), b"s");
    chmod(&root.join("modes/suid"), 0o4755);
    write(&root.join("modes/sgid"), b"g");
    chmod(&root.join("modes/sgid"), 0o2750);
    write(&root.join("modes/none"), b"n");
    chmod(&root.join("modes/none"), 0o000);
    fs::create_dir(root.join("modes/private")).unwrap();
    chmod(&root.join("modes/private"), 0o700);
    fs::create_dir(root.join("modes/sticky")).unwrap();
    chmod(&root.join("modes/sticky"), 0o1777);
    write(&root.join("modes/readonly-dir/f"), b"inside ro dir");
    // Owners (the tests run as root in CI; as another user chown fails and we skip it).
    write(&root.join("owned"), b"owned");
    let _maybe = std::os::unix::fs::lchown(root.join("owned"), Some(1234), Some(5678));
    // Empty directories, nested.
    fs::create_dir_all(root.join("emptydir/nested-empty")).unwrap();
    // Symlinks: relative file, relative dir, dangling, absolute, to a parent.
    symlink("plain.txt", root.join("ln-rel")).unwrap();
    symlink("sizes", root.join("ln-dir")).unwrap();
    symlink("does/not/exist", root.join("ln-dangling")).unwrap();
    symlink("/etc/hostname", root.join("ln-abs")).unwrap();
    symlink("../..", root.join("modes/ln-up")).unwrap();
    let _maybe = std::os::unix::fs::lchown(root.join("ln-rel"), Some(42), Some(43));
    // xattrs on a file, a dir, and (trusted.* as root) on a symlink.
    xattr::set(root.join("plain.txt"), "user.note", b"a note").unwrap();
    xattr::set(root.join("plain.txt"), "user.bin", &[0u8, 1, 2, 255]).unwrap();
    xattr::set(root.join("emptydir"), "user.dir", b"on a dir").unwrap();
    xattr::set(root, "user.rootdir", b"on the root itself").unwrap();
    let _maybe = xattr::set(root.join("ln-abs"), "trusted.link", b"on a link");
    // Sparse: 8 MiB with data only at 1 MiB and at the end, plus one ending in a hole.
    {
        let f = fs::File::create(root.join("sparse")).unwrap();
        f.set_len(8 * 1024 * 1024).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_at(b"data in the middle", 1024 * 1024).unwrap();
        f.write_at(b"tail", 8 * 1024 * 1024 - 4).unwrap();
        let g = fs::File::create(root.join("sparse-tail-hole")).unwrap();
        g.write_at(b"head", 0).unwrap();
        g.set_len(3 * 1024 * 1024).unwrap();
    }
    // Read-only dir last (so we can still create inside it first).
    chmod(&root.join("modes/readonly-dir"), 0o555);
    // Distinct mtimes with nanoseconds on every entry, children before parents.
    let mut paths: Vec<_> = snapshot(root).into_keys().collect();
    paths.sort_by_key(|p| std::cmp::Reverse(p.iter().filter(|&&b| b == b'/').count()));
    for (i, rel) in paths.iter().enumerate() {
        let p = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(std::ffi::OsStr::from_bytes(rel))
        };
        set_mtime(
            &p,
            1_600_000_000_000_000_000 + i as i64 * 1_000_001_003 + 123_456_789,
        );
    }
}

fn round_trip(compression: &str) {
    let env = Env::with_roots(&["ws"], &["--compression", compression]);
    rich_tree(env.ws());
    let before = snapshot(env.ws());
    let id = env.capture_id(&["-m", "rich"]);
    // Capture must not touch the source.
    assert_snapshots_equal(&before, &snapshot(env.ws()), "source after capture");

    let out = env.path("restored");
    let r = env.restore(&id, &out);
    assert_eq!(
        r["files"].as_u64(),
        Some(before.values().filter(|s| s.kind == "file").count() as u64)
    );
    assert_trees_equal(env.ws(), &out);

    // Sparse files stay sparse: far less allocated than their size.
    for name in ["sparse", "sparse-tail-hole"] {
        let p = out.join(name);
        let size = fs::metadata(&p).unwrap().len();
        assert!(
            allocated(&p) < size / 4,
            "{name}: {} bytes allocated for a {size}-byte sparse file",
            allocated(&p)
        );
    }

    // cat and ls agree with the source.
    let o = run(["cat", &env.s(), &format!("{id}:ws/sizes/big")]);
    assert!(o.status.success());
    assert!(o.stdout == fs::read(env.ws().join("sizes/big")).unwrap());
    let ls = ok_json(["ls", &env.s(), &format!("{id}:ws"), "-r"]);
    let listed: Vec<&str> = ls
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(listed.contains(&"new\nline"));
    assert!(listed.contains(&"emptydir/nested-empty"));
    let dangling = ls
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "ln-dangling")
        .unwrap();
    assert_eq!(dangling["type"], "symlink");
    assert_eq!(dangling["target"], "does/not/exist");
}

#[test]
fn round_trip_uncompressed() {
    round_trip("none");
}

#[test]
fn round_trip_zstd() {
    round_trip("zstd");
}

#[test]
fn restore_subdirectory_and_over_existing_dir() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    // A subdirectory as its own tree.
    let sub = env.path("sub-only");
    env.restore(&format!("{id}:ws/sub"), &sub);
    assert_trees_equal(&env.ws().join("sub"), &sub);

    // Restoring over a non-empty directory moves it aside, never deletes it.
    let dest = env.path("dest");
    write(&dest.join("precious.txt"), b"keep me");
    let before = snapshot(&dest);
    let r = env.restore(&id, &dest);
    assert_trees_equal(env.ws(), &dest);
    let aside = r["moved_aside"].as_str().expect("moved_aside reported");
    assert_snapshots_equal(&before, &snapshot(Path::new(aside)), "moved-aside dir");

    // An existing empty directory is simply replaced.
    let empty = env.path("empty-dest");
    fs::create_dir(&empty).unwrap();
    let r = env.restore(&id, &empty);
    assert!(r["moved_aside"].is_null());
    assert_trees_equal(env.ws(), &empty);
    // No staging directories are left behind.
    let leftovers: Vec<_> = fs::read_dir(env.tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".ckptfs-restore"))
        .collect();
    assert!(leftovers.is_empty(), "staging left behind: {leftovers:?}");
}

#[test]
fn restore_to_the_root_path_itself_brings_back_old_state() {
    let env = Env::new();
    small_tree(env.ws());
    let before = snapshot(env.ws());
    let id = env.capture_id(&[]);
    fs::remove_file(env.ws().join("a.txt")).unwrap();
    write(&env.ws().join("sub/b.txt"), b"changed");
    let r = env.restore(&id, env.ws());
    assert_snapshots_equal(&before, &snapshot(env.ws()), "root after restore");
    // The changed state was moved aside, not lost.
    let aside = Path::new(r["moved_aside"].as_str().unwrap());
    assert_eq!(fs::read(aside.join("sub/b.txt")).unwrap(), b"changed");
}
