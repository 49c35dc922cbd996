//! Helpers shared by the `health_*` integration tests: run the real binary on temp stores.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temp directory on tmpfs (`/dev/shm`) when there is one: these tests crash processes, they
/// do not test the disk, and syncfs on a busy disk would make the fault loops take minutes.
pub fn tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(t) = tempfile::tempdir_in(shm) {
            return t;
        }
    }
    tempfile::tempdir().expect("temp dir")
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ckptfs")
}

/// Runs ckptfs with `args` and extra environment.
pub fn run_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(bin());
    c.args(args)
        .env_remove("CKPTFS_FAULT")
        .env("RUST_BACKTRACE", "0");
    for (k, v) in env {
        c.env(k, v);
    }
    c.current_dir(std::env::temp_dir());
    c.output().expect("spawn ckptfs")
}

pub fn run(args: &[&str]) -> Output {
    run_env(args, &[])
}

/// Runs ckptfs and asserts success; returns stdout.
pub fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "ckptfs {args:?} failed ({:?}):\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs ckptfs with `--json` output parsed.
pub fn json(args: &[&str]) -> serde_json::Value {
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: bad JSON ({e}): {out}"))
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Writes a small room: `n` files over a few directories, some larger than one chunk.
pub fn make_room(dir: &Path, n: usize, seed: u64) {
    fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        let sub = dir.join(format!("d{}", i % 4));
        fs::create_dir_all(&sub).unwrap();
        let len = if i % 7 == 0 { 150_000 } else { 100 + i * 13 };
        let mut data = Vec::with_capacity(len);
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(i as u64);
        for _ in 0..len {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            data.push(b'a' + ((x >> 33) % 26) as u8);
        }
        fs::write(sub.join(format!("f{i}.txt")), data).unwrap();
    }
    std::os::unix::fs::symlink("d0/f0.txt", dir.join("link")).ok();
}

/// `cp -a src dst`.
pub fn copy_dir(src: &Path, dst: &Path) {
    let st = Command::new("cp")
        .arg("-a")
        .arg(src)
        .arg(dst)
        .status()
        .expect("cp");
    assert!(st.success(), "cp -a {} {}", src.display(), dst.display());
}

/// Creates a store at `store` with one root `workspace` at `room`.
pub fn init(store: &Path, room: &Path) {
    ok(&[
        "init",
        s(store),
        "--root",
        &format!("workspace={}", s(room)),
    ]);
}

/// Captures; returns the new checkpoint id.
pub fn capture(store: &Path, extra: &[&str]) -> String {
    let mut args = vec!["capture", s(store), "--json"];
    args.extend_from_slice(extra);
    json(&args)["id"].as_str().unwrap().to_string()
}

/// Head of a branch, if any.
pub fn head(store: &Path, branch: &str) -> Option<String> {
    let v = json(&["branch", "list", s(store), "--json"]);
    v.as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == branch)
        .and_then(|b| b["head"].as_str().map(str::to_string))
}

/// The checkpoint record of a spec.
pub fn show(store: &Path, spec: &str) -> serde_json::Value {
    json(&["show", s(store), spec, "--json"])["checkpoint"].clone()
}

/// Tree id of root `workspace` in a checkpoint.
pub fn tree_of(store: &Path, spec: &str) -> String {
    show(store, spec)["roots"]["workspace"]["tree"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Every checkpoint id in the store (from the directory).
pub fn checkpoints(store: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(store.join("checkpoints"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.len() == 64)
        .collect();
    v.sort();
    v
}

/// `recover` then `verify`, both must succeed.
pub fn recover_and_verify(store: &Path, ctx: &str) {
    let o = run(&["recover", s(store)]);
    assert!(o.status.success(), "{ctx}: recover failed: {}", stderr(&o));
    let o = run(&["verify", s(store)]);
    assert!(
        o.status.success(),
        "{ctx}: verify after recover failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        stderr(&o)
    );
}

/// Number of durable I/O steps the command takes (CKPTFS_FAULT=count).
pub fn io_steps(args: &[&str]) -> u64 {
    let o = run_env(args, &[("CKPTFS_FAULT", "count")]);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    let e = stderr(&o);
    e.lines()
        .find_map(|l| l.strip_prefix("ckptfs: io steps: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no step count in {e}"))
}

/// Up to `n` fault points spread over 1..=total (all when total <= n).
pub fn spread(total: u64, n: u64) -> Vec<u64> {
    if total <= n {
        return (1..=total).collect();
    }
    let mut v: Vec<u64> = (0..n).map(|i| 1 + i * (total - 1) / (n - 1)).collect();
    v.dedup();
    v
}

/// Runs `f` over `items` on two threads.
pub fn par_for<T: Sync>(items: &[T], f: impl Fn(&T) + Sync) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|sc| {
        for _ in 0..2 {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(it) = items.get(i) else { return };
                f(it);
            });
        }
    });
}

/// Runs ckptfs with a fault injected (abort without core dumps).
pub fn run_fault(args: &[&str], mode: &str, n: u64) -> Output {
    let spec = format!("{mode}:{n}");
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("ulimit -c 0; exec \"$@\"")
        .arg("sh")
        .arg(bin())
        .args(args)
        .env("CKPTFS_FAULT", &spec)
        .env("RUST_BACKTRACE", "0")
        .current_dir(std::env::temp_dir());
    c.output().expect("spawn ckptfs")
}

/// Content of every file below `dir` (relative path -> bytes; symlinks as "-> target").
pub fn snapshot(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    fn walk(base: &Path, d: &Path, out: &mut std::collections::BTreeMap<String, Vec<u8>>) {
        let mut ents: Vec<PathBuf> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        ents.sort();
        for p in ents {
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            let md = fs::symlink_metadata(&p).unwrap();
            if md.file_type().is_symlink() {
                let t = fs::read_link(&p).unwrap();
                out.insert(rel, format!("-> {}", t.display()).into_bytes());
            } else if md.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(base, &p, out);
            } else {
                out.insert(rel, fs::read(&p).unwrap());
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}
