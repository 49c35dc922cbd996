//! CLI of `ckptfs find`: which checkpoints hold paths matching a glob, and when one path
//! changed (`--history`). The search is `ckptfs::history::find`'s (its module doc says how
//! patterns match and what counts as a change); docs/json.md documents the JSON.

use std::path::PathBuf;

use clap::Args;

use ckptfs::history::find::{find, path_history, FindOptions};
use ckptfs::text::time::format_local;
use ckptfs::units::human_bytes;
use ckptfs::{Error, Result};

use super::{print_json, JsonFlag};

/// `find` arguments.
#[derive(Args, Debug)]
#[command(
    after_help = "Patterns: one without '/' matches an entry's name (like find -name);\n\
    one with '/' matches the whole path ROOT/PATH ('*' within a component, '**' across).\n\n\
    Changes (--history): added, removed, type, modified (content; for a directory anything\n\
    below it), metadata (mode, owner, mtime, xattrs); each checkpoint is compared with its\n\
    first parent, as `git log -- PATH` does.\n\n\
    Examples:\n  \
    ckptfs find STORE '*.sqlite'                 every checkpoint holding a *.sqlite file\n  \
    ckptfs find STORE 'ws/src/**/*.rs' --since 2d\n  \
    ckptfs find STORE --history ws/notes.md      when did ws/notes.md change?"
)]
pub struct FindArgs {
    /// The store directory.
    pub store: PathBuf,
    /// Glob patterns (any of them matches). Not with --history.
    #[arg(required_unless_present = "history", conflicts_with = "history")]
    pub patterns: Vec<String>,
    /// List the checkpoints in which ROOT/PATH changed instead of matching patterns.
    #[arg(long, value_name = "ROOT/PATH")]
    pub history: Option<String>,
    /// Only this root.
    #[arg(long)]
    pub root: Option<String>,
    /// Only this branch's history (its head along first parents, as `log --branch`).
    #[arg(long, short)]
    pub branch: Option<String>,
    /// Only checkpoints taken at or after WHEN (as `log --since`: 2h, 7days, an RFC 3339
    /// time or a date).
    #[arg(long, value_name = "WHEN", value_parser = super::history::since_arg)]
    pub since: Option<i64>,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `ckptfs find`.
pub fn run_find(a: FindArgs) -> Result<i32> {
    let s = ckptfs::remote::open_store(&a.store)?;
    if let Some(b) = &a.branch {
        ckptfs::store::refs::check_name("branch", b)?;
    }
    let opts = FindOptions {
        root: a.root.clone(),
        branch: a.branch.clone(),
        since_ns: a.since,
    };
    if let Some(path) = &a.history {
        if let Some(r) = &a.root {
            if !path.trim_start_matches('/').starts_with(&format!("{r}/")) {
                return Err(Error::Usage(format!(
                    "--history {path}: not in --root {r} (the path starts with its root)"
                )));
            }
        }
        let r = path_history(&s, path, &opts)?;
        if a.json.json {
            print_json(&r)?;
            return Ok(0);
        }
        if r.changes.is_empty() {
            println!(
                "{}: no change in {} checkpoints",
                ckptfs::text::quote::name(r.path.as_bytes()),
                r.checkpoints_searched
            );
        }
        for c in &r.changes {
            let what = c.entry.as_ref().map_or(String::new(), |e| {
                format!("  {} {} {}", e.kind, e.mode, human_bytes(e.size))
            });
            println!(
                "{}  {}  {:<8}  {}{what}",
                c.checkpoint.id.short(),
                format_local(c.checkpoint.time_ns),
                c.change,
                c.checkpoint.branch
            );
        }
        return Ok(0);
    }
    let r = find(&s, &a.patterns, &opts)?;
    if a.json.json {
        print_json(&r)?;
        return Ok(0);
    }
    if r.paths.is_empty() {
        eprintln!("no path matches in {} checkpoints", r.checkpoints_searched);
    }
    for p in &r.paths {
        println!(
            "{}  (in {} checkpoints)",
            ckptfs::text::quote::name(p.path.as_bytes()),
            p.found_in.len()
        );
        for f in &p.found_in {
            println!(
                "  {}  {}  {}  {} {} {}",
                f.checkpoint.id.short(),
                format_local(f.checkpoint.time_ns),
                f.checkpoint.branch,
                f.entry.kind,
                f.entry.mode,
                human_bytes(f.entry.size)
            );
        }
    }
    Ok(0)
}
