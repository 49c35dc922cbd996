//! `forget` and `label delete`: refusals that change nothing, a secret's object really gone
//! after forget + gc (also from a workspace), dry run == the real plan, the gap in `log`,
//! idempotence, the audit line of a label deletion, and `log` going on past a corrupt record.
//! Helpers are local (copied from tests/common and tests/wscommon) so this file stands alone.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ckptfs")
}

fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env_remove("CKPTFS_FAULT")
        .env_remove("RUST_LOG")
        .output()
        .expect("run ckptfs")
}

fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "ckptfs {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ok_json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let out = ok(&a);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad JSON from {a:?}: {e}\n{out}"))
}

/// Asserts exit 1 with exactly one line on stderr; returns it.
fn fails(args: &[&str]) -> String {
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "ckptfs {args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one error line: {err}");
    err.trim_end().to_string()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

struct Env {
    tmp: tempfile::TempDir,
    store: PathBuf,
    room: PathBuf,
}

impl Env {
    fn new() -> Env {
        let tmp = tempfile::Builder::new()
            .prefix("ckptfs-forget-")
            .tempdir()
            .expect("tempdir");
        let store = tmp.path().join("store");
        let room = tmp.path().join("room");
        fs::create_dir_all(&room).expect("mkdir room");
        ok(&["init", s(&store), "--root", &format!("ws={}", s(&room))]);
        Env { tmp, store, room }
    }
    fn st(&self) -> &str {
        s(&self.store)
    }
    fn capture(&self, msg: &str) -> String {
        let v = ok_json(&["capture", self.st(), "-m", msg]);
        v["id"].as_str().expect("id").to_string()
    }
    fn write(&self, rel: &str, data: &[u8]) {
        let p = self.room.join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, data).expect("write");
    }
    fn log_ids(&self, extra: &[&str]) -> Vec<String> {
        let mut a = vec!["log", self.st()];
        a.extend_from_slice(extra);
        ok_json(&a)
            .as_array()
            .expect("array")
            .iter()
            .map(|r| r["id"].as_str().expect("id").to_string())
            .collect()
    }
}

/// Every file of the store (not crossing into mounts) with its bytes; directories as empty.
fn store_state(store: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, dev: u64, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in fs::read_dir(dir).expect("read_dir") {
            let p = e.expect("entry").path();
            let md = fs::symlink_metadata(&p).expect("lstat");
            if md.dev() != dev {
                continue; // a mount (the workspaces' lower view)
            }
            let rel = p.strip_prefix(base).expect("prefix").display().to_string();
            if md.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(base, &p, dev, out);
            } else if md.is_file() {
                out.insert(rel, fs::read(&p).expect("read"));
            } else {
                out.insert(rel, b"(special)".to_vec());
            }
        }
    }
    let dev = fs::metadata(store).expect("stat store").dev();
    let mut out = BTreeMap::new();
    walk(store, store, dev, &mut out);
    out
}

/// Store files whose bytes contain `needle`.
fn files_holding(store: &Path, needle: &[u8]) -> Vec<String> {
    store_state(store)
        .into_iter()
        .filter(|(_, data)| data.windows(needle.len()).any(|w| w == needle))
        .map(|(p, _)| p)
        .collect()
}

/// Path of the (uncompressed) object holding exactly `data`: its id is their SHA-256.
fn object_of(store: &Path, data: &[u8]) -> PathBuf {
    let id = ckptfs::ObjectId::of(data).to_hex();
    store.join("objects").join(&id[..2]).join(&id[2..])
}

const SECRET: &[u8] = b"aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY-7f3a\n";

/// main: C1 (no secret), C2 (captures `leak.txt` with the secret), C3 (secret removed).
fn leaky_history(env: &Env) -> [String; 3] {
    env.write("a.txt", b"alpha\n");
    let c1 = env.capture("one");
    env.write("leak.txt", SECRET);
    let c2 = env.capture("two: oops");
    fs::remove_file(env.room.join("leak.txt")).expect("rm");
    env.write("b.txt", b"beta\n");
    let c3 = env.capture("three");
    [c1, c2, c3]
}

#[test]
fn forget_then_gc_removes_the_secret_and_history_keeps_working() {
    let env = Env::new();
    let [c1, c2, c3] = leaky_history(&env);
    let obj = object_of(&env.store, SECRET);
    assert!(obj.exists(), "fixture: the secret is an object");

    let r = ok_json(&["forget", env.st(), &c2[..12]]);
    assert_eq!(r["checkpoints"][0]["id"], c2.as_str());
    assert_eq!(r["objects_only_theirs"], 2, "{r}"); // its root tree and the secret's chunk
    assert!(!env.store.join("checkpoints").join(&c2).exists());
    assert!(obj.exists(), "without --prune the object waits for gc");

    // log -b main steps over the gap to C1; the JSON array stays rows of checkpoints.
    assert_eq!(env.log_ids(&["-b", "main"]), vec![c3.clone(), c1.clone()]);
    let text = ok(&["log", env.st(), "-b", "main"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[1].contains(&c2[..12]) && lines[1].contains("forgotten"),
        "{text}"
    );
    assert_eq!(env.log_ids(&[]), vec![c3.clone(), c1.clone()]);
    ok(&["diff", env.st(), &c1, &c3]);
    ok(&["verify", env.st(), "--all"]);
    let doctor = ok_json(&["doctor", env.st()]);
    let errors: Vec<&Value> = doctor["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["severity"] == "error")
        .collect();
    assert!(errors.is_empty(), "doctor after forget: {errors:?}");

    let gc = ok_json(&["gc", env.st()]);
    assert!(gc["objects_removed"].as_u64() >= Some(2), "{gc}");
    assert!(!obj.exists(), "gc removed the secret's object");
    assert_eq!(files_holding(&env.store, SECRET), Vec::<String>::new());
    assert_eq!(
        files_holding(&env.store, b"leak.txt"),
        Vec::<String>::new(),
        "not even its name (stat caches, trees) is left"
    );
    ok(&["verify", env.st(), "--all"]);
    assert_eq!(env.log_ids(&["-b", "main"]), vec![c3, c1]);
}

#[test]
fn forget_refuses_heads_and_labels_and_changes_nothing() {
    let env = Env::new();
    let [c1, c2, c3] = leaky_history(&env);
    ok(&["label", env.st(), &c1, "before"]);
    let before = store_state(&env.store);

    let e = fails(&["forget", env.st(), &c3]);
    assert!(e.contains("head of branch main"), "{e}");
    let e = fails(&["forget", env.st(), "main"]);
    assert!(e.contains("head of branch main"), "{e}");
    let e = fails(&["forget", env.st(), &c2, &c1]);
    assert!(
        e.contains("has label before") && e.contains("label delete"),
        "{e}"
    );
    assert_eq!(
        store_state(&env.store),
        before,
        "a refusal changes nothing, not even audit"
    );

    // A live pin (what mounts and views register): refused while its process lives.
    let pins = env.store.join("run/pins");
    fs::create_dir_all(&pins).expect("mkdir pins");
    let pin = serde_json::json!({"pid": std::process::id(), "owner": "test", "all": false,
        "checkpoints": [c2], "branches": []});
    fs::write(
        pins.join(format!("test-{}.json", std::process::id())),
        pin.to_string(),
    )
    .expect("pin");
    let e = fails(&["forget", env.st(), &c2]);
    assert!(e.contains("pinned by a live test"), "{e}");
    fs::remove_file(pins.join(format!("test-{}.json", std::process::id()))).expect("unpin");
    ok(&["forget", env.st(), &c2]);
}

#[test]
fn forget_refuses_what_a_mounted_view_or_workspace_stands_on() {
    let env = Env::new();
    let [c1, _c2, _c3] = leaky_history(&env);
    // A read-only view pins its checkpoint.
    let mnt = env.tmp.path().join("view");
    fs::create_dir_all(&mnt).expect("mkdir");
    ok(&["mount", env.st(), &format!("{c1}:ws"), "--at", s(&mnt)]);
    let e = fails(&["forget", env.st(), &c1]);
    ok(&["umount", s(&mnt)]);
    assert!(e.contains("pinned by a live"), "{e}");

    // A workspace stands on its base; move the branch head away under it.
    ok(&["mount", env.st(), "--branch", "main"]);
    let base = env.log_ids(&[])[0].clone();
    let other = env.tmp.path().join("other");
    fs::create_dir_all(&other).expect("mkdir");
    let moved = run(&[
        "capture",
        env.st(),
        "--from",
        &format!("ws={}", s(&other)),
        "-m",
        "moved",
    ]);
    let e = run(&["forget", env.st(), &base]);
    ok(&["umount", s(&env.room)]);
    assert!(moved.status.success(), "{moved:?}");
    let e = String::from_utf8_lossy(&e.stderr).into_owned();
    assert!(e.contains("base of branch main's workspace"), "{e}");
}

#[test]
fn forget_in_a_workspace_and_prune_leaves_no_trace_of_the_secret() {
    let env = Env::new();
    env.write("a.txt", b"alpha\n");
    env.capture("one");
    ok(&["mount", env.st(), "--branch", "main"]);
    let result = std::panic::catch_unwind(|| {
        env.write("leak.txt", SECRET);
        let c2 = ok_json(&["checkpoint", s(&env.room), "-m", "oops"])["id"]
            .as_str()
            .expect("id")
            .to_string();
        fs::remove_file(env.room.join("leak.txt")).expect("rm");
        ok_json(&["checkpoint", s(&env.room), "-m", "fixed"]);
        let r = ok_json(&["forget", env.st(), &c2, "--prune"]);
        assert!(r["gc"]["objects_removed"].as_u64() >= Some(2), "{r}");
        assert!(!object_of(&env.store, SECRET).exists());
        assert_eq!(files_holding(&env.store, SECRET), Vec::<String>::new());
        assert_eq!(files_holding(&env.store, b"leak.txt"), Vec::<String>::new());
    });
    ok(&["umount", s(&env.room)]);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn dry_run_prints_the_plan_that_is_then_applied_and_changes_nothing() {
    let env = Env::new();
    let [_c1, c2, _c3] = leaky_history(&env);
    let before = store_state(&env.store);
    let plan = ok_json(&["forget", env.st(), &c2, "--prune", "--dry-run"]);
    assert_eq!(
        store_state(&env.store),
        before,
        "the dry run changed the store"
    );
    let done = ok_json(&["forget", env.st(), &c2, "--prune"]);
    assert_eq!(plan, done);
    assert_eq!(done["gc"]["pruned"][0]["id"], c2.as_str(), "{done}");
    assert!(!object_of(&env.store, SECRET).exists());
    // Audited, and idempotent: forgetting it again is no error and changes nothing.
    let audit = fs::read_to_string(env.store.join("audit.jsonl")).expect("audit");
    let last: Value = serde_json::from_str(audit.lines().last().expect("line")).expect("json");
    assert_eq!(last["op"], "forget");
    assert_eq!(last["args"]["checkpoints"][0], c2.as_str());
    let after = store_state(&env.store);
    let again = ok_json(&["forget", env.st(), &c2]);
    assert_eq!(again["already_forgotten"][0], c2.as_str());
    assert_eq!(store_state(&env.store), after);
}

#[test]
fn label_delete_is_audited_and_only_then_the_name_is_free() {
    let env = Env::new();
    let [c1, c2, _c3] = leaky_history(&env);
    ok(&["label", env.st(), &c1, "rel"]);
    let e = fails(&["label", env.st(), &c2, "rel"]);
    assert!(e.contains("immutable"), "{e}");
    let out = ok(&["label", "delete", env.st(), "rel"]);
    assert!(out.contains(&c1[..12]), "{out}");
    assert!(!env.store.join("refs/labels/rel").exists());
    let audit = fs::read_to_string(env.store.join("audit.jsonl")).expect("audit");
    let last: Value = serde_json::from_str(audit.lines().last().expect("line")).expect("json");
    assert_eq!(last["op"], "label-delete");
    assert_eq!(last["ok"], true);
    assert_eq!(last["args"]["label"], "rel");
    assert_eq!(last["args"]["checkpoint"], c1.as_str());
    assert!(last["args"]["by"]["uid"].is_u64(), "{last}");
    assert!(last["time"].is_string(), "{last}");
    // Deleted, the name can be created again, at another checkpoint.
    ok(&["label", env.st(), &c2, "rel"]);
    assert_eq!(
        fs::read_to_string(env.store.join("refs/labels/rel"))
            .expect("label")
            .trim(),
        c2
    );
    let e = fails(&["label", "delete", env.st(), "nosuch"]);
    assert!(e.contains("label nosuch"), "{e}");
    // And an unlabelled checkpoint can then be forgotten.
    ok(&["label", "delete", env.st(), "rel"]);
    ok(&["forget", env.st(), &c2]);
}

#[test]
fn log_lists_the_rest_when_a_record_or_label_is_corrupt() {
    let env = Env::new();
    let [c1, c2, c3] = leaky_history(&env);
    ok(&["label", env.st(), &c1, "first"]);
    let rec = env.store.join("checkpoints").join(&c2);
    let mut perm = fs::metadata(&rec).expect("stat").permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perm.set_readonly(false);
    fs::set_permissions(&rec, perm).expect("chmod");
    fs::write(&rec, b"{ not a record").expect("corrupt");
    fs::write(env.store.join("refs/labels/broken"), b"not an id\n").expect("bad label");

    let o = run(&["log", env.st(), "--json"]);
    assert!(o.status.success(), "{o:?}");
    let rows: Value = serde_json::from_slice(&o.stdout).expect("json array");
    let ids: Vec<&str> = rows
        .as_array()
        .expect("array")
        .iter()
        .map(|r| r["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, vec![c3.as_str(), c1.as_str()]);
    assert_eq!(rows[1]["labels"][0], "first", "good labels still shown");
    let err = String::from_utf8_lossy(&o.stderr);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 2, "{err}");
    assert!(warnings.iter().any(|w| w.contains(&c2)), "{err}");
    assert!(warnings.iter().any(|w| w.contains("broken")), "{err}");

    // Along the branch the line stops at the bad record, after listing what came before it.
    let o = run(&["log", env.st(), "-b", "main"]);
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with(&c3[..12]), "{out}");
    assert!(String::from_utf8_lossy(&o.stderr).contains(&c2), "{o:?}");
}
