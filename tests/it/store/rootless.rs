//! ckptfs for an ordinary account (no root): a real user, made by the test, runs the store
//! commands and the read-only views on a store of its own, with /dev/fuse open to users as
//! Debian's fuse3 udev rule leaves it; and what still needs root says so in one line.

use crate::support::*;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// util-linux's runuser (root runs a command as another user, no password, no PAM prompt).
const RUNUSER: &str = "/usr/sbin/runuser";

/// A user account made for one test (home included), removed on drop with whatever it still
/// has mounted or running; and /dev/fuse open to users meanwhile (its mode put back after).
struct Operator {
    name: String,
    home: PathBuf,
    bin: PathBuf,
    fuse_mode: u32,
    _tmp: tempfile::TempDir,
}

impl Operator {
    fn new() -> Operator {
        let name = format!("ckrl{}", std::process::id());
        let o = Command::new("useradd")
            .args(["--create-home", "--shell", "/bin/sh", &name])
            .output()
            .expect("useradd");
        assert!(o.status.success(), "{}", describe_output("useradd", &o));
        let home = PathBuf::from(format!("/home/{name}"));
        // The binary where the user may run it, whatever the checkout's directories allow.
        let tmp = open_tmp();
        let bin_copy = tmp.path().join("ckptfs");
        fs::copy(bin(), &bin_copy).expect("copy the binary");
        fs::set_permissions(&bin_copy, fs::Permissions::from_mode(0o755)).expect("chmod");
        let fuse_mode = fs::metadata("/dev/fuse")
            .expect("/dev/fuse")
            .permissions()
            .mode();
        fs::set_permissions("/dev/fuse", fs::Permissions::from_mode(0o666)).expect("chmod fuse");
        Operator {
            name,
            home,
            bin: bin_copy,
            fuse_mode,
            _tmp: tmp,
        }
    }

    /// `ckptfs ARGS` as the user, in its home.
    fn run(&self, args: &[&str]) -> Output {
        Command::new(RUNUSER)
            .args(["-u", &self.name, "--"])
            .arg(&self.bin)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &self.home)
            .current_dir(&self.home)
            .output()
            .expect("runuser")
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "{}",
            describe_output(&format!("as {}: ckptfs {}", self.name, args.join(" ")), &o)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn path(&self, rel: &str) -> String {
        self.home.join(rel).to_string_lossy().into_owned()
    }

    /// `cat REL` as the user.
    fn read(&self, rel: &str) -> String {
        let o = self.sh(&format!("cat '{rel}'"));
        assert!(o.status.success(), "{}", describe_output(rel, &o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Runs a shell line as the user.
    fn sh(&self, line: &str) -> Output {
        Command::new(RUNUSER)
            .args(["-u", &self.name, "--", "/bin/sh", "-c", line])
            .current_dir(&self.home)
            .output()
            .expect("runuser")
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        unmount_all_under(&self.home);
        let _ = Command::new("pkill")
            .args(["-KILL", "-u", &self.name])
            .output();
        let _ = Command::new("userdel").args(["-r", &self.name]).output();
        let _ = fs::set_permissions("/dev/fuse", fs::Permissions::from_mode(self.fuse_mode));
    }
}

fn owner(p: &Path) -> u32 {
    std::os::unix::fs::MetadataExt::uid(&fs::symlink_metadata(p).expect("stat"))
}

#[test]
fn an_ordinary_account_keeps_history_and_browses_it_without_root() {
    let u = Operator::new();
    let o = u.sh("mkdir -p room/sub && echo one > room/notes.md && echo x > room/sub/b");
    assert!(o.status.success(), "{}", describe_output("setup", &o));
    let (store, room) = (u.path("store"), u.path("room"));
    u.ok(&["init", &store, "--root", &format!("ws={room}")]);
    let first = u.ok(&["capture", &store, "-q", "-m", "one", "--json"]);
    let first: serde_json::Value = serde_json::from_str(&first).expect("json");
    let first = first["id"].as_str().expect("id").to_string();
    assert!(u.sh("echo two > room/notes.md").status.success());
    u.ok(&["capture", &store, "-q", "-m", "two"]);
    // Everything the store holds is the user's.
    assert_eq!(owner(Path::new(&store)), owner(&u.home));
    let log = u.ok(&["log", &store]);
    assert_eq!(log.lines().count(), 2, "{log}");
    let listed: serde_json::Value =
        serde_json::from_str(&u.ok(&["log", &store, "--json"])).expect("log --json");
    let second = listed[0]["id"].as_str().expect("the newest id").to_string();
    assert_ne!(second, first);
    assert_eq!(u.ok(&["cat", &store, "main:ws/notes.md"]), "two\n");
    assert!(u
        .ok(&["diff", &store, &first, "main"])
        .contains("ws/notes.md"));
    u.ok(&["verify", &store]);
    // History commands: show, find, stats, labels, a fork merged back, forget.
    assert!(u.ok(&["show", &store, &first]).contains(&first[..12]));
    assert!(u.ok(&["find", &store, "notes.md"]).contains("notes.md"));
    u.ok(&["stats", &store]);
    u.ok(&["label", &store, &first, "first"]);
    assert_eq!(u.ok(&["cat", &store, "first:ws/notes.md"]), "one\n");
    u.ok(&["fork", &store, "main", "try"]);
    assert!(u.sh("echo three > room/sub/b").status.success());
    u.ok(&["capture", &store, "-q", "-b", "try", "-m", "on try"]);
    let merged = u.ok(&["merge", &store, "try", "--json"]);
    assert!(merged.contains("\"fast-forward\""), "{merged}");
    assert_eq!(u.ok(&["cat", &store, "main:ws/sub/b"]), "three\n");
    u.ok(&["forget", &store, &second]);
    assert!(!u
        .run(&["cat", &store, &format!("{second}:ws/notes.md")])
        .status
        .success());
    u.ok(&["gc", &store]);
    // Export, import into a second store, restore.
    let archive = u.path("all.ckpt");
    u.ok(&["export", &store, "--all", "--out", &archive]);
    let other = u.path("other");
    u.ok(&["init", &other, "--root", &format!("ws={}", u.path("room2"))]);
    u.ok(&["import", &other, &archive]);
    assert_eq!(u.ok(&["cat", &other, "main:ws/notes.md"]), "two\n");
    let to = u.path("restored");
    u.ok(&["restore", &store, &format!("{first}:ws"), "--to", &to]);
    assert_eq!(fs::read(Path::new(&to).join("notes.md")).unwrap(), b"one\n");
    // A read-only view of a checkpoint and of the whole history, through fusermount3.
    assert!(u.sh("mkdir -p view hist").status.success());
    let view = u.path("view");
    u.ok(&["mount", &store, &first, &view]);
    let _g = MountGuard::new(Path::new(&view));
    // The user's FUSE mount (no allow_other) is the user's alone: read as the user.
    assert_eq!(u.read("view/notes.md"), "one\n");
    assert!(
        fs::read(Path::new(&view).join("notes.md")).is_err(),
        "root read it"
    );
    u.ok(&["umount", &view]);
    assert!(
        !mounted(Path::new(&view)),
        "the user's umount left {view} mounted"
    );
    let hist = u.path("hist");
    u.ok(&["browse", &store, &hist]);
    let _h = MountGuard::new(Path::new(&hist));
    assert_eq!(u.read("hist/branches/main/ws/notes.md"), "two\n");
    u.ok(&["umount", &hist]);
    assert!(!mounted(Path::new(&hist)));
    // What needs root says so, in one line.
    let o = u.run(&["mount", &store, "--branch", "main"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        describe_output("mount --branch", &o)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("needs root today") && err.trim().lines().count() == 1,
        "{err}"
    );
    // Without /dev/fuse open to users, the view's error names it.
    fs::set_permissions("/dev/fuse", fs::Permissions::from_mode(0o600)).expect("chmod");
    let o = u.run(&["mount", &store, &first, &view]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/dev/fuse"), "{err}");
}
