//! `mount`, `browse`, `umount`, `status`: read-only FUSE views of a store.

use std::path::PathBuf;

use clap::Args;

use ckptfs::daemon::{self, MountState, ServeOptions, StartOptions};
use ckptfs::history::walk::split_spec;
use ckptfs::view::materialize::DEFAULT_FILE_CACHE_BYTES;
use ckptfs::view::{Namespace, ViewOptions, DEFAULT_CACHE_BYTES};
use ckptfs::{Error, Result, Store};

use ckptfs::text::time::local_of_utc;

use super::size_arg;
use super::table::Table;

/// Arguments of `ckptfs mount`.
#[derive(Args, Debug)]
pub struct MountArgs {
    /// The store directory.
    pub store: PathBuf,
    /// CHECKPOINT[:ROOT]: checkpoint id (or unique prefix), label or branch, and the root to
    /// show (needed when the store has several roots). Not with --branch.
    pub checkpoint: Option<String>,
    /// Where to mount. Without it (and without --at) the root is mounted at its recorded
    /// absolute path, created if missing; that hides whatever is there until `umount`.
    pub mountpoint: Option<PathBuf>,
    /// Mount somewhere other than the root's recorded path (same as giving MOUNTPOINT).
    #[arg(long, value_name = "DIR")]
    pub at: Option<PathBuf>,
    /// Stay attached and serve in this process (logs on stderr) instead of daemonizing.
    /// Not with --branch (a workspace is a kernel overlay, with no daemon of its own).
    #[arg(long)]
    pub foreground: bool,
    /// Memory for decoded trees and file chunks (e.g. 128M, 1G; K, M, G, T are powers of
    /// 1024, also written KB/KiB, MB/MiB...). With --branch: of each of the store's two lower
    /// views (the full one, and the bare one for roots without xattrs), which every workspace
    /// of the store shares; it applies when the first one is mounted (another size while they
    /// run is refused).
    #[arg(long, value_name = "BYTES", default_value = "64M", value_parser = size_arg)]
    pub cache_size: u64,
    /// Disk space (in STORE/cache/, unnamed files freed on exit) for whole copies of files of
    /// 1 MiB or more, which the kernel then reads directly (FUSE passthrough); 0 turns it off.
    /// Units as for --cache-size. Not with --branch (a workspace's lower view keeps none).
    #[arg(long, value_name = "BYTES", default_value = "4G", value_parser = size_arg)]
    pub file_cache_size: u64,
    /// Let every local user in. By default the view is private: only root can list or read
    /// it, whatever the captured modes say. With this flag each user reads what the captured
    /// owners and modes allow (the kernel checks them), but what protected the tree from
    /// outside no longer does: a 0644 file of a project in a 0700 home is readable by every
    /// user through a view mounted at /mnt.
    #[arg(long, conflicts_with = "branch")]
    pub allow_other: bool,
    /// Internal: report readiness on stdout (used by the daemonizing parent).
    #[arg(long, hide = true)]
    pub notify_stdout: bool,
    /// Internal (mount.ckptfs): record the mount's source as mount(8) was given it,
    /// STORE#WHAT, so that `mount -a` knows the fstab line is mounted.
    #[arg(long, hide = true, value_name = "STORE#WHAT")]
    pub mount_source: Option<String>,
    /// Mount this branch as a writable workspace instead (every root, at its recorded path).
    #[arg(long, short)]
    pub branch: Option<String>,
    /// With --branch: mount only this root (repeatable).
    #[arg(long = "root", value_name = "NAME", requires = "branch")]
    pub roots: Vec<String>,
    /// With --branch --at: confirm mounting a root away from its recorded path (needs --at).
    #[arg(long, requires = "branch")]
    pub relocate: bool,
    /// With --branch: every checkpoint of this workspace (also `switch --checkpoint-first`)
    /// freezes the processes in this cgroup (a directory under /sys/fs/cgroup, v2 or v1's
    /// freezer) for its second, short pass, so all writers are captured at one instant.
    /// Recorded with the mount and kept across switches. Repeatable.
    #[arg(long = "freeze-cgroup", value_name = "DIR", requires = "branch")]
    pub freeze_cgroups: Vec<PathBuf>,
    /// With --branch: every checkpoint of this workspace (also `switch --checkpoint-first`)
    /// freezes the store's filesystem for its second, short pass, holding every process's
    /// writes, in a cgroup or not (see `checkpoint --freeze-fs`). Recorded with the mount
    /// and kept across switches.
    #[arg(long, requires = "branch")]
    pub freeze_fs: bool,
    /// With --branch: once mounted, wait at most SECONDS (default 5) for the store's lower
    /// view to list every directory of the base (its warm-up, in the background otherwise),
    /// so the first `git status` finds every entry in the kernel's caches instead of asking
    /// the view for each file; about a second per 100k files. 0: return at once.
    #[arg(long, value_name = "SECONDS", requires = "branch", value_parser = warm_wait_arg)]
    pub warm_wait: Option<std::time::Duration>,
    /// With --branch: when the branch's upper layer is still used by an overlay a process
    /// holds after a `switch` or `umount` (a copy of the workspace in another mount
    /// namespace, a shell left in a tree set aside), kill (SIGKILL) those processes and
    /// mount. Without it such a mount is refused, naming them: one upper layer is never
    /// mounted twice (except beside a read-only tree a switch left a shell in, see
    /// docs/workspaces.md).
    #[arg(long, requires = "branch")]
    pub kill: bool,
    /// With --branch: fold the upper layer into the checkpoint (see `checkpoint --no-fold`)
    /// only once it holds more than SIZE (e.g. 2G; default 0: at every checkpoint with
    /// nobody inside). Until then the files the agent writes (transcripts, databases) stay
    /// in it, so writing them again after a checkpoint copies nothing, and the first `git
    /// status` after a checkpoint finds the kernel's caches still warm; they are stored
    /// twice meanwhile (`status` shows how much). Past SIZE, the fold keeps the files
    /// written last (newest first, up to SIZE/2: the hot set) in the fresh upper layer and
    /// folds the rest, so the next turn's appends copy nothing either. Recorded with the
    /// mount and kept across switches.
    #[arg(long, value_name = "SIZE", requires = "branch", value_parser = size_arg)]
    pub fold_budget: Option<u64>,
    /// With --branch: print the mounted workspace as JSON.
    #[arg(long, requires = "branch")]
    pub json: bool,
    /// With --branch: mount even when the runtime fingerprint recorded by the branch's turns
    /// differs from this machine's (see `ckptfs fingerprint`); the change is audited.
    #[arg(long, requires = "branch")]
    pub accept_runtime_change: bool,
}

/// Arguments of `ckptfs browse`.
#[derive(Args, Debug)]
pub struct BrowseArgs {
    /// The store directory.
    pub store: PathBuf,
    /// Where to mount (an existing directory outside the store, or under STORE/run/).
    pub mountpoint: PathBuf,
    /// Stay attached and serve in this process (logs on stderr) instead of daemonizing.
    #[arg(long)]
    pub foreground: bool,
    /// Memory for decoded trees and file chunks (e.g. 128M, 1G; K, M, G, T are powers of
    /// 1024, also written KB/KiB, MB/MiB...).
    #[arg(long, value_name = "BYTES", default_value = "64M", value_parser = size_arg)]
    pub cache_size: u64,
    /// Disk space (in STORE/cache/, unnamed files freed on exit) for whole copies of files of
    /// 1 MiB or more, which the kernel then reads directly (FUSE passthrough); 0 turns it off.
    /// Units as for --cache-size.
    #[arg(long, value_name = "BYTES", default_value = "4G", value_parser = size_arg)]
    pub file_cache_size: u64,
    /// Let every local user in. By default the view is private: only root can list or read
    /// it, whatever the captured modes say. With this flag each user reads what the captured
    /// owners and modes allow (the kernel checks them), but what protected the tree from
    /// outside no longer does: a 0644 file of a project in a 0700 home is readable by every
    /// user through a view mounted at /mnt.
    #[arg(long)]
    pub allow_other: bool,
    /// Internal: report readiness on stdout (used by the daemonizing parent).
    #[arg(long, hide = true)]
    pub notify_stdout: bool,
    /// Internal (mount.ckptfs): record the mount's source as mount(8) was given it,
    /// STORE#WHAT, so that `mount -a` knows the fstab line is mounted.
    #[arg(long, hide = true, value_name = "STORE#WHAT")]
    pub mount_source: Option<String>,
}

/// Arguments of `ckptfs umount`.
#[derive(Args, Debug)]
pub struct UmountArgs {
    /// A mountpoint of `ckptfs mount` or `ckptfs browse`.
    pub mountpoint: PathBuf,
    /// For a workspace: kill (SIGKILL) the processes that would keep a writable view of the
    /// branch after the umount (a file open for writing in it; a copy of the workspace in
    /// another mount namespace, such as `unshare -Urm` makes) instead of refusing, naming
    /// them. A shell merely inside is not killed: the tree it is in turns read-only.
    #[arg(long)]
    pub kill: bool,
}

// Arguments of `ckptfs status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The store directory, or a workspace mountpoint.
    #[arg(value_name = "STORE|MOUNTPOINT")]
    pub place: PathBuf,
    /// Print machine-readable JSON instead of text. Each workspace row has a `changes` array:
    /// `{"path", "change" (added|modified|removed|renamed|type|mode|mtime|xattr|links),
    /// "size", "size_before", "from" (renames), "nlink", "nlink_before" (links)}`.
    #[arg(long)]
    pub json: bool,
    /// Print only the changed paths of each workspace, as `git status --short` does: `M
    /// ROOT/PATH` modified (or its mode, owner, mtime or xattrs), `A` added, `D` removed, `T`
    /// type changed, `R OLD -> NEW` renamed; a `## BRANCH` line before each workspace's list
    /// when there are several.
    #[arg(long, short, conflicts_with = "json")]
    pub short: bool,
}

fn print_ready(s: &MountState) {
    let what = match (&s.checkpoint, &s.root) {
        (Some(id), Some(root)) => format!("checkpoint {}:{root}", id.short()),
        _ => "browse view".into(),
    };
    println!(
        "mounted {what} at {} (pid {})",
        s.mountpoint.display(),
        s.pid
    );
}

/// Serves the view here (`foreground`) or starts its daemon with the same `opts`.
fn run(
    store: Store,
    ns: Namespace,
    mountpoint: PathBuf,
    foreground: bool,
    opts: ServeOptions,
) -> Result<i32> {
    if let Some(src) = &opts.source {
        daemon::check_mount_source(&store, src)?;
    }
    if foreground {
        let mp = daemon::check_mountpoint(&store, &mountpoint)?;
        daemon::serve(store, ns, &mp, &opts)?;
        return Ok(0);
    }
    let (cache, file_cache) = (opts.view.cache_bytes, opts.view.file_cache_bytes);
    let opts = StartOptions {
        cache_bytes: (cache != DEFAULT_CACHE_BYTES).then_some(cache),
        file_cache_bytes: (file_cache != DEFAULT_FILE_CACHE_BYTES).then_some(file_cache),
        allow_other: opts.allow_other,
        source: opts.source,
        ..StartOptions::default()
    };
    let state = daemon::start(&store, &ns, &mountpoint, &opts)?;
    print_ready(&state);
    Ok(0)
}

/// `ckptfs mount`.
pub fn mount(a: MountArgs) -> Result<i32> {
    // A view is the account's own FUSE mount, where its shell sees it: never in the
    // namespace its workspaces are mounted in (docs/rootless.md).
    ckptfs::fs::userns::stay_outside();
    let store = ckptfs::remote::open_store(&a.store)?;
    let Some(spec) = a.checkpoint.as_deref() else {
        return Err(Error::Usage(
            "mount needs CHECKPOINT[:ROOT] (read-only view) or --branch B (workspace)".into(),
        ));
    };
    let (cspec, root) = split_spec(spec);
    let id = store.resolve(cspec)?;
    let record = store.read_checkpoint(&id)?;
    let root = match root.filter(|r| !r.is_empty()) {
        Some(r) => r.to_string(),
        None if record.roots.len() == 1 => record.roots.keys().next().cloned().unwrap_or_default(),
        None => {
            let names: Vec<&str> = record.roots.keys().map(String::as_str).collect();
            return Err(Error::Usage(format!(
                "{}: name a root (CHECKPOINT:ROOT); roots are {}",
                spec,
                names.join(", ")
            )));
        }
    };
    if !record.roots.contains_key(&root) {
        return Err(Error::NotFound(format!(
            "root {root:?} in checkpoint {}",
            id.short()
        )));
    }
    let mountpoint = match (a.mountpoint, a.at) {
        (Some(_), Some(_)) => {
            return Err(Error::Usage(
                "give the mountpoint either as MOUNTPOINT or as --at DIR, not both".into(),
            ))
        }
        (Some(m), None) | (None, Some(m)) => m,
        (None, None) => {
            let path = store.root_config(&root)?.path.clone();
            if !path.exists() {
                std::fs::create_dir_all(&path).map_err(|e| Error::io(&path, e))?;
            }
            path
        }
    };
    let opts = ServeOptions {
        view: ViewOptions {
            cache_bytes: a.cache_size,
            file_cache_bytes: a.file_cache_size,
        },
        allow_other: a.allow_other,
        notify_stdout: a.notify_stdout,
        source: a.mount_source,
    };
    run(
        store,
        Namespace::Checkpoint { id, root },
        mountpoint,
        a.foreground,
        opts,
    )
}

/// `ckptfs browse`.
pub fn browse(a: BrowseArgs) -> Result<i32> {
    ckptfs::fs::userns::stay_outside();
    let store = ckptfs::remote::open_store(&a.store)?;
    let opts = ServeOptions {
        view: ViewOptions {
            cache_bytes: a.cache_size,
            file_cache_bytes: a.file_cache_size,
        },
        allow_other: a.allow_other,
        notify_stdout: a.notify_stdout,
        source: a.mount_source,
    };
    run(store, Namespace::Browse, a.mountpoint, a.foreground, opts)
}

/// `ckptfs umount`.
pub fn umount(a: UmountArgs) -> Result<i32> {
    ckptfs::fs::userns::stay_outside();
    daemon::stop(&a.mountpoint)?;
    println!("unmounted {}", a.mountpoint.display());
    Ok(0)
}

/// Read-only views of `store` for `ckptfs status`: prints them as text unless `json`, and
/// returns them as JSON rows either way.
pub fn status_views(store: &Store, json: bool) -> Result<Vec<serde_json::Value>> {
    let mounts = daemon::list(store)?;
    if !json {
        let mut t = Table::new();
        for m in &mounts {
            t.row(match &m.state {
                Some(s) => {
                    let what = match (&s.checkpoint, &s.root) {
                        (Some(id), Some(root)) => format!("{}:{root}", id.short()),
                        _ => s.kind.clone(),
                    };
                    vec![
                        m.mountpoint.display().to_string(),
                        s.kind.clone(),
                        what,
                        format!("pid {}", s.pid),
                        format!("since {}", local_of_utc(&s.started)),
                    ]
                }
                None => vec![m.mountpoint.display().to_string(), m.source.clone()],
            });
        }
        t.print();
    }
    Ok(mounts
        .iter()
        .map(|m| serde_json::to_value(m).unwrap_or_default())
        .collect())
}

/// `--warm-wait SECONDS`: a non-negative number of seconds, at most an hour.
fn warm_wait_arg(s: &str) -> std::result::Result<std::time::Duration, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=3600.0).contains(&v) => Ok(std::time::Duration::from_secs_f64(v)),
        _ => Err(format!("{s:?} is not a number of seconds from 0 to 3600")),
    }
}
