//! CLI of the commands that make a store and record or put back its history: init, capture,
//! restore, label.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;

use ckptfs::history::walk::locate;
use ckptfs::ingest::capture::{capture, CaptureOptions};
use ckptfs::store::refs::DEFAULT_BRANCH;
use ckptfs::store::{InitOptions, RootConfig};
use ckptfs::transfer::restore;
use ckptfs::units::human_bytes;
use ckptfs::{Error, Result, Store};

use super::{print_json, split_kv, JsonFlag};

/// `init` arguments.
#[derive(Args, Debug)]
pub struct InitArgs {
    /// Directory of the new store (missing or empty).
    pub store: PathBuf,
    /// A root to checkpoint, NAME=/ABSOLUTE/PATH (repeatable).
    #[arg(long = "root", value_name = "NAME=/ABS/PATH", required = true)]
    pub roots: Vec<String>,
    /// Exclude rule for a root, NAME=GLOB (repeatable). A glob without '/' matches a name
    /// at any depth (".netrc"); with '/' it matches the path from the root ("cache/**";
    /// "**/" matches any depth: "**/.aws/credentials"). NAME='!GLOB' is a keep rule: what it
    /// matches is captured whatever other rule matches it; that is how one default rule is
    /// switched off for a root (e.g. --exclude 'ws=!*.key').
    #[arg(long = "exclude", value_name = "NAME=GLOB")]
    pub excludes: Vec<String>,
    /// Object compression: none (default) or zstd (ids stay the hash of the uncompressed
    /// bytes). zstd halves the store growth per agent turn for a little capture time.
    #[arg(long, value_parser = ["none", "zstd"], default_value = "none")]
    pub compression: String,
    /// Do not give the roots the default credential excludes. By default every root gets
    /// them, written into STORE.json (visible and editable there; `init` prints how many):
    /// .netrc, .git-credentials, .pgpass, .env and .env.* (not .env.example/.sample/.template),
    /// ssh private keys (.ssh/id_* but not *.pub, id_rsa, id_ed25519..., ssh_host_*_key),
    /// private-key names (*.key, privkey*.pem, *-key.pem, *_key.pem, key.pem, *.p12, *.pfx,
    /// *.ppk; not every *.pem: CA bundles are public), GnuPG secret keys, AWS credentials
    /// and SSO/CLI caches (not .aws/config), gcloud credentials.db, access_tokens.db,
    /// legacy_credentials and application_default_credentials.json, Azure token caches,
    /// gh hosts.yml, glab config.yml, .npmrc, .pypirc, gem/cargo credentials,
    /// .docker/config.json, .kube/config, .vault-token, credentials.tfrc.json, and agent
    /// logins (auth.json at a root's top, .codex/auth.json, .credentials.json,
    /// oauth_creds.json). Rules match at any depth.
    #[arg(long)]
    pub no_default_excludes: bool,
}

/// `capture` arguments.
#[derive(Args, Debug)]
pub struct CaptureArgs {
    /// The store directory.
    pub store: PathBuf,
    /// Branch to record on (created if missing).
    #[arg(long, short, default_value = DEFAULT_BRANCH)]
    pub branch: String,
    #[command(flatten)]
    pub record: super::args::RecordArgs,
    /// Capture root NAME from DIR instead of its recorded path (repeatable).
    #[arg(long, value_name = "NAME=DIR")]
    pub from: Vec<String>,
    /// Extra exclude glob for every root (repeatable); '!GLOB' keeps what it matches.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `restore` arguments.
#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("dest").required(true).args(["to", "in_place"])))]
pub struct RestoreArgs {
    /// The store directory.
    pub store: PathBuf,
    /// What to restore: CHECKPOINT (an id or unique prefix, a label or a branch) for a whole
    /// root, or CHECKPOINT:ROOT/PATH for a directory, a file or a symlink in it.
    pub checkpoint: String,
    /// Which root to restore (needed when the store has several; or CHECKPOINT:ROOT).
    #[arg(long)]
    pub root: Option<String>,
    /// Where to write. A directory (or a root) is restored AS DEST, like `cp -rT`: DEST
    /// becomes that directory. A file or symlink is restored INTO DEST when DEST is an
    /// existing directory (under its own name), else AS DEST, like `cp`. DEST must be
    /// outside the roots, unless it is the place the entry was captured from (then this is
    /// --in-place).
    #[arg(long, value_name = "DEST")]
    pub to: Option<PathBuf>,
    /// Put it back where it was captured from: ROOT/PATH at its place in the root (what is
    /// there now is moved to STORE/displaced/); without a root or path, every root of the
    /// checkpoint at its recorded path, all or none. Refused under a mounted workspace
    /// (use `switch` there).
    #[arg(long)]
    pub in_place: bool,
    /// Restore only what matches GLOB (repeatable), with the directories that hold it; a
    /// directory that matches comes whole. Paths are relative to the restored directory; a
    /// glob without '/' matches a name at any depth ("*.py"), one with '/' the path
    /// ("src/**"). For directories only.
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// Do not restore what matches GLOB (repeatable; a directory with all it holds). Same
    /// globs as --include; an exclude wins over an include.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `label` arguments.
#[derive(Args, Debug)]
pub struct LabelArgs {
    pub store: PathBuf,
    pub checkpoint: String,
    pub name: String,
}

/// `ckptfs init`.
pub fn run_init(a: InitArgs) -> Result<i32> {
    let mut map = BTreeMap::new();
    for r in &a.roots {
        let (name, path) = split_kv("--root", r)?;
        let rc = RootConfig {
            path: PathBuf::from(path),
            exclude: Vec::new(),
        };
        if map.insert(name.to_string(), rc).is_some() {
            return Err(Error::Usage(format!("root {name} given twice")));
        }
    }
    for x in &a.excludes {
        let (name, glob) = split_kv("--exclude", x)?;
        map.get_mut(name)
            .ok_or_else(|| Error::Usage(format!("--exclude {x}: no root named {name}")))?
            .exclude
            .push(glob.to_string());
    }
    let s = Store::init(
        &a.store,
        &InitOptions {
            roots: map,
            zstd: a.compression == "zstd",
            no_default_excludes: a.no_default_excludes,
        },
    )?;
    println!("created store {}", s.root().display());
    for (n, r) in &s.config().roots {
        let defaults = ckptfs::store::DEFAULT_EXCLUDES
            .iter()
            .filter(|d| r.exclude.iter().any(|x| x == d.glob))
            .count();
        println!(
            "  root {n} = {} ({} exclude rules, {defaults} of them the default credential \
             rules; see STORE.json)",
            r.path.display(),
            r.exclude.len()
        );
    }
    Ok(0)
}

/// `ckptfs capture`.
pub fn run_capture(a: CaptureArgs) -> Result<i32> {
    let s = ckptfs::remote::open_store(&a.store)?;
    let mut from = BTreeMap::new();
    for f in &a.from {
        let (name, dir) = split_kv("--from", f)?;
        from.insert(name.to_string(), PathBuf::from(dir));
    }
    let opts = CaptureOptions {
        branch: a.branch,
        label: a.record.label,
        message: a.record.message,
        from,
        exclude: a.exclude,
        progress: !a.json.json,
        annotations: ckptfs::store::checkpoint::Annotations {
            meta: a.record.meta.to_map()?,
            ..Default::default()
        },
    };
    let r = capture(&s, &opts)?;
    if a.json.json {
        let labels = s.list_labels()?;
        print_json(&serde_json::json!({"id": r.id,
            "checkpoint": super::json::checkpoint(&r.checkpoint),
            "labels": super::json::labels_of(&labels, &r.id)}))?;
    } else {
        let st = &r.checkpoint.stats;
        println!(
            "checkpoint {} on {}: {} files, {} ({} read), {} new objects, {} new",
            r.id.short(),
            r.checkpoint.branch,
            st.files,
            human_bytes(st.bytes),
            st.files_read,
            st.new_objects,
            human_bytes(st.new_bytes)
        );
    }
    Ok(0)
}

/// `ckptfs restore`.
pub fn run_restore(a: RestoreArgs) -> Result<i32> {
    let s = ckptfs::remote::open_store(&a.store)?;
    let has_root = a.checkpoint.contains(':');
    let spec = match (&a.root, has_root) {
        (Some(r), false) => format!("{}:{r}", a.checkpoint),
        (Some(_), true) => {
            return Err(Error::Usage(
                "give the root either as --root or as CHECKPOINT:ROOT, not both".into(),
            ))
        }
        (None, _) => a.checkpoint.clone(),
    };
    let opts = restore::RestoreOptions {
        include: a.include,
        exclude: a.exclude,
    };
    let reports = match &a.to {
        None if a.root.is_none() && !has_root => {
            let id = s.resolve(&spec)?;
            let rec = s.read_checkpoint(&id)?;
            let first = rec.roots.keys().next().cloned().unwrap_or_default();
            let loc = locate(&s, &format!("{spec}:{first}"))?;
            restore::restore_all_in_place(&s, &loc, &opts)?
        }
        None => {
            let loc = locate(&s, &spec)?;
            vec![restore::restore_to(
                &s,
                &loc,
                restore::Destination::InPlace,
                &opts,
            )?]
        }
        Some(to) => {
            let loc = locate(&s, &spec)?;
            vec![restore::restore_to(
                &s,
                &loc,
                restore::Destination::To(to),
                &opts,
            )?]
        }
    };
    if a.json.json {
        match reports.as_slice() {
            [one] if a.to.is_some() || a.root.is_some() || has_root => print_json(one)?,
            all => print_json(&serde_json::json!({ "restored": all }))?,
        }
    } else {
        for r in &reports {
            let what = if r.path.is_empty() {
                r.root.clone()
            } else {
                format!("{}/{}", r.root, r.path)
            };
            println!(
                "restored {}:{what} ({}) to {} ({} files, {})",
                r.checkpoint.short(),
                r.kind,
                r.dir.display(),
                r.files,
                human_bytes(r.bytes)
            );
            if let Some(aside) = &r.moved_aside {
                println!("  what was there was moved to {}", aside.display());
            }
        }
    }
    Ok(0)
}

/// `ckptfs label`.
pub fn run_label(a: LabelArgs) -> Result<i32> {
    let s = ckptfs::remote::open_store(&a.store)?;
    ckptfs::store::refs::check_name("label", &a.name)?;
    let id = s.resolve(&a.checkpoint)?;
    s.mutate(
        "label",
        serde_json::json!({"checkpoint": id, "label": a.name}),
        |_| {
            s.create_label(&a.name, &id)?;
            Ok(((), serde_json::Value::Null))
        },
    )?;
    println!("label {} -> {}", a.name, id.short());
    Ok(0)
}
