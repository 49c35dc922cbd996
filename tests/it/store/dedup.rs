//! Dedup and incremental capture: an unchanged tree adds no object and reads no file; an
//! append to a big file adds about one chunk; identical content is stored once.

use std::fs::{self, OpenOptions};
use std::io::Write;

use crate::support::*;

#[test]
fn unchanged_tree_adds_nothing_and_reads_nothing() {
    let env = Env::new();
    small_tree(env.ws());
    write(&env.ws().join("big"), &random_bytes(9, 3 * 1024 * 1024));
    // Files modified within 2 s of a capture are re-read next time (racy-clean rule); let
    // them age so the second capture can trust its stat cache.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let first = env.capture(&[]);
    let objects = env.objects();
    assert!(
        first["checkpoint"]["stats"]["new_objects"]
            .as_u64()
            .unwrap()
            > 0
    );

    let second = env.capture(&[]);
    let st = &second["checkpoint"]["stats"];
    assert_eq!(st["new_objects"], 0, "{second}");
    assert_eq!(st["new_bytes"], 0);
    assert_eq!(
        st["files_read"], 0,
        "unchanged files were read again: {second}"
    );
    assert_eq!(st["files"], first["checkpoint"]["stats"]["files"]);
    assert_eq!(env.objects(), objects, "objects/ changed");
    // Same trees: the diff is empty and the root tree id is unchanged.
    let (a, b) = (
        first["id"].as_str().unwrap(),
        second["id"].as_str().unwrap(),
    );
    assert_ne!(a, b);
    assert_eq!(
        first["checkpoint"]["roots"]["ws"]["tree"],
        second["checkpoint"]["roots"]["ws"]["tree"]
    );
    assert_eq!(ok_json(["diff", &env.s(), a, b]), serde_json::json!([]));
    // The second checkpoint's parent is the first.
    assert_eq!(second["checkpoint"]["parents"][0], a);

    // Touching one file (same content, new mtime) re-reads exactly that file, stores no
    // new chunk, and only the trees on its path change.
    set_mtime(&env.ws().join("sub/b.txt"), 1_700_000_000_000_000_000);
    let third = env.capture(&[]);
    let st = &third["checkpoint"]["stats"];
    assert_eq!(st["files_read"], 1, "{third}");
    let c = third["id"].as_str().unwrap();
    let d = ok_json(["diff", &env.s(), b, c]);
    assert_eq!(
        d,
        serde_json::json!([{"change": "mtime", "path": "ws/sub/b.txt"}])
    );
    // New objects: the two trees on the path (root and sub), nothing else.
    assert_eq!(st["new_objects"], 2, "{third}");
}

#[test]
fn append_to_64mib_file_adds_under_2mib() {
    let env = Env::new();
    let big = env.ws().join("transcript.jsonl");
    write(&big, &random_bytes(64, 64 * 1024 * 1024));
    write(&env.ws().join("other.txt"), b"other");
    let first = env.capture(&[]);
    let size_before: u64 = env.objects().values().sum();
    assert!(size_before >= 64 * 1024 * 1024);

    let mut f = OpenOptions::new().append(true).open(&big).unwrap();
    f.write_all(&random_bytes(65, 1024)).unwrap();
    drop(f);
    let second = env.capture(&[]);
    let st = &second["checkpoint"]["stats"];
    let added = st["new_bytes"].as_u64().unwrap();
    assert!(
        added < 2 * 1024 * 1024,
        "append of 1 KiB added {added} bytes"
    );
    // Cross-check against the object directory itself.
    let size_after: u64 = env.objects().values().sum();
    assert!(
        size_after - size_before < 2 * 1024 * 1024,
        "objects/ grew by {} bytes",
        size_after - size_before
    );
    assert_eq!(
        size_after - size_before,
        added,
        "reported new_bytes is wrong"
    );
    assert!(first["checkpoint"]["stats"]["new_bytes"].as_u64().unwrap() >= 64 * 1024 * 1024);
    // And the appended file reads back whole.
    let o = run(["cat", &env.s(), "main:ws/transcript.jsonl"]);
    assert!(o.status.success());
    assert!(o.stdout == fs::read(&big).unwrap(), "appended file differs");
}

#[test]
fn identical_content_is_stored_once() {
    let env = Env::new();
    let data = random_bytes(7, 1024 * 1024);
    for i in 0..5 {
        write(&env.ws().join(format!("copy{i}")), &data);
    }
    env.capture(&[]);
    let total: u64 = env.objects().values().sum();
    assert!(
        total < 2 * data.len() as u64,
        "5 identical 1 MiB files took {total} bytes"
    );
}

#[test]
fn excluded_paths_are_not_captured() {
    let env = Env::with_roots(
        &["ws"],
        &["--exclude", "ws=cache/**", "--exclude", "ws=*.pem"],
    );
    write(&env.ws().join("keep.txt"), b"keep");
    write(&env.ws().join("key.pem"), b"secret");
    write(&env.ws().join("deep/er/also.pem"), b"secret");
    write(&env.ws().join("cache/blob"), b"cached");
    write(&env.ws().join("src/cache/blob"), b"not anchored: kept");
    write(&env.ws().join("node_modules/x.js"), b"x");
    let id = env.capture_id(&["--exclude", "node_modules"]);
    let ls = ok_json(["ls", &env.s(), &id, "-r"]);
    let mut paths: Vec<String> = ls
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        vec![
            "cache",
            "deep",
            "deep/er",
            "keep.txt",
            "src",
            "src/cache",
            "src/cache/blob"
        ]
    );
}
