//! `ckptfs stats` (logical, content and stored bytes, unique bytes per checkpoint and branch,
//! exact on a store built for it) and `ckptfs find` (globs across checkpoints, `--history`
//! of one path, identical subtrees read once).

use crate::support::*;

use serde_json::Value;

const A: usize = 100_000;
const B: usize = 50_000;
const C: usize = 30_000;
const SHARED: usize = 200_000;

/// Three checkpoints: on main, A = {shared, a} then B = {shared, b}; on a new branch side,
/// C = {shared, c}. Every file is random, so chunks are shared only where files are.
struct Built {
    env: Env,
    a: String,
    b: String,
    c: String,
}

fn build() -> Built {
    let env = Env::new();
    let ws = env.ws().to_path_buf();
    write(&ws.join("shared.bin"), &random_bytes(10, SHARED));
    write(&ws.join("a.bin"), &random_bytes(11, A));
    let a = env.capture_id(&[]);
    std::fs::remove_file(ws.join("a.bin")).expect("rm a");
    write(&ws.join("b.bin"), &random_bytes(12, B));
    let b = env.capture_id(&[]);
    std::fs::remove_file(ws.join("b.bin")).expect("rm b");
    write(&ws.join("c.bin"), &random_bytes(13, C));
    let c = env.capture_id(&["--branch", "side"]);
    Built { env, a, b, c }
}

fn row<'a>(rows: &'a Value, key: &str, value: &str) -> &'a Value {
    rows.as_array()
        .expect("array")
        .iter()
        .find(|r| r[key] == value)
        .unwrap_or_else(|| panic!("no row with {key} = {value} in {rows}"))
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn stats_counts_logical_stored_and_unique_bytes_exactly() {
    let t = build();
    let st = t.env.s();
    ok(["label", &st, &t.a, "base"]);
    let v = ok_json(["stats", &st, "--json"]);
    let ck = &v["checkpoints"];
    assert_eq!(ck.as_array().map(Vec::len), Some(3), "{v}");
    assert_eq!(
        row(ck, "id", &t.a)["labels"],
        serde_json::json!(["base"]),
        "{v}"
    );
    assert_eq!(row(ck, "id", &t.b)["labels"], serde_json::json!([]), "{v}");
    // Unique: what only that checkpoint reaches.
    assert_eq!(n(&row(ck, "id", &t.a)["unique_bytes"]), A as u64, "{v}");
    assert_eq!(n(&row(ck, "id", &t.b)["unique_bytes"]), B as u64, "{v}");
    assert_eq!(n(&row(ck, "id", &t.c)["unique_bytes"]), C as u64, "{v}");
    // Each checkpoint's logical bytes: its files' sizes.
    assert_eq!(
        n(&row(ck, "id", &t.a)["logical_bytes"]),
        (SHARED + A) as u64
    );
    assert_eq!(n(&row(ck, "id", &t.c)["files"]), 2);
    // Per branch: main holds a and b alone, side holds c alone; shared is in both.
    let br = &v["branches"];
    assert_eq!(
        n(&row(br, "name", "main")["unique_bytes"]),
        (A + B) as u64,
        "{v}"
    );
    assert_eq!(n(&row(br, "name", "side")["unique_bytes"]), C as u64, "{v}");
    assert_eq!(n(&row(br, "name", "main")["checkpoints"]), 2);
    // Whole store: logical counts shared three times, content once.
    let sel = &v["selected"];
    let logical = (3 * SHARED + A + B + C) as u64;
    let content = (SHARED + A + B + C) as u64;
    assert_eq!(n(&sel["logical_bytes"]), logical, "{v}");
    assert_eq!(n(&sel["content_bytes"]), content, "{v}");
    let ratio = sel["dedup_ratio"].as_f64().expect("ratio");
    assert!(
        (ratio - logical as f64 / content as f64).abs() < 1e-9,
        "{v}"
    );
    // Stored: the object files on disk, counted by the test itself.
    let objects = t.env.objects();
    assert_eq!(n(&v["store"]["objects"]), objects.len() as u64, "{v}");
    assert_eq!(
        n(&v["store"]["stored_bytes"]),
        objects.values().sum::<u64>(),
        "{v}"
    );
    assert_eq!(n(&v["store"]["checkpoints"]), 3);
    // Unique stored bytes are the on-disk size of what only it reaches (its chunks and its
    // root tree): at least its unique chunks' files.
    assert!(n(&row(ck, "id", &t.b)["unique_stored_bytes"]) > 0, "{v}");
    assert!(n(&sel["unique_stored_bytes"]) <= n(&v["store"]["stored_bytes"]));

    // One checkpoint: its own figures; unique still against the whole store.
    let one = ok_json(["stats", &st, &t.b, "--json"]);
    assert_eq!(n(&one["selected"]["checkpoints"]), 1, "{one}");
    assert_eq!(n(&one["selected"]["unique_bytes"]), B as u64, "{one}");
    assert_eq!(n(&one["selected"]["content_bytes"]), (SHARED + B) as u64);
    assert_eq!(n(&one["selected"]["logical_bytes"]), (SHARED + B) as u64);
    // A branch: its history (side has one checkpoint).
    let side = ok_json(["stats", &st, "--branch", "side", "--json"]);
    assert_eq!(n(&side["selected"]["checkpoints"]), 1, "{side}");
    assert_eq!(n(&side["selected"]["unique_bytes"]), C as u64, "{side}");
    let main = ok_json(["stats", &st, "--branch", "main", "--json"]);
    assert_eq!(
        n(&main["selected"]["unique_bytes"]),
        (A + B) as u64,
        "{main}"
    );

    // Text: the same figures, one row per branch and checkpoint.
    let text = ok(["stats", &st]);
    assert!(text.contains("dedup ratio"), "{text}");
    assert!(text.contains(&t.a[..12]) && text.contains("side"), "{text}");
    // Bad input: one line, exit 1 or 2.
    let e = fails(1, ["stats", &st, "--branch", "nosuch"]);
    assert!(e.contains("nosuch"), "{e}");
    let e = fails(1, ["stats", &st, "ffffffff"]);
    assert!(e.contains("ffffffff"), "{e}");
}

fn paths(v: &Value) -> Vec<String> {
    v["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .map(|p| p["path"].as_str().expect("path").to_string())
        .collect()
}

fn found_in(v: &Value, path: &str) -> Vec<String> {
    row(&v["paths"], "path", path)["found_in"]
        .as_array()
        .expect("found_in")
        .iter()
        .map(|f| f["checkpoint"]["id"].as_str().expect("id").to_string())
        .collect()
}

#[test]
fn find_lists_the_checkpoints_holding_matching_paths() {
    let t = build();
    let st = t.env.s();
    let v = ok_json(["find", &st, "*.bin", "--json"]);
    assert_eq!(
        paths(&v),
        ["ws/a.bin", "ws/b.bin", "ws/c.bin", "ws/shared.bin"],
        "{v}"
    );
    assert_eq!(found_in(&v, "ws/a.bin"), vec![t.a.clone()]);
    assert_eq!(found_in(&v, "ws/c.bin"), vec![t.c.clone()]);
    // Oldest first.
    assert_eq!(
        found_in(&v, "ws/shared.bin"),
        [t.a.clone(), t.b.clone(), t.c.clone()]
    );
    let ck = &row(&v["paths"], "path", "ws/a.bin")["found_in"][0]["checkpoint"];
    assert_eq!(ck["labels"], serde_json::json!([]), "{v}");
    let entry = &row(&v["paths"], "path", "ws/a.bin")["found_in"][0]["entry"];
    assert_eq!(entry["type"], "file");
    assert_eq!(n(&entry["size"]), A as u64);
    assert_eq!(entry["mode"], "0644", "{entry}");
    // A path pattern, a branch, two patterns.
    let v = ok_json(["find", &st, "ws/[ab].bin", "--json"]);
    assert_eq!(paths(&v), ["ws/a.bin", "ws/b.bin"], "{v}");
    let v = ok_json(["find", &st, "*.bin", "--branch", "side", "--json"]);
    assert_eq!(paths(&v), ["ws/c.bin", "ws/shared.bin"], "{v}");
    let v = ok_json(["find", &st, "a.bin", "c.bin", "--json"]);
    assert_eq!(paths(&v), ["ws/a.bin", "ws/c.bin"], "{v}");
    // --since in the future: nothing searched.
    let v = ok_json(["find", &st, "*.bin", "--since", "2100-01-01", "--json"]);
    assert_eq!(n(&v["checkpoints_searched"]), 0, "{v}");
    // Text.
    let text = ok(["find", &st, "a.bin"]);
    assert!(
        text.contains("ws/a.bin") && text.contains(&t.a[..12]),
        "{text}"
    );
    // Bad input.
    let e = fails(2, ["find", &st, "[unclosed"]);
    assert!(e.contains("[unclosed"), "{e}");
    let e = fails(1, ["find", &st, "*", "--branch", "nosuch"]);
    assert!(e.contains("nosuch"), "{e}");
    let e = fails(1, ["find", &st, "*", "--root", "nosuch"]);
    assert!(e.contains("nosuch"), "{e}");
    fails(2, ["find", &st]);
}

fn changes(v: &Value) -> Vec<(String, String)> {
    v["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            (
                c["checkpoint"]["id"].as_str().expect("id").to_string(),
                c["change"].as_str().expect("change").to_string(),
            )
        })
        .collect()
}

#[test]
fn find_history_lists_the_checkpoints_where_a_path_changed() {
    let env = Env::new();
    let ws = env.ws().to_path_buf();
    let f = ws.join("notes.md");
    write(&f, b"one\n");
    let c1 = env.capture_id(&[]);
    write(&ws.join("other"), b"x\n");
    let c2 = env.capture_id(&[]); // notes.md untouched
    write(&f, b"two\n");
    set_mtime(&f, 1_700_000_000);
    let c3 = env.capture_id(&[]);
    chmod(&f, 0o600);
    let c4 = env.capture_id(&[]);
    std::fs::remove_file(&f).expect("rm");
    let c5 = env.capture_id(&[]);
    std::fs::create_dir(&f).expect("mkdir");
    let c6 = env.capture_id(&[]);
    let st = env.s();
    let v = ok_json(["find", &st, "--history", "ws/notes.md", "--json"]);
    let want: Vec<(String, String)> = [
        (&c1, "added"),
        (&c3, "modified"),
        (&c4, "metadata"),
        (&c5, "removed"),
        (&c6, "added"),
    ]
    .iter()
    .map(|(c, k)| (c.to_string(), k.to_string()))
    .collect();
    assert_eq!(changes(&v), want, "{v}");
    assert!(
        !changes(&v).iter().any(|(c, _)| *c == c2),
        "c2 did not change it"
    );
    assert_eq!(n(&v["checkpoints_searched"]), 6);
    assert_eq!(v["changes"][2]["entry"]["mode"], "0600", "{v}");
    assert!(v["changes"][3]["entry"].is_null(), "{v}");
    assert_eq!(v["changes"][1]["parent"], c2.as_str(), "{v}");
    // A file replaced by a directory of the same name is a type change.
    std::fs::remove_dir(&f).expect("rmdir");
    write(&f, b"file again\n");
    let c7 = env.capture_id(&[]);
    let v = ok_json(["find", &st, "--history", "ws/notes.md", "--json"]);
    assert_eq!(
        changes(&v).last(),
        Some(&(c7.clone(), "type".to_string())),
        "{v}"
    );
    // A directory changes when anything below it does.
    write(&ws.join("dir/x"), b"1\n");
    let d1 = env.capture_id(&[]);
    env.capture_id(&[]);
    write(&ws.join("dir/x"), b"2\n");
    let d3 = env.capture_id(&[]);
    let v = ok_json(["find", &st, "--history", "ws/dir", "--json"]);
    assert_eq!(
        changes(&v),
        [(d1, "added".to_string()), (d3, "modified".to_string())],
        "{v}"
    );
    // Text, and bad input.
    let text = ok(["find", &st, "--history", "ws/notes.md"]);
    assert!(
        text.contains("metadata") && text.contains(&c4[..12]),
        "{text}"
    );
    fails(2, ["find", &st, "--history", "ws"]);
    fails(2, ["find", &st, "x", "--history", "ws/notes.md"]);
}

#[test]
fn find_reads_an_unchanged_subtree_once_for_all_checkpoints() {
    let env = Env::new();
    let ws = env.ws().to_path_buf();
    // 40 directories that never change, and one file that changes every checkpoint.
    for i in 0..40 {
        write(
            &ws.join(format!("deep/d{i}/f.txt")),
            format!("{i}\n").as_bytes(),
        );
    }
    let checkpoints = 10;
    for i in 0..checkpoints {
        write(&ws.join("turn.txt"), format!("{i}\n").as_bytes());
        env.capture_id(&[]);
    }
    let v = ok_json(["find", &env.s(), "f.txt", "--json"]);
    assert_eq!(v["paths"].as_array().map(Vec::len), Some(40), "{v}");
    for p in v["paths"].as_array().expect("paths") {
        assert_eq!(p["found_in"].as_array().map(Vec::len), Some(checkpoints));
    }
    // deep/ and its 40 subdirectories once, plus one root tree per checkpoint: not 10 x 42.
    let read = n(&v["trees_read"]);
    assert_eq!(read, 41 + checkpoints as u64, "{v}");
}
