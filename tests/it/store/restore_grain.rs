//! `restore` at every grain, through the binary: one file (as DEST, into a directory, over a
//! file that is moved aside), a symlink, a subtree back into its place (the old one kept in
//! `displaced/`), every root in place (and `recover` after an abort rolls all of them back
//! together), `--include`/`--exclude`, and a symlink an agent planted on the target's path.

use std::fs;
use std::os::unix::fs::{lchown, symlink, MetadataExt};
use std::path::{Path, PathBuf};

use crate::support::*;

/// Entries of `dir` whose name contains `part`.
fn named(dir: &Path, part: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().path())
                .filter(|p| p.file_name().unwrap().to_string_lossy().contains(part))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The entries of the store's `displaced/`.
fn displaced(env: &Env) -> Vec<PathBuf> {
    named(&env.store.join("displaced"), "")
}

/// A root whose `sub/f.bin` has a mode, an owner, an mtime and an xattr of its own.
fn attr_tree(ws: &Path) {
    small_tree(ws);
    let f = ws.join("sub/f.bin");
    write(&f, &random_bytes(7, 70_000));
    chmod(&f, 0o640);
    std::os::unix::fs::chown(&f, Some(1234), Some(5678)).unwrap();
    xattr::set(&f, "user.note", b"kept").unwrap();
    set_mtime(&f, 1_600_000_000_123_456_789);
}

fn restore_args(env: &Env, spec: &str, rest: &[&str]) -> Vec<String> {
    let mut v = vec!["restore".to_string(), env.s(), spec.to_string()];
    v.extend(rest.iter().map(|s| s.to_string()));
    v.push("--json".into());
    v
}

#[test]
fn one_file_restores_byte_and_attribute_exact_as_dest_and_into_a_directory() {
    let env = Env::new();
    attr_tree(env.ws());
    let id = env.capture_id(&[]);
    let model = snapshot(&env.ws().join("sub"))[b"f.bin".as_slice()].clone();

    // DEST a new path: the file is written as DEST.
    let out = env.path("out");
    fs::create_dir(&out).unwrap();
    let dest = out.join("renamed.bin");
    let r = ok_json(restore_args(
        &env,
        &format!("{id}:ws/sub/f.bin"),
        &["--to", s(&dest)],
    ));
    assert_eq!(r["kind"], "file", "{r}");
    assert!(r["moved_aside"].is_null());
    assert_eq!(snapshot(&out)[b"renamed.bin".as_slice()], model);

    // DEST an existing directory: into it, under the file's name.
    let into = env.path("into");
    fs::create_dir(&into).unwrap();
    ok_json(restore_args(
        &env,
        &format!("{id}:ws/sub/f.bin"),
        &["--to", s(&into)],
    ));
    assert_eq!(snapshot(&into)[b"f.bin".as_slice()], model);
    assert!(
        named(&into, ".ckptfs-").is_empty(),
        "staging left in {into:?}"
    );
    assert!(
        named(&out, ".ckptfs-").is_empty(),
        "staging left in {out:?}"
    );

    // Into the directory that holds the store itself (as /tmp often does): the file lands
    // beside the store, which it does not overlap; into the store it is refused.
    let beside = env.store.parent().unwrap().to_path_buf();
    ok_json(restore_args(
        &env,
        &format!("{id}:ws/sub/f.bin"),
        &["--to", s(&beside)],
    ));
    assert_eq!(snapshot(&beside)[b"f.bin".as_slice()], model);
    let err = fails(
        2,
        restore_args(&env, &format!("{id}:ws/sub/f.bin"), &["--to", &env.s()]),
    );
    assert!(err.contains("overlaps the store"), "{err}");
}

#[test]
fn one_file_over_an_existing_file_moves_that_file_aside() {
    let env = Env::new();
    attr_tree(env.ws());
    let id = env.capture_id(&[]);
    let out = env.path("out");
    let dest = out.join("f.bin");
    write(&dest, b"the user's newer file");
    let r = ok_json(restore_args(
        &env,
        &format!("{id}:ws/sub/f.bin"),
        &["--to", s(&dest)],
    ));
    assert_eq!(
        fs::read(&dest).unwrap(),
        fs::read(env.ws().join("sub/f.bin")).unwrap()
    );
    let aside = PathBuf::from(r["moved_aside"].as_str().expect("moved aside"));
    assert_eq!(aside.parent(), Some(out.as_path()));
    assert!(aside
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("f.bin.ckptfs-aside-"));
    assert_eq!(fs::read(&aside).unwrap(), b"the user's newer file");
    assert_eq!(named(&out, "ckptfs-aside"), vec![aside]);
}

#[test]
fn a_symlink_entry_restores_as_a_symlink() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    let out = env.path("out");
    fs::create_dir(&out).unwrap();
    let r = ok_json(restore_args(
        &env,
        &format!("{id}:ws/link"),
        &["--to", s(&out)],
    ));
    assert_eq!(r["kind"], "symlink", "{r}");
    let l = out.join("link");
    assert!(fs::symlink_metadata(&l).unwrap().file_type().is_symlink());
    assert_eq!(fs::read_link(&l).unwrap(), Path::new("sub/b.txt"));
}

#[test]
fn a_subtree_goes_back_into_its_place_and_the_old_one_into_displaced() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    let sub_before = snapshot(&env.ws().join("sub"));
    // The agent changes the subtree, and something outside it.
    write(&env.ws().join("sub/b.txt"), b"changed");
    write(&env.ws().join("sub/new.txt"), b"new");
    fs::remove_dir_all(env.ws().join("sub/deeper")).unwrap();
    write(&env.ws().join("a.txt"), b"changed outside sub");
    let changed = snapshot(&env.ws().join("sub"));

    let r = ok_json(restore_args(&env, &format!("{id}:ws/sub"), &["--in-place"]));
    assert_snapshots_equal(
        &sub_before,
        &snapshot(&env.ws().join("sub")),
        "sub in place",
    );
    // Only the subtree: the rest of the root is as the agent left it.
    assert_eq!(
        fs::read(env.ws().join("a.txt")).unwrap(),
        b"changed outside sub"
    );
    let aside = PathBuf::from(r["moved_aside"].as_str().expect("moved aside"));
    assert_eq!(displaced(&env), vec![aside.clone()]);
    assert_snapshots_equal(&changed, &snapshot(&aside), "old sub in displaced/");
    assert!(named(env.ws(), ".ckptfs-").is_empty());

    // --to the subtree's own place is the same in-place restore.
    write(&env.ws().join("sub/b.txt"), b"changed again");
    ok_json(restore_args(
        &env,
        &format!("{id}:ws/sub"),
        &["--to", s(&env.ws().join("sub"))],
    ));
    assert_snapshots_equal(
        &sub_before,
        &snapshot(&env.ws().join("sub")),
        "sub via --to",
    );
    assert_eq!(displaced(&env).len(), 2);

    // Anywhere else inside the root is still refused.
    let other = env.ws().join("elsewhere");
    refused(
        2,
        restore_args(&env, &format!("{id}:ws/sub"), &["--to", s(&other)]),
        &["inside root ws"],
    );
    assert!(!other.exists());
}

#[test]
fn every_root_goes_back_in_place_with_its_content_kept_in_displaced() {
    let env = Env::with_roots(&["a", "b"], &[]);
    small_tree(env.root("a"));
    write(&env.root("b").join("notes.md"), b"b's notes");
    let id = env.capture_id(&[]);
    let before_a = snapshot(env.root("a"));
    let before_b = snapshot(env.root("b"));
    write(&env.root("a").join("a.txt"), b"agent a");
    write(&env.root("b").join("notes.md"), b"agent b");
    let changed_a = snapshot(env.root("a"));

    let r = ok_json(restore_args(&env, &id, &["--in-place"]));
    assert_eq!(r["restored"].as_array().unwrap().len(), 2, "{r}");
    assert_snapshots_equal(&before_a, &snapshot(env.root("a")), "root a");
    assert_snapshots_equal(&before_b, &snapshot(env.root("b")), "root b");
    let d = displaced(&env);
    assert_eq!(d.len(), 2, "{d:?}");
    let a_aside = d
        .iter()
        .find(|p| p.to_string_lossy().ends_with("-restore-a"))
        .unwrap();
    assert_snapshots_equal(&changed_a, &snapshot(a_aside), "root a's old content");
    let b_aside = d
        .iter()
        .find(|p| p.to_string_lossy().ends_with("-restore-b"))
        .unwrap();
    assert_eq!(fs::read(b_aside.join("notes.md")).unwrap(), b"agent b");
}

#[test]
fn an_aborted_in_place_restore_of_every_root_is_rolled_back_all_together() {
    let env = Env::with_roots(&["a", "b"], &[]);
    small_tree(env.root("a"));
    write(&env.root("b").join("notes.md"), b"b's notes");
    let id = env.capture_id(&[]);
    let restored = (snapshot(env.root("a")), snapshot(env.root("b")));
    let args = restore_args(&env, &id, &["--in-place"]);

    let mut took_back = false;
    let mut completed = false;
    for n in 1..=60u64 {
        write(
            &env.root("a").join("a.txt"),
            format!("agent {n}").as_bytes(),
        );
        write(
            &env.root("b").join("notes.md"),
            format!("agent {n}").as_bytes(),
        );
        let original = (snapshot(env.root("a")), snapshot(env.root("b")));
        let kept_before = displaced(&env).len();
        let o = run_fault(&args, "abort", n);
        if o.status.success() {
            completed = true;
            break;
        }
        assert!(
            stderr(&o).contains("injected abort"),
            "n={n}: {}",
            stderr(&o)
        );
        let rep = ok_json(["recover", &env.s()]);
        took_back |= rep["actions"].to_string().contains("took the restored");
        let now = (snapshot(env.root("a")), snapshot(env.root("b")));
        if now == original {
            // Rolled back: nothing of the agent's work was left in displaced/ either.
            assert_eq!(displaced(&env).len(), kept_before, "n={n}: {rep}");
        } else {
            // Crashed once every root was in: both restored, both originals kept.
            assert_snapshots_equal(&restored.0, &now.0, &format!("n={n}: root a"));
            assert_snapshots_equal(&restored.1, &now.1, &format!("n={n}: root b"));
            assert_eq!(displaced(&env).len(), kept_before + 2, "n={n}: {rep}");
            write(&env.root("a").join("a.txt"), b"reset");
        }
        for r in ["a", "b"] {
            let parent = env.root(r).parent().unwrap();
            assert!(
                named(parent, ".ckptfs-restore").is_empty(),
                "n={n}: staging left"
            );
        }
        ok(["verify", &env.s()]);
    }
    assert!(completed, "the restore never completed within 60 I/O steps");
    assert!(
        took_back,
        "no crash point fell between swapping in root a and root b"
    );
}

#[test]
fn include_and_exclude_filter_a_directory_restore() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    let files = |dir: &Path| -> Vec<String> {
        snapshot(dir)
            .into_iter()
            .filter(|(k, _)| !k.is_empty())
            .map(|(k, v)| format!("{}:{}", lossy(&k), v.kind))
            .collect()
    };
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--include", "*.txt"],
            &["a.txt:file", "sub:dir", "sub/b.txt:file"],
        ),
        (&["--exclude", "sub"], &["a.txt:file", "link:symlink"]),
        (
            &["--include", "deeper"],
            &["sub:dir", "sub/deeper:dir", "sub/deeper/c.bin:file"],
        ),
        (
            &["--include", "sub/**", "--exclude", "*.bin"],
            &["sub:dir", "sub/b.txt:file", "sub/deeper:dir"],
        ),
    ];
    for (i, (flags, want)) in cases.iter().enumerate() {
        let out = env.path(&format!("out-{i}"));
        let mut rest = vec!["--to", s(&out)];
        rest.extend_from_slice(flags);
        ok_json(restore_args(&env, &id, &rest));
        assert_eq!(files(&out), *want, "{flags:?}");
        if want.contains(&"sub/b.txt:file") {
            assert_eq!(fs::read(out.join("sub/b.txt")).unwrap(), b"beta\n");
        }
    }
    // A filter is for directories.
    let out = env.path("out-file");
    refused(
        2,
        restore_args(
            &env,
            &format!("{id}:ws/a.txt"),
            &["--to", s(&out), "--include", "*"],
        ),
        &["--include"],
    );
}

#[test]
fn a_symlink_planted_on_the_targets_path_is_never_followed() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    let t = open_tmp();
    let victim = t.path().join("victim");
    fs::create_dir(&victim).unwrap();
    let room = t.path().join("room");
    fs::create_dir(&room).unwrap();
    chown_tree(&room, NOBODY);
    // The agent's symlink: room/out -> the victim directory.
    let out = room.join("out");
    symlink(&victim, &out).unwrap();
    lchown(&out, Some(NOBODY), Some(NOBODY)).unwrap();

    // The target's parent is the planted link: refused, for a file and for a directory.
    for (spec, to) in [
        (format!("{id}:ws/a.txt"), out.join("a.txt")),
        (format!("{id}:ws/sub"), out.join("sub")),
        (id.clone(), out.join("tree")),
    ] {
        refused(
            2,
            restore_args(&env, &spec, &["--to", s(&to)]),
            &["symlink", "not followed"],
        );
    }
    // The link itself as DEST of a file: moved aside as a link, never written through.
    let r = ok_json(restore_args(
        &env,
        &format!("{id}:ws/a.txt"),
        &["--to", s(&out)],
    ));
    assert!(fs::symlink_metadata(&out).unwrap().is_file());
    assert_eq!(fs::read(&out).unwrap(), b"alpha\n");
    let aside = PathBuf::from(r["moved_aside"].as_str().unwrap());
    assert_eq!(fs::read_link(&aside).unwrap(), victim);
    assert_eq!(fs::symlink_metadata(&aside).unwrap().uid(), NOBODY);
    assert!(
        fs::read_dir(&victim).unwrap().next().is_none(),
        "something was written through the agent's symlink"
    );
}

/// An in-place restore of a root on another filesystem than the store (the root in `/tmp`,
/// the store on the test's tmpfs): what it replaces cannot be renamed into `displaced/`
/// (EXDEV), so it is set aside beside the root.
#[test]
fn a_root_on_another_filesystem_than_the_store_is_set_aside_beside_it() {
    let t = tempdir();
    let far = tempfile::Builder::new()
        .prefix("ckptfs-test-")
        .tempdir_in("/tmp")
        .unwrap();
    let dev = |p: &Path| fs::metadata(p).unwrap().dev();
    if dev(far.path()) == dev(t.path()) {
        eprintln!(
            "skipped: /tmp is on the same filesystem as {}",
            t.path().display()
        );
        return;
    }
    let room = far.path().join("room");
    small_tree(&room);
    let store = t.path().join("store");
    ok(["init", s(&store), "--root", &format!("far={}", s(&room))]);
    let id = capture(&store, &[]);
    let before = snapshot(&room);
    write(&room.join("a.txt"), b"changed");
    let changed = snapshot(&room);
    let r = ok_json([
        "restore",
        s(&store),
        &format!("{id}:far"),
        "--in-place",
        "--json",
    ]);
    assert_snapshots_equal(&before, &snapshot(&room), "restored");
    let aside = named(far.path(), "room.ckptfs-aside-");
    assert_eq!(aside.len(), 1, "{r}");
    assert_snapshots_equal(&changed, &snapshot(&aside[0]), "set aside");
    assert!(named(&store.join("displaced"), "").is_empty(), "{r}");
}

/// A directory restored over an empty directory takes its place: nothing is set aside.
#[test]
fn a_directory_restored_over_an_empty_one_sets_nothing_aside() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    let out = env.path("out");
    fs::create_dir_all(out.join("dest")).unwrap();
    let r = ok_json(restore_args(&env, &id, &["--to", s(&out.join("dest"))]));
    assert!(r["moved_aside"].is_null(), "{r}");
    assert!(named(&out, "ckptfs-aside").is_empty(), "{r}");
    assert_trees_equal(env.ws(), &out.join("dest"));
}

/// A restore that fails at any step removes what it staged: no staging directory is left
/// beside the target (what it cannot roll back itself, `recover` does).
#[test]
fn a_restore_failing_at_any_step_leaves_no_staging_directory() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    let work = env.path("work");
    let dest = work.join("dest");
    write(&dest.join("original.txt"), b"the user's data");
    let (store, to) = (env.s(), s(&dest).to_string());
    let mut failed = 0;
    for n in 1..=80u64 {
        let o = run_fault(["restore", &store, &id, "--to", &to], "fail", n);
        if o.status.success() {
            break;
        }
        failed += 1;
        if env.store.join("run/RUNNING.json").exists() {
            ok(["recover", &store]);
        }
        assert!(
            named(&work, ".ckptfs-restore-").is_empty(),
            "fail:{n}: staging left: {}",
            stderr(&o)
        );
    }
    assert!(failed > 3, "the restore never failed");
}
