//! CLI of `forget`: prints the plan `ckptfs::upkeep::forget` makes (the same for `--dry-run`).

use std::path::PathBuf;

use clap::Args;

use ckptfs::upkeep::forget::{self, ForgetOptions, ForgetReport};
use ckptfs::{Result, Store};

use ckptfs::text::time::local_of_utc;

use super::table::Table;
use super::{print_json, JsonFlag};

/// `forget` arguments.
#[derive(Args, Debug)]
pub struct ForgetArgs {
    /// The store directory.
    pub store: PathBuf,
    /// Checkpoints to forget: ids or unique id prefixes (repeatable).
    #[arg(required = true, value_name = "CHECKPOINT")]
    pub checkpoints: Vec<String>,
    /// Print the plan (the same report) and change nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Then sweep at once the objects only these checkpoints reached, as `ckptfs gc` does
    /// (every other checkpoint is kept, whatever the retention policy).
    #[arg(long)]
    pub prune: bool,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `ckptfs forget`.
pub fn run_forget(a: ForgetArgs) -> Result<i32> {
    let s = ckptfs::remote::open_store(&a.store)?;
    let opts = ForgetOptions {
        specs: a.checkpoints,
        prune: a.prune,
    };
    let r = if a.dry_run {
        forget::forget_dry_run(&s, &opts)?
    } else {
        forget::forget(&s, &opts)?
    };
    if a.json.json {
        print_json(&r)?;
    } else {
        print_forget(&r, a.dry_run, &s);
    }
    Ok(0)
}

fn print_forget(r: &ForgetReport, dry_run: bool, s: &Store) {
    if dry_run {
        println!("forget dry run: nothing was changed");
    }
    let verb = if dry_run { "would forget" } else { "forgot" };
    let mut t = Table::new();
    for c in &r.checkpoints {
        t.row(vec![
            verb.to_string(),
            c.id.short(),
            local_of_utc(&c.time),
            c.branch.clone(),
            c.message.lines().next().unwrap_or("").to_string(),
        ]);
    }
    let lines = t.lines();
    for (c, line) in r.checkpoints.iter().zip(&lines) {
        println!("{line}");
        if let Some(l) = &c.recorded_label {
            println!("  (its record names label {l}, which no longer exists)");
        }
    }
    for id in &r.already_forgotten {
        println!("already forgotten {}", id.short());
    }
    println!(
        "objects only they reach: {} (gc removes them); shared with checkpoints that stay: {} \
         (kept: content those also hold)",
        r.objects_only_theirs, r.objects_shared
    );
    match &r.gc {
        Some(g) => super::health::print_gc(g, dry_run),
        None if r.objects_only_theirs > 0 => println!(
            "run `ckptfs gc {}` (or forget with --prune) to remove those objects",
            s.root().display()
        ),
        None => {}
    }
}
