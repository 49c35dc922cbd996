//! Command-line types (clap) and dispatch. Human output by default, `--json` for machines.

mod health;

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod view;
mod workspace;

use ckptfs::capture::{capture, CaptureOptions};
use ckptfs::ops::walk::{locate, walk_tree};
use ckptfs::ops::{diff, recover, restore, verify};
use ckptfs::store::refs::DEFAULT_BRANCH;
use ckptfs::store::tree::EntryKind;
use ckptfs::store::{InitOptions, RootConfig};
use ckptfs::util::{format_utc, human_bytes};
use ckptfs::{Error, Result, Store};

/// ckptfs: checkpoint directory trees that live at fixed absolute paths, browse any old
/// state, and put it back where it was.
///
/// A store is one directory holding content-addressed objects (SHA-256, content-defined
/// chunks, deduplicated across all checkpoints) and the history of one or more named roots
/// (e.g. workspace=/workspace/room, home=/root/.codex). `capture` records every root as one
/// checkpoint; `restore` puts a checkpoint back; `log`, `show`, `ls`, `cat` and `diff` look at
/// history; `verify` re-hashes everything.
///
/// Exit codes: 0 ok, 1 failure, 2 usage error.
#[derive(Parser, Debug)]
#[command(name = "ckptfs", version, propagate_version = true)]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace; RUST_LOG also works).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Whether this process serves a mount (a view daemon): it must outlive a reader that
    /// went away, so SIGPIPE stays ignored there.
    pub fn serves_a_mount(&self) -> bool {
        match &self.command {
            Command::Mount(a) => a.foreground,
            Command::Browse(a) => a.foreground,
            _ => false,
        }
    }
}

/// Parses the command line. Help and version print as usual; a usage error becomes one line
/// on stderr (clap's message without its multi-line usage block) and exit code 2.
pub fn parse() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            eprintln!(
                "ckptfs: usage: {} (see --help)",
                one_line(&e.render().to_string())
            );
            std::process::exit(2);
        }
    }
}

/// Joins clap's message lines before its "Usage:" block into one line.
fn one_line(rendered: &str) -> String {
    rendered
        .lines()
        .take_while(|l| !l.starts_with("Usage:"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| l.strip_prefix("error: ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join(" ")
}

#[derive(Args, Debug)]
pub struct JsonFlag {
    /// Print machine-readable JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a new store for one or more named roots.
    ///
    /// Example: ckptfs init /var/lib/ckpt --root workspace=/workspace/room --root home=/root/.codex
    Init {
        /// Directory of the new store (missing or empty).
        store: PathBuf,
        /// A root to checkpoint, NAME=/ABSOLUTE/PATH (repeatable).
        #[arg(long = "root", value_name = "NAME=/ABS/PATH", required = true)]
        roots: Vec<String>,
        /// Exclude rule for a root, NAME=GLOB (repeatable). A glob without '/' matches a name
        /// at any depth ("*.pem"); with '/' it matches the path from the root ("cache/**").
        #[arg(long = "exclude", value_name = "NAME=GLOB")]
        excludes: Vec<String>,
        /// Object compression: none (default) or zstd (ids stay the hash of the uncompressed
        /// bytes). zstd halves the store growth per agent turn for a little capture time.
        #[arg(long, value_parser = ["none", "zstd"], default_value = "none")]
        compression: String,
        /// Do not add the credential excludes (auth.json, *.pem, .env, *.key, id_rsa*...) that a
        /// root named `home` gets by default (they are written into STORE.json, editable).
        #[arg(long)]
        no_default_excludes: bool,
    },
    /// Record every root as one new checkpoint on a branch.
    ///
    /// Files whose size, mtime, ctime and inode match the previous checkpoint are not read
    /// again; the rest are chunked and hashed on all cores. Sockets, fifos and devices make the
    /// capture fail unless excluded; symlinks are stored, never followed.
    Capture {
        /// The store directory.
        store: PathBuf,
        /// Branch to record on (created if missing).
        #[arg(long, short, default_value = DEFAULT_BRANCH)]
        branch: String,
        /// Immutable label for the new checkpoint.
        #[arg(long, short)]
        label: Option<String>,
        /// Message stored with the checkpoint.
        #[arg(short, long, default_value = "")]
        message: String,
        /// Capture root NAME from DIR instead of its recorded path (repeatable).
        #[arg(long, value_name = "NAME=DIR")]
        from: Vec<String>,
        /// Extra exclude glob for every root (repeatable).
        #[arg(long, value_name = "GLOB")]
        exclude: Vec<String>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Copy a checkpoint's root into a directory (no FUSE needed).
    ///
    /// Every needed object is checked before DIR is touched; the tree is staged beside DIR and
    /// swapped in. An existing non-empty DIR is moved aside to DIR.ckptfs-aside-TIME, never
    /// deleted. An interrupted restore is rolled back by `ckptfs recover`.
    Restore {
        /// The store directory.
        store: PathBuf,
        /// Checkpoint id (or unique prefix), label or branch; optionally :ROOT/PATH.
        checkpoint: String,
        /// Which root to restore (needed when the store has several).
        #[arg(long)]
        root: Option<String>,
        /// Destination directory.
        #[arg(long)]
        to: PathBuf,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Repair after a crash: roll back an interrupted operation, clear its RUNNING marker and
    /// remove half-written temp files; thaw a cgroup that a killed `checkpoint
    /// --freeze-cgroup` left frozen, or the store's filesystem that a killed `checkpoint
    /// --freeze-fs` and its watchdog left frozen. Refuses while the recorded process is alive.
    Recover {
        store: PathBuf,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// List checkpoints, newest first.
    Log {
        store: PathBuf,
        /// Only this branch's history (following parents from its head).
        #[arg(long, short)]
        branch: Option<String>,
        /// Draw checkpoints with their forks, the way `git log --graph` does.
        #[arg(long)]
        graph: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Show one checkpoint's record.
    Show {
        store: PathBuf,
        /// Checkpoint id (or unique prefix), label or branch.
        checkpoint: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// List a directory of a checkpoint: CHECKPOINT[:ROOT/PATH].
    Ls {
        store: PathBuf,
        /// CHECKPOINT[:ROOT[/PATH]]
        spec: String,
        /// List recursively.
        #[arg(short, long)]
        recursive: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Print a file of a checkpoint to stdout: CHECKPOINT:ROOT/PATH.
    Cat {
        store: PathBuf,
        /// CHECKPOINT:ROOT/PATH
        spec: String,
    },
    /// Show what changed between two checkpoints (added, removed, modified, type, mode...).
    Diff {
        store: PathBuf,
        a: String,
        b: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Give a checkpoint an immutable label (an existing label is never moved).
    Label {
        store: PathBuf,
        checkpoint: String,
        name: String,
    },
    /// Branches: list, archive, unarchive, delete. A branch is a movable head checkpoint plus
    /// its workspace layer; it plays the part of a saved agent session (resume = mount it).
    #[command(subcommand)]
    Branch(BranchCommand),
    /// Checkpoint a mounted workspace: record what changed since the last checkpoint as a new
    /// checkpoint on its branch. Cost follows the change, not the tree; the mount stays up and
    /// open files stay valid.
    Checkpoint {
        /// A workspace mountpoint (or a path inside it), or the store directory.
        place: PathBuf,
        /// Which workspace, when PLACE is the store and several are mounted.
        #[arg(long, short)]
        branch: Option<String>,
        /// Immutable label for the new checkpoint.
        #[arg(long, short)]
        label: Option<String>,
        /// Message stored with the checkpoint.
        #[arg(short, long, default_value = "")]
        message: String,
        /// Hold the writes of the processes in this cgroup (a directory under /sys/fs/cgroup:
        /// cgroup v2, or v1's freezer), so every root and every writer, in-place ones
        /// included, is captured at one instant. A first pass reads the changes while they
        /// run; they are frozen (not signalled) only for a second pass that reads what
        /// changed since, a few milliseconds, and thawed before the new objects are synced.
        /// Adds to the cgroups recorded with the mount (`mount --freeze-cgroup`, `exec`).
        /// Repeatable.
        #[arg(long, value_name = "DIR")]
        freeze_cgroup: Vec<PathBuf>,
        /// Hold the writes of every process for the second pass, in a cgroup or not, by
        /// freezing the filesystem the store (and so the upper layers) is on, as
        /// `fsfreeze -f` does. The store must be on a filesystem of its own: the root
        /// filesystem is refused, and anything else on that filesystem waits too. A watchdog
        /// thaws it if the checkpoint dies or holds it over 10 s.
        #[arg(long)]
        freeze_fs: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Run a command (the agent) in a cgroup of the workspace, so checkpoints hold its writes.
    ///
    /// Makes a cgroup for the workspace (once; under the cgroup hierarchy's `ckptfs/`),
    /// records it with the mount as `mount --freeze-cgroup` does, moves this process into it
    /// and executes COMMAND there. The command and everything it starts are then frozen for
    /// the few milliseconds of each checkpoint's second pass, so every checkpoint captures all
    /// of their files at one instant. `umount` removes the cgroup once it is empty.
    /// Example: `ckptfs exec /workspace/room -- python3 agent.py`.
    Exec {
        /// A workspace mountpoint (or a path inside it), or the store directory.
        place: PathBuf,
        /// Which workspace, when PLACE is the store and several are mounted.
        #[arg(long, short)]
        branch: Option<String>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<std::ffi::OsString>,
    },
    /// Show another branch or checkpoint at the same paths (restore), without copying files.
    ///
    /// A checkpoint that is not a branch head starts a new branch (named by --name, or
    /// from-<id>). Un-checkpointed changes are never lost: switch refuses unless
    /// --checkpoint-first or --discard (which sets them aside under STORE/displaced/).
    Switch {
        /// A workspace mountpoint (or a path inside it).
        mountpoint: PathBuf,
        /// Target branch, label or checkpoint id.
        #[arg(long)]
        to: String,
        /// Checkpoint un-checkpointed changes first.
        #[arg(long)]
        checkpoint_first: bool,
        /// Set un-checkpointed changes aside under STORE/displaced/ (never deleted).
        #[arg(long)]
        discard: bool,
        /// Name of the branch created when the target is not a branch head.
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Start a new independent branch at a checkpoint (O(1): nothing is copied).
    Fork {
        store: PathBuf,
        /// Checkpoint id (or unique prefix), label or branch.
        checkpoint: String,
        /// Name of the new branch.
        #[arg(long)]
        name: String,
    },
    /// Re-hash every object reachable from the given checkpoints (or all) and report every
    /// missing or corrupt object with the paths that use it. Exit 1 on any finding.
    Verify {
        store: PathBuf,
        /// Checkpoints to verify (default: all).
        checkpoints: Vec<String>,
        /// Verify every checkpoint (the default when none is given).
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Delete what the retention policy lets go: unlabelled, non-head checkpoints beyond
    /// --keep-* (per branch; default from STORE.json "retention", else keep all), then objects
    /// no kept checkpoint reaches, temp files of dead processes, dead pins, uppers of deleted
    /// branches, reflink snapshots left by a failed checkpoint, and stale caches. Never
    /// touches refs, labels, branch heads or what a live pin (mount, view, capture) reaches.
    /// --dry-run prints the same report without deleting.
    Gc(health::GcArgs),
    /// Export checkpoints or branches (or --all) to one portable file: zstd-compressed tar with
    /// a manifest, records and objects; prints its SHA-256 and writes FILE.sha256.
    Archive(health::ArchiveArgs),
    /// Import an archive into a new or existing store after checking its SHA-256 and every
    /// object; --relocate NAME=/PATH records a root at a new path. Nothing is imported from a
    /// truncated, corrupted or foreign file.
    Unarchive(health::UnarchiveArgs),
    /// Check the store's invariants (refs, objects and sizes, markers, pins, sockets, temp
    /// files, stale mounts, permissions, format) and say how to fix each finding. Exit 1 on an
    /// error or warning; `recover` repairs those marked so.
    Doctor(health::DoctorArgs),

    /// Mount a checkpoint read-only, or (with --branch) a branch as a writable workspace.
    ///
    /// Read-only: one root of a checkpoint through FUSE, lazily: nothing is read until used.
    /// Without MOUNTPOINT or --at, the root appears at its recorded absolute path (created if
    /// missing; existing contents are hidden until `umount`). Runs as a background daemon and
    /// returns once the mount is ready (--foreground stays attached). Writes fail with EROFS;
    /// a corrupt object gives EIO for the file that needs it. Stop it with `ckptfs umount`,
    /// SIGTERM or umount(8); if the daemon is killed, the mount is removed automatically.
    ///
    /// Example: ckptfs mount /var/lib/ckpt before-refactor:workspace --at /mnt/old
    ///
    /// Workspace (--branch B): every root of branch B, writable, at its recorded absolute path
    /// (an overlay: lower = the branch's checkpoint read lazily from the store, upper =
    /// STORE/upper/B/ROOT where writes land at native speed and survive any crash of ckptfs).
    /// `ckptfs checkpoint` records it, `ckptfs switch` changes branch in place, mounting the
    /// branch again resumes it.
    ///
    /// Example: ckptfs mount /var/lib/ckpt --branch main
    Mount(view::MountArgs),
    /// Mount the whole history read-only: checkpoints/<id>/<root>/..., labels/<name>,
    /// branches/<name> and by-time/<YYYY-MM-DDTHH:MM:SS> (symlinks to checkpoints), latest.
    ///
    /// New checkpoints, labels and branch moves appear without remounting. Runs as a daemon
    /// like `mount`.
    ///
    /// Example: ckptfs browse /var/lib/ckpt /mnt/history
    Browse(view::BrowseArgs),
    /// Unmount a `mount` or `browse` view: stops its daemon and waits until the mount is gone.
    Umount(view::UmountArgs),
    /// List live mounts of a store: workspaces (branch, base checkpoint, changes since the last
    /// checkpoint, processes writing into them that checkpoints do not hold) and read-only
    /// views (mountpoint, what they show, daemon pid).
    ///
    /// Example: ckptfs status /var/lib/ckpt --json
    Status(view::StatusArgs),
    /// Internal: detach a moved-aside workspace overlay and remove its directory.
    #[command(hide = true)]
    InternalDetach { target: PathBuf },
}

#[derive(Subcommand, Debug)]
pub enum BranchCommand {
    /// List branches: head, forked-from, state, last activity, mounted, dirty size.
    List {
        store: PathBuf,
        /// Include archived branches.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Hide a branch from `branch list` (nothing is deleted).
    Archive { store: PathBuf, name: String },
    /// Bring an archived branch back.
    Unarchive { store: PathBuf, name: String },
    /// Delete a branch ref. Refuses while mounted, and with un-checkpointed workspace changes
    /// unless --force (they are moved to STORE/displaced/). Checkpoints and objects are only
    /// removed later by `ckptfs gc`.
    Delete {
        store: PathBuf,
        name: String,
        #[arg(long)]
        force: bool,
    },
}

pub(crate) fn split_kv<'a>(flag: &str, s: &'a str) -> Result<(&'a str, &'a str)> {
    s.split_once('=')
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .ok_or_else(|| Error::Usage(format!("{flag} {s:?}: expected NAME=VALUE")))
}

pub(crate) fn print_json(v: &impl serde::Serialize) -> Result<()> {
    let s = serde_json::to_string_pretty(v)
        .map_err(|e| Error::Invalid(format!("encoding JSON: {e}")))?;
    println!("{s}");
    Ok(())
}

/// Runs a parsed command; returns the exit code.
pub fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Init {
            store,
            roots,
            excludes,
            compression,
            no_default_excludes,
        } => {
            let mut map = BTreeMap::new();
            for r in &roots {
                let (name, path) = split_kv("--root", r)?;
                if map
                    .insert(
                        name.to_string(),
                        RootConfig {
                            path: PathBuf::from(path),
                            exclude: Vec::new(),
                        },
                    )
                    .is_some()
                {
                    return Err(Error::Usage(format!("root {name} given twice")));
                }
            }
            for x in &excludes {
                let (name, glob) = split_kv("--exclude", x)?;
                map.get_mut(name)
                    .ok_or_else(|| Error::Usage(format!("--exclude {x}: no root named {name}")))?
                    .exclude
                    .push(glob.to_string());
            }
            let s = Store::init(
                &store,
                &InitOptions {
                    roots: map,
                    zstd: compression == "zstd",
                    no_default_excludes,
                },
            )?;
            println!("created store {}", s.root().display());
            for (n, r) in &s.config().roots {
                println!("  root {n} = {}", r.path.display());
            }
            Ok(0)
        }
        Command::Capture {
            store,
            branch,
            label,
            message,
            from,
            exclude,
            json,
        } => {
            let s = Store::open(&store)?;
            let mut from_map = BTreeMap::new();
            for f in &from {
                let (name, dir) = split_kv("--from", f)?;
                from_map.insert(name.to_string(), PathBuf::from(dir));
            }
            let opts = CaptureOptions {
                branch,
                label,
                message,
                from: from_map,
                exclude,
                progress: !json.json,
            };
            let r = capture(&s, &opts)?;
            if json.json {
                print_json(&serde_json::json!({"id": r.id, "checkpoint": r.checkpoint}))?;
            } else {
                let st = &r.checkpoint.stats;
                println!(
                    "checkpoint {} on {}: {} files, {} ({} read), {} new objects, {} new",
                    r.id.short(),
                    r.checkpoint.branch,
                    st.files,
                    human_bytes(st.bytes),
                    st.files_read,
                    st.new_objects,
                    human_bytes(st.new_bytes)
                );
            }
            Ok(0)
        }
        Command::Restore {
            store,
            checkpoint,
            root,
            to,
            json,
        } => {
            let s = Store::open(&store)?;
            let spec = match (&root, checkpoint.contains(':')) {
                (Some(r), false) => format!("{checkpoint}:{r}"),
                (Some(_), true) => {
                    return Err(Error::Usage(
                        "give the root either as --root or as CHECKPOINT:ROOT, not both".into(),
                    ))
                }
                (None, _) => checkpoint,
            };
            let loc = locate(&s, &spec)?;
            let r = restore::restore(&s, &loc, &to)?;
            if json.json {
                print_json(&r)?;
            } else {
                println!(
                    "restored {}:{} to {} ({} files, {})",
                    r.checkpoint.short(),
                    r.root,
                    r.dir.display(),
                    r.files,
                    human_bytes(r.bytes)
                );
                if let Some(a) = &r.moved_aside {
                    println!("the previous contents were moved to {}", a.display());
                }
            }
            Ok(0)
        }
        Command::Recover { store, json } => {
            let s = Store::open(&store)?;
            let r = recover::recover(&s)?;
            if json.json {
                print_json(&r)?;
            } else {
                match &r.interrupted {
                    Some(op) => println!("interrupted operation: {op}"),
                    None => println!("no interrupted operation"),
                }
                for a in &r.actions {
                    println!("  {a}");
                }
            }
            Ok(0)
        }
        Command::Log {
            store,
            branch,
            graph,
            json,
        } => {
            let s = Store::open(&store)?;
            let mut items = Vec::new();
            match &branch {
                Some(b) => {
                    let br = s
                        .read_branch(b)?
                        .ok_or_else(|| Error::NotFound(format!("branch {b}")))?;
                    let mut cur = br.head;
                    while let Some(id) = cur {
                        // A parent pruned by gc ends the history (records are immutable).
                        let c = match s.read_checkpoint(&id) {
                            Err(Error::NotFound(_)) if Some(id) != br.head => {
                                eprintln!("(history before {} was pruned by gc)", id.short());
                                break;
                            }
                            other => other?,
                        };
                        cur = c.parents.first().copied();
                        items.push((id, c));
                    }
                }
                None => {
                    for id in s.list_checkpoints()? {
                        items.push((id, s.read_checkpoint(&id)?));
                    }
                    items.sort_by(|a, b| b.1.time_ns.cmp(&a.1.time_ns).then(a.0.cmp(&b.0)));
                }
            }
            let labels = s.list_labels()?;
            if graph && !json.json {
                let mut names = labels.clone();
                for (n, b) in s.list_branches()? {
                    if let Some(h) = b.head {
                        names.push((format!("branch:{n}"), h));
                    }
                }
                for line in workspace::log_graph(&items, &names) {
                    println!("{line}");
                }
                return Ok(0);
            }
            if json.json {
                let v: Vec<_> = items
                    .iter()
                    .map(|(id, c)| {
                        let ls: Vec<&String> =
                            labels.iter().filter(|(_, l)| l == id).map(|(n, _)| n).collect();
                        serde_json::json!({"id": id, "branch": c.branch, "time": format_utc(c.time_ns),
                            "time_ns": c.time_ns, "parents": c.parents, "labels": ls,
                            "message": c.message, "stats": c.stats})
                    })
                    .collect();
                print_json(&v)?;
            } else {
                let mut out = io::stdout().lock();
                for (id, c) in &items {
                    let ls: Vec<&str> = labels
                        .iter()
                        .filter(|(_, l)| l == id)
                        .map(|(n, _)| n.as_str())
                        .collect();
                    let ls = if ls.is_empty() {
                        String::new()
                    } else {
                        format!(" [{}]", ls.join(", "))
                    };
                    let _ignored = writeln!(
                        out,
                        "{} {} {:<12}{} {} files {}  {}",
                        id.short(),
                        format_utc(c.time_ns),
                        c.branch,
                        ls,
                        c.stats.files,
                        human_bytes(c.stats.bytes),
                        c.message
                    );
                }
            }
            Ok(0)
        }
        Command::Show {
            store,
            checkpoint,
            json,
        } => {
            let s = Store::open(&store)?;
            let id = s.resolve(&checkpoint)?;
            let c = s.read_checkpoint(&id)?;
            if json.json {
                print_json(&serde_json::json!({"id": id, "checkpoint": c}))?;
            } else {
                println!("checkpoint {id}");
                println!("branch     {}", c.branch);
                println!("time       {}", format_utc(c.time_ns));
                for p in &c.parents {
                    println!("parent     {p}");
                }
                if let Some(l) = &c.label {
                    println!("label      {l}");
                }
                println!("message    {}", c.message);
                for (n, r) in &c.roots {
                    println!(
                        "root       {n}: tree {} ({} files, {})",
                        r.tree.short(),
                        r.files,
                        human_bytes(r.bytes)
                    );
                }
                let st = &c.stats;
                println!(
                    "stats      {} files, {} dirs, {} symlinks, {}; {} files read, {} new objects, {} new",
                    st.files,
                    st.dirs,
                    st.symlinks,
                    human_bytes(st.bytes),
                    st.files_read,
                    st.new_objects,
                    human_bytes(st.new_bytes)
                );
            }
            Ok(0)
        }
        Command::Ls {
            store,
            spec,
            recursive,
            json,
        } => {
            let s = Store::open(&store)?;
            let loc = locate(&s, &spec)?;
            let mut rows = Vec::new();
            match loc.dir_tree() {
                Some(t) => {
                    if recursive {
                        walk_tree(&s, &t, b"", &mut |p, e| {
                            rows.push((p.to_vec(), e.clone()));
                            Ok(())
                        })?;
                    } else {
                        let tree = s.read_tree(&t)?;
                        rows.extend(tree.entries.into_iter().map(|e| (e.name.clone(), e)));
                    }
                }
                None => {
                    if let Some(e) = &loc.entry {
                        rows.push((e.name.clone(), e.clone()));
                    }
                }
            }
            if json.json {
                let v: Vec<_> = rows
                    .iter()
                    .map(|(p, e)| {
                        let target = match &e.kind {
                            EntryKind::Symlink { target } => {
                                Some(String::from_utf8_lossy(target).into_owned())
                            }
                            _ => None,
                        };
                        serde_json::json!({"path": String::from_utf8_lossy(p), "type": e.kind_name(),
                            "mode": format!("{:o}", e.mode), "uid": e.uid, "gid": e.gid,
                            "size": e.size, "mtime_ns": e.mtime_ns, "target": target})
                    })
                    .collect();
                print_json(&v)?;
            } else {
                let mut out = io::stdout().lock();
                for (p, e) in &rows {
                    let t = match e.kind {
                        EntryKind::File { .. } => '-',
                        EntryKind::Dir { .. } => 'd',
                        EntryKind::Symlink { .. } => 'l',
                    };
                    let tail = match &e.kind {
                        EntryKind::Symlink { target } => {
                            format!(" -> {}", String::from_utf8_lossy(target))
                        }
                        _ => String::new(),
                    };
                    let _ignored = writeln!(
                        out,
                        "{t}{:04o} {:>5} {:>5} {:>12} {} {}{tail}",
                        e.mode,
                        e.uid,
                        e.gid,
                        e.size,
                        format_utc(e.mtime_ns),
                        String::from_utf8_lossy(p)
                    );
                }
            }
            Ok(0)
        }
        Command::Cat { store, spec } => {
            let s = Store::open(&store)?;
            let loc = locate(&s, &spec)?;
            match &loc.entry {
                Some(e) => match &e.kind {
                    EntryKind::File { chunks } => {
                        let mut out = io::stdout().lock();
                        for c in chunks {
                            let data = s.read_chunk(c)?;
                            out.write_all(&data)
                                .map_err(|e| Error::io_op("writing stdout", e))?;
                        }
                        out.flush().map_err(|e| Error::io_op("writing stdout", e))?;
                        Ok(0)
                    }
                    _ => Err(Error::Usage(format!("{spec}: not a regular file"))),
                },
                None => Err(Error::Usage(format!("{spec}: is a directory"))),
            }
        }
        Command::Diff { store, a, b, json } => {
            let s = Store::open(&store)?;
            let ia = s.resolve(&a)?;
            let ib = s.resolve(&b)?;
            let changes = diff::diff(&s, &s.read_checkpoint(&ia)?, &s.read_checkpoint(&ib)?)?;
            if json.json {
                print_json(&changes)?;
            } else {
                let mut out = io::stdout().lock();
                for c in &changes {
                    let _ignored = writeln!(out, "{:<9} {}", c.change, c.path);
                }
            }
            Ok(0)
        }
        Command::Label {
            store,
            checkpoint,
            name,
        } => {
            let s = Store::open(&store)?;
            ckptfs::util::check_name("label", &name)?;
            let id = s.resolve(&checkpoint)?;
            s.mutate(
                "label",
                serde_json::json!({"checkpoint": id, "label": name}),
                |_| {
                    s.create_label(&name, &id)?;
                    Ok(((), serde_json::Value::Null))
                },
            )?;
            println!("label {name} -> {}", id.short());
            Ok(0)
        }
        Command::Branch(BranchCommand::List { store, all, json }) => {
            workspace::branch_list(&store, all, json.json)
        }
        Command::Branch(BranchCommand::Archive { store, name }) => {
            workspace::branch_archive(&store, &name, true)
        }
        Command::Branch(BranchCommand::Unarchive { store, name }) => {
            workspace::branch_archive(&store, &name, false)
        }
        Command::Branch(BranchCommand::Delete { store, name, force }) => {
            workspace::branch_delete(&store, &name, force)
        }
        Command::Exec {
            place,
            branch,
            command,
        } => workspace::exec(&place, branch.as_deref(), &command),
        Command::Checkpoint {
            place,
            branch,
            label,
            message,
            freeze_cgroup,
            freeze_fs,
            json,
        } => workspace::checkpoint(
            &place,
            branch.as_deref(),
            label.as_deref(),
            &message,
            &ckptfs::workspace::Hold {
                cgroups: freeze_cgroup,
                filesystem: freeze_fs,
            },
            json.json,
        ),
        Command::Switch {
            mountpoint,
            to,
            checkpoint_first,
            discard,
            name,
            json,
        } => workspace::switch(
            &mountpoint,
            &to,
            checkpoint_first,
            discard,
            name.as_deref(),
            json.json,
        ),
        Command::Fork {
            store,
            checkpoint,
            name,
        } => workspace::fork(&store, &checkpoint, &name),
        Command::Mount(a) => match a.branch.clone() {
            Some(branch) => {
                if a.checkpoint.is_some() || a.mountpoint.is_some() {
                    return Err(Error::Usage(
                        "with --branch, give no CHECKPOINT or MOUNTPOINT (use --root, --at DIR --relocate)".into(),
                    ));
                }
                workspace::mount_branch(
                    &a.store,
                    &branch,
                    &a.roots,
                    a.at.as_deref(),
                    a.relocate,
                    &ckptfs::workspace::Hold {
                        cgroups: a.freeze_cgroups.clone(),
                        filesystem: a.freeze_fs,
                    },
                    a.json,
                )
            }
            None => view::mount(a),
        },
        Command::Gc(a) => health::run_gc(a),
        Command::Archive(a) => health::run_archive(a),
        Command::Unarchive(a) => health::run_unarchive(a),
        Command::Doctor(a) => health::run_doctor(a),
        Command::Browse(a) => view::browse(a),
        Command::InternalDetach { target } => {
            ckptfs::workspace::overlay::detach(&target)?;
            let _ignored = std::fs::remove_dir(&target);
            Ok(0)
        }
        Command::Umount(a) => match workspace::umount(&a.mountpoint)? {
            Some(code) => Ok(code),
            None => view::umount(a),
        },
        Command::Status(a) => workspace::status(&a.store, a.json),
        Command::Verify {
            store,
            checkpoints,
            all,
            json,
        } => {
            let s = Store::open(&store)?;
            if all && !checkpoints.is_empty() {
                return Err(Error::Usage("give checkpoints or --all, not both".into()));
            }
            let ids = checkpoints
                .iter()
                .map(|c| s.resolve(c))
                .collect::<Result<Vec<_>>>()?;
            let r = verify::verify(&s, &ids)?;
            if json.json {
                print_json(&r)?;
            } else {
                for f in &r.findings {
                    println!("{} {}: {}", f.problem, f.object, f.detail);
                    for u in &f.used_by {
                        println!("    used by {u}");
                    }
                    if f.used_by_count > f.used_by.len() {
                        println!("    ... and {} more", f.used_by_count - f.used_by.len());
                    }
                }
                println!(
                    "verified {} checkpoints, {} trees, {} objects ({}): {} findings",
                    r.checkpoints,
                    r.trees,
                    r.objects,
                    human_bytes(r.bytes),
                    r.findings.len()
                );
            }
            Ok(if r.findings.is_empty() { 0 } else { 1 })
        }
    }
}
