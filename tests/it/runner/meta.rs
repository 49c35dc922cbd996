//! Checkpoint metadata without turns: `capture --meta` / `--meta-file`, shown by `show` and
//! `log` (and their --json), selected by `log --meta`; bad metadata refused in one line with
//! nothing recorded; a record without metadata keeps the format older builds wrote.

use std::fs;

use crate::support::*;

#[test]
fn capture_records_meta_and_log_selects_by_it() {
    let e = Env::new();
    write(&e.ws().join("a"), b"1");
    let meta = e.path("meta.json");
    fs::write(
        &meta,
        br#"{"thread": "t-1", "turn": 1, "done": true, "note": null}"#,
    )
    .unwrap();
    let first = e.capture(&["--meta-file", meta.to_str().unwrap(), "--meta", "run=r1"]);
    write(&e.ws().join("a"), b"2");
    let second = e.capture(&["--meta", "thread=t-2", "--meta", "empty="]);
    let plain = e.capture(&[]);
    let (first, second, plain) = (
        first["id"].as_str().unwrap(),
        second["id"].as_str().unwrap(),
        plain["id"].as_str().unwrap(),
    );
    let c = record_of(&e.store, first);
    assert_eq!(c["meta"]["thread"], "t-1");
    assert_eq!(c["meta"]["turn"], 1);
    assert_eq!(c["meta"]["done"], true);
    assert!(c["meta"]["note"].is_null() && c["meta"].get("note").is_some());
    assert_eq!(c["meta"]["run"], "r1");
    assert_eq!(record_of(&e.store, second)["meta"]["empty"], "");
    // log --meta: strings as given, other values as JSON text; all must match.
    let sel = |args: &[&str]| {
        let mut a = vec!["--meta"];
        a.extend_from_slice(args);
        log_ids(&e.store, &a)
    };
    assert_eq!(sel(&["thread=t-1"]), vec![first.to_string()]);
    assert_eq!(sel(&["turn=1"]), vec![first.to_string()]);
    assert_eq!(sel(&["done=true"]), vec![first.to_string()]);
    assert_eq!(sel(&["empty="]), vec![second.to_string()]);
    assert!(sel(&["thread=t-3"]).is_empty());
    let both = log_ids(&e.store, &["--meta", "thread=t-1", "--meta", "run=r1"]);
    assert_eq!(both, vec![first.to_string()]);
    // Text and JSON listings show it; a checkpoint without meta shows none.
    let text = ok(["log", &e.s()]);
    assert!(
        text.contains("{done=true note=null run=r1 thread=t-1 turn=1}"),
        "{text}"
    );
    let rows = ok_json(["log", &e.s()]);
    let row = |id: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(row(first)["meta"]["thread"], "t-1");
    assert!(row(plain).get("meta").is_none());
    assert!(ok(["show", &e.s(), second]).contains("meta       thread=t-2"));
    // A record without metadata is in the old format: none of the new keys.
    let raw = fs::read_to_string(e.store.join("checkpoints").join(plain)).unwrap();
    for k in ["\"meta\"", "\"runtime\"", "\"turn\""] {
        assert!(!raw.contains(k), "{raw}");
    }
    assert!(raw.ends_with("}}"), "stats is still the last field: {raw}");
}

#[test]
fn bad_meta_is_refused_and_records_nothing() {
    let e = Env::new();
    write(&e.ws().join("a"), b"1");
    e.capture(&[]);
    let before = checkpoints(&e.store);
    let s = e.s();
    let file = |name: &str, body: &[u8]| {
        let p = e.path(name);
        fs::write(&p, body).unwrap();
        p.to_str().unwrap().to_string()
    };
    let nested = file("nested.json", br#"{"k": {"x": 1}}"#);
    let list = file("list.json", br#"[1, 2]"#);
    let notjson = file("bad.json", b"thread=1");
    let huge = file(
        "huge.json",
        format!(r#"{{"reply": "{}"}}"#, "x".repeat(70 << 10)).as_bytes(),
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--meta", "no-equals"], "KEY=VALUE"),
        (vec!["--meta", "bad key=1"], "meta key"),
        (vec!["--meta", "=v"], "meta key"),
        (vec!["--meta=-dash=v"], "meta key"),
        (vec!["--meta-file", &nested], "object"),
        (vec!["--meta-file", &list], "JSON object"),
        (vec!["--meta-file", &notjson], "not JSON"),
        (vec!["--meta-file", &huge], "bytes"),
    ];
    for (extra, word) in cases {
        let mut args = vec!["capture", s.as_str()];
        args.extend(extra.iter().copied());
        refused(2, &args, &[word]);
    }
    assert_eq!(checkpoints(&e.store), before);
    // A missing file is an error for capture (turn alone reads it after its command).
    refused(
        1,
        ["capture", &s, "--meta-file", "/nonexistent/m.json"],
        &["m.json"],
    );
    assert_eq!(checkpoints(&e.store), before);
}
