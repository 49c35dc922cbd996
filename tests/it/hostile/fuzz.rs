//! Fuzzing the decoders and readers of untrusted input (trees, checkpoint records, archive
//! manifests and streams, object files of a store made elsewhere) with proptest: arbitrary
//! bytes and structured mutations of valid encodings. Every case must return `Ok` or a clean
//! `Error`, never panic, never hang, and never allocate beyond a bound derived from the input
//! (a tracking allocator records the largest allocation each thread asks for), so no length
//! read from the input sizes an allocation by itself. Bounded so it runs under `cargo test`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use ckptfs::id::ObjectId;
use ckptfs::store::checkpoint::{Checkpoint, RootRecord, Stats, MAX_CHECKPOINT_BYTES};
use ckptfs::store::tree::{
    Chunk, Entry, EntryKind, Tree, MAX_CHUNK_LEN, MAX_SYMLINK_TARGET, MAX_TREE_BYTES,
};
use ckptfs::store::{InitOptions, RootConfig, Store};
use ckptfs::transfer::archive::{parse_manifest, read_archive, MAX_MANIFEST_BYTES};
use ckptfs::Error;
use proptest::prelude::*;
use serde_json::{json, Value};

/// The largest single allocation (or reallocation) each thread has asked for.
#[allow(unsafe_code)]
mod tracking {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static LARGEST: Cell<usize> = const { Cell::new(0) };
    }

    fn note(size: usize) {
        // try_with: no panic while the thread's locals are being torn down.
        let _ = LARGEST.try_with(|c| {
            if size > c.get() {
                c.set(size);
            }
        });
    }

    /// Resets this thread's record.
    pub fn reset() {
        LARGEST.with(|c| c.set(0));
    }

    /// The largest allocation this thread asked for since `reset`.
    pub fn largest() -> usize {
        LARGEST.with(Cell::get)
    }

    pub struct Tracking;

    // SAFETY: every call is forwarded unchanged to the system allocator; only the requested
    // size is recorded, in a const-initialised thread-local Cell (no allocation, no lock).
    unsafe impl GlobalAlloc for Tracking {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            note(layout.size());
            // SAFETY: same layout contract as our caller's.
            unsafe { System.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            note(layout.size());
            // SAFETY: same layout contract as our caller's.
            unsafe { System.alloc_zeroed(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: ptr was allocated by System with this layout (alloc above).
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            note(new_size);
            // SAFETY: ptr was allocated by System with this layout (alloc above).
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static GLOBAL: Tracking = Tracking;
}

/// Runs `f` and returns its result and the largest allocation it made.
fn measured<T>(f: impl FnOnce() -> T) -> (T, usize) {
    tracking::reset();
    let out = f();
    (out, tracking::largest())
}

// ---- structured mutations -------------------------------------------------------------------

/// One edit of an encoding: values chosen to hit lengths and counts at their extremes.
#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
    SetU16(usize, u16),
    SetU32(usize, u32),
    SetU64(usize, u64),
}

fn extreme_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1),
        Just(u32::MAX),
        Just(i32::MAX as u32),
        Just(MAX_CHUNK_LEN),
        Just(MAX_CHUNK_LEN + 1),
        any::<u32>()
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        (any::<usize>(), 1..16usize).prop_map(|(i, n)| Mutation::Remove(i, n)),
        (
            any::<usize>(),
            prop_oneof![Just(0u16), Just(u16::MAX), any::<u16>()]
        )
            .prop_map(|(i, v)| Mutation::SetU16(i, v)),
        (any::<usize>(), extreme_u32()).prop_map(|(i, v)| Mutation::SetU32(i, v)),
        (
            any::<usize>(),
            prop_oneof![Just(0u64), Just(u64::MAX), Just(1u64 << 40), any::<u64>()]
        )
            .prop_map(|(i, v)| Mutation::SetU64(i, v)),
    ]
}

fn apply(mut data: Vec<u8>, edits: &[Mutation]) -> Vec<u8> {
    for m in edits {
        let n = data.len().max(1);
        let mut set = |i: usize, bytes: &[u8]| {
            let at = i % n;
            for (k, b) in bytes.iter().enumerate() {
                if let Some(slot) = data.get_mut(at + k) {
                    *slot = *b;
                }
            }
        };
        match m {
            Mutation::Flip(i, b) => set(*i, &[*b]),
            Mutation::SetU16(i, v) => set(*i, &v.to_le_bytes()),
            Mutation::SetU32(i, v) => set(*i, &v.to_le_bytes()),
            Mutation::SetU64(i, v) => set(*i, &v.to_le_bytes()),
            Mutation::Truncate(i) => data.truncate(i % n),
            Mutation::Insert(i, v) => {
                let at = (i % n).min(data.len());
                data.splice(at..at, v.iter().copied());
            }
            Mutation::Remove(i, k) => {
                let at = (i % n).min(data.len());
                let end = (at + k).min(data.len());
                data.drain(at..end);
            }
        }
    }
    data
}

// ---- trees ----------------------------------------------------------------------------------

fn entry_kind() -> impl Strategy<Value = (EntryKind, u64)> {
    let id = any::<[u8; 32]>().prop_map(ObjectId);
    prop_oneof![
        proptest::collection::vec((id.clone(), 1..5000u32), 0..4).prop_map(|cs| {
            let size = cs.iter().map(|(_, l)| u64::from(*l)).sum();
            let chunks = cs.into_iter().map(|(id, len)| Chunk { id, len }).collect();
            (EntryKind::File { chunks }, size)
        }),
        (id, 0..10u32, 0..5u32).prop_map(|(tree, n, sub)| {
            let size = u64::from(n + sub);
            (EntryKind::Dir { tree, subdirs: sub }, size)
        }),
        proptest::collection::vec(1..=255u8, 1..64).prop_map(|target| {
            let size = target.len() as u64;
            (EntryKind::Symlink { target }, size)
        }),
    ]
}

fn valid_tree() -> impl Strategy<Value = Tree> {
    let entry = (
        entry_kind(),
        0..0o7777u32,
        any::<(u32, u32, i64, i64, u64)>(),
        proptest::collection::btree_map(
            "user\\.[a-z]{1,6}",
            proptest::collection::vec(any::<u8>(), 0..8),
            0..3,
        ),
    );
    proptest::collection::btree_map("[a-zA-Z0-9._ -]{1,12}", entry, 0..6).prop_map(|m| Tree {
        entries: m
            .into_iter()
            .filter(|(n, _)| n != "." && n != "..")
            .map(
                |(name, ((kind, size), mode, (uid, gid, mtime_ns, ctime_ns, ino), xattrs))| Entry {
                    name: name.into_bytes(),
                    kind,
                    mode,
                    uid,
                    gid,
                    mtime_ns,
                    size,
                    xattrs: xattrs
                        .into_iter()
                        .map(|(k, v)| (k.into_bytes(), v))
                        .collect(),
                    ctime_ns,
                    ino,
                    nlink: 0,
                },
            )
            .collect(),
    })
}

/// What a decoded tree must satisfy, whatever bytes it came from.
fn assert_tree_invariants(t: &Tree) -> Result<(), TestCaseError> {
    for w in t.entries.windows(2) {
        prop_assert!(w[0].name < w[1].name, "entries not strictly sorted");
    }
    for e in &t.entries {
        prop_assert!(!e.name.is_empty() && e.name.len() <= 255);
        prop_assert!(e.name != b"." && e.name != b"..");
        prop_assert!(!e.name.contains(&b'/') && !e.name.contains(&0));
        prop_assert!(e.mode & !0o7777 == 0);
        match &e.kind {
            EntryKind::File { chunks } => {
                prop_assert!(chunks.iter().all(|c| c.len > 0 && c.len <= MAX_CHUNK_LEN));
                let sum: u64 = chunks.iter().map(|c| u64::from(c.len)).sum();
                prop_assert_eq!(sum, e.size);
            }
            EntryKind::Dir { subdirs, .. } => {
                prop_assert!(u64::from(*subdirs) <= e.size && e.size <= u64::from(u32::MAX));
            }
            EntryKind::Symlink { target } => {
                prop_assert!(!target.is_empty() && target.len() <= MAX_SYMLINK_TARGET);
                prop_assert!(!target.contains(&0));
            }
        }
    }
    Ok(())
}

/// Decodes `data` as a tree: a clean result, invariants when it decodes, re-encoding stable,
/// and no allocation beyond a small multiple of the input.
fn check_tree_bytes(data: &[u8]) -> Result<(), TestCaseError> {
    let (r, largest) = measured(|| Tree::decode(data));
    // Entries (~150 bytes each) for at most len/38 of them; chunk lists at most len.
    let bound = 8 * data.len() + 4096;
    prop_assert!(
        largest <= bound,
        "allocated {largest} for {} bytes",
        data.len()
    );
    match r {
        Ok(t) => {
            assert_tree_invariants(&t)?;
            let again = Tree::decode(&t.encode());
            prop_assert_eq!(again.ok(), Some(t));
        }
        Err(Error::Corrupt(_)) => {}
        Err(e) => prop_assert!(false, "not a Corrupt error: {e:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn tree_decoder_on_arbitrary_bytes(
        magic in prop_oneof![Just(b"CKT1".to_vec()), Just(b"CKT2".to_vec()), Just(vec![])],
        body in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let data = [magic, body].concat();
        check_tree_bytes(&data)?;
    }

    #[test]
    fn tree_decoder_on_mutated_valid_trees(
        tree in valid_tree(),
        edits in proptest::collection::vec(mutation(), 0..4),
    ) {
        let enc = tree.encode();
        prop_assert_eq!(Tree::decode(&enc).ok(), Some(tree));
        check_tree_bytes(&apply(enc, &edits))?;
    }
}

// ---- checkpoint records ---------------------------------------------------------------------

fn valid_record() -> Checkpoint {
    let root = RootRecord {
        tree: ObjectId::of(b"tree"),
        mode: 0o755,
        uid: 0,
        gid: 0,
        mtime_ns: 1,
        subdirs: 2,
        files: 3,
        bytes: 4,
        xattrs: vec![(b"user.a".to_vec(), b"b".to_vec())],
    };
    Checkpoint {
        version: 1,
        roots: BTreeMap::from([("ws".to_string(), root)]),
        parents: vec![ObjectId::of(b"parent")],
        branch: "main".into(),
        label: Some("v1".into()),
        message: "turn 3".into(),
        time_ns: 5,
        stats: Stats::default(),
        annotations: Default::default(),
    }
}

/// JSON values meant to break a field: wrong types, hostile strings, extreme numbers.
fn hostile_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!("../../etc")),
        Just(json!("/etc")),
        Just(json!("")),
        Just(json!("a\u{0}b")),
        Just(json!(-1)),
        Just(json!(u64::MAX)),
        Just(json!(1u64 << 30)),
        Just(json!(0)),
        Just(json!([])),
        Just(json!({})),
        Just(json!("00".repeat(32))),
        Just(json!("zz".repeat(32))),
        Just(json!("x".repeat(5000))),
        any::<i64>().prop_map(|n| json!(n)),
        "[ -~]{0,20}".prop_map(|s| json!(s)),
    ]
}

/// Replaces the value at a path of object keys / array indexes (each taken modulo what is
/// there) with `new`.
fn replace_at(v: &mut Value, path: &[usize], new: Value) {
    let Some((&first, rest)) = path.split_first() else {
        *v = new;
        return;
    };
    match v {
        Value::Object(map) if !map.is_empty() => {
            let key = map.keys().nth(first % map.len()).cloned();
            if let Some(k) = key {
                if let Some(child) = map.get_mut(&k) {
                    replace_at(child, rest, new);
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let n = items.len();
            replace_at(&mut items[first % n], rest, new);
        }
        _ => *v = new,
    }
}

fn check_record_bytes(data: &[u8]) -> Result<(), TestCaseError> {
    let id = ObjectId::of(data);
    let (r, largest) = measured(|| Checkpoint::decode(&id, data));
    prop_assert!(largest <= 16 * data.len() + 65536, "allocated {largest}");
    match r {
        Ok(c) => {
            prop_assert!(c
                .roots
                .keys()
                .all(|n| ckptfs::store::refs::check_name("root", n).is_ok()));
            prop_assert!(c.parents.len() <= 64);
        }
        Err(Error::Corrupt(_)) => {}
        Err(e) => prop_assert!(false, "not a Corrupt error: {e:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn checkpoint_decoder_on_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        check_record_bytes(&data)?;
    }

    #[test]
    fn checkpoint_decoder_on_mutated_records(
        fields in proptest::collection::vec((proptest::collection::vec(any::<usize>(), 0..4), hostile_value()), 0..3),
        edits in proptest::collection::vec(mutation(), 0..3),
    ) {
        let mut v: Value = serde_json::to_value(valid_record()).unwrap();
        for (path, new) in fields {
            replace_at(&mut v, &path, new);
        }
        let data = serde_json::to_vec(&v).unwrap();
        check_record_bytes(&data)?;
        check_record_bytes(&apply(data, &edits))?;
    }
}

#[test]
fn a_record_too_large_is_refused_before_it_is_parsed() {
    let mut data = serde_json::to_vec(&valid_record()).unwrap();
    data.resize(MAX_CHECKPOINT_BYTES as usize + 1, b' ');
    let id = ObjectId::of(&data);
    let err = Checkpoint::decode(&id, &data).unwrap_err().to_string();
    assert!(err.contains(&id.to_hex()) && err.contains("bytes"), "{err}");
}

// ---- archive manifests and streams ----------------------------------------------------------

fn valid_manifest() -> Value {
    json!({
        "format": "ckptfs-archive",
        "version": 1,
        "created": "2024-01-01T00:00:00",
        "roots": {"ws": {"path": "/workspace/room", "exclude": ["*.tmp"]}},
        "compression": "none",
        "chunker": {"algorithm": "fastcdc-2020", "min": 65536, "avg": 262144, "max": 1048576,
                    "sqlite_block": 16384},
        "checkpoints": [ObjectId::of(b"c").to_hex()],
        "branches": {"main": {"head": ObjectId::of(b"c").to_hex(), "forked_from": null,
                              "state": "active", "created_ns": 1, "updated_ns": 2}},
        "labels": {"v1": ObjectId::of(b"c").to_hex()},
        "objects": 3,
        "object_bytes": 100
    })
}

fn check_manifest_bytes(data: &[u8]) -> Result<(), TestCaseError> {
    let (r, largest) = measured(|| parse_manifest(data));
    prop_assert!(largest <= 16 * data.len() + 65536, "allocated {largest}");
    match r {
        Ok(m) => {
            for (name, rc) in &m.roots {
                prop_assert!(ckptfs::store::refs::check_name("root", name).is_ok());
                prop_assert!(ckptfs::store::check_root_path(name, &rc.path).is_ok());
            }
            prop_assert!(m.chunker.check().is_ok());
            prop_assert!(m.chunker.max <= MAX_CHUNK_LEN);
            prop_assert!(m
                .branches
                .values()
                .all(|b| b.state == "active" || b.state == "archived"));
            prop_assert!(m
                .branches
                .keys()
                .all(|n| ckptfs::store::refs::check_name("branch", n).is_ok()));
            prop_assert!(m
                .labels
                .keys()
                .all(|n| ckptfs::store::refs::check_name("label", n).is_ok()));
        }
        Err(Error::Invalid(_)) => {}
        Err(e) => prop_assert!(false, "not an Invalid error: {e:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn manifest_parser_on_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        check_manifest_bytes(&data)?;
    }

    #[test]
    fn manifest_parser_on_mutated_manifests(
        fields in proptest::collection::vec((proptest::collection::vec(any::<usize>(), 0..4), hostile_value()), 0..3),
        edits in proptest::collection::vec(mutation(), 0..3),
    ) {
        let mut v = valid_manifest();
        prop_assert!(parse_manifest(&serde_json::to_vec(&v).unwrap()).is_ok());
        for (path, new) in fields {
            replace_at(&mut v, &path, new);
        }
        let data = serde_json::to_vec(&v).unwrap();
        check_manifest_bytes(&data)?;
        check_manifest_bytes(&apply(data, &edits))?;
    }

    #[test]
    fn archive_reader_on_mutated_streams(
        edits in proptest::collection::vec(mutation(), 0..4),
        under_compression in any::<bool>(),
    ) {
        let manifest = serde_json::to_vec(&valid_manifest()).unwrap();
        let tree = Tree::default().encode();
        let tree_name = format!("objects/{}", ObjectId::of(&tree));
        let entries: [(&str, &[u8]); 2] = [("MANIFEST.json", &manifest), (&tree_name, &tree)];
        let data = if under_compression {
            // Headers, names and sizes live in the tar stream under the compression.
            let raw = zstd::decode_all(&archive_of(&entries)[..]).unwrap();
            zstd::encode_all(&apply(raw, &edits)[..], 1).unwrap()
        } else {
            apply(archive_of(&entries), &edits)
        };
        let (r, largest) = measured(|| read_archive(&data[..], &mut |_| Ok(())));
        // The zstd decoder's own buffers come from C malloc; what Rust allocates is bounded
        // by the manifest's maximum plus a stream buffer, whatever a header says.
        prop_assert!(largest <= MAX_MANIFEST_BYTES + (1 << 20), "allocated {largest}");
        prop_assert!(matches!(r, Ok(_) | Err(Error::Invalid(_) | Error::Corrupt(_))), "{r:?}");
    }

    #[test]
    fn archive_entry_sizes_do_not_size_allocations(
        claimed in 1u64..(256 << 20),
        actual in 0usize..64,
    ) {
        // A header claiming `claimed` bytes followed by only `actual` of them.
        let mut h = tar::Header::new_gnu();
        h.set_path("MANIFEST.json").unwrap();
        h.set_size(claimed);
        h.set_mode(0o444);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        let mut raw = h.as_bytes().to_vec();
        raw.extend(std::iter::repeat_n(b'{', actual));
        let data = zstd::encode_all(&raw[..], 1).unwrap();
        let (r, largest) = measured(|| read_archive(&data[..], &mut |_| Ok(())));
        prop_assert!(r.is_err());
        prop_assert!(largest <= (1 << 20) + (256 << 10), "allocated {largest} for a claim of {claimed}");
    }
}

// ---- object files of a hostile store ---------------------------------------------------------

/// What is put where an object's file belongs.
#[derive(Clone, Debug)]
enum Planted {
    /// A regular file with these bytes, then extended (sparse) by `extra` bytes.
    Regular {
        extra: u64,
    },
    /// A `.zst` file: the content compressed, or (when `garbage`) these bytes as is.
    Compressed {
        garbage: Option<Vec<u8>>,
    },
    /// A zstd frame that declares this content size (the frame of a longer content).
    Bomb {
        declared: usize,
    },
    Fifo,
    SymlinkToFifo,
    /// A symlink to a regular file holding the right bytes.
    SymlinkToRegular,
    Directory,
    Socket,
    /// The right bytes, in a fan-out directory that is a symlink.
    SymlinkedFanOut,
}

fn planted() -> impl Strategy<Value = Planted> {
    prop_oneof![
        3 => prop_oneof![Just(0u64), Just(1), Just(1 << 20), Just(100 << 30), 0..(16u64 << 20)]
            .prop_map(|extra| Planted::Regular { extra }),
        2 => proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64))
            .prop_map(|garbage| Planted::Compressed { garbage }),
        1 => (1usize..(8 << 20)).prop_map(|declared| Planted::Bomb { declared }),
        1 => Just(Planted::Fifo),
        1 => Just(Planted::SymlinkToFifo),
        1 => Just(Planted::SymlinkToRegular),
        1 => Just(Planted::Directory),
        1 => Just(Planted::Socket),
        1 => Just(Planted::SymlinkedFanOut),
    ]
}

/// How the object is read.
#[derive(Clone, Copy, Debug)]
enum ReadAs {
    /// `read_chunk` with the true length, or another one.
    Chunk {
        lie: Option<u32>,
    },
    Object,
    Tree,
    Bounded(u64),
}

fn read_as() -> impl Strategy<Value = ReadAs> {
    prop_oneof![
        3 => proptest::option::of(prop_oneof![Just(0u32), Just(1), Just(MAX_CHUNK_LEN), 1..10_000u32])
            .prop_map(|lie| ReadAs::Chunk { lie }),
        1 => Just(ReadAs::Object),
        1 => Just(ReadAs::Tree),
        1 => (0u64..100_000).prop_map(ReadAs::Bounded),
    ]
}

struct HostileStore {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    store: Arc<Store>,
}

fn hostile_store() -> HostileStore {
    let tmp = tempfile::Builder::new()
        .prefix("ckptfs-fuzz-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().to_path_buf();
    let mut opts = InitOptions::default();
    let root = RootConfig {
        path: dir.join("root"),
        exclude: vec![],
    };
    opts.roots.insert("r".into(), root);
    let store = Arc::new(Store::init(&dir.join("store"), &opts).unwrap());
    HostileStore {
        _tmp: tmp,
        dir,
        store,
    }
}

/// Removes whatever is at `p` (file, link, directory, socket).
fn clear(p: &Path) {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(p).unwrap(),
        Ok(_) => fs::remove_file(p).unwrap(),
        Err(_) => {}
    }
}

/// Plants `what` as the object holding `content`; returns whether the store now holds the
/// object intact (a regular file, reached without links, of exactly those bytes).
fn plant(h: &HostileStore, content: &[u8], what: &Planted) -> bool {
    let id = ObjectId::of(content);
    let raw = h.store.object_path(&id, false);
    let zst = h.store.object_path(&id, true);
    let fan = raw.parent().unwrap().to_path_buf();
    let aside = h.dir.join("fan-aside");
    clear(&fan);
    clear(&aside);
    fs::create_dir(&fan).unwrap();
    let elsewhere = h.dir.join("elsewhere");
    clear(&elsewhere);
    match what {
        Planted::Regular { extra } => {
            fs::write(&raw, content).unwrap();
            if *extra > 0 {
                let f = fs::OpenOptions::new().write(true).open(&raw).unwrap();
                f.set_len(content.len() as u64 + extra).unwrap();
            }
            *extra == 0
        }
        Planted::Compressed { garbage } => match garbage {
            Some(g) => {
                fs::write(&zst, g).unwrap();
                zstd::decode_all(&g[..]).ok().as_deref() == Some(content)
            }
            None => {
                fs::write(&zst, zstd::bulk::compress(content, 3).unwrap()).unwrap();
                true
            }
        },
        Planted::Bomb { declared } => {
            let big = vec![0u8; *declared];
            fs::write(&zst, zstd::bulk::compress(&big, 3).unwrap()).unwrap();
            big == content
        }
        Planted::Fifo => {
            mkfifo(&raw);
            false
        }
        Planted::SymlinkToFifo => {
            mkfifo(&elsewhere);
            std::os::unix::fs::symlink(&elsewhere, &raw).unwrap();
            false
        }
        Planted::SymlinkToRegular => {
            fs::write(&elsewhere, content).unwrap();
            std::os::unix::fs::symlink(&elsewhere, &raw).unwrap();
            false
        }
        Planted::Directory => {
            fs::create_dir(&raw).unwrap();
            false
        }
        Planted::Socket => {
            // Bound under a short path (sun_path is 108 bytes), then moved into place.
            let short = h.dir.join("s");
            clear(&short);
            let l = std::os::unix::net::UnixListener::bind(&short).unwrap();
            fs::rename(&short, &raw).unwrap();
            drop(l);
            false
        }
        Planted::SymlinkedFanOut => {
            fs::write(&raw, content).unwrap();
            fs::rename(&fan, &aside).unwrap();
            std::os::unix::fs::symlink(&aside, &fan).unwrap();
            false
        }
    }
}

/// One store for every case (a store's init is most of a case's cost); each case plants its
/// object afresh.
#[test]
fn hostile_object_files_are_read_or_refused_within_bounds() {
    let h = hostile_store();
    let config = ProptestConfig {
        cases: 300,
        max_shrink_iters: 50,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let cases = (
        proptest::collection::vec(any::<u8>(), 1..3000),
        planted(),
        read_as(),
    );
    let result = runner.run(&cases, |(content, what, how)| {
        let intact = plant(&h, &content, &what);
        let id = ObjectId::of(&content);
        let true_len = content.len() as u64;
        let (expected_max, exact) = match how {
            ReadAs::Chunk { lie } => {
                let len = lie.unwrap_or(true_len as u32);
                (u64::from(len), Some(u64::from(len)))
            }
            ReadAs::Object => (MAX_TREE_BYTES, None),
            ReadAs::Tree => (MAX_TREE_BYTES, None),
            ReadAs::Bounded(m) => (m, None),
        };
        let store = h.store.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (r, largest) = measured(|| match how {
                ReadAs::Chunk { lie } => store
                    .read_chunk(&Chunk {
                        id,
                        len: lie.unwrap_or(true_len as u32),
                    })
                    .map(|d| d.len()),
                ReadAs::Object => store.read_object(&id).map(|d| d.len()),
                ReadAs::Tree => store.read_tree(&id).map(|t| t.entries.len()),
                ReadAs::Bounded(m) => store.read_object_bounded(&id, m).map(|d| d.len()),
            });
            let _ = tx.send((r, largest));
        });
        let (r, largest) = rx.recv_timeout(Duration::from_secs(10)).map_err(|_| {
            TestCaseError::fail(format!("read of {what:?} as {how:?} hung or panicked"))
        })?;
        // Nothing allocated beyond what the file may hold and the caller allows (twice that
        // for a growing buffer), plus fixed stream buffers.
        let planted = match &what {
            Planted::Regular { extra } => true_len + extra,
            Planted::Bomb { declared } => *declared as u64,
            _ => 2 * true_len + 64,
        };
        let bound = 2 * planted.min(expected_max) as usize + (512 << 10);
        prop_assert!(
            largest <= bound,
            "{what:?} as {how:?}: allocated {largest}, bound {bound}"
        );
        let fits = exact.map_or(true_len <= expected_max, |n| n == true_len);
        match (&r, how) {
            (Ok(_), ReadAs::Tree) => prop_assert!(intact && fits),
            (Ok(n), _) => {
                prop_assert!(intact && fits, "{what:?} as {how:?} read Ok");
                prop_assert_eq!(*n as u64, true_len);
            }
            (Err(Error::Corrupt(m)), _) => prop_assert!(m.contains(&id.to_hex()), "{m}"),
            (Err(Error::NotFound(_)), _) => prop_assert!(!intact),
            (Err(e), _) => prop_assert!(false, "{what:?} as {how:?}: unexpected error {e:?}"),
        }
        if intact && fits && !matches!(how, ReadAs::Tree) {
            prop_assert!(
                r.is_ok(),
                "{what:?} as {how:?}: an intact object refused: {r:?}"
            );
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
