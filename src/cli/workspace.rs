//! CLI for live workspaces: mount --branch, umount, checkpoint, exec, switch, fork, status,
//! branch lifecycle.

use ckptfs::text::quote;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use ckptfs::text::time::local_of_utc;
use ckptfs::units::human_bytes;
use ckptfs::workspace::{self, place, DirtyPolicy, Hold, MountOptions};
use ckptfs::{Error, Result};

use super::table::Table;
use super::{print_json, JsonFlag};

/// `checkpoint` arguments.
#[derive(Args, Debug)]
pub struct CheckpointArgs {
    /// A workspace mountpoint (or a path inside it), or the store directory.
    pub place: PathBuf,
    /// Which workspace, when PLACE is the store and several are mounted.
    #[arg(long, short)]
    pub branch: Option<String>,
    #[command(flatten)]
    pub record: super::args::RecordArgs,
    /// Hold the writes of the processes in this cgroup (a directory under /sys/fs/cgroup:
    /// cgroup v2, or v1's freezer), so every root and every writer, in-place ones
    /// included, is captured at one instant. A first pass reads the changes while they
    /// run; they are frozen (not signalled) only for a second pass that reads what
    /// changed since, a few milliseconds, and thawed before the new objects are synced.
    /// Adds to the cgroups recorded with the mount (`mount --freeze-cgroup`, `exec`).
    /// Repeatable.
    #[arg(long, value_name = "DIR")]
    pub freeze_cgroup: Vec<PathBuf>,
    /// Hold the writes of every process for the second pass, in a cgroup or not, by
    /// freezing the filesystem the store (and so the upper layers) is on, as
    /// `fsfreeze -f` does. The store must be on a filesystem of its own: the root
    /// filesystem is refused, and anything else on that filesystem waits too. A watchdog
    /// thaws it if the checkpoint dies or holds it over 10 s.
    #[arg(long)]
    pub freeze_fs: bool,
    /// Leave out what this glob matches, besides the roots' exclude rules (as `capture
    /// --exclude`: a pattern without `/` matches a name anywhere, one with `/` the path
    /// from the root). A FIFO, socket or device in the workspace fails a checkpoint
    /// unless excluded. Repeatable.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Record a checkpoint even when the workspace holds nothing new (nothing a checkpoint
    /// would record differently from the branch head but directory mtimes, which `git
    /// status` and other read-only tools touch). Without it such a checkpoint says so and
    /// records nothing (`"recorded": false` in --json). --label implies it.
    #[arg(long)]
    pub allow_empty: bool,
    /// Keep the upper layer as it is instead of folding it into the new checkpoint (see
    /// docs/workspaces.md, "The fold"): its files stay stored twice, in the upper layer and
    /// in the store, until a checkpoint without --no-fold, a switch or a remount. Worth it
    /// when big files (transcripts, databases) grow every turn: after a fold the next write
    /// to each copies it up whole again and the checkpoint after reads it whole.
    #[arg(long)]
    pub no_fold: bool,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `exec` arguments.
#[derive(Args, Debug)]
pub struct ExecArgs {
    /// A workspace mountpoint (or a path inside it), or the store directory.
    pub place: PathBuf,
    /// Which workspace, when PLACE is the store and several are mounted.
    #[arg(long, short)]
    pub branch: Option<String>,
    /// The command and its arguments, after `--`. ckptfs becomes the command, so the exit
    /// status is the command's own (a shell shows death by signal N as 128+N); 127 when
    /// COMMAND is not found, 126 when it cannot be executed, as shells do; 1 or 2 when
    /// ckptfs fails before running it.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
    /// Run even when the runtime fingerprint recorded by the branch's turns differs from
    /// this machine's (see `ckptfs fingerprint`); the change is audited.
    #[arg(long)]
    pub accept_runtime_change: bool,
    #[command(flatten)]
    pub run_as: super::args::RunAsArgs,
}

/// `switch` arguments.
#[derive(Args, Debug)]
pub struct SwitchArgs {
    /// A workspace mountpoint (or a path inside it).
    pub mountpoint: PathBuf,
    /// Target branch, label or checkpoint id.
    #[arg(long)]
    pub to: String,
    /// Checkpoint un-checkpointed changes first.
    #[arg(long)]
    pub checkpoint_first: bool,
    /// Set un-checkpointed changes aside under STORE/displaced/ (never deleted).
    #[arg(long)]
    pub discard: bool,
    /// Show the target as a new branch NAME (forked from the branch, label or checkpoint
    /// given). Without it, a branch `from-<id>` is made only when the target is not a branch
    /// and not the head of exactly one branch.
    #[arg(long)]
    pub name: Option<String>,
    /// Kill (SIGKILL) the processes that would keep a writable view of the branch left (a
    /// file open for writing in the workspace; a copy of it in another mount namespace, such
    /// as `unshare -Urm` makes), or that still hold the target's upper layer, instead of
    /// refusing, naming them. A shell merely inside is not killed: the tree it is left in
    /// turns read-only.
    #[arg(long)]
    pub kill: bool,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `fork` arguments.
#[derive(Args, Debug)]
pub struct ForkArgs {
    pub store: PathBuf,
    /// Checkpoint id (or unique prefix), label or branch.
    pub checkpoint: String,
    /// Name of the new branch (`fork STORE C NAME`, like `label STORE C NAME`).
    #[arg(value_name = "NAME", required_unless_present = "name")]
    pub new_branch: Option<String>,
    /// The older spelling of NAME, still accepted: `fork STORE C --name NAME`.
    #[arg(long, value_name = "NAME", conflicts_with = "new_branch")]
    pub name: Option<String>,
    /// Make N branches NAME-1 .. NAME-N at once (1 to 64), all or none: when any of those
    /// names is taken (a branch or a label), none is made and the error names it.
    #[arg(long, value_name = "N")]
    pub count: Option<u32>,
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Subcommand, Debug)]
pub enum BranchCommand {
    /// List branches: head, forked-from, state, last activity, mounted, dirty size.
    List {
        store: PathBuf,
        /// Include archived branches.
        #[arg(long)]
        all: bool,
        /// Show the lineage: each branch under the branch it was forked from (the one whose
        /// line of first parents holds its fork point), with the merges that brought its work
        /// into another branch ("merged into X at CHECKPOINT").
        #[arg(long)]
        tree: bool,
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

/// `ckptfs branch ...`.
pub fn run_branch(c: BranchCommand) -> Result<i32> {
    match c {
        BranchCommand::List {
            store,
            all,
            tree,
            json,
        } => branch_list(&store, all, tree, json.json),
        BranchCommand::Archive { store, name } => branch_archive(&store, &name, true),
        BranchCommand::Unarchive { store, name } => branch_archive(&store, &name, false),
        BranchCommand::Delete { store, name, force } => branch_delete(&store, &name, force),
    }
}

/// `ckptfs checkpoint`.
pub fn run_checkpoint(a: CheckpointArgs) -> Result<i32> {
    let hold = Hold {
        cgroups: a.freeze_cgroup.clone(),
        filesystem: a.freeze_fs,
    };
    checkpoint(&a, &hold)
}

/// `ckptfs exec`.
pub fn run_exec(a: ExecArgs) -> Result<i32> {
    exec(
        &a.place,
        a.branch.as_deref(),
        &a.command,
        a.accept_runtime_change,
        &a.run_as.options(),
    )
}

/// `ckptfs switch`.
pub fn run_switch(a: SwitchArgs) -> Result<i32> {
    switch(
        &a.mountpoint,
        &a.to,
        a.checkpoint_first,
        a.discard,
        a.name.as_deref(),
        a.kill,
        a.json.json,
    )
}

/// `ckptfs fork`.
pub fn run_fork(a: ForkArgs) -> Result<i32> {
    let name = a.new_branch.or(a.name).ok_or_else(|| {
        Error::Usage("fork needs the new branch's NAME: fork STORE CHECKPOINT NAME".into())
    })?;
    let s = ckptfs::remote::open_store(&a.store)?;
    let (id, names) = match a.count {
        None => (workspace::fork(&s, &a.checkpoint, &name)?, vec![name]),
        Some(n) => workspace::fork_numbered(&s, &a.checkpoint, &name, n)?,
    };
    if a.json.json {
        print_json(&serde_json::json!({"checkpoint": id, "branches": names}))?;
    } else {
        for n in &names {
            println!("branch {n} forked from {}", id.short());
        }
    }
    Ok(0)
}

/// `mount STORE --branch B [--root NAME]... [--at DIR --relocate]`. The read-only view's
/// options either apply to the store's lower view (`--cache-size`, when it starts) or are
/// refused, naming the option: a workspace has no daemon of its own to keep in the
/// foreground, and its lower view keeps no file copies.
pub fn mount_branch(a: &super::view::MountArgs, branch: &str) -> Result<i32> {
    let refuse = |what: &str| Err(Error::Usage(format!("mount --branch: {what}")));
    if a.foreground {
        return refuse(
            "--foreground is for read-only views; a workspace is a kernel overlay with no \
             daemon of its own to keep attached",
        );
    }
    if a.file_cache_size != ckptfs::view::materialize::DEFAULT_FILE_CACHE_BYTES {
        return refuse(
            "--file-cache-size does not apply: a workspace's lower view keeps no file copies \
             (overlayfs reads its lower files itself)",
        );
    }
    if a.mount_source.is_some() {
        return refuse("--mount-source is for read-only views mounted by mount.ckptfs");
    }
    if a.relocate && a.at.is_none() {
        return refuse("--relocate confirms --at DIR; give --at too");
    }
    let lower_cache_bytes =
        (a.cache_size != ckptfs::view::DEFAULT_CACHE_BYTES).then_some(a.cache_size);
    let hold = Hold {
        cgroups: a.freeze_cgroups.clone(),
        filesystem: a.freeze_fs,
    };
    let (store, roots, at, relocate, json) = (
        a.store.as_path(),
        a.roots.as_slice(),
        a.at.as_deref(),
        a.relocate,
        a.json,
    );
    let s = ckptfs::remote::open_store(store)?;
    let mut reloc = BTreeMap::new();
    if let Some(at) = at {
        if !relocate {
            return Err(Error::Usage(
                "--at mounts a root away from its recorded path; confirm with --relocate".into(),
            ));
        }
        // As the read-only `mount --at`: the directory must be there (one made here would be
        // left behind by umount).
        if !at.is_dir() {
            return Err(Error::Usage(format!(
                "--at {}: no such directory (make it first)",
                at.display()
            )));
        }
        let name = match roots {
            [one] => one.clone(),
            _ if s.config().roots.len() == 1 => {
                s.config().roots.keys().next().cloned().unwrap_or_default()
            }
            _ => return Err(Error::Usage("--at needs exactly one --root NAME".into())),
        };
        reloc.insert(name, at.to_path_buf());
    }
    let st = workspace::mount(
        &s,
        &MountOptions {
            branch: branch.to_string(),
            roots: roots.to_vec(),
            relocate: reloc,
            hold,
            lower_cache_bytes,
            kill: a.kill,
            fold_budget: a.fold_budget,
        },
    )?;
    workspace::wait_warm(&s, &st, a.warm_wait.unwrap_or(workspace::lower::WARM_WAIT));
    if json {
        print_json(&st)?;
    } else {
        println!(
            "mounted branch {} (checkpoint {}) writable:",
            st.branch,
            st.base.short()
        );
        for (n, r) in &st.roots {
            println!("  {n} at {}", r.mountpoint.display());
        }
        for c in &st.freeze_cgroups {
            println!("  checkpoints freeze cgroup {}", c.display());
        }
        if st.freeze_fs {
            println!(
                "  checkpoints freeze the filesystem of {}",
                s.root().display()
            );
        }
    }
    Ok(0)
}

/// `ckptfs exec`: joins the workspace's cgroup, becomes the agent's user (see
/// `runner::run_as`), then becomes COMMAND, so its exit status
/// (and a death by signal, which a shell shows as 128+N) is the command's own. Only returns
/// when COMMAND cannot be run: as shells do, 127 when it is not found and 126 when it is
/// found but cannot be executed (not executable, a directory, a bad interpreter...).
pub fn exec(
    place: &Path,
    branch: Option<&str>,
    command: &[std::ffi::OsString],
    accept_runtime_change: bool,
    run_as: &ckptfs::runner::run_as::RunAsOptions,
) -> Result<i32> {
    use std::os::unix::process::CommandExt;
    let Some((program, args)) = command.split_first() else {
        return Err(Error::Usage("exec needs a command after --".into()));
    };
    let (s, b) = place::target(place, branch)?;
    super::fingerprint::check_resume(&s, &b, "exec in", accept_runtime_change)?;
    let who = ckptfs::runner::run_as::resolve(&s, &b, run_as)?;
    let cgroup = match workspace::agent_cgroup(&s, &b) {
        Ok(c) => Some(c),
        // Without root and without a delegated cgroup, COMMAND still runs: in none of its own.
        Err(e) if ckptfs::fs::userns::in_child_userns() => {
            eprintln!(
                "ckptfs: warning: {e}; COMMAND runs in no cgroup of its own, so checkpoints \
                 cannot hold its writes"
            );
            None
        }
        Err(e) => return Err(e),
    };
    drop(s);
    // Join first (moving into the cgroup needs root), then become the agent's user.
    if let Some(cgroup) = &cgroup {
        workspace::freeze::join(cgroup)?;
    }
    if let Some(sw) = &who.switch {
        ckptfs::runner::run_as::drop_to(&sw.credentials)?;
    }
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    who.set_env(&mut cmd);
    let err = cmd.exec();
    let code = exec_failure_code(Path::new(program), &err);
    let what = if code == EXIT_NOT_FOUND {
        "command not found"
    } else {
        "cannot execute"
    };
    eprintln!("ckptfs: {what}: {}: {err}", program.to_string_lossy());
    Ok(code)
}

/// Exit status of a shell for a command that is not found (POSIX "Exit Status" of `sh`).
const EXIT_NOT_FOUND: i32 = 127;
/// Exit status of a shell for a command found but not executable.
const EXIT_CANNOT_EXECUTE: i32 = 126;

/// The shell's exit status for a failed exec of `program`: 127 when there is no such
/// command, else 126. ENOENT for a path that exists means its interpreter (`#!`) or loader
/// is missing: the command was found, so 126, as bash says "bad interpreter".
fn exec_failure_code(program: &Path, err: &std::io::Error) -> i32 {
    let names_a_path = program.as_os_str().as_encoded_bytes().contains(&b'/');
    match err.kind() {
        std::io::ErrorKind::NotFound if !(names_a_path && program.exists()) => EXIT_NOT_FOUND,
        _ => EXIT_CANNOT_EXECUTE,
    }
}

/// The fold report's reason after `--no-fold`.
pub const NO_FOLD: &str = "--no-fold";

pub fn checkpoint(a: &CheckpointArgs, hold: &Hold) -> Result<i32> {
    // A bad glob is refused whether or not there is anything to record.
    ckptfs::store::exclude::Excluder::compile("--exclude", &a.exclude).map_err(|e| match e {
        Error::Usage(m) => {
            Error::Usage(m.replacen("root --exclude: bad exclude", "--exclude: bad", 1))
        }
        other => other,
    })?;
    let (s, b) = place::target(&a.place, a.branch.as_deref())?;
    let ann = ckptfs::store::checkpoint::Annotations {
        meta: a.record.meta.to_map()?,
        ..Default::default()
    };
    let o = workspace::CheckpointOptions {
        label: a.record.label.as_deref(),
        message: &a.record.message,
        hold,
        exclude: &a.exclude,
        allow_empty: a.allow_empty,
        annotations: &ann,
    };
    let r = workspace::checkpoint(&s, &b, &o, None)?;
    // The upper layer's recorded bytes leave it now if nobody is inside (see docs/workspaces.md).
    let fold = if a.no_fold {
        workspace::not_folded(&s, &b, NO_FOLD)?
    } else {
        workspace::fold(&s, &b)?
    };
    if a.json.json {
        let mut v =
            serde_json::to_value(&r).map_err(|e| Error::Invalid(format!("encoding JSON: {e}")))?;
        super::json::fix_checkpoint(&mut v["checkpoint"]);
        v["labels"] = super::json::labels_of(&s.list_labels()?, &r.id).into();
        v["fold"] = serde_json::to_value(&fold)
            .map_err(|e| Error::Invalid(format!("encoding JSON: {e}")))?;
        print_json(&v)?;
        return Ok(0);
    }
    print_checkpoint(&b, &r);
    print_fold(&fold);
    Ok(0)
}

/// The text report of a checkpoint.
fn print_checkpoint(b: &str, r: &workspace::CheckpointReport) {
    if !r.recorded {
        println!(
            "nothing new on {b}: checkpoint {} already records the workspace; nothing recorded \
             (--allow-empty records one anyway)",
            r.id.short()
        );
    } else {
        let st = &r.checkpoint.stats;
        let unread = if r.bytes_unread > 0 {
            format!(
                ", {} of it unchanged by reflink snapshot, not read",
                human_bytes(r.bytes_unread)
            )
        } else {
            String::new()
        };
        println!(
            "checkpoint {} on {}: {} files read ({}{}), {} directories merged, {} new objects, \
             {} new, {} ms",
            r.id.short(),
            b,
            r.files_read,
            human_bytes(r.bytes_read),
            unread,
            r.dirs_merged,
            st.new_objects,
            human_bytes(st.new_bytes),
            r.elapsed_ms
        );
        if let Some(h) = &r.held {
            println!(
                "writers held for {:.1} ms; {} files ({}) read meanwhile",
                h.micros as f64 / 1000.0,
                h.files_read,
                human_bytes(h.bytes_read)
            );
        } else if ckptfs::fs::userns::in_child_userns() {
            // Without root, writers are held only in a cgroup delegated to the account.
            eprintln!(
                "ckptfs: note: writers were not held for this checkpoint: {}",
                workspace::freeze::NO_DELEGATION
            );
        }
    }
    print_merge_progress(r);
}

/// What a checkpoint did with the merge in progress in its workspace.
fn print_merge_progress(r: &workspace::CheckpointReport) {
    let Some(m) = &r.merge else { return };
    let source = quote::text(&m.source);
    if m.recorded {
        println!(
            "merge of {source} recorded: parents {}",
            r.checkpoint
                .parents
                .iter()
                .map(|p| p.short())
                .collect::<Vec<_>>()
                .join(" and ")
        );
    } else if m.interrupted {
        println!(
            "the merge of {source} was cut short while being written into the workspace: not recorded as a merge; `ckptfs merge --abort` puts the workspace back"
        );
    } else {
        let paths: Vec<String> = m
            .unresolved
            .iter()
            .map(|p| quote::name(p.as_bytes()).to_string())
            .collect();
        println!(
            "merge of {source} still in progress, not recorded: {} conflicts unresolved: {}",
            paths.len(),
            paths.join(", ")
        );
    }
}

/// The text report of a fold (nothing when there was nothing to fold).
fn print_fold(f: &workspace::FoldReport) {
    if f.folded {
        println!(
            "folded the upper layer into the checkpoint: {} files ({}) now only in the store",
            f.upper_files - f.kept_files.min(f.upper_files),
            human_bytes(f.upper_bytes - f.kept_bytes.min(f.upper_bytes))
        );
        if f.kept_files > 0 {
            println!(
                "kept in the upper layer, written last: {} files ({}), also in the store",
                f.kept_files,
                human_bytes(f.kept_bytes)
            );
        }
    } else if f.upper_bytes > 0 || !f.holders.is_empty() {
        let why = match (&f.reason, f.holders.first()) {
            (_, Some(h)) => format!(
                "pid {} ({}) is inside ({} {}){}",
                h.pid,
                quote::text(&h.command),
                h.how,
                quote::path(&h.path),
                if f.holders.len() > 1 {
                    format!(" and {} more", f.holders.len() - 1)
                } else {
                    String::new()
                }
            ),
            (Some(r), None) => r.clone(),
            (None, None) => "not folded".into(),
        };
        println!(
            "upper layer: {} files ({}) waiting to be folded: {why}; folded at the next \
             checkpoint with nobody inside, or at the next switch",
            f.upper_files,
            human_bytes(f.upper_bytes)
        );
    }
}

pub fn switch(
    mountpoint: &Path,
    to: &str,
    checkpoint_first: bool,
    discard: bool,
    name: Option<&str>,
    kill: bool,
    json: bool,
) -> Result<i32> {
    let policy = match (checkpoint_first, discard) {
        (true, true) => {
            return Err(Error::Usage(
                "--checkpoint-first and --discard exclude each other".into(),
            ))
        }
        (true, false) => DirtyPolicy::CheckpointFirst,
        (false, true) => DirtyPolicy::Discard,
        (false, false) => DirtyPolicy::Refuse,
    };
    let (s, st) = place::find_workspace(mountpoint)?;
    let r = workspace::switch_killing(&s, &st.branch, to, policy, name, kill)?;
    // As `mount --branch`: wait (bounded) for the lower view's warm-up of the new base, so
    // the first walk after the switch finds its entries cached.
    if let Some(now) = workspace::state(&s, &r.to_branch)? {
        workspace::wait_warm(&s, &now, workspace::lower::WARM_WAIT);
    }
    if json {
        print_json(&r)?;
    } else {
        if let Some(c) = r.checkpointed {
            println!("checkpointed {} first as {}", r.from_branch, c.short());
        }
        if let Some(d) = &r.displaced {
            println!(
                "un-checkpointed changes of {} set aside in {}",
                r.from_branch,
                d.display()
            );
        }
        println!(
            "switched {} -> {}{} (checkpoint {}) in {} ms",
            r.from_branch,
            r.to_branch,
            if r.created_branch {
                " (new branch)"
            } else {
                ""
            },
            r.checkpoint.short(),
            r.elapsed_ms
        );
        if r.resumed {
            println!(
                "{}'s parked tree moved back, with its cached inodes",
                r.to_branch
            );
        }
        if r.parked_left {
            println!(
                "{}'s tree is parked read-only (a switch back moves it back; its upper layer \
                 waits meanwhile)",
                r.from_branch
            );
        }
        print_left_behind(&r);
    }
    Ok(0)
}

/// Who a switch left inside the tree it took away, and what their writes do.
fn print_left_behind(r: &workspace::SwitchReport) {
    for h in &r.left_behind {
        println!(
            "pid {} ({}) is still in the tree of {} left behind ({} {}): its writes there fail \
             (read-only); `cd \"$PWD\"` brings a shell to {}",
            h.pid,
            h.command,
            r.from_branch,
            h.how,
            h.path.display(),
            r.to_branch
        );
    }
}

/// Umount of a workspace mountpoint; `Ok(None)` when the path is not a workspace.
pub fn umount(mountpoint: &Path, kill: bool) -> Result<Option<i32>> {
    let Ok((s, st)) = place::find_workspace(mountpoint) else {
        return Ok(None);
    };
    // The same definition of dirty as status and switch (an error telling it is not fatal).
    let dirty = workspace::is_dirty(&s, &st.branch).unwrap_or(true);
    for (p, how) in workspace::umount_killing(&s, &st.branch, kill)? {
        match how {
            workspace::overlay::Unmounted::Clean => println!("unmounted {}", p.display()),
            workspace::overlay::Unmounted::Detached => println!(
                "detached {} (still in use; the kernel frees it when the last user leaves)",
                p.display()
            ),
        }
    }
    if dirty {
        println!(
            "branch {} has un-checkpointed changes: they stay in {} (`ckptfs mount {} --branch {}` resumes them)",
            st.branch,
            s.upper_branch_dir(&st.branch).display(),
            s.root().display(),
            st.branch
        );
    }
    Ok(Some(0))
}

pub fn branch_list(store: &Path, all: bool, tree: bool, json: bool) -> Result<i32> {
    let s = ckptfs::remote::open_store(store)?;
    let mut rows = Vec::new();
    let branches = s.list_branches()?;
    if tree {
        return branch_tree(&s, &branches, all, json);
    }
    for (name, b) in branches {
        if b.state == "archived" && !all {
            continue;
        }
        rows.push(branch_row(&s, &name, &b)?);
    }
    if json {
        print_json(&rows)?;
    } else {
        let mut t = Table::with_header(&[
            "BRANCH",
            "HEAD",
            "FORKED-FROM",
            "STATE",
            "LAST-ACTIVITY",
            "MOUNTED",
            "DIRTY",
        ]);
        let short =
            |v: &serde_json::Value| v.as_str().map_or("-".to_string(), |h| h[..12].to_string());
        for r in &rows {
            t.row(vec![
                r["name"].as_str().unwrap_or("").to_string(),
                short(&r["head"]),
                short(&r["forked_from"]),
                r["state"].as_str().unwrap_or("").to_string(),
                local_of_utc(r["last_activity"].as_str().unwrap_or("")),
                if r["mounted"].as_bool() == Some(true) {
                    "yes".to_string()
                } else if r["parked"].as_bool() == Some(true) {
                    format!(
                        "parked ({} waiting)",
                        human_bytes(r["upper_bytes"].as_u64().unwrap_or(0))
                    )
                } else {
                    "no".to_string()
                },
                if r["dirty"].as_bool() == Some(true) {
                    format!(
                        "{} files, {}",
                        r["dirty_files"],
                        human_bytes(r["dirty_bytes"].as_u64().unwrap_or(0))
                    )
                } else {
                    "-".into()
                },
            ]);
        }
        t.print();
    }
    Ok(0)
}

/// One `branch list` row (`--json`'s `BranchRow`).
fn branch_row(
    s: &ckptfs::Store,
    name: &str,
    b: &ckptfs::store::refs::Branch,
) -> Result<serde_json::Value> {
    let mounted = workspace::is_mounted(s, name)?;
    let parked = !mounted && workspace::is_parked(s, name)?;
    let (upper_files, upper_bytes) = workspace::upper_usage(s, name);
    let dirty = if upper_files > 0 || s.upper_branch_dir(name).exists() {
        workspace::dirty(s, name).ok()
    } else {
        None
    };
    let last = b
        .head
        .and_then(|h| s.read_checkpoint(&h).ok())
        .map_or(b.updated_ns, |c| c.time_ns.max(b.updated_ns));
    Ok(serde_json::json!({
        "name": name, "head": b.head, "forked_from": b.forked_from, "state": b.state,
        "last_activity": ckptfs::text::time::format_rfc3339(last), "mounted": mounted,
        "parked": parked,
        "dirty": dirty.as_ref().is_some_and(|d| d.dirty),
        "dirty_files": dirty.as_ref().map_or(0, |d| d.files_changed),
        "dirty_bytes": dirty.as_ref().map_or(0, |d| d.bytes_changed),
        "upper_bytes": upper_bytes,
    }))
}

/// `branch list --tree`: the rows in tree order, each with its `lineage`; in text, one line
/// per branch drawn as `tree --charset=ascii` draws directories, then its fork point and
/// merges.
fn branch_tree(
    s: &ckptfs::Store,
    branches: &[(String, ckptfs::store::refs::Branch)],
    all: bool,
    json: bool,
) -> Result<i32> {
    use ckptfs::history::lineage;
    let l = lineage::lineage(s, branches);
    for p in &l.problems {
        eprintln!("ckptfs: warning: {p}; the branch lines stop there (run `ckptfs doctor`)");
    }
    let state: BTreeMap<&str, &ckptfs::store::refs::Branch> =
        branches.iter().map(|(n, b)| (n.as_str(), b)).collect();
    let shown = |n: &str| all || state.get(n).is_some_and(|b| b.state != "archived");
    let created = |n: &str| state.get(n).map_or(0, |b| b.created_ns);
    let order = l.tree(shown, created);
    if json {
        let mut rows = Vec::new();
        for &(i, depth) in &order {
            let (name, b) = &branches[i];
            let bl = &l.branches[i];
            let mut row = branch_row(s, name, b)?;
            row["lineage"] = serde_json::json!({
                "parent": bl.parent,
                "depth": depth,
                "merged_into": bl.merged_into.iter().map(|m| serde_json::json!({
                    "branch": m.branch, "checkpoint": m.checkpoint,
                    "time": ckptfs::text::time::format_rfc3339(m.time_ns),
                })).collect::<Vec<_>>(),
            });
            rows.push(row);
        }
        print_json(&rows)?;
        return Ok(0);
    }
    // Whether each depth still has a sibling to come, for the `|` of the lines between.
    let mut open: Vec<bool> = Vec::new();
    for (k, &(i, depth)) in order.iter().enumerate() {
        let (name, b) = &branches[i];
        let bl = &l.branches[i];
        let last_sibling = order[k + 1..]
            .iter()
            .take_while(|(_, d)| *d >= depth)
            .all(|(_, d)| *d != depth);
        open.truncate(depth);
        let mut line = String::new();
        for more in open.iter().skip(1) {
            line.push_str(if *more { "|   " } else { "    " });
        }
        if depth > 0 {
            line.push_str(if last_sibling { "`-- " } else { "|-- " });
        }
        open.push(!last_sibling);
        line.push_str(name);
        let head = b
            .head
            .map_or("no head".to_string(), |h| format!("head {}", h.short()));
        let mut facts = vec![head];
        match (&bl.parent, bl.forked_from) {
            (Some(p), Some(f)) => facts.push(format!("forked from {p} at {}", f.short())),
            (None, Some(f)) => facts.push(format!("forked at {}", f.short())),
            _ => {}
        }
        for m in &bl.merged_into {
            facts.push(format!(
                "merged into {} at {}",
                m.branch,
                m.checkpoint.short()
            ));
        }
        if b.state == "archived" {
            facts.push("archived".into());
        }
        println!("{}  {}", quote::text(&line), facts.join(", "));
    }
    Ok(0)
}

pub fn branch_archive(store: &Path, name: &str, archived: bool) -> Result<i32> {
    let s = ckptfs::remote::open_store(store)?;
    workspace::set_archived(&s, name, archived)?;
    println!(
        "branch {name} {}",
        if archived {
            "archived (hidden from `branch list`; `branch unarchive` brings it back)"
        } else {
            "unarchived"
        }
    );
    Ok(0)
}

pub fn branch_delete(store: &Path, name: &str, force: bool) -> Result<i32> {
    let s = ckptfs::remote::open_store(store)?;
    let displaced = workspace::delete_branch(&s, name, force)?;
    println!(
        "branch {name} deleted (its checkpoints stay until `ckptfs gc` finds them unreachable)"
    );
    if let Some(d) = displaced {
        println!("its workspace layer was moved to {}", d.display());
    }
    Ok(0)
}
