//! The helpers every integration test shares: each test file says `mod support;` and
//! `use support::*;`. One definition of each thing, by area:
//!
//! - `cli`: the binary under test (`bin`, `cmd`, `run`, `ok`, `ok_json`, `fails`, `cat`), with a
//!   time bound for hostile input (`run_bounded`, `ok_bounded`, `refused`), its output
//!   (`stdout`, `stderr`, `describe`, `assert_error_output`, `assert_clean_failure`), `s` for
//!   paths, and `sh`.
//! - `tree`: building trees (`write`, `chmod`, `chown_tree`, `mkfifo`, `set_mtime`,
//!   `random_bytes`, `small_tree`, `make_room`, `sample_tree`, `copy_dir`) and comparing them
//!   (`assert_trees_equal` over every byte and attribute, `snapshot`, `contents` for bytes
//!   alone, `inodes`).
//! - `store`: temp stores (`Env`, `tempdir` on tmpfs), queries by store path (`init`,
//!   `capture`, `head`, `log_ids`, `show`, `tree_of`, `checkpoints`, `record`),
//!   `recover_and_verify`, `store_at_times` (records at chosen times), and raw writes into a
//!   store for corruption tests.
//! - `mount`: mountinfo (`mounts`, `mount_source`, `mount_options`, `mounted`, `mounts_under`),
//!   `MountGuard`, `unmount_all_under`, `mount_image` (loop devices), `wait_for` and
//!   `eventually`.
//! - `fault`: `CKPTFS_FAULT` injection (`io_steps`, `run_fault`, `spread`, `par_for`).
//! - `workspace`: `Workspace` (a mounted branch, unmounted on drop, optionally on its own
//!   filesystem image, or with the room `nobody`'s: `for_nobody`), `KillOnDrop`, `holder`,
//!   `REWRITER` and its checks.
//! - `view`: `ViewFixture`, the read-only view tests' captured sample tree.
//! - `garage`: real Garage S3 nodes on loopback (`Garage::start`, `Garage::cluster(3)`, `kill`,
//!   `restart`, the AWS environment for a client: `env`, `apply_env`), and raw S3 requests
//!   behind ckptfs's back (`s3_put`, `s3_get`, `s3_list`, `s3_delete`).
//! - `conv`: the binary run in a given directory with given environment (`run_in`, `ok_in`)
//!   and column checks for tables (`column_starts`), for the CLI convention tests.
//! - `runner`: `ckptfs turn` in a `Workspace` (`turn`, `turn_json`, `turns_can_run`), the
//!   audit log, `log --turns`, `record_of`, and `CgroupKiller` for what a killed runner left.
//! - `git`: real git in a test's tree (`git`, `git_with`: fixed identity, no gc).
//! - `pty`: `on_terminal`, the binary under a pseudo-terminal (`script`).
//! - `life`: where a store keeps its mounts (`store_mounts_dir`, `lower_view`, `detached_dir`).
//! - `park`: parked overlays (`parked_dir`, `parked_at`, `park_record`, `park_records`) and
//!   `mount_id`, which tells the very same mount from a fresh one.
//! - `remote`: ckptfs against a Garage (`rok`, `rok_json`, `rrun` with its AWS environment,
//!   `key_file`, `reach`, `add_remote`, `clone_remote`).
//! - `remote_gc`: what a remote holds (`remote_bytes`, `remote_keys`) and
//!   `on_terminal_remote` (a pseudo-terminal with a Garage's environment).
//! - `hostile`: other users (`NOBODY`, `as_nobody`, `nobody_ok`, `nobody_denied`, `Attacker`,
//!   `open_tmp`) and crafted input (`one_file_tree`, `archive_of`).
//!
//! Each test binary compiles this module on its own and uses a part of it, hence the
//! `dead_code` allowance.
#![allow(dead_code)]

pub mod agent;
pub mod cli;
pub mod conv;
pub mod fault;
pub mod garage;
pub mod git;
pub mod hostile;
pub mod life;
pub mod mount;
pub mod operator;
pub mod park;
pub mod pty;
pub mod remote;
pub mod remote_gc;
pub mod runner;
pub mod schema;
pub mod store;
pub mod tree;
pub mod view;
pub mod workspace;

// Re-exported for `use support::*`; a test that needs nothing of a module would otherwise warn.
#[allow(unused_imports)]
pub use {
    cli::*, conv::*, fault::*, garage::*, git::*, hostile::*, life::*, mount::*, park::*, pty::*,
    remote::*, remote_gc::*, runner::*, schema::*, store::*, tree::*, view::*, workspace::*,
};
