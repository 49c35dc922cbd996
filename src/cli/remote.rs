//! CLI of remotes: `remote add|list|remove`, `push`, `clone`, `fetch`, `pull`, and the
//! `--remote` forms of `verify` and `gc` (see `ckptfs::remote`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use ckptfs::remote::redact::redact;
use ckptfs::remote::{self, health, prune, sync, InitRemote, Remote, RemoteConfig};
use ckptfs::{Error, Result, Store};

use super::{print_json, split_kv, JsonFlag};

/// How to reach and open a remote: shared by `remote add` and `clone`.
#[derive(Args, Debug, Clone)]
pub struct ReachArgs {
    /// S3 endpoint URL (e.g. http://127.0.0.1:3900 for a local Garage); default: AWS.
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// S3 region (default: AWS_REGION, else us-east-1).
    #[arg(long, value_name = "R")]
    pub region: Option<String>,
    /// An AWS-format credentials file to read the access key from (else the AWS_*
    /// environment). Only its path is recorded, never its contents.
    #[arg(long, value_name = "FILE")]
    pub credentials: Option<PathBuf>,
    /// The file whose bytes open the remote's key (else CKPTFS_PASSPHRASE or
    /// CKPTFS_PASSPHRASE_FILE). Only its path is recorded.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Bytes of lazily fetched objects kept in the store before the oldest are evicted
    /// (e.g. 2G; default 10G).
    #[arg(long, value_name = "SIZE", value_parser = super::size_arg)]
    pub cache_size: Option<u64>,
    /// Give up on a request that gets no answer for this long (1s to 10min, e.g. 30s;
    /// default 10s). Recorded with the remote: push, pull, fetch and lazy reads use it. A
    /// request that keeps receiving may take six times as long.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub timeout: Option<std::time::Duration>,
}

impl ReachArgs {
    fn config(&self, url: &str) -> Result<RemoteConfig> {
        remote::backend::parse_s3_url(url)?;
        if let Some(e) = &self.endpoint {
            remote::redact::check_endpoint(e)?;
        }
        // Files named on the command line are checked before any request: a missing key
        // file was a network error that never named it.
        for (what, f) in [
            ("--key-file", &self.key_file),
            ("--credentials", &self.credentials),
        ] {
            if let Some(f) = f {
                if !f.is_file() {
                    return Err(Error::Usage(format!(
                        "{what} {}: {}",
                        f.display(),
                        if f.exists() {
                            "not a regular file"
                        } else {
                            "no such file"
                        }
                    )));
                }
            }
        }
        if let Some(t) = self.timeout {
            remote::backend::check_timeout(t)?;
        }
        let abs = |p: &PathBuf| ckptfs::store::absolute(p);
        Ok(RemoteConfig {
            url: url.to_string(),
            endpoint: self.endpoint.clone(),
            region: self.region.clone(),
            credentials: self.credentials.as_ref().map(abs).transpose()?,
            key_file: self.key_file.as_ref().map(abs).transpose()?,
            cache_bytes: self.cache_size.unwrap_or(remote::DEFAULT_CACHE_BYTES),
            timeout_ms: self
                .timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum RemoteCommand {
    /// Add a remote: S3-compatible storage (AWS, Garage, MinIO...) at s3://BUCKET/PREFIX.
    ///
    /// An empty prefix is made a ckptfs remote: a random master key, wrapped under the key
    /// file or passphrase through argon2id, encrypts everything on this machine before it
    /// leaves (XChaCha20-Poly1305). An existing remote must open with the key given.
    /// Credentials come from the AWS_* environment or --credentials FILE; neither they nor the
    /// key are stored (only file paths).
    ///
    /// Example: CKPTFS_PASSPHRASE=... ckptfs remote add /var/lib/ckpt origin
    /// s3://ckpt/rooms/a --endpoint http://127.0.0.1:3900 --region garage
    Add(RemoteAddArgs),
    /// List the store's remotes with what was last seen of their branches.
    List(RemoteListArgs),
    /// Forget a remote here (its refs and index copies; nothing on the remote changes).
    Remove(RemoteRemoveArgs),
}

#[derive(Args, Debug)]
pub struct RemoteAddArgs {
    pub store: PathBuf,
    pub name: String,
    /// s3://BUCKET/PREFIX
    pub url: String,
    #[command(flatten)]
    pub reach: ReachArgs,
    /// Make a new remote without encryption: anyone who can read the bucket reads the
    /// history, and object names there are plaintext SHA-256 ids. Only on purpose.
    #[arg(long)]
    pub no_encryption: bool,
    /// argon2id memory in KiB for a new key record (default 65536).
    #[arg(long, value_name = "KIB")]
    pub kdf_memory: Option<u32>,
    /// argon2id passes for a new key record (default 3).
    #[arg(long, value_name = "N")]
    pub kdf_passes: Option<u32>,
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Args, Debug)]
pub struct RemoteListArgs {
    pub store: PathBuf,
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Args, Debug)]
pub struct RemoteRemoveArgs {
    pub store: PathBuf,
    pub name: String,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `push` arguments.
#[derive(Args, Debug)]
pub struct PushArgs {
    pub store: PathBuf,
    /// The remote (default: the only one, or `origin`).
    pub remote: Option<String>,
    /// Branches, labels or checkpoints to push (default: every branch and label).
    pub what: Vec<String>,
    /// Move remote branches even when their head is not an ancestor of ours (what the
    /// remote had there stays in its history only if another ref reaches it).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `clone` arguments.
#[derive(Args, Debug)]
pub struct CloneArgs {
    /// s3://BUCKET/PREFIX of a remote some store pushed to.
    pub url: String,
    /// The new store directory (missing or empty).
    pub store: PathBuf,
    #[command(flatten)]
    pub reach: ReachArgs,
    /// Record root NAME at /PATH instead of the path the remote's store has (repeatable).
    #[arg(long = "root", value_name = "NAME=/PATH")]
    pub roots: Vec<String>,
    /// Name of the remote in the new store.
    #[arg(long, default_value = "origin")]
    pub name: String,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `fetch` / `pull` arguments.
#[derive(Args, Debug)]
pub struct FetchArgs {
    pub store: PathBuf,
    /// The remote (default: the only one, or `origin`).
    pub remote: Option<String>,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// The remote a command means: the one named, else the only one, else `origin`.
fn pick_remote(store: &Store, name: Option<&str>) -> Result<String> {
    if let Some(n) = name {
        remote::check_remote_name(n)?;
        return Ok(n.to_string());
    }
    let all = remote::list_configs(store)?;
    match all.as_slice() {
        [] => Err(Error::NotFound(format!(
            "remote: store {} has none (ckptfs remote add)",
            store.root().display()
        ))),
        [(n, _)] => Ok(n.clone()),
        _ if all.iter().any(|(n, _)| n == "origin") => Ok("origin".into()),
        _ => Err(Error::Usage(format!(
            "which remote? the store has {}",
            all.iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

pub fn run_remote(c: RemoteCommand) -> Result<i32> {
    match c {
        RemoteCommand::Add(a) => {
            let store = ckptfs::remote::open_store(&a.store)?;
            remote::check_remote_name(&a.name)?;
            if remote::read_config(&store, &a.name).is_ok() {
                return Err(Error::Conflict(format!(
                    "remote {} exists (ckptfs remote remove it first)",
                    a.name
                )));
            }
            let cfg = a.reach.config(&a.url)?;
            let init = InitRemote {
                no_encryption: a.no_encryption,
                kdf_memory_kib: a.kdf_memory,
                kdf_passes: a.kdf_passes,
            };
            let r = Remote::open(&a.name, cfg.clone(), Some((&init, store.config())))?;
            remote::write_config(&store, &a.name, &cfg)?;
            store.append_audit(&serde_json::json!({
                "op": "remote add", "remote": a.name, "url": redact(&cfg.url),
                "endpoint": cfg.endpoint.as_deref().map(redact), "time_ns": ckptfs::text::time::now_ns(),
            }))?;
            if a.json.json {
                print_json(&serde_json::json!({
                    "name": a.name, "url": redact(&cfg.url),
                    "endpoint": cfg.endpoint.as_deref().map(redact),
                    "region": cfg.region, "encrypted": r.keys.encrypted(),
                }))?;
            } else {
                println!(
                    "remote {} -> {} ({})",
                    a.name,
                    redact(&cfg.url),
                    if r.keys.encrypted() {
                        "encrypted"
                    } else {
                        "NOT encrypted"
                    }
                );
            }
            Ok(0)
        }
        RemoteCommand::List(a) => {
            let store = ckptfs::remote::open_store(&a.store)?;
            let mut out = Vec::new();
            for (name, cfg) in remote::list_configs(&store)? {
                let refs = remote::read_refs(&store, &name)?;
                out.push(serde_json::json!({
                    "name": name, "url": redact(&cfg.url),
                    "endpoint": cfg.endpoint.as_deref().map(redact),
                    "region": cfg.region, "cache_bytes": cfg.cache_bytes,
                    "timeout_ms": u64::try_from(cfg.timeout().as_millis()).unwrap_or(u64::MAX),
                    "branches": refs.branches, "labels": refs.labels,
                }));
                if !a.json.json {
                    let ep = cfg
                        .endpoint
                        .map(|e| format!(" ({})", redact(&e)))
                        .unwrap_or_default();
                    println!("{name}\t{}{ep}", redact(&cfg.url));
                    for (b, id) in &refs.branches {
                        println!("  {b}\t{}", id.short());
                    }
                }
            }
            if a.json.json {
                print_json(&out)?;
            }
            Ok(0)
        }
        RemoteCommand::Remove(a) => {
            let store = ckptfs::remote::open_store(&a.store)?;
            remote::read_config(&store, &a.name)?;
            let dir = remote::remote_dir(&store, &a.name);
            ckptfs::fs::atomic::remove_dir_all(&dir)?;
            store.append_audit(&serde_json::json!({
                "op": "remote remove", "remote": a.name, "time_ns": ckptfs::text::time::now_ns(),
            }))?;
            if a.json.json {
                print_json(&serde_json::json!({ "removed": a.name }))?;
            } else {
                println!("removed remote {}", a.name);
            }
            Ok(0)
        }
    }
}

fn short(id: &Option<ckptfs::id::ObjectId>) -> String {
    id.map_or("(new)".into(), |i| i.short())
}

pub fn run_push(a: PushArgs) -> Result<i32> {
    let store = ckptfs::remote::open_store(&a.store)?;
    // `push STORE BRANCH` with the only remote: a first word that is no remote is a ref.
    let (name, what) = match &a.remote {
        Some(r) if remote::read_config(&store, r).is_err() && a.what.is_empty() => {
            let mut w = vec![r.clone()];
            w.extend(a.what.clone());
            (pick_remote(&store, None)?, w)
        }
        r => (pick_remote(&store, r.as_deref())?, a.what.clone()),
    };
    let r = Remote::open_named(&store, &name)?;
    let _shared = store.lock_shared()?;
    let started = std::time::Instant::now();
    let rep = sync::push(
        &store,
        &r,
        &sync::PushOptions {
            what,
            force: a.force,
        },
    )?;
    store.append_audit(&serde_json::json!({
        "op": "push", "remote": name, "objects": rep.objects, "bytes": rep.bytes,
        "records": rep.records, "branches": rep.branches, "labels": rep.labels,
        "time_ns": ckptfs::text::time::now_ns(),
    }))?;
    if a.json.json {
        print_json(&rep)?;
    } else {
        println!(
            "pushed to {name}: {} objects in {} packs ({} bytes), {} records{} in {:.2}s",
            rep.objects,
            rep.packs,
            rep.bytes,
            rep.records,
            if rep.recovered > 0 {
                format!(
                    ", {} objects recovered from an interrupted push",
                    rep.recovered
                )
            } else {
                String::new()
            },
            started.elapsed().as_secs_f64()
        );
        for (b, m) in &rep.branches {
            println!("  branch {b}: {} -> {}", short(&m.old), m.new.short());
        }
        for l in &rep.labels {
            println!("  label {l}");
        }
        if rep.forgotten > 0 {
            println!(
                "  {} checkpoints forgotten here are now forgotten on {name} (gc --remote collects them)",
                rep.forgotten
            );
        }
        if rep.branches.is_empty()
            && rep.labels.is_empty()
            && rep.records == 0
            && rep.forgotten == 0
        {
            println!("  everything up to date");
        }
    }
    Ok(0)
}

fn print_fetch(rep: &sync::FetchReport) {
    println!(
        "fetched from {}: {} records, {} branches, {} labels ({} objects on the remote, fetched when read)",
        rep.remote,
        rep.records,
        rep.branches.len(),
        rep.labels.len(),
        rep.remote_objects
    );
    for b in &rep.created_branches {
        println!("  new branch {b}");
    }
    for l in &rep.created_labels {
        println!("  new label {l}");
    }
    if rep.forgotten > 0 {
        println!(
            "  {} checkpoints forgotten on the remote, stepped over",
            rep.forgotten
        );
    }
}

pub fn run_clone(a: CloneArgs) -> Result<i32> {
    let cfg = a.reach.config(&a.url)?;
    remote::check_remote_name(&a.name)?;
    let mut roots = BTreeMap::new();
    for r in &a.roots {
        let (k, v) = split_kv("--root", r)?;
        roots.insert(k.to_string(), PathBuf::from(v));
    }
    let (store, rep) = sync::clone(
        &a.store,
        &sync::CloneOptions {
            config: cfg,
            roots,
            name: a.name.clone(),
        },
    )?;
    store.append_audit(&serde_json::json!({
        "op": "clone", "url": redact(&a.url), "records": rep.records, "time_ns": ckptfs::text::time::now_ns(),
    }))?;
    if a.json.json {
        print_json(&rep)?;
    } else {
        println!("cloned {} into {}", redact(&a.url), store.root().display());
        print_fetch(&rep);
    }
    Ok(0)
}

pub fn run_fetch(a: FetchArgs) -> Result<i32> {
    let store = ckptfs::remote::open_store(&a.store)?;
    let name = pick_remote(&store, a.remote.as_deref())?;
    let r = Remote::open_named(&store, &name)?;
    let _x = store.lock_exclusive()?;
    let rep = sync::fetch(&store, &r)?;
    store.append_audit(&serde_json::json!({
        "op": "fetch", "remote": name, "records": rep.records, "time_ns": ckptfs::text::time::now_ns(),
    }))?;
    if a.json.json {
        print_json(&rep)?;
    } else {
        print_fetch(&rep);
    }
    Ok(0)
}

pub fn run_pull(a: FetchArgs) -> Result<i32> {
    let store = ckptfs::remote::open_store(&a.store)?;
    let name = pick_remote(&store, a.remote.as_deref())?;
    let r = Remote::open_named(&store, &name)?;
    let _x = store.lock_exclusive()?;
    let rep = sync::pull(&store, &r)?;
    store.append_audit(&serde_json::json!({
        "op": "pull", "remote": name, "forwarded": rep.forwarded,
        "time_ns": ckptfs::text::time::now_ns(),
    }))?;
    if a.json.json {
        print_json(&rep)?;
    } else {
        print_fetch(&rep.fetch);
        for (b, m) in &rep.forwarded {
            println!("  branch {b}: {} -> {}", short(&m.old), m.new.short());
        }
        for (b, why) in &rep.skipped {
            println!("  branch {b} left alone: {why}");
        }
    }
    // Exit 1 says why on stderr too (with --json, stdout is the report alone).
    if let Some((b, why)) = rep.skipped.iter().next() {
        let more = rep.skipped.len() - 1;
        eprintln!(
            "ckptfs: pull left branch {b} alone: {why}{}",
            if more > 0 {
                format!(" (and {more} more: see above)")
            } else {
                String::new()
            }
        );
    }
    Ok(if rep.skipped.is_empty() { 0 } else { 1 })
}

/// `verify --remote NAME`.
pub fn run_verify_remote(store: &std::path::Path, name: &str, json: bool) -> Result<i32> {
    let store = ckptfs::remote::open_store(store)?;
    let r = Remote::open_named(&store, name)?;
    let rep = health::verify(&store, &r)?;
    if json {
        print_json(&rep)?;
    } else {
        for f in &rep.findings {
            println!("{}: {}", f.object, f.problem);
            for p in &f.paths {
                println!("  used by {p}");
            }
        }
        println!(
            "remote {name}: {} checkpoints, {} objects ({} bytes) checked, {} findings",
            rep.checkpoints,
            rep.objects,
            rep.bytes,
            rep.findings.len()
        );
    }
    Ok(if rep.findings.is_empty() { 0 } else { 1 })
}

/// `gc --remote NAME [--dry-run] [--max-unused LIMIT] [--repack-small] [--max-repack-size SIZE]`.
pub fn run_gc_remote(a: &super::args::GcArgs, name: &str) -> Result<i32> {
    let max_unused = match &a.max_unused {
        Some(m) => m.parse::<prune::MaxUnused>()?,
        None => prune::MaxUnused::default(),
    };
    let json = a.json.json;
    let store = ckptfs::remote::open_store(&a.store)?;
    let r = Remote::open_named(&store, name)?;
    let plan = prune::gc(
        &store,
        &r,
        &prune::RemoteGcOptions {
            dry_run: a.dry_run,
            max_unused,
            repack_small: a.repack_small,
            max_repack_bytes: a.max_repack_size,
        },
    )?;
    // A dry run changes nothing and leaves no audit line.
    if plan.applied {
        store.append_audit(&serde_json::json!({
            "op": "gc --remote", "remote": name, "records": plan.records.len(),
            "packs": plan.packs.len(), "repacked": plan.repacked.len(),
            "bytes_freed": plan.bytes_freed, "time_ns": ckptfs::text::time::now_ns(),
        }))?;
    }
    if json {
        print_json(&plan)?;
    } else {
        print_gc_plan(name, &plan);
    }
    Ok(0)
}

/// The text of a remote gc plan: the same lines for `--dry-run` and the real run.
fn print_gc_plan(name: &str, p: &prune::RemoteGcPlan) {
    use ckptfs::units::human_bytes as hb;
    let (go, went) = if p.applied {
        ("removed", "freed")
    } else {
        ("would remove", "would free")
    };
    let forgot = if p.forgotten.is_empty() {
        String::new()
    } else {
        format!(
            " ({} checkpoints forgotten{})",
            p.forgotten.len(),
            if p.forgets_published > 0 {
                format!(
                    ", {} forgets published from this store",
                    p.forgets_published
                )
            } else {
                String::new()
            }
        )
    };
    println!(
        "remote {name}: {go} {} records{forgot} and {} packs ({}) no ref reaches",
        p.records.len(),
        p.packs.len(),
        hb(p.pack_bytes)
    );
    let limit = match p.max_unused_bytes {
        Some(b) => format!("{} = {}", p.max_unused, hb(b)),
        None => p.max_unused.clone(),
    };
    let limit = match p.max_repack_bytes {
        Some(m) => format!("{limit}, max-repack-size {}", hb(m)),
        None => limit,
    };
    let small = p.repacked.iter().filter(|r| r.reason == "small").count();
    let limit = if small > 0 {
        format!("{limit}; {small} of them small")
    } else {
        limit
    };
    if p.repacked.is_empty() {
        println!("  repack: none needed (max-unused {limit})");
    } else {
        println!(
            "  repack: {} packs ({}, {} of it live: {} objects) into {} new packs (max-unused {limit})",
            p.repacked.len(),
            hb(p.repacked_pack_bytes),
            hb(p.repacked_live_bytes),
            p.repacked_objects,
            p.new_packs
        );
    }
    println!(
        "  packs: {} -> {} ({went} {}); unused {} -> {}",
        hb(p.pack_bytes_before),
        hb(p.pack_bytes_after),
        hb(p.bytes_freed),
        hb(p.unused_bytes_before),
        hb(p.unused_bytes_after)
    );
    println!(
        "  {} index files into one; {} unreached objects left in packs kept whole; {} objects reached",
        p.index_files_replaced, p.kept_unreached, p.reached_objects
    );
}
