//! CLI of `ckptfs stats`: what a store holds, logical against stored bytes, and what each
//! checkpoint and branch holds alone. The figures are computed by `ckptfs::history::stats`, whose
//! module doc defines them (and docs/json.md the JSON).

use std::path::PathBuf;

use clap::Args;

use ckptfs::history::stats::{stats, StatsReport, StatsScope};
use ckptfs::text::time::format_local;
use ckptfs::units::human_bytes;
use ckptfs::Result;

use super::{print_json, JsonFlag};

/// `stats` arguments.
#[derive(Args, Debug)]
#[command(after_help = "Figures:\n  \
    logical        sum of file sizes, each file as often as it occurs (what restoring writes)\n  \
    content        uncompressed bytes of the distinct chunks reached (after deduplication)\n  \
    stored         bytes of object files on disk (compressed when the store is)\n  \
    dedup ratio    logical / content\n  \
    unique         content bytes no other checkpoint (for a branch: no other branch's\n                 \
    checkpoint) reaches: what forgetting it and running gc would free; 'unique stored'\n                 \
    is the same on disk, trees included\n\n\
    The BRANCH rows group checkpoints by the branch they were taken on.\n\n\
    Examples:\n  \
    ckptfs stats STORE                 the whole store, per branch and per checkpoint\n  \
    ckptfs stats STORE before-refactor one checkpoint (id, prefix, label or branch head)\n  \
    ckptfs stats STORE --branch main   main's history (as `log --branch main` lists it)")]
pub struct StatsArgs {
    /// The store directory.
    pub store: PathBuf,
    /// Only this checkpoint (id, unique prefix, label, or a branch's head).
    #[arg(conflicts_with = "branch")]
    pub checkpoint: Option<String>,
    /// Only this branch's history (its head along first parents, as `log --branch`).
    #[arg(long, short)]
    pub branch: Option<String>,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `ckptfs stats`.
pub fn run_stats(a: StatsArgs) -> Result<i32> {
    let s = ckptfs::remote::open_store(&a.store)?;
    let scope = match (&a.checkpoint, &a.branch) {
        (Some(c), _) => StatsScope::Checkpoint(s.resolve(c)?),
        (None, Some(b)) => {
            ckptfs::store::refs::check_name("branch", b)?;
            StatsScope::Branch(b.clone())
        }
        (None, None) => StatsScope::All,
    };
    let r = stats(&s, &scope)?;
    // The workspaces' upper layers: bytes beside the store (some kept twice, see `status`).
    let (upper_files, upper_bytes) = ckptfs::workspace::upper_totals(&s);
    if a.json.json {
        let mut v = serde_json::to_value(&r)
            .map_err(|e| ckptfs::Error::Invalid(format!("encoding JSON: {e}")))?;
        v["store"]["upper_files"] = upper_files.into();
        v["store"]["upper_bytes"] = upper_bytes.into();
        print_json(&v)?;
        return Ok(0);
    }
    print_text(&r);
    if upper_files > 0 {
        println!(
            "upper layers of workspaces: {upper_files} files, {} beside the store (what a \
             checkpoint recorded and the fold kept is in both: `ckptfs status`)",
            human_bytes(upper_bytes)
        );
    }
    Ok(0)
}

fn print_text(r: &StatsReport) {
    let st = &r.store;
    println!(
        "store: {} objects, {} stored{}, {} checkpoints, {} branches",
        st.objects,
        human_bytes(st.stored_bytes),
        if st.compressed { " (zstd)" } else { "" },
        st.checkpoints,
        st.branches
    );
    let sel = &r.selected;
    println!(
        "selected: {} checkpoints, {} files, logical {}, content {} ({} chunks, {} trees), \
         stored {}, dedup ratio {:.2}, unique {} (stored {})",
        sel.checkpoints,
        sel.files,
        human_bytes(sel.logical_bytes),
        human_bytes(sel.content_bytes),
        sel.chunks,
        sel.trees,
        human_bytes(sel.stored_bytes),
        sel.dedup_ratio,
        human_bytes(sel.unique_bytes),
        human_bytes(sel.unique_stored_bytes),
    );
    let w = r
        .branches
        .iter()
        .map(|b| b.name.len())
        .max()
        .unwrap_or(0)
        .max(6);
    println!();
    println!(
        "{:<w$}  {:>11}  {:>10}  {:>10}  {:>13}",
        "BRANCH", "CHECKPOINTS", "LOGICAL", "UNIQUE", "UNIQUE STORED"
    );
    for b in &r.branches {
        println!(
            "{:<w$}  {:>11}  {:>10}  {:>10}  {:>13}",
            b.name,
            b.checkpoints,
            human_bytes(b.logical_bytes),
            human_bytes(b.unique_bytes),
            human_bytes(b.unique_stored_bytes)
        );
    }
    let w = r
        .checkpoints
        .iter()
        .map(|c| c.branch.len())
        .max()
        .unwrap_or(0)
        .max(6);
    println!();
    println!(
        "{:<12}  {:<26}  {:<w$}  {:>8}  {:>10}  {:>10}  {:>13}",
        "CHECKPOINT", "TIME", "BRANCH", "FILES", "LOGICAL", "UNIQUE", "UNIQUE STORED"
    );
    for c in &r.checkpoints {
        println!(
            "{:<12}  {:<26}  {:<w$}  {:>8}  {:>10}  {:>10}  {:>13}",
            c.id.short(),
            format_local(c.time_ns),
            c.branch,
            c.files,
            human_bytes(c.logical_bytes),
            human_bytes(c.unique_bytes),
            human_bytes(c.unique_stored_bytes)
        );
    }
}
