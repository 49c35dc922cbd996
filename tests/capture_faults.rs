//! A capture that fails at any durable I/O step (as on a full disk: `CKPTFS_FAULT=fail:N`
//! strikes a write after its file exists) leaves no temp file behind, and no record that
//! `log` lists without it being on its branch. Helpers are local.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn ckptfs(args: &[&str], fault: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ckptfs"));
    c.args(args).env_remove("RUST_LOG");
    match fault {
        Some(f) => c.env("CKPTFS_FAULT", f),
        None => c.env_remove("CKPTFS_FAULT"),
    };
    c.output().expect("run ckptfs")
}

fn ok(args: &[&str]) -> String {
    let o = ckptfs(args, None);
    assert!(o.status.success(), "ckptfs {args:?}: {o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn log_ids(store: &Path, extra: &[&str]) -> Vec<String> {
    let mut a = vec!["log", s(store), "--json"];
    a.extend_from_slice(extra);
    let v: Value = serde_json::from_str(&ok(&a)).expect("json");
    let mut ids: Vec<String> = v
        .as_array()
        .expect("array")
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_string())
        .collect();
    ids.sort();
    ids
}

/// Temp files anywhere in the store: `tmp/*`, `.tmp-*`, stat caches' `*.tmp`.
fn temp_files(dir: &Path, out: &mut Vec<String>) {
    for e in fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        let name = p.file_name().expect("name").to_string_lossy().into_owned();
        let in_tmp = p.parent().and_then(|d| d.file_name()) == Some("tmp".as_ref());
        if p.is_dir() {
            temp_files(&p, out);
        } else if in_tmp || name.starts_with(".tmp-") || name.ends_with(".tmp") {
            out.push(p.display().to_string());
        }
    }
}

/// A store whose second capture writes new objects, a record, the branch ref, a stat cache.
fn fixture(dir: &Path) -> std::path::PathBuf {
    let room = dir.join("room");
    fs::create_dir_all(room.join("sub")).expect("mkdir");
    fs::write(room.join("a.txt"), b"alpha\n").expect("write");
    let store = dir.join("store");
    ok(&["init", s(&store), "--root", &format!("ws={}", s(&room))]);
    ok(&["capture", s(&store), "-m", "first"]);
    fs::write(room.join("sub/b.txt"), vec![7u8; 300_000]).expect("write");
    fs::write(room.join("c.txt"), b"gamma\n").expect("write");
    store
}

#[test]
fn a_capture_failing_at_any_step_leaves_no_temp_files_and_no_stray_record() {
    let probe = tempfile::tempdir().expect("tempdir");
    let store = fixture(probe.path());
    let o = ckptfs(&["capture", s(&store), "-m", "second"], Some("count"));
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    let steps: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("ckptfs: io steps: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no step count: {err}"));
    assert!(steps > 8, "{steps} steps");

    for n in 1..=steps {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = fixture(dir.path());
        let before = log_ids(&store, &[]);
        let o = ckptfs(
            &["capture", s(&store), "-m", "second"],
            Some(&format!("fail:{n}")),
        );
        let mut temps = Vec::new();
        temp_files(&store, &mut temps);
        assert_eq!(temps, Vec::<String>::new(), "step {n}: {o:?}");
        let all = log_ids(&store, &[]);
        let on_main = log_ids(&store, &["-b", "main"]);
        assert_eq!(all, on_main, "step {n}: a record off the branch: {o:?}");
        if !o.status.success() {
            let e = String::from_utf8_lossy(&o.stderr);
            assert!(e.contains("injected fault"), "step {n}: {e}");
            assert!(all.len() == before.len() || all.len() == before.len() + 1);
        }
    }
}
