//! Remote tests' helpers: a key file, the flags that point ckptfs at a Garage cluster, and
//! ckptfs runs with its AWS environment (`rok`, `rok_json`, `rrun`).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use super::cli::{cmd, describe};
use super::garage::Garage;

/// A remote test's places: a Garage node, a temp dir with a key file, the source tree `src`,
/// the room path `room`, and two stores, `a` (which pushes) and `b` (a clone).
pub struct RemotePair {
    pub g: Garage,
    pub dir: tempfile::TempDir,
    pub key: PathBuf,
    pub src: PathBuf,
    pub room: PathBuf,
    pub a: PathBuf,
    pub b: PathBuf,
}

impl RemotePair {
    /// Starts a Garage node and names the places (nothing made but the key file).
    pub fn new() -> RemotePair {
        let g = Garage::start();
        let dir = tempfile::tempdir().expect("temp dir");
        let key = key_file(dir.path(), "pw");
        let p = |n: &str| dir.path().join(n);
        let (src, room, a, b) = (p("src"), p("room"), p("a"), p("b"));
        RemotePair {
            g,
            dir,
            key,
            src,
            room,
            a,
            b,
        }
    }
}

/// Writes a key file (a passphrase) into `dir`.
pub fn key_file(dir: &Path, secret: &str) -> PathBuf {
    let p = dir.join(format!("key-{secret}"));
    std::fs::write(&p, format!("{secret}\n")).expect("key file");
    p
}

/// `--endpoint URL --region garage --key-file KEY` for node `node` of `g`.
pub fn reach(g: &Garage, node: usize, key: &Path) -> Vec<String> {
    vec![
        "--endpoint".into(),
        g.endpoint_of(node),
        "--region".into(),
        super::garage::GARAGE_REGION.into(),
        "--key-file".into(),
        key.display().to_string(),
    ]
}

/// Cheap argon2 for tests (the default costs 64 MiB and three passes per command).
pub const FAST_KDF: [&str; 4] = ["--kdf-memory", "8192", "--kdf-passes", "1"];

/// Runs ckptfs with `g`'s AWS environment.
pub fn rrun<I, S>(g: &Garage, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = cmd(args);
    g.apply_env(&mut c);
    c.output().expect("spawning ckptfs")
}

fn strings<I, S>(args: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    args.into_iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect()
}

/// As `rrun`, which must succeed; returns stdout.
pub fn rok<I, S>(g: &Garage, args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let a = strings(args);
    let o = rrun(g, &a);
    assert!(o.status.success(), "{}", describe(&a, &o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// As `rok` with `--json` appended; returns the parsed output.
pub fn rok_json<I, S>(g: &Garage, args: I) -> Value
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut a = strings(args);
    a.push("--json".into());
    let out = rok(g, &a);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{a:?}: not JSON ({e}): {out}"))
}

/// `remote add STORE origin URL` for `g`'s node 0 (fast KDF), then the JSON of it.
pub fn add_remote(g: &Garage, store: &Path, prefix: &str, key: &Path) -> Value {
    let mut a = vec![
        "remote".to_string(),
        "add".into(),
        store.display().to_string(),
        "origin".into(),
        g.url(prefix),
    ];
    a.extend(reach(g, 0, key));
    a.extend(FAST_KDF.iter().map(|s| s.to_string()));
    rok_json(g, &a)
}

/// `clone URL STORE` from `g`'s node 0.
pub fn clone_remote(g: &Garage, prefix: &str, store: &Path, key: &Path) -> Value {
    let mut a = vec![
        "clone".to_string(),
        g.url(prefix),
        store.display().to_string(),
    ];
    a.extend(reach(g, 0, key));
    rok_json(g, &a)
}
