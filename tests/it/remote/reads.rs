//! Lazy reads of a clone under concurrency, on a real Garage node: several readers of one
//! cold file at once (sequential, and one jumping about) all get exact bytes while the
//! prefetch threads fetch ahead of them; a reader whose chunk another thread is fetching waits
//! for that fetch and takes its checked bytes (`src/remote/cache.rs`).

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::support::*;

/// `capture STORE --from work=SRC` (root `work`, branch main).
fn capture_from(store: &Path, src: &Path) {
    let from = format!("work={}", src.display());
    ok(["capture", s(store), "--from", &from, "--json"]);
}

#[test]
fn readers_of_one_cold_file_at_once_all_get_exact_bytes() {
    let g = Garage::start();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "pw");
    let src = dir.path().join("src");
    let room = dir.path().join("room");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let big = random_bytes(11, 40 << 20);
    write(&src.join("big.bin"), &big);
    ok(["init", s(&a), "--root", &format!("work={}", room.display())]);
    capture_from(&a, &src);
    add_remote(&g, &a, "reads", &key);
    rok(&g, ["push", s(&a)]);
    clone_remote(&g, "reads", &b, &key);
    let _m = MountGuard::new(&room);
    rok(&g, ["mount", s(&b), "main:work"]);
    let path = room.join("big.bin");
    std::thread::scope(|sc| {
        let mut readers = Vec::new();
        for block in [128 << 10, 1 << 20] {
            let path = &path;
            readers.push(sc.spawn(move || {
                let mut f = fs::File::open(path).unwrap();
                let mut got = Vec::new();
                let mut buf = vec![0u8; block];
                loop {
                    let n = f.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                got
            }));
        }
        // One reader jumping about (the readahead window starts over at each jump).
        let jumper = sc.spawn(|| {
            let mut f = fs::File::open(&path).unwrap();
            let mut got = vec![0u8; big.len()];
            let step = 3 << 20;
            let mut starts: Vec<usize> = (0..big.len()).step_by(step).collect();
            starts.reverse();
            starts.swap(0, 3);
            for at in starts {
                let end = (at + step).min(big.len());
                f.seek(SeekFrom::Start(at as u64)).unwrap();
                f.read_exact(&mut got[at..end]).unwrap();
            }
            got
        });
        for r in readers {
            assert!(
                r.join().unwrap() == big,
                "a sequential reader got wrong bytes"
            );
        }
        assert!(
            jumper.join().unwrap() == big,
            "the jumping reader got wrong bytes"
        );
    });
    // Every fetched object is in the eviction list once, and the list holds the file.
    let list = fs::read_to_string(b.join("cache/remote-fetched")).unwrap();
    let mut ids: Vec<&str> = list.lines().filter_map(|l| l.split(' ').next()).collect();
    let listed: u64 = list
        .lines()
        .filter_map(|l| l.split(' ').nth(1)?.parse::<u64>().ok())
        .sum();
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "an object was fetched into the store twice");
    assert!(listed >= big.len() as u64, "{listed} bytes listed");
    rok(&g, ["umount", s(&room)]);
}
