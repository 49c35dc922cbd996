//! CLI of the commands that look at history: log, show, ls, cat, diff. Rendering of `log`
//! lives in `ckptfs::ops::history`; this prints it.

use std::io::{self, Write};
use std::path::PathBuf;

use clap::Args;

use ckptfs::ops::walk::{locate, walk_tree};
use ckptfs::ops::{diff, history};
use ckptfs::store::tree::EntryKind;
use ckptfs::util::{format_utc, human_bytes};
use ckptfs::{Error, Result, Store};

use super::{print_json, JsonFlag};

/// `log` arguments.
#[derive(Args, Debug)]
pub struct LogArgs {
    pub store: PathBuf,
    /// Only this branch's history (following parents from its head).
    #[arg(long, short)]
    pub branch: Option<String>,
    /// Draw checkpoints with their forks, the way `git log --graph` does.
    #[arg(long)]
    pub graph: bool,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `show` arguments.
#[derive(Args, Debug)]
pub struct ShowArgs {
    pub store: PathBuf,
    /// Checkpoint id (or unique prefix), label or branch.
    pub checkpoint: String,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `ls` arguments.
#[derive(Args, Debug)]
pub struct LsArgs {
    pub store: PathBuf,
    /// CHECKPOINT[:ROOT[/PATH]]
    pub spec: String,
    /// List recursively.
    #[arg(short, long)]
    pub recursive: bool,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `cat` arguments.
#[derive(Args, Debug)]
pub struct CatArgs {
    pub store: PathBuf,
    /// CHECKPOINT:ROOT/PATH
    pub spec: String,
}

/// `diff` arguments.
#[derive(Args, Debug)]
pub struct DiffArgs {
    pub store: PathBuf,
    pub a: String,
    pub b: String,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `ckptfs log [--branch B] [--graph | --json]`. A record or label that does not read is
/// named in one warning line on stderr and left out; the rest is listed and the exit code
/// stays 0 (a listing, as restic's: `doctor` and `verify` are the checks that fail).
pub fn run_log(a: LogArgs) -> Result<i32> {
    let s = Store::open(&a.store)?;
    let h = history::history(&s, a.branch.as_deref())?;
    let (names, ref_problems) = history::names_lenient(&s, a.graph && !a.json.json)?;
    for p in h.problems.iter().chain(&ref_problems) {
        eprintln!("ckptfs: warning: {p}; left out (run `ckptfs doctor`)");
    }
    if let Some(id) = h.pruned_before {
        eprintln!("(history before {} was pruned by gc)", id.short());
    }
    let labels: Vec<_> = names
        .iter()
        .filter(|(n, _)| !n.starts_with("branch:"))
        .cloned()
        .collect();
    // Gaps print in place in text; beside JSON and the graph they go to stderr, so those
    // keep their format.
    let inline_gaps = !a.graph && !a.json.json;
    if !inline_gaps {
        for g in &h.gaps {
            eprintln!("(forgotten: {})", g.line());
        }
    }
    if a.graph && !a.json.json {
        for line in history::graph_lines(&h.items, &names) {
            println!("{line}");
        }
        return Ok(0);
    }
    if a.json.json {
        let rows: Vec<_> = h
            .items
            .iter()
            .map(|(id, c)| history::log_row(id, c, &labels))
            .collect();
        print_json(&rows)?;
    } else {
        // A reader that stops early (`| head`) is not an error.
        let mut out = io::stdout().lock();
        for (i, (id, c)) in h.items.iter().enumerate() {
            for g in h.gaps.iter().filter(|g| g.before_item == i) {
                let _ignored = writeln!(out, "  ... {}", g.line());
            }
            let _ignored = writeln!(out, "{}", history::log_line(id, c, &labels));
        }
        for g in h.gaps.iter().filter(|g| g.before_item == h.items.len()) {
            let _ignored = writeln!(out, "  ... {}", g.line());
        }
    }
    Ok(0)
}

/// `ckptfs show`.
pub fn run_show(a: ShowArgs) -> Result<i32> {
    let s = Store::open(&a.store)?;
    let id = s.resolve(&a.checkpoint)?;
    let c = s.read_checkpoint(&id)?;
    if a.json.json {
        print_json(&serde_json::json!({"id": id, "checkpoint": c}))?;
        return Ok(0);
    }
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
    Ok(0)
}

/// `ckptfs ls`.
pub fn run_ls(a: LsArgs) -> Result<i32> {
    let s = Store::open(&a.store)?;
    let loc = locate(&s, &a.spec)?;
    let mut rows = Vec::new();
    match loc.dir_tree() {
        Some(t) => {
            if a.recursive {
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
    if a.json.json {
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
        return Ok(0);
    }
    let mut out = io::stdout().lock();
    for (p, e) in &rows {
        let t = match e.kind {
            EntryKind::File { .. } => '-',
            EntryKind::Dir { .. } => 'd',
            EntryKind::Symlink { .. } => 'l',
        };
        let tail = match &e.kind {
            EntryKind::Symlink { target } => format!(" -> {}", String::from_utf8_lossy(target)),
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
    Ok(0)
}

/// `ckptfs cat`.
pub fn run_cat(a: CatArgs) -> Result<i32> {
    let s = Store::open(&a.store)?;
    let loc = locate(&s, &a.spec)?;
    let Some(e) = &loc.entry else {
        return Err(Error::Usage(format!("{}: is a directory", a.spec)));
    };
    let EntryKind::File { chunks } = &e.kind else {
        return Err(Error::Usage(format!("{}: not a regular file", a.spec)));
    };
    let mut out = io::stdout().lock();
    for c in chunks {
        let data = s.read_chunk(c)?;
        out.write_all(&data)
            .map_err(|e| Error::io_op("writing stdout", e))?;
    }
    out.flush().map_err(|e| Error::io_op("writing stdout", e))?;
    Ok(0)
}

/// `ckptfs diff`.
pub fn run_diff(a: DiffArgs) -> Result<i32> {
    let s = Store::open(&a.store)?;
    let ia = s.resolve(&a.a)?;
    let ib = s.resolve(&a.b)?;
    let changes = diff::diff(&s, &s.read_checkpoint(&ia)?, &s.read_checkpoint(&ib)?)?;
    if a.json.json {
        print_json(&changes)?;
    } else {
        let mut out = io::stdout().lock();
        for c in &changes {
            let _ignored = writeln!(out, "{:<9} {}", c.change, c.path);
        }
    }
    Ok(0)
}
