//! Hostile stores: a store copied or received from elsewhere is untrusted input. Objects that
//! are huge sparse files, symlinks to FIFOs, symlinked fan-out directories, and trees whose
//! chunk lengths lie must each make `cat`, `restore` and `verify` fail with one clear line
//! naming the object, without a panic, an abort or a hang.

use std::fs;
use std::path::{Path, PathBuf};

use crate::support::*;
use ckptfs::store::tree::Chunk;
use ckptfs::ObjectId;

/// Asserts `verify` finishes within `BOUND` with exit 1 (findings), no panic, nothing on
/// stderr, and a finding on stdout that contains every word of `words`.
fn verify_finds(args: &[&str], words: &[&str]) {
    let (o, finished) = run_bounded(args, BOUND);
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    assert!(finished, "verify hung: {}", describe(&args, &o));
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{}", describe(&args, &o));
    assert!(o.stderr.is_empty(), "{}", describe(&args, &o));
    assert!(
        out.lines().any(|l| words.iter().all(|w| l.contains(w))),
        "no finding with {words:?}: {}",
        describe(&args, &o)
    );
}

/// A store with root `ws` holding one file `f` (124 bytes), captured once.
struct Fixture {
    env: Env,
    checkpoint: String,
    /// The chunk object of `f`.
    chunk: ObjectId,
    content: Vec<u8>,
}

impl Fixture {
    fn new(compression: &str) -> Fixture {
        let env = Env::with_roots(&["ws"], &["--compression", compression]);
        let content: Vec<u8> = (0..124u8).map(|i| b'a' + i % 26).collect();
        write(&env.ws().join("f"), &content);
        let checkpoint = env.capture_id(&[]);
        let chunk = ObjectId::of(&content);
        Fixture {
            env,
            checkpoint,
            chunk,
            content,
        }
    }

    fn s(&self) -> String {
        self.env.s()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.env.path(name)
    }

    /// Replaces object `id`'s file (raw or `.zst`) with whatever `make` puts at the path.
    fn replace_object(&self, id: &ObjectId, make: impl FnOnce(&Path)) {
        let p = self.env.object_file(&id.to_hex());
        chmod(p.parent().unwrap(), 0o700);
        fs::remove_file(&p).unwrap();
        make(&p);
    }

    /// A checkpoint whose root holds one file `f` of `size` bytes made of `chunks`; and the
    /// tree's id. The tree is written raw, whatever the store's compression.
    fn crafted_file(&self, size: u64, chunks: Vec<Chunk>) -> (String, ObjectId) {
        let tree = one_file_tree(b"f", size, chunks).encode();
        let id = put_raw_object(&self.env.store, &tree);
        let cp = put_checkpoint_with_tree(&self.env.store, &self.checkpoint, "ws", &id);
        (cp, ObjectId::parse(&id).unwrap())
    }

    /// `cat`, `restore` and `verify` of `checkpoint` each refused with a line holding `words`.
    fn all_refuse(&self, checkpoint: &str, words: &[&str]) {
        let cat = format!("{checkpoint}:ws/f");
        refused(1, ["cat", &self.s(), &cat], words);
        let to = self.path(&format!("restored-{}", &checkpoint[..8]));
        refused(1, ["restore", &self.s(), checkpoint, "--to", s(&to)], words);
        verify_finds(&["verify", &self.s(), checkpoint], words);
    }
}

#[test]
fn a_huge_sparse_object_is_refused_before_anything_is_allocated() {
    for compression in ["none", "zstd"] {
        let fx = Fixture::new(compression);
        fx.replace_object(&fx.chunk, |p| {
            let f = fs::File::create(p).unwrap();
            f.set_len(100 << 30).unwrap();
        });
        let hex = fx.chunk.to_hex();
        fx.all_refuse(&fx.checkpoint, &[&hex, "107374182400"]);
    }
}

#[test]
fn an_object_that_is_a_symlink_to_a_fifo_is_refused_without_blocking() {
    let fx = Fixture::new("none");
    let fifo = fx.path("fifo");
    mkfifo(&fifo);
    fx.replace_object(&fx.chunk, |p| std::os::unix::fs::symlink(&fifo, p).unwrap());
    let hex = fx.chunk.to_hex();
    fx.all_refuse(&fx.checkpoint, &[&hex, "not a regular file"]);
    // A FIFO itself, in place of the object.
    fx.replace_object(&fx.chunk, mkfifo);
    fx.all_refuse(&fx.checkpoint, &[&hex, "not a regular file"]);
}

#[test]
fn a_symlinked_object_directory_is_a_verify_finding_and_is_not_followed() {
    let fx = Fixture::new("none");
    let hex = fx.chunk.to_hex();
    let fan = fx.env.store.join("objects").join(&hex[..2]);
    let elsewhere = fx.path("elsewhere");
    fs::rename(&fan, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &fan).unwrap();
    let fan_name = format!("objects/{}", &hex[..2]);
    verify_finds(&["verify", &fx.s()], &[&fan_name, "symlink"]);
    let cat = format!("{}:ws/f", fx.checkpoint);
    // The first object read through the symlinked fan is named: the chunk's, or a tree's
    // when its id shares the fan (1 time in 256: the fixture's tree holds times).
    refused(1, ["cat", &fx.s(), &cat], &[&fan_name, "symlink"]);
    // Stray things where objects belong are findings too.
    fs::remove_file(&fan).unwrap();
    fs::rename(&elsewhere, &fan).unwrap();
    ok_bounded(["verify", &fx.s()], BOUND);
    let fifo = fx.env.store.join("objects").join("ab").join("stray-fifo");
    mkfifo(&fifo);
    verify_finds(&["verify", &fx.s()], &["objects/ab/stray-fifo", "FIFO"]);
}

#[test]
fn a_chunk_length_that_lies_is_refused() {
    let fx = Fixture::new("none");
    let hex = fx.chunk.to_hex();
    // The tree says 200 bytes, the object holds 124.
    let (cp, _) = fx.crafted_file(
        200,
        vec![Chunk {
            id: fx.chunk,
            len: 200,
        }],
    );
    fx.all_refuse(&cp, &[&hex, "124", "200"]);
    // The tree says 4 GiB: no chunk is that long, the tree is corrupt.
    let (cp, tree) = fx.crafted_file(
        u64::from(u32::MAX),
        vec![Chunk {
            id: fx.chunk,
            len: u32::MAX,
        }],
    );
    fx.all_refuse(&cp, &[&tree.to_hex()]);
}

#[test]
fn zero_length_chunk_refs_are_refused() {
    let fx = Fixture::new("none");
    let data = b"thirty-six bytes of file content....";
    assert_eq!(data.len(), 36);
    let id = ObjectId::parse(&put_raw_object(&fx.env.store, data)).unwrap();
    let mut chunks = vec![Chunk { id, len: 36 }];
    chunks.extend(std::iter::repeat_n(Chunk { id, len: 0 }, 2000));
    let (cp, tree) = fx.crafted_file(36, chunks);
    fx.all_refuse(&cp, &[&tree.to_hex(), "length 0"]);
    assert_eq!(fx.content.len(), 124);
}

#[test]
fn refs_and_the_config_that_are_fifos_or_symlinks_are_refused_without_blocking() {
    let fx = Fixture::new("none");
    let branch = fx.env.store.join("refs/branches/main.json");
    let saved = fs::read(&branch).unwrap();
    fs::remove_file(&branch).unwrap();
    mkfifo(&branch);
    refused(1, ["show", &fx.s(), "main"], &["branch main", "fifo"]);
    fs::remove_file(&branch).unwrap();
    let outside = fx.path("outside.json");
    fs::write(&outside, &saved).unwrap();
    std::os::unix::fs::symlink(&outside, &branch).unwrap();
    refused(1, ["show", &fx.s(), "main"], &["branch main", "symlink"]);
    fs::remove_file(&branch).unwrap();
    fs::write(&branch, &saved).unwrap();
    // STORE.json as a FIFO: every command refuses at once.
    let config = fx.env.store.join("STORE.json");
    let cfg = fs::read(&config).unwrap();
    fs::remove_file(&config).unwrap();
    mkfifo(&config);
    refused(1, ["log", &fx.s()], &["STORE.json", "fifo"]);
    fs::remove_file(&config).unwrap();
    fs::write(&config, &cfg).unwrap();
    ok(["verify", &fx.s()]);
}

#[test]
fn writers_refuse_a_store_whose_object_directories_are_symlinks() {
    let fx = Fixture::new("none");
    // Every fan-out directory replaced by a symlink to one directory outside the store.
    let elsewhere = fx.path("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    for b in 0..=255u8 {
        let fan = fx.env.store.join("objects").join(format!("{b:02x}"));
        fs::rename(&fan, elsewhere.join(format!("{b:02x}"))).unwrap();
        std::os::unix::fs::symlink(elsewhere.join(format!("{b:02x}")), &fan).unwrap();
    }
    write(&fx.env.ws().join("new"), b"a new file");
    let before = fs::read_dir(&elsewhere).unwrap().count();
    for cmd in ["capture", "gc", "recover"] {
        refused(1, [cmd, &fx.s()], &["objects/", "symlink"]);
    }
    // Nothing was written through them.
    let after: usize = fs::read_dir(&elsewhere)
        .unwrap()
        .map(|d| fs::read_dir(d.unwrap().path()).unwrap().count())
        .sum();
    assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), before);
    assert_eq!(after, 2, "objects written outside the store");
}
