//! The read-only view tests' fixture: `sample_tree` captured into a store as checkpoint
//! `first`, and mounts of it behind `MountGuard`s.

use std::fs;
use std::path::PathBuf;

use super::cli::{ok, s};
use super::mount::{mounted, MountGuard};
use super::tree::sample_tree;

/// A temp dir with a source tree `src/`, a store `store/` whose root `work` is recorded at
/// `room/` (which does not exist), and one checkpoint captured from `src/` (label `first`).
pub struct ViewFixture {
    pub dir: tempfile::TempDir,
    pub src: PathBuf,
    pub store: PathBuf,
    pub room: PathBuf,
}

impl ViewFixture {
    pub fn new() -> ViewFixture {
        let dir = tempfile::Builder::new()
            .prefix("ckptfs-view-")
            .tempdir()
            .unwrap();
        let src = dir.path().join("src");
        let store = dir.path().join("store");
        let room = dir.path().join("room");
        sample_tree(&src);
        ok([
            "init",
            s(&store),
            "--root",
            &format!("work={}", room.display()),
        ]);
        let f = ViewFixture {
            dir,
            src,
            store,
            room,
        };
        f.capture(Some("first"));
        f
    }

    pub fn store_str(&self) -> &str {
        s(&self.store)
    }

    /// Captures `src/` (as root `work`), with a label if given.
    pub fn capture(&self, label: Option<&str>) {
        let from = format!("work={}", self.src.display());
        let mut args = vec!["capture", self.store_str(), "--from", &from, "--json"];
        if let Some(l) = label {
            args.extend(["-l", l]);
        }
        ok(&args);
    }

    /// A fresh empty directory under the fixture.
    pub fn dir(&self, name: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        fs::create_dir_all(&p).unwrap();
        p
    }

    /// Mounts `first:work` at a new directory `name`; returns the guard.
    pub fn mount(&self, name: &str) -> MountGuard {
        let mp = self.dir(name);
        let g = MountGuard::new(&mp);
        ok(["mount", self.store_str(), "first:work", "--at", s(&mp)]);
        assert!(mounted(&mp));
        g
    }
}
