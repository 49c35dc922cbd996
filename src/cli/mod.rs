//! Command-line types (clap) and dispatch. Human output by default, `--json` for machines.

//!
//! One module per group of commands, each holding its clap arguments and one `run_*`
//! function per command: `store` (init, capture, restore, label), `history` (log, show, ls,
//! cat, diff), `health` (verify, recover, gc, export, import, doctor), `workspace`
//! (branches, checkpoint, exec, switch, fork, status, mount --branch), `view` (mount,
//! browse, umount), `label` (label, label delete), `forget`, `stats`, `find` and `shell`
//! (completions, man), `turn` (turn, the shared `--meta` arguments, `log --turns`) and
//! `fingerprint`; `json` holds the JSON shapes several commands share (docs/json.md).
//! [`run`] only dispatches. `store_arg` fills in a left-out STORE before clap parses (the
//! one rule, docs/cli.md); `table` lays out text tables. `-q`/`--quiet` and `--json` turn
//! progress bars off (`ckptfs::progress`).

mod agent;
mod args;
mod find;
mod fingerprint;
mod forget;
mod health;
mod history;
mod json;
mod label;
mod merge;
mod remote;
mod shell;
mod stats;
mod status;
mod store;
mod store_arg;
mod table;
mod turn;
mod view;
mod workspace;

use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use ckptfs::{Error, Result};

/// ckptfs: checkpoint directory trees that live at fixed absolute paths, browse any old
/// state, and put it back where it was.
///
/// A store is one directory holding content-addressed objects (SHA-256, content-defined
/// chunks, deduplicated across all checkpoints) and the history of one or more named roots
/// (e.g. workspace=/workspace/room, home=/root/.codex). `capture` records every root as one
/// checkpoint; `restore` puts a checkpoint back; `log`, `show`, `ls`, `cat` and `diff` look at
/// history; `verify` re-hashes everything.
///
/// The store is the first argument of the commands that use one, or, left out, --store PATH,
/// else $CKPTFS_STORE, else the store of the mounted workspace or view the current directory
/// is in (docs/cli.md).
///
/// Exit codes: 0 ok, 1 failure, 2 usage error.
#[derive(Parser, Debug)]
#[command(name = "ckptfs", version, propagate_version = true)]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace; RUST_LOG also works).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// The store, for a command whose STORE argument is left out (before $CKPTFS_STORE and
    /// the mounted workspace around the current directory; a STORE argument wins).
    #[arg(long = "store", global = true, value_name = "PATH", value_hint = clap::ValueHint::DirPath)]
    pub store_flag: Option<PathBuf>,
    /// No progress bars on stderr (they are drawn only on a terminal, and never with --json).
    #[arg(short, long, global = true)]
    pub quiet: bool,
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
///
/// A left-out STORE is filled in first ([`store_arg::complete`]); finding none is a usage
/// error too.
pub fn parse() -> Cli {
    let cmd = command();
    let args = match store_arg::complete(&cmd, std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ckptfs: {e}");
            std::process::exit(2);
        }
    };
    let parsed = cmd
        .try_get_matches_from(args)
        .and_then(|m| Ok((Cli::from_arg_matches(&m)?, m)));
    match parsed {
        Ok((cli, matches)) => {
            ckptfs::progress::enable(!cli.quiet && !wants_json(&matches));
            ckptfs::progress::enable_notices(!cli.quiet);
            cli
        }
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

/// The command line as clap sees it: [`Cli`] with the store rule in every STORE command's
/// help. Completions and man pages are made from it too.
pub(crate) fn command() -> clap::Command {
    store_arg::annotate(Cli::command())
}

/// Whether the (sub)command given asks for JSON: progress bars stay off then.
fn wants_json(m: &clap::ArgMatches) -> bool {
    let mut m = m;
    loop {
        if let Ok(Some(true)) = m.try_get_one::<bool>("json") {
            return true;
        }
        match m.subcommand() {
            Some((_, sub)) => m = sub,
            None => return false,
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
        // clap's own pointer to --help: the line ends with ours.
        .filter(|l| !l.starts_with("For more information, try"))
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
    Init(store::InitArgs),
    /// Record every root as one new checkpoint on a branch.
    ///
    /// Files whose size, mtime, ctime and inode match the previous checkpoint are not read
    /// again; the rest are chunked and hashed on all cores. Sockets, fifos and devices make the
    /// capture fail unless excluded; symlinks are stored, never followed.
    Capture(store::CaptureArgs),
    /// Copy a root, a directory, a file or a symlink of a checkpoint back out (no FUSE needed).
    ///
    /// Forms:
    ///   restore STORE C --to DIR              root (the only one, or --root R) as DIR
    ///   restore STORE C:R/SUB --to DIR        directory SUB as DIR
    ///   restore STORE C:R/F --to DEST         file F as DEST, or into DEST if a directory
    ///   restore STORE C:R/SUB --in-place      SUB (or a file) back at its place in root R
    ///   restore STORE C --in-place            every root of C back at its recorded path
    ///   ... --include GLOB / --exclude GLOB   only part of a directory
    ///
    /// Every needed object is checked before anything is written; each target is staged
    /// beside it and swapped in. What was there is moved aside, never deleted: to
    /// NAME.ckptfs-aside-TIME-PID beside it, or, in place, to STORE/displaced/ (an empty
    /// directory is simply replaced). An interrupted restore is rolled back, all roots
    /// together, by `ckptfs recover`.
    #[command(verbatim_doc_comment)]
    Restore(store::RestoreArgs),
    /// Repair after a crash: roll back an interrupted operation, clear its RUNNING marker and
    /// remove half-written temp files; thaw a cgroup that a killed `checkpoint
    /// --freeze-cgroup` left frozen, or the store's filesystem that a killed `checkpoint
    /// --freeze-fs` and its watchdog left frozen. Refuses while the recorded process is alive.
    Recover(health::RecoverArgs),
    /// List checkpoints, newest first.
    ///
    /// A checkpoint `forget` removed from a branch's line shows as a `... ID (forgotten ...)`
    /// line where it was (on stderr with --json or --graph). A record or label file that does
    /// not read gives one warning line on stderr naming it; the rest is still listed and the
    /// exit code stays 0 (`doctor` and `verify` are the checks that fail).
    Log(history::LogArgs),
    /// Show one checkpoint's record.
    Show(history::ShowArgs),
    /// List a directory of a checkpoint: CHECKPOINT[:ROOT/PATH].
    Ls(history::LsArgs),
    /// Print a file of a checkpoint to stdout: CHECKPOINT:ROOT/PATH.
    Cat(history::CatArgs),
    /// Show what changed between two checkpoints, or from a checkpoint to a live workspace
    /// (--workspace) or a plain directory (--dir): a line per path (added, removed, modified,
    /// type, mode...), or --stat, --name-status, a unified diff (-p), for some paths only
    /// (-- PATH...), with renames found by content (-M).
    Diff(history::DiffArgs),
    /// What the store holds: logical against stored bytes, the dedup ratio, and the bytes each
    /// branch and checkpoint holds alone (what forgetting it would free), like `restic stats`
    /// and `zfs list -o used,refer`.
    Stats(stats::StatsArgs),
    /// Search history: the checkpoints holding paths that match a glob, or (--history
    /// ROOT/PATH) the checkpoints in which one path changed, like `restic find`.
    Find(find::FindArgs),
    /// Give a checkpoint an immutable label: `label STORE CHECKPOINT NAME` (an existing label
    /// is never moved or overwritten), or delete one: `label delete STORE NAME` (audited).
    Label(label::LabelCommand),
    /// Take checkpoints out of history, e.g. one that captured a secret: their records go
    /// (a tombstone keeps only id, parents, branch and time, so `log` shows the gap), and with
    /// --prune (or at the next `gc`) so do the objects nothing else reaches.
    ///
    /// Refused, changing nothing, for a checkpoint that is a branch head (move or delete the
    /// branch first), has a label (`label delete` first), is the base of a workspace or is
    /// pinned by a live mount or view (unmount first). --dry-run prints the same plan.
    /// The report counts objects the checkpoints share with others that stay: identical
    /// content elsewhere in history is kept. Not reached: live files, workspace upper layers,
    /// displaced/ (`gc --prune-displaced`), archives made earlier.
    ///
    /// Example: ckptfs forget /var/lib/ckpt 3f2a9c1b --prune
    Forget(forget::ForgetArgs),
    /// Branches: list, archive, unarchive, delete. A branch is a movable head checkpoint plus
    /// its workspace layer; it plays the part of a saved agent session (resume = mount it).
    #[command(subcommand)]
    Branch(workspace::BranchCommand),
    /// Checkpoint a mounted workspace: record what changed since the last checkpoint as a new
    /// checkpoint on its branch. Cost follows the change, not the tree; the mount stays up and
    /// open files stay valid.
    Checkpoint(workspace::CheckpointArgs),
    /// Run a command (the agent) in a cgroup of the workspace, so checkpoints hold its writes.
    ///
    /// Makes a cgroup for the workspace (once; under the cgroup hierarchy's `ckptfs/`),
    /// records it with the mount as `mount --freeze-cgroup` does, moves this process into it
    /// and executes COMMAND there. The command and everything it starts are then frozen for
    /// the few milliseconds of each checkpoint's second pass, so every checkpoint captures all
    /// of their files at one instant. `umount` removes the cgroup once it is empty.
    ///
    /// Without root, COMMAND runs in the user namespace the workspace is mounted in (the only
    /// place its files show at their path), as a subordinate id that cannot reach the store;
    /// `--as-root` runs it as you (a shell there: `ckptfs exec ROOM --as-root -- bash`); the
    /// cgroup is made in one delegated to you, and without one COMMAND runs in none
    /// (docs/rootless.md).
    /// Example: `ckptfs exec /workspace/room -- python3 agent.py`.
    Exec(workspace::ExecArgs),
    /// Run one agent turn as one checkpoint: COMMAND in the workspace's cgroup, then, on exit
    /// status 0 only, one held checkpoint recording --meta, the runtime fingerprint, the
    /// command, its exit status and times. See docs/runner.md.
    ///
    /// Mounts the branch if needed. While the turn runs, every other mutating command on the
    /// store refuses, naming it. A non-zero exit, a signal, or a crash of this process
    /// records nothing on the branch: the writes stay in the workspace's upper layer
    /// (`status` says so) until `turn --retry` (sets them aside and runs again), `switch
    /// --discard` or `checkpoint` decides; after a crash, `recover` records the failure.
    /// Start and outcome are appended to the audit log (`log --turns` lists them). Exit
    /// status: COMMAND's (128+N for signal N), 127/126 when it cannot run, 1/2 when ckptfs
    /// fails.
    ///
    /// Example: ckptfs turn /var/lib/ckpt --branch main --meta thread=t1 --meta turn=3 -- python3 agent.py
    Turn(turn::TurnArgs),
    /// Run a native agent session (Codex, Claude Code) in a room, turn after turn: each
    /// completed turn is one checkpoint binding the room's files and the agent's home to the
    /// session's ids and final reply; forks are native forks; resuming a branch is switching
    /// to it. See docs/agents.md.
    ///
    /// Example: ckptfs agent init /var/lib/ckpt --agent codex --workspace /srv/room --home /srv/codex-home
    #[command(subcommand)]
    Agent(agent::AgentCommand),
    /// Print this machine's runtime fingerprint (platform, and the files and commands the
    /// store declares), compare it with a branch's, or set the declaration.
    ///
    /// Example: ckptfs fingerprint /var/lib/ckpt --file /usr/local/bin/agent --command 'python3 --version'
    Fingerprint(fingerprint::FingerprintArgs),
    /// Show another branch or checkpoint at the same paths (restore), without copying files.
    ///
    /// A checkpoint that is not a branch head starts a new branch (named by --name, or
    /// from-<id>). Un-checkpointed changes are never lost: switch refuses unless
    /// --checkpoint-first or --discard (which sets them aside under STORE/displaced/).
    ///
    /// The tree left, when nobody is in it, stays mounted read-only (parked, at most 2 per
    /// store): a switch back moves it back with the kernel's cached inodes, so the first walk
    /// there (git status) is as fast as a steady one. Its upper layer waits meanwhile
    /// (`status` shows it); umount, gc and recover detach parked trees.
    /// Like `mount --branch`, it returns once the lower view has listed the new base's
    /// directories (at most 5 s), so the first `git status` finds its entries cached.
    Switch(workspace::SwitchArgs),
    /// Start a new independent branch at a checkpoint (O(1): nothing is copied).
    Fork(workspace::ForkArgs),
    /// Merge a branch (or any checkpoint) into a branch, three ways.
    ///
    /// The base is the nearest common ancestor in the checkpoint graph (fork points and
    /// earlier merges). A path changed on one side only takes that side; directories changed
    /// on both are merged entry by entry; content changed on both goes to a driver chosen by
    /// what it is: text (line-based, as `git merge-file`), append-only files (transcripts,
    /// logs: base, our tail, their tail), SQLite databases (row by row, through SQLite's
    /// session extension); anything else is a conflict. Renames are followed.
    ///
    /// The result is one checkpoint with two parents on --into BRANCH, recorded only when no
    /// conflict is left (exit 1 and nothing recorded otherwise: --take resolves them). When
    /// BRANCH has not moved since the base, it simply moves forward to SOURCE (--no-ff
    /// records a merge anyway). BRANCH must not hold un-checkpointed changes.
    ///
    /// A mounted BRANCH gets the merge written into its workspace, as git merges into a work
    /// tree: with no conflict it is recorded at once; with conflicts they are left there (text
    /// with git's markers), `status` lists them, and the first `checkpoint` with all of them
    /// resolved records the merge. --take writes one side of a conflict there; --abort puts
    /// the workspace back.
    ///
    /// Examples: ckptfs merge /var/lib/ckpt try-2 --into main --dry-run;
    /// ckptfs merge /srv/room try-2 (into the workspace mounted at /srv/room)
    Merge(merge::MergeArgs),
    /// Re-hash every object reachable from the given checkpoints (or all) and report every
    /// missing or corrupt object with the paths that use it. Exit 1 on any finding.
    Verify(health::VerifyArgs),
    /// Delete what the retention policy lets go: unlabelled, non-head checkpoints beyond
    /// --keep-* (per branch; default from STORE.json "retention", else keep all), then objects
    /// no kept checkpoint reaches, temp files of dead processes, dead pins, uppers of deleted
    /// branches, reflink snapshots left by a failed checkpoint, and stale caches. Never
    /// touches refs, labels, branch heads or what a live pin (mount, view, capture) reaches.
    /// --dry-run prints the same report without deleting.
    Gc(args::GcArgs),
    /// Export checkpoints or branches (or --all) to one portable file: zstd-compressed tar with
    /// a manifest, records and objects; prints its SHA-256 and writes FILE.sha256.
    ///
    /// Formerly `archive`, still accepted (not to be confused with `branch archive`, which
    /// hides a branch).
    #[command(name = "export", visible_alias = "archive")]
    Archive(health::ArchiveArgs),
    /// Import an archive into a new or existing store after checking its SHA-256 and every
    /// object; --relocate NAME=/PATH records a root at a new path. Nothing is imported from a
    /// truncated, corrupted or foreign file.
    ///
    /// `import STORE FILE`, STORE first like every command. Formerly `unarchive FILE STORE`:
    /// that name and that order are still accepted (the archive is the argument that is a
    /// file).
    #[command(name = "import", visible_alias = "unarchive")]
    Unarchive(health::UnarchiveArgs),
    /// Check the store's invariants (refs, objects and sizes, markers, pins, sockets, temp
    /// files, stale mounts, permissions, format) and say how to fix each finding. Exit 1 on an
    /// error or warning; `recover` repairs those marked so. Objects are checked for presence
    /// and size only, never their contents: `verify` hashes every object.
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
    /// branch again resumes it. Without root, the workspace is mounted in a user namespace
    /// ckptfs keeps for the store: `ckptfs exec ROOM -- CMD` runs CMD there (docs/rootless.md).
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
    /// List live mounts of a store: workspaces (branch, base checkpoint, the paths changed
    /// since the last checkpoint as `git status --short` lists them, processes writing into
    /// them that checkpoints do not hold) and read-only views (mountpoint, what they show,
    /// daemon pid). `--short` prints only the changed paths.
    ///
    /// Example: ckptfs status /var/lib/ckpt --json
    Status(view::StatusArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish or powershell) to stdout.
    ///
    /// Examples: `source <(ckptfs completions bash)` in ~/.bashrc;
    /// `ckptfs completions zsh > ~/.zfunc/_ckptfs`;
    /// `ckptfs completions fish > ~/.config/fish/completions/ckptfs.fish`.
    Completions(shell::CompletionsArgs),
    /// Write manual pages generated from this help: ckptfs.1 and ckptfs-SUB.1 for each
    /// subcommand into DIR, or the top page to stdout.
    ///
    /// Examples: `ckptfs man /usr/local/share/man/man1 && mandb`; `ckptfs man | man -l -`.
    Man(shell::ManArgs),
    /// Remotes: S3-compatible storage (AWS, Garage...) holding history for other machines,
    /// encrypted on this one: add, list, remove. See push, clone, fetch, pull.
    #[command(subcommand)]
    Remote(remote::RemoteCommand),
    /// Upload to a remote what it lacks (objects packed, then records, then refs) and move
    /// its branches. A remote branch that moved elsewhere is refused (--force overwrites);
    /// labels never move. Refused while another push or gc holds the remote's lock.
    ///
    /// Example: ckptfs push /var/lib/ckpt origin main
    Push(remote::PushArgs),
    /// Make a new store from a remote: refs and records now, objects lazily when first read
    /// (mount, browse, cat, diff, restore and workspaces all work at once).
    ///
    /// Example: ckptfs clone s3://ckpt/rooms/a /var/lib/ckpt --endpoint http://127.0.0.1:3900
    Clone(remote::CloneArgs),
    /// Bring a remote's refs, records and index (objects stay there until read); branches
    /// and labels this store lacks are created.
    Fetch(remote::FetchArgs),
    /// Fetch, then fast-forward local branches to the remote's heads (exit 1 if one could
    /// not be: diverged, or mounted as a workspace).
    Pull(remote::FetchArgs),
    /// Internal: detach moved-aside workspace overlays, remove their directories, then the
    /// folded upper layer given with --remove.
    #[command(hide = true)]
    InternalDetach {
        targets: Vec<PathBuf>,
        #[arg(long)]
        remove: Option<PathBuf>,
    },
    /// Internal: walk the overlays a fold just mounted, so their inodes are built before the
    /// agent's next turn (docs/workspaces.md, "Warming the new overlay").
    #[command(hide = true, name = "internal-warm")]
    InternalWarm {
        store: PathBuf,
        mountpoints: Vec<PathBuf>,
    },
    /// Internal: keep the user + mount namespace an ordinary account's workspaces are mounted
    /// in (docs/rootless.md).
    #[command(hide = true, name = "internal-holder")]
    InternalHolder {
        /// The store it serves (informational: matched by later commands).
        store: Option<PathBuf>,
    },
}

pub(crate) fn split_kv<'a>(flag: &str, s: &'a str) -> Result<(&'a str, &'a str)> {
    s.split_once('=')
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .ok_or_else(|| Error::Usage(format!("{flag} {s:?}: expected NAME=VALUE")))
}

/// [`ckptfs::units::parse_size`] as a clap value parser: its message, without the `usage:`
/// prefix that clap's own "invalid value" error already implies.
/// A `--keep-*` count: a whole number of at least 1 (0 keeps nothing, as `--keep-within 0d`
/// is refused: leave the rule out instead).
pub(crate) fn keep_count_arg(s: &str) -> std::result::Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Err(format!(
            "{s:?}: zero keeps nothing (leave the rule out instead)"
        )),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?}: expected a whole number of at least 1")),
    }
}

pub(crate) fn size_arg(s: &str) -> std::result::Result<u64, String> {
    ckptfs::units::parse_size(s).map_err(|e| match e {
        Error::Usage(m) => m,
        other => other.to_string(),
    })
}

pub(crate) fn print_json(v: &impl serde::Serialize) -> Result<()> {
    let s = serde_json::to_string_pretty(v)
        .map_err(|e| Error::Invalid(format!("encoding JSON: {e}")))?;
    println!("{s}");
    Ok(())
}

/// Runs a parsed command; returns the exit code.
pub fn run(cli: Cli) -> Result<i32> {
    let store_flag = cli.store_flag;
    match cli.command {
        Command::Init(a) => store::run_init(a),
        Command::Capture(a) => store::run_capture(a),
        Command::Restore(a) => store::run_restore(a),
        Command::Recover(a) => health::run_recover(a),
        Command::Log(a) => history::run_log(a),
        Command::Show(a) => history::run_show(a),
        Command::Ls(a) => history::run_ls(a),
        Command::Cat(a) => history::run_cat(a),
        Command::Diff(a) => history::run_diff(a),
        Command::Stats(a) => stats::run_stats(a),
        Command::Find(a) => find::run_find(a),
        Command::Label(a) => label::run_label(a),
        Command::Forget(a) => forget::run_forget(a),
        Command::Branch(c) => workspace::run_branch(c),
        Command::Checkpoint(a) => workspace::run_checkpoint(a),
        Command::Exec(a) => workspace::run_exec(a),
        Command::Switch(a) => workspace::run_switch(a),
        Command::Turn(a) => turn::run_turn(a),
        Command::Agent(c) => agent::run_agent(c),
        Command::Fingerprint(a) => fingerprint::run_fingerprint(a),
        Command::Fork(a) => workspace::run_fork(a),
        Command::Merge(a) => merge::run_merge(a),
        Command::Verify(a) => health::run_verify(a),
        Command::Gc(a) => health::run_gc(a),
        Command::Archive(a) => health::run_archive(a),
        Command::Unarchive(a) => health::run_unarchive(a, store_flag.as_deref()),
        Command::Doctor(a) => health::run_doctor(a),
        Command::Mount(a) => run_mount(a),
        Command::Browse(a) => view::browse(a),
        Command::Umount(a) => run_umount(a),
        Command::Status(a) => status::status(&a.place, a.json, a.short),
        Command::Completions(a) => shell::run_completions(a),
        Command::Man(a) => shell::run_man(a),
        Command::Remote(c) => remote::run_remote(c),
        Command::Push(a) => remote::run_push(a),
        Command::Clone(a) => remote::run_clone(a),
        Command::Fetch(a) => remote::run_fetch(a),
        Command::Pull(a) => remote::run_pull(a),
        Command::InternalDetach { targets, remove } => run_internal_detach(&targets, remove),
        Command::InternalWarm { store, mountpoints } => {
            ckptfs::workspace::run_warm(&store, &mountpoints)
        }
        Command::InternalHolder { .. } => Ok(ckptfs::fs::userns::hold()),
    }
}

/// `ckptfs mount`: a branch as a workspace (`--branch`), else a read-only view.
fn run_mount(a: view::MountArgs) -> Result<i32> {
    let Some(branch) = a.branch.clone() else {
        return view::mount(a);
    };
    if a.checkpoint.is_some() || a.mountpoint.is_some() {
        return Err(Error::Usage(
            "with --branch, give no CHECKPOINT or MOUNTPOINT (use --root, --at DIR --relocate)"
                .into(),
        ));
    }
    // A resume on a changed runtime is refused (see `ckptfs fingerprint`).
    let s = ckptfs::remote::open_store(&a.store)?;
    fingerprint::check_resume(&s, &branch, "mount", a.accept_runtime_change)?;
    drop(s);
    workspace::mount_branch(&a, &branch)
}

/// `ckptfs umount`: a workspace, else a read-only view.
fn run_umount(a: view::UmountArgs) -> Result<i32> {
    match workspace::umount(&a.mountpoint, a.kill)? {
        Some(code) => Ok(code),
        None if a.kill => Err(ckptfs::error::Error::Usage(format!(
            "umount --kill: {} is not a workspace (--kill is for workspaces)",
            a.mountpoint.display()
        ))),
        None => view::umount(a),
    }
}

/// Detaches moved-aside workspace overlays and removes their directories once empty, then
/// the folded upper layer `remove` (see `workspace::fold`).
fn run_internal_detach(targets: &[PathBuf], remove: Option<PathBuf>) -> Result<i32> {
    for target in targets {
        ckptfs::workspace::overlay::detach(target)?;
        let _ignored = std::fs::remove_dir(target);
    }
    if let Some(dir) = remove {
        ckptfs::workspace::remove_folded(&dir)?;
    }
    Ok(0)
}
