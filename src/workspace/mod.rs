//! Live workspaces: a branch's roots mounted writable at their recorded absolute paths.
//!
//! Each root is a kernel overlayfs mount: lower = the branch's base checkpoint, read lazily
//! from the store's read-only view (mounted outside the store, at `/run/ckptfs/<id>/lower`);
//! upper = `STORE/upper/<branch>/<root>` (a plain directory, so writes run at native speed and
//! survive any ckptfs process dying). `upper/<branch>/base.json` names the checkpoint the
//! upper applies to. docs/workspaces.md tells the upper layer's whole lifecycle.
//!
//! - Dirty has one definition ([`dirty`]): a checkpoint now would record something other than
//!   directory mtimes. `status`, `branch list`, `switch` and `umount` use it; a checkpoint of
//!   nothing new records nothing unless asked.
//! - `checkpoint` merges the base tree with the upper layer (see `crate::ingest::upper`): cost proportional
//!   to what the upper holds; unchanged files are not re-read (stat cache); untouched lower
//!   subtrees keep their ids. Then, when nobody is inside, the fold ([`fold`]) remounts the
//!   workspace over the new head with an empty upper, so recorded bytes are stored once.
//! - `switch` moves the overlay aside (a shell with its cwd inside does not make it fail),
//!   makes it read-only (that shell's writes fail with EROFS) and mounts the target branch's
//!   overlay at the same path; no file is copied. A workspace with un-checkpointed changes is
//!   refused unless `--checkpoint-first` or `--discard` (which moves the upper aside to
//!   `displaced/`, never deleting it). [`holders`] finds who is still inside a tree.
//! - The tree a switch leaves is parked (`park`): kept mounted read-only, and moved back
//!   with its cached inodes by a switch back that would mount the very same overlays.
//! - On `mount`, an upper whose contents are all in the branch head is dropped and the head
//!   becomes the new base.
//!
//! Parts at the bottom, commands on top. Parts: `state` (the recorded mount state and upper
//! bases), [`overlay`] and [`lower`] (the mounts), `upper` (an upper layer's usage, setting it
//! aside, dropping it once recorded, detaching what was set aside), `plan` (what a mount of a
//! branch mounts), `park`, `warm` (the background walk of a new overlay after a fold),
//! [`freeze`], [`holders`] and [`place`] (what a path names).
//! Commands: `checkpoint` (dirty checks and checkpoints; the upper layer is merged by
//! `crate::ingest::upper`), `fold`, `mount` (mount, umount), `switch` (in named phases) and
//! `branch` (fork, archive, delete). The other commands use `checkpoint`'s dirty check (and
//! `switch --checkpoint-first` its checkpoint), and no other command; no file imports one
//! that imports it back. A checkpoint records and nothing more: the fold is its one next
//! step (called once, by the CLI or the runner), and reaches the mounts only through `plan`.

pub mod freeze;
pub mod holders;
pub mod lower;
pub mod overlay;
pub mod place;

mod branch;
mod checkpoint;
mod fold;
mod hot;
mod mount;
mod park;
pub mod pending;
mod plan;
mod state;
mod switch;
mod upper;
mod warm;

pub use branch::{
    delete_branch, fork, fork_numbered, release_head, roll_back_fork, set_archived, MAX_FORK_COUNT,
};
pub(crate) use checkpoint::unused_snapshots;
pub use checkpoint::{
    checkpoint, dirty, dirty_and_merge, first_change, is_dirty, live_tree, merge_status,
    CheckpointOptions, CheckpointReport, DirtyReport, Held, Hold, LiveTree, SpecialFile,
};
pub use fold::{fold, not_folded, roll_back_fold, waiting, FoldReport};
pub use mount::{
    agent_cgroup, ensure_mounted, mount, reap_detached, umount, umount_killing, wait_warm,
};
pub use park::{evict_all as evict_parked, is_parked, parked, ParkRecord, Parked, MAX_PARKED};
pub use plan::MountOptions;
pub use state::{
    find_by_path, is_live, is_mounted, state, states, MountedRoot, UpperBase, WorkspaceState,
};
pub use switch::{
    left_behind, roll_back_switch, switch, switch_killing, DirtyPolicy, LeftBehind, SwitchPhase,
    SwitchReport,
};
pub use upper::{remove_folded, upper_totals, upper_usage};
pub use warm::run as run_warm;
