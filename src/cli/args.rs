//! Arguments several commands share, in one place: what a recorded checkpoint carries
//! (`--label`, `--message`, `--meta`/`--meta-file`: checkpoint and turn; `--meta` also
//! capture), `--user`/`--as-root` (turn, exec), and `gc`'s retention flags (gc on the
//! store and on a remote).

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;

use ckptfs::runner::run_as::RunAsOptions;
use ckptfs::runner::turn;
use ckptfs::store::checkpoint::{check_meta, check_meta_key};
use ckptfs::{Error, Result};

use super::JsonFlag;

/// What the checkpoint a command records carries: `--label`, `--message` and the metadata
/// (`checkpoint`, `turn`).
#[derive(Args, Debug, Default)]
pub struct RecordArgs {
    /// Immutable label for the checkpoint recorded.
    #[arg(long, short)]
    pub label: Option<String>,
    /// Message stored with the checkpoint (`turn`: "turn ID" when left out).
    #[arg(short, long, default_value = "")]
    pub message: String,
    #[command(flatten)]
    pub meta: MetaArgs,
}

/// `--meta` and `--meta-file`.
#[derive(Args, Debug, Default)]
pub struct MetaArgs {
    /// Record KEY=VALUE in the checkpoint (repeatable; VALUE is a string, may be empty).
    /// Keys: letters, digits, '_', '.', '-' (at most 128 bytes); at most 256 keys and
    /// 64 KiB in all. Shown by `show` and `log` (and their --json), selected by `log --meta`.
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    pub meta: Vec<String>,
    /// Record every key of the JSON object in FILE ('-': stdin); values are strings,
    /// numbers, booleans or null. `--meta` wins over a key given in both. `turn` reads it
    /// once COMMAND has exited 0 (a missing file is no metadata), so the agent can write
    /// its final reply there.
    #[arg(long, value_name = "FILE.json")]
    pub meta_file: Option<PathBuf>,
}

impl MetaArgs {
    /// The metadata the arguments give, checked.
    ///
    /// # Errors
    /// `Usage` naming the argument, key or file at fault.
    pub fn to_map(&self) -> Result<BTreeMap<String, serde_json::Value>> {
        let mut out = BTreeMap::new();
        if let Some(f) = &self.meta_file {
            out = turn::read_meta_file(f)?;
        }
        for kv in &self.meta {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| Error::Usage(format!("--meta {kv:?}: expected KEY=VALUE")))?;
            check_meta_key(k)?;
            out.insert(k.to_string(), serde_json::Value::String(v.to_string()));
        }
        check_meta(&out)?;
        Ok(out)
    }
}

/// `--user` and `--as-root` of `turn` and `exec`.
#[derive(Args, Debug, Default)]
pub struct RunAsArgs {
    /// Run COMMAND as USER (a name or uid), with its primary and supplementary groups and
    /// its HOME, USER and LOGNAME. Default: the owner of the workspace's (first) root
    /// directory; refused when that is root (see docs/runner.md). Only root can switch.
    #[arg(long, value_name = "USER", conflicts_with = "as_root")]
    pub user: Option<String>,
    /// Run COMMAND as root (the agent then has root's power over the machine): only when
    /// asked, never by default.
    #[arg(long)]
    pub as_root: bool,
}

impl RunAsArgs {
    pub fn options(&self) -> RunAsOptions {
        RunAsOptions {
            user: self.user.clone(),
            as_root: self.as_root,
        }
    }
}

/// What `gc --help` says after the flags: the policy in a restic user's words.
const GC_POLICY_HELP: &str = "\
Retention policy (restic's `forget` rules, per branch):
  A checkpoint is kept when ANY rule keeps it; the others are pruned. Branch heads, labelled
  checkpoints, pinned checkpoints (live mounts and views) and workspace bases are always kept
  and count towards --keep-last. With no --keep-* flag gc uses STORE.json's \"retention\"
  (same names with _: {\"keep_daily\": 7, \"keep_within\": \"2w\"}); with neither it keeps
  every checkpoint and only sweeps unreachable objects and ephemeral files.

  --keep-hourly/daily/weekly/monthly/yearly N: take the branch's checkpoints newest first and
  keep the newest of each of the last N hours/days/weeks/months/years that have one (periods
  without a checkpoint do not count). Periods are UTC (restic uses local time), weeks are ISO
  weeks (Monday to Sunday), months and years are calendar ones.

  --keep-within DURATION keeps checkpoints less than DURATION older than the branch's newest
  checkpoint (as restic: not relative to now, so an idle branch keeps its last stretch).
  DURATION is a number and a unit, combinable: s, min, h, d, w, mo (or month, months, M),
  y (or year, years), e.g. 90min, 36h, 7d, 2w, 6mo, 1y, 1y6mo, 1h30min, 1.5h. A month is
  30.44 days and a year 365.25 days (fixed lengths, not calendar arithmetic).
  A bare `m` is REFUSED: restic reads 2m as two months, most other tools as two minutes;
  write 2mo or 2min.

  restic's --keep-tag: labels are ckptfs's tags, and labelled checkpoints are always kept, so
  there is no --keep-tag (or --keep-label); `ckptfs label STORE ID NAME` protects one.

  --dry-run prints every checkpoint with every reason that keeps it (or `pruned`); --json
  gives the same as `decisions`.

Examples:
  ckptfs gc STORE --dry-run --keep-last 10 --keep-daily 7 --keep-weekly 5 --keep-monthly 12
  ckptfs gc STORE --keep-within 2w --keep-branch main";

/// `gc` arguments.
#[derive(Args, Debug)]
#[command(after_help = GC_POLICY_HELP)]
pub struct GcArgs {
    /// The store directory.
    pub store: PathBuf,
    /// Print the plan without deleting anything: every checkpoint, kept (and why) or pruned,
    /// and what would be freed. The report is the one gc prints when it applies the plan.
    #[arg(long)]
    pub dry_run: bool,
    /// Collect remote NAME instead (under the remote's lock; never while a push from any
    /// machine is in flight): publish this store's forgets there, remove the records and
    /// packs no remote ref reaches, and repack packs partly unused (see --max-unused). The
    /// dry run prints the same plan; a gc stopped anywhere leaves the remote complete.
    #[arg(long, value_name = "NAME")]
    pub remote: Option<String>,
    /// With --remote: repack packs partly garbage (live objects into new packs, then the old
    /// packs go) until at most LIMIT of the remote's pack bytes is unused: a percent (default
    /// 5%, as restic's prune), a size (100M), or `unlimited` (never repack).
    #[arg(long, value_name = "LIMIT", requires = "remote")]
    pub max_unused: Option<String>,
    /// With --remote: also merge packs under half the pack target (4 MiB) into full ones,
    /// as restic's prune --repack-small (many small pushes leave many small packs).
    #[arg(long, requires = "remote")]
    pub repack_small: bool,
    /// With --remote: repack at most SIZE of packs in this run (e.g. 1G), as restic's
    /// --max-repack-size; the rest waits for the next gc.
    #[arg(long, value_name = "SIZE", requires = "remote", value_parser = super::size_arg)]
    pub max_repack_size: Option<u64>,
    /// Keep the N newest checkpoints of each branch.
    #[arg(long, value_name = "N", value_parser = super::keep_count_arg)]
    pub keep_last: Option<u32>,
    /// Keep checkpoints less than DURATION older than the newest of their branch (e.g. 36h,
    /// 7d, 2w, 6mo, 1y, 1h30min; `m` is refused: write min or mo).
    #[arg(long, value_name = "DURATION")]
    pub keep_within: Option<String>,
    /// Keep the newest checkpoint of each of the last N hours (UTC) that have one, per branch.
    #[arg(long, value_name = "N", value_parser = super::keep_count_arg)]
    pub keep_hourly: Option<u32>,
    /// Keep the newest checkpoint of each of the last N days (UTC) that have one, per branch.
    #[arg(long, value_name = "N", value_parser = super::keep_count_arg)]
    pub keep_daily: Option<u32>,
    /// Keep the newest checkpoint of each of the last N weeks (ISO, UTC) that have one, per branch.
    #[arg(long, value_name = "N", value_parser = super::keep_count_arg)]
    pub keep_weekly: Option<u32>,
    /// Keep the newest checkpoint of each of the last N months (UTC) that have one, per branch.
    #[arg(long, value_name = "N", value_parser = super::keep_count_arg)]
    pub keep_monthly: Option<u32>,
    /// Keep the newest checkpoint of each of the last N years (UTC) that have one, per branch.
    #[arg(long, value_name = "N", value_parser = super::keep_count_arg)]
    pub keep_yearly: Option<u32>,
    /// Keep every checkpoint recorded on branch NAME (repeatable).
    #[arg(long, value_name = "NAME")]
    pub keep_branch: Vec<String>,
    /// restic's --keep-tag: refused with an explanation (labelled checkpoints are always kept).
    #[arg(long, value_name = "TAG", hide = true, alias = "keep-label")]
    pub keep_tag: Vec<String>,
    /// Also delete displaced/ (trees set aside by restore/switch); otherwise they are listed.
    #[arg(long)]
    pub prune_displaced: bool,
    /// Delete all of cache/ (rebuildable; the next capture reads every file again).
    #[arg(long)]
    pub clear_cache: bool,
    #[command(flatten)]
    pub json: JsonFlag,
}
