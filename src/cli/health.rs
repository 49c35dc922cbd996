//! CLI of the health commands: verify, recover, gc, archive, unarchive, doctor.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;

use ckptfs::store::RetentionPolicy;
use ckptfs::text::time::local_of_utc;
use ckptfs::transfer::archive::{self, ArchiveOptions, UnarchiveOptions};
use ckptfs::units::human_bytes;
use ckptfs::upkeep::doctor::{self, Repair};
use ckptfs::upkeep::gc::{self, GcOptions, GcReport, PolicySource};
use ckptfs::upkeep::{recover, verify};
use ckptfs::{Error, Result};

use super::args::GcArgs;
use super::table::Table;
use super::{print_json, split_kv, JsonFlag};

/// `verify` arguments.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    pub store: PathBuf,
    /// Checkpoints to verify (default: all).
    pub checkpoints: Vec<String>,
    /// Verify every checkpoint (the default when none is given).
    #[arg(long)]
    pub all: bool,
    /// Check what remote NAME holds instead: every object its refs reach is downloaded and
    /// checked (tag, length, SHA-256); findings name the paths that use a bad object.
    #[arg(long, value_name = "NAME")]
    pub remote: Option<String>,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `recover` arguments.
#[derive(Args, Debug)]
pub struct RecoverArgs {
    pub store: PathBuf,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `archive` arguments.
#[derive(Args, Debug)]
pub struct ArchiveArgs {
    /// The store directory.
    pub store: PathBuf,
    /// Checkpoints (id, prefix or label) or branches (their whole history) to export.
    pub specs: Vec<String>,
    /// Export every checkpoint, branch and label.
    #[arg(long)]
    pub all: bool,
    /// The archive file to write (never overwritten); FILE.sha256 is written beside it.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Cut the archive into FILE.part000, FILE.part001... of at most SIZE bytes (e.g. 1G,
    /// 512MB; K, M, G, T are powers of 1024, also written KB/KiB, MB/MiB...).
    #[arg(long, value_name = "SIZE")]
    pub split: Option<String>,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `unarchive` arguments.
#[derive(Args, Debug)]
pub struct UnarchiveArgs {
    /// Target store: created when missing or empty, otherwise imported into (objects dedup).
    /// Left out, it is --store, $CKPTFS_STORE or the mounted workspace around the current
    /// directory. The older order FILE STORE still works: the archive is the argument that is
    /// a file.
    #[arg(value_name = "STORE")]
    pub first: PathBuf,
    /// The archive: FILE, FILE.part000 (all parts are read) or FILE.sha256.
    #[arg(value_name = "FILE")]
    pub second: Option<PathBuf>,
    /// Record root NAME at a new absolute path in the target's STORE.json (repeatable). File
    /// contents are never rewritten.
    #[arg(long, value_name = "NAME=/NEW/PATH")]
    pub relocate: Vec<String>,
    /// Into an existing store, add root NAME of the archive at the path the archive records
    /// (repeatable). A root the store lacks is otherwise refused: the archive chose its path,
    /// and the next capture would read that directory.
    #[arg(long = "add-root", value_name = "NAME")]
    pub add_root: Vec<String>,
    /// Expected SHA-256 of the whole archive, when there is no FILE.sha256 sidecar.
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `doctor` arguments.
#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// The store directory.
    pub store: PathBuf,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `ckptfs verify`: exit 1 on any finding.
pub fn run_verify(a: VerifyArgs) -> Result<i32> {
    if let Some(r) = &a.remote {
        return super::remote::run_verify_remote(&a.store, r, a.json.json);
    }
    let s = ckptfs::remote::open_store(&a.store)?;
    if a.all && !a.checkpoints.is_empty() {
        return Err(Error::Usage("give checkpoints or --all, not both".into()));
    }
    let ids = a
        .checkpoints
        .iter()
        .map(|c| s.resolve(c))
        .collect::<Result<Vec<_>>>()?;
    let r = verify::verify(&s, &ids)?;
    if a.json.json {
        print_json(&r)?;
    } else {
        for f in &r.findings {
            let detail = ckptfs::text::quote::text(&f.detail);
            println!("{} {}: {detail}", f.problem, f.object);
            for u in &f.used_by {
                println!("    used by {}", ckptfs::text::quote::text(u));
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

/// `ckptfs recover`.
pub fn run_recover(a: RecoverArgs) -> Result<i32> {
    let s = ckptfs::remote::open_store_to_repair(&a.store)?;
    let r = recover::recover(&s)?;
    if a.json.json {
        print_json(&r)?;
    } else {
        match &r.interrupted {
            Some(op) => println!("interrupted operation: {op}"),
            None => println!("no interrupted operation"),
        }
        for action in &r.actions {
            println!("  {action}");
        }
    }
    Ok(0)
}

pub(crate) fn print_gc(r: &GcReport, dry_run: bool) {
    let (go, went) = if dry_run {
        ("would prune", "would free")
    } else {
        ("pruned", "freed")
    };
    if dry_run {
        println!("gc dry run: nothing was deleted");
    }
    let pol = serde_json::to_string(&r.policy).unwrap_or_default();
    println!("policy: {} ({pol})", r.policy_source);
    for p in &r.pins {
        println!("honouring pin {p}");
    }
    let kept: Vec<String> = r.kept.iter().map(|(k, n)| format!("{n} {k}")).collect();
    println!(
        "checkpoints: {} total, {} kept ({}), {go} {}",
        r.checkpoints,
        r.kept.values().sum::<usize>(),
        kept.join(", "),
        r.pruned.len()
    );
    // The table of reasons when a policy chose; without one (no rule, or `forget --prune`)
    // every row would say `no policy`, so only what goes is listed.
    if dry_run && r.policy_source != PolicySource::None {
        print_decisions(r);
    } else {
        let mut t = Table::new().indent("  ");
        for c in &r.pruned {
            t.row(vec![
                go.to_string(),
                c.id.short(),
                local_of_utc(&c.time),
                c.branch.clone(),
            ]);
        }
        t.print();
    }
    println!(
        "objects: {} total, {go} {} unreachable ({})",
        r.objects,
        r.objects_removed,
        human_bytes(r.object_bytes_freed)
    );
    for p in &r.paths_removed {
        println!("  {go} {} ({}, {})", p.path, p.what, human_bytes(p.bytes));
    }
    for p in &r.kept_for_review {
        println!("  kept for review: {p} (delete it by hand or use --prune-displaced)");
    }
    println!("{went} {}", human_bytes(r.bytes_freed));
}

/// Most characters of a message the dry-run table shows.
const MAX_TABLE_MESSAGE: usize = 40;

/// The dry run's table: one line per checkpoint, `ID  TIME  BRANCH  "MESSAGE"  kept: WHY, ...`
/// or `pruned`, by branch, newest first.
fn print_decisions(r: &GcReport) {
    let mut t = Table::new().indent("  ");
    for d in &r.decisions {
        let mut msg: String = d.message.chars().take(MAX_TABLE_MESSAGE).collect();
        if msg.len() < d.message.len() {
            msg.push_str("...");
        }
        let verdict = if d.pruned {
            "pruned".to_string()
        } else {
            let why: Vec<&str> = d.kept.iter().map(|k| k.as_str()).collect();
            format!("kept: {}", why.join(", "))
        };
        let label = d
            .label
            .as_deref()
            .map(|l| format!("[{l}]"))
            .unwrap_or_default();
        t.row(vec![
            d.id.short(),
            local_of_utc(&d.time),
            d.branch.clone(),
            format!("{msg:?}"),
            label,
            verdict,
        ]);
    }
    t.print();
}

/// `ckptfs gc`.
pub fn run_gc(a: GcArgs) -> Result<i32> {
    if let Some(r) = &a.remote {
        return super::remote::run_gc_remote(&a, r);
    }
    let s = ckptfs::remote::open_store(&a.store)?;
    if let Some(t) = a.keep_tag.first() {
        return Err(Error::Usage(format!(
            "--keep-tag {t:?}: labels are ckptfs's tags and labelled checkpoints are always kept \
             by gc; drop the flag (see `ckptfs gc --help`)"
        )));
    }
    // A branch meant to be kept must be one: a branch now, or one a checkpoint was recorded
    // on (a deleted branch's checkpoints are kept by name). A typo would leave the branch
    // meant unprotected.
    let mut unknown: Vec<&String> = Vec::new();
    for b in &a.keep_branch {
        if s.read_branch(b)?.is_none() {
            unknown.push(b);
        }
    }
    if !unknown.is_empty() {
        for id in s.list_checkpoints()? {
            if let Ok(c) = s.read_checkpoint(&id) {
                unknown.retain(|b| **b != c.branch);
            }
            if unknown.is_empty() {
                break;
            }
        }
    }
    if let Some(b) = unknown.first() {
        return Err(Error::Usage(format!(
            "--keep-branch {b}: no branch of that name, and no checkpoint was recorded on one \
             (`ckptfs branch list {}`)",
            s.root().display()
        )));
    }
    let policy = RetentionPolicy {
        keep_last: a.keep_last,
        keep_within: a.keep_within,
        keep_hourly: a.keep_hourly,
        keep_daily: a.keep_daily,
        keep_weekly: a.keep_weekly,
        keep_monthly: a.keep_monthly,
        keep_yearly: a.keep_yearly,
        keep_branch: a.keep_branch,
    };
    policy.check()?;
    let opts = GcOptions {
        policy: (!policy.is_empty()).then_some(policy),
        prune_displaced: a.prune_displaced,
        clear_cache: a.clear_cache,
        ..GcOptions::default()
    };
    let r = if a.dry_run {
        gc::gc_dry_run(&s, &opts)?
    } else {
        gc::gc(&s, &opts)?
    };
    if a.json.json {
        print_json(&r)?;
    } else {
        print_gc(&r, a.dry_run);
    }
    Ok(0)
}

/// The smallest `--split` part (a page): below it, a size is surely a typo (`1` for `1G`).
const MIN_SPLIT: u64 = 4 << 10;

/// `--split SIZE`: a size of at least [`MIN_SPLIT`].
fn parse_split(s: &str) -> Result<u64> {
    match ckptfs::units::parse_size(s)? {
        n if n < MIN_SPLIT => Err(Error::Usage(format!(
            "--split {s:?}: parts of {n} bytes; a part holds at least 4 KiB (write 1G for a \
             gibibyte)"
        ))),
        n => Ok(n),
    }
}

/// `ckptfs archive`.
pub fn run_archive(a: ArchiveArgs) -> Result<i32> {
    let s = ckptfs::remote::open_store(&a.store)?;
    let split = a.split.as_deref().map(parse_split).transpose()?;
    // Where it goes is checked before any work (the archive is written last).
    let dir = match a.out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(Error::Usage(format!(
            "--out {}: directory {} does not exist",
            a.out.display(),
            dir.display()
        )));
    }
    let r = archive::archive(
        &s,
        &ArchiveOptions {
            specs: a.specs,
            all: a.all,
            out: a.out,
            split,
        },
    )?;
    if a.json.json {
        print_json(&r)?;
    } else {
        println!(
            "archived {} checkpoints, {} objects ({}) to {} ({})",
            r.checkpoints,
            r.objects,
            human_bytes(r.object_bytes),
            r.file.display(),
            human_bytes(r.bytes)
        );
        println!("sha256 {}  {}", r.sha256, r.file.display());
        if r.parts.len() > 1 || r.parts.first().is_some_and(|p| p.path != r.file) {
            for p in &r.parts {
                println!("sha256 {}  {}", p.sha256, p.path.display());
            }
        }
        println!("digests recorded in {}", r.sidecar.display());
    }
    Ok(0)
}

/// `ckptfs unarchive`.
pub fn run_unarchive(a: UnarchiveArgs, store_flag: Option<&Path>) -> Result<i32> {
    let (file, store) = super::store_arg::unarchive_order(a.first, a.second, store_flag)?;
    let mut relocate = BTreeMap::new();
    for r in &a.relocate {
        let (name, path) = split_kv("--relocate", r)?;
        relocate.insert(name.to_string(), PathBuf::from(path));
    }
    if let Some(h) = &a.sha256 {
        if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::Usage(format!(
                "--sha256 {}: expected 64 hex digits (as FILE.sha256 holds)",
                ckptfs::text::quote::text(h)
            )));
        }
    }
    let r = archive::unarchive(&UnarchiveOptions {
        file,
        store,
        relocate,
        add_roots: a.add_root.into_iter().collect(),
        sha256: a.sha256,
    })?;
    if a.json.json {
        print_json(&r)?;
    } else {
        println!(
            "{} {}: sha256 {} checked",
            if r.created_store {
                "created store"
            } else {
                "imported into"
            },
            r.store.display(),
            r.sha256
        );
        println!(
            "checkpoints: {} new, {} already present; objects: {} new, {} already present",
            r.checkpoints_new, r.checkpoints_present, r.objects_new, r.objects_present
        );
        if !r.branches.is_empty() {
            println!("branches: {}", r.branches.join(", "));
        }
        if !r.labels.is_empty() {
            println!("labels: {}", r.labels.join(", "));
        }
        for (n, p) in &r.relocated {
            println!("root {n} now recorded at {}", p.display());
        }
        for (n, p) in &r.roots_added {
            if !r.relocated.contains_key(n) {
                println!("root {n} added at {}", ckptfs::text::quote::path(p));
            }
        }
        if let Some(v) = r.upgraded_to {
            let what = if v >= 3 {
                "trees with hardlinks"
            } else {
                "trees with ctimes and inode numbers"
            };
            println!(
                "store format upgraded to version {v} ({what}): older ckptfs builds refuse it"
            );
        }
    }
    Ok(0)
}

/// `ckptfs doctor`: exit 1 when a finding is an error or warning.
pub fn run_doctor(a: DoctorArgs) -> Result<i32> {
    let r = doctor::doctor(&a.store)?;
    if a.json.json {
        print_json(&r)?;
    } else {
        for f in &r.findings {
            println!(
                "{:<7} {:<11} {}: {}",
                f.severity,
                f.check,
                ckptfs::text::quote::text(&f.subject),
                ckptfs::text::quote::text(&f.detail)
            );
            let by = match f.repair {
                Repair::Recover => " [ckptfs recover repairs this]",
                Repair::Gc => " [ckptfs gc cleans this]",
                Repair::Manual => "",
            };
            println!("        fix: {}{by}", f.fix);
        }
        let problems = r.findings.iter().filter(|f| f.is_problem()).count();
        println!(
            "checked {} checkpoints, {} objects: {} problems, {} notes",
            r.checkpoints,
            r.objects_checked,
            problems,
            r.findings.len() - problems
        );
        println!(
            "object contents are not checked here (presence and sizes only): run `{}` to \
             hash every object",
            r.content_check
        );
        if r.findings.iter().any(|f| f.repair == Repair::Recover) {
            println!(
                "run `ckptfs recover {}` to repair the findings marked so",
                r.store.display()
            );
        }
    }
    Ok(if r.has_problems() { 1 } else { 0 })
}
