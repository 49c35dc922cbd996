//! Unit tests of `atomic`: what each write does to the filesystem. The fault hook itself is
//! driven by `CKPTFS_FAULT` in the binary's tests (tests/it), since the environment is
//! shared by parallel unit tests.

use super::*;
use std::os::unix::fs::PermissionsExt;

fn mode_of(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn every_fault_point_counts_one_step() {
    let before = io_steps();
    fault_point("test").unwrap();
    fault_point("test").unwrap();
    // Other tests count their steps too: at least ours.
    assert!(io_steps() >= before + 2, "{before} then {}", io_steps());
}

#[test]
fn temp_names_are_fresh_and_name_their_process() {
    let dir = Path::new("/some/dir");
    let a = temp_path(dir, "obj");
    let b = temp_path(dir, "obj");
    assert_ne!(a, b);
    assert_eq!(a.parent(), Some(dir));
    let name = a.file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with(".tmp-obj-"), "{name}");
    assert_eq!(temp_owner_pid(name), Some(std::process::id()));
    // A stem with dashes: the pid is the last dash-separated part.
    assert_eq!(temp_owner_pid(".tmp-a-b-4321.7"), Some(4321));
    for other in [
        "obj",
        ".tmp-obj",
        ".tmp-obj-4321",
        ".tmp-obj-4321.x",
        ".tmp-obj-x.1",
        "tmp-obj-4321.1",
    ] {
        assert_eq!(temp_owner_pid(other), None, "{other}");
    }
}

#[test]
fn new_files_hold_their_bytes_and_mode_and_are_never_written_over() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("f");
    write_new(&p, b"first", 0o640).unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"first");
    assert_eq!(mode_of(&p), 0o640);
    assert!(write_new(&p, b"second", 0o640).is_err());
    assert_eq!(fs::read(&p).unwrap(), b"first");

    let early = t.path().join("early");
    write_new_early(&early, &[7u8; 10_000], 0o444).unwrap();
    assert_eq!(fs::read(&early).unwrap(), vec![7u8; 10_000]);
    assert_eq!(mode_of(&early), 0o444);
    assert!(write_new_early(&early, b"again", 0o444).is_err());
    assert_eq!(fs::read(&early).unwrap(), vec![7u8; 10_000]);

    // Not through a symlink either (O_NOFOLLOW).
    let target = t.path().join("target");
    std::os::unix::fs::symlink(&target, t.path().join("link")).unwrap();
    assert!(write_new(&t.path().join("link"), b"x", 0o600).is_err());
    assert!(!target.exists());
}

#[test]
fn replace_publishes_the_new_bytes_and_leaves_no_temp_file() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("ref");
    write_atomic_replace(&p, b"one", 0o600).unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"one");
    write_atomic_replace(&p, b"two", 0o644).unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"two");
    assert_eq!(mode_of(&p), 0o644);
    write_atomic_replace_volatile(&p, b"three", 0o600).unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"three");
    assert_eq!(names_in(t.path()), ["ref"]);

    // A failure (the destination is a non-empty directory) removes the temp file.
    let d = t.path().join("dir");
    fs::create_dir(&d).unwrap();
    fs::write(d.join("x"), b"x").unwrap();
    assert!(write_atomic_replace(&d, b"no", 0o600).is_err());
    assert!(write_atomic_replace_volatile(&d, b"no", 0o600).is_err());
    assert_eq!(names_in(t.path()), ["dir", "ref"]);
    // A path without a parent is refused.
    assert!(write_atomic_replace(Path::new("/"), b"no", 0o600).is_err());
}

#[test]
fn new_publishes_once_and_never_replaces() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("record");
    assert!(write_atomic_new(&p, b"one", 0o444).unwrap());
    assert_eq!(fs::read(&p).unwrap(), b"one");
    assert_eq!(mode_of(&p), 0o444);
    assert!(!write_atomic_new(&p, b"two", 0o444).unwrap());
    assert_eq!(fs::read(&p).unwrap(), b"one");
    assert_eq!(names_in(t.path()), ["record"]);

    // publish_new: moves the temp file to a free name; else removes it and says so.
    let tmp = t.path().join("tmp");
    fs::write(&tmp, b"new").unwrap();
    let dest = t.path().join("dest");
    assert!(publish_new(&tmp, &dest).unwrap());
    assert_eq!(fs::read(&dest).unwrap(), b"new");
    assert!(!tmp.exists());
    fs::write(&tmp, b"other").unwrap();
    assert!(!publish_new(&tmp, &dest).unwrap());
    assert_eq!(fs::read(&dest).unwrap(), b"new");
    assert!(!tmp.exists());
    // A missing temp file is an error, not "already there".
    assert!(publish_new(&tmp, &t.path().join("dest2")).is_err());
}

#[test]
fn removal_is_idempotent_but_other_errors_are_errors() {
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("f");
    fs::write(&f, b"x").unwrap();
    remove_file(&f).unwrap();
    assert!(!f.exists());
    remove_file(&f).unwrap();
    // unlink of a directory fails (EISDIR): not swallowed as if it were missing.
    let d = t.path().join("d");
    fs::create_dir_all(d.join("sub")).unwrap();
    fs::write(d.join("sub/f"), b"x").unwrap();
    assert!(remove_file(&d).is_err());
    assert!(d.exists());

    remove_dir_all(&d).unwrap();
    assert!(!d.exists());
    remove_dir_all(&d).unwrap();
    remove_dir_all(&t.path().join("missing/below")).unwrap();
    assert!(remove_dir_all(Path::new("/")).is_err());
}

#[test]
fn rename_and_private_dirs() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    fs::write(&a, b"x").unwrap();
    rename(&a, &b).unwrap();
    assert!(!a.exists());
    assert_eq!(fs::read(&b).unwrap(), b"x");
    assert!(rename(&a, &b).is_err());

    let deep = t.path().join("p/q/r");
    create_private_dir_all(&deep).unwrap();
    assert!(deep.is_dir());
    assert_eq!(mode_of(&deep), 0o700);
    assert_eq!(mode_of(&t.path().join("p")), 0o700);
    create_private_dir_all(&deep).unwrap();
    assert!(create_private_dir_all(&b.join("below_a_file")).is_err());
}

#[test]
fn syncs_report_a_path_they_cannot_open() {
    let t = tempfile::tempdir().unwrap();
    sync_path(t.path()).unwrap();
    sync_filesystem(t.path()).unwrap();
    let missing = t.path().join("missing");
    assert!(sync_path(&missing).is_err());
    assert!(sync_filesystem(&missing).is_err());
}

#[test]
fn append_line_adds_lines_to_a_private_file() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("log");
    append_line(&p, "one").unwrap();
    append_line_with(&p, "two", false).unwrap();
    append_line(&p, "three").unwrap();
    assert_eq!(fs::read_to_string(&p).unwrap(), "one\ntwo\nthree\n");
    assert_eq!(mode_of(&p), 0o600);
    assert!(append_line(&t.path().join("missing/log"), "x").is_err());
}
