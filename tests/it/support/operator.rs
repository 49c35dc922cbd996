//! An ordinary account made for a test (`Operator`): a real user with a home, a subordinate
//! id range and a delegated cgroup, running ckptfs (a copy of the binary it may execute) through
//! `runuser`; removed on drop with everything it still runs, its namespaces and their mounts
//! included. Used by the rootless tests of both test binaries.

use crate::support::*;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// util-linux's runuser (root runs a command as another user, no password, no PAM prompt).
const RUNUSER: &str = "/usr/sbin/runuser";

/// A user account made for one test (home included), removed on drop with whatever it still
/// has mounted or running; and /dev/fuse open to users meanwhile (its mode put back after).
pub struct Operator {
    pub name: String,
    pub uid: u32,
    pub home: PathBuf,
    pub bin: PathBuf,
    fuse_mode: u32,
    /// A cgroup v2 directory delegated to the user (owned by it, as systemd's `Delegate=yes`
    /// leaves one), which `run_delegated` starts commands in.
    pub cgroup: PathBuf,
    /// The first id of its subordinate range and the range's length.
    pub subids: (u64, u64),
    _tmp: tempfile::TempDir,
}

/// The first line of `file` (`/etc/subuid`, `/etc/subgid`) for `name`: start and count.
pub fn subordinate(file: &str, name: &str) -> Option<(u64, u64)> {
    fs::read_to_string(file).ok()?.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() == 3 && f[0] == name).then(|| Some((f[1].parse().ok()?, f[2].parse().ok()?)))?
    })
}

/// Where the cgroup v2 hierarchy is mounted.
fn cgroup2_root() -> PathBuf {
    let mounts = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    mounts
        .lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            (post.split(' ').next() == Some("cgroup2"))
                .then(|| pre.split(' ').nth(4).map(PathBuf::from))?
        })
        .expect("a cgroup v2 hierarchy")
}

impl Operator {
    pub fn new() -> Operator {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("ckrl{}x{n}", std::process::id());
        let o = Command::new("useradd")
            .args(["--create-home", "--shell", "/bin/sh", &name])
            .output()
            .expect("useradd");
        assert!(o.status.success(), "{}", describe_output("useradd", &o));
        let home = PathBuf::from(format!("/home/{name}"));
        let uid = std::os::unix::fs::MetadataExt::uid(&fs::metadata(&home).expect("home"));
        // Debian's useradd gives a range (login.defs SUB_UID_*); make sure of it.
        if subordinate("/etc/subuid", &name).is_none()
            || subordinate("/etc/subgid", &name).is_none()
        {
            let start = 300_000 + u64::from((std::process::id() * 8 + n) % 4000) * 65_536;
            let range = format!("{start}-{}", start + 65_535);
            let o = Command::new("usermod")
                .args(["--add-subuids", &range, "--add-subgids", &range, &name])
                .output()
                .expect("usermod");
            assert!(o.status.success(), "{}", describe_output("usermod", &o));
        }
        let subids = subordinate("/etc/subuid", &name).expect("a subordinate range");
        let cgroup = cgroup2_root().join(&name);
        fs::create_dir_all(&cgroup).expect("cgroup");
        let o = Command::new("chown")
            .args(["-R", &name])
            .arg(&cgroup)
            .output()
            .expect("chown");
        assert!(
            o.status.success(),
            "{}",
            describe_output("chown cgroup", &o)
        );
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
            uid,
            home,
            bin: bin_copy,
            fuse_mode,
            cgroup,
            subids,
            _tmp: tmp,
        }
    }

    /// `ckptfs ARGS` as the user, in its home.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args, false)
    }

    /// `ckptfs ARGS` as the user, started in its delegated cgroup.
    pub fn run_delegated(&self, args: &[&str]) -> Output {
        self.command(args, true)
    }

    /// `ckptfs ARGS` as the user, with `env` added (a Garage's AWS environment).
    pub fn run_env(&self, args: &[&str], env: &[(&'static str, String)]) -> Output {
        self.spawn(args, false, env)
    }

    fn command(&self, args: &[&str], delegated: bool) -> Output {
        self.spawn(args, delegated, &[])
    }

    fn spawn(&self, args: &[&str], delegated: bool, env: &[(&'static str, String)]) -> Output {
        self.as_user(&self.bin, delegated)
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .output()
            .expect("runuser")
    }

    /// `program` as the user (through runuser), in its home, with a clean environment (PATH,
    /// HOME); with `delegated`, started in its delegated cgroup. Add its arguments.
    pub fn as_user(&self, program: impl AsRef<std::ffi::OsStr>, delegated: bool) -> Command {
        let mut c = if delegated {
            let mut c = Command::new("/bin/sh");
            c.arg("-c")
                .arg("echo $$ > \"$0\"/cgroup.procs && exec \"$@\"")
                .arg(&self.cgroup)
                .arg(RUNUSER);
            c
        } else {
            Command::new(RUNUSER)
        };
        c.args(["-u", &self.name, "--"])
            .arg(program)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &self.home)
            .current_dir(&self.home);
        c
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run_delegated(args);
        assert!(
            o.status.success(),
            "{}",
            describe_output(&format!("as {}: ckptfs {}", self.name, args.join(" ")), &o)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    pub fn path(&self, rel: &str) -> String {
        self.home.join(rel).to_string_lossy().into_owned()
    }

    /// `cat REL` as the user.
    pub fn read(&self, rel: &str) -> String {
        let o = self.sh(&format!("cat '{rel}'"));
        assert!(o.status.success(), "{}", describe_output(rel, &o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Runs a shell line as the user.
    pub fn sh(&self, line: &str) -> Output {
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
        // Its processes (the namespace holder and the daemons in it among them, and whatever
        // ran as its subordinate ids, which pkill -u does not match): the namespaces and the
        // mounts in them end with them.
        let _ = Command::new("pkill")
            .args(["-KILL", "-u", &self.name])
            .output();
        let (start, count) = self.subids;
        for p in holder_pids(self.uid)
            .into_iter()
            .chain(pids_in_range(start, count))
        {
            let _ = Command::new("kill")
                .args(["-KILL", &p.to_string()])
                .output();
        }
        for _ in 0..50 {
            if fs::remove_dir(self.cgroup.join("ckptfs")).is_ok()
                || !self.cgroup.join("ckptfs").exists()
            {
                break;
            }
            for d in fs::read_dir(self.cgroup.join("ckptfs"))
                .into_iter()
                .flatten()
                .flatten()
            {
                let _ = fs::remove_dir(d.path());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        for _ in 0..50 {
            if fs::remove_dir(&self.cgroup).is_ok() || !self.cgroup.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = fs::remove_dir_all(format!("/tmp/ckptfs-{}", self.uid));
        let _ = Command::new("userdel").args(["-r", &self.name]).output();
        let _ = fs::set_permissions("/dev/fuse", fs::Permissions::from_mode(self.fuse_mode));
    }
}

/// The pids of processes whose real uid is in `start..start + count`.
pub fn pids_in_range(start: u64, count: u64) -> Vec<u32> {
    procs()
        .filter(|(_, uid, _)| (start..start + count).contains(&u64::from(*uid)))
        .map(|(p, _, _)| p)
        .collect()
}

/// The pids of `uid`'s namespace holders (`ckptfs internal-holder`).
pub fn holder_pids(uid: u32) -> Vec<u32> {
    procs()
        .filter(|(_, u, cmd)| *u == uid && cmd.split('\0').nth(1) == Some("internal-holder"))
        .map(|(p, _, _)| p)
        .collect()
}

/// Every process: pid, owner, command line (NUL-separated).
fn procs() -> impl Iterator<Item = (u32, u32, String)> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let uid = std::os::unix::fs::MetadataExt::uid(&e.metadata().ok()?);
            let cmd = fs::read(e.path().join("cmdline")).ok()?;
            Some((pid, uid, String::from_utf8_lossy(&cmd).into_owned()))
        })
}

pub fn owner(p: &Path) -> u32 {
    std::os::unix::fs::MetadataExt::uid(&fs::symlink_metadata(p).expect("stat"))
}
