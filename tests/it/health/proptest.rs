//! Bad input: property tests over the tree, checkpoint, STORE.json and archive decoders. Any
//! bytes give a value or a clear error, never a panic, and archive entry names can never step
//! outside the store.

use std::collections::BTreeMap;

use ckptfs::id::ObjectId;
use ckptfs::store::checkpoint::{Checkpoint, RootRecord, Stats};
use ckptfs::store::parse_config;
use ckptfs::store::tree::{Chunk, Entry, EntryKind, Tree};
use ckptfs::transfer::archive::{check_entry_path, parse_manifest, read_archive};
use proptest::prelude::*;

fn valid_tree() -> Vec<u8> {
    let file = |name: &str| Entry {
        name: name.as_bytes().to_vec(),
        kind: EntryKind::File {
            chunks: vec![Chunk {
                id: ObjectId::of(name.as_bytes()),
                len: 3,
            }],
        },
        mode: 0o644,
        uid: 1,
        gid: 2,
        mtime_ns: 3,
        size: 3,
        xattrs: vec![(b"user.x".to_vec(), b"y".to_vec())],
        ctime_ns: 4,
        ino: 5,
        nlink: 0,
    };
    let mut entries = vec![file("a"), file("b")];
    entries.push(Entry {
        name: b"d".to_vec(),
        kind: EntryKind::Dir {
            tree: ObjectId::of(b"t"),
            subdirs: 0,
        },
        mode: 0o755,
        uid: 0,
        gid: 0,
        mtime_ns: 0,
        size: 0,
        xattrs: vec![],
        ctime_ns: 0,
        ino: 0,
        nlink: 0,
    });
    entries.push(Entry {
        name: b"l".to_vec(),
        kind: EntryKind::Symlink {
            target: b"../x".to_vec(),
        },
        mode: 0o777,
        uid: 0,
        gid: 0,
        mtime_ns: 0,
        size: 4,
        xattrs: vec![],
        ctime_ns: 0,
        ino: 0,
        nlink: 0,
    });
    Tree { entries }.encode()
}

fn valid_checkpoint() -> Vec<u8> {
    let mut roots = BTreeMap::new();
    roots.insert(
        "workspace".to_string(),
        RootRecord {
            tree: ObjectId::of(b"t"),
            mode: 0o755,
            uid: 0,
            gid: 0,
            mtime_ns: 1,
            subdirs: 0,
            files: 1,
            bytes: 2,
            xattrs: Vec::new(),
        },
    );
    Checkpoint {
        version: 1,
        roots,
        parents: vec![ObjectId::of(b"p")],
        branch: "main".into(),
        label: None,
        message: "m".into(),
        time_ns: 5,
        stats: Stats::default(),
        annotations: Default::default(),
    }
    .encode()
}

const CONFIG: &str = r#"{"format":"ckptfs-store","version":1,"hash":"sha256",
"chunker":{"algorithm":"fastcdc-2020","min":65536,"avg":262144,"max":1048576},
"compression":"none","roots":{"workspace":{"path":"/w","exclude":["*.pem"]}},"created_ns":1,
"retention":{"keep_last":3,"keep_within":"7d"}}"#;

/// Applies byte edits (position, value) and an optional truncation.
fn mutate(mut data: Vec<u8>, edits: &[(usize, u8)], cut: Option<usize>) -> Vec<u8> {
    for (pos, v) in edits {
        if !data.is_empty() {
            let i = pos % data.len();
            data[i] = *v;
        }
    }
    if let Some(c) = cut {
        let c = c % (data.len() + 1);
        data.truncate(c);
    }
    data
}

fn small_archive() -> Vec<u8> {
    let cp = valid_checkpoint();
    let cid = ObjectId::of(&cp);
    let manifest = serde_json::json!({"format": "ckptfs-archive", "version": 1, "created": "x",
        "roots": {"workspace": {"path": "/w", "exclude": []}}, "compression": "none",
        "chunker": {"algorithm":"fastcdc-2020","min":65536,"avg":262144,"max":1048576},
        "checkpoints": [cid], "branches": {}, "labels": {}, "objects": 1, "object_bytes": 1});
    let mut tb = tar::Builder::new(Vec::new());
    let mut add = |name: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o444);
        tb.append_data(&mut h, name, data).unwrap();
    };
    add("MANIFEST.json", manifest.to_string().as_bytes());
    add(&format!("checkpoints/{cid}"), &cp);
    add(&format!("objects/{}", ObjectId::of(b"t")), b"t");
    zstd::encode_all(&tb.into_inner().unwrap()[..], 3).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn tree_decoder_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Tree::decode(&data);
    }

    #[test]
    fn mutated_trees_decode_canonically_or_fail(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let data = mutate(valid_tree(), &edits, cut);
        if let Ok(t) = Tree::decode(&data) {
            // What decodes re-encodes to the same bytes, and has only safe names.
            prop_assert_eq!(t.encode(), data);
            for e in &t.entries {
                prop_assert!(!e.name.contains(&b'/') && e.name != b".." && e.name != b".");
            }
        }
    }

    #[test]
    fn checkpoint_decoder_never_panics(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in proptest::option::of(any::<usize>()),
        garbage in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let data = mutate(valid_checkpoint(), &edits, cut);
        // With the right id (so parsing is reached) and with garbage.
        let _ = Checkpoint::decode(&ObjectId::of(&data), &data);
        let _ = Checkpoint::decode(&ObjectId::of(&garbage), &garbage);
    }

    #[test]
    fn config_decoder_never_panics(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let data = mutate(CONFIG.as_bytes().to_vec(), &edits, cut);
        if let Ok(c) = parse_config(&data) {
            for rc in c.roots.values() {
                prop_assert!(rc.path.is_absolute());
            }
        }
    }

    #[test]
    fn archive_reader_never_panics(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let data = mutate(small_archive(), &edits, cut);
        let mut n = 0;
        let _ = read_archive(&data[..], &mut |_| { n += 1; Ok(()) });
    }

    #[test]
    fn archive_reader_on_raw_tar_never_panics(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
    ) {
        // Mutate the tar stream under the compression, where headers and names live.
        let raw = zstd::decode_all(&small_archive()[..]).unwrap();
        let data = mutate(raw, &edits, None);
        let z = zstd::encode_all(&data[..], 1).unwrap();
        let _ = read_archive(&z[..], &mut |_| Ok(()));
        let _ = parse_manifest(&data);
    }

    #[test]
    fn entry_paths_never_escape(path in "[a-z./]{0,80}|/[ -~]{0,40}|\\.\\./[ -~]{0,40}") {
        if check_entry_path(&path).is_ok() {
            prop_assert!(!path.starts_with('/'));
            prop_assert!(!path.split('/').any(|c| c == ".." || c == "." || c.is_empty()));
        }
    }
}

#[test]
fn small_archive_reads() {
    let mut items = 0;
    let m = read_archive(&small_archive()[..], &mut |_| {
        items += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(m.version, 1);
    assert_eq!(items, 2);
}
