//! `restore` at every grain, through the binary: one file (as DEST, into a directory, over a
//! file that is moved aside), a symlink, a subtree back into its place (the old one kept in
//! `displaced/`), every root in place (and `recover` after an abort rolls all of them back
//! together), `--include`/`--exclude`, and a symlink an agent planted on the target's path;
//! a target below a missing directory named, every object read before the target's directory
//! is written, the bar's total, the files and bytes reported (hard links once), and a file's
//! bytes whatever they hold (text, a block repeated, zeros restored as a hole).

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

/// A target below a directory that is not there is named in one line, nothing made: `--to`
/// below a missing directory ("not found", the directory named), below a file (the component
/// that is not a directory named), and in place when the agent removed the directory holding
/// the entry ("gone") or put a file there (that error, not "gone").
#[test]
fn a_target_below_a_missing_directory_is_named_in_one_line() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);

    let missing = env.path("missing");
    let parent = missing.join("deeper");
    refused(
        1,
        restore_args(&env, &id, &["--to", s(&parent.join("out"))]),
        &[&format!("not found: directory {}", parent.display())],
    );
    assert!(!missing.exists());

    // Below a file: the first component that is not a directory is the one named.
    let file = env.path("plain");
    write(&file, b"a file");
    let line = refused(
        1,
        restore_args(&env, &id, &["--to", s(&file.join("x/y/out"))]),
        &["Not a directory"],
    );
    assert!(
        line.contains(&format!("{}: ", file.join("x").display())),
        "{line}"
    );
    assert_eq!(fs::read(&file).unwrap(), b"a file");

    // In place, the directory holding the entry removed: said so.
    fs::remove_dir_all(env.ws().join("sub")).unwrap();
    refused(
        1,
        restore_args(&env, &format!("{id}:ws/sub/b.txt"), &["--in-place"]),
        &[&format!(
            "{}: the directory holding it is gone",
            env.ws().join("sub").display()
        )],
    );
    assert!(!env.ws().join("sub").exists());
    // ... or replaced by a file: that is not "gone", and the file stays.
    write(&env.ws().join("sub"), b"a file now");
    let line = refused(
        1,
        restore_args(&env, &format!("{id}:ws/sub/b.txt"), &["--in-place"]),
        &["Not a directory"],
    );
    assert!(!line.contains("gone"), "{line}");
    assert_eq!(fs::read(env.ws().join("sub")).unwrap(), b"a file now");
}

/// The first chunk of the file at `spec`, as its hex id (read through the library: `ls` does
/// not show chunks).
fn chunk_of(env: &Env, spec: &str) -> String {
    let store = ckptfs::Store::open(&env.store).unwrap();
    let loc = ckptfs::history::walk::locate(&store, spec).unwrap();
    match loc.entry.unwrap().kind {
        ckptfs::store::tree::EntryKind::File { chunks } => chunks[0].id.to_hex(),
        _ => panic!("{spec} is not a file"),
    }
}

/// Every object a restore needs is read before the target's directory is touched: with a
/// chunk missing, the restore of the tree holding it fails and the directory the target would
/// be staged in is not even written (its mtime, set in the past, stays).
#[test]
fn a_missing_chunk_fails_a_restore_before_the_targets_directory_is_written() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    let chunk = chunk_of(&env, &format!("{id}:ws/sub/deeper/c.bin"));
    fs::remove_file(env.object_file(&chunk)).unwrap();
    let out = env.path("out");
    fs::create_dir(&out).unwrap();
    let past = 1_500_000_000_000_000_000;
    for (spec, dest) in [
        (id.clone(), out.join("dest")),
        (format!("{id}:ws/sub"), out.join("sub")),
    ] {
        set_mtime(&out, past);
        let line = refused(1, restore_args(&env, &spec, &["--to", s(&dest)]), &[]);
        assert!(
            line.contains(&chunk[..12]) || line.contains("not found"),
            "{line}"
        );
        let m = fs::metadata(&out).unwrap();
        assert_eq!(
            m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            past,
            "{spec}: the target's directory was written before the check failed"
        );
        assert!(named(&out, "").is_empty());
    }
}

/// A restore draws its bar against the bytes it will write, for a tree and for one file
/// (an empty total would draw none).
#[test]
fn a_restore_on_a_terminal_draws_a_bar_with_its_total() {
    let env = Env::new();
    write(&env.ws().join("d/big.bin"), &random_bytes(5, 2 << 20));
    write(&env.ws().join("d/small.txt"), b"small\n");
    let id = env.capture_id(&[]);
    for (i, spec) in [id.clone(), format!("{id}:ws/d/big.bin")]
        .iter()
        .enumerate()
    {
        let out = env.path(&format!("out-{i}"));
        let (code, text) = on_terminal(&["restore", &env.s(), spec, "--to", s(&out)]);
        assert_eq!(code, 0, "{spec}: {text}");
        assert!(
            text.contains("restore [") && text.contains("ETA"),
            "{spec}: no bar with a total:\n{text}"
        );
    }
}

/// A restore into a mounted workspace (the room itself, or a directory under it) is refused
/// in one line naming the workspace: it would write under a live overlay. Nothing is written.
#[test]
fn a_restore_under_a_mounted_workspace_is_refused() {
    let w = Workspace::new(|room| write(&room.join("a.txt"), b"a\n"));
    let id = w.checkpoint("one");
    let file = format!("{id}:ws/a.txt");
    write(&w.path("a.txt"), b"changed\n");
    for (spec, target) in [(&id, &w.room), (&file, &w.path("a.txt"))] {
        refused(
            1,
            ["restore", w.store(), spec, "--to", s(target)],
            &["under the mounted workspace main", "ckptfs switch"],
        );
    }
    assert_eq!(fs::read(w.path("a.txt")).unwrap(), b"changed\n");
    assert_eq!(
        fs::read_dir(&w.room).unwrap().count(),
        1,
        "the restore wrote beside a.txt"
    );
}

/// A linked file counts in the bar's total once (it is written once, its other names are
/// links), and advances the bar as any file: its bytes once, each of its names as a file.
#[test]
fn a_restore_bar_counts_a_linked_file() {
    let env = Env::new();
    write(&env.ws().join("l/one"), &random_bytes(3, 3 << 20));
    fs::hard_link(env.ws().join("l/one"), env.ws().join("l/two")).unwrap();
    write(&env.ws().join("small.txt"), b"small\n");
    let id = env.capture_id(&[]);
    let out = env.path("out");
    let (code, text) = on_terminal(&["restore", &env.s(), &id, "--to", s(&out)]);
    assert_eq!(code, 0, "{text}");
    let last = text
        .rsplit(['\r', '\n'])
        .find(|l| l.contains("restore ["))
        .unwrap_or_default();
    assert!(
        last.contains("3.00 MiB/3.00 MiB") && last.contains(", 3 files"),
        "last frame: {last:?}\n{text}"
    );
}

/// A restore reports what it wrote: each name as a file, a linked file's bytes once (its
/// other names are links to it again), for a tree and for one file.
#[test]
fn a_restore_reports_its_files_and_bytes_a_linked_files_bytes_once() {
    let env = Env::new();
    small_tree(env.ws());
    write(&env.ws().join("l/one"), &random_bytes(9, 70_000));
    fs::hard_link(env.ws().join("l/one"), env.ws().join("l/two")).unwrap();
    fs::hard_link(env.ws().join("l/one"), env.ws().join("sub/three")).unwrap();
    let id = env.capture_id(&[]);
    let out = env.path("out");
    let r = ok_json(restore_args(&env, &id, &["--to", s(&out)]));
    // a.txt (6 bytes), sub/b.txt (5), sub/deeper/c.bin (200,000) and three names of one file.
    assert_eq!(r["files"], 6, "{r}");
    assert_eq!(r["bytes"], 6 + 5 + 200_000 + 70_000, "{r}");
    let md = |p: &str| fs::metadata(out.join(p)).unwrap();
    for p in ["l/two", "sub/three"] {
        assert_eq!(md(p).ino(), md("l/one").ino(), "{p} is not a link");
    }
    assert_eq!(md("l/one").nlink(), 3);
    assert_eq!(md("a.txt").nlink(), 1);
    assert_eq!(
        fs::read(out.join("sub/three")).unwrap(),
        random_bytes(9, 70_000)
    );
    assert_trees_equal(env.ws(), &out);

    let r = ok_json(restore_args(
        &env,
        &format!("{id}:ws/sub/deeper/c.bin"),
        &["--to", s(&env.path("one"))],
    ));
    assert_eq!(
        (&r["files"], &r["bytes"]),
        (&1.into(), &200_000.into()),
        "{r}"
    );
}

/// A restored file has its bytes whatever they hold: a long text (no zero byte in any block),
/// a block of data repeated (the same chunk one after another: only a chunk of zeros may be
/// skipped as a hole when it recurs) with no zero byte either, and a run of zeros, which
/// becomes a hole (the file is restored sparse, its bytes still zeros).
#[test]
fn a_restored_file_keeps_text_and_repeated_blocks_and_its_zeros_as_a_hole() {
    let env = Env::new();
    let text: Vec<u8> = (0..20_000u32)
        .flat_map(|i| format!("line {i} of a text without zero bytes\n").into_bytes())
        .collect();
    // 4 KiB repeated over 8 MiB: the chunker cuts it into equal chunks, one after another.
    let block: Vec<u8> = random_bytes(11, 4096).iter().map(|b| b | 1).collect();
    let repeated = block.repeat(2048);
    let mut holed = random_bytes(12, 100_000);
    holed.extend(std::iter::repeat_n(0u8, 4 << 20));
    holed.extend(random_bytes(13, 100_000));
    write(&env.ws().join("text.txt"), &text);
    write(&env.ws().join("repeated.bin"), &repeated);
    write(&env.ws().join("holed.bin"), &holed);
    let id = env.capture_id(&[]);
    let out = env.path("out");
    ok_json(restore_args(&env, &id, &["--to", s(&out)]));
    assert!(fs::read(out.join("text.txt")).unwrap() == text, "text.txt");
    assert!(
        fs::read(out.join("repeated.bin")).unwrap() == repeated,
        "repeated.bin"
    );
    assert!(
        fs::read(out.join("holed.bin")).unwrap() == holed,
        "holed.bin"
    );
    let allocated = fs::metadata(out.join("holed.bin")).unwrap().blocks() * 512;
    assert!(
        allocated < 2 << 20,
        "holed.bin is not sparse: {allocated} bytes allocated"
    );
}

/// A staging directory that cannot be made (the target's directory is on a read-only
/// filesystem) fails the restore in one line at once: only a name already taken is tried
/// again under another name.
#[test]
fn a_restore_into_a_read_only_directory_fails_at_once() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    let ro = env.path("ro");
    fs::create_dir(&ro).unwrap();
    let o = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=1m", "ckptfs-test-ro"])
        .arg(&ro)
        .output()
        .unwrap();
    assert!(o.status.success(), "mount: {}", stderr(&o));
    let _g = MountGuard::new(&ro);
    refused(
        1,
        restore_args(&env, &id, &["--to", s(&ro.join("dest"))]),
        &["Read-only file system"],
    );
    assert!(named(&ro, "").is_empty());
    ok(["recover", &env.s()]);
}

/// Files recorded without inode numbers (a tree written before `CKT2`, or built without a
/// source file: every `ino` 0, no link count) are files of their own when restored, never
/// links to one another.
#[test]
fn files_recorded_without_inode_numbers_restore_as_files_of_their_own() {
    use ckptfs::store::tree::{Chunk, Tree};
    let env = Env::new();
    small_tree(env.ws());
    let good = env.capture_id(&[]);
    let file = |name: &[u8], data: &[u8]| {
        let id = ckptfs::ObjectId::parse(&put_raw_object(&env.store, data)).unwrap();
        let len = data.len() as u32;
        let mut t = one_file_tree(name, u64::from(len), vec![Chunk { id, len }]);
        t.entries.remove(0)
    };
    let tree = Tree {
        entries: vec![file(b"one", b"the first file"), file(b"two", b"the second")],
    };
    let tree = put_raw_object(&env.store, &tree.encode());
    let id = put_checkpoint_with_tree(&env.store, &good, "ws", &tree);
    let out = env.path("out");
    ok_json(restore_args(&env, &id, &["--to", s(&out)]));
    assert_eq!(fs::read(out.join("one")).unwrap(), b"the first file");
    assert_eq!(fs::read(out.join("two")).unwrap(), b"the second");
    assert_eq!(fs::metadata(out.join("two")).unwrap().nlink(), 1);
}
