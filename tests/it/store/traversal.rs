//! Path traversal: a tree object with an entry named `..`, `.`, empty, or containing `/` or
//! NUL is rejected when decoded (ls, cat, restore, verify), and restore never writes outside
//! DIR even when DIR, or what sits at DIR, contains symlinks.

use std::fs;
use std::os::unix::fs::symlink;

use crate::support::*;
use ckptfs::store::tree::{Chunk, Entry, EntryKind, Tree};
use ckptfs::ObjectId;

fn file_entry(name: &[u8], chunk: ObjectId, len: u32) -> Entry {
    Entry {
        name: name.to_vec(),
        kind: EntryKind::File {
            chunks: vec![Chunk { id: chunk, len }],
        },
        mode: 0o644,
        uid: 0,
        gid: 0,
        mtime_ns: 0,
        size: u64::from(len),
        xattrs: vec![],
        ctime_ns: 0,
        ino: 0,
        nlink: 0,
    }
}

#[test]
fn bad_entry_names_are_rejected_on_decode() {
    let env = Env::new();
    small_tree(env.ws());
    let good = env.capture_id(&[]);
    let payload = b"escaped!";
    let chunk = put_raw_object(&env.store, payload);
    let chunk = ObjectId::parse(&chunk).unwrap();

    let bad_names: [&[u8]; 6] = [b"..", b".", b"", b"../../etc/evil", b"a/b", b"nul\0byte"];
    for bad in bad_names {
        // The bad name directly in the root tree...
        let tree = Tree {
            entries: vec![file_entry(bad, chunk, payload.len() as u32)],
        };
        let t1 = put_raw_object(&env.store, &tree.encode());
        // ...and one level down, below a valid directory.
        let parent = Tree {
            entries: vec![Entry {
                name: b"sub".to_vec(),
                kind: EntryKind::Dir {
                    tree: ObjectId::parse(&t1).unwrap(),
                    subdirs: 0,
                },
                mode: 0o755,
                uid: 0,
                gid: 0,
                mtime_ns: 0,
                size: 1,
                xattrs: vec![],
                ctime_ns: 0,
                ino: 0,
                nlink: 0,
            }],
        };
        let t2 = put_raw_object(&env.store, &parent.encode());
        for tree in [&t1, &t2] {
            let c = put_checkpoint_with_tree(&env.store, &good, "ws", tree);
            let what = format!("name {:?} in tree {}", lossy(bad), &tree[..8]);
            let err = fails(1, ["ls", &env.s(), &c, "-r"]);
            assert!(err.contains("not a valid file name"), "{what}: {err}");
            let dest = env.path("dest");
            let err = fails(
                1,
                ["restore", &env.s(), &c, "--to", &dest.display().to_string()],
            );
            assert!(err.contains("not a valid file name"), "{what}: {err}");
            assert!(!dest.exists(), "{what}: restore created DIR");
            // Nothing appeared next to DIR or above it.
            let names: Vec<String> = fs::read_dir(env.tmp.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            let mut names = names;
            names.sort();
            assert_eq!(names, vec!["root-ws", "store"], "{what}");
            assert!(!std::path::Path::new("/etc/evil").exists());
            let o = run(["verify", &env.s(), &c, "--json"]);
            assert_eq!(o.status.code(), Some(1), "{what}: verify accepted it");
            let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            // The finding names the bad tree (t1 in both cases) and where it is used.
            assert_eq!(r["findings"][0]["object"], t1.as_str(), "{what}: {r}");
            let used = r["findings"][0]["used_by"][0].as_str().unwrap().to_string();
            let want = if *tree == t1 { ":ws/" } else { ":ws/sub/" };
            assert!(used.ends_with(want), "{what}: {r}");
            assert_eq!(r["findings"][0]["problem"], "corrupt", "{what}");
            fs::remove_file(env.store.join("checkpoints").join(&c)).unwrap();
        }
    }
    // The `..` spelled in a CLI path is refused too.
    let err = fails(2, ["cat", &env.s(), &format!("{good}:ws/sub/../a.txt")]);
    assert!(err.contains(".."), "{err}");
}

#[test]
fn restore_never_writes_through_symlinks_at_dir() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    let victim = env.path("victim");
    write(&victim.join("b.txt"), b"victim's file");
    write(&victim.join("a.txt"), b"victim's a");
    let victim_before = snapshot(&victim);

    // DIR itself is a symlink to the victim: it is moved aside as a link, not followed.
    let dest = env.path("dest-link");
    symlink(&victim, &dest).unwrap();
    let r = env.restore(&id, &dest);
    assert!(fs::symlink_metadata(&dest).unwrap().is_dir());
    assert_trees_equal(env.ws(), &dest);
    assert_snapshots_equal(
        &victim_before,
        &snapshot(&victim),
        "victim (DIR was a link)",
    );
    let aside = r["moved_aside"].as_str().unwrap();
    assert!(fs::symlink_metadata(aside)
        .unwrap()
        .file_type()
        .is_symlink());

    // DIR contains a symlink where the checkpoint has a directory: the restore stages a
    // fresh tree, so nothing goes through the link.
    let dest = env.path("dest-with-links");
    fs::create_dir(&dest).unwrap();
    symlink(&victim, dest.join("sub")).unwrap();
    symlink(victim.join("a.txt"), dest.join("a.txt")).unwrap();
    env.restore(&id, &dest);
    assert_trees_equal(env.ws(), &dest);
    assert_snapshots_equal(
        &victim_before,
        &snapshot(&victim),
        "victim (links inside DIR)",
    );

    // A checkpoint whose symlinks point outside restores them as links, never following.
    let ws = env.ws();
    symlink(&victim, ws.join("out-link")).unwrap();
    let id2 = env.capture_id(&[]);
    let dest = env.path("dest-2");
    env.restore(&id2, &dest);
    assert_eq!(fs::read_link(dest.join("out-link")).unwrap(), victim);
    assert_snapshots_equal(
        &victim_before,
        &snapshot(&victim),
        "victim (links in checkpoint)",
    );
}
