//! Unit tests of `safe`.

use super::*;
use std::os::unix::fs::MetadataExt;

#[test]
fn names_are_single_components() {
    for bad in ["", ".", "..", "a/b", "/a"] {
        assert!(check_name(OsStr::new(bad)).is_err(), "{bad:?}");
    }
    assert!(check_name(OsStr::from_bytes(b"a\0b")).is_err());
    assert!(check_name(OsStr::new("a b..")).is_ok());
    assert!(check_rel(Path::new("a/../b")).is_err());
    assert!(check_rel(Path::new("a/b/c")).is_ok());
}

#[test]
fn never_follows_a_symlink_component() {
    let t = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"s").unwrap();
    std::fs::create_dir(t.path().join("real")).unwrap();
    std::fs::write(t.path().join("real/f"), b"x").unwrap();
    std::os::unix::fs::symlink(outside.path(), t.path().join("link")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), t.path().join("flink")).unwrap();
    let d = Dir::open(t.path()).unwrap();
    assert!(d.open_file("real/f").is_ok());
    let e = d.open_file("link/secret").unwrap_err();
    assert!(is_swapped(&e), "{e}");
    assert!(d.open_file("flink").is_err());
    assert!(d.open_dir("link").is_err());
    assert!(d.open_file("../x").is_err());
    // The top itself may not be a symlink either.
    assert!(Dir::open(&t.path().join("link")).is_err());
    assert!(d.stat("link").unwrap().unwrap().is_symlink());
    assert_eq!(
        d.read_link(OsStr::new("link")).unwrap(),
        outside.path().as_os_str().as_bytes()
    );
}

/// Issue 35, gap 3: a *relative* symlink that stays inside the held directory is refused
/// too. `RESOLVE_BENEATH` lets it through (it never leaves); only `RESOLVE_NO_SYMLINKS` stops
/// it, so an agent cannot make a write meant for `d/x` land in `elsewhere/x` of its own room.
#[test]
fn never_follows_a_relative_symlink_that_stays_beneath() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("elsewhere")).unwrap();
    std::fs::write(t.path().join("elsewhere/x"), b"x").unwrap();
    std::os::unix::fs::symlink("elsewhere", t.path().join("d")).unwrap();
    std::os::unix::fs::symlink("elsewhere/x", t.path().join("fx")).unwrap();
    std::os::unix::fs::symlink("../elsewhere", t.path().join("elsewhere/up")).unwrap();
    let d = Dir::open(t.path()).unwrap();
    assert!(d.open_file("elsewhere/x").is_ok());
    for rel in ["d/x", "fx", "elsewhere/up/x"] {
        let e = d.open_file(rel).unwrap_err();
        assert!(is_swapped(&e), "{rel}: {e}");
    }
    assert!(d.open_dir("d").is_err());
    assert!(d.open_dir("elsewhere/up").is_err());
    assert!(d.stat("d/x").is_err(), "stat through a relative symlink");
}

#[test]
fn a_fifo_never_blocks_and_is_named() {
    let t = tempfile::tempdir().unwrap();
    nix::unistd::mkfifo(
        &t.path().join("p"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let d = Dir::open(t.path()).unwrap();
    let e = d.open_file("p").unwrap_err();
    assert!(
        e.to_string().contains("is a fifo, not a regular file"),
        "{e}"
    );
    assert!(d.stat("p").unwrap().unwrap().kind() == Kind::Fifo);
}

#[test]
fn a_replaced_file_is_refused() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("f"), b"1").unwrap();
    let d = Dir::open(t.path()).unwrap();
    let walked = d.stat("f").unwrap().unwrap();
    assert_eq!(
        walked.ino(),
        std::fs::metadata(t.path().join("f")).unwrap().ino()
    );
    // Kept under another name, so that its inode number is not reused for the new file.
    std::fs::rename(t.path().join("f"), t.path().join("old")).unwrap();
    std::fs::write(t.path().join("g"), b"2").unwrap();
    std::fs::rename(t.path().join("g"), t.path().join("f")).unwrap();
    assert!(d.open_walked("f", &walked).unwrap().is_none());
    let now = d.stat("f").unwrap().unwrap();
    assert!(d.open_walked("f", &now).unwrap().is_some());
}

#[test]
fn writes_stay_in_the_held_directory() {
    let t = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("stage")).unwrap();
    let top = Dir::open(t.path()).unwrap();
    let stage = top.open_dir("stage").unwrap();
    // The staging directory is swapped for a symlink after it was opened: writes through
    // the held fd still land in the directory that was opened (now renamed away).
    std::fs::rename(t.path().join("stage"), t.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(outside.path(), t.path().join("stage")).unwrap();
    let mut f = stage.create_file(OsStr::new("x"), 0o600).unwrap();
    io::Write::write_all(&mut f, b"data").unwrap();
    stage
        .create_symlink(b"/etc/passwd", OsStr::new("l"))
        .unwrap();
    stage.set_owner(OsStr::new("l"), 0, 0).unwrap();
    stage.set_times(OsStr::new("l"), 0, 1_000_000_000).unwrap();
    stage.set_mode(OsStr::new("x"), 0o640).unwrap();
    stage.set_mode(OsStr::new("l"), 0o600).unwrap();
    assert!(t.path().join("moved/x").exists());
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    let m = std::fs::metadata(t.path().join("moved/x")).unwrap();
    assert_eq!(m.mode() & 0o777, 0o640);
    // /etc/passwd's times were not touched through the link.
    assert_ne!(std::fs::metadata("/etc/passwd").unwrap().mtime(), 1);
    stage.set_xattr(OsStr::new("x"), b"user.k", b"v").ok();
    top.remove_all(OsStr::new("moved")).unwrap();
    assert!(!t.path().join("moved").exists());
    // remove_all removes a symlink, not what it points to.
    std::fs::write(outside.path().join("keep"), b"k").unwrap();
    top.remove_all(OsStr::new("stage")).unwrap();
    assert!(outside.path().join("keep").exists());
}

#[test]
fn xattrs_of_names_and_files() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("f");
    std::fs::write(&p, b"x").unwrap();
    let d = Dir::open(t.path()).unwrap();
    // The filesystem's support is probed by path, so a broken `set_xattr` cannot pass for
    // "unsupported here".
    let probe = rustix::fs::lsetxattr(&p, "user.probe", b"", rustix::fs::XattrFlags::empty());
    if probe.is_err() {
        return; // tmpfs without user xattrs
    }
    rustix::fs::lremovexattr(&p, "user.probe").unwrap();
    d.set_xattr(OsStr::new("f"), b"user.a", b"1").unwrap();
    // The directory's own.
    rustix::fs::setxattr(t.path(), "user.dir", b"2", rustix::fs::XattrFlags::empty()).unwrap();
    assert_eq!(
        d.xattrs_self().unwrap(),
        vec![(b"user.dir".to_vec(), b"2".to_vec())]
    );
    assert_eq!(
        d.xattrs_of(OsStr::new("f")).unwrap(),
        vec![(b"user.a".to_vec(), b"1".to_vec())]
    );
    let (f, _) = d.open_file("f").unwrap();
    assert_eq!(
        file_xattrs(&f, &p).unwrap(),
        vec![(b"user.a".to_vec(), b"1".to_vec())]
    );
    // A failure that is not "unsupported" is an error, not an empty list.
    assert!(d.xattrs_of(OsStr::new("missing")).is_err());
    // A value longer than the first buffer, and one left unread.
    let long = vec![b'v'; 10_000];
    if d.set_xattr(OsStr::new("f"), b"user.long", &long).is_ok() {
        let x = d.xattrs_of(OsStr::new("f")).unwrap();
        assert_eq!(x[1], (b"user.long".to_vec(), long));
        let mut seen = Vec::new();
        let only_a = d
            .xattrs_of_where(OsStr::new("f"), &mut |n| {
                seen.push(n.to_vec());
                n == b"user.a"
            })
            .unwrap();
        assert_eq!(only_a, vec![(b"user.a".to_vec(), b"1".to_vec())]);
        assert_eq!(seen.len(), 2);
    }
}

/// `Stat` says what `lstat` says, field by field, for every kind of entry (found unchecked by
/// `scripts/mutants.sh safe`: every accessor could return a constant).
#[test]
fn stat_is_lstat_field_by_field_for_every_kind() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("f"), vec![7u8; 5000]).unwrap();
    std::fs::set_permissions(t.path().join("f"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::hard_link(t.path().join("f"), t.path().join("f2")).unwrap();
    // Owned by someone else than the test (root): an accessor answering 0 shows.
    std::os::unix::fs::chown(t.path().join("f"), Some(65534), Some(65533)).unwrap();
    std::fs::write(t.path().join("empty"), b"").unwrap();
    std::fs::create_dir(t.path().join("d")).unwrap();
    std::os::unix::fs::symlink("f", t.path().join("l")).unwrap();
    nix::unistd::mkfifo(
        &t.path().join("p"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(t.path().join("s")).unwrap();
    let d = Dir::open(t.path()).unwrap();
    let dev = Dir::open(Path::new("/dev")).unwrap();
    let cases = [
        (&d, "f", Kind::File),
        (&d, "empty", Kind::File),
        (&d, "d", Kind::Dir),
        (&d, "l", Kind::Symlink),
        (&d, "p", Kind::Fifo),
        (&d, "s", Kind::Socket),
        (&dev, "null", Kind::CharDevice),
    ];
    for (dir, name, kind) in cases {
        let st = dir.stat(name).unwrap().unwrap();
        let md = std::fs::symlink_metadata(dir.path().join(name)).unwrap();
        assert_eq!(st.kind(), kind, "{name}");
        assert_eq!(st.is_file(), kind == Kind::File, "{name}");
        assert_eq!(st.is_dir(), kind == Kind::Dir, "{name}");
        assert_eq!(st.is_symlink(), kind == Kind::Symlink, "{name}");
        assert_eq!(
            (st.len(), st.is_empty()),
            (md.len(), md.len() == 0),
            "{name}"
        );
        let ours = (
            st.dev(),
            st.ino(),
            st.mode(),
            st.nlink(),
            st.uid(),
            st.gid(),
            st.rdev(),
        );
        let theirs = (
            md.dev(),
            md.ino(),
            md.mode(),
            md.nlink(),
            md.uid(),
            md.gid(),
            md.rdev(),
        );
        assert_eq!(ours, theirs, "{name}");
        let times = |m: &dyn MetadataExt| {
            (
                m.size(),
                (m.atime(), m.atime_nsec()),
                (m.mtime(), m.mtime_nsec()),
                (m.ctime(), m.ctime_nsec()),
                (m.blksize(), m.blocks()),
            )
        };
        // (Not /dev/null's: anyone on the machine may be writing to it meanwhile.)
        if kind != Kind::CharDevice {
            assert_eq!(times(&st), times(&md), "{name}");
        }
    }
    let f = d.stat("f").unwrap().unwrap();
    assert_eq!((f.len(), f.nlink(), f.mode() & 0o7777), (5000, 2, 0o640));
    assert_eq!((f.uid(), f.gid()), (65534, 65533));
    assert!(d.stat("empty").unwrap().unwrap().is_empty() && !f.is_empty());
}

#[test]
fn relative_paths_are_plain_names_only() {
    for bad in ["", "/a", "a\0b", "a/\0", "/"] {
        assert!(
            check_rel(Path::new(OsStr::from_bytes(bad.as_bytes()))).is_err(),
            "{bad:?}"
        );
    }
    for good in ["a", "a/b", "a//b", "a/b/"] {
        assert!(check_rel(Path::new(good)).is_ok(), "{good:?}");
    }
}

/// The opens refuse what is not what they open (a file where a directory is asked for), say
/// which path, and tell "not there" from "swapped".
#[test]
fn opens_refuse_the_wrong_kind_naming_the_path() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("f"), b"x").unwrap();
    std::fs::create_dir_all(t.path().join("d/e")).unwrap();
    assert!(
        Dir::open(&t.path().join("f")).is_err(),
        "a file is no top directory"
    );
    let d = Dir::open(t.path()).unwrap();
    let e = d.open_dir("f").unwrap_err();
    assert!(
        e.to_string()
            .contains(&t.path().join("f").display().to_string()),
        "{e}"
    );
    assert!(!is_swapped(&d.open_file("nothing").unwrap_err()));
    assert!(d.try_open_dir("nothing").unwrap().is_none());
    assert!(
        d.try_open_dir("f").is_err(),
        "a file there is an error, not nothing"
    );
    let sub = d.try_open_dir("d").unwrap().expect("d");
    assert_eq!(sub.path(), t.path().join("d"));
    assert_eq!(sub.display_path("e"), t.path().join("d/e"));
    assert!(sub.open_dir("e").is_ok());
}

#[test]
fn subdirs_lists_directories_and_counts_everything() {
    let t = tempfile::tempdir().unwrap();
    for n in ["a", "b"] {
        std::fs::create_dir(t.path().join(n)).unwrap();
    }
    std::fs::write(t.path().join("f"), b"").unwrap();
    std::os::unix::fs::symlink("a", t.path().join("l")).unwrap();
    let (mut dirs, all) = Dir::open(t.path()).unwrap().subdirs().unwrap();
    dirs.sort();
    assert_eq!(dirs, vec![OsString::from("a"), OsString::from("b")]);
    assert_eq!(all, 4, "without . and ..");
}

/// Every write through a held directory does what it says, and nothing through a symlink
/// (unit-level; restore and the workspace tests use them on real trees).
#[test]
fn writers_do_what_they_say_and_never_through_a_symlink() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let d = Dir::open(t.path()).unwrap();
    let mode = |n: &str| {
        std::fs::symlink_metadata(t.path().join(n))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    d.create_dir(OsStr::new("sub"), 0o750).unwrap();
    // The mode given, less the umask.
    assert_eq!((mode("sub") & !0o750, mode("sub") & 0o700), (0, 0o700));
    assert!(d.create_dir(OsStr::new("sub"), 0o700).is_err(), "exists");
    std::io::Write::write_all(&mut d.create_file(OsStr::new("a"), 0o600).unwrap(), b"A").unwrap();
    assert!(
        d.create_file(OsStr::new("a"), 0o600).is_err(),
        "never over an existing file"
    );
    std::fs::write(t.path().join("b"), b"B").unwrap();
    let sub = d.open_dir("sub").unwrap();
    sub.hard_link(&d, OsStr::new("a"), OsStr::new("a-link"))
        .unwrap();
    assert_eq!(std::fs::metadata(t.path().join("a")).unwrap().nlink(), 2);
    // rename: never replacing unless asked.
    assert!(d
        .rename(OsStr::new("a"), &d, OsStr::new("b"), false)
        .is_err());
    assert_eq!(std::fs::read(t.path().join("b")).unwrap(), b"B");
    d.rename(OsStr::new("b"), &sub, OsStr::new("b2"), false)
        .unwrap();
    assert_eq!(std::fs::read(t.path().join("sub/b2")).unwrap(), b"B");
    d.exchange(OsStr::new("a"), &sub, OsStr::new("b2")).unwrap();
    assert_eq!(std::fs::read(t.path().join("a")).unwrap(), b"B");
    assert_eq!(std::fs::read(t.path().join("sub/b2")).unwrap(), b"A");
    // Owner, mode and times on a symlink touch the link or nothing, never its target.
    std::os::unix::fs::symlink("a", t.path().join("l")).unwrap();
    d.set_mode(OsStr::new("a"), 0o640).unwrap();
    assert_eq!(mode("a"), 0o640);
    d.set_mode(OsStr::new("l"), 0o777).unwrap();
    assert_eq!(mode("a"), 0o640, "set_mode followed the symlink");
    d.set_owner(OsStr::new("l"), 65534, 65534).unwrap();
    let (a, l) = (
        std::fs::metadata(t.path().join("a")).unwrap(),
        std::fs::symlink_metadata(t.path().join("l")).unwrap(),
    );
    assert_eq!((l.uid(), a.uid()), (65534, nix::unistd::geteuid().as_raw()));
    d.set_owner(OsStr::new("a"), 65534, 65534).unwrap();
    assert_eq!(std::fs::metadata(t.path().join("a")).unwrap().gid(), 65534);
    d.set_times(OsStr::new("l"), 1_000_000_000, 2_000_000_000)
        .unwrap();
    let (a, l) = (
        std::fs::metadata(t.path().join("a")).unwrap(),
        std::fs::symlink_metadata(t.path().join("l")).unwrap(),
    );
    assert_eq!(l.mtime(), 2);
    assert_ne!(a.mtime(), 2, "set_times followed the symlink");
    d.set_times(OsStr::new("a"), 3_000_000_000, 4_000_000_007)
        .unwrap();
    let a = std::fs::metadata(t.path().join("a")).unwrap();
    assert_eq!((a.atime(), a.mtime(), a.mtime_nsec()), (3, 4, 7));
    d.remove_all(OsStr::new("sub")).unwrap();
    assert!(!t.path().join("sub").exists());
}

/// A private directory is refused unless the one held is the one created, ours, and
/// writable by nobody else (each condition alone; the swap itself is a race the hostile
/// tests drive).
#[test]
fn a_private_directory_must_be_the_one_made_ours_and_closed() {
    let t = tempfile::tempdir().unwrap();
    let d = Dir::open(t.path()).unwrap();
    let p = d.create_private_dir(OsStr::new("p")).unwrap();
    assert!(d.create_private_dir(OsStr::new("p")).is_err(), "exists");
    let held = p.stat_self().unwrap();
    assert_eq!(held.mode & 0o7777, 0o700);
    let me = nix::unistd::geteuid().as_raw();
    let entry = d.stat("p").unwrap().unwrap();
    assert!(private_and_ours(Some(&entry), &held, me));
    assert!(!private_and_ours(None, &held, me), "no entry");
    std::fs::create_dir(t.path().join("other")).unwrap();
    let other = d.stat("other").unwrap().unwrap();
    assert!(
        !private_and_ours(Some(&other), &held, me),
        "another directory"
    );
    assert!(
        !private_and_ours(Some(&entry), &held, me + 1),
        "someone else's"
    );
    for open in [0o720, 0o702, 0o777] {
        let loose = Stat {
            mode: (held.mode & !0o7777) | open,
            ..held
        };
        assert!(!private_and_ours(Some(&entry), &loose, me), "{open:o}");
    }
}

/// `open_regular_path`: nothing there is `None`, a FIFO is refused at once, a symlink only
/// when not followed; the `*_fd` setters act on the fd given.
#[test]
fn open_regular_path_and_the_fd_setters() {
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    std::os::unix::fs::symlink("f", t.path().join("l")).unwrap();
    nix::unistd::mkfifo(
        &t.path().join("p"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    assert!(open_regular_path(&t.path().join("none"), false)
        .unwrap()
        .is_none());
    assert!(open_regular_path(&t.path().join("p"), false).is_err());
    assert!(open_regular_path(&t.path().join("l"), false).is_err());
    let (file, st) = open_regular_path(&t.path().join("l"), true)
        .unwrap()
        .unwrap();
    assert_eq!(st.ino, std::fs::metadata(&f).unwrap().ino());
    let (file2, _) = open_regular_path(&f, false).unwrap().unwrap();
    set_mode_fd(&file, &f, 0o604).unwrap();
    set_owner_fd(&file, &f, 65534, 65534).unwrap();
    set_times_fd(&file2, &f, 5_000_000_000, 6_000_000_000).unwrap();
    let md = std::fs::metadata(&f).unwrap();
    assert_eq!(
        (md.mode() & 0o7777, md.uid(), md.mtime()),
        (0o604, 65534, 6)
    );
    if set_xattr_fd(&file, &f, b"user.k", b"v").is_ok() {
        assert_eq!(
            file_xattrs(&file, &f).unwrap(),
            vec![(b"user.k".to_vec(), b"v".to_vec())]
        );
    }
}
