//! Where everything lives in a store directory and under `/run/ckptfs/<id>/`: the one path
//! authority (the tree is drawn in `store/mod.rs`).

use std::fs;
use std::path::{Path, PathBuf};

use crate::id::ObjectId;

use super::{Store, CONFIG_FILE};

impl Store {
    pub fn config_path(&self) -> PathBuf {
        self.root.join(CONFIG_FILE)
    }
    pub fn objects_dir(&self) -> PathBuf {
        self.root.join("objects")
    }
    /// Path of an object: raw, or with the `.zst` suffix when compressed.
    pub fn object_path(&self, id: &ObjectId, compressed: bool) -> PathBuf {
        let hex = id.to_hex();
        let name = if compressed {
            format!("{}.zst", &hex[2..])
        } else {
            hex[2..].to_string()
        };
        self.objects_dir().join(&hex[..2]).join(name)
    }
    pub fn checkpoints_dir(&self) -> PathBuf {
        self.root.join("checkpoints")
    }
    pub fn checkpoint_path(&self, id: &ObjectId) -> PathBuf {
        self.checkpoints_dir().join(id.to_hex())
    }
    pub fn branches_dir(&self) -> PathBuf {
        self.root.join("refs").join("branches")
    }
    pub fn branch_path(&self, name: &str) -> PathBuf {
        self.branches_dir().join(format!("{name}.json"))
    }
    pub fn labels_dir(&self) -> PathBuf {
        self.root.join("refs").join("labels")
    }
    pub fn label_path(&self, name: &str) -> PathBuf {
        self.labels_dir().join(name)
    }
    /// `refs/forgotten/`: tombstones of forgotten checkpoints (see `upkeep::forget`).
    pub fn forgotten_dir(&self) -> PathBuf {
        self.root.join("refs").join("forgotten")
    }
    pub fn forgotten_path(&self, id: &ObjectId) -> PathBuf {
        self.forgotten_dir().join(format!("{}.json", id.to_hex()))
    }
    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }
    pub fn run_dir(&self) -> PathBuf {
        self.root.join("run")
    }
    /// `run/namespace.json`: the holder of the user namespace an ordinary account's
    /// workspaces of this store are mounted in (see `fs::userns`).
    pub fn namespace_record_path(&self) -> PathBuf {
        self.run_dir().join("namespace.json")
    }
    /// State and log files of read-only view daemons (`mount`, `browse`).
    pub fn views_dir(&self) -> PathBuf {
        self.run_dir().join("views")
    }
    pub fn view_state_path(&self, pid: u32) -> PathBuf {
        self.views_dir().join(format!("{pid}.json"))
    }
    pub fn view_log_path(&self, pid: u32) -> PathBuf {
        self.views_dir().join(format!("{pid}.log"))
    }
    /// The lower view daemon's record of finished warm-ups (`view::lower::warm`).
    pub fn view_warm_path(&self, pid: u32) -> PathBuf {
        self.views_dir().join(format!("{pid}.warmed"))
    }
    /// `run/warm.lock`: held shared by every overlay warm-up under way, exclusively by
    /// whoever waits for them to end (`workspace::warm`).
    pub fn warm_lock_path(&self) -> PathBuf {
        self.run_dir().join("warm.lock")
    }
    /// `run/warm.stop`: present while a warm-up is asked to stop (`workspace::warm`).
    pub fn warm_stop_path(&self) -> PathBuf {
        self.run_dir().join("warm.stop")
    }
    /// `run/warm.json`: what the last overlay warm-up walked (`workspace::warm`).
    pub fn warm_record_path(&self) -> PathBuf {
        self.run_dir().join("warm.json")
    }
    pub fn running_marker_path(&self) -> PathBuf {
        self.run_dir().join("RUNNING.json")
    }
    /// `upper/B/`: everything of branch B's live workspace.
    pub fn upper_branch_dir(&self, branch: &str) -> PathBuf {
        self.upper_base_dir().join(branch)
    }
    /// `upper/B/.top-ROOT/ROOT/`: the upper layer of one root, what a checkpoint merges with
    /// the base. The overlay's upper directory is `upper/B/.top-ROOT/` (see
    /// [`Store::upper_top_dir`]); `ROOT/` in it is made by overlayfs when the agent first
    /// changes something in the root, so it may be missing (nothing changed). An upper made by
    /// a build before 2026-12 is `upper/B/ROOT/` itself, the overlay's upper directory; it is
    /// used as it is until a fold or a mount takes it away.
    pub fn upper_dir(&self, branch: &str, root: &str) -> PathBuf {
        let legacy = self.upper_branch_dir(branch).join(root);
        if fs::symlink_metadata(&legacy).is_ok() {
            return legacy;
        }
        self.upper_top_dir(branch, root).join(root)
    }
    /// `upper/B/.top-ROOT/`: the overlay's upper directory of one root. The overlay is
    /// mounted over the lower view's checkpoint directory (all its roots) and only its `ROOT`
    /// subdirectory is mounted at the mountpoint, so the workspace root is a directory of the
    /// lower layer, shown with its recorded inode number whatever happens to the upper
    /// (docs/inodes.md).
    pub fn upper_top_dir(&self, branch: &str, root: &str) -> PathBuf {
        self.upper_branch_dir(branch)
            .join(format!("{}{root}", Self::UPPER_TOP_PREFIX))
    }
    /// Whether `upper`, the upper layer of `root` (see [`Store::upper_dir`]), is nested in the
    /// overlay's upper directory, as every upper made since 2026-12 is: the overlay's root is
    /// then the parent of the workspace root, and absolute redirects start with `/ROOT`.
    pub fn upper_is_nested(upper: &Path, root: &str) -> bool {
        upper.parent().and_then(Path::file_name).is_some_and(|n| {
            n.as_encoded_bytes()
                .strip_prefix(Self::UPPER_TOP_PREFIX.as_bytes())
                == Some(root.as_bytes())
        })
    }
    /// The prefix of [`Store::upper_top_dir`]'s name.
    pub const UPPER_TOP_PREFIX: &'static str = ".top-";
    /// `/run/ckptfs/<id>/stage/`: where a workspace's overlay is mounted for the instant it
    /// takes to mount its root subdirectory at the mountpoint.
    pub fn overlay_stage_dir(&self) -> PathBuf {
        self.mounts_dir().join("stage")
    }
    /// `upper/`: one directory per branch with a live workspace.
    pub fn upper_base_dir(&self) -> PathBuf {
        self.root.join("upper")
    }
    /// `upper/B/.work-ROOT/`: overlayfs work dir (same filesystem as the upper, not inside it).
    pub fn overlay_work_dir(&self, branch: &str, root: &str) -> PathBuf {
        self.upper_branch_dir(branch).join(format!(".work-{root}"))
    }
    /// `upper/B/base.json`: the checkpoint the upper layers apply to.
    pub fn upper_base_path(&self, branch: &str) -> PathBuf {
        self.upper_branch_dir(branch).join("base.json")
    }
    /// `run/mounts/B.json`: a mounted workspace.
    pub fn workspace_state_path(&self, branch: &str) -> PathBuf {
        self.workspace_states_dir().join(format!("{branch}.json"))
    }
    /// `/run/ckptfs/<id>/`: where the store's own mounts live (the workspaces' lower view, the
    /// old overlays a switch set aside), outside the store, so that nothing walking the store
    /// (`du`, `find`, `tar`, a backup) enters a mount. `<id>` is the first 16 hex digits of
    /// the SHA-256 of the store's path. `/run` is emptied at boot, as mounts are; nothing
    /// durable is there. See docs/workspaces.md.
    pub fn mounts_dir(&self) -> PathBuf {
        let id = ObjectId::of(self.root.as_os_str().as_encoded_bytes()).to_hex();
        crate::fs::userns::mounts_base().join(&id[..16])
    }
    /// `/run/ckptfs/<id>/detached/`: old workspace overlays moved out of the way by `switch`
    /// and by a fold, detached once nobody uses them.
    pub fn detached_dir(&self) -> PathBuf {
        self.mounts_dir().join("detached")
    }
    /// `/run/ckptfs/<id>/parked/`: the overlays of branches a switch took away, kept mounted
    /// read-only so a switch back moves them back with every inode the kernel cached (see
    /// `workspace::park`). Never reaped as `detached/` is: each is named by a park record.
    pub fn parked_dir(&self) -> PathBuf {
        self.mounts_dir().join("parked")
    }
    /// `/run/ckptfs/<id>/parked/B/ROOT`: where the overlay of `root` of branch `branch` is parked.
    pub fn parked_overlay_path(&self, branch: &str, root: &str) -> PathBuf {
        self.parked_dir().join(branch).join(root)
    }
    /// `run/parked/`: the park records (see [`Store::park_record_path`]).
    pub fn park_records_dir(&self) -> PathBuf {
        self.run_dir().join("parked")
    }
    /// `run/parked/B.json`: branch B's overlays are parked (its base and each root's mount, as
    /// mounted); written durably before the first move, removed after the last.
    pub fn park_record_path(&self, branch: &str) -> PathBuf {
        self.park_records_dir().join(format!("{branch}.json"))
    }
    /// `/run/ckptfs/<id>/lower/`: where the store's read-only view is mounted for overlay
    /// lower layers.
    pub fn lower_view_dir(&self) -> PathBuf {
        self.mounts_dir().join("lower")
    }
    /// `/run/ckptfs/<id>/lower-bare/`: the bare lower view (the same namespace, served only
    /// for checkpoint roots without any xattr, answering GETXATTR with ENOSYS; see
    /// `workspace::lower` and docs/inodes.md).
    pub fn lower_bare_view_dir(&self) -> PathBuf {
        self.mounts_dir().join("lower-bare")
    }
    /// `run/lower/` and `run/detached/` in the store: where builds before `mounts_dir` put
    /// the lower view and the old overlays. Still found (to unmount, reap and diagnose them),
    /// never used for new mounts.
    pub fn legacy_mount_dirs(&self) -> [PathBuf; 2] {
        [
            self.run_dir().join("lower"),
            self.run_dir().join("detached"),
        ]
    }
    /// File name prefix of a branch's snapshot directories: `upper/B/.snapshots-ROOT/`.
    const SNAPSHOT_DIR_PREFIX: &'static str = ".snapshots-";
    /// `run/mounts/`: the state files of mounted workspaces.
    pub fn workspace_states_dir(&self) -> PathBuf {
        self.run_dir().join("mounts")
    }
    /// `run/lower/checkpoints/<id>/ROOT`: root `root` of `checkpoint` as the lower view shows
    /// it, the directory overlayfs stacks a workspace's upper layer on.
    pub fn lower_view_root(&self, checkpoint: &ObjectId, root: &str) -> PathBuf {
        self.lower_view_dir()
            .join("checkpoints")
            .join(checkpoint.to_hex())
            .join(root)
    }
    /// As [`Store::lower_view_root`], in the bare lower view.
    pub fn lower_bare_view_root(&self, checkpoint: &ObjectId, root: &str) -> PathBuf {
        self.lower_bare_view_dir()
            .join("checkpoints")
            .join(checkpoint.to_hex())
            .join(root)
    }
    /// `upper/B/.snapshots-ROOT/`: the reflink snapshots of the upper layer of `root` (beside
    /// it, so on the same filesystem; see `ingest::snapshot`).
    pub fn snapshot_dir(&self, branch: &str, root: &str) -> PathBuf {
        self.upper_branch_dir(branch)
            .join(format!("{}{root}", Self::SNAPSHOT_DIR_PREFIX))
    }
    /// The root whose snapshot directory (see [`Store::snapshot_dir`]) has the file name `name`.
    pub fn snapshot_dir_root(name: &str) -> Option<&str> {
        name.strip_prefix(Self::SNAPSHOT_DIR_PREFIX)
    }
    /// `run/detached/B-ROOT-<ns>`: where `switch` moves the old overlay of `root` of `branch`.
    pub fn detached_overlay_path(&self, branch: &str, root: &str, time_ns: i64) -> PathBuf {
        self.detached_dir()
            .join(format!("{branch}-{root}-{time_ns}"))
    }
    /// `displaced/<UTC time>.<ns>-B`: where the upper layers of `branch` are set aside. The
    /// nanoseconds keep two set-asides within one second apart (the second rename failed
    /// on the first's directory).
    pub fn displaced_upper_path(&self, branch: &str, time_ns: i64) -> PathBuf {
        let stamp = crate::text::time::format_utc(time_ns).replace(':', "");
        let ns = time_ns.rem_euclid(1_000_000_000);
        self.displaced_dir()
            .join(format!("{stamp}.{ns:09}-{branch}"))
    }
    /// `displaced/<UTC time>-<pid>-restore-ROOT[-PATH]` (`/` in PATH as `%`, the name cut to
    /// 255 bytes): where an in-place restore sets aside what was at the place of PATH in ROOT.
    pub fn displaced_restore_path(&self, root: &str, path: &str, time_ns: i64) -> PathBuf {
        let stamp = crate::text::time::format_utc(time_ns).replace(':', "");
        let mut name = format!("{stamp}-{}-restore-{root}", std::process::id());
        if !path.is_empty() {
            name.push('-');
            name.push_str(&path.replace('/', "%"));
        }
        let mut end = name.len().min(255);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
        self.displaced_dir().join(name)
    }
    pub fn displaced_dir(&self) -> PathBuf {
        self.root.join("displaced")
    }
    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("cache")
    }
    /// `cache/stat/`: stat caches named `<checkpoint hex>-<root>`.
    pub fn statcache_dir(&self) -> PathBuf {
        self.cache_dir().join("stat")
    }
    pub fn statcache_path(&self, checkpoint: &ObjectId, root: &str) -> PathBuf {
        self.statcache_dir()
            .join(format!("{}-{root}", checkpoint.to_hex()))
    }
    /// `cache/materialized/`: unnamed (`O_TMPFILE`) copies of big files a view daemon passes
    /// through.
    pub fn materialized_dir(&self) -> PathBuf {
        self.cache_dir().join("materialized")
    }
    pub fn audit_path(&self) -> PathBuf {
        self.root.join("audit.jsonl")
    }
    pub fn lock_path(&self) -> PathBuf {
        self.root.join("lock")
    }
}
