//! Unit tests of the view logic, without FUSE.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::*;
use crate::ingest::capture::{capture, CaptureOptions};
use crate::store::{InitOptions, RootConfig};

fn make_store(dir: &Path) -> (Store, ObjectId) {
    let src = dir.join("src");
    fs::create_dir_all(src.join("sub/deep")).unwrap();
    fs::write(src.join("a.txt"), b"hello\n").unwrap();
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    fs::write(src.join("big.bin"), &big).unwrap();
    fs::write(src.join("sub/deep/f"), b"x").unwrap();
    std::os::unix::fs::symlink("a.txt", src.join("link")).unwrap();
    let store = store_over(dir, &src);
    let id = capture_main(&store);
    (store, id)
}

/// A store in `dir/store` with one root, `work`, at `src`.
pub(super) fn store_over(dir: &Path, src: &Path) -> Store {
    let mut roots = BTreeMap::new();
    roots.insert(
        "work".to_string(),
        RootConfig {
            path: src.to_path_buf(),
            exclude: Vec::new(),
        },
    );
    Store::init(
        &dir.join("store"),
        &InitOptions {
            roots,
            ..InitOptions::default()
        },
    )
    .unwrap()
}

/// Captures the store's roots onto branch `main`; the checkpoint's id.
pub(super) fn capture_main(store: &Store) -> ObjectId {
    let opts = CaptureOptions {
        branch: "main".into(),
        label: None,
        message: "m".into(),
        from: BTreeMap::new(),
        exclude: Vec::new(),
        progress: false,
        annotations: Default::default(),
    };
    capture(store, &opts).unwrap().id
}

fn view(store: Store, id: ObjectId) -> View {
    View::new(
        store,
        Namespace::Checkpoint {
            id,
            root: "work".into(),
        },
        &ViewOptions::default(),
    )
    .unwrap()
}

fn read_all(v: &View, ino: Ino) -> Vec<u8> {
    let fh = v.open(ino).unwrap();
    let mut out = Vec::new();
    loop {
        let d = v.read(fh, out.len() as u64, 100_000).unwrap();
        if d.is_empty() {
            break;
        }
        out.extend_from_slice(&d);
    }
    v.release(fh);
    out
}

#[test]
fn lookup_read_and_stable_inodes() {
    let t = tempfile::tempdir().unwrap();
    let (store, id) = make_store(t.path());
    let v = view(store, id);
    let a = v.lookup(ROOT_INO, b"a.txt").unwrap();
    assert_eq!(a.attr.kind, Kind::File);
    assert_eq!(a.attr.size, 6);
    assert_eq!(read_all(&v, a.attr.ino), b"hello\n");
    let big = v.lookup(ROOT_INO, b"big.bin").unwrap();
    let expect = fs::read(t.path().join("src/big.bin")).unwrap();
    assert_eq!(read_all(&v, big.attr.ino), expect);
    // Reads across chunk boundaries at odd offsets.
    let fh = v.open(big.attr.ino).unwrap();
    for off in [0u64, 65_535, 262_143, 1_000_001, 2_999_990] {
        let d = v.read(fh, off, 300_000).unwrap();
        let end = (off as usize + 300_000).min(expect.len());
        assert_eq!(d, &expect[off as usize..end]);
    }
    assert!(v.read(fh, 5_000_000, 10).unwrap().is_empty());
    v.release(fh);
    let sub = v.lookup(ROOT_INO, b"sub").unwrap();
    assert_eq!(sub.attr.nlink, 3);
    // The shown number is the captured one (what git's index and rsync compare), the node id
    // comes from the path; the ctime is the captured one.
    let deep = v.lookup(sub.attr.ino, b"deep").unwrap();
    let native = fs::symlink_metadata(t.path().join("src/sub/deep")).unwrap();
    assert_eq!(deep.attr.st_ino, native.ino());
    assert_eq!(
        deep.attr.ino,
        child_ino(sub.attr.ino, b"deep"),
        "node id from the path"
    );
    // A file handle's lookup of "." finds the node again after the kernel forgot it.
    v.forget(deep.attr.ino, 1);
    assert!(v.node(deep.attr.ino).is_err());
    assert_eq!(v.lookup(deep.attr.ino, b".").unwrap().attr, deep.attr);
    assert_eq!(
        v.lookup(deep.attr.ino, b"..").unwrap().attr.ino,
        sub.attr.ino
    );
    assert_eq!(
        deep.attr.ctime_ns,
        native.ctime() * 1_000_000_000 + native.ctime_nsec()
    );
    // Stable: the same number again, and after the kernel forgot it.
    v.forget(a.attr.ino, 1);
    assert!(v.node(a.attr.ino).is_err());
    assert_eq!(v.lookup(ROOT_INO, b"a.txt").unwrap().attr.ino, a.attr.ino);
    let link = v.lookup(ROOT_INO, b"link").unwrap();
    assert_eq!(&*v.readlink(link.attr.ino).unwrap(), b"a.txt");
    assert!(matches!(
        v.lookup(ROOT_INO, b"nope"),
        Err(Error::NotFound(_))
    ));
    assert_eq!(
        v.lookup(a.attr.ino, b"x").unwrap_err().errno(),
        libc::ENOTDIR
    );
}

#[test]
fn readdir_lists_dots_then_sorted_entries() {
    let t = tempfile::tempdir().unwrap();
    let (store, id) = make_store(t.path());
    let v = view(store, id);
    let fh = v.opendir(ROOT_INO).unwrap();
    let mut names = Vec::new();
    let mut i = 0;
    while let Some((n, _)) = v.dir_entry(fh, i).unwrap() {
        names.push(String::from_utf8(n).unwrap());
        i += 1;
    }
    assert_eq!(names, [".", "..", "a.txt", "big.bin", "link", "sub"]);
    v.release(fh);
}

#[test]
fn corrupt_chunk_is_eio_for_that_file_only() {
    let t = tempfile::tempdir().unwrap();
    let (store, id) = make_store(t.path());
    let v = view(store, id);
    let big = v.lookup(ROOT_INO, b"big.bin").unwrap();
    let fh = v.open(big.attr.ino).unwrap();
    let f = v.open_file(fh).unwrap();
    let (path, _) = v.store().locate_object(&f.chunks[1].id).unwrap();
    let mut data = fs::read(&path).unwrap();
    data[10] ^= 0xff;
    fs::write(&path, &data).unwrap();
    assert!(v.read(fh, 0, 1000).is_ok());
    let err = v.read(fh, f.starts[1], 1000).unwrap_err();
    assert_eq!(err.errno(), libc::EIO);
    let a = v.lookup(ROOT_INO, b"a.txt").unwrap();
    assert_eq!(read_all(&v, a.attr.ino), b"hello\n");
}

#[test]
fn xattrs_and_statfs() {
    let t = tempfile::tempdir().unwrap();
    let (store, id) = make_store(t.path());
    let v = view(store, id);
    let a = v.lookup(ROOT_INO, b"a.txt").unwrap();
    assert_eq!(v.getxattr(a.attr.ino, b"user.none").unwrap(), None);
    assert!(v.listxattr(a.attr.ino).unwrap().is_empty());
    let s = v.statfs();
    assert_eq!(s.files, 3);
    assert!(s.blocks >= 3_000_000 / 4096);
}

#[test]
fn caches_stay_within_budget() {
    let t = tempfile::tempdir().unwrap();
    let (store, id) = make_store(t.path());
    let v = View::new(
        store,
        Namespace::Checkpoint {
            id,
            root: "work".into(),
        },
        &ViewOptions {
            cache_bytes: 1 << 20,
            ..ViewOptions::default()
        },
    )
    .unwrap();
    let big = v.lookup(ROOT_INO, b"big.bin").unwrap();
    read_all(&v, big.attr.ino);
    let (trees, chunks) = v.cache_usage();
    assert!(trees <= 256 << 10);
    assert!(chunks <= 768 << 10, "{chunks}");
}

#[test]
fn browse_namespace() {
    let t = tempfile::tempdir().unwrap();
    let (store, id) = make_store(t.path());
    store.create_label("first", &id).unwrap();
    let v = View::new(store, Namespace::Browse, &ViewOptions::default()).unwrap();
    let latest = v.lookup(ROOT_INO, b"latest").unwrap();
    assert_eq!(
        &*v.readlink(latest.attr.ino).unwrap(),
        format!("checkpoints/{id}").as_bytes()
    );
    let labels = v.lookup(ROOT_INO, b"labels").unwrap();
    let first = v.lookup(labels.attr.ino, b"first").unwrap();
    assert_eq!(
        &*v.readlink(first.attr.ino).unwrap(),
        format!("../checkpoints/{id}").as_bytes()
    );
    let branches = v.lookup(ROOT_INO, b"branches").unwrap();
    assert!(v.lookup(branches.attr.ino, b"main").is_ok());
    assert!(matches!(
        v.lookup(branches.attr.ino, b"../x"),
        Err(Error::NotFound(_))
    ));
    let cps = v.lookup(ROOT_INO, b"checkpoints").unwrap();
    let c = v.lookup(cps.attr.ino, id.to_hex().as_bytes()).unwrap();
    assert!(!c.volatile);
    let root = v.lookup(c.attr.ino, b"work").unwrap();
    let a = v.lookup(root.attr.ino, b"a.txt").unwrap();
    assert_eq!(read_all(&v, a.attr.ino), b"hello\n");
    let bt = v.by_time_names().unwrap();
    assert_eq!(bt.len(), 1);
    assert!(v.path_of(a.attr.ino).ends_with("/work/a.txt"));
}
