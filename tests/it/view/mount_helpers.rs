//! mount-helpers/: the systemd unit passes `systemd-analyze verify`, and views mounted from
//! fstab through mount.ckptfs keep fstab's source, so a second `mount -a` is a no-op.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::*;

fn helpers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mount-helpers")
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn systemd_unit_verifies() {
    let units: Vec<PathBuf> = fs::read_dir(helpers())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "mount"))
        .collect();
    assert!(!units.is_empty(), "no .mount unit in mount-helpers/");
    if !have("systemd-analyze") {
        eprintln!("SKIPPED: systemd-analyze is not installed (package systemd)");
        return;
    }
    for unit in units {
        let o = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&unit)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && !err.contains(&*unit.file_name().unwrap().to_string_lossy()),
            "systemd-analyze verify {}: {:?}\n{err}",
            unit.display(),
            o.status
        );
    }
}

/// mount.ckptfs installed as `/sbin/mount.fuse.ckptfs` for one test, removed on drop.
/// `None` (the test skips) when another helper is installed there: it is not ours to replace.
struct InstalledHelper(PathBuf);

impl InstalledHelper {
    fn install() -> Option<InstalledHelper> {
        let ours = fs::read(helpers().join("mount.ckptfs")).unwrap();
        let path = PathBuf::from("/sbin/mount.fuse.ckptfs");
        match fs::read(&path) {
            // A leftover of this test (killed before its clean-up) is taken over.
            Ok(theirs) if theirs != ours => {
                eprintln!("SKIPPED: {} is installed already", path.display());
                return None;
            }
            _ => {}
        }
        fs::write(&path, &ours).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        Some(InstalledHelper(path))
    }
}

impl Drop for InstalledHelper {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// `mount --fstab FSTAB -a` with mount.ckptfs running the binary under test.
fn mount_all(fstab: &Path) -> Output {
    Command::new("mount")
        .arg("--fstab")
        .arg(fstab)
        .arg("-a")
        .env("CKPTFS", bin())
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

#[test]
fn fstab_mounts_keep_their_source_and_mount_a_twice_is_a_no_op() {
    if !have("mount") || !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: needs mount(8) and /dev/fuse");
        return;
    }
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&["-l", "first"]);
    let (browse, old) = (env.path("history"), env.path("old"));
    fs::create_dir_all(&browse).unwrap();
    fs::create_dir_all(&old).unwrap();
    let _guards = (MountGuard::new(&browse), MountGuard::new(&old));
    let browse_src = format!("{}#browse", env.s());
    let old_src = format!("{}#first:ws", env.s());
    let fstab = env.path("fstab");
    fs::write(
        &fstab,
        format!(
            "# test fstab\n{browse_src} {} fuse.ckptfs ro,nofail 0 0\n{old_src} {} fuse.ckptfs ro 0 0\n",
            browse.display(),
            old.display()
        ),
    )
    .unwrap();
    let Some(_helper) = InstalledHelper::install() else {
        return;
    };

    let first = mount_all(&fstab);
    assert!(first.status.success(), "first mount -a: {first:?}");
    assert_eq!(mount_source(&browse).as_deref(), Some(browse_src.as_str()));
    assert_eq!(mount_source(&old).as_deref(), Some(old_src.as_str()));
    assert_eq!(
        fs::read(old.join("a.txt")).unwrap(),
        fs::read(env.ws().join("a.txt")).unwrap()
    );
    assert!(browse.join("checkpoints").join(&id).is_dir());

    // The second run finds both lines mounted: nothing to do, nothing said.
    let second = mount_all(&fstab);
    assert!(
        second.status.success() && second.stderr.is_empty(),
        "second mount -a: {second:?}"
    );
    let stacked = mounts().iter().filter(|(mp, _)| mp == &browse).count();
    assert_eq!(stacked, 1, "a second view was mounted over the first");

    // ckptfs still knows them as its own: status lists them, umount stops their daemons.
    let status = ok_json(["status", &env.s()]);
    let listed = status.to_string();
    assert!(
        listed.contains(&browse_src) && listed.contains(&old_src),
        "{status:#}"
    );
    ok(["umount", s(&browse)]);
    ok(["umount", s(&old)]);
    assert!(!mounted(&browse) && !mounted(&old));
}

#[test]
fn mount_source_must_name_the_store() {
    let env = Env::new();
    small_tree(env.ws());
    env.capture_id(&[]);
    let mp = env.path("mp");
    fs::create_dir_all(&mp).unwrap();
    let _guard = MountGuard::new(&mp);
    for bad in [
        "/elsewhere#browse".to_string(),
        format!("ckptfs:{}:browse", env.s()),
        format!("{}#browse,allow_other", env.s()),
    ] {
        let err = fails(2, ["browse", &env.s(), s(&mp), "--mount-source", &bad]);
        assert!(err.contains("mount source"), "{bad}: {err}");
        assert!(!mounted(&mp));
    }
}
