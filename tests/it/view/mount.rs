//! Real FUSE mounts of one checkpoint root (`ckptfs mount`): fidelity, tools, EROFS, inodes,
//! concurrency, corruption, signals, mountpoint rules.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::*;

#[test]
fn mount_is_a_byte_exact_copy_and_tools_work() {
    let f = ViewFixture::new();
    let g = f.mount("mnt");
    let mp = g.mp.to_str().unwrap();
    assert_trees_equal(&f.src, &g.mp);
    let n_src = sh(&format!("find {} | wc -l", f.src.display()));
    assert_eq!(sh(&format!("find {mp} -printf '%s\\n' | wc -l")), n_src);
    sh(&format!("ls -laR {mp} > /dev/null"));
    assert!(sh(&format!("grep -r NEEDLE {mp}")).contains("dir/needle.txt"));
    sh(&format!("du -s {mp}"));
    let listed = sh(&format!("tar cf - -C {mp} . | tar tf - | wc -l"));
    assert_eq!(
        listed,
        sh(&format!(
            "tar cf - -C {} . | tar tf - | wc -l",
            f.src.display()
        ))
    );
    // statfs answers, and reports the checkpoint's size.
    let blocks: u64 = sh(&format!("stat -f -c %b {mp}")).trim().parse().unwrap();
    assert!(blocks >= 3_000_000 / 4096, "{blocks}");
    // A missing xattr is ENODATA (Ok(None)), not ENOSYS.
    assert_eq!(xattr::get(g.mp.join("f1.bin"), "user.none").unwrap(), None);
    assert_eq!(
        xattr::get(g.mp.join("dir/needle.txt"), "user.color").unwrap(),
        Some(b"blue".to_vec())
    );
    // Identical files are distinct inodes.
    use std::os::unix::fs::MetadataExt;
    let i1 = fs::metadata(g.mp.join("dir/same1.txt")).unwrap().ino();
    let i2 = fs::metadata(g.mp.join("dir/same2.txt")).unwrap().ino();
    assert_ne!(i1, i2);
    // The executable runs from the mount.
    assert_eq!(sh(&format!("{mp}/script.sh")), "hi\n");
}

#[test]
fn every_write_fails_with_erofs() {
    let f = ViewFixture::new();
    let g = f.mount("mnt");
    let m = &g.mp;
    let erofs = |what: &str, r: std::io::Result<()>| {
        let e = r.expect_err(what);
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{what}: {e}");
    };
    erofs("create", fs::File::create(m.join("new")).map(|_| ()));
    erofs(
        "open for write",
        fs::OpenOptions::new()
            .write(true)
            .open(m.join("f1.bin"))
            .map(|_| ()),
    );
    erofs(
        "append",
        fs::OpenOptions::new()
            .append(true)
            .open(m.join("f1.bin"))
            .map(|_| ()),
    );
    erofs("mkdir", fs::create_dir(m.join("d")));
    erofs("unlink", fs::remove_file(m.join("f1.bin")));
    erofs("rmdir", fs::remove_dir(m.join("empty-dir")));
    erofs("rename", fs::rename(m.join("f1.bin"), m.join("f1.moved")));
    erofs("symlink", std::os::unix::fs::symlink("x", m.join("l")));
    erofs("link", fs::hard_link(m.join("f1.bin"), m.join("h")));
    erofs(
        "chmod",
        fs::set_permissions(m.join("f1.bin"), fs::Permissions::from_mode(0o777)),
    );
    erofs("setxattr", xattr::set(m.join("f1.bin"), "user.x", b"1"));
    erofs(
        "removexattr",
        xattr::remove(m.join("dir/needle.txt"), "user.color"),
    );
    erofs(
        "chown",
        std::os::unix::fs::chown(m.join("f1.bin"), Some(1), Some(1)),
    );
    let o = Command::new("touch")
        .arg(m.join("f1.bin"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("Read-only"));
    let o = Command::new("truncate")
        .args(["-s", "0"])
        .arg(m.join("big.bin"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("Read-only"));
}

#[test]
fn inodes_are_stable_across_walks_and_remounts() {
    let f = ViewFixture::new();
    let first;
    {
        let g = f.mount("mnt");
        first = inodes(&g.mp);
        assert_eq!(first, inodes(&g.mp));
    }
    let g = f.mount("mnt");
    assert_eq!(first, inodes(&g.mp), "after a remount");
}

#[test]
fn eight_concurrent_readers_get_correct_bytes() {
    let f = ViewFixture::new();
    let g = f.mount("mnt");
    let files = ["big.bin", "f300000.bin", "f65537.bin", "dir/needle.txt"];
    std::thread::scope(|s| {
        for t in 0..8 {
            let (src, mnt) = (&f.src, &g.mp);
            s.spawn(move || {
                for i in 0..files.len() {
                    let name = files[(i + t) % files.len()];
                    // Odd read sizes, so reads straddle chunk boundaries differently.
                    let mut fh = fs::File::open(mnt.join(name)).unwrap();
                    let mut got = Vec::new();
                    let mut buf = vec![0u8; 7_001 + t * 4_099];
                    loop {
                        let n = fh.read(&mut buf).unwrap();
                        if n == 0 {
                            break;
                        }
                        got.extend_from_slice(&buf[..n]);
                    }
                    assert!(got == fs::read(src.join(name)).unwrap(), "{name}");
                }
            });
        }
    });
}

#[test]
fn corrupted_object_gives_eio_for_that_file_only() {
    let f = ViewFixture::new();
    let victim = fs::read(f.src.join("victim.txt")).unwrap();
    let store = ckptfs::Store::open(&f.store).unwrap();
    let (obj, _) = store
        .locate_object(&ckptfs::ObjectId::of(&victim))
        .expect("the victim's object");
    fs::set_permissions(&obj, fs::Permissions::from_mode(0o644)).unwrap();
    let mut fh = fs::OpenOptions::new().write(true).open(&obj).unwrap();
    fh.write_all(b"XXXX").unwrap();
    drop(fh);
    let g = f.mount("mnt");
    let e = fs::read(g.mp.join("victim.txt")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    // Metadata and every other file still work.
    assert_eq!(
        fs::metadata(g.mp.join("victim.txt")).unwrap().len(),
        victim.len() as u64
    );
    assert_eq!(
        fs::read(g.mp.join("big.bin")).unwrap(),
        fs::read(f.src.join("big.bin")).unwrap()
    );
    // The daemon logged the path and the object.
    let log = fs::read_dir(f.store.join("run/views"))
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            (p.extension().is_some_and(|x| x == "log")).then(|| fs::read_to_string(p).unwrap())
        })
        .collect::<String>();
    assert!(log.contains("victim.txt"), "{log}");
    assert!(
        log.contains(&ckptfs::ObjectId::of(&victim).to_hex()),
        "{log}"
    );
}

fn daemon_pid(store: &str, mp: &Path) -> i32 {
    let v = ok_json(["status", store]);
    v.as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountpoint"] == mp.to_str().unwrap())
        .and_then(|m| m["state"]["pid"].as_i64())
        .expect("mount listed by status") as i32
}

/// Whether process `pid` runs (exists and is not a zombie waiting to be reaped).
fn running(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(s[s.rfind(')')? + 1..].split_whitespace().next()? != "Z"))
        .unwrap_or(false)
}

#[test]
fn sigterm_and_sigkill_leave_no_mount_behind() {
    let f = ViewFixture::new();
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGKILL] {
        let g = f.mount("mnt");
        let pid = daemon_pid(f.store_str(), &g.mp);
        sh(&format!("kill -{sig} {pid}"));
        assert!(
            wait_for(Duration::from_secs(20), || !mounted(&g.mp)),
            "still mounted after signal {sig}"
        );
        // The mountpoint is usable again, not a dead "transport endpoint".
        assert!(fs::read_dir(&g.mp).unwrap().next().is_none());
        // Gone before the next mount: its record, until it exits, would name it for that one.
        assert!(
            wait_for(Duration::from_secs(20), || !running(pid)),
            "daemon {pid} still running after signal {sig}"
        );
    }
    assert_eq!(ok(["status", f.store_str(), "--json"]).trim(), "[]");
}

#[test]
fn mounts_at_the_recorded_root_path_and_with_at() {
    let f = ViewFixture::new();
    assert!(!f.room.exists());
    let g = MountGuard::new(&f.room);
    let out = ok(["mount", f.store_str(), "first"]);
    assert!(out.contains(f.room.to_str().unwrap()), "{out}");
    assert!(mount_source(&f.room).unwrap().starts_with("ckptfs:"));
    assert_trees_equal(&f.src, &f.room);
    ok(["umount", f.room.to_str().unwrap()]);
    assert!(!mounted(&f.room));
    drop(g);
    // --at and a positional MOUNTPOINT both mount elsewhere.
    let at = f.dir("elsewhere");
    let g = MountGuard::new(&at);
    ok([
        "mount",
        f.store_str(),
        "first:work",
        "--at",
        at.to_str().unwrap(),
    ]);
    assert_trees_equal(&f.src, &at);
    drop(g);
    let pos = f.dir("positional");
    let g = MountGuard::new(&pos);
    ok(["mount", f.store_str(), "first", pos.to_str().unwrap()]);
    assert_trees_equal(&f.src, &pos);
    drop(g);
}

#[test]
fn clear_errors_for_bad_mountpoints() {
    let f = ViewFixture::new();
    let inside = f.store.join("objects");
    let o = run([
        "mount",
        f.store_str(),
        "first",
        "--at",
        inside.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("inside the store"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let missing = f.dir.path().join("missing");
    let o = run([
        "mount",
        f.store_str(),
        "first",
        "--at",
        missing.to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("mountpoint"));

    let g = f.mount("busy");
    let o = run([
        "mount",
        f.store_str(),
        "first",
        "--at",
        g.mp.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("busy"), "{err}");

    let o = run([
        "mount",
        f.store_str(),
        "nosuchlabel",
        "--at",
        g.mp.to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("nosuchlabel"));

    let o = run(["umount", f.dir.path().to_str().unwrap()]);
    assert!(!o.status.success());
}

/// The daemon's descriptors that point into `STORE/cache/materialized/` (unnamed copies).
fn materialized_fds(pid: i32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| fs::read_link(e.unwrap().path()).ok())
        .filter(|t| t.to_string_lossy().contains("cache/materialized/"))
        .count()
}

#[test]
fn big_files_are_read_through_a_materialized_copy_with_passthrough() {
    let f = ViewFixture::new();
    let g = f.mount("mnt");
    let pid = daemon_pid(f.store_str(), &g.mp);
    let want = fs::read(f.src.join("big.bin")).unwrap();
    assert!(want.len() >= 1 << 20, "big.bin must be big enough");
    assert_eq!(materialized_fds(pid), 0, "nothing is copied before an open");
    // Small files are never copied.
    assert_eq!(
        fs::read(g.mp.join("f300000.bin")).unwrap(),
        fs::read(f.src.join("f300000.bin")).unwrap()
    );
    assert_eq!(
        materialized_fds(pid),
        0,
        "small files stay in the page cache"
    );
    // First read builds the copy, later reads use it; both byte-exact.
    assert_eq!(fs::read(g.mp.join("big.bin")).unwrap(), want);
    assert_eq!(materialized_fds(pid), 1, "one unnamed copy of big.bin");
    assert_eq!(fs::read(g.mp.join("big.bin")).unwrap(), want);
    assert_eq!(materialized_fds(pid), 1, "the copy is reused");
    // Nothing named is left in the store's cache directory.
    let named = fs::read_dir(f.store.join("cache/materialized"))
        .unwrap()
        .count();
    assert_eq!(named, 0);
    // mmap and positioned reads work on a passthrough file.
    let mmap_sha = |p: &Path| {
        sh(&format!(
            "python3 -c 'import hashlib, mmap, sys; f = open(sys.argv[1], \"rb\"); \
             m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ); \
             print(hashlib.sha256(m).hexdigest())' '{}'",
            p.display()
        ))
    };
    assert_eq!(
        mmap_sha(&g.mp.join("big.bin")),
        mmap_sha(&f.src.join("big.bin"))
    );
    let file = fs::File::open(g.mp.join("big.bin")).unwrap();
    let mut buf = vec![0u8; 4096];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf, 1_234_567).unwrap();
    assert_eq!(&buf[..], &want[1_234_567..1_234_567 + 4096]);
    drop(file);
    // Passthrough was not refused by the kernel (the daemon says so when it falls back).
    let log = fs::read_to_string(f.store.join(format!("run/views/{pid}.log"))).unwrap_or_default();
    assert!(!log.contains("passthrough unavailable"), "{log}");
    // A file system with --file-cache-size 0 reads the same bytes without copies.
    let mp2 = f.dir("nocopy");
    let g2 = MountGuard::new(&mp2);
    ok([
        "mount",
        f.store_str(),
        "first:work",
        "--at",
        mp2.to_str().unwrap(),
        "--file-cache-size",
        "0",
    ]);
    let pid2 = daemon_pid(f.store_str(), &g2.mp);
    assert_eq!(fs::read(g2.mp.join("big.bin")).unwrap(), want);
    assert_eq!(materialized_fds(pid2), 0);
}

#[test]
fn corrupt_chunk_of_a_big_file_gives_eio_and_no_copy() {
    let f = ViewFixture::new();
    let store = ckptfs::Store::open(&f.store).unwrap();
    let loc = ckptfs::history::walk::locate(&store, "first:work/big.bin").unwrap();
    let chunks = match loc.entry.unwrap().kind {
        ckptfs::store::tree::EntryKind::File { chunks } => chunks,
        _ => panic!("big.bin is not a file"),
    };
    assert!(chunks.len() > 1, "big.bin spans several chunks");
    let last = chunks.last().unwrap().id;
    let (obj, _) = store.locate_object(&last).expect("the last chunk's object");
    fs::set_permissions(&obj, fs::Permissions::from_mode(0o644)).unwrap();
    let mut data = fs::read(&obj).unwrap();
    let i = data.len() / 2;
    data[i] ^= 0x5a;
    fs::write(&obj, data).unwrap();
    let g = f.mount("mnt");
    let pid = daemon_pid(f.store_str(), &g.mp);
    let e = fs::read(g.mp.join("big.bin")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert_eq!(
        materialized_fds(pid),
        0,
        "no copy of a file with a bad chunk"
    );
    // Everything else still reads.
    assert_eq!(
        fs::read(g.mp.join("f300000.bin")).unwrap(),
        fs::read(f.src.join("f300000.bin")).unwrap()
    );
    let log = fs::read_to_string(f.store.join(format!("run/views/{pid}.log"))).unwrap();
    assert!(
        log.contains("big.bin") && log.contains(&last.to_hex()),
        "{log}"
    );
}
