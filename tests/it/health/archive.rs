//! archive / unarchive: round trip to a relocated store, split parts, and refusal of
//! truncated, corrupted, foreign and malicious files (nothing imported).

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::support::*;
use sha2::{Digest, Sha256};

fn fixture(root: &Path) -> (String, String) {
    let room = root.join("room");
    make_room(&room, 20, 7);
    let store = root.join("store");
    init(&store, &room);
    let a = capture(&store, &["-l", "first"]);
    fs::write(room.join("more.txt"), "more\n".repeat(5000)).unwrap();
    let b = capture(&store, &[]);
    (a, b)
}

#[test]
fn round_trip_to_relocated_store() {
    let t = tempdir();
    let (a, b) = fixture(t.path());
    let store = t.path().join("store");
    let file = t.path().join("out/main.ckar");
    fs::create_dir(t.path().join("out")).unwrap();
    let r = ok_json(["archive", s(&store), "main", "--out", s(&file)]);
    assert_eq!(r["checkpoints"], 2);
    let digest = r["sha256"].as_str().unwrap().to_string();
    let side = fs::read_to_string(t.path().join("out/main.ckar.sha256")).unwrap();
    assert_eq!(side, format!("{digest}  main.ckar\n"));
    let got = format!("{:x}", Sha256::digest(fs::read(&file).unwrap()));
    assert_eq!(got, digest);
    // The audit log records the digest.
    let audit = fs::read_to_string(store.join("audit.jsonl")).unwrap();
    assert!(audit.contains(&digest));
    // Never overwritten.
    let o = run(["archive", s(&store), "main", "--out", s(&file)]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("already exists"), "{}", stderr(&o));

    let target = t.path().join("second");
    let new_root = t.path().join("elsewhere/room");
    let u = ok_json([
        "unarchive",
        s(&file),
        s(&target),
        "--relocate",
        &format!("workspace={}", s(&new_root)),
    ]);
    assert_eq!(u["created_store"], true);
    assert_eq!(u["checkpoints_new"], 2);
    ok(["verify", s(&target)]);
    let cfg: serde_json::Value =
        serde_json::from_slice(&fs::read(target.join("STORE.json")).unwrap()).unwrap();
    assert_eq!(cfg["roots"]["workspace"]["path"], s(&new_root));
    assert_eq!(head(&target, "main").as_deref(), Some(b.as_str()));
    assert_eq!(
        fs::read_to_string(target.join("refs/labels/first"))
            .unwrap()
            .trim(),
        a
    );
    // Same ids, same content: restore from the copy equals the original room.
    let dest = t.path().join("restored");
    ok(["restore", s(&target), "main", "--to", s(&dest)]);
    assert_eq!(contents(&dest), contents(&t.path().join("room")));
    // Permissions: store 0700, objects read-only.
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    for fan in fs::read_dir(target.join("objects")).unwrap() {
        for o in fs::read_dir(fan.unwrap().path()).unwrap() {
            let m = fs::metadata(o.unwrap().path())
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(m, 0o444);
        }
    }
    // Importing again into the same store deduplicates everything.
    let u = ok_json(["unarchive", s(&file), s(&target)]);
    assert_eq!(u["objects_new"], 0);
    assert_eq!(u["checkpoints_new"], 0);
    // A read-only mount of the copy appears at the relocated path.
    {
        let _guard = MountGuard::new(&new_root);
        ok(["mount", s(&target), "main"]);
        assert_eq!(contents(&new_root), contents(&t.path().join("room")));
        ok(["umount", s(&new_root)]);
    }
    fs::remove_dir(&new_root).ok();
    // The copy captures on from the relocated path.
    fs::create_dir_all(new_root.parent().unwrap()).unwrap();
    copy_dir(&t.path().join("room"), &new_root);
    fs::write(new_root.join("after-move"), b"new").unwrap();
    let c = capture(&target, &[]);
    assert_eq!(show(&target, &c)["parents"][0], b.as_str());
    assert_eq!(
        ok(["cat", s(&target), &format!("{c}:workspace/after-move")]),
        "new"
    );
    ok(["verify", s(&target)]);
}

#[test]
fn split_parts_round_trip_and_missing_part() {
    let t = tempdir();
    fixture(t.path());
    let store = t.path().join("store");
    let file = t.path().join("all.ckar");
    let r = ok_json([
        "archive",
        s(&store),
        "--all",
        "--out",
        s(&file),
        "--split",
        "16K",
    ]);
    let parts = r["parts"].as_array().unwrap();
    assert!(parts.len() > 2, "{r}");
    for p in parts {
        assert!(p["bytes"].as_u64().unwrap() <= 16 * 1024);
    }
    assert!(!file.exists());
    let target = t.path().join("t1");
    ok(["unarchive", &format!("{}.part001", s(&file)), s(&target)]);
    ok(["verify", s(&target)]);
    // Remove the last part: refused, nothing created.
    let last = parts.last().unwrap()["path"].as_str().unwrap().to_string();
    fs::rename(&last, format!("{last}.away")).unwrap();
    let target2 = t.path().join("t2");
    let o = run(["unarchive", s(&file), s(&target2)]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("parts"), "{}", stderr(&o));
    assert!(!target2.exists());
}

fn refused(file: &Path, target: &Path, what: &str) {
    let o = run(["unarchive", s(file), s(target)]);
    assert!(!o.status.success(), "{what}: accepted");
    assert!(
        stderr(&o).contains("nothing imported") || stderr(&o).contains("not a ckptfs archive"),
        "{what}: unclear message: {}",
        stderr(&o)
    );
    assert!(!target.exists(), "{what}: target store was created");
}

fn write_with_sidecar(path: &Path, data: &[u8]) {
    fs::write(path, data).unwrap();
    let d = format!("{:x}", Sha256::digest(data));
    let name = path.file_name().unwrap().to_string_lossy();
    fs::write(format!("{}.sha256", s(path)), format!("{d}  {name}\n")).unwrap();
}

#[test]
fn truncated_corrupted_and_foreign_files_are_refused() {
    let t = tempdir();
    fixture(t.path());
    let store = t.path().join("store");
    let file = t.path().join("a.ckar");
    ok(["archive", s(&store), "main", "--out", s(&file)]);
    let good = fs::read(&file).unwrap();
    let side = fs::read(t.path().join("a.ckar.sha256")).unwrap();

    // Truncated (the sidecar no longer matches).
    let trunc = t.path().join("trunc.ckar");
    fs::write(&trunc, &good[..good.len() / 2]).unwrap();
    fs::write(
        t.path().join("trunc.ckar.sha256"),
        String::from_utf8_lossy(&side).replace("a.ckar", "trunc.ckar"),
    )
    .unwrap();
    refused(&trunc, &t.path().join("t-trunc"), "truncated");

    // One flipped byte.
    let bad = t.path().join("bad.ckar");
    let mut data = good.clone();
    let mid = data.len() / 2;
    data[mid] ^= 0x40;
    fs::write(&bad, &data).unwrap();
    fs::write(
        t.path().join("bad.ckar.sha256"),
        String::from_utf8_lossy(&side).replace("a.ckar", "bad.ckar"),
    )
    .unwrap();
    refused(&bad, &t.path().join("t-bad"), "corrupted");

    // Corrupted but with a matching sidecar: zstd checksums and object hashes catch it.
    let bad2 = t.path().join("bad2.ckar");
    write_with_sidecar(&bad2, &data);
    refused(
        &bad2,
        &t.path().join("t-bad2"),
        "corrupted with matching digest",
    );

    // Truncated with a matching sidecar.
    let trunc2 = t.path().join("trunc2.ckar");
    write_with_sidecar(&trunc2, &good[..good.len() - 100]);
    refused(
        &trunc2,
        &t.path().join("t-trunc2"),
        "truncated with matching digest",
    );

    // Foreign files: random bytes, a plain tar.zst without manifest.
    let foreign = t.path().join("foreign.ckar");
    write_with_sidecar(&foreign, b"this is not an archive at all\n");
    refused(&foreign, &t.path().join("t-foreign"), "foreign");
    let mut tb = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(5);
    h.set_mode(0o644);
    tb.append_data(&mut h, "hello.txt", &b"hello"[..]).unwrap();
    let plain = zstd::encode_all(&tb.into_inner().unwrap()[..], 3).unwrap();
    let foreign2 = t.path().join("foreign2.ckar");
    write_with_sidecar(&foreign2, &plain);
    refused(
        &foreign2,
        &t.path().join("t-foreign2"),
        "tar without manifest",
    );

    // No sidecar and no --sha256: refused with a hint.
    let lone = t.path().join("lone.ckar");
    fs::write(&lone, &good).unwrap();
    let o = run(["unarchive", s(&lone), s(&t.path().join("t-lone"))]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--sha256"), "{}", stderr(&o));
    let d = format!("{:x}", Sha256::digest(&good));
    ok([
        "unarchive",
        s(&lone),
        s(&t.path().join("t-lone")),
        "--sha256",
        &d,
    ]);
}

/// A tar entry with a raw name (bypassing the tar crate's own path checks).
fn raw_entry(tb: &mut tar::Builder<Vec<u8>>, name: &[u8], data: &[u8]) {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    {
        let gnu = h.as_gnu_mut().unwrap();
        gnu.name[..name.len()].copy_from_slice(name);
    }
    h.set_cksum();
    tb.append(&h, data).unwrap();
}

#[test]
fn malicious_paths_are_refused_and_nothing_is_written() {
    let t = tempdir();
    fixture(t.path());
    let store = t.path().join("store");
    let file = t.path().join("a.ckar");
    ok(["archive", s(&store), "main", "--out", s(&file)]);
    // Take the real manifest, then add an escaping entry.
    let raw = zstd::decode_all(&fs::read(&file).unwrap()[..]).unwrap();
    let mut ar = tar::Archive::new(&raw[..]);
    let mut manifest = Vec::new();
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().to_str() == Some("MANIFEST.json") {
            std::io::Read::read_to_end(&mut e, &mut manifest).unwrap();
        }
    }
    let victim = t.path().join("victim");
    for (i, evil) in [
        format!("../{}", victim.file_name().unwrap().to_string_lossy()),
        s(&victim).to_string(),
        "objects/../../escape".to_string(),
        "refs/branches/main.json".to_string(),
    ]
    .iter()
    .enumerate()
    {
        let mut tb = tar::Builder::new(Vec::new());
        raw_entry(&mut tb, b"MANIFEST.json", &manifest);
        raw_entry(&mut tb, evil.as_bytes(), b"pwned");
        let bytes = zstd::encode_all(&tb.into_inner().unwrap()[..], 3).unwrap();
        let f = t.path().join(format!("evil{i}.ckar"));
        write_with_sidecar(&f, &bytes);
        let target = t.path().join(format!("t-evil{i}"));
        let o = run(["unarchive", s(&f), s(&target)]);
        assert!(!o.status.success(), "{evil}: accepted");
        assert!(stderr(&o).contains("not allowed"), "{evil}: {}", stderr(&o));
        assert!(!target.exists());
        assert!(!victim.exists());
    }
    // A symlink entry is refused too.
    let mut tb = tar::Builder::new(Vec::new());
    raw_entry(&mut tb, b"MANIFEST.json", &manifest);
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    h.set_mode(0o777);
    let name = format!("objects/{}", "ab".repeat(32));
    h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_link_name("/etc/passwd").unwrap();
    h.set_cksum();
    tb.append(&h, &[][..]).unwrap();
    let bytes = zstd::encode_all(&tb.into_inner().unwrap()[..], 3).unwrap();
    let f = t.path().join("link.ckar");
    write_with_sidecar(&f, &bytes);
    let o = run(["unarchive", s(&f), s(&t.path().join("t-link"))]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
    let _ = std::io::stdout().flush();
}

#[test]
fn conflicting_refs_import_nothing() {
    let t = tempdir();
    let (a, _) = fixture(t.path());
    let store = t.path().join("store");
    let file = t.path().join("a.ckar");
    ok(["archive", s(&store), "main", "--out", s(&file)]);
    // A second store with its own main branch.
    let other_room = t.path().join("other-room");
    make_room(&other_room, 3, 99);
    let other = t.path().join("other");
    init(&other, &other_room);
    let own = capture(&other, &[]);
    let objects_before = fs::read_dir(other.join("objects"))
        .unwrap()
        .map(|d| fs::read_dir(d.unwrap().path()).unwrap().count())
        .sum::<usize>();
    let o = run(["unarchive", s(&file), s(&other)]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("branch main exists"), "{}", stderr(&o));
    let objects_after = fs::read_dir(other.join("objects"))
        .unwrap()
        .map(|d| fs::read_dir(d.unwrap().path()).unwrap().count())
        .sum::<usize>();
    assert_eq!(
        objects_before, objects_after,
        "objects imported despite the conflict"
    );
    assert_eq!(head(&other, "main").as_deref(), Some(own.as_str()));
    // Exporting one labelled checkpoint imports into the other store cleanly.
    let one = t.path().join("one.ckar");
    ok(["archive", s(&store), "first", "--out", s(&one)]);
    let u = ok_json(["unarchive", s(&one), s(&other)]);
    assert_eq!(u["labels"][0], "first");
    assert_eq!(
        fs::read_to_string(other.join("refs/labels/first"))
            .unwrap()
            .trim(),
        a
    );
    ok(["verify", s(&other)]);
}

/// An archive from a format-2 store (trees with ctimes and inode numbers) imported into a
/// version-1 store upgrades it to version 2 first, so older builds refuse the store rather
/// than fail on those trees; an archive of version-1 trees leaves a version-1 store alone.
#[test]
fn unarchive_upgrades_a_version_1_store_only_for_trees_that_need_it() {
    let t = tempdir();
    let set_version = |store: &Path, v: u64| {
        let p = store.join("STORE.json");
        let mut cfg: serde_json::Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
        cfg["version"] = v.into();
        fs::write(&p, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    };
    let version = |store: &Path| {
        let cfg: serde_json::Value =
            serde_json::from_slice(&fs::read(store.join("STORE.json")).unwrap()).unwrap();
        cfg["version"].as_u64().unwrap()
    };
    // A version-1 source store writes version-1 trees; its archive keeps a target at 1.
    let old_room = t.path().join("old-room");
    make_room(&old_room, 3, 5);
    let old = t.path().join("old");
    init(&old, &old_room);
    set_version(&old, 1);
    capture(&old, &["-l", "old-first"]);
    let old_file = t.path().join("old.ckar");
    ok(["archive", s(&old), "old-first", "--out", s(&old_file)]);
    let target_room = t.path().join("target-room");
    make_room(&target_room, 2, 9);
    let target = t.path().join("target");
    init(&target, &target_room);
    set_version(&target, 1);
    let u = ok_json(["unarchive", s(&old_file), s(&target)]);
    assert!(u.get("upgraded_to").is_none(), "{u}");
    assert_eq!(version(&target), 1);
    // A format-2 archive upgrades it.
    let (a, _) = fixture(t.path());
    let file = t.path().join("new.ckar");
    ok([
        "archive",
        s(&t.path().join("store")),
        "first",
        "--out",
        s(&file),
    ]);
    let out = ok(["unarchive", s(&file), s(&target)]);
    assert!(out.contains("upgraded to version 2"), "{out}");
    assert_eq!(version(&target), 2);
    ok(["verify", s(&target)]);
    let back = t.path().join("back");
    ok(["restore", s(&target), &a, "--to", s(&back)]);
}
