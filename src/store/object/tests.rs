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
