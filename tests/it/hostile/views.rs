//! Views against other local users ("views are private unless --allow-other"):
//! real mounts read as root and as `nobody` (uid/gid 65534, through `setpriv`).
//!
//! - a checkpoint view and the browse view refuse every other user, even for what root has
//!   just read (cached entries and pages are not a way in);
//! - `--allow-other` lets them read what the captured modes allow, and no more;
//! - a workspace, whose lower layer is the store's private browse view, serves its agent
//!   through the overlay (read, write, create, mmap, exec) while that agent is refused on
//!   the store's lower view itself (`/run/ckptfs/<id>/lower`).

use std::fs;
use std::path::{Path, PathBuf};

use crate::support::*;
use sha2::Digest;

/// A store with one root `work` at `<tmp>/room`, captured on `main`:
/// `pub/open.txt` 0644 and `pub/secret.txt` 0600 in a 0755 `pub/`, all root's. Every mount
/// under the temp dir is unmounted on drop, even after a failed assert.
struct Fixture {
    tmp: tempfile::TempDir,
    store: PathBuf,
    room: PathBuf,
}

impl Fixture {
    fn new(populate: impl FnOnce(&Path)) -> Fixture {
        // Reachable by nobody, so what refuses it is the mount, not the temp dir.
        let tmp = open_tmp();
        let store = tmp.path().join("store");
        let room = tmp.path().join("room");
        write(&room.join("pub/open.txt"), b"open to all\n");
        write(&room.join("pub/secret.txt"), b"owner only\n");
        chmod(&room, 0o755);
        chmod(&room.join("pub"), 0o755);
        chmod(&room.join("pub/open.txt"), 0o644);
        chmod(&room.join("pub/secret.txt"), 0o600);
        populate(&room);
        ok(["init", s(&store), "--root", &format!("work={}", s(&room))]);
        ok(["capture", s(&store), "-m", "initial"]);
        Fixture { tmp, store, room }
    }

    fn dir(&self, name: &str) -> PathBuf {
        let d = self.tmp.path().join(name);
        fs::create_dir_all(&d).expect("mkdir");
        chmod(&d, 0o755);
        d
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Workspaces first (their umount also releases the lower view), deepest first; each
        // by `ckptfs umount`, then lazily.
        let mut points = mounts_under(self.tmp.path());
        points.sort_by_key(|p| p.starts_with(store_mounts_dir(&self.store)));
        for m in points {
            drop(MountGuard::new(&m));
        }
    }
}

#[test]
fn a_private_view_refuses_other_users_even_what_root_has_read() {
    let f = Fixture::new(|_| {});
    let mp = f.dir("mnt");
    ok(["mount", s(&f.store), "main", s(&mp)]);
    let opts = mount_options(&mp).expect("mounted");
    assert!(!opts.contains("allow_other"), "{opts}");
    // Root reads it, which also fills the kernel's dentry, attribute and page caches.
    assert_eq!(
        fs::read_to_string(mp.join("pub/open.txt")).unwrap(),
        "open to all\n"
    );
    assert_eq!(
        fs::read_to_string(mp.join("pub/secret.txt")).unwrap(),
        "owner only\n"
    );
    let m = s(&mp);
    nobody_denied(&format!("ls {m}"));
    nobody_denied(&format!("ls {m}/pub"));
    nobody_denied(&format!("stat {m}/pub/open.txt"));
    nobody_denied(&format!("cat {m}/pub/open.txt"));
    nobody_denied(&format!("cat {m}/pub/secret.txt"));
}

#[test]
fn allow_other_lets_users_read_what_the_captured_modes_allow() {
    let f = Fixture::new(|_| {});
    let mp = f.dir("mnt");
    ok(["mount", s(&f.store), "main", s(&mp), "--allow-other"]);
    let opts = mount_options(&mp).expect("mounted");
    assert!(opts.contains("allow_other"), "{opts}");
    let m = s(&mp);
    assert!(nobody_ok(&format!("ls {m}/pub")).contains("secret.txt"));
    assert_eq!(nobody_ok(&format!("cat {m}/pub/open.txt")), "open to all\n");
    nobody_denied(&format!("cat {m}/pub/secret.txt"));
    // Root still reads everything.
    assert_eq!(
        fs::read_to_string(mp.join("pub/secret.txt")).unwrap(),
        "owner only\n"
    );
}

#[test]
fn browse_is_private_unless_allow_other() {
    let f = Fixture::new(|_| {});
    let mp = f.dir("history");
    ok(["browse", s(&f.store), s(&mp)]);
    let open = format!("{}/branches/main/work/pub/open.txt", s(&mp));
    assert_eq!(fs::read_to_string(&open).unwrap(), "open to all\n");
    nobody_denied(&format!("ls {}", s(&mp)));
    nobody_denied(&format!("ls {}/checkpoints", s(&mp)));
    nobody_denied(&format!("cat {open}"));
    ok(["umount", s(&mp)]);
    assert!(mount_options(&mp).is_none());

    ok(["browse", s(&f.store), s(&mp), "--allow-other"]);
    assert!(nobody_ok(&format!("ls {}", s(&mp))).contains("checkpoints"));
    assert_eq!(nobody_ok(&format!("cat {open}")), "open to all\n");
    nobody_denied(&format!("cat {}/branches/main/work/pub/secret.txt", s(&mp)));
}

#[test]
fn a_workspace_over_the_private_lower_view_serves_its_agent() {
    let f = Fixture::new(|room| {
        write(&room.join("src/notes.txt"), b"agent notes\n");
        write(&room.join("src/mine.txt"), b"agent private\n");
        // Large enough for many READs, read by nobody first (capture reads the room, not
        // the view, so the view's page cache is cold).
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        write(&room.join("src/big.bin"), &big);
        write(&room.join("run.sh"), b"#!/bin/sh\necho ran from lower\n");
        write(&room.join("src/replaced.txt"), b"from the checkpoint\n");
        chmod(&room.join("run.sh"), 0o755);
        chmod(&room.join("src/mine.txt"), 0o600);
        // The agent owns its room; root's 0600 file in it stays root's.
        chown_tree(room, NOBODY);
        std::os::unix::fs::lchown(room.join("pub/secret.txt"), Some(0), Some(0)).unwrap();
    });
    ok(["mount", s(&f.store), "--branch", "main"]);
    let lower = lower_view(&f.store);
    let opts = mount_options(&lower).expect("lower view mounted");
    assert!(!opts.contains("allow_other"), "{opts}");
    // Let nobody reach the lower view's mountpoint (root's 0700 directories, which the next
    // workspace mount makes 0700 again), so what refuses it below is the view itself.
    chmod(Path::new("/run/ckptfs"), 0o711);
    chmod(&store_mounts_dir(&f.store), 0o711);

    let r = s(&f.room);
    // Read and mmap of a lower file nobody has opened yet (so READs reach the lower view).
    let sums = nobody_ok(&format!(
        "/usr/bin/python3 -c \"import hashlib, mmap; f = open('{r}/src/big.bin', 'rb'); \
         m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ); \
         print(hashlib.sha256(m[:]).hexdigest(), hashlib.sha256(f.read()).hexdigest())\""
    ));
    let want = format!(
        "{:x}",
        sha2::Sha256::digest(fs::read(f.room.join("src/big.bin")).unwrap())
    );
    assert_eq!(sums.trim(), format!("{want} {want}"), "mmap, then read");
    assert_eq!(
        nobody_ok(&format!("cat {r}/src/notes.txt")),
        "agent notes\n"
    );
    assert_eq!(
        nobody_ok(&format!("cat {r}/src/mine.txt")),
        "agent private\n"
    );
    assert_eq!(nobody_ok(&format!("{r}/run.sh")), "ran from lower\n");
    assert_eq!(nobody_ok(&format!("cat {r}/pub/open.txt")), "open to all\n");
    nobody_denied(&format!("cat {r}/pub/secret.txt"));
    // Writes: append (copy-up), create, rename, delete, and a rename over a file of the lower
    // layer (what editors and git's lock files do: it failed with ESTALE while fuser's uid
    // filter refused the requests the kernel makes for the overlay).
    nobody_ok(&format!(
        "set -e; cd {r}; echo more >> src/notes.txt; echo fresh > src/new.txt; \
         mkdir out; mv src/new.txt out/; rm src/mine.txt; \
         echo by the agent > src/replaced.tmp; mv src/replaced.tmp src/replaced.txt"
    ));
    assert_eq!(
        nobody_ok(&format!("cat {r}/src/replaced.txt")),
        "by the agent\n"
    );
    assert_eq!(
        nobody_ok(&format!("cat {r}/src/notes.txt {r}/out/new.txt")),
        "agent notes\nmore\nfresh\n"
    );
    // Straight at the lower view, the same user gets nothing.
    let v = ok_json(["checkpoint", r, "-m", "by the agent"]);
    let id = v["id"].as_str().expect("id");
    let l = s(&lower);
    nobody_denied(&format!("ls {l}"));
    nobody_denied(&format!("ls {l}/checkpoints/{id}/work"));
    nobody_denied(&format!("cat {l}/checkpoints/{id}/work/src/notes.txt"));
    nobody_denied(&format!("cat {l}/checkpoints/{id}/work/pub/open.txt"));
    // What the agent wrote is in its checkpoint.
    assert_eq!(
        ok(["cat", s(&f.store), &format!("{id}:work/out/new.txt")]),
        "fresh\n"
    );
    ok(["umount", r]);
}
