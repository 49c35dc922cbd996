//! The store: one directory that is the single canonical root of all durable state.
//!
//! ```text
//! STORE/
//!   STORE.json            format, version, hash, chunker, compression, roots {name: path, exclude},
//!                         optional retention (gc policy defaults; absent in older stores),
//!                         optional runtime (what a runtime fingerprint hashes and runs)
//!   objects/ab/<62 hex>   immutable blobs and trees, mode 0444, raw bytes (".zst": zstd frame);
//!                         the id is the SHA-256 of the uncompressed bytes
//!   checkpoints/<64 hex>  immutable checkpoint records (JSON); the id is the SHA-256 of the file
//!   refs/branches/B.json  movable branch head + lifecycle state (replaced atomically, CAS under lock)
//!   refs/labels/L         immutable label -> checkpoint id (renameat2 NOREPLACE: never replaced;
//!                         only `label delete` removes one, audited)
//!   refs/forgotten/<64 hex>.json  tombstone of a checkpoint `forget` removed: its parents,
//!                         branch and time (no trees, no message), so `log --branch` can show
//!                         the gap and go on; created lazily, never changed
//!   tmp/                  objects being written by a capture; renamed into objects/ once durable
//!   run/RUNNING.json      marker of the mutating operation in progress (a crash leaves it behind)
//!   run/                  also pid files and control sockets of mount daemons
//!   run/views/PID.json    state of a live read-only view daemon (mountpoint, fsname, what)
//!   run/views/PID.log     its log; both removed on clean exit, stale ones pruned by `status`
//!   upper/B/.top-ROOT/ROOT/  upper layer of root ROOT of branch B's live workspace (whiteout =
//!                         char 0/0, opaque dir = trusted.overlay.opaque, renamed dir =
//!                         .redirect); upper/B/.top-ROOT/ is the overlay's upper dir (an upper
//!                         from a build before 2026-12 is upper/B/ROOT/, used as it is)
//!   upper/B/.work-ROOT/   overlayfs work dir;  upper/B/base.json: checkpoint the upper applies to
//!   upper/B/.snapshots-ROOT/  reflink clones of big changed files as the last checkpoint
//!                         read them (XFS, btrfs; named in its stat cache, see `snapshot`)
//!   run/mounts/B.json     a mounted workspace (mountpoints, lower dirs)
//!   run/parked/B.json     branch B's overlays parked read-only by a switch away (its base, each
//!                         root's mount as mounted; see `workspace::park`), synced
//!
//! No mount is inside the store: the workspaces' lower view and the overlays a switch sets
//! aside or parks are under `/run/ckptfs/<id>/` (see [`Store::mounts_dir`]).
//!   displaced/            directories set aside by restore/switch (never deleted silently)
//!   cache/                rebuildable only: stat/<id>-<root> caches for incremental capture
//!                         (and <id>-<root>.upper: a workspace's upper directories, see
//!                         `statcache`); materialized/: unnamed (O_TMPFILE) copies of big files
//!                         a view daemon passes through
//!   remotes/NAME/         a remote (`crate::remote`): config.json (no secrets), refs.json (its
//!                         refs as last seen), index/ (copies of its pack indexes); objects a
//!                         clone fetched lazily are listed in cache/remote-fetched for eviction
//!   audit.jsonl           append-only, one JSON line per operation, synced per line (switch:
//!                         written, left to writeback; it only rearranges live mounts)
//!   lock                  flock: exclusive while a mutating command runs
//! ```
//!
//! Durability order: all objects of a checkpoint are durable (written, synced — fsync each or
//! one `syncfs` for big batches — renamed to their names, directories synced) before its record
//! is written; the record is durable before a ref moves.
//! Garbage-collection roots are the refs (branch heads and labels), labelled checkpoints, the
//! checkpoints kept by the retention policy, and live pins (`run/pins/`); see `upkeep::gc` for the
//! retention class of every path above.
//!
//! This module is the one path authority: nothing else joins store paths by hand. The
//! top-level entries drawn above are listed once, in [`TOP_LEVEL`].

pub mod audit;
pub mod checkpoint;
pub mod exclude;
mod layout;
pub mod lock;
pub mod object;
pub mod pin;
pub mod refs;
pub mod statcache;
pub mod tree;
pub mod tree_cache;
pub mod trust;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::id::ObjectId;

mod roots;
pub use roots::*;

/// Value of `format` in STORE.json.
pub const FORMAT_NAME: &str = "ckptfs-store";
/// The store format version this build writes and reads. Newer versions are refused.
/// - 1: trees without ctimes and inode numbers (`CKT1`).
/// - 2: trees record each entry's captured ctime and inode number (`CKT2`), which views show.
///   A version-1 store keeps writing `CKT1` trees, so older builds can still read it.
/// - 3: trees record hardlinks (`CKT3`, only trees holding a linked file). A version-2 store
///   keeps writing trees without them (each name a file of its own, as before), so the
///   builds that made it can still read it.
pub const FORMAT_VERSION: u32 = 3;
/// Name of the config file at the store root.
pub const CONFIG_FILE: &str = "STORE.json";
/// The largest STORE.json read (roots and their exclude rules; real ones are a few KiB).
const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Where stores keep their mounts (see [`Store::mounts_dir`]).
pub const MOUNTS_BASE: &str = "/run/ckptfs";

/// What a top-level entry of the store is, for [`TOP_LEVEL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopKind {
    /// `STORE.json`: written last by `init`; its presence is what makes a directory a store.
    Config,
    /// A directory `init` creates.
    Dir,
    /// A file `init` creates empty.
    File,
}

/// Every top-level entry of a store, as drawn in the layout above: what [`Store::init`]
/// creates, all an interrupted init can leave behind, and all `doctor` accepts there (besides
/// `.tmp-*` files).
pub const TOP_LEVEL: &[(&str, TopKind)] = &[
    (CONFIG_FILE, TopKind::Config),
    ("objects", TopKind::Dir),
    ("checkpoints", TopKind::Dir),
    ("refs", TopKind::Dir),
    ("tmp", TopKind::Dir),
    ("run", TopKind::Dir),
    ("upper", TopKind::Dir),
    ("displaced", TopKind::Dir),
    ("cache", TopKind::Dir),
    ("lock", TopKind::File),
    ("audit.jsonl", TopKind::File),
    ("remotes", TopKind::Dir),
];

/// Content-defined chunking parameters (FastCDC 2020). Files up to `min` bytes are one object.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ChunkerConfig {
    pub algorithm: String,
    pub min: u32,
    pub avg: u32,
    pub max: u32,
    /// SQLite databases (files over `min` bytes that start with `SQLite format 3\0` and a valid
    /// page size) are cut at fixed offsets every `max(sqlite_block, page size)` bytes instead:
    /// a transaction rewrites scattered pages, and content-defined chunks of 256 KiB would each
    /// hold one of them (a turn's 208 dirty pages of a 67 MB database made 45 MiB of new
    /// chunks; with 16 KiB blocks, 3 MiB). Absent in stores made before it: plain FastCDC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqlite_block: Option<u32>,
}

impl Default for ChunkerConfig {
    /// 64 KiB / 256 KiB / 1 MiB: an append to a large log rewrites at most about 1 MiB, and a
    /// 3 GiB room is about 12k chunk objects.
    fn default() -> Self {
        ChunkerConfig {
            algorithm: "fastcdc-2020".into(),
            min: 64 * 1024,
            avg: 256 * 1024,
            max: 1024 * 1024,
            sqlite_block: Some(16 * 1024),
        }
    }
}

impl ChunkerConfig {
    /// Checks the parameters a store may use: FastCDC 2020, 64 <= min <= avg <= max <=
    /// [`tree::MAX_CHUNK_LEN`], a SQLite block of 512 bytes to that same maximum.
    ///
    /// # Errors
    /// A message naming the parameter at fault.
    pub fn check(&self) -> std::result::Result<(), String> {
        let max = tree::MAX_CHUNK_LEN;
        if self.algorithm != "fastcdc-2020" {
            return Err(format!("unknown chunker algorithm {:?}", self.algorithm));
        }
        if !(64..=self.avg).contains(&self.min) || self.avg > self.max || self.max > max {
            return Err(format!(
                "invalid chunker parameters (min {}, avg {}, max {}: need 64 <= min <= avg <= \
                 max <= {max})",
                self.min, self.avg, self.max
            ));
        }
        if let Some(b) = self.sqlite_block {
            if !(512..=max).contains(&b) {
                return Err(format!(
                    "invalid chunker sqlite_block {b} (need 512 to {max})"
                ));
            }
        }
        Ok(())
    }
}

/// One named root: a directory tree at a fixed absolute path.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RootConfig {
    pub path: PathBuf,
    #[serde(default)]
    pub exclude: Vec<String>,
}

/// Exclude rules `init` gives every root, so credentials stay out of history (README, Security),
/// unless `InitOptions::no_default_excludes`. They are written into STORE.json, where they can
/// be read and edited like any other rule; a `!GLOB` rule (`init --exclude NAME='!GLOB'`)
/// keeps one of them from applying. Stores made before keep their own rules.
///
/// Chosen from what tools really write, and narrow enough not to drop ordinary project files:
/// a name rule (no `/`) matches at any depth, so only names that are credentials wherever they
/// appear are names; the rest are anchored under the tool's directory at any depth (`**/`).
/// Not `*.pem` (CA bundles such as certifi's `cacert.pem` are public and needed in a venv):
/// only the names private keys usually get. Not `.aws/config` (region and profiles; keys
/// belong in `credentials`), but the SSO and CLI token caches.
pub const DEFAULT_EXCLUDES: &[DefaultExclude] = &[
    // Shell-level secrets.
    DefaultExclude::new(".netrc", "machine/login/password lines (curl, git, ftp)"),
    DefaultExclude::new("_netrc", ".netrc under its Windows name"),
    DefaultExclude::new(".git-credentials", "git credential-store tokens"),
    DefaultExclude::new(
        "**/.config/git/credentials",
        "git credential-store, XDG location",
    ),
    DefaultExclude::new(".pgpass", "PostgreSQL passwords"),
    DefaultExclude::new(".env", "dotenv secrets"),
    DefaultExclude::new(".env.*", "dotenv variants (.env.local, .env.production...)"),
    DefaultExclude::new("!.env.example", "dotenv template: no secrets, captured"),
    DefaultExclude::new("!.env.sample", "dotenv template: no secrets, captured"),
    DefaultExclude::new("!.env.template", "dotenv template: no secrets, captured"),
    // SSH and other private keys (public halves stay).
    DefaultExclude::new(
        "**/.ssh/id_*",
        "ssh private keys (id_rsa, id_ed25519, id_ecdsa_sk...)",
    ),
    DefaultExclude::new(
        "!**/.ssh/*.pub",
        "ssh public keys and certificates: captured",
    ),
    DefaultExclude::new("id_rsa", "ssh private key outside .ssh"),
    DefaultExclude::new("id_dsa", "ssh private key outside .ssh"),
    DefaultExclude::new("id_ecdsa", "ssh private key outside .ssh"),
    DefaultExclude::new("id_ed25519", "ssh private key outside .ssh"),
    DefaultExclude::new("ssh_host_*_key", "ssh host private keys (/etc/ssh)"),
    DefaultExclude::new("*.key", "PEM private keys (server.key, tls.key)"),
    DefaultExclude::new("privkey*.pem", "private keys (Let's Encrypt privkey.pem)"),
    DefaultExclude::new("*-key.pem", "private keys (cfssl, mkcert: name-key.pem)"),
    DefaultExclude::new("*_key.pem", "private keys (name_key.pem)"),
    DefaultExclude::new(
        "key.pem",
        "private keys (openssl examples, webpack-dev-server)",
    ),
    DefaultExclude::new("*.p12", "PKCS#12 bundles (hold the private key)"),
    DefaultExclude::new("*.pfx", "PKCS#12 bundles (hold the private key)"),
    DefaultExclude::new("*.ppk", "PuTTY private keys"),
    DefaultExclude::new("**/.gnupg/private-keys-v1.d", "GnuPG secret keys"),
    DefaultExclude::new("**/.gnupg/secring.gpg", "GnuPG 1 secret keyring"),
    // Cloud CLIs.
    DefaultExclude::new("**/.aws/credentials", "AWS access keys"),
    DefaultExclude::new("**/.aws/sso/cache", "AWS SSO tokens"),
    DefaultExclude::new("**/.aws/cli/cache", "AWS CLI assumed-role credentials"),
    DefaultExclude::new(
        "**/.config/gcloud/credentials.db",
        "gcloud OAuth refresh tokens",
    ),
    DefaultExclude::new("**/.config/gcloud/access_tokens.db", "gcloud access tokens"),
    DefaultExclude::new(
        "**/.config/gcloud/legacy_credentials",
        "gcloud per-account keys",
    ),
    DefaultExclude::new(
        "application_default_credentials.json",
        "Google application default credentials",
    ),
    DefaultExclude::new(
        "**/.azure/accessTokens.json",
        "Azure CLI tokens (old versions)",
    ),
    DefaultExclude::new("**/.azure/msal_token_cache.*", "Azure CLI MSAL token cache"),
    DefaultExclude::new(
        "**/.azure/service_principal_entries.*",
        "Azure CLI service principal secrets",
    ),
    // Forges, registries, clusters.
    DefaultExclude::new("**/.config/gh/hosts.yml", "GitHub CLI oauth_token"),
    DefaultExclude::new("**/.config/glab-cli/config.yml", "GitLab CLI tokens"),
    DefaultExclude::new(".npmrc", "npm auth tokens (_authToken)"),
    DefaultExclude::new(".pypirc", "PyPI upload passwords and tokens"),
    DefaultExclude::new("**/.gem/credentials", "RubyGems API key"),
    DefaultExclude::new("**/.cargo/credentials", "crates.io token (old name)"),
    DefaultExclude::new("**/.cargo/credentials.toml", "crates.io token"),
    DefaultExclude::new("**/.docker/config.json", "docker registry auths"),
    DefaultExclude::new(
        "**/.kube/config",
        "Kubernetes client certificates and tokens",
    ),
    DefaultExclude::new(".vault-token", "HashiCorp Vault token"),
    DefaultExclude::new("credentials.tfrc.json", "Terraform Cloud tokens"),
    // Agent CLIs' own logins (a root may be the agent's home itself: `/auth.json`).
    DefaultExclude::new(
        "/auth.json",
        "Codex login at a root's top (root = ~/.codex); Composer auth",
    ),
    DefaultExclude::new("**/.codex/auth.json", "Codex login"),
    DefaultExclude::new(
        ".credentials.json",
        "Claude Code login (~/.claude/.credentials.json)",
    ),
    DefaultExclude::new(
        "oauth_creds.json",
        "Gemini CLI login (~/.gemini/oauth_creds.json)",
    ),
];

/// One rule of [`DEFAULT_EXCLUDES`] and what it keeps out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DefaultExclude {
    pub glob: &'static str,
    pub what: &'static str,
}

impl DefaultExclude {
    const fn new(glob: &'static str, what: &'static str) -> DefaultExclude {
        DefaultExclude { glob, what }
    }
}

/// gc retention policy (per branch; see `upkeep::gc`). Every field absent = keep every checkpoint.
///
/// The rules are restic's `forget` rules, with restic's names: a checkpoint is kept when any
/// rule keeps it. The bucket rules (`keep_hourly` ... `keep_yearly`) take the checkpoints of a
/// branch newest first and keep the newest one of each of the last N hours/days/ISO weeks/
/// months/years (UTC) that have one; periods without a checkpoint do not count.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Keep the N newest checkpoints of each branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_last: Option<u32>,
    /// Keep checkpoints less than this duration older than the newest of their branch (as
    /// restic: relative to the newest, not to now), e.g. "36h", "7d", "2w", "6mo", "1y"; parsed by
    /// [`crate::units::parse_duration`] (a bare `m` is refused as ambiguous).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_within: Option<String>,
    /// Keep the newest checkpoint of each of the last N hours (UTC) that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_hourly: Option<u32>,
    /// Keep the newest checkpoint of each of the last N days (UTC) that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_daily: Option<u32>,
    /// Keep the newest checkpoint of each of the last N ISO weeks (UTC) that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_weekly: Option<u32>,
    /// Keep the newest checkpoint of each of the last N calendar months (UTC) that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_monthly: Option<u32>,
    /// Keep the newest checkpoint of each of the last N calendar years (UTC) that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_yearly: Option<u32>,
    /// Keep every checkpoint recorded on these branches (their `branch` field).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keep_branch: Vec<String>,
}

impl RetentionPolicy {
    /// True when no rule is set (gc then prunes no checkpoint).
    pub fn is_empty(&self) -> bool {
        self.keep_last.is_none()
            && self.keep_within.is_none()
            && self.keep_hourly.is_none()
            && self.keep_daily.is_none()
            && self.keep_weekly.is_none()
            && self.keep_monthly.is_none()
            && self.keep_yearly.is_none()
            && self.keep_branch.is_empty()
    }

    /// `keep_within` in nanoseconds, when set.
    ///
    /// # Errors
    /// `Usage` for a duration [`crate::units::parse_duration`] refuses.
    pub fn within_ns(&self) -> Result<Option<i64>> {
        self.keep_within
            .as_deref()
            .map(crate::units::parse_duration)
            .transpose()
    }

    /// Checks every rule: the duration parses, branch names are valid.
    ///
    /// # Errors
    /// `Usage` naming the rule and the value.
    pub fn check(&self) -> Result<()> {
        self.within_ns()?;
        for b in &self.keep_branch {
            crate::store::refs::check_name("branch", b)?;
        }
        Ok(())
    }
}

/// Contents of STORE.json.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Config {
    pub format: String,
    pub version: u32,
    pub hash: String,
    pub chunker: ChunkerConfig,
    /// "none" or "zstd".
    pub compression: String,
    pub roots: BTreeMap<String, RootConfig>,
    pub created_ns: i64,
    /// Default gc policy; absent in stores written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<RetentionPolicy>,
    /// What makes up the runtime of the agents run in this store (`ckptfs fingerprint`);
    /// absent in stores that declared none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<checkpoint::RuntimeDecl>,
    /// `merge`'s driver per glob (`"*.log": "append"`): text, append, sqlite or binary
    /// (docs/merge.md). Absent: chosen by what the bytes are.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub merge_drivers: BTreeMap<String, String>,
}

/// Options for [`Store::init`].
#[derive(Clone, Debug, Default)]
pub struct InitOptions {
    pub roots: BTreeMap<String, RootConfig>,
    pub zstd: bool,
    /// Do not add [`DEFAULT_EXCLUDES`] to the roots.
    pub no_default_excludes: bool,
}

/// An opened store.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    config: Config,
    /// `objects/`, opened on first use; every object is opened beneath it (see `object`).
    objects_fd: std::sync::OnceLock<crate::fs::safe::Dir>,
    /// Where objects missing here come from (a remote, see `crate::remote`): looked up on the
    /// first miss only, so a store without remotes never pays for it.
    lazy: std::sync::OnceLock<Option<std::sync::Arc<dyn ObjectSource>>>,
    /// What makes `lazy` on the first missing object (see [`Store::with_object_source`]).
    source_factory: Option<ObjectSourceFactory>,
}

/// A source of objects this store lacks: asked by [`Store::open_object_checked`] on a miss,
/// it writes the object (checked against its id) into the store and says whether it did.
pub trait ObjectSource: Send + Sync + std::fmt::Debug {
    /// Fetches `id` into `store`; `Ok(false)` when the source does not have it either.
    ///
    /// # Errors
    /// The source's own (server unreachable, object corrupt there).
    fn fetch(&self, store: &Store, id: &ObjectId) -> Result<bool>;

    /// Replaces this store's copy of `id`, which did not read back right (a fetched copy
    /// cut short by a crash: cache entries are not synced), with the source's, checked
    /// against `id`. `Ok(false)` when the source does not have it.
    ///
    /// # Errors
    /// The source's own.
    fn repair(&self, store: &Store, id: &ObjectId) -> Result<bool> {
        let _cannot = (store, id);
        Ok(false)
    }

    /// Whether the source holds `id` (by its index; nothing is downloaded).
    fn holds(&self, store: &Store, id: &ObjectId) -> bool {
        let _unknown = (store, id);
        false
    }

    /// Queues `ids` to be fetched in the background (prefetch); never waits.
    fn prefetch(&self, store: &Store, ids: &[ObjectId]) {
        let _nothing_to_queue = (store, ids);
    }

    /// The bytes of `id` if the source fetched it lately and already checked them against
    /// `id` (hash and length): a reader takes them instead of reading back and hashing again
    /// the copy just written into `objects/`. Taken once; never unchecked bytes.
    fn take_fetched(&self, id: &ObjectId) -> Option<Vec<u8>> {
        let _none_kept = id;
        None
    }
}

/// Makes the [`ObjectSource`] of a store, if it has one: given to the store as a value
/// ([`Store::with_object_source`]; `crate::remote::open_store` gives its remotes' lazy
/// fetch). A store opened without one reads only the objects it holds.
pub type ObjectSourceFactory = fn(&Store) -> Option<std::sync::Arc<dyn ObjectSource>>;

/// Makes `path` absolute (relative to the cwd) and lexically normal, without following links.
pub fn absolute(path: &Path) -> Result<PathBuf> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| Error::io_op("current directory", e))?
            .join(path)
    };
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Ok(out)
}

impl Store {
    /// Creates a store at `path` (a missing or empty directory).
    ///
    /// # Errors
    /// `Conflict` if `path` is already a store or a non-empty directory; `Usage` for bad roots.
    pub fn init(path: &Path, opts: &InitOptions) -> Result<Store> {
        let root = absolute(path)?;
        // The store's path goes into mount options (`lowerdir=`, `upperdir=`), which a comma
        // would cut: refused here, not at the first mount.
        if root.as_os_str().as_encoded_bytes().contains(&b',') {
            return Err(Error::Usage(format!(
                "store path {}: a ',' cannot be carried by mount options; pick a path without one",
                root.display()
            )));
        }
        if opts.roots.is_empty() {
            return Err(Error::Usage(
                "init needs at least one --root NAME=/ABS/PATH".into(),
            ));
        }
        check_roots(&root, &opts.roots)?;
        match fs::read_dir(&root) {
            Ok(mut it) => {
                if it.next().is_some() && !is_interrupted_init(&root) {
                    if root.join(CONFIG_FILE).exists() {
                        return Err(Error::Conflict(format!(
                            "{} is already a ckptfs store",
                            root.display()
                        )));
                    }
                    return Err(Error::Conflict(format!(
                        "{} is a non-empty directory that is not a ckptfs store",
                        root.display()
                    )));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&root)
                    .or_else(|e| match e.kind() {
                        // Another init made it meanwhile: go on; STORE.json decides who wins.
                        io::ErrorKind::AlreadyExists if root.is_dir() => Ok(()),
                        _ => Err(e),
                    })
                    .map_err(|e| Error::io(&root, e))?;
            }
            Err(e) => return Err(Error::io(&root, e)),
        }
        fs::set_permissions(&root, fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io(&root, e))?;
        let config = Config {
            format: FORMAT_NAME.into(),
            version: FORMAT_VERSION,
            hash: "sha256".into(),
            chunker: ChunkerConfig::default(),
            compression: if opts.zstd { "zstd" } else { "none" }.into(),
            roots: with_default_excludes(&opts.roots, opts.no_default_excludes),
            created_ns: crate::text::time::now_ns(),
            retention: None,
            runtime: None,
            merge_drivers: BTreeMap::new(),
        };
        let store = Store {
            root,
            config,
            objects_fd: Default::default(),
            lazy: Default::default(),
            source_factory: None,
        };
        let mut dirs = Vec::new();
        let mut files = Vec::new();
        for (name, kind) in TOP_LEVEL {
            match kind {
                TopKind::Dir => dirs.push(store.root.join(name)),
                TopKind::File => files.push(store.root.join(name)),
                TopKind::Config => {}
            }
        }
        dirs.extend([store.branches_dir(), store.labels_dir()]);
        for b in 0..=255u8 {
            dirs.push(store.objects_dir().join(format!("{b:02x}")));
        }
        for d in &dirs {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(d)
                .map_err(|e| Error::io(d, e))?;
        }
        for f in &files {
            fs::write(f, b"").map_err(|e| Error::io(f, e))?;
        }
        // STORE.json last: its presence is what makes the directory a store.
        let json = serde_json::to_vec_pretty(&store.config)
            .map_err(|e| Error::Invalid(format!("encoding STORE.json: {e}")))?;
        atomic::sync_filesystem(&store.root)?;
        // Never over another init's STORE.json (two inits of one path at once: one wins).
        if !atomic::write_atomic_new(&store.config_path(), &json, 0o600)? {
            return Err(Error::Conflict(format!(
                "{} was made a store by another init at the same time; it is that one's",
                store.root.display()
            )));
        }
        Ok(store)
    }

    /// Opens an existing store.
    ///
    /// # Errors
    /// `NotFound` for a missing directory or one without STORE.json; `Corrupt` for an
    /// unreadable STORE.json; `Invalid` for an unknown format or a newer version, or for a
    /// store that is not trusted ([`trust::check_store`]: owner, modes, where it lies).
    pub fn open(path: &Path) -> Result<Store> {
        Self::open_for(path, trust::Purpose::Use)
    }

    /// As [`Store::open`] for `doctor` and `recover`: a store directory open to group or
    /// others is let through (they report and repair it); every other trust rule holds.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_to_repair(path: &Path) -> Result<Store> {
        Self::open_for(path, trust::Purpose::Repair)
    }

    fn open_for(path: &Path, purpose: trust::Purpose) -> Result<Store> {
        let root = absolute(path)?;
        let meta = fs::metadata(&root).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::NotFound(format!("store {}", root.display())),
            _ => Error::io(&root, e),
        })?;
        if !meta.is_dir() {
            return Err(Error::Invalid(format!(
                "store {} is not a directory",
                root.display()
            )));
        }
        let cfg_path = root.join(CONFIG_FILE);
        // Bounded, not followed, never blocking: a store from elsewhere is untrusted input.
        let bytes = object::read_regular_file(&cfg_path, MAX_CONFIG_BYTES, false, CONFIG_FILE)?
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "{} is not a ckptfs store (no {CONFIG_FILE})",
                    root.display()
                ))
            })?;
        check_format(&bytes, &cfg_path)?;
        let config = parse_config(&bytes)
            .map_err(|m| Error::Corrupt(format!("{}: {m}", cfg_path.display())))?;
        trust::check_store(&root, &config, purpose)?;
        Ok(Store {
            root,
            config,
            objects_fd: Default::default(),
            lazy: Default::default(),
            source_factory: None,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The same store, reading the objects it lacks from the source `factory` makes for it
    /// (asked once, at the first missing object).
    #[must_use]
    pub fn with_object_source(mut self, factory: ObjectSourceFactory) -> Store {
        self.source_factory = Some(factory);
        self
    }

    /// The source of objects this store lacks, if it has one (see [`ObjectSource`]).
    pub fn object_source(&self) -> Option<&std::sync::Arc<dyn ObjectSource>> {
        self.lazy
            .get_or_init(|| self.source_factory.and_then(|f| f(self)))
            .as_ref()
    }

    /// `remotes/`: one directory per remote (see `crate::remote`).
    pub fn remotes_dir(&self) -> PathBuf {
        self.root.join("remotes")
    }

    /// Checks that the store's own directories (the top-level ones, `refs/*`, the fan-outs
    /// of `objects/`) are real directories where present: a store copied or received from
    /// elsewhere may hold a symlink there, through which a write (an object renamed into
    /// `objects/ab/`, a ref, a temp file) would land outside the store. Readers need no such
    /// check (they open through `safe`, following nothing); writers take it with the lock.
    ///
    /// # Errors
    /// `Corrupt` naming the first such directory.
    pub fn check_own_dirs(&self) -> Result<()> {
        let mut dirs: Vec<PathBuf> = TOP_LEVEL
            .iter()
            .filter(|(_, k)| *k == TopKind::Dir)
            .map(|(n, _)| self.root.join(n))
            .collect();
        dirs.extend([self.branches_dir(), self.labels_dir(), self.forgotten_dir()]);
        dirs.extend((0..=255u8).map(|b| self.objects_dir().join(format!("{b:02x}"))));
        for d in dirs {
            match fs::symlink_metadata(&d) {
                Ok(m) if m.is_dir() => {}
                Ok(m) => {
                    return Err(Error::Corrupt(format!(
                        "{} is {}, not a directory: this store's layout was changed outside \
                         ckptfs; nothing is written to it (see `ckptfs doctor`)",
                        d.display(),
                        crate::fs::safe::Kind::of_mode(std::os::unix::fs::MetadataExt::mode(&m))
                            .describe()
                    )))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&d, e)),
            }
        }
        Ok(())
    }
    pub fn config(&self) -> &Config {
        &self.config
    }
    /// Whether trees record ctimes and inode numbers (format version 2 and later).
    pub fn records_stat(&self) -> bool {
        self.config.version >= 2
    }
    /// Whether trees record hardlinks (format version 3 and later).
    pub fn records_links(&self) -> bool {
        self.config.version >= 3
    }
    pub fn compressed(&self) -> bool {
        self.config.compression == "zstd"
    }
    /// The root config named `name`.
    ///
    /// # Errors
    /// `NotFound` naming the root and listing the known ones.
    pub fn root_config(&self, name: &str) -> Result<&RootConfig> {
        self.config.roots.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.config.roots.keys().map(String::as_str).collect();
            Error::NotFound(format!("root {name:?} (store roots: {})", known.join(", ")))
        })
    }
}

/// True when `root` holds only what an interrupted [`Store::init`] leaves (empty store
/// directories, empty `lock`/`audit.jsonl`, temp files, no STORE.json): init may reuse it.
fn is_interrupted_init(root: &Path) -> bool {
    fn only_empty_dirs(d: &Path, depth: usize) -> bool {
        let Ok(rd) = fs::read_dir(d) else {
            return false;
        };
        rd.flatten().all(|e| {
            let Ok(ft) = e.file_type() else { return false };
            ft.is_dir() && depth > 0 && only_empty_dirs(&e.path(), depth - 1)
        })
    }
    let Ok(rd) = fs::read_dir(root) else {
        return false;
    };
    rd.flatten().all(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        let p = e.path();
        let Ok(md) = fs::symlink_metadata(&p) else {
            return false;
        };
        if name.starts_with(".tmp-") {
            return md.is_file();
        }
        match TOP_LEVEL.iter().find(|(n, _)| *n == name).map(|(_, k)| k) {
            Some(TopKind::Dir) => md.is_dir() && only_empty_dirs(&p, 1),
            Some(TopKind::File) => md.is_file() && md.len() == 0,
            Some(TopKind::Config) | None => false,
        }
    })
}

/// The roots with [`DEFAULT_EXCLUDES`] added to each (after its own rules, without repeats).
fn with_default_excludes(
    roots: &BTreeMap<String, RootConfig>,
    no_defaults: bool,
) -> BTreeMap<String, RootConfig> {
    let mut out = roots.clone();
    if !no_defaults {
        for rc in out.values_mut() {
            for d in DEFAULT_EXCLUDES {
                if !rc.exclude.iter().any(|p| p == d.glob) {
                    rc.exclude.push(d.glob.to_string());
                }
            }
        }
    }
    out
}

impl Store {
    /// Replaces STORE.json (atomic) with `config`, after checking it. Callers hold the
    /// exclusive lock; this `Store` keeps the config it was opened with (reopen to see it).
    ///
    /// # Errors
    /// `Invalid` when the new config does not pass [`parse_config`].
    pub fn write_config_file(&self, config: &Config) -> Result<()> {
        let json = serde_json::to_vec_pretty(config)
            .map_err(|e| Error::Invalid(format!("encoding STORE.json: {e}")))?;
        parse_config(&json).map_err(Error::Invalid)?;
        atomic::write_atomic_replace(&self.config_path(), &json, 0o600)
    }
}

/// Tells a foreign file or a newer store apart from a corrupt one: both are readable JSON
/// that this build must refuse, with a message saying why (not "corrupt").
fn check_format(bytes: &[u8], path: &Path) -> Result<()> {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return Ok(()); // parse_config reports it as corrupt
    };
    match v.get("format").and_then(|f| f.as_str()) {
        Some(FORMAT_NAME) => {}
        Some(other) => {
            return Err(Error::Invalid(format!(
                "{}: not a ckptfs store (format is {other:?})",
                path.display()
            )))
        }
        None => return Ok(()),
    }
    match v.get("version").and_then(|x| x.as_u64()) {
        Some(version) if version > u64::from(FORMAT_VERSION) => Err(Error::Invalid(format!(
            "{}: store format version {version} is newer than this ckptfs supports ({FORMAT_VERSION}); upgrade ckptfs",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Decodes and checks STORE.json.
pub fn parse_config(bytes: &[u8]) -> std::result::Result<Config, String> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON ({e})"))?;
    if v.get("format").and_then(|f| f.as_str()) != Some(FORMAT_NAME) {
        return Err(format!("format is not {FORMAT_NAME:?}"));
    }
    let version = v.get("version").and_then(|x| x.as_u64()).unwrap_or(0);
    if version > u64::from(FORMAT_VERSION) {
        return Err(format!(
            "store format version {version} is newer than this ckptfs supports ({FORMAT_VERSION}); upgrade ckptfs"
        ));
    }
    let config: Config = serde_json::from_value(v).map_err(|e| format!("bad field ({e})"))?;
    if config.version == 0 {
        return Err("format version 0 is invalid".into());
    }
    if config.hash != "sha256" {
        return Err(format!("unsupported hash {:?}", config.hash));
    }
    if config.compression != "none" && config.compression != "zstd" {
        return Err(format!("unsupported compression {:?}", config.compression));
    }
    config.chunker.check()?;
    for (name, rc) in &config.roots {
        crate::store::refs::check_name("root", name).map_err(|e| e.to_string())?;
        check_root_path(name, &rc.path).map_err(|e| e.to_string())?;
    }
    // `retention` is checked by gc, not here: a rule a newer ckptfs refuses (a bare `m`, once
    // minutes) must not stop captures; gc refuses to run until it is fixed.
    Ok(config)
}

/// A store in `dir/store` with one root `r` at `dir/root`, for unit tests.
#[cfg(test)]
pub(crate) fn temp_store(dir: &Path) -> Store {
    let mut opts = InitOptions::default();
    let root = RootConfig {
        path: dir.join("root"),
        exclude: Vec::new(),
    };
    opts.roots.insert("r".into(), root);
    Store::init(&dir.join("store"), &opts).unwrap()
}

/// Whether the filesystem of `dir` answers `preadv2(RWF_NOWAIT)` (tmpfs does not: stored
/// objects are then always hashed, never compared), for unit tests.
#[cfg(test)]
pub(crate) fn nowait_reads_supported(dir: &Path) -> bool {
    let p = dir.join("nowait-probe");
    fs::write(&p, b"probe").unwrap();
    let f = fs::File::open(&p).unwrap();
    let mut b = [0u8; 8];
    let r = rustix::io::preadv2(
        &f,
        &mut [std::io::IoSliceMut::new(&mut b)],
        0,
        rustix::io::ReadWriteFlags::NOWAIT,
    );
    fs::remove_file(&p).unwrap();
    r != Err(rustix::io::Errno::OPNOTSUPP)
}
