//! CLI of the commands that look at history: log, show, ls, cat, diff. Rendering of `log`
//! lives in `ckptfs::ops::history`; this prints it.

use std::io::{self, Write};
use std::path::PathBuf;

use clap::Args;

use ckptfs::ops::walk::{locate, walk_tree};
use ckptfs::ops::{diff, history};
use ckptfs::store::tree::EntryKind;
use ckptfs::util::{format_rfc3339, format_utc, human_bytes};
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
    /// Show only the N newest checkpoints (of those --branch and --since select).
    #[arg(short = 'n', long = "max-count", value_name = "N")]
    pub max_count: Option<usize>,
    /// Show only checkpoints taken at or after WHEN: a duration back from now (2h, 90min,
    /// 36h, 7d, 7days, 1week, 1d12h, "2h 30m"; m is minutes, M months) or a UTC time in
    /// RFC 3339 (2026-12-01T08:00:00Z, with an offset +01:00, or a date 2026-12-01).
    #[arg(long, value_name = "WHEN", value_parser = since_arg)]
    pub since: Option<i64>,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `--since WHEN` as Unix nanoseconds: now minus a duration, or an RFC 3339 time.
fn since_arg(s: &str) -> std::result::Result<i64, String> {
    let s = s.trim();
    if let Ok(d) = humantime::parse_duration(s) {
        let back = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        return Ok(ckptfs::util::now_ns().saturating_sub(back));
    }
    parse_time(s).ok_or_else(|| {
        format!(
            "{s:?} is neither a duration (2h, 7days, 1week) nor an RFC 3339 time \
             (2026-12-01T08:00:00Z, 2026-12-01T09:00:00+01:00, 2026-12-01)"
        )
    })
}

/// An RFC 3339 time (`Z`, a `+HH:MM`/`-HH:MM` offset, or none for UTC; `T` or a space) or a
/// bare date (midnight UTC), as Unix nanoseconds.
fn parse_time(s: &str) -> Option<i64> {
    if s.len() == 10 {
        return parse_time(&format!("{s}T00:00:00Z"));
    }
    // humantime reads UTC only: take an offset off and apply it here.
    let split = s
        .len()
        .checked_sub(6)
        .filter(|&i| s.is_char_boundary(i))
        .map(|i| s.split_at(i));
    let (base, offset_s) = match split {
        Some((base, off)) if off.starts_with(['+', '-']) && off.get(3..4) == Some(":") => {
            let h: i64 = off.get(1..3)?.parse().ok()?;
            let m: i64 = off.get(4..6)?.parse().ok()?;
            let sign = if off.starts_with('-') { -1 } else { 1 };
            (base, sign * (h * 3600 + m * 60))
        }
        _ => (s, 0),
    };
    let t = humantime::parse_rfc3339_weak(base).ok()?;
    let ns = match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).ok()?,
        Err(e) => -i64::try_from(e.duration().as_nanos()).ok()?,
    };
    ns.checked_sub(offset_s.checked_mul(1_000_000_000)?)
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
    let mut h = history::history(&s, a.branch.as_deref())?;
    let (names, ref_problems) = history::names_lenient(&s, a.graph && !a.json.json)?;
    for p in h.problems.iter().chain(&ref_problems) {
        eprintln!("ckptfs: warning: {p}; left out (run `ckptfs doctor`)");
    }
    let listed = h.items.len();
    if let Some(since) = a.since {
        h.items.retain(|(_, c)| c.time_ns >= since);
    }
    if let Some(n) = a.max_count {
        h.items.truncate(n);
    }
    // Only a listing that reaches the end of the line of parents ends where gc pruned it.
    if let Some(id) = h.pruned_before.filter(|_| h.items.len() == listed) {
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
    println!("time       {}", format_rfc3339(c.time_ns));
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
