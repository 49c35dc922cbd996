//! Default credential excludes for every root (not only `home`), keep rules (`!GLOB`) and
//! `--no-default-excludes`, checked on what a capture records.

use std::fs;
use std::path::{Path, PathBuf};

use crate::support::*;
use serde_json::Value;

/// Credentials real tools write, at the depth they would have in a root that is a home
/// directory or a project.
const SECRETS: &[&str] = &[
    ".aws/credentials",
    ".aws/sso/cache/0123abcd.json",
    ".config/gcloud/application_default_credentials.json",
    ".config/gcloud/credentials.db",
    ".azure/msal_token_cache.json",
    ".netrc",
    ".git-credentials",
    ".config/gh/hosts.yml",
    ".ssh/id_ed25519",
    ".ssh/id_rsa",
    ".env",
    "proj/.env.local",
    "proj/.npmrc",
    ".docker/config.json",
    ".kube/config",
    ".vault-token",
    "proj/tls/server.key",
    ".codex/auth.json",
    ".claude/.credentials.json",
];

/// Look-alikes that are no credentials and must be captured.
const ORDINARY: &[&str] = &[
    ".ssh/id_ed25519.pub",
    ".ssh/known_hosts",
    "proj/.env.example",
    ".aws/config",
    "venv/lib/certifi/cacert.pem",
    "proj/src/auth.json",
    "proj/src/id_map.rs",
    "notes.txt",
];

/// A store with root `ws` (not `home`) over a room holding [`SECRETS`] and [`ORDINARY`].
fn room_store(tmp: &Path, init_extra: &[&str]) -> PathBuf {
    let room = tmp.join("room");
    for rel in SECRETS.iter().chain(ORDINARY) {
        write(&room.join(rel), format!("content of {rel}\n").as_bytes());
    }
    let store = tmp.join("store");
    let root = format!("ws={}", s(&room));
    let mut args = vec!["init", s(&store), "--root", &root];
    args.extend_from_slice(init_extra);
    ok(&args);
    store
}

/// Files (not directories) a new capture of `store` records.
fn captured_files(store: &Path) -> Vec<String> {
    let id = capture(store, &[]);
    let ls = ok_json(["ls", s(store), &format!("{id}:ws"), "-r"]);
    ls.as_array()
        .expect("array")
        .iter()
        .filter(|e| e["type"] != "dir")
        .map(|e| e["path"].as_str().expect("path").to_string())
        .collect()
}

#[test]
fn every_root_keeps_credentials_out_by_default() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = room_store(tmp.path(), &[]);
    let files = captured_files(&store);
    for secret in SECRETS {
        assert!(
            !files.iter().any(|f| f == secret),
            "{secret} captured: {files:?}"
        );
    }
    for plain in ORDINARY {
        assert!(
            files.iter().any(|f| f == plain),
            "{plain} left out: {files:?}"
        );
    }
    // The rules are in STORE.json, visible and editable.
    let cfg: Value =
        serde_json::from_slice(&fs::read(store.join("STORE.json")).expect("cfg")).expect("json");
    let rules: Vec<&str> = cfg["roots"]["ws"]["exclude"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| r.as_str().expect("rule"))
        .collect();
    for r in [".netrc", "**/.aws/credentials", ".env", "!**/.ssh/*.pub"] {
        assert!(rules.contains(&r), "{r} not in STORE.json: {rules:?}");
    }
}

#[test]
fn no_default_excludes_captures_everything_and_doctor_notes_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = room_store(tmp.path(), &["--no-default-excludes"]);
    let files = captured_files(&store);
    for rel in SECRETS.iter().chain(ORDINARY) {
        assert!(files.iter().any(|f| f == rel), "{rel} left out: {files:?}");
    }
    let d = ok_json(["doctor", s(&store)]);
    let notes: Vec<&Value> = d["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["check"] == "security" && f["subject"] == "root ws")
        .collect();
    assert_eq!(notes.len(), 1, "{d}");
    assert_eq!(notes[0]["severity"], "info", "{d}");
}

#[test]
fn a_keep_rule_switches_one_default_off_for_one_root() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = room_store(tmp.path(), &["--exclude", "ws=!.netrc"]);
    let files = captured_files(&store);
    assert!(files.iter().any(|f| f == ".netrc"), "{files:?}");
    for secret in SECRETS.iter().filter(|s| **s != ".netrc") {
        assert!(
            !files.iter().any(|f| f == secret),
            "{secret} captured: {files:?}"
        );
    }
}
