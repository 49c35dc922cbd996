//! CLI of the commands that look at history: log, show, ls, cat, diff. Rendering of `log`
//! lives in `ckptfs::history::timeline`; this prints it.

use ckptfs::text::quote;
use std::io::{self, Write};
use std::path::PathBuf;

use clap::Args;

use ckptfs::history::walk::{locate, walk_tree};
use ckptfs::history::{diff, timeline};
use ckptfs::store::tree::EntryKind;
use ckptfs::text::time::format_local;
use ckptfs::units::human_bytes;
use ckptfs::{Error, Result, Store};

use super::table::Table;
use super::{print_json, JsonFlag};

/// `log` arguments.
#[derive(Args, Debug)]
pub struct LogArgs {
    pub store: PathBuf,
    /// Only this branch's history (following parents from its head).
    #[arg(long, short)]
    pub branch: Option<String>,
    /// Draw checkpoints with their forks and merges, the way `git log --graph` draws
    /// commits (with --branch: its line of first parents, one lane).
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
    /// Show only checkpoints whose metadata has KEY equal to VALUE (a string as given, other
    /// values as JSON text: turn=3, ok=true). Repeatable: all must match.
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    pub meta: Vec<String>,
    /// List turns (`ckptfs turn`) from the audit log instead, newest first: id, start,
    /// branch, outcome (ok, failed, killed, cannot-run, checkpoint-failed, crashed,
    /// interrupted, running) and exit status, checkpoint, command. With --branch and -n.
    #[arg(long, conflicts_with_all = ["graph", "since", "meta"])]
    pub turns: bool,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `--since WHEN` as Unix nanoseconds: now minus a duration, or an RFC 3339 time.
pub(crate) fn since_arg(s: &str) -> std::result::Result<i64, String> {
    let s = s.trim();
    if let Ok(d) = humantime::parse_duration(s) {
        let back = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        return Ok(ckptfs::text::time::now_ns().saturating_sub(back));
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
    /// Sizes in bytes instead of `ls -lh`'s 1.5K, 12M.
    #[arg(long)]
    pub bytes: bool,
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
#[command(after_help = "Examples:\n  \
    ckptfs diff STORE start main                added/removed/modified, one line per path\n  \
    ckptfs diff STORE start main -p -- ws/src   a unified diff of what changed under ws/src\n  \
    ckptfs diff STORE main --workspace /room    the last checkpoint against the room now\n  \
    ckptfs diff STORE start --dir /tmp/copy     a checkpoint against a plain directory")]
pub struct DiffArgs {
    /// The store directory.
    pub store: PathBuf,
    /// The old side: a checkpoint id (or unique prefix), label or branch.
    pub a: String,
    /// The new side: a checkpoint, label or branch, or the mountpoint of a workspace (then as
    /// --workspace). Leave it out with --workspace or --dir.
    pub b: Option<String>,
    /// Compare with a mounted workspace as it is now (PLACE: its mountpoint or a path inside):
    /// its upper layer merged over its base in a dry run, nothing written to the store.
    #[arg(long, value_name = "PLACE", conflicts_with = "dir")]
    pub workspace: Option<PathBuf>,
    /// Compare one root with a plain directory as it is now ([ROOT=]DIR; ROOT may be left out
    /// when A has one root): DIR is read and hashed as a capture would read it (the root's
    /// exclude rules), in a dry run: nothing is written to the store.
    #[arg(long, value_name = "[ROOT=]DIR")]
    pub dir: Option<String>,
    /// Per path, its size before -> after, then a total line (as `git diff --stat`, in bytes).
    #[arg(long, conflicts_with_all = ["name_status", "patch"])]
    pub stat: bool,
    /// One line per path: a letter (A added, D removed, M modified or mode/owner/mtime/xattr,
    /// T type, R renamed), a tab, the path (for R: old path, tab, new path).
    #[arg(long, conflicts_with = "patch")]
    pub name_status: bool,
    /// A unified diff of each changed text file (3 lines of context); a binary file (a NUL
    /// byte in its first 8 KiB, or not UTF-8) is one line `Binary files a/PATH and b/PATH
    /// differ`.
    #[arg(short = 'p', long)]
    pub patch: bool,
    /// Only this ROOT/PATH and what is below it (repeatable; the same as PATHs after `--`).
    #[arg(long = "path", value_name = "ROOT/PATH")]
    pub path: Vec<String>,
    /// Report a removed and an added path holding the same content (a directory of the same
    /// tree, a file of the same chunks) as two, not as one rename. Renames are detected by
    /// default, except in the plain listing, which keeps its removed/added lines.
    #[arg(long)]
    pub no_renames: bool,
    /// In the plain listing too, report a file or directory moved with its content unchanged
    /// as one line `renamed   OLD -> NEW` (a renamed directory is one line, not its children).
    #[arg(long, short = 'M', conflicts_with = "no_renames")]
    pub find_renames: bool,
    /// Only these ROOT/PATHs and what is below them: `diff STORE A B -- ws/src ws/README.md`.
    #[arg(last = true, value_name = "PATH")]
    pub paths: Vec<String>,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `ckptfs log [--branch B] [--graph | --json]`. A record or label that does not read is
/// named in one warning line on stderr and left out; the rest is listed and the exit code
/// stays 0 (a listing, as restic's: `doctor` and `verify` are the checks that fail).
pub fn run_log(a: LogArgs) -> Result<i32> {
    let s = ckptfs::remote::open_store(&a.store)?;
    if a.turns {
        return super::turn::print_turns(&s, a.branch.as_deref(), a.max_count, a.json.json);
    }
    let mut wanted = Vec::new();
    for kv in &a.meta {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| Error::Usage(format!("--meta {kv:?}: expected KEY=VALUE")))?;
        wanted.push((k.to_string(), v.to_string()));
    }
    let mut h = timeline::history(&s, a.branch.as_deref())?;
    h.items.retain(|(_, c)| {
        wanted.iter().all(|(k, v)| {
            c.annotations
                .meta
                .get(k)
                .is_some_and(|x| ckptfs::store::checkpoint::meta_text(x) == *v)
        })
    });
    let (names, ref_problems) = timeline::names_lenient(&s, a.graph && !a.json.json)?;
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
    // One branch's line is one lane; the whole store fans out at merges.
    let edges = if a.branch.is_some() {
        timeline::Edges::Line
    } else {
        timeline::Edges::Recorded
    };
    if a.graph && !a.json.json {
        for line in timeline::graph_lines(&h.items, &names, edges) {
            println!("{}", quote::text(&line));
        }
        return Ok(0);
    }
    if a.json.json {
        let mut rows: Vec<_> = h
            .items
            .iter()
            .map(|(id, c)| timeline::log_row(id, c, &labels))
            .collect();
        // --graph --json: the same rows, each with how the graph draws it (parents are the
        // edges).
        if a.graph {
            for (row, g) in rows.iter_mut().zip(timeline::graph_rows(&h.items, edges)) {
                row["graph"] = serde_json::to_value(g).unwrap_or_default();
            }
        }
        print_json(&rows)?;
    } else {
        // A reader that stops early (`| head`) is not an error.
        let mut out = io::stdout().lock();
        let lines = log_table(&h.items, &labels);
        for (i, line) in lines.iter().enumerate() {
            for g in h.gaps.iter().filter(|g| g.before_item == i) {
                let _ignored = writeln!(out, "  ... {}", g.line());
            }
            let _ignored = writeln!(out, "{}", quote::text(line));
        }
        for g in h.gaps.iter().filter(|g| g.before_item == h.items.len()) {
            let _ignored = writeln!(out, "  ... {}", g.line());
        }
    }
    Ok(0)
}

/// `log`'s lines, one per checkpoint, in columns as wide as their content: short id, local
/// time with its offset, branch, labels (`[a, b]`; the column is left out when no checkpoint
/// has one), file count and size (right-aligned), message and metadata (`{k=v}`).
fn log_table(
    items: &[(ckptfs::ObjectId, ckptfs::store::checkpoint::Checkpoint)],
    labels: &[(String, ckptfs::ObjectId)],
) -> Vec<String> {
    let mut t = Table::new().right(&[4, 5]);
    for (id, c) in items {
        let ls = timeline::labels_of(labels, id);
        t.row(vec![
            id.short(),
            format_local(c.time_ns),
            c.branch.clone(),
            if ls.is_empty() {
                String::new()
            } else {
                format!("[{}]", ls.join(", "))
            },
            format!("{} files", c.stats.files),
            human_bytes(c.stats.bytes),
            {
                let first = c.message.lines().next().unwrap_or("");
                match timeline::meta_summary(c) {
                    m if m.is_empty() => first.to_string(),
                    m => format!("{first}  {m}"),
                }
            },
        ]);
    }
    t.lines()
}

/// `ckptfs show`.
pub fn run_show(a: ShowArgs) -> Result<i32> {
    let s = ckptfs::remote::open_store(&a.store)?;
    let id = s.resolve(&a.checkpoint)?;
    let c = s.read_checkpoint(&id)?;
    // Every label naming it now (`ckptfs label` adds them after the record is written, and
    // `label delete` removes them), not only the one its record was made with.
    let labels: Vec<String> = s
        .list_labels()?
        .into_iter()
        .filter(|(_, l)| *l == id)
        .map(|(n, _)| n)
        .collect();
    if a.json.json {
        print_json(
            &serde_json::json!({"id": id, "checkpoint": super::json::checkpoint(&c), "labels": labels}),
        )?;
        return Ok(0);
    }
    println!("checkpoint {id}");
    println!("branch     {}", c.branch);
    println!("time       {}", format_local(c.time_ns));
    for p in &c.parents {
        println!("parent     {p}");
    }
    for l in &labels {
        println!("label      {l}");
    }
    println!("message    {}", quote::text(&c.message));
    for (k, v) in &c.annotations.meta {
        let v = ckptfs::store::checkpoint::meta_text(v);
        println!("meta       {k}={}", quote::text(&v));
    }
    if let Some(t) = &c.annotations.turn {
        println!(
            "turn       {} exit {} ({} -> {}){}: {}",
            t.id,
            t.exit_status,
            format_local(t.started_ns),
            format_local(t.ended_ns),
            if t.accepted_runtime_change {
                ", runtime change accepted"
            } else {
                ""
            },
            quote::text(&t.command.join(" "))
        );
    }
    if let Some(rt) = &c.annotations.runtime {
        for (k, v) in rt.fields() {
            println!("runtime    {k} = {}", quote::text(&v.to_string()));
        }
    }
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
    let s = ckptfs::remote::open_store(&a.store)?;
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
                    "mode": ckptfs::units::mode_octal(e.mode), "uid": e.uid, "gid": e.gid,
                    "size": e.size, "mtime_ns": e.mtime_ns, "target": target})
            })
            .collect();
        print_json(&v)?;
        return Ok(0);
    }
    let mut names = Owners::default();
    let mut t = Table::new().right(&[3]);
    for (p, e) in &rows {
        let tail = match &e.kind {
            EntryKind::Symlink { target } => format!(" -> {}", quote::name(target)),
            _ => String::new(),
        };
        let size = match e.kind {
            // A tree records its entry count as its size: not a size to show.
            EntryKind::Dir { .. } => "-".to_string(),
            _ if a.bytes => e.size.to_string(),
            _ => human_size(e.size),
        };
        t.row(vec![
            mode_string(&e.kind, e.mode),
            names.user(e.uid),
            names.group(e.gid),
            size,
            format_local(e.mtime_ns),
            format!("{}{tail}", quote::name(p)),
        ]);
    }
    t.print();
    Ok(0)
}

/// `ls -l`'s size: bytes below 1024, else one decimal and a unit (`1.5K`, `12M`), as
/// `ls -lh` writes them.
fn human_size(n: u64) -> String {
    const UNITS: [&str; 6] = ["K", "M", "G", "T", "P", "E"];
    if n < 1024 {
        return n.to_string();
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v < 10.0 {
        format!("{v:.1}{}", UNITS[u])
    } else {
        format!("{v:.0}{}", UNITS[u])
    }
}

/// `drwxr-xr-x` for an entry: its type and permission bits, with setuid, setgid and sticky
/// as `ls -l` shows them (`s`/`S`, `t`/`T`).
fn mode_string(kind: &EntryKind, mode: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(match kind {
        EntryKind::File { .. } => '-',
        EntryKind::Dir { .. } => 'd',
        EntryKind::Symlink { .. } => 'l',
    });
    let special = [(0o4000, 's'), (0o2000, 's'), (0o1000, 't')];
    for (who, (bit, mark)) in special.iter().enumerate() {
        let shift = 6 - 3 * who;
        let p = (mode >> shift) & 7;
        s.push(if p & 4 != 0 { 'r' } else { '-' });
        s.push(if p & 2 != 0 { 'w' } else { '-' });
        let x = p & 1 != 0;
        s.push(match (mode & bit != 0, x) {
            (true, true) => *mark,
            (true, false) => mark.to_ascii_uppercase(),
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// User and group names by id, looked up once each (`ls -l` shows names; an id without one
/// shows as the number).
#[derive(Default)]
struct Owners {
    users: std::collections::HashMap<u32, String>,
    groups: std::collections::HashMap<u32, String>,
}

impl Owners {
    fn user(&mut self, uid: u32) -> String {
        self.users
            .entry(uid)
            .or_insert_with(|| {
                nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
                    .ok()
                    .flatten()
                    .map_or_else(|| uid.to_string(), |u| u.name)
            })
            .clone()
    }

    fn group(&mut self, gid: u32) -> String {
        self.groups
            .entry(gid)
            .or_insert_with(|| {
                nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
                    .ok()
                    .flatten()
                    .map_or_else(|| gid.to_string(), |g| g.name)
            })
            .clone()
    }
}

/// `ckptfs cat`.
pub fn run_cat(a: CatArgs) -> Result<i32> {
    let s = ckptfs::remote::open_store(&a.store)?;
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

/// The two sides of `diff`: checkpoint A, and B, a workspace now or a directory now.
fn sides_of(s: &Store, a: &DiffArgs) -> Result<(diff::Side, diff::Side)> {
    let ca = s.read_checkpoint(&s.resolve(&a.a)?)?;
    let side_a = diff::Side::checkpoint(&ca);
    if let Some(spec) = &a.dir {
        if a.b.is_some() {
            return Err(Error::Usage(
                "give B or --dir DIR, not both (--dir compares A with a directory now)".into(),
            ));
        }
        if spec.is_empty() {
            return Err(Error::Usage("--dir: give DIR or ROOT=DIR".into()));
        }
        // `NAME=...` where NAME is no root: the root is what is wrong, not the directory.
        if let Some((r, _)) = spec.split_once('=') {
            if !r.is_empty() && !r.contains('/') && !s.config().roots.contains_key(r) {
                let names: Vec<&str> = s.config().roots.keys().map(String::as_str).collect();
                return Err(Error::Usage(format!(
                    "--dir {spec}: no root {r:?} (roots: {})",
                    names.join(", ")
                )));
            }
        }
        let (root, dir) = match spec.split_once('=') {
            Some((r, d)) if s.config().roots.contains_key(r) => (r.to_string(), PathBuf::from(d)),
            _ if ca.roots.len() == 1 => {
                let only = ca.roots.keys().next().cloned().unwrap_or_default();
                (only, PathBuf::from(spec))
            }
            _ => {
                let names: Vec<&str> = ca.roots.keys().map(String::as_str).collect();
                return Err(Error::Usage(format!(
                    "--dir {spec}: name the root it stands for (--dir ROOT=DIR); roots are {}",
                    names.join(", ")
                )));
            }
        };
        let (rec, trees) = ckptfs::ingest::capture::capture_dry_run(s, &root, &dir)?;
        let side_b = diff::Side {
            roots: [(root.clone(), rec.tree)].into(),
            trees,
            live: [(root.clone(), dir)].into(),
        };
        return Ok((side_a.only_root(&root), side_b));
    }
    let b = match (&a.workspace, &a.b) {
        (Some(_), Some(_)) => {
            return Err(Error::Usage("give B or --workspace, not both".to_string()))
        }
        (None, None) => {
            return Err(Error::Usage(
                "diff needs B: a checkpoint, --workspace PLACE or --dir DIR".to_string(),
            ))
        }
        (Some(w), None) => return Ok((side_a, workspace_side(s, w)?)),
        (None, Some(b)) => b,
    };
    // B names a checkpoint, or else a workspace by its mountpoint.
    match s.resolve(b) {
        Err(e) if std::path::Path::new(b).is_dir() => {
            log::debug!("B {b}: not a checkpoint ({e}); a workspace?");
            Ok((side_a, workspace_side(s, std::path::Path::new(b))?))
        }
        resolved => Ok((
            side_a,
            diff::Side::checkpoint(&s.read_checkpoint(&resolved?)?),
        )),
    }
}

/// The mounted workspace at `place` (a mountpoint, or a path inside one), as it is now.
fn workspace_side(s: &Store, place: &std::path::Path) -> Result<diff::Side> {
    let st = ckptfs::workspace::find_by_path(s, place)?.ok_or_else(|| {
        Error::NotFound(format!(
            "a mounted workspace of this store at {}",
            place.display()
        ))
    })?;
    Ok(ckptfs::workspace::live_tree(s, &st.branch)?.side)
}

/// `ckptfs diff`.
pub fn run_diff(a: DiffArgs) -> Result<i32> {
    let s = ckptfs::remote::open_store(&a.store)?;
    let (side_a, side_b) = sides_of(&s, &a)?;
    // A path under a root neither side has selects nothing: a typo, not an empty diff.
    for p in a.path.iter().chain(&a.paths) {
        let root = p.trim_start_matches('/').split('/').next().unwrap_or("");
        if !side_a.roots.contains_key(root) && !side_b.roots.contains_key(root) {
            let mut names: Vec<&str> = side_a.roots.keys().map(String::as_str).collect();
            names.extend(side_b.roots.keys().map(String::as_str));
            names.sort_unstable();
            names.dedup();
            return Err(Error::Usage(format!(
                "path {p}: no root {root:?} on either side (roots: {}); paths are ROOT/PATH",
                names.join(", ")
            )));
        }
    }
    let plain = !(a.stat || a.name_status || a.patch);
    let opts = diff::DiffOptions {
        paths: a.path.iter().chain(&a.paths).cloned().collect(),
        renames: if plain { a.find_renames } else { !a.no_renames },
    };
    let changes = diff::diff_sides(&s, &side_a, &side_b, &opts)?;
    if a.json.json {
        // Sizes are --stat's: the plain listing's objects stay {change, path} (and `from`).
        let mut v = serde_json::to_value(&changes)
            .map_err(|e| Error::Invalid(format!("encoding JSON: {e}")))?;
        if !a.stat {
            for c in v.as_array_mut().into_iter().flatten() {
                if let Some(o) = c.as_object_mut() {
                    o.remove("size");
                    o.remove("size_before");
                }
            }
        }
        print_json(&v)?;
        return Ok(0);
    }
    // A reader that stops early (`| head`) is not an error.
    let mut out = io::stdout().lock();
    if a.stat {
        print_stat(&mut out, &changes);
    } else if a.name_status {
        for c in changes.iter().filter(|c| !metadata_twin(&changes, c)) {
            let path = quote::name(c.path.as_bytes());
            let _ignored = match &c.from {
                Some(f) => writeln!(out, "{}\t{}\t{path}", c.letter(), quote::name(f.as_bytes())),
                None => writeln!(out, "{}\t{path}", c.letter()),
            };
        }
    } else if a.patch {
        for c in &changes {
            let text = patch_of(&s, &side_a, &side_b, c)?;
            let _ignored = out.write_all(text.as_bytes());
        }
    } else {
        for c in &changes {
            let path = quote::name(c.path.as_bytes());
            let _ignored = match (&c.from, c.nlink, c.nlink_before) {
                (Some(f), _, _) => writeln!(
                    out,
                    "{:<9} {} -> {path}",
                    c.change,
                    quote::name(f.as_bytes())
                ),
                (None, Some(n), Some(was)) => writeln!(
                    out,
                    "{:<9} {path} (names in the root: {n}, was {was})",
                    c.change
                ),
                _ => writeln!(out, "{:<9} {path}", c.change),
            };
        }
    }
    Ok(0)
}

/// Whether `c` is a second line for a path already listed before it (a file both modified and
/// chmod-ed): `--name-status` and `--stat` show a path once.
fn metadata_twin(all: &[diff::Change], c: &diff::Change) -> bool {
    all.iter()
        .take_while(|o| !std::ptr::eq(*o, c))
        .any(|o| o.path == c.path)
}

/// `diff --stat`: per path (files and symlinks; a directory added or removed is its
/// children's lines), its size before -> after in bytes, then the total.
fn print_stat(out: &mut impl Write, changes: &[diff::Change]) {
    let rows: Vec<&diff::Change> = changes
        .iter()
        .filter(|c| !metadata_twin(changes, c))
        .filter(|c| !c.is_dir() || c.change == "renamed")
        .collect();
    let name = |c: &diff::Change| match &c.from {
        Some(f) => format!(
            "{} => {}",
            quote::name(f.as_bytes()),
            quote::name(c.path.as_bytes())
        ),
        None => quote::name(c.path.as_bytes()).into_owned(),
    };
    let width = rows.iter().map(|c| name(c).len()).max().unwrap_or(0);
    let size = |e: &Option<ckptfs::store::tree::Entry>| match e {
        Some(e) if !e.is_dir() => e.size.to_string(),
        _ => "-".to_string(),
    };
    let (mut before, mut after) = (0u64, 0u64);
    for c in &rows {
        if c.is_dir() {
            let _ignored = writeln!(out, " {:<width$} | renamed directory", name(c));
            continue;
        }
        before += c.before.as_ref().map_or(0, |e| e.size);
        after += c.after.as_ref().map_or(0, |e| e.size);
        let _ignored = writeln!(
            out,
            " {:<width$} | {} -> {} bytes",
            name(c),
            size(&c.before),
            size(&c.after)
        );
    }
    let count = |what: &str| rows.iter().filter(|c| c.change == what).count();
    let _ignored = writeln!(
        out,
        " {} paths changed ({} added, {} removed, {} renamed), {} -> {} bytes ({}), {} -> {}",
        rows.len(),
        count("added"),
        count("removed"),
        count("renamed"),
        before,
        after,
        signed(after as i128 - before as i128),
        human_bytes(before),
        human_bytes(after)
    );
}

fn signed(n: i128) -> String {
    if n >= 0 {
        format!("+{n}")
    } else {
        n.to_string()
    }
}

/// `diff -p` for one change: the unified diff of its contents (none for a directory or a
/// change of metadata alone; a rename's content is the same on both sides).
fn patch_of(s: &Store, a: &diff::Side, b: &diff::Side, c: &diff::Change) -> Result<String> {
    if let Some(f) = &c.from {
        return Ok(format!(
            "rename from {}\nrename to {}\n",
            quote::name(f.as_bytes()),
            quote::name(c.path.as_bytes())
        ));
    }
    if !matches!(c.change.as_str(), "added" | "removed" | "modified" | "type") {
        return Ok(String::new());
    }
    let old = match &c.before {
        Some(e) => a.content(s, &c.path, e)?,
        None => None,
    };
    let new = match &c.after {
        Some(e) => b.content(s, &c.path, e)?,
        None => None,
    };
    Ok(diff::patch(
        &quote::name(c.path.as_bytes()),
        old.as_deref(),
        new.as_deref(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_as_ls_writes_them() {
        let file = EntryKind::File { chunks: Vec::new() };
        let link = EntryKind::Symlink {
            target: b"t".to_vec(),
        };
        assert_eq!(mode_string(&file, 0o644), "-rw-r--r--");
        assert_eq!(mode_string(&file, 0o4755), "-rwsr-xr-x");
        assert_eq!(mode_string(&file, 0o4644), "-rwSr--r--");
        assert_eq!(mode_string(&file, 0o2750), "-rwxr-s---");
        assert_eq!(mode_string(&link, 0o777), "lrwxrwxrwx");
        assert_eq!(mode_string(&file, 0o1777), "-rwxrwxrwt");
        assert_eq!(mode_string(&file, 0o1776), "-rwxrwxrwT");
        assert_eq!(mode_string(&file, 0), "----------");
    }

    #[test]
    fn sizes_read_as_ls_lh_writes_them() {
        for (n, want) in [
            (0, "0"),
            (1023, "1023"),
            (1024, "1.0K"),
            (1536, "1.5K"),
            (12 * 1024, "12K"),
            (5 << 20, "5.0M"),
            (300 << 30, "300G"),
            (u64::MAX, "16E"),
        ] {
            assert_eq!(human_size(n), want, "{n}");
        }
    }
}
