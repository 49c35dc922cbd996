//! A remote altered behind ckptfs's back (issue 35, gap 4): the refs, an index, a key record
//! and the trailer of a pack no index names are each changed through the S3 API. Each is
//! detected with a one-line error naming what is at fault (or, for the trailer, the pack is
//! skipped and its data uploaded again), and no wrong byte is ever given out. The AEAD and the
//! SHA-256 names carry this: a data pack alone (tests/it/remote/faults.rs) is caught by the
//! object hash with or without them.

use std::fs;
use std::path::Path;

use crate::support::*;

/// Flips one byte of `key` on the remote at `at` (from the end when negative); the original.
fn flip(g: &Garage, key: &str, at: isize) -> Vec<u8> {
    let orig = g
        .s3_get(key)
        .unwrap_or_else(|| panic!("{key} on the remote"));
    let mut b = orig.clone();
    let i = if at < 0 {
        b.len() - at.unsigned_abs()
    } else {
        at.unsigned_abs()
    };
    b[i] ^= 0x20;
    g.s3_put(key, &b);
    orig
}

/// `clone` of the remote into `target` fails in one line saying `says`; nothing usable made.
fn clone_fails(g: &Garage, prefix: &str, target: &Path, key: &Path, says: &str) {
    let mut a = vec!["clone".to_string(), g.url(prefix), s(target).to_string()];
    a.extend(reach(g, 0, key));
    let o = rrun(g, &a);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", describe(&a, &o));
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(says), "{says}: {err}");
    assert!(
        !target.join("STORE.json").exists() || run(["log", s(target)]).stdout.is_empty(),
        "a clone of an altered remote holds history"
    );
}

#[test]
fn refs_index_and_key_records_altered_on_the_remote_are_refused_naming_them() {
    let g = Garage::start();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "pw");
    let room = dir.path().join("room");
    write(&room.join("a.txt"), b"the real bytes\n");
    let a = dir.path().join("a");
    ok(["init", s(&a), "--root", &format!("work={}", s(&room))]);
    capture(&a, &[]);
    add_remote(&g, &a, "tam", &key);
    rok(&g, ["push", s(&a)]);
    let one = |p: &str| {
        let l = g.s3_list(p);
        assert_eq!(l.len(), 1, "{p}: {l:?}");
        l[0].clone()
    };
    let (ref_key, index_key, key_key) = (
        "tam/refs/branches/main".to_string(),
        one("tam/index/"),
        one("tam/keys/"),
    );
    for (n, (k, at, says)) in [
        (&ref_key, -5, "refs/branches/main"),
        (&index_key, 40, "does not match its name"),
    ]
    .into_iter()
    .enumerate()
    {
        let orig = flip(&g, k, at);
        clone_fails(&g, "tam", &dir.path().join(format!("b{n}")), &key, says);
        g.s3_put(k, &orig);
    }
    // The key record: its wrapped master key altered (it no longer opens: the tag), its KDF
    // cost raised past the bound (refused before deriving), its JSON cut.
    let orig = g.s3_get(&key_key).unwrap();
    let rec: serde_json::Value = serde_json::from_slice(&orig).unwrap();
    let mut wrapped = rec.clone();
    let w = rec["wrapped"].as_str().unwrap();
    let last = if w.ends_with('0') { "1" } else { "0" };
    wrapped["wrapped"] = format!("{}{last}", &w[..w.len() - 1]).into();
    let mut costly = rec.clone();
    costly["memory_kib"] = u32::MAX.into();
    for (n, (bytes, says)) in [
        (
            wrapped.to_string().into_bytes(),
            "no key record there opens with it",
        ),
        (costly.to_string().into_bytes(), "unsupported KDF"),
        (orig[..orig.len() / 2].to_vec(), "tam/keys/"),
    ]
    .into_iter()
    .enumerate()
    {
        g.s3_put(&key_key, &bytes);
        clone_fails(&g, "tam", &dir.path().join(format!("k{n}")), &key, says);
    }
    g.s3_put(&key_key, &orig);
    // Put back, the remote clones and gives the real bytes.
    let b = dir.path().join("b");
    clone_remote(&g, "tam", &b, &key);
    assert_eq!(
        rok(&g, ["cat", s(&b), "main:work/a.txt"]),
        "the real bytes\n"
    );
}

/// A pack no index names (a push died before its index) is adopted from its trailer by the
/// next push; a trailer altered on the remote does not open, so the pack is skipped, its data
/// uploaded again, and a clone reads the real bytes.
#[test]
fn an_altered_trailer_of_an_orphan_pack_is_skipped_and_its_data_uploaded_again() {
    let g = Garage::start();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "pw");
    let room = dir.path().join("room");
    let big = random_bytes(5, 1 << 20);
    write(&room.join("big.bin"), &big);
    let a = dir.path().join("a");
    ok(["init", s(&a), "--root", &format!("work={}", s(&room))]);
    capture(&a, &[]);
    add_remote(&g, &a, "orph", &key);
    rok(&g, ["push", s(&a)]);
    // Orphan every pack: no index names them (remote and local copies gone, records and refs
    // too, as after a push that died before its index).
    let published = ["orph/index/", "orph/records/", "orph/refs/"];
    for k in published.iter().flat_map(|p| g.s3_list(p)) {
        g.s3_delete(&k);
    }
    let cache = a.join("remotes/origin/index");
    for e in fs::read_dir(&cache).unwrap() {
        fs::remove_file(e.unwrap().path()).unwrap();
    }
    fs::remove_file(a.join("remotes/origin/refs.json")).ok();
    let data_pack = g
        .s3_list("orph/packs/")
        .into_iter()
        .max_by_key(|k| g.s3_get(k).map_or(0, |b| b.len()))
        .unwrap();
    // The byte before the trailer's length: inside the sealed trailer.
    flip(&g, &data_pack, -5);
    let args: Vec<String> = ["push", s(&a), "-v"].map(String::from).into();
    let o = rrun(&g, &args);
    assert!(o.status.success(), "{}", describe(&args, &o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("skipping pack") && err.contains(data_pack.trim_start_matches("orph/")),
        "the altered pack is named: {err}"
    );
    let b = dir.path().join("b");
    clone_remote(&g, "orph", &b, &key);
    let args: Vec<String> = ["cat", s(&b), "main:work/big.bin"].map(String::from).into();
    let o = rrun(&g, &args);
    assert!(o.status.success(), "{}", describe(&args, &o));
    assert!(o.stdout == big, "the real bytes");
}
