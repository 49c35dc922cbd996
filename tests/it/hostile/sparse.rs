//! Sparse files and what doctor says it checked: a 10 GiB sparse file checkpoints, shows its
//! status, captures and restores without its holes being read (bounded waits as hang
//! detectors, generous for a debug build), is stored as the same chunks as a dense copy of it,
//! and is restored sparse; doctor reports a truncated object and says that contents are
//! checked only by `verify`.

use std::fs::{self, File};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use crate::support::*;

/// Far more than the holes-skipped runs take (well under a second), far less than reading
/// 10 GiB of zeros does in a debug build (minutes).
const LIMIT: Duration = Duration::from_secs(120);
const BIG: u64 = 10 << 30;

/// Makes `path` a sparse file of `size` bytes with a little data at its start, in its middle
/// and at its end.
fn sparse(path: &Path, size: u64) {
    let f = File::create(path).expect("create sparse file");
    f.set_len(size).expect("set_len");
    f.write_all_at(b"head of a sparse file\n", 0)
        .expect("write");
    f.write_all_at(&random_bytes(7, 300_000), size / 2 + 12_345)
        .expect("write");
    f.write_all_at(b"tail\n", size - 5).expect("write");
}

/// Bytes the file has allocated (`st_blocks`).
fn allocated(path: &Path) -> u64 {
    fs::metadata(path).expect("stat").blocks() * 512
}

/// `cmd ARGS` must finish within `LIMIT` and succeed; its stdout.
fn bounded(args: &[&str]) -> String {
    ok_bounded(args, LIMIT)
}

fn root_tree(store: &Path, root: &str) -> String {
    let v = ok_json(["show", s(store), "main", "--json"]);
    v["checkpoint"]["roots"][root]["tree"]
        .as_str()
        .expect("tree id")
        .to_string()
}

#[test]
fn a_big_sparse_file_in_a_workspace_is_not_read_hole_by_hole() {
    let ws = Workspace::new(|room| write(&room.join("a.txt"), b"a\n"));
    sparse(&ws.path("big.img"), BIG);
    let st = bounded(&["status", ws.room()]);
    assert!(st.contains("big.img"), "{st}");
    bounded(&["checkpoint", ws.room(), "-m", "sparse"]);
    let st = bounded(&["status", ws.room(), "--json"]);
    assert!(st.contains("false"), "clean after the checkpoint: {st}");
    let head = ws.cat("main", "big.img");
    assert_eq!(head.len() as u64, BIG);
    assert_eq!(&head[..22], b"head of a sparse file\n");
    assert_eq!(&head[head.len() - 5..], b"tail\n");
}

#[test]
fn a_big_sparse_file_captures_and_restores_sparse() {
    let tmp = tempdir();
    let room = tmp.path().join("room");
    fs::create_dir(&room).unwrap();
    sparse(&room.join("big.img"), BIG);
    let store = tmp.path().join("store");
    ok(["init", s(&store), "--root", &format!("r={}", s(&room))]);
    bounded(&["capture", s(&store)]);
    let out = tmp.path().join("out");
    bounded(&["restore", s(&store), "main", "--to", s(&out)]);
    let got = out.join("big.img");
    assert_eq!(fs::metadata(&got).unwrap().len(), BIG);
    assert!(
        allocated(&got) < 64 << 20,
        "the restored file is not sparse: {} bytes allocated",
        allocated(&got)
    );
    let f = File::open(&got).unwrap();
    let mut b = vec![0u8; 300_000];
    f.read_exact_at(&mut b, BIG / 2 + 12_345).unwrap();
    assert_eq!(b, random_bytes(7, 300_000));
    let mut z = vec![1u8; 4096];
    f.read_exact_at(&mut z, BIG / 4).unwrap();
    assert!(z.iter().all(|&x| x == 0));
}

#[test]
fn a_sparse_file_and_its_dense_copy_share_every_chunk() {
    // Stored format unchanged: one path, captured sparse into one store and dense (the same
    // bytes written out, the same mtime) into another.
    let tmp = tempdir();
    let room = tmp.path().join("room");
    fs::create_dir(&room).unwrap();
    let file = room.join("f.img");
    sparse(&file, 64 << 20);
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    set_mtime(&file, 1_700_000_000_000_000_000);
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    ok(["init", s(&a), "--root", &format!("r={}", s(&room))]);
    bounded(&["capture", s(&a)]);
    assert!(allocated(&file) < 8 << 20, "the test file is not sparse");
    let bytes = fs::read(&file).unwrap();
    fs::remove_file(&file).unwrap();
    fs::write(&file, &bytes).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    set_mtime(&file, 1_700_000_000_000_000_000);
    assert!(allocated(&file) >= 64 << 20, "the copy is not dense");
    ok(["init", s(&b), "--root", &format!("r={}", s(&room))]);
    bounded(&["capture", s(&b)]);
    // The trees differ by the file's ctime and inode alone: every chunk is the same object,
    // and the root tree is the only object either store has that the other lacks.
    let (ta, tb) = (root_tree(&a, "r"), root_tree(&b, "r"));
    let (oa, ob) = (object_ids(&a), object_ids(&b));
    let only_a: Vec<_> = oa.difference(&ob).cloned().collect();
    let only_b: Vec<_> = ob.difference(&oa).cloned().collect();
    assert_eq!(only_a, vec![ta], "objects only the sparse capture made");
    assert_eq!(only_b, vec![tb], "objects only the dense capture made");
    assert!(oa.len() > 3, "{oa:?}");
}

/// The ids of the objects a store holds.
fn object_ids(store: &Path) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for fan in fs::read_dir(store.join("objects")).expect("objects dir") {
        let fan = fan.expect("entry");
        let Ok(rd) = fs::read_dir(fan.path()) else {
            continue;
        };
        for o in rd {
            let name = o.expect("entry").file_name().to_string_lossy().to_string();
            let hex = name.strip_suffix(".zst").unwrap_or(&name).to_string();
            out.insert(format!("{}{hex}", fan.file_name().to_string_lossy()));
        }
    }
    out
}

#[test]
fn doctor_reports_a_truncated_object_and_says_contents_are_verify_s() {
    let env = Env::new();
    write(&env.root("ws").join("f.bin"), &random_bytes(3, 200_000));
    env.capture(&[]);
    let st = env.s();
    // A clean store (or one with a flipped byte, which doctor cannot see): doctor says that
    // contents are checked by verify only, in both forms.
    let (hex, _) = env
        .objects()
        .into_iter()
        .max_by_key(|(_, size)| *size)
        .expect("objects");
    let p = env.object_file(&hex.replace('/', ""));
    fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
    let mut data = fs::read(&p).unwrap();
    data[1000] ^= 0x40;
    fs::write(&p, &data).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o444)).unwrap();
    let out = ok(["doctor", &st]);
    assert!(out.contains(&format!("ckptfs verify {st}")), "{out}");
    assert!(out.contains("not checked"), "{out}");
    let v = ok_json(["doctor", &st, "--json"]);
    assert_eq!(v["content_checked"], false, "{v}");
    assert!(
        v["content_check"].as_str().unwrap_or("").contains("verify"),
        "{v}"
    );
    // verify does find the flipped byte.
    let o = run(["verify", &st]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        describe_output("verify", &o)
    );
    // Truncated: doctor finds it (exit 1, the object named), and still says verify.
    fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&p, &data[..data.len() / 2]).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o444)).unwrap();
    let o = run(["doctor", &st]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        describe_output("doctor", &o)
    );
    let out = stdout(&o);
    assert!(out.contains(&hex.replace('/', "")), "{out}");
    assert!(out.contains("not checked"), "{out}");
}
