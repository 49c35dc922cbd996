//! Lazy reads of a clone under concurrency, on a real Garage node: several readers of one
//! cold file at once (sequential, and one jumping about) all get exact bytes while the
//! prefetch threads fetch ahead of them; a reader whose chunk another thread is fetching waits
//! for that fetch and takes its checked bytes (`src/remote/cache.rs`). A cold walk brings the
//! trees of each pack in one ranged GET, also when they lie in two pushes' packs.

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
    let r = RemotePair::new();
    let (g, key, src, room, a, b) = (&r.g, &r.key, &r.src, &r.room, &r.a, &r.b);
    let big = random_bytes(11, 40 << 20);
    write(&src.join("big.bin"), &big);
    ok(["init", s(a), "--root", &format!("work={}", room.display())]);
    capture_from(a, src);
    add_remote(g, a, "reads", key);
    rok(g, ["push", s(a)]);
    clone_remote(g, "reads", b, key);
    let _m = MountGuard::new(room);
    rok(g, ["mount", s(b), "main:work"]);
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
    rok(g, ["umount", s(room)]);
}

#[test]
fn a_cold_walk_over_two_pushes_brings_each_packs_trees_in_one_get() {
    let r = RemotePair::new();
    let (g, key, src, room, a, b) = (&r.g, &r.key, &r.src, &r.room, &r.a, &r.b);
    // 600 directories, each with a file: their trees fill the first push's pack.
    for i in 0..30 {
        for j in 0..20 {
            write(
                &src.join(format!("d{i:02}/s{j:02}/f.txt")),
                format!("{i} {j}\n").as_bytes(),
            );
        }
    }
    ok(["init", s(a), "--root", &format!("work={}", room.display())]);
    capture_from(a, src);
    add_remote(g, a, "walk", key);
    rok(g, ["push", s(a)]);
    // The second push holds the new trees of 10 changed paths (and the root's): the walk
    // starts in its pack and goes on into the first push's.
    for i in 0..10 {
        write(&src.join(format!("d{i:02}/s00/f.txt")), b"changed\n");
    }
    capture_from(a, src);
    rok(g, ["push", s(a)]);
    clone_remote(g, "walk", b, key);
    let _m = MountGuard::new(room);
    let before = g.requests("GET", "walk/packs/");
    rok(g, ["mount", s(b), "main:work"]);
    let found = std::process::Command::new("find")
        .arg(room)
        .args(["-printf", "%P %s\n"])
        .output()
        .unwrap();
    assert!(found.status.success());
    let gets = g.requests("GET", "walk/packs/") - before;
    rok(g, ["umount", s(room)]);
    let found = String::from_utf8(found.stdout).unwrap();
    // Every directory and file, with the second checkpoint's sizes.
    assert_eq!(found.lines().count(), 1 + 30 + 30 * 20 * 2, "{found}");
    assert!(found.lines().any(|l| l == "d03/s00/f.txt 8"), "{found}");
    assert!(found.lines().any(|l| l == "d13/s00/f.txt 5"), "{found}");
    // One GET per pack holding trees. Taken 16 at a time as the walk queues them, the first
    // push's trees were dozens of GETs, and the pack's fetch then had as many holes.
    assert!(gets <= 2, "{gets} GETs of packs for a cold walk");
}
