//! `ckptfs merge`: three-way merge of a branch (or checkpoint) into a branch.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use ckptfs::merge::{self, FastForward, MergeOptions, MergeReport, Take};
use ckptfs::text::quote;
use ckptfs::workspace::place;
use ckptfs::Result;

use super::{print_json, JsonFlag};

/// `--take`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum TakeArg {
    Ours,
    Theirs,
}

/// `merge` arguments.
#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The store, or a mounted workspace (its mountpoint or a path inside it: the merge goes
    /// into that workspace's branch).
    pub store: PathBuf,
    /// What to merge in ("theirs"): a branch, a label or a checkpoint id (or unique prefix).
    #[arg(required_unless_present = "abort")]
    pub source: Option<String>,
    /// The branch to merge into ("ours"); it moves to the merge checkpoint. Default: the
    /// workspace STORE names or the current directory is in, else main. A mounted branch
    /// gets the merge written into its workspace (see --abort).
    #[arg(long, value_name = "BRANCH")]
    pub into: Option<String>,
    /// Give up the merge in progress in the workspace: every change since it started is
    /// undone (checkpoints recorded meanwhile stay in history).
    #[arg(long, conflicts_with_all = ["source", "take", "dry_run", "no_ff", "ff_only", "message"])]
    pub abort: bool,
    /// Print the plan and the conflicts; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Resolve conflicts by keeping one side: for text, that side of each conflicting hunk
    /// (both sides' clean changes stay); for SQLite, that side of each conflicting row; for
    /// anything else (binary, deleted on one side, a type change), that side's entry. With
    /// paths after `--`, only conflicts at or under those ROOT/PATHs.
    #[arg(long, value_enum, value_name = "SIDE")]
    pub take: Option<TakeArg>,
    /// Message of the merge checkpoint (default "merge SOURCE into BRANCH").
    #[arg(short, long)]
    pub message: Option<String>,
    /// Record a merge checkpoint even when BRANCH could simply move to SOURCE.
    #[arg(long, conflicts_with = "ff_only")]
    pub no_ff: bool,
    /// Only move BRANCH forward to SOURCE; refuse (exit 2) if they diverged.
    #[arg(long)]
    pub ff_only: bool,
    /// ROOT/PATHs `--take` applies to (after `--`).
    #[arg(last = true, value_name = "PATH")]
    pub paths: Vec<String>,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// The store and the branch merged into: `--into`, else the workspace STORE names, else
/// the one the current directory is in, else main.
fn target(a: &MergeArgs) -> Result<(ckptfs::Store, String)> {
    let (s, named) = match place::resolve_place(&a.store)? {
        place::Place::Store(s) => (s, None),
        place::Place::Workspace(s, st) => (s, Some(st.branch)),
    };
    if let Some(b) = a.into.clone().or(named) {
        return Ok((s, b));
    }
    let here = std::env::current_dir()
        .ok()
        .and_then(|cwd| ckptfs::workspace::find_by_path(&s, &cwd).ok().flatten());
    let b = here.map_or_else(
        || ckptfs::store::refs::DEFAULT_BRANCH.to_string(),
        |st| st.branch,
    );
    Ok((s, b))
}

pub fn run_merge(a: MergeArgs) -> Result<i32> {
    if !a.paths.is_empty() && a.take.is_none() {
        return Err(ckptfs::Error::Usage(
            "paths after -- say where --take applies; give --take ours or --take theirs".into(),
        ));
    }
    let (s, into) = target(&a)?;
    if a.abort {
        let r = merge::abort(&s, &into)?;
        if a.json.json {
            print_json(&r)?;
        } else {
            println!(
                "merge of {} aborted: the workspace of {} holds {} again ({} entries written, {} removed)",
                quote::text(&r.source),
                r.into,
                r.restored.short(),
                r.applied.written,
                r.applied.removed
            );
        }
        return Ok(0);
    }
    let opts = MergeOptions {
        into,
        source: a.source.unwrap_or_default(),
        dry_run: a.dry_run,
        take: a.take.map(|t| match t {
            TakeArg::Ours => Take::Ours,
            TakeArg::Theirs => Take::Theirs,
        }),
        take_paths: a
            .paths
            .iter()
            .map(|p| p.trim_matches('/').to_string())
            .collect(),
        message: a.message,
        fast_forward: if a.no_ff {
            FastForward::Never
        } else if a.ff_only {
            FastForward::Only
        } else {
            FastForward::Allow
        },
    };
    let r = merge::merge(&s, &opts)?;
    if a.json.json {
        print_json(&r)?;
    } else {
        print_text(&r);
    }
    Ok(if r.open_conflicts() > 0 { 1 } else { 0 })
}

fn print_text(r: &MergeReport) {
    let base = r
        .base
        .map_or("none (unrelated histories)".into(), |b| b.short());
    println!(
        "merging {} ({}) into {} ({}), base {base}",
        quote::text(&r.source),
        r.theirs.short(),
        r.into,
        r.ours.short()
    );
    if !r.other_bases.is_empty() {
        println!(
            "  ({} other nearest common ancestors; the newest was used)",
            r.other_bases.len()
        );
    }
    for s in &r.steps {
        let letter = match s.how.as_str() {
            "added" => 'A',
            "removed" => 'D',
            "renamed" => 'R',
            _ => 'M',
        };
        let driver = s
            .driver
            .as_ref()
            .map_or(String::new(), |d| format!("  merged ({d})"));
        let from = s
            .from
            .as_ref()
            .map_or(String::new(), |f| format!("{} -> ", quote::text(f)));
        println!("  {letter} {from}{}{driver}", quote::text(&s.path));
    }
    for c in &r.conflicts {
        let resolved = match c.resolved {
            Some(Take::Ours) => " -> kept ours",
            Some(Take::Theirs) => " -> took theirs",
            None => "",
        };
        println!(
            "CONFLICT ({}): {}: {}{resolved}",
            c.kind,
            quote::text(&c.path),
            quote::text(&c.detail)
        );
        for row in &c.rows {
            let key = row
                .key
                .as_deref()
                .map_or(String::new(), |k| format!(", key {k}"));
            println!("    table {}{key}: {}", quote::text(&row.table), row.why);
        }
    }
    let open = r.open_conflicts();
    if let Some(w) = &r.workspace {
        let at: Vec<String> = w
            .mountpoints
            .values()
            .map(|p| quote::path(p).to_string())
            .collect();
        println!(
            "workspace {}: {} entries written, {} removed",
            at.join(", "),
            w.applied.written,
            w.applied.removed
        );
        if w.in_progress {
            println!(
                "merge in progress: resolve the conflicts in the workspace (text files hold git's markers), or keep one side with --take ours|theirs [-- ROOT/PATH...]; then `ckptfs checkpoint` records the merge. `ckptfs merge --abort` gives up."
            );
            return;
        }
    }
    match (r.outcome.as_str(), r.checkpoint) {
        ("up-to-date", _) => println!(
            "already up to date: {} is in {}'s history",
            r.theirs.short(),
            r.into
        ),
        ("fast-forward", Some(c)) => println!("fast-forward: {} moved to {}", r.into, c.short()),
        ("merged", Some(c)) => println!(
            "merged: checkpoint {} on {} (parents {} and {})",
            c.short(),
            r.into,
            r.ours.short(),
            r.theirs.short()
        ),
        _ if r.dry_run && open == 0 => println!("dry run: the merge is clean; nothing written"),
        _ if r.dry_run => println!("dry run: {open} conflicts; nothing written"),
        _ => println!(
            "{open} conflicts: nothing recorded. Keep one side with --take ours|theirs \
             [-- ROOT/PATH...]"
        ),
    }
}
