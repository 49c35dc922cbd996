//! The main path of remotes on a real Garage node: two stores on one machine stand for two
//! machines (same root paths). Capture on A, push, clone on B, mount on B at the root's
//! recorded path (byte/attr-exact against A's tree, objects fetched lazily); a workspace on B,
//! a turn, a checkpoint, push; pull on A and mount: exact.

use std::fs;
use std::path::Path;

use crate::support::*;

/// `capture STORE --from work=SRC` (root `work`, branch main).
fn capture_from(store: &Path, src: &Path, label: Option<&str>) {
    let from = format!("work={}", src.display());
    let mut a = vec!["capture", s(store), "--from", &from, "--json"];
    if let Some(l) = label {
        a.extend(["-l", l]);
    }
    ok(&a);
}

fn object_ids(store: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for fan in fs::read_dir(store.join("objects")).unwrap() {
        let fan = fan.unwrap().path();
        for o in fs::read_dir(&fan).unwrap() {
            let name = o.unwrap().file_name().to_string_lossy().into_owned();
            let fan_name = fan.file_name().unwrap().to_string_lossy().into_owned();
            out.push(format!("{fan_name}{}", name.trim_end_matches(".zst")));
        }
    }
    out
}

fn object_count(store: &Path) -> usize {
    let mut n = 0;
    for fan in fs::read_dir(store.join("objects")).unwrap() {
        n += fs::read_dir(fan.unwrap().path()).unwrap().count();
    }
    n
}

#[test]
fn push_clone_mount_workspace_push_pull_roundtrip() {
    let g = Garage::start();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "correct horse");
    let src = dir.path().join("src");
    let room = dir.path().join("room");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    sample_tree(&src);
    ok(["init", s(&a), "--root", &format!("work={}", room.display())]);
    capture_from(&a, &src, Some("first"));

    let added = add_remote(&g, &a, "rooms/one", &key);
    assert_eq!(added["encrypted"], true);
    let pushed = rok_json(&g, ["push", s(&a)]);
    assert!(pushed["objects"].as_u64().unwrap() > 10, "{pushed}");
    assert!(pushed["packs"].as_u64().unwrap() >= 1);
    assert_eq!(pushed["records"], 1);
    // Nothing on the remote reveals a plaintext id: no key names any object's SHA-256.
    let keys = g.s3_list("rooms/one/");
    for hex in object_ids(&a) {
        assert!(
            keys.iter().all(|k| !k.contains(&hex)),
            "{hex} visible in {keys:?}"
        );
    }
    // Pushing again uploads nothing.
    let again = rok_json(&g, ["push", s(&a)]);
    assert_eq!(again["objects"], 0, "{again}");
    assert_eq!(again["records"], 0);

    // B: refs and records only; the objects stay remote until read.
    let cloned = clone_remote(&g, "rooms/one", &b, &key);
    assert_eq!(cloned["records"], 1, "{cloned}");
    assert_eq!(object_count(&b), 0, "clone copied objects");
    // doctor finds nothing wrong with objects that are on the remote.
    let doc = rok_json(&g, ["doctor", s(&b)]);
    assert!(!doc.to_string().contains("missing"), "{doc}");
    let first = ok(["log", s(&b), "--json"]);
    assert!(first.contains("first"), "{first}");
    // A read-only mount at the recorded path: exact, fetched lazily.
    {
        let _m = MountGuard::new(&room);
        rok(&g, ["mount", s(&b), "first:work"]);
        assert!(mounted(&room));
        assert_trees_equal(&src, &room);
        assert!(object_count(&b) > 10);
        rok(&g, ["umount", s(&room)]);
    }
    // cat and diff work on the clone too.
    assert_eq!(
        cat(&b, "first:work/dir/needle.txt"),
        fs::read(src.join("dir/needle.txt")).unwrap()
    );

    // A workspace on B, one turn, a checkpoint, a push.
    let ws = MountGuard::new(&room);
    rok(&g, ["mount", s(&b), "--branch", "main"]);
    write(&room.join("turn/new.txt"), b"written on B\n");
    write(&room.join("dir/needle.txt"), b"NEEDLE changed on B\n");
    fs::remove_file(room.join("f1.bin")).unwrap();
    let cp = rok_json(&g, ["checkpoint", s(&room), "-m", "turn on B"]);
    let id = cp["id"].as_str().unwrap().to_string();
    let pushed_b = rok_json(&g, ["push", s(&b)]);
    assert_eq!(
        pushed_b["branches"]["main"]["new"],
        id.as_str(),
        "{pushed_b}"
    );
    // Only the turn's objects went up, not the room again.
    assert!(pushed_b["objects"].as_u64().unwrap() < 10, "{pushed_b}");

    // A pulls and mounts B's checkpoint: exact against B's workspace.
    let pulled = rok_json(&g, ["pull", s(&a)]);
    assert_eq!(pulled["forwarded"]["main"]["new"], id.as_str(), "{pulled}");
    assert_eq!(head(&a, "main").as_deref(), Some(id.as_str()));
    let at = dir.path().join("at-a");
    fs::create_dir(&at).unwrap();
    let _va = MountGuard::new(&at);
    rok(&g, ["mount", s(&a), "main:work", "--at", s(&at)]);
    // The reference: B's checkpoint restored on B (a plain copy, so directory link counts
    // are a real filesystem's, which an overlay root does not show).
    let reference = dir.path().join("ref");
    rok(&g, ["restore", s(&b), &id, "--to", s(&reference)]);
    assert_trees_equal(&reference, &at);
    assert_eq!(
        fs::read(at.join("turn/new.txt")).unwrap(),
        b"written on B\n"
    );
    assert!(!at.join("f1.bin").exists());
    assert_eq!(contents(&room), contents(&at));
    rok(&g, ["umount", s(&at)]);
    rok(&g, ["umount", s(&room)]);
    drop(ws);
    // A's push now finds main up to date.
    let up = rok_json(&g, ["push", s(&a)]);
    assert!(up["branches"].as_object().unwrap().is_empty(), "{up}");
}

#[test]
fn wrong_key_is_one_clear_error_and_creates_nothing() {
    let g = Garage::start();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "right");
    let bad = key_file(dir.path(), "wrong");
    let env = Env::new();
    small_tree(env.ws());
    env.capture_id(&[]);
    add_remote(&g, &env.store, "k", &key);
    rok(&g, ["push", &env.s()]);
    let b = dir.path().join("b");
    let mut args = vec!["clone".to_string(), g.url("k"), s(&b).to_string()];
    args.extend(reach(&g, 0, &bad));
    let o = rrun(&g, &args);
    let err = assert_error_output(&args, &o, 1);
    assert!(err.contains("wrong key"), "{err}");
    assert!(!b.exists(), "a failed clone left {}", b.display());
    // No key at all: a usage error naming the ways to give one.
    let mut args = vec!["clone".to_string(), g.url("k"), s(&b).to_string()];
    args.extend([
        "--endpoint".to_string(),
        g.endpoint(),
        "--region".into(),
        GARAGE_REGION.into(),
    ]);
    let o = rrun(&g, &args);
    let err = assert_error_output(&args, &o, 2);
    assert!(err.contains("--key-file"), "{err}");
    // Credentials are in no file of the store.
    let found = sh(&format!("grep -rl {GARAGE_SECRET} {} || true", env.s()));
    assert!(found.trim().is_empty(), "secret written to {found}");
}

#[test]
fn non_fast_forward_is_refused_labels_never_move() {
    let g = Garage::start();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "k");
    let src = dir.path().join("src");
    let room = dir.path().join("room");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    small_tree(&src);
    ok(["init", s(&a), "--root", &format!("work={}", room.display())]);
    capture_from(&a, &src, None);
    add_remote(&g, &a, "nff", &key);
    rok(&g, ["push", s(&a)]);
    clone_remote(&g, "nff", &b, &key);
    // Both move main; B pushes first; A's push is refused and changes nothing remote.
    write(&src.join("a.txt"), b"from B\n");
    capture_from(&b, &src, Some("shared-name"));
    rok(&g, ["push", s(&b)]);
    write(&src.join("a.txt"), b"from A\n");
    capture_from(&a, &src, Some("shared-name"));
    let before = g.s3_list("nff/");
    let args = ["push", s(&a)];
    let o = rrun(&g, args);
    let err = assert_error_output(&args.map(String::from), &o, 1);
    assert!(
        err.contains("not an ancestor") && err.contains("main"),
        "{err}"
    );
    // Its advice is one that can be followed (there is no merge command).
    assert!(
        err.contains("ckptfs fork") && err.contains("push --force"),
        "{err}"
    );
    assert_eq!(
        g.s3_list("nff/").len(),
        before.len(),
        "a refused push uploaded"
    );
    // pull leaves the diverged branch alone: exit 1, and stderr says why.
    let o = rrun(&g, ["pull", s(&a)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("pull left branch main alone"),
        "{}",
        stderr(&o)
    );
    // The label alone: refused, labels never move.
    let o = rrun(&g, ["push", s(&a), "origin", "shared-name"]);
    assert!(stderr(&o).contains("labels never move"), "{}", stderr(&o));
    // --force moves the branch.
    let forced = rok_json(&g, ["push", s(&a), "origin", "main", "--force"]);
    assert_eq!(
        forced["branches"]["main"]["new"].as_str(),
        head(&a, "main").as_deref()
    );
}

/// `cat STORE SPEC` with the remote's environment: its bytes (must succeed).
fn rcat(g: &Garage, store: &Path, spec: &str) -> Vec<u8> {
    let o = rrun(g, ["cat", s(store), spec]);
    assert!(o.status.success(), "cat {spec}: {}", stderr(&o));
    o.stdout
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut n = 0;
    for fan in fs::read_dir(dir).unwrap() {
        for o in fs::read_dir(fan.unwrap().path()).unwrap() {
            n += o.unwrap().metadata().unwrap().len();
        }
    }
    n
}

#[test]
fn lazy_cache_is_bounded_repairs_itself_and_serves_diff_and_browse() {
    let g = Garage::start();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "pw");
    let src = dir.path().join("src");
    let room = dir.path().join("room");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for i in 0..6 {
        write(
            &src.join(format!("f{i}.bin")),
            &random_bytes(i + 40, 3 << 20),
        );
    }
    ok(["init", s(&a), "--root", &format!("work={}", room.display())]);
    capture_from(&a, &src, Some("first"));
    write(&src.join("f0.bin"), b"changed\n");
    capture_from(&a, &src, None);
    add_remote(&g, &a, "cache", &key);
    rok(&g, ["push", s(&a)]);
    let mut args = vec!["clone".to_string(), g.url("cache"), s(&b).to_string()];
    args.extend(reach(&g, 0, &key));
    args.extend(["--cache-size".into(), "4M".into()]);
    rok(&g, &args);
    // 18 MiB read through a 4 MiB cache: every byte right, the cache held to its bound
    // (plus at most the object that pushed it over).
    for i in 1..6 {
        let got = rcat(&g, &b, &format!("first:work/f{i}.bin"));
        assert!(got == fs::read(src.join(format!("f{i}.bin"))).unwrap());
        let held = dir_bytes(&b.join("objects"));
        assert!(held <= (4 << 20) + (1 << 20), "cache holds {held} bytes");
    }
    // An evicted object comes back.
    let again = rcat(&g, &b, "first:work/f1.bin");
    assert!(again == fs::read(src.join("f1.bin")).unwrap());
    // A fetched copy cut short (cache entries are not synced): replaced from the remote.
    // The newest entry of the eviction list is a chunk of f1, just fetched.
    let list = fs::read_to_string(b.join("cache/remote-fetched")).unwrap();
    let newest = list
        .lines()
        .last()
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let victim = b.join("objects").join(&newest[..2]).join(&newest[2..]);
    assert!(fs::metadata(&victim).unwrap().len() > 0);
    fs::write(&victim, b"").unwrap();
    let o = rrun(&g, ["cat", s(&b), "first:work/f1.bin"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout == fs::read(src.join("f1.bin")).unwrap());
    assert!(
        stderr(&o).contains("replaced by the remote's copy"),
        "{}",
        stderr(&o)
    );
    assert!(fs::metadata(&victim).unwrap().len() > 0);
    for i in 1..6 {
        let got = rcat(&g, &b, &format!("first:work/f{i}.bin"));
        assert!(got == fs::read(src.join(format!("f{i}.bin"))).unwrap());
    }
    // diff and browse on the clone.
    let d = rok(&g, ["diff", s(&b), "first", "main", "--name-status"]);
    assert!(d.contains("f0.bin") && !d.contains("f1.bin"), "{d}");
    let mp = dir.path().join("browse");
    fs::create_dir(&mp).unwrap();
    let _m = MountGuard::new(&mp);
    rok(&g, ["browse", s(&b), s(&mp)]);
    assert_eq!(
        fs::read(mp.join("labels/first/work/f2.bin")).unwrap(),
        fs::read(src.join("f2.bin")).unwrap()
    );
    rok(&g, ["umount", s(&mp)]);
}

#[test]
fn remote_list_remove_and_an_unencrypted_remote_on_purpose() {
    let g = Garage::start();
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    let mut args = vec![
        "remote".to_string(),
        "add".into(),
        env.s(),
        "plain".into(),
        g.url("plain"),
        "--endpoint".into(),
        g.endpoint(),
        "--region".into(),
        GARAGE_REGION.into(),
        "--no-encryption".into(),
    ];
    let added = rok_json(&g, &args);
    assert_eq!(added["encrypted"], false);
    // The same name again: refused, one line.
    args.pop();
    let o = rrun(&g, &args);
    assert!(assert_error_output(&args, &o, 1).contains("exists"));
    // A checkpoint by id: its record and objects go up, no ref moves.
    let r = rok_json(&g, ["push", &env.s(), "plain", &id[..12]]);
    assert_eq!(r["records"], 1, "{r}");
    assert!(r["branches"].as_object().unwrap().is_empty());
    assert!(g.s3_list("plain/refs/").is_empty());
    rok(&g, ["push", &env.s()]);
    let listed = rok_json(&g, ["remote", "list", &env.s()]);
    assert_eq!(listed[0]["name"], "plain");
    assert_eq!(listed[0]["branches"]["main"], id.as_str(), "{listed}");
    // No secret in the remote's config; only the URL and endpoint.
    let cfg = fs::read_to_string(env.store.join("remotes/plain/config.json")).unwrap();
    assert!(
        !cfg.contains(GARAGE_SECRET) && !cfg.contains(GARAGE_KEY_ID),
        "{cfg}"
    );
    rok(&g, ["remote", "remove", &env.s(), "plain"]);
    let listed = rok_json(&g, ["remote", "list", &env.s()]);
    assert!(listed.as_array().unwrap().is_empty());
    // Unknown remote: one clear line naming it.
    let args: Vec<String> = ["push", &env.s(), "nosuch", "main"]
        .map(String::from)
        .into();
    let o = rrun(&g, &args);
    let err = assert_error_output(&args, &o, 1);
    assert!(err.contains("nosuch"), "{err}");
}

#[test]
fn a_cold_big_file_reads_its_first_bytes_without_fetching_the_rest() {
    let g = Garage::start();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "pw");
    let src = dir.path().join("src");
    let room = dir.path().join("room");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let big = random_bytes(5, 48 << 20);
    write(&src.join("big.bin"), &big);
    ok(["init", s(&a), "--root", &format!("work={}", room.display())]);
    capture_from(&a, &src, None);
    add_remote(&g, &a, "big", &key);
    rok(&g, ["push", s(&a)]);
    clone_remote(&g, "big", &b, &key);
    let _m = MountGuard::new(&room);
    rok(&g, ["mount", s(&b), "main:work"]);
    let mut f = fs::File::open(room.join("big.bin")).unwrap();
    let mut head = vec![0u8; 4096];
    std::io::Read::read_exact(&mut f, &mut head).unwrap();
    assert_eq!(head, big[..4096]);
    // Lazily: the first chunks and a readahead window, not the file (about 190 chunks).
    let held = dir_bytes(&b.join("objects"));
    assert!(held < 24 << 20, "{held} bytes fetched for a 4 KiB read");
    // And sequentially to the end, exact.
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut rest).unwrap();
    assert!(rest == big[4096..], "wrong bytes");
    drop(f);
    rok(&g, ["umount", s(&room)]);
}

/// A library caller reads a lazy clone through `remote::open_store`, which gives the store
/// its remotes' lazy fetch as a value (no process-wide hook: `Store::open` alone reads only
/// what the clone holds, and this process never installed anything).
#[test]
fn a_library_caller_reads_a_clone_through_open_store() {
    let g = Garage::start();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "pw");
    let creds = dir.path().join("credentials");
    let env = g.env();
    let get = |k: &str| env.iter().find(|(n, _)| *n == k).unwrap().1.clone();
    fs::write(
        &creds,
        format!(
            "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            get("AWS_ACCESS_KEY_ID"),
            get("AWS_SECRET_ACCESS_KEY")
        ),
    )
    .unwrap();
    let src = dir.path().join("src");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let data = random_bytes(7, 1 << 20);
    write(&src.join("big.bin"), &data);
    ok([
        "init",
        s(&a),
        "--root",
        &format!("work={}", dir.path().join("room").display()),
    ]);
    capture_from(&a, &src, None);
    add_remote(&g, &a, "lib", &key);
    rok(&g, ["push", s(&a)]);
    let mut args = vec!["clone".to_string(), g.url("lib"), s(&b).to_string()];
    args.extend(reach(&g, 0, &key));
    args.extend(["--credentials".into(), s(&creds).to_string()]);
    rok(&g, &args);
    // Without a source, the clone's own objects are all there is: its trees are not.
    let local = ckptfs::Store::open(&b).unwrap();
    let head = local.read_branch("main").unwrap().unwrap().head.unwrap();
    let root_tree = local.read_checkpoint(&head).unwrap().roots["work"].tree;
    assert!(
        matches!(local.read_tree(&root_tree), Err(ckptfs::Error::NotFound(_))),
        "a clone holds no trees until read"
    );
    // Through open_store the same reads fetch from the remote, exactly.
    let lazy = ckptfs::remote::open_store(&b).unwrap();
    let tree = lazy.read_tree(&root_tree).unwrap();
    let e = tree.entries.iter().find(|e| e.name == b"big.bin").unwrap();
    let ckptfs::store::tree::EntryKind::File { chunks } = &e.kind else {
        panic!("big.bin is {:?}", e.kind)
    };
    let got = lazy.read_chunk(&chunks[0]).unwrap();
    assert_eq!(got, data[..got.len()], "the first chunk's bytes, fetched");
}
