//! Temp stores and what the tests ask of them: `Env` (a store with empty roots in a temp dir),
//! queries by store path (heads, records, trees, checkpoint ids, what `log` lists), `recover` +
//! `verify`, and raw manipulation of the store's files for corruption and traversal tests.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tempfile::TempDir;

use super::cli::{describe, ok, ok_json, run, s};

/// A temp directory on tmpfs (`/dev/shm`) when there is one: for tests that crash processes
/// and copy stores, which do not test the disk (syncfs on a busy disk would make the fault
/// loops take minutes).
pub fn tempdir() -> TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(t) = tempfile::Builder::new()
            .prefix("ckptfs-test-")
            .tempdir_in(shm)
        {
            return t;
        }
    }
    tempfile::Builder::new()
        .prefix("ckptfs-test-")
        .tempdir()
        .expect("temp dir")
}

/// A temp directory holding a store and one or more roots.
pub struct Env {
    pub tmp: TempDir,
    pub store: PathBuf,
    pub roots: BTreeMap<String, PathBuf>,
}

impl Env {
    /// A store with one root named `ws` (an empty directory).
    pub fn new() -> Env {
        Env::with_roots(&["ws"], &[])
    }

    /// A store with the given root names, each an empty directory, plus extra init args.
    pub fn with_roots(names: &[&str], extra: &[&str]) -> Env {
        let tmp = tempfile::Builder::new()
            .prefix("ckptfs-test-")
            .tempdir()
            .expect("tempdir");
        let store = tmp.path().join("store");
        let mut roots = BTreeMap::new();
        let mut args: Vec<String> = vec!["init".into(), store.display().to_string()];
        for n in names {
            let p = tmp.path().join(format!("root-{n}"));
            fs::create_dir(&p).expect("mkdir root");
            args.push("--root".into());
            args.push(format!("{n}={}", p.display()));
            roots.insert(n.to_string(), p);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        ok(&args);
        Env { tmp, store, roots }
    }

    pub fn s(&self) -> String {
        self.store.display().to_string()
    }

    /// The path of root `name`.
    pub fn root(&self, name: &str) -> &Path {
        &self.roots[name]
    }

    /// The single root `ws`.
    pub fn ws(&self) -> &Path {
        self.root("ws")
    }

    /// A fresh path in the temp dir (not created).
    pub fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// `capture STORE ARGS... --json`; returns the parsed report.
    pub fn capture(&self, extra: &[&str]) -> Value {
        let mut args = vec!["capture".to_string(), self.s()];
        args.extend(extra.iter().map(|s| s.to_string()));
        ok_json(&args)
    }

    /// Captures and returns the new checkpoint id.
    pub fn capture_id(&self, extra: &[&str]) -> String {
        capture(&self.store, extra)
    }

    /// `restore STORE SPEC --to DIR`.
    pub fn restore(&self, spec: &str, to: &Path) -> Value {
        ok_json([
            "restore",
            &self.s(),
            spec,
            "--to",
            &to.display().to_string(),
        ])
    }

    /// Every object file under objects/ (name -> size).
    pub fn objects(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for fan in fs::read_dir(self.store.join("objects")).expect("objects dir") {
            let fan = fan.expect("entry").path();
            for o in fs::read_dir(&fan).expect("fan dir") {
                let o = o.expect("entry");
                let name = format!(
                    "{}/{}",
                    fan.file_name().unwrap().to_string_lossy(),
                    o.file_name().to_string_lossy()
                );
                out.insert(name, o.metadata().expect("stat").len());
            }
        }
        out
    }

    /// Path of the first object file whose id starts with `hex` (any suffix).
    pub fn object_file(&self, hex: &str) -> PathBuf {
        let dir = self.store.join("objects").join(&hex[..2]);
        for e in fs::read_dir(&dir).expect("fan dir") {
            let e = e.expect("entry");
            if e.file_name().to_string_lossy().starts_with(&hex[2..]) {
                return e.path();
            }
        }
        panic!("object {hex} not found")
    }

    /// Checkpoint record ids present in the store.
    pub fn checkpoints(&self) -> Vec<String> {
        checkpoints(&self.store)
    }

    /// Everything durable in the store except the audit log and caches: objects, checkpoint
    /// records, refs, tmp and run contents (path -> bytes). Used to prove "store unchanged".
    pub fn durable_state(&self) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        for sub in ["objects", "checkpoints", "refs", "tmp", "run"] {
            collect_files(&self.store.join(sub), &self.store, &mut out);
        }
        out
    }
}

fn collect_files(dir: &Path, base: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd {
        let p = e.expect("entry").path();
        let m = fs::symlink_metadata(&p).expect("lstat");
        if m.is_dir() {
            collect_files(&p, base, out);
        } else {
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            out.insert(rel, fs::read(&p).unwrap_or_default());
        }
    }
}

// ---- queries by store path -------------------------------------------------------------

/// Creates a store at `store` with one root `workspace` at `room`.
pub fn init(store: &Path, room: &Path) {
    ok([
        "init",
        s(store),
        "--root",
        &format!("workspace={}", s(room)),
    ]);
}

/// `capture STORE EXTRA... --json`; returns the new checkpoint id.
pub fn capture(store: impl AsRef<Path>, extra: &[&str]) -> String {
    let mut args = vec!["capture", s(store.as_ref())];
    args.extend_from_slice(extra);
    ok_json(&args)["id"].as_str().expect("id").to_string()
}

/// Head of a branch, if the branch exists and has one.
pub fn head(store: impl AsRef<Path>, branch: &str) -> Option<String> {
    let v = ok_json(["branch", "list", s(store.as_ref())]);
    v.as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == branch)
        .and_then(|b| b["head"].as_str().map(str::to_string))
}

/// The ids `log STORE EXTRA... --json` lists, in its order.
pub fn log_ids(store: impl AsRef<Path>, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["log", s(store.as_ref())];
    args.extend_from_slice(extra);
    ok_json(&args)
        .as_array()
        .expect("log: an array")
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_string())
        .collect()
}

/// The checkpoint record of a spec.
pub fn show(store: impl AsRef<Path>, spec: &str) -> Value {
    ok_json(["show", s(store.as_ref()), spec])["checkpoint"].clone()
}

/// Tree id of the only root of a checkpoint.
pub fn tree_of(store: impl AsRef<Path>, spec: &str) -> String {
    let rec = show(store, spec);
    let roots = rec["roots"].as_object().expect("roots");
    assert_eq!(roots.len(), 1, "{spec} has several roots: {rec}");
    roots.values().next().unwrap()["tree"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Every checkpoint record name in the store (what its directory lists, temp files aside),
/// sorted.
pub fn checkpoints(store: impl AsRef<Path>) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(store.as_ref().join("checkpoints"))
        .expect("checkpoints dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    v.sort();
    v
}

/// `recover` then `verify`: both must succeed.
pub fn recover_and_verify(store: &Path, ctx: &str) {
    for op in ["recover", "verify"] {
        let args = vec![op.to_string(), s(store).to_string()];
        let o = run(&args);
        assert!(o.status.success(), "{ctx}: {}", describe(&args, &o));
    }
}

/// Reads a checkpoint record as JSON.
pub fn record(store: &Path, id: &str) -> Value {
    serde_json::from_slice(&fs::read(store.join("checkpoints").join(id)).expect("read record"))
        .expect("json")
}

// ---- raw store manipulation (for corruption and traversal tests) --------------------------

/// Writes raw bytes as an object into the store (uncompressed), returning its hex id.
pub fn put_raw_object(store: &Path, data: &[u8]) -> String {
    let id = ckptfs::ObjectId::of(data).to_hex();
    let p = store.join("objects").join(&id[..2]).join(&id[2..]);
    if !p.exists() {
        fs::write(&p, data).expect("write raw object");
    }
    id
}

/// Writes a checkpoint record whose root `root` points at `tree` (hex), copying the other
/// fields from an existing checkpoint `template`; returns the new record's id.
pub fn put_checkpoint_with_tree(store: &Path, template: &str, root: &str, tree: &str) -> String {
    let mut v = record(store, template);
    v["roots"][root]["tree"] = Value::String(tree.to_string());
    v["message"] = Value::String("crafted".into());
    let bytes = serde_json::to_vec(&v).expect("encode");
    let id = ckptfs::ObjectId::of(&bytes).to_hex();
    fs::write(store.join("checkpoints").join(&id), &bytes).expect("write record");
    id
}

/// A store whose records were taken at the given times (ns), one captured and the rest
/// written as copies of it with other times and messages `at N`; returns the env and the
/// ids in the order given.
pub fn store_at_times(times: &[i64]) -> (Env, Vec<String>) {
    let env = Env::new();
    super::tree::small_tree(env.ws());
    let first = env.capture_id(&[]);
    let store = ckptfs::Store::open(&env.store).unwrap();
    let base = store
        .read_checkpoint(&ckptfs::id::ObjectId::parse(&first).unwrap())
        .unwrap();
    let mut ids = Vec::new();
    for (i, t) in times.iter().enumerate() {
        let mut c = base.clone();
        c.time_ns = *t;
        c.message = format!("at {i}");
        ids.push(store.write_checkpoint(&c).unwrap().to_hex());
    }
    // The captured one is not part of the test: move it far into the past.
    std::fs::remove_file(env.store.join("checkpoints").join(&first)).unwrap();
    (env, ids)
}
