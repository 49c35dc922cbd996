//! `forget` and `label delete`: refusals that change nothing, a secret's object really gone
//! after forget + gc (also from a workspace), dry run == the real plan, the gap in `log`,
//! idempotence, the audit line of a label deletion, and `log` going on past a corrupt record.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::support::*;
use serde_json::Value;

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
    write(&env.ws().join("a.txt"), b"alpha\n");
    let c1 = env.capture_id(&["-m", "one"]);
    write(&env.ws().join("leak.txt"), SECRET);
    let c2 = env.capture_id(&["-m", "two: oops"]);
    fs::remove_file(env.ws().join("leak.txt")).expect("rm");
    write(&env.ws().join("b.txt"), b"beta\n");
    let c3 = env.capture_id(&["-m", "three"]);
    [c1, c2, c3]
}

#[test]
fn forget_then_gc_removes_the_secret_and_history_keeps_working() {
    let env = Env::new();
    let st = env.s();
    let [c1, c2, c3] = leaky_history(&env);
    let obj = object_of(&env.store, SECRET);
    assert!(obj.exists(), "fixture: the secret is an object");

    let r = ok_json(["forget", &st, &c2[..12]]);
    assert_eq!(r["checkpoints"][0]["id"], c2.as_str());
    assert_eq!(r["objects_only_theirs"], 2, "{r}"); // its root tree and the secret's chunk
    assert!(!env.store.join("checkpoints").join(&c2).exists());
    assert!(obj.exists(), "without --prune the object waits for gc");

    // log -b main steps over the gap to C1; the JSON array stays rows of checkpoints.
    assert_eq!(
        log_ids(&env.store, &["-b", "main"]),
        vec![c3.clone(), c1.clone()]
    );
    let text = ok(["log", &st, "-b", "main"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[1].contains(&c2[..12]) && lines[1].contains("forgotten"),
        "{text}"
    );
    assert_eq!(log_ids(&env.store, &[]), vec![c3.clone(), c1.clone()]);
    ok(["diff", &st, &c1, &c3]);
    ok(["verify", &st, "--all"]);
    let doctor = ok_json(["doctor", &st]);
    let errors: Vec<&Value> = doctor["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["severity"] == "error")
        .collect();
    assert!(errors.is_empty(), "doctor after forget: {errors:?}");

    let gc = ok_json(["gc", &st]);
    assert!(gc["objects_removed"].as_u64() >= Some(2), "{gc}");
    assert!(!obj.exists(), "gc removed the secret's object");
    assert_eq!(files_holding(&env.store, SECRET), Vec::<String>::new());
    assert_eq!(
        files_holding(&env.store, b"leak.txt"),
        Vec::<String>::new(),
        "not even its name (stat caches, trees) is left"
    );
    ok(["verify", &st, "--all"]);
    assert_eq!(log_ids(&env.store, &["-b", "main"]), vec![c3, c1]);
}

#[test]
fn forget_refuses_heads_and_labels_and_changes_nothing() {
    let env = Env::new();
    let st = env.s();
    let [c1, c2, c3] = leaky_history(&env);
    ok(["label", &st, &c1, "before"]);
    let before = store_state(&env.store);

    let e = fails(1, ["forget", &st, &c3]);
    assert!(e.contains("head of branch main"), "{e}");
    let e = fails(1, ["forget", &st, "main"]);
    assert!(e.contains("head of branch main"), "{e}");
    let e = fails(1, ["forget", &st, &c2, &c1]);
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
    let e = fails(1, ["forget", &st, &c2]);
    assert!(e.contains("pinned by a live test"), "{e}");
    fs::remove_file(pins.join(format!("test-{}.json", std::process::id()))).expect("unpin");
    ok(["forget", &st, &c2]);
}

#[test]
fn forget_refuses_what_a_mounted_view_or_workspace_stands_on() {
    let env = Env::new();
    let st = env.s();
    let [c1, _c2, _c3] = leaky_history(&env);
    // A read-only view pins its checkpoint.
    let mnt = env.path("view");
    fs::create_dir_all(&mnt).expect("mkdir");
    let _view = MountGuard::new(&mnt);
    ok(["mount", &st, &format!("{c1}:ws"), "--at", s(&mnt)]);
    let e = fails(1, ["forget", &st, &c1]);
    ok(["umount", s(&mnt)]);
    assert!(e.contains("pinned by a live"), "{e}");

    // A workspace stands on its base; move the branch head away under it.
    let _ws = MountGuard::new(env.ws());
    ok(["mount", &st, "--branch", "main"]);
    let base = log_ids(&env.store, &[])[0].clone();
    let other = env.path("other");
    fs::create_dir_all(&other).expect("mkdir");
    let moved = run([
        "capture",
        &st,
        "--from",
        &format!("ws={}", s(&other)),
        "-m",
        "moved",
    ]);
    let e = run(["forget", &st, &base]);
    ok(["umount", s(env.ws())]);
    assert!(moved.status.success(), "{moved:?}");
    let e = stderr(&e);
    assert!(e.contains("base of branch main's workspace"), "{e}");
}

#[test]
fn forget_in_a_workspace_and_prune_leaves_no_trace_of_the_secret() {
    let w = Workspace::new(|room| write(&room.join("a.txt"), b"alpha\n"));
    write(&w.path("leak.txt"), SECRET);
    let c2 = w.checkpoint("oops");
    fs::remove_file(w.path("leak.txt")).expect("rm");
    w.checkpoint("fixed");
    // The fold after "oops" made c2 the workspace's base for a turn: the lower view holds it
    // until the old overlay is gone and the kernel forgets its directory (as after a switch,
    // see health_workspace's the_lower_view_unpins_a_base_the_kernel_forgot).
    let mut done = None;
    eventually("the lower view lets go of c2", || {
        fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
        let o = run(["forget", w.store(), &c2, "--prune", "--json"]);
        let ok = o.status.success();
        done = Some(o);
        ok
    });
    let r: Value = serde_json::from_slice(&done.expect("ran").stdout).expect("json");
    assert!(r["gc"]["objects_removed"].as_u64() >= Some(2), "{r}");
    assert!(!object_of(&w.store, SECRET).exists());
    assert_eq!(files_holding(&w.store, SECRET), Vec::<String>::new());
    assert_eq!(files_holding(&w.store, b"leak.txt"), Vec::<String>::new());
    ok(["umount", w.room()]);
}

#[test]
fn dry_run_prints_the_plan_that_is_then_applied_and_changes_nothing() {
    let env = Env::new();
    let st = env.s();
    let [_c1, c2, _c3] = leaky_history(&env);
    let before = store_state(&env.store);
    let plan = ok_json(["forget", &st, &c2, "--prune", "--dry-run"]);
    assert_eq!(
        store_state(&env.store),
        before,
        "the dry run changed the store"
    );
    let done = ok_json(["forget", &st, &c2, "--prune"]);
    assert_eq!(plan, done);
    assert_eq!(done["gc"]["pruned"][0]["id"], c2.as_str(), "{done}");
    assert!(!object_of(&env.store, SECRET).exists());
    // Audited, and idempotent: forgetting it again is no error and changes nothing.
    let audit = fs::read_to_string(env.store.join("audit.jsonl")).expect("audit");
    let last: Value = serde_json::from_str(audit.lines().last().expect("line")).expect("json");
    assert_eq!(last["op"], "forget");
    assert_eq!(last["args"]["checkpoints"][0], c2.as_str());
    let after = store_state(&env.store);
    let again = ok_json(["forget", &st, &c2]);
    assert_eq!(again["already_forgotten"][0], c2.as_str());
    assert_eq!(store_state(&env.store), after);
}

#[test]
fn label_delete_is_audited_and_only_then_the_name_is_free() {
    let env = Env::new();
    let st = env.s();
    let [c1, c2, _c3] = leaky_history(&env);
    ok(["label", &st, &c1, "rel"]);
    let e = fails(1, ["label", &st, &c2, "rel"]);
    assert!(e.contains("immutable"), "{e}");
    let out = ok(["label", "delete", &st, "rel"]);
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
    ok(["label", &st, &c2, "rel"]);
    assert_eq!(
        fs::read_to_string(env.store.join("refs/labels/rel"))
            .expect("label")
            .trim(),
        c2
    );
    let e = fails(1, ["label", "delete", &st, "nosuch"]);
    assert!(e.contains("label nosuch"), "{e}");
    // And an unlabelled checkpoint can then be forgotten.
    ok(["label", "delete", &st, "rel"]);
    ok(["forget", &st, &c2]);
}

#[test]
fn log_lists_the_rest_when_a_record_or_label_is_corrupt() {
    let env = Env::new();
    let st = env.s();
    let [c1, c2, c3] = leaky_history(&env);
    ok(["label", &st, &c1, "first"]);
    let rec = env.store.join("checkpoints").join(&c2);
    let mut perm = fs::metadata(&rec).expect("stat").permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perm.set_readonly(false);
    fs::set_permissions(&rec, perm).expect("chmod");
    fs::write(&rec, b"{ not a record").expect("corrupt");
    fs::write(env.store.join("refs/labels/broken"), b"not an id\n").expect("bad label");

    let o = run(["log", &st, "--json"]);
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
    let err = stderr(&o);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 2, "{err}");
    assert!(warnings.iter().any(|w| w.contains(&c2)), "{err}");
    assert!(warnings.iter().any(|w| w.contains("broken")), "{err}");

    // Along the branch the line stops at the bad record, after listing what came before it.
    let o = run(["log", &st, "-b", "main"]);
    assert!(o.status.success(), "{o:?}");
    let out = stdout(&o);
    assert!(out.starts_with(&c3[..12]), "{out}");
    assert!(stderr(&o).contains(&c2), "{o:?}");
}
