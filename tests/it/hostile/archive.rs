//! Hostile archives: every crafted manifest is refused before anything is written, with one
//! line naming the bad field, exit 1, and the target store (existing or not) unchanged.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::support::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Every path under `dir` (not following links) with its type, size, mode and content hash:
/// equal before and after means nothing was written.
fn file_list(dir: &Path) -> BTreeMap<PathBuf, (u32, u64, String)> {
    fn walk(dir: &Path, base: &Path, out: &mut BTreeMap<PathBuf, (u32, u64, String)>) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let m = fs::symlink_metadata(&p).unwrap();
            let digest = if m.is_file() {
                format!("{:x}", Sha256::digest(fs::read(&p).unwrap()))
            } else {
                String::new()
            };
            out.insert(
                p.strip_prefix(base).unwrap().to_path_buf(),
                (m.mode(), m.len(), digest),
            );
            if m.is_dir() {
                walk(&p, base, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// A source store (root `ws`, two checkpoints on `main`, a label) archived to `a.ckar`, and a
/// target store (root `other`) with one checkpoint of its own.
struct Fixture {
    tmp: tempfile::TempDir,
    archive: PathBuf,
    target: PathBuf,
    other_root: PathBuf,
    ws: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::Builder::new()
            .prefix("ckptfs-hostile-ar-")
            .tempdir()
            .unwrap();
        let t = tmp.path();
        let (src, ws) = (t.join("src"), t.join("ws"));
        write(&ws.join("a.txt"), b"first\n");
        ok(["init", s(&src), "--root", &format!("ws={}", ws.display())]);
        ok(["capture", s(&src)]);
        write(&ws.join("b.txt"), &[7u8; 100_000]);
        ok(["capture", s(&src)]);
        ok(["label", s(&src), "main", "v1"]);
        let archive = t.join("a.ckar");
        ok(["archive", s(&src), "--all", "--out", s(&archive)]);
        let (target, other_root) = (t.join("target"), t.join("other"));
        write(&other_root.join("o.txt"), b"other\n");
        ok([
            "init",
            s(&target),
            "--root",
            &format!("other={}", other_root.display()),
        ]);
        ok(["capture", s(&target), "--branch", "theirs"]);
        Fixture {
            tmp,
            archive,
            target,
            other_root,
            ws,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// The archive's entries (name, bytes), in order.
    fn entries(&self) -> Vec<(String, Vec<u8>)> {
        let raw = zstd::decode_all(&fs::read(&self.archive).unwrap()[..]).unwrap();
        let mut ar = tar::Archive::new(&raw[..]);
        let mut out = Vec::new();
        for e in ar.entries().unwrap() {
            let mut e = e.unwrap();
            let name = e.path().unwrap().to_string_lossy().into_owned();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            out.push((name, data));
        }
        out
    }

    /// A copy of the archive (with a matching sidecar) whose manifest `edit` changed.
    fn crafted(&self, name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
        let mut edit = Some(edit);
        let mut entries = self.entries();
        for (entry, data) in &mut entries {
            if let Some(edit) = (entry == "MANIFEST.json").then(|| edit.take()).flatten() {
                let mut v: Value = serde_json::from_slice(data).unwrap();
                edit(&mut v);
                *data = serde_json::to_vec_pretty(&v).unwrap();
            }
        }
        let entries: Vec<(&str, &[u8])> = entries
            .iter()
            .map(|(n, d)| (n.as_str(), d.as_slice()))
            .collect();
        self.write_archive(name, &archive_of(&entries))
    }

    /// Writes `bytes` as `NAME.ckar` with a matching `NAME.ckar.sha256`; the archive's path.
    fn write_archive(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let file = self.path(&format!("{name}.ckar"));
        fs::write(&file, bytes).unwrap();
        let digest = format!("{:x}", Sha256::digest(bytes));
        fs::write(
            self.path(&format!("{name}.ckar.sha256")),
            format!("{digest}  {name}.ckar\n"),
        )
        .unwrap();
        file
    }
}

// Over 150 lines on purpose: a table of 27 crafted manifests, each a line or two, and one
// loop that imports every one; the table is the test.
#[test]
fn crafted_manifests_are_refused_naming_the_field_and_nothing_is_written() {
    let fx = Fixture::new();
    let inside_target = s(&fx.target.join("objects").join("ws")).to_string();
    let inside_other = s(&fx.other_root.join("sub")).to_string();
    let inside_ws = s(&fx.ws.join("sub")).to_string();
    let gib = json!(1u64 << 30);
    type Edit = Box<dyn FnOnce(&mut Value)>;
    // (name, edit, words the line must hold, refused for a new target store too)
    let cases: Vec<(&str, Edit, Vec<&str>, bool)> = vec![
        (
            "root-in-store",
            Box::new(move |v| v["roots"]["ws"]["path"] = json!(inside_target)),
            vec!["roots", "inside the store"],
            false,
        ),
        (
            "root-in-other-root",
            Box::new(move |v| v["roots"]["ws"]["path"] = json!(inside_other)),
            vec!["roots", "inside root other"],
            false,
        ),
        (
            "root-in-root",
            Box::new(move |v| {
                let mut extra = v["roots"]["ws"].clone();
                extra["path"] = json!(inside_ws);
                v["roots"]["inner"] = extra;
            }),
            vec!["roots", "root inner", "inside root ws"],
            true,
        ),
        (
            "root-etc",
            Box::new(|v| v["roots"]["ws"]["path"] = json!("/etc")),
            vec!["roots.ws.path", "/etc", "system directory"],
            true,
        ),
        (
            "root-in-etc",
            Box::new(|v| v["roots"]["ws"]["path"] = json!("/etc/cron.d")),
            vec!["roots.ws.path", "/etc/cron.d", "system directory"],
            true,
        ),
        (
            "root-slash",
            Box::new(|v| v["roots"]["ws"]["path"] = json!("/")),
            vec!["roots.ws.path", "system directory"],
            true,
        ),
        (
            "root-lib64",
            Box::new(|v| v["roots"]["ws"]["path"] = json!("/lib64/x")),
            vec!["roots.ws.path", "/lib64"],
            true,
        ),
        (
            "root-dotdot",
            Box::new(|v| v["roots"]["ws"]["path"] = json!("/tmp/../etc")),
            vec!["roots.ws.path", "normal"],
            true,
        ),
        (
            "root-relative",
            Box::new(|v| v["roots"]["ws"]["path"] = json!("tmp/x")),
            vec!["roots.ws.path", "absolute"],
            true,
        ),
        (
            "root-name",
            Box::new(|v| {
                let r = v["roots"]["ws"].clone();
                v["roots"]["../evil"] = r;
            }),
            vec!["roots", "../evil"],
            true,
        ),
        (
            "chunker-max",
            Box::new(move |v| v["chunker"]["max"] = gib),
            vec!["chunker", "max 1073741824"],
            true,
        ),
        (
            "chunker-min",
            Box::new(|v| v["chunker"]["min"] = json!(0)),
            vec!["chunker", "min 0"],
            true,
        ),
        (
            "chunker-sqlite",
            Box::new(|v| v["chunker"]["sqlite_block"] = json!(1u64 << 30)),
            vec!["chunker", "sqlite_block"],
            true,
        ),
        (
            "chunker-algorithm",
            Box::new(|v| v["chunker"]["algorithm"] = json!("rabin")),
            vec!["chunker", "rabin"],
            true,
        ),
        (
            "branch-state",
            Box::new(|v| v["branches"]["main"]["state"] = json!("../../etc")),
            vec!["branches.main.state", "../../etc"],
            true,
        ),
        (
            "branch-name",
            Box::new(|v| {
                let b = v["branches"]["main"].clone();
                v["branches"]["../../etc/x"] = b;
            }),
            vec!["branches", "../../etc/x"],
            true,
        ),
        (
            "branch-forked-from",
            Box::new(|v| v["branches"]["main"]["forked_from"] = json!("../../etc")),
            vec!["branches.main", "../../etc"],
            true,
        ),
        (
            "branch-head",
            Box::new(|v| v["branches"]["main"]["head"] = json!("abc")),
            vec!["branches.main", "abc"],
            true,
        ),
        (
            "label-name",
            Box::new(|v| {
                let id = v["labels"]["v1"].clone();
                v["labels"]["../v2"] = id;
            }),
            vec!["labels", "../v2"],
            true,
        ),
        (
            "label-id",
            Box::new(|v| v["labels"]["v1"] = json!("not-an-id")),
            vec!["labels", "not-an-id"],
            true,
        ),
        (
            "checkpoint-id",
            Box::new(|v| v["checkpoints"][0] = json!("/etc/passwd")),
            vec!["checkpoints", "/etc/passwd"],
            true,
        ),
        (
            "checkpoint-twice",
            Box::new(|v| {
                let first = v["checkpoints"][0].clone();
                v["checkpoints"].as_array_mut().unwrap().push(first);
            }),
            vec!["checkpoints", "twice"],
            true,
        ),
        (
            "compression",
            Box::new(|v| v["compression"] = json!("lz4")),
            vec!["compression", "lz4"],
            true,
        ),
        (
            "objects-count",
            Box::new(|v| v["objects"] = json!(999_999)),
            vec!["objects", "999999"],
            true,
        ),
        (
            "object-bytes",
            Box::new(|v| v["object_bytes"] = json!(u64::MAX)),
            vec!["object_bytes"],
            true,
        ),
        (
            "objects-negative",
            Box::new(|v| v["objects"] = json!(-1)),
            vec!["objects"],
            true,
        ),
        (
            "created",
            Box::new(|v| v["created"] = json!("x".repeat(10_000))),
            vec!["created"],
            true,
        ),
    ];
    let before = file_list(&fx.target);
    for (name, edit, words, new_too) in cases {
        let file = fx.crafted(name, edit);
        let line = refused(1, ["unarchive", s(&file), s(&fx.target)], &words);
        assert!(line.contains("nothing imported"), "{name}: {line}");
        assert_eq!(
            file_list(&fx.target),
            before,
            "{name}: the target store changed"
        );
        if new_too {
            let fresh = fx.path(&format!("new-{name}"));
            refused(1, ["unarchive", s(&file), s(&fresh)], &words);
            assert!(!fresh.exists(), "{name}: a new store was created");
        }
    }
    // The untouched archive imports (so the cases above failed for their edit alone).
    let untouched = fx.crafted("untouched", |_| {});
    ok_bounded(
        ["unarchive", s(&untouched), s(&fx.path("new-untouched"))],
        BOUND,
    );
    ok_bounded(
        [
            "unarchive",
            s(&untouched),
            s(&fx.target),
            "--add-root",
            "ws",
        ],
        BOUND,
    );
}

#[test]
fn a_relocation_into_a_system_directory_is_a_usage_error() {
    let fx = Fixture::new();
    let before = file_list(&fx.target);
    refused(
        2,
        [
            "unarchive",
            s(&fx.archive),
            s(&fx.target),
            "--relocate",
            "ws=/usr/local/ws",
        ],
        &["--relocate", "/usr"],
    );
    assert_eq!(file_list(&fx.target), before);
}

#[test]
fn a_root_reached_through_a_symlink_is_checked_where_it_leads() {
    let fx = Fixture::new();
    let link = fx.path("link-to-etc");
    std::os::unix::fs::symlink("/etc", &link).unwrap();
    let evil = s(&link.join("cron.d")).to_string();
    let file = fx.crafted("via-link", move |v| v["roots"]["ws"]["path"] = json!(evil));
    let fresh = fx.path("new-via-link");
    refused(
        1,
        ["unarchive", s(&file), s(&fresh)],
        &["roots", "/etc/cron.d", "system directory"],
    );
    assert!(!fresh.exists());
}

#[test]
fn a_chunk_whose_tree_states_another_length_is_refused() {
    use ckptfs::store::tree::Chunk;
    let fx = Fixture::new();
    let entries = fx.entries();
    // A tree whose file says 200 bytes of a 6-byte chunk (sizes agree, so it decodes), a
    // record of it, and a manifest listing only that record.
    let chunk = b"first\n".to_vec();
    let chunk_id = ckptfs::ObjectId::of(&chunk);
    let tree = one_file_tree(
        b"a.txt",
        200,
        vec![Chunk {
            id: chunk_id,
            len: 200,
        }],
    )
    .encode();
    let tree_id = ckptfs::ObjectId::of(&tree);
    let (_, record) = entries
        .iter()
        .find(|(n, _)| n.starts_with("checkpoints/"))
        .unwrap();
    let mut rec: Value = serde_json::from_slice(record).unwrap();
    rec["roots"]["ws"]["tree"] = json!(tree_id.to_hex());
    rec["parents"] = json!([]);
    let rec = serde_json::to_vec(&rec).unwrap();
    let rec_id = ckptfs::ObjectId::of(&rec);
    let mut m: Value = serde_json::from_slice(&entries[0].1).unwrap();
    m["checkpoints"] = json!([rec_id.to_hex()]);
    m["branches"] = json!({});
    m["labels"] = json!({});
    m["objects"] = json!(2);
    let manifest = serde_json::to_vec(&m).unwrap();
    let (rec_name, tree_name, chunk_name) = (
        format!("checkpoints/{rec_id}"),
        format!("objects/{tree_id}"),
        format!("objects/{chunk_id}"),
    );
    let file = fx.write_archive(
        "lying",
        &archive_of(&[
            ("MANIFEST.json", &manifest),
            (&rec_name, &rec),
            (&tree_name, &tree),
            (&chunk_name, &chunk),
        ]),
    );
    let fresh = fx.path("new-lying");
    refused(
        1,
        ["unarchive", s(&file), s(&fresh)],
        &[&chunk_id.to_hex(), "6 bytes", "200"],
    );
    assert!(!fresh.exists());
    let before = file_list(&fx.target);
    refused(1, ["unarchive", s(&file), s(&fx.target)], &["200"]);
    assert_eq!(file_list(&fx.target), before);
}

/// A relocation that would put the target store inside the relocated root is the user's
/// `--relocate` at fault (exit 2, naming it), not the archive's; the store stays as it was.
#[test]
fn a_relocation_around_the_target_store_is_a_usage_error() {
    let fx = Fixture::new();
    let before = file_list(&fx.target);
    let around = fx.tmp.path().join("around");
    std::fs::create_dir(&around).unwrap();
    let target = around.join("store");
    std::fs::rename(&fx.target, &target).unwrap();
    refused(
        2,
        [
            "unarchive",
            s(&fx.archive),
            s(&target),
            "--relocate",
            &format!("ws={}", around.display()),
        ],
        &["--relocate ws", "is inside root ws"],
    );
    assert_eq!(file_list(&target), before);
}
