//! The browse namespace (`ckptfs browse`) and the library API that live workspaces use to put
//! a kernel overlay on top of it.

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::support::*;

fn link(p: PathBuf) -> String {
    fs::read_link(p).unwrap().to_string_lossy().into_owned()
}

#[test]
fn browse_shows_history_and_new_checkpoints_without_remounting() {
    let _one = crate::serial();
    let f = ViewFixture::new();
    let mp = f.dir("browse");
    let _g = MountGuard::new(&mp);
    ok(["browse", f.store_str(), mp.to_str().unwrap()]);
    let mut top: Vec<String> = fs::read_dir(&mp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(
        top,
        ["branches", "by-time", "checkpoints", "labels", "latest"]
    );
    let first = link(mp.join("labels/first"));
    assert!(first.starts_with("../checkpoints/"), "{first}");
    let id1 = first.trim_start_matches("../checkpoints/").to_string();
    assert_eq!(id1.len(), 64);
    assert_eq!(link(mp.join("branches/main")), first);
    assert_eq!(link(mp.join("latest")), format!("checkpoints/{id1}"));
    let by_time: Vec<_> = fs::read_dir(mp.join("by-time")).unwrap().collect();
    assert_eq!(by_time.len(), 1);
    assert_trees_equal(&f.src, &mp.join("labels/first/work"));
    assert_trees_equal(&f.src, &mp.join(format!("checkpoints/{id1}/work")));

    // A checkpoint taken after mounting appears, and the branch and latest move to it.
    fs::write(f.src.join("later.txt"), b"written after the mount\n").unwrap();
    f.capture(Some("second"));
    assert!(wait_for(Duration::from_secs(15), || mp
        .join("labels/second/work/later.txt")
        .exists()));
    let second = link(mp.join("labels/second"));
    assert_ne!(second, first);
    assert!(wait_for(Duration::from_secs(15), || link(
        mp.join("branches/main")
    ) == second));
    assert_eq!(
        fs::read(mp.join("branches/main/work/later.txt")).unwrap(),
        b"written after the mount\n"
    );
    assert_eq!(fs::read_dir(mp.join("checkpoints")).unwrap().count(), 2);
    assert!(wait_for(Duration::from_secs(15), || {
        fs::read_dir(mp.join("by-time")).unwrap().count() == 2
    }));
    // The old checkpoint is unchanged.
    assert!(!mp.join("labels/first/work/later.txt").exists());
    // Unknown names are ENOENT; the namespace is read-only.
    assert!(!mp.join("checkpoints/0000").exists());
    let e = fs::create_dir(mp.join("labels/new")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    // status lists the browse mount.
    assert!(ok(["status", f.store_str()]).contains("browse"));
}

#[test]
fn library_api_serves_an_overlay_lower_inside_the_store() {
    let _one = crate::serial();
    let f = ViewFixture::new();
    let store = ckptfs::Store::open(&f.store).unwrap();
    let lower = store.run_dir().join("lower");
    fs::create_dir_all(&lower).unwrap();
    let _g = MountGuard::new(&lower);
    let opts = ckptfs::daemon::StartOptions {
        exe: Some(bin().into()),
        ..Default::default()
    };
    let state =
        ckptfs::daemon::start(&store, &ckptfs::view::Namespace::Browse, &lower, &opts).unwrap();
    assert_eq!(state.mountpoint, lower);
    assert!(mounted(&lower));
    let id = link(lower.join("latest"))
        .trim_start_matches("checkpoints/")
        .to_string();

    let (upper, work, merged) = (f.dir("upper"), f.dir("work"), f.dir("merged"));
    let opts = format!(
        "lowerdir={}/checkpoints/{id}/work,upperdir={},workdir={},redirect_dir=on",
        lower.display(),
        upper.display(),
        work.display()
    );
    let o = Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &opts])
        .arg(&merged)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = std::panic::catch_unwind(|| {
        assert_eq!(
            fs::read(merged.join("dir/needle.txt")).unwrap(),
            fs::read(f.src.join("dir/needle.txt")).unwrap()
        );
        assert!(
            fs::read(merged.join("big.bin")).unwrap() == fs::read(f.src.join("big.bin")).unwrap()
        );
        fs::write(merged.join("dir/needle.txt"), b"changed\n").unwrap();
        fs::rename(merged.join("dir/nested"), merged.join("moved")).unwrap();
        assert!(merged.join("moved/deeper/leaf.txt").exists());
    });
    let _ = Command::new("umount").arg(&merged).output();
    r.unwrap();
    // The lower layer never changes.
    assert_trees_equal(&f.src, &lower.join(format!("checkpoints/{id}/work")));
    // ensure_browse is idempotent while it is mounted, and starts it again after a stop.
    ckptfs::daemon::ensure_browse(&store, &lower).unwrap();
    ckptfs::daemon::stop(&lower).unwrap();
    assert!(!mounted(&lower));
    std::env::set_var("CKPTFS_EXE", bin());
    ckptfs::daemon::ensure_browse(&store, &lower).unwrap();
    assert!(mounted(&lower));
    ckptfs::daemon::stop(&lower).unwrap();
    assert!(!mounted(&lower));
}

#[test]
fn browse_refuses_a_mountpoint_inside_the_store_outside_run() {
    let _one = crate::serial();
    let f = ViewFixture::new();
    let o = run([
        "browse",
        f.store_str(),
        f.store.join("refs").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
}
