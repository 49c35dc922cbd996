//! Unit tests of `object`.

use super::*;
use crate::store::temp_store;

fn tmp_files(store: &Store) -> usize {
    fs::read_dir(store.tmp_dir()).map_or(0, |d| d.count())
}

#[test]
fn objects_synced_ahead_are_published_by_commit_with_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    let batch = ObjectBatch::new(&store);
    let early: Vec<ObjectId> = (0..5u8)
        .map(|i| batch.ensure(&[i; 5000]).unwrap())
        .collect();
    assert!(early.iter().all(|id| !store.has_object(id)));
    batch.sync_ahead().unwrap();
    // Synced, but under their temp names until commit: nothing in the store yet.
    assert!(early.iter().all(|id| !store.has_object(id)));
    assert_eq!(batch.synced.lock().unwrap().len(), 5);
    assert!(batch.pending.lock().unwrap().is_empty());
    let late = batch.ensure(b"late").unwrap();
    assert!(!store.has_object(&late));
    batch.commit().unwrap();
    for id in early.iter().chain([&late]) {
        store.read_object(id).unwrap();
    }
    assert_eq!(batch.new_objects(), 6);
    assert_eq!(tmp_files(&store), 0);
}

#[test]
fn stored_objects_are_compared_from_the_page_cache_else_hashed() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    let nowait = crate::store::nowait_reads_supported(dir.path());
    let batch = ObjectBatch::new(&store);
    let data = vec![5u8; 100_000];
    let id = batch.ensure(&data).unwrap();
    let mut scratch = vec![0u8; data.len() + 1];
    // Under its temp name until commit: not comparable.
    assert_eq!(store.cached_object_equals(&id, &data, &mut scratch), None);
    batch.commit().unwrap();
    // Written with early writeback, whose DONTNEED drops pages already clean: read it
    // once so the page cache holds it whatever the disk's speed.
    store.read_object(&id).unwrap();
    let mut other = data.clone();
    other[99_999] = 6;
    let expect = |v: bool| nowait.then_some(v);
    assert_eq!(
        store.cached_object_equals(&id, &data, &mut scratch),
        expect(true)
    );
    assert_eq!(
        store.cached_object_equals(&id, &other, &mut scratch),
        expect(false)
    );
    // A prefix of the object is not the object.
    assert_eq!(
        store.cached_object_equals(&id, &data[..99_999], &mut scratch[..100_000]),
        expect(false)
    );
    // `holds` answers the same whichever way it decides.
    let reader = ObjectBatch::dry_run(&store);
    assert!(reader.holds(&id, &data, &mut scratch));
    assert!(!reader.holds(&id, &other, &mut scratch));
    let absent = ObjectId::of(b"absent");
    assert!(reader.holds(&absent, b"absent", &mut scratch));
    assert!(!reader.holds(&absent, b"other!", &mut scratch));
    assert_eq!(reader.compared_bytes(), if nowait { 200_000 } else { 0 });
}

#[test]
fn deferred_objects_write_nothing_until_written_and_commit_publishes_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    let batch = ObjectBatch::new(&store);
    let before = batch.ensure(&[1u8; 5000]).unwrap();
    assert_eq!(tmp_files(&store), 1);
    batch.defer_writes();
    let a = batch.ensure(&[2u8; 5000]).unwrap();
    let again = batch.ensure(&[2u8; 5000]).unwrap();
    assert_eq!(a, again);
    let b = batch.ensure(b"deferred").unwrap();
    // Nothing touches the filesystem while deferred; sync_ahead is held back.
    assert_eq!(tmp_files(&store), 1);
    batch.sync_ahead().unwrap();
    assert!(batch.synced.lock().unwrap().is_empty());
    assert_eq!(batch.new_objects(), 1);
    batch.write_deferred().unwrap();
    assert_eq!(tmp_files(&store), 3);
    // Written ones are no longer deferred: the next goes to a temp file at once.
    let c = batch.ensure(b"after").unwrap();
    assert_eq!(tmp_files(&store), 4);
    batch.commit().unwrap();
    for id in [before, a, b, c] {
        store.read_object(&id).unwrap();
    }
    assert_eq!(batch.new_objects(), 4);
    assert_eq!(tmp_files(&store), 0);

    // Commit writes what is still deferred; an abandoned batch leaves nothing.
    let batch = ObjectBatch::new(&store);
    batch.defer_writes();
    let d = batch.ensure(b"committed while deferred").unwrap();
    batch.commit().unwrap();
    store.read_object(&d).unwrap();
    let batch = ObjectBatch::new(&store);
    batch.defer_writes();
    let e = batch.ensure(b"abandoned").unwrap();
    drop(batch);
    assert!(!store.has_object(&e));
    assert_eq!(tmp_files(&store), 0);
}

#[test]
fn a_held_back_batch_syncs_nothing_before_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    let batch = ObjectBatch::new(&store);
    let id = batch.ensure(&[7u8; 5000]).unwrap();
    batch.hold_back();
    batch.sync_ahead().unwrap();
    assert!(batch.synced.lock().unwrap().is_empty());
    batch.commit().unwrap();
    store.read_object(&id).unwrap();
}

#[test]
fn an_abandoned_batch_leaves_no_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    let batch = ObjectBatch::new(&store);
    let id = batch.ensure(b"never committed").unwrap();
    batch.ensure(b"synced ahead, never committed").unwrap();
    batch.sync_ahead().unwrap();
    batch.ensure(b"pending").unwrap();
    assert_eq!(tmp_files(&store), 3);
    drop(batch);
    assert_eq!(tmp_files(&store), 0);
    assert!(!store.has_object(&id));
}

/// A store that compresses its objects (the form `init --zstd` makes).
fn zstd_store(dir: &std::path::Path) -> Store {
    let mut store = temp_store(dir);
    store.config.compression = "zstd".into();
    store
}

/// Writes `bytes` as the file of object `id` (raw or `.zst`), replacing any.
fn put_file(store: &Store, id: &ObjectId, compressed: bool, bytes: &[u8]) -> PathBuf {
    let p = store.object_path(id, compressed);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    let _ = fs::remove_file(&p);
    fs::write(&p, bytes).unwrap();
    p
}

fn committed(store: &Store, data: &[u8]) -> ObjectId {
    let batch = ObjectBatch::new(store);
    let id = batch.ensure(data).unwrap();
    batch.commit().unwrap();
    id
}

fn is_corrupt<T: std::fmt::Debug>(r: Result<T>, says: &str) -> bool {
    matches!(&r, Err(Error::Corrupt(m)) if m.contains(says))
}

fn chunk(id: ObjectId, len: u32) -> Chunk {
    Chunk { id, len }
}

#[test]
fn an_object_reads_back_only_at_the_length_its_reader_expects() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    let data = random_like(100);
    let id = committed(&store, &data);
    assert_eq!(store.read_chunk(&chunk(id, 100)).unwrap(), data);
    assert_eq!(store.read_object(&id).unwrap(), data);
    assert_eq!(store.read_object_bounded(&id, 100).unwrap(), data);
    // Refused by the file's size, before anything is read.
    for len in [99, 101] {
        let said = format!("is 100 bytes, the tree says {len}");
        assert!(
            is_corrupt(store.read_chunk(&chunk(id, len)), &said),
            "{len}"
        );
    }
    assert!(is_corrupt(
        store.read_object_bounded(&id, 99),
        "more than any"
    ));
    // Not a tree: refused, never an empty one.
    assert!(matches!(store.read_tree(&id), Err(Error::Corrupt(_))));
    let missing = ObjectId::of(b"missing");
    assert!(matches!(
        store.read_object(&missing),
        Err(Error::NotFound(_))
    ));
    assert!(!store.has_object(&missing));
    assert_eq!(store.locate_object(&missing), None);
    assert_eq!(store.object_file_size(&missing), None);

    let (p, compressed) = store.locate_object(&id).unwrap();
    assert_eq!(
        (p.clone(), compressed),
        (store.object_path(&id, false), false)
    );
    assert_eq!(store.object_file_size(&id), Some(100));
    let o = store.open_object_checked(&id).unwrap().unwrap();
    assert_eq!(
        (o.path.clone(), o.compressed, o.len),
        (p.clone(), false, 100)
    );
    let (_, path, compressed) = store.open_object(&id).unwrap().unwrap();
    assert_eq!((path, compressed), (p.clone(), false));
    let (_, path, _) = store.open_object_nowait(&id).unwrap().unwrap();
    assert_eq!(path, p);
    assert!(store.open_object(&missing).unwrap().is_none());
}

/// Bytes that zstd cannot shrink (so a raw and a compressed object differ in size).
fn random_like(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn a_changed_or_replaced_object_file_is_refused_never_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    let data = random_like(64);
    let id = committed(&store, &data);
    let mut other = data.clone();
    other[0] ^= 1;
    let p = put_file(&store, &id, false, &other);
    assert!(is_corrupt(
        store.read_object(&id),
        "does not match its hash"
    ));
    assert!(is_corrupt(
        store.read_chunk(&chunk(id, 64)),
        "does not match its hash"
    ));

    // A symlink in its place is "present" (never written over) but never followed.
    fs::remove_file(&p).unwrap();
    let elsewhere = dir.path().join("elsewhere");
    fs::write(&elsewhere, &data).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &p).unwrap();
    assert!(store.has_object(&id));
    assert!(is_corrupt(
        store.open_object_checked(&id),
        "not a regular file"
    ));
    assert!(is_corrupt(store.read_object(&id), "not a regular file"));

    // A FIFO: refused without opening it (no hang), and a directory.
    fs::remove_file(&p).unwrap();
    nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    assert!(is_corrupt(store.read_object(&id), "not a regular file"));
    fs::remove_file(&p).unwrap();
    fs::create_dir(&p).unwrap();
    assert!(is_corrupt(store.read_object(&id), "not a regular file"));
}

#[test]
fn compressed_objects_are_held_to_the_expected_length_before_and_after_decompressing() {
    let dir = tempfile::tempdir().unwrap();
    let store = zstd_store(dir.path());
    let data = b"abc".repeat(40);
    let id = committed(&store, &data);
    assert!(store.object_path(&id, true).is_file());
    assert!(!store.object_path(&id, false).exists());
    let size = store.object_file_size(&id).unwrap();
    assert!(size < 120, "{size}");
    assert_eq!(store.read_chunk(&chunk(id, 120)).unwrap(), data);
    assert_eq!(store.read_object(&id).unwrap(), data);
    assert_eq!(store.read_object_bounded(&id, 120).unwrap(), data);
    // The frame declares 120 bytes: more than 119 is refused before decompressing; fewer
    // than 121 after.
    assert!(is_corrupt(
        store.read_chunk(&chunk(id, 119)),
        "holds 120 bytes"
    ));
    assert!(is_corrupt(
        store.read_chunk(&chunk(id, 121)),
        "holds 120 bytes"
    ));
    assert!(is_corrupt(
        store.read_object_bounded(&id, 60),
        "holds 120 bytes"
    ));
    let o = store.open_object_checked(&id).unwrap().unwrap();
    assert!(o.compressed);
    assert_eq!(o.len, size);

    // An object in the other form is found too, in either kind of store.
    let raw = random_like(50);
    let raw_id = ObjectId::of(&raw);
    let p = put_file(&store, &raw_id, false, &raw);
    assert_eq!(store.locate_object(&raw_id), Some((p, false)));
    assert_eq!(store.read_object(&raw_id).unwrap(), raw);
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = temp_store(plain_dir.path());
    let zst = zstd::bulk::compress(&data, 3).unwrap();
    let p = put_file(&plain, &id, true, &zst);
    assert_eq!(plain.locate_object(&id), Some((p, true)));
    assert_eq!(plain.read_chunk(&chunk(id, 120)).unwrap(), data);
}

/// A skippable zstd frame of `total` bytes (at least 8): decoders pass over it.
fn skippable(total: usize) -> Vec<u8> {
    let mut v = 0x184D_2A50u32.to_le_bytes().to_vec();
    v.extend_from_slice(&u32::try_from(total - 8).unwrap().to_le_bytes());
    v.resize(total, 0);
    v
}

#[test]
fn a_compressed_file_larger_than_zstd_makes_of_the_length_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let store = zstd_store(dir.path());
    let data = b"xyz".repeat(100);
    let id = ObjectId::of(&data);
    let frame = zstd::bulk::compress(&data, 3).unwrap();
    let bound = zstd_bound(300) as usize;
    // Padded to exactly the bound: still a frame zstd could have made; read.
    let mut at_bound = frame.clone();
    at_bound.extend(skippable(bound - frame.len()));
    put_file(&store, &id, true, &at_bound);
    assert_eq!(store.read_chunk(&chunk(id, 300)).unwrap(), data);
    // One byte more: refused by its size alone.
    let mut over = frame.clone();
    over.extend(skippable(bound + 1 - frame.len()));
    put_file(&store, &id, true, &over);
    assert!(is_corrupt(
        store.read_chunk(&chunk(id, 300)),
        "more than zstd makes"
    ));
    // Read as an object of unknown use, whose bound is far larger: accepted.
    assert_eq!(store.read_object(&id).unwrap(), data);
}

#[test]
fn a_frame_without_a_declared_size_is_cut_one_byte_past_the_length() {
    let dir = tempfile::tempdir().unwrap();
    let store = zstd_store(dir.path());
    let data = b"0123456789".repeat(10);
    let id = ObjectId::of(&data);
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
    std::io::Write::write_all(&mut enc, &data).unwrap();
    let frame = enc.finish().unwrap();
    assert_eq!(
        zstd::zstd_safe::get_frame_content_size(&frame).unwrap(),
        None,
        "the stream encoder declared a size"
    );
    put_file(&store, &id, true, &frame);
    assert_eq!(store.read_chunk(&chunk(id, 100)).unwrap(), data);
    assert_eq!(store.read_object_bounded(&id, 100).unwrap(), data);
    assert!(is_corrupt(
        store.read_chunk(&chunk(id, 99)),
        "decompresses to more than the 99 bytes"
    ));
    assert!(is_corrupt(
        store.read_object_bounded(&id, 99),
        "decompresses to more than any"
    ));
    assert!(is_corrupt(
        store.read_chunk(&chunk(id, 101)),
        "holds 100 bytes"
    ));
    // Not zstd at all.
    put_file(&store, &id, true, b"not a zstd frame at all");
    assert!(is_corrupt(store.read_object(&id), "bad zstd data"));
}

#[test]
fn a_hostile_record_file_is_read_only_when_regular_and_within_its_bound() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("rec");
    fs::write(&p, [1u8; 10]).unwrap();
    let read =
        |p: &std::path::Path, max: u64, follow: bool| read_regular_file(p, max, follow, "rec");
    assert_eq!(read(&p, 10, false).unwrap(), Some(vec![1u8; 10]));
    assert_eq!(read(&p, 11, false).unwrap(), Some(vec![1u8; 10]));
    assert!(is_corrupt(read(&p, 9, false), "more than 9"));
    assert_eq!(read(&t.path().join("missing"), 10, false).unwrap(), None);
    let link = t.path().join("link");
    std::os::unix::fs::symlink(&p, &link).unwrap();
    assert!(is_corrupt(read(&link, 10, false), "a symlink"));
    assert_eq!(read(&link, 10, true).unwrap(), Some(vec![1u8; 10]));
    let fifo = t.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    assert!(is_corrupt(read(&fifo, 10, false), "not a regular file"));
    // Any other failure is reported as what it is.
    let long = t.path().join("n".repeat(300));
    assert!(matches!(read(&long, 10, false), Err(Error::Io { .. })));
}

fn linked_tree() -> Tree {
    let entry = |name: &str| crate::store::tree::Entry {
        name: name.as_bytes().to_vec(),
        kind: crate::store::tree::EntryKind::File {
            chunks: vec![chunk(ObjectId::of(b"x"), 1)],
        },
        mode: 0o644,
        uid: 0,
        gid: 0,
        mtime_ns: 5,
        size: 1,
        xattrs: Vec::new(),
        ctime_ns: 7,
        ino: 9,
        nlink: 2,
    };
    Tree {
        entries: vec![entry("a"), entry("b")],
    }
}

#[test]
fn trees_are_stored_in_the_form_the_stores_version_reads() {
    let tree = linked_tree();
    let mut unlinked = tree.clone();
    for e in &mut unlinked.entries {
        e.nlink = 0;
    }
    let mut bare = unlinked.clone();
    for e in &mut bare.entries {
        (e.ctime_ns, e.ino) = (0, 0);
    }
    // (version, the linked tree as read back, the unlinked tree as read back)
    for (version, linked_back, unlinked_back) in [
        (3, &tree, &unlinked),
        (2, &unlinked, &unlinked),
        (1, &bare, &bare),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = temp_store(dir.path());
        store.config.version = version;
        let batch = ObjectBatch::new(&store);
        let a = batch.ensure_tree(&tree).unwrap();
        let b = batch.ensure_tree(&unlinked).unwrap();
        batch.commit().unwrap();
        assert_eq!(&store.read_tree(&a).unwrap(), linked_back, "v{version}");
        assert_eq!(&store.read_tree(&b).unwrap(), unlinked_back, "v{version}");
        assert!(batch.take_dry_trees().is_empty());

        // A dry run writes nothing and keeps the trees as the store would read them.
        let dry = ObjectBatch::dry_run(&store);
        let id = dry.ensure_tree(&tree).unwrap();
        assert_eq!(id, a);
        let trees = dry.take_dry_trees();
        assert_eq!(trees.len(), 1);
        assert_eq!(&trees[&id], linked_back, "v{version}");
    }
}

#[test]
fn a_dry_run_writes_nothing_and_a_present_object_is_not_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    assert!(!ObjectBatch::new(&store).is_dry_run());
    let dry = ObjectBatch::dry_run(&store);
    assert!(dry.is_dry_run());
    let id = dry.ensure(b"dry").unwrap();
    assert_eq!(id, ObjectId::of(b"dry"));
    dry.commit().unwrap();
    assert!(!store.has_object(&id));
    assert_eq!(
        (dry.new_objects(), dry.new_bytes(), tmp_files(&store)),
        (0, 0, 0)
    );

    let data = random_like(300);
    let batch = ObjectBatch::new(&store);
    batch.ensure(&data).unwrap();
    batch.ensure(b"four").unwrap();
    batch.commit().unwrap();
    assert_eq!((batch.new_objects(), batch.new_bytes()), (2, 304));
    let again = ObjectBatch::new(&store);
    again.ensure(&data).unwrap();
    assert_eq!(
        (again.new_objects(), again.new_bytes(), tmp_files(&store)),
        (0, 0, 0)
    );

    // In a compressed store, the bytes as stored.
    let zdir = tempfile::tempdir().unwrap();
    let zstore = zstd_store(zdir.path());
    let batch = ObjectBatch::new(&zstore);
    let id = batch.ensure(&b"ab".repeat(500)).unwrap();
    batch.commit().unwrap();
    let size = zstore.object_file_size(&id).unwrap();
    assert!(size < 1000);
    assert_eq!(batch.new_bytes(), size);
}

#[test]
fn a_batch_wholly_synced_ahead_is_still_published() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    let batch = ObjectBatch::new(&store);
    let ids: Vec<ObjectId> = (0..3u8).map(|i| batch.ensure(&[i; 10]).unwrap()).collect();
    batch.sync_ahead().unwrap();
    assert!(batch.pending.lock().unwrap().is_empty());
    batch.commit().unwrap();
    for id in &ids {
        assert!(store.has_object(id));
    }
    assert_eq!(tmp_files(&store), 0);
}

#[test]
fn a_temp_file_gone_before_its_sync_is_an_error_and_nothing_is_published() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    let batch = ObjectBatch::new(&store);
    let a = batch.ensure(b"kept").unwrap();
    let b = batch.ensure(b"removed").unwrap();
    let gone = batch.pending.lock().unwrap()[&b].clone();
    fs::remove_file(&gone).unwrap();
    assert!(batch.sync_ahead().is_err());
    // Both stay pending, for commit or abandon.
    assert_eq!(batch.pending.lock().unwrap().len(), 2);
    assert!(batch.synced.lock().unwrap().is_empty());
    assert!(batch.commit().is_err());
    assert!(!store.has_object(&a) && !store.has_object(&b));
    assert_eq!(tmp_files(&store), 0);
}

#[test]
fn past_the_fsync_limit_objects_wait_for_commit() {
    // tmpfs: thousands of fsyncs cost nothing there.
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let store = temp_store(dir.path());
    let batch = ObjectBatch::new(&store);
    let ids: Vec<ObjectId> = (0..FSYNC_EACH_LIMIT as u32)
        .map(|i| batch.ensure(&i.to_le_bytes()).unwrap())
        .collect();
    batch.sync_ahead().unwrap();
    assert_eq!(batch.synced.lock().unwrap().len(), FSYNC_EACH_LIMIT);
    let last = batch.ensure(b"one too many").unwrap();
    batch.sync_ahead().unwrap();
    assert_eq!(batch.pending.lock().unwrap().len(), 1);
    assert_eq!(batch.synced.lock().unwrap().len(), FSYNC_EACH_LIMIT);
    batch.commit().unwrap();
    assert!(store.has_object(&last));
    assert!(ids.iter().all(|id| store.has_object(id)));
    assert_eq!(tmp_files(&store), 0);
}

#[test]
fn cached_comparison_answers_only_for_raw_objects_and_a_longer_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    let nowait = crate::store::nowait_reads_supported(dir.path());
    let data = random_like(1000);
    let id = committed(&store, &data);
    store.read_object(&id).unwrap();
    let mut scratch = vec![0u8; 1001];
    assert_eq!(
        store.cached_object_equals(&id, &data, &mut scratch),
        nowait.then_some(true)
    );
    // A scratch no longer than the data could not see a longer object.
    assert_eq!(
        store.cached_object_equals(&id, &data, &mut scratch[..1000]),
        None
    );
    // A compressed object (in a store of raw ones, or in a compressed store): hashed.
    let zst_data = random_like(500);
    let zid = ObjectId::of(&zst_data);
    put_file(
        &store,
        &zid,
        true,
        &zstd::bulk::compress(&zst_data, 3).unwrap(),
    );
    store.read_object(&zid).unwrap();
    assert_eq!(
        store.cached_object_equals(&zid, &zst_data, &mut scratch),
        None
    );
    let zdir = tempfile::tempdir().unwrap();
    let zstore = zstd_store(zdir.path());
    let raw_in_z = ObjectId::of(&data);
    put_file(&zstore, &raw_in_z, false, &data);
    zstore.read_object(&raw_in_z).unwrap();
    assert_eq!(
        zstore.cached_object_equals(&raw_in_z, &data, &mut scratch),
        None
    );
}

#[test]
fn put_object_file_publishes_once_in_the_stores_form() {
    let dir = tempfile::tempdir().unwrap();
    let store = zstd_store(dir.path());
    let data = b"put".repeat(100);
    let id = ObjectId::of(&data);
    let written = store.put_object_file(&id, &data, "fetch", true).unwrap();
    assert_eq!(written, store.object_file_size(&id));
    assert!(written.unwrap() < 300);
    assert_eq!(store.read_object(&id).unwrap(), data);
    assert_eq!(
        store.put_object_file(&id, &data, "fetch", false).unwrap(),
        None
    );
    assert_eq!(tmp_files(&store), 0);
}

#[test]
fn object_files_lists_every_object_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    let a = committed(&store, b"a");
    let b = committed(&store, b"b");
    let c = ObjectId::of(b"c");
    put_file(&store, &c, true, &zstd::bulk::compress(b"c", 3).unwrap());
    let objects = store.objects_dir();
    // Not fan-out directories: a longer name, a symlink to a directory, a plain file; and
    // a name that is no id in a real one.
    let stray = ObjectId::of(b"stray").to_hex();
    fs::create_dir_all(objects.join("abc")).unwrap();
    fs::write(objects.join("abc").join(&stray[2..]), b"x").unwrap();
    let outside = dir.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join(&stray[2..]), b"x").unwrap();
    let _ = fs::remove_dir(objects.join(&stray[..2]));
    std::os::unix::fs::symlink(&outside, objects.join(&stray[..2])).unwrap();
    fs::write(objects.join("zz"), b"x").unwrap();
    let fan = objects.join(&a.to_hex()[..2]);
    fs::write(fan.join("not-an-id"), b"x").unwrap();
    let mut got = object_files(&store).unwrap();
    got.sort_by_key(|(_, id)| *id);
    let mut want = vec![
        (store.object_path(&a, false), a),
        (store.object_path(&b, false), b),
        (store.object_path(&c, true), c),
    ];
    want.sort_by_key(|(_, id)| *id);
    assert_eq!(got, want);
}

#[test]
fn chunks_read_in_parallel_each_once_until_told_to_stop() {
    let dir = tempfile::tempdir().unwrap();
    let store = temp_store(dir.path());
    let content: HashMap<ObjectId, Vec<u8>> = (0..40u8)
        .map(|i| (committed(&store, &[i; 3]), vec![i; 3]))
        .collect();
    let list: Vec<Chunk> = content.keys().map(|id| chunk(*id, 3)).collect();
    let seen = Mutex::new(Vec::new());
    store.read_chunks_parallel(&list, |c, r| {
        assert_eq!(r.unwrap(), content[&c.id]);
        lock(&seen).push(c.id);
        true
    });
    let mut seen = seen.into_inner().unwrap();
    seen.sort();
    let mut all: Vec<ObjectId> = list.iter().map(|c| c.id).collect();
    all.sort();
    assert_eq!(seen, all);

    let calls = AtomicU64::new(0);
    store.read_chunks_parallel(&list, |_, _| {
        calls.fetch_add(1, Ordering::Relaxed);
        false
    });
    // Each of the (at most 8) threads stops after the item it had taken.
    assert!(calls.load(Ordering::Relaxed) <= 8);
}

/// A remote's stand-in: the objects it holds and what it was asked for.
#[derive(Debug, Default)]
struct MemorySource {
    objects: Mutex<HashMap<ObjectId, Vec<u8>>>,
    /// Hand the fetched bytes over (`take_fetched`), as the lazy remote read does.
    hand_over: bool,
    handed: Mutex<HashMap<ObjectId, Vec<u8>>>,
    prefetched: Mutex<Vec<ObjectId>>,
    repairs: AtomicU64,
}

impl crate::store::ObjectSource for MemorySource {
    fn fetch(&self, store: &Store, id: &ObjectId) -> Result<bool> {
        let Some(data) = lock(&self.objects).get(id).cloned() else {
            return Ok(false);
        };
        store.put_object_file(id, &data, "fetch", false)?;
        if self.hand_over {
            lock(&self.handed).insert(*id, data);
        }
        Ok(true)
    }

    fn repair(&self, store: &Store, id: &ObjectId) -> Result<bool> {
        let Some(data) = lock(&self.objects).get(id).cloned() else {
            return Ok(false);
        };
        self.repairs.fetch_add(1, Ordering::Relaxed);
        let _ = fs::remove_file(store.object_path(id, store.compressed()));
        store.put_object_file(id, &data, "repair", false)?;
        Ok(true)
    }

    fn holds(&self, _: &Store, id: &ObjectId) -> bool {
        lock(&self.objects).contains_key(id)
    }

    fn prefetch(&self, _: &Store, ids: &[ObjectId]) {
        lock(&self.prefetched).extend_from_slice(ids);
    }

    fn take_fetched(&self, id: &ObjectId) -> Option<Vec<u8>> {
        lock(&self.handed).remove(id)
    }
}

/// The source of each test's store, by its root (a source factory is a plain `fn`).
static SOURCES: Mutex<Vec<(PathBuf, std::sync::Arc<MemorySource>)>> = Mutex::new(Vec::new());

fn source_of(store: &Store) -> Option<std::sync::Arc<dyn crate::store::ObjectSource>> {
    let sources = lock(&SOURCES);
    let (_, s) = sources.iter().find(|(root, _)| root == store.root())?;
    Some(s.clone())
}

/// A store whose missing objects come from a source holding `objects`.
fn store_with_source(
    dir: &std::path::Path,
    objects: &[&[u8]],
    hand_over: bool,
) -> (Store, std::sync::Arc<MemorySource>) {
    let store = temp_store(dir);
    let src = std::sync::Arc::new(MemorySource {
        objects: Mutex::new(
            objects
                .iter()
                .map(|d| (ObjectId::of(d), d.to_vec()))
                .collect(),
        ),
        hand_over,
        ..MemorySource::default()
    });
    lock(&SOURCES).push((store.root().to_path_buf(), src.clone()));
    (store.with_object_source(source_of), src)
}

#[test]
fn a_missing_object_is_fetched_from_the_source_once_and_checked() {
    for hand_over in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let remote: Vec<Vec<u8>> = (0..4u8)
            .map(|i| random_like(100 + usize::from(i)))
            .collect();
        let refs: Vec<&[u8]> = remote.iter().map(Vec::as_slice).collect();
        let (store, src) = store_with_source(dir.path(), &refs, hand_over);
        let ids: Vec<ObjectId> = refs.iter().map(|d| ObjectId::of(d)).collect();
        let absent = ObjectId::of(b"nowhere");
        assert!(store.remote_holds(&ids[0]));
        assert!(!store.remote_holds(&absent));

        assert_eq!(
            store.read_object(&ids[0]).unwrap(),
            remote[0],
            "{hand_over}"
        );
        assert!(store.has_object(&ids[0]));
        assert_eq!(store.read_chunk(&chunk(ids[1], 101)).unwrap(), remote[1]);
        // Fetched bytes are held to the reader's length as much as a file is.
        assert!(is_corrupt(
            store.read_chunk(&chunk(ids[2], 50)),
            "102 bytes"
        ));
        assert!(is_corrupt(
            store.read_object_bounded(&ids[3], 50),
            "103 bytes"
        ));
        assert!(matches!(
            store.read_object(&absent),
            Err(Error::NotFound(_))
        ));

        // Without waiting: queued for the source, not fetched here.
        let later = ObjectId::of(b"later");
        assert!(store.open_object_nowait(&later).unwrap().is_none());
        assert_eq!(*lock(&src.prefetched), [later]);
        assert!(store.open_object_nowait(&ids[0]).unwrap().is_some());
    }
    let dir = tempfile::tempdir().unwrap();
    let plain = temp_store(dir.path());
    assert!(!plain.remote_holds(&ObjectId::of(b"x")));
}

#[test]
fn fetched_bytes_handed_over_fit_the_readers_length_or_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = random_like(100);
    let (store, src) = store_with_source(dir.path(), &[&data], true);
    let id = ObjectId::of(&data);
    let repairs = || src.repairs.load(Ordering::Relaxed);
    // The first read builds the source and fetches; the bytes handed over are refused
    // (and the copy written from them too) at a length other than the reader's.
    assert!(is_corrupt(store.read_object_bounded(&id, 99), "100 bytes"));
    assert_eq!(store.read_object_bounded(&id, 100).unwrap(), data);
    // Handed over at the reader's length: taken as they are, no repair asked for.
    let before = repairs();
    fs::remove_file(store.object_path(&id, false)).unwrap();
    assert_eq!(store.read_chunk(&chunk(id, 100)).unwrap(), data);
    fs::remove_file(store.object_path(&id, false)).unwrap();
    assert_eq!(store.read_object_bounded(&id, 100).unwrap(), data);
    assert_eq!(repairs(), before);
    fs::remove_file(store.object_path(&id, false)).unwrap();
    assert!(is_corrupt(store.read_chunk(&chunk(id, 101)), "100 bytes"));
}

#[test]
fn a_bad_local_copy_is_replaced_by_the_sources_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = random_like(80);
    let (store, src) = store_with_source(dir.path(), &[&data], false);
    let id = ObjectId::of(&data);
    put_file(&store, &id, false, &random_like(80)[..79]);
    assert_eq!(store.read_object(&id).unwrap(), data);
    assert_eq!(src.repairs.load(Ordering::Relaxed), 1);
    // One the source does not hold stays corrupt.
    let other = random_like(33);
    let other_id = ObjectId::of(&other);
    put_file(&store, &other_id, false, b"wrong");
    assert!(matches!(
        store.read_object(&other_id),
        Err(Error::Corrupt(_))
    ));
}
