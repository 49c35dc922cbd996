//! Corruption detection: verify re-hashes everything and reports every finding with the
//! checkpoint paths that use it; reads never return wrong bytes; restore checks first.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::support::*;

fn chunk_of(env: &Env, spec: &str) -> String {
    let ls = ok_json(["ls", &env.s(), spec]);
    let _ = ls; // ls does not expose chunk ids; read the tree through the library instead.
    let store = ckptfs::Store::open(&env.store).unwrap();
    let loc = ckptfs::history::walk::locate(&store, spec).unwrap();
    match loc.entry.unwrap().kind {
        ckptfs::store::tree::EntryKind::File { chunks } => chunks[0].id.to_hex(),
        _ => panic!("{spec} is not a file"),
    }
}

fn flip_byte(path: &std::path::Path) {
    let mut p = fs::metadata(path).unwrap().permissions();
    p.set_mode(0o644);
    fs::set_permissions(path, p).unwrap();
    let mut data = fs::read(path).unwrap();
    let i = data.len() / 2;
    data[i] ^= 0x5a;
    fs::write(path, data).unwrap();
}

#[test]
fn verify_reports_every_corrupt_and_missing_object_with_paths() {
    let env = Env::new();
    small_tree(env.ws());
    write(&env.ws().join("x/one.txt"), b"one one one");
    let a = env.capture_id(&[]);
    write(&env.ws().join("later.txt"), b"later");
    let b = env.capture_id(&[]);

    let clean = ok_json(["verify", &env.s()]);
    assert_eq!(clean["checkpoints"], 2);
    assert_eq!(clean["findings"], serde_json::json!([]));

    let flipped = chunk_of(&env, &format!("{a}:ws/sub/b.txt"));
    let deleted = chunk_of(&env, &format!("{a}:ws/x/one.txt"));
    flip_byte(&env.object_file(&flipped));
    fs::remove_file(env.object_file(&deleted)).unwrap();

    let o = run(["verify", &env.s(), "--json"]);
    assert_eq!(o.status.code(), Some(1), "verify must exit 1 on findings");
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let findings = r["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 2, "{r}");
    let f_corrupt = findings
        .iter()
        .find(|f| f["object"] == flipped.as_str())
        .unwrap();
    let f_missing = findings
        .iter()
        .find(|f| f["object"] == deleted.as_str())
        .unwrap();
    assert_eq!(f_corrupt["problem"], "corrupt");
    assert_eq!(f_missing["problem"], "missing");
    // Both checkpoints use both files: every using path is named.
    let used: Vec<&str> = f_corrupt["used_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap())
        .collect();
    assert_eq!(used.len(), 2, "{used:?}");
    assert!(
        used.contains(&format!("{}:ws/sub/b.txt", &a[..12]).as_str()),
        "{used:?}"
    );
    assert!(
        used.contains(&format!("{}:ws/sub/b.txt", &b[..12]).as_str()),
        "{used:?}"
    );
    assert!(f_missing["used_by"][0]
        .as_str()
        .unwrap()
        .ends_with(":ws/x/one.txt"));

    // Human output names both problems and paths too.
    let o = run(["verify", &env.s()]);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("corrupt") && text.contains("missing"),
        "{text}"
    );
    assert!(
        text.contains("ws/x/one.txt") && text.contains("2 findings"),
        "{text}"
    );

    // Reading the corrupt file fails instead of returning wrong bytes.
    let o = run(["cat", &env.s(), &format!("{a}:ws/sub/b.txt")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty(), "cat printed bytes of a corrupt object");
    assert!(String::from_utf8_lossy(&o.stderr).contains(&flipped));

    // Restore checks everything before touching DIR.
    let dest = env.path("dest");
    write(&dest.join("keep"), b"keep");
    let before = snapshot(&dest);
    let err = fails(
        1,
        ["restore", &env.s(), &a, "--to", &dest.display().to_string()],
    );
    assert!(
        err.contains("corrupt") || err.contains("not found"),
        "{err}"
    );
    assert_snapshots_equal(&before, &snapshot(&dest), "DIR after a refused restore");
    let parent: Vec<_> = fs::read_dir(env.tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        !parent
            .iter()
            .any(|n| n.to_string_lossy().contains("ckptfs")),
        "{parent:?}"
    );
}

#[test]
fn verify_finds_a_corrupt_tree_and_a_corrupt_record() {
    let env = Env::with_roots(&["ws"], &["--compression", "zstd"]);
    small_tree(env.ws());
    let a = env.capture_id(&[]);
    let rec = record(&env.store, &a);
    let sub_tree = {
        let store = ckptfs::Store::open(&env.store).unwrap();
        let loc = ckptfs::history::walk::locate(&store, &format!("{a}:ws/sub")).unwrap();
        loc.dir_tree().unwrap().to_hex()
    };
    flip_byte(&env.object_file(&sub_tree));
    let o = run(["verify", &env.s(), &a[..8], "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["findings"][0]["object"], sub_tree.as_str());
    assert_eq!(
        r["findings"][0]["used_by"][0],
        format!("{}:ws/sub/", &a[..12]).as_str()
    );
    assert!(rec["roots"]["ws"]["tree"].is_string());

    // A tampered checkpoint record no longer matches its id.
    let p = env.store.join("checkpoints").join(&a);
    let mut p_perm = fs::metadata(&p).unwrap().permissions();
    p_perm.set_mode(0o644);
    fs::set_permissions(&p, p_perm).unwrap();
    let text = fs::read_to_string(&p)
        .unwrap()
        .replace("\"message\":\"\"", "\"message\":\"x\"");
    fs::write(&p, text).unwrap();
    let o = run(["verify", &env.s(), "--all", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["object"] == a.as_str() && f["problem"] == "corrupt"),
        "{r}"
    );
}
