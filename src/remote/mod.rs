//! Remotes: S3-compatible object storage that holds a store's history for other machines,
//! encrypted on the client, with objects packed, and read back lazily.
//!
//! On the remote (under `s3://BUCKET/PREFIX/`):
//! ```text
//! config                  JSON, plain: format "ckptfs-remote", version, encrypted
//! keys/<16 hex>           key records: the master key wrapped under argon2id (see `crypto`)
//! store                   sealed STORE.json of the store that made it (roots, chunker), for clone
//! packs/<sha256>          packs of sealed objects (see `pack`)
//! index/<sha256>          sealed pack indexes; their union says where every object is
//! records/<hmac>          sealed checkpoint records (name: HMAC of the record id)
//! refs/branches/<name>    sealed {head}: a branch head    refs/labels/<name>: a label (never moved)
//! locks/<ns>-<hex>        JSON lock with a lease naming its holder (push and gc take one)
//! ```
//! In the store (`STORE/remotes/NAME/`):
//! ```text
//! config.json             url, endpoint, region, credentials *path*, key file *path*, cache size
//! refs.json               the remote's branches and labels as last fetched or pushed
//! index/<sha256>          copies of the remote's index files (rebuildable: fetch downloads them)
//! ```
//! and `STORE/cache/remote-fetched`: the objects fetched lazily, in order, with their sizes
//! (the eviction list, see [`cache`]).
//!
//! Order of a push (the durability invariant carried over to the remote): packs, then the
//! index naming them, then checkpoint records, then refs. A push that dies leaves at most
//! packs no index names (the next push recovers their data blobs from their trailers, `gc
//! --remote` removes the rest); nothing published ever points at a missing object.

pub mod backend;
pub mod cache;
pub mod crypto;
pub mod forgotten;
pub mod health;
pub mod lock;
pub mod pack;
pub mod prune;
pub mod redact;
pub mod sync;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::id::ObjectId;
use crate::remote::backend::{Backend, S3Backend, S3Options};
use crate::remote::crypto::{KeyRecord, Keys};
use crate::remote::pack::Index;
use crate::store::{Config, Store};

/// `format` of a remote's `config`.
pub const REMOTE_FORMAT: &str = "ckptfs-remote";
pub const REMOTE_VERSION: u32 = 1;
/// Default bound of the lazily fetched objects kept in a store: 10 GiB.
pub const DEFAULT_CACHE_BYTES: u64 = 10 << 30;
const MAX_SMALL_FILE: u64 = 1 << 20;
/// The widest stretch of a pack between two wanted blobs that one ranged GET reads and drops
/// rather than splitting in two: a request costs a round trip (milliseconds to an object
/// store on another machine), 256 KiB costs less than that to transfer. A cold walk's tree
/// fetch wants a pack's trees less the few a prefetch thread already took; read as they lie,
/// those holes made 1259 trees about 130 GETs (393 ms on loopback) instead of one.
const MERGE_GAP: u64 = 256 << 10;

/// A remote as the store knows it (`remotes/NAME/config.json`). Holds no secret: paths to
/// a credentials file and a key file at most.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RemoteConfig {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// Bytes of lazily fetched objects kept before the oldest are evicted.
    #[serde(default = "default_cache")]
    pub cache_bytes: u64,
    /// Milliseconds a request may go without an answer (`--timeout`); default
    /// [`backend::DEFAULT_TIMEOUT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

impl RemoteConfig {
    /// How long a request may go without an answer: `--timeout`, else the default.
    pub fn timeout(&self) -> std::time::Duration {
        self.timeout_ms
            .map_or(backend::DEFAULT_TIMEOUT, std::time::Duration::from_millis)
    }
}

fn default_cache() -> u64 {
    DEFAULT_CACHE_BYTES
}

/// The remote's `config` object.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RemoteHeader {
    pub format: String,
    pub version: u32,
    pub encrypted: bool,
    pub created_ns: i64,
}

/// A remote's refs as last seen (`remotes/NAME/refs.json`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RemoteRefs {
    pub branches: BTreeMap<String, ObjectId>,
    pub labels: BTreeMap<String, ObjectId>,
    #[serde(default)]
    pub updated_ns: i64,
}

/// A sealed remote ref.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RefValue {
    pub head: ObjectId,
    pub time_ns: i64,
}

/// Checks a remote's name: like a branch name, letters, digits, `-_.`, not starting with `.`.
///
/// # Errors
/// `Usage` naming it.
pub fn check_remote_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "remote name {name:?}: use letters, digits, - _ . (not starting with .)"
        )))
    }
}

pub fn remote_dir(store: &Store, name: &str) -> PathBuf {
    store.remotes_dir().join(name)
}

fn config_path(store: &Store, name: &str) -> PathBuf {
    remote_dir(store, name).join("config.json")
}

pub fn refs_path(store: &Store, name: &str) -> PathBuf {
    remote_dir(store, name).join("refs.json")
}

pub fn index_cache_dir(store: &Store, name: &str) -> PathBuf {
    remote_dir(store, name).join("index")
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> Result<Option<T>> {
    match crate::store::object::read_regular_file(path, MAX_SMALL_FILE, false, what)? {
        Some(d) => serde_json::from_slice(&d)
            .map(Some)
            .map_err(|e| Error::Corrupt(format!("{}: {e}", path.display()))),
        None => Ok(None),
    }
}

fn to_json<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(v).map_err(|e| Error::Invalid(format!("encoding JSON: {e}")))
}

/// Reads one remote's config.
///
/// # Errors
/// `NotFound` naming the remote when the store has none of that name.
pub fn read_config(store: &Store, name: &str) -> Result<RemoteConfig> {
    check_remote_name(name)?;
    read_json(&config_path(store, name), "remote config")?
        .ok_or_else(|| Error::NotFound(format!("remote {name} (see `ckptfs remote list`)")))
}

/// Every remote of the store, sorted by name.
///
/// # Errors
/// I/O listing `remotes/`; a config that does not read.
pub fn list_configs(store: &Store) -> Result<Vec<(String, RemoteConfig)>> {
    let dir = store.remotes_dir();
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(&dir, e))?;
        let Some(name) = ent.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if check_remote_name(&name).is_err() {
            continue;
        }
        if let Some(c) = read_json(&config_path(store, &name), "remote config")? {
            out.push((name, c));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Writes a remote's config (a new remote, or a changed one).
///
/// # Errors
/// I/O.
pub fn write_config(store: &Store, name: &str, c: &RemoteConfig) -> Result<()> {
    let dir = remote_dir(store, name);
    for d in [&dir, &index_cache_dir(store, name)] {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
    }
    atomic::write_atomic_replace(&config_path(store, name), &to_json(c)?, 0o600)
}

pub fn read_refs(store: &Store, name: &str) -> Result<RemoteRefs> {
    Ok(read_json(&refs_path(store, name), "remote refs")?.unwrap_or_default())
}

pub fn write_refs(store: &Store, name: &str, r: &RemoteRefs) -> Result<()> {
    atomic::write_atomic_replace(&refs_path(store, name), &to_json(r)?, 0o600)
}

/// How to initialize a remote that has no `config` yet.
#[derive(Clone, Debug, Default)]
pub struct InitRemote {
    pub no_encryption: bool,
    pub kdf_memory_kib: Option<u32>,
    pub kdf_passes: Option<u32>,
}

/// An opened remote: its backend and keys.
#[derive(Debug)]
pub struct Remote {
    pub name: String,
    pub config: RemoteConfig,
    pub backend: Box<dyn Backend>,
    pub keys: Keys,
}

/// Builds the backend of a remote config (no request made).
///
/// # Errors
/// A bad URL or options.
pub fn backend_of(c: &RemoteConfig) -> Result<Box<dyn Backend>> {
    let (bucket, prefix) = backend::parse_s3_url(&c.url)?;
    Ok(Box::new(S3Backend::new(&S3Options {
        bucket,
        prefix,
        endpoint: c.endpoint.clone(),
        region: c.region.clone(),
        credentials: c.credentials.clone(),
        profile: None,
        timeout: Some(c.timeout()),
    })?))
}

impl Remote {
    /// Opens a remote: reads its `config`, finds a key record the secret opens. With `init`,
    /// a remote that has no `config` yet is made (config, key record, and the store's
    /// STORE.json sealed as `store`).
    ///
    /// # Errors
    /// Unreachable server; `NotFound` for an empty remote without `init`; `Invalid` for a
    /// wrong key ("no key record opens with it").
    pub fn open(
        name: &str,
        config: RemoteConfig,
        init: Option<(&InitRemote, &Config)>,
    ) -> Result<Remote> {
        let backend = backend_of(&config)?;
        let url = config.url.clone();
        let header: Option<RemoteHeader> = match backend.get("config")? {
            Some(d) => Some(serde_json::from_slice(&d).map_err(|e| {
                Error::Corrupt(format!("{url}/config is not a ckptfs remote config: {e}"))
            })?),
            None => None,
        };
        let Some(header) = header else {
            let Some((how, store_cfg)) = init else {
                return Err(Error::NotFound(format!(
                    "{url} holds no ckptfs remote (push to it from a store first)"
                )));
            };
            let keys = if how.no_encryption {
                Keys::Plain
            } else {
                let secret = crypto::secret_from(config.key_file.as_deref())?;
                let (keys, rec) = Keys::create(
                    &secret,
                    how.kdf_memory_kib.unwrap_or(crypto::KDF_MEMORY_KIB),
                    how.kdf_passes.unwrap_or(crypto::KDF_PASSES),
                )?;
                backend.put(&format!("keys/{}", crypto::random_hex(8)?), to_json(&rec)?)?;
                keys
            };
            let store_json = to_json(store_cfg)?;
            backend.put("store", keys.seal(b"store", &store_json)?)?;
            let h = RemoteHeader {
                format: REMOTE_FORMAT.into(),
                version: REMOTE_VERSION,
                encrypted: !how.no_encryption,
                created_ns: crate::text::time::now_ns(),
            };
            // `config` last: its presence is what makes the prefix a remote.
            backend.put("config", to_json(&h)?)?;
            return Ok(Remote {
                name: name.into(),
                config,
                backend,
                keys,
            });
        };
        if header.format != REMOTE_FORMAT || header.version > REMOTE_VERSION {
            return Err(Error::Invalid(format!(
                "{url}: unsupported remote format {} version {} (this build reads {REMOTE_FORMAT} {REMOTE_VERSION})",
                header.format, header.version
            )));
        }
        let keys = if header.encrypted {
            let secret = crypto::secret_from(config.key_file.as_deref())?;
            let mut found = None;
            for (k, _) in backend.list("keys/")? {
                let Some(d) = backend.get(&k)? else { continue };
                let rec: KeyRecord = serde_json::from_slice(&d)
                    .map_err(|e| Error::Corrupt(format!("{url}/{k}: {e}")))?;
                if let Some(keys) = Keys::open_record(&rec, &secret)? {
                    found = Some(keys);
                    break;
                }
            }
            found.ok_or_else(|| {
                Error::Invalid(format!(
                    "wrong key for remote {name} ({url}): no key record there opens with it"
                ))
            })?
        } else {
            Keys::Plain
        };
        Ok(Remote {
            name: name.into(),
            config,
            backend,
            keys,
        })
    }

    /// Opens the store's remote `name`.
    ///
    /// # Errors
    /// As [`Remote::open`]; `NotFound` for an unknown name.
    pub fn open_named(store: &Store, name: &str) -> Result<Remote> {
        let c = read_config(store, name)?;
        Remote::open(name, c, None)
    }

    /// The store config the remote was made from (for clone).
    ///
    /// # Errors
    /// Unreachable, missing or altered.
    pub fn store_config(&self) -> Result<Config> {
        let url = &self.config.url;
        let d = self
            .backend
            .get("store")?
            .ok_or_else(|| Error::Corrupt(format!("{url}: no `store` object")))?;
        let plain = self.keys.open(b"store", &d, &format!("{url}/store"))?;
        crate::store::parse_config(&plain).map_err(|m| Error::Corrupt(format!("{url}/store: {m}")))
    }

    /// Downloads the index files the store lacks into `remotes/NAME/index/` and returns the
    /// union of all of them (only those still on the remote when `prune`).
    ///
    /// # Errors
    /// Unreachable server; an index that fails authentication.
    pub fn sync_index(&self, store: &Store) -> Result<Index> {
        self.sync_index_as(store, None)
    }

    /// As [`Remote::sync_index`], drawing a progress bar named `what` on a terminal (index
    /// files downloaded and their bytes).
    ///
    /// # Errors
    /// As [`Remote::sync_index`].
    pub fn sync_index_shown(&self, store: &Store, what: &str) -> Result<Index> {
        self.sync_index_as(store, Some(what))
    }

    fn sync_index_as(&self, store: &Store, what: Option<&str>) -> Result<Index> {
        let dir = index_cache_dir(store, &self.name);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let listed = self.backend.list("index/")?;
        let progress = match what {
            Some(w) => {
                let missing = listed
                    .iter()
                    .filter(|(k, _)| {
                        k.strip_prefix("index/")
                            .is_some_and(|n| !dir.join(n).exists())
                    })
                    .count();
                crate::progress::Progress::items(w, "index files", Some(missing as u64))
            }
            None => crate::progress::Progress::hidden(),
        };
        let mut idx = Index::default();
        let mut keep = std::collections::HashSet::new();
        for (key, _) in listed {
            let Some(name) = key.strip_prefix("index/") else {
                continue;
            };
            if name.len() != 64 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
                continue;
            }
            keep.insert(name.to_string());
            let local = dir.join(name);
            let sealed = match crate::store::object::read_regular_file(
                &local,
                pack::MAX_INDEX_BYTES as u64,
                false,
                "cached index",
            )? {
                Some(d) => d,
                None => {
                    let d = self
                        .backend
                        .get(&key)?
                        .ok_or_else(|| Error::Corrupt(format!("{} vanished", key)))?;
                    if crypto::hex(&ObjectId::of(&d).0) != name {
                        return Err(Error::Corrupt(format!(
                            "remote {}: {key} does not match its name (altered?)",
                            self.name
                        )));
                    }
                    atomic::write_atomic_replace_volatile(&local, &d, 0o600)?;
                    progress.add_items(1);
                    progress.add_bytes(d.len() as u64);
                    d
                }
            };
            idx.merge_encoded(&pack::open_index(&self.keys, &sealed, name)?)?;
        }
        progress.finish();
        // Index files gc --remote replaced: drop their copies.
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if !keep.contains(&n) && !n.starts_with(".tmp-") {
                    let _stale_copy = std::fs::remove_file(e.path());
                }
            }
        }
        Ok(idx)
    }

    /// The union of the index copies the store holds (no request made).
    ///
    /// # Errors
    /// A copy that does not open.
    pub fn cached_index(&self, store: &Store) -> Result<Index> {
        let dir = index_cache_dir(store, &self.name);
        let mut idx = Index::default();
        let Ok(rd) = std::fs::read_dir(&dir) else {
            return Ok(idx);
        };
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.len() != 64 {
                continue;
            }
            if let Some(d) = crate::store::object::read_regular_file(
                &e.path(),
                pack::MAX_INDEX_BYTES as u64,
                false,
                "cached index",
            )? {
                idx.merge_encoded(&pack::open_index(&self.keys, &d, &n)?)?;
            }
        }
        Ok(idx)
    }

    /// Downloads objects by their index entries, [`backend::IN_FLIGHT`] at a time, each
    /// checked against its id.
    pub fn fetch_objects(&self, idx: &Index, ids: &[ObjectId]) -> Vec<Result<Vec<u8>>> {
        let mut reqs = Vec::new();
        let mut locs = Vec::new();
        let mut out: Vec<Option<Result<Vec<u8>>>> = Vec::new();
        for id in ids {
            let largest = crate::store::tree::MAX_TREE_BYTES
                .max(u64::from(crate::store::tree::MAX_CHUNK_LEN));
            match idx.objects.get(id) {
                // A hostile index cannot make a read allocate more than any object can be.
                Some(loc)
                    if u64::from(loc.raw_len) > largest
                        || u64::from(loc.len) > zstd_bound(largest) + 64 =>
                {
                    out.push(Some(Err(Error::Corrupt(format!(
                        "remote {}: index entry of object {id} claims {} bytes",
                        self.name, loc.len
                    )))));
                }
                Some(loc) => {
                    reqs.push((
                        idx.pack_key(loc.pack),
                        u64::from(loc.offset)..u64::from(loc.offset) + u64::from(loc.len),
                    ));
                    locs.push((out.len(), *id, *loc));
                    out.push(None);
                }
                None => out.push(Some(Err(Error::NotFound(format!(
                    "object {id} (not on remote {})",
                    self.name
                ))))),
            }
        }
        // Blobs of one pack that lie side by side, or close (a file's chunks, a pack's trees
        // less those already here or in flight elsewhere), in one ranged GET: the bytes
        // between them are read and dropped.
        let mut order: Vec<usize> = (0..locs.len()).collect();
        order.sort_by_key(|&i| (locs[i].2.pack, locs[i].2.offset));
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        let mut merged: Vec<(String, std::ops::Range<u64>)> = Vec::new();
        for i in order {
            let r = reqs[i].1.clone();
            match (groups.last_mut(), merged.last_mut()) {
                (Some((_, members)), Some((key, range)))
                    if *key == reqs[i].0
                        && (range.end..=range.end + MERGE_GAP).contains(&r.start)
                        && range.end - range.start < 16 << 20 =>
                {
                    range.end = r.end;
                    members.push(i);
                }
                _ => {
                    groups.push((merged.len(), vec![i]));
                    merged.push(reqs[i].clone());
                }
            }
        }
        let got = self.backend.get_ranges(&merged);
        let mut per: Vec<Option<Result<Vec<u8>>>> = (0..locs.len()).map(|_| None).collect();
        for ((g, members), r) in groups.into_iter().zip(got) {
            let start = merged[g].1.start;
            match r {
                // Each blob is opened where it lies in the GET's buffer: its plaintext is the
                // one copy made.
                Ok(mut bytes) => {
                    for m in members {
                        let (a, b) = (reqs[m].1.start - start, reqs[m].1.end - start);
                        let (_, id, loc) = &locs[m];
                        per[m] = Some(pack::open_blob_in_place(
                            &self.keys,
                            id,
                            loc,
                            &mut bytes[a as usize..b as usize],
                        ));
                    }
                }
                Err(e) => {
                    let msg = e.to_string();
                    for m in members {
                        per[m] = Some(Err(match &e {
                            // The kind stays (NotFound: a pack gone, which readers retry
                            // on a fresh index).
                            Error::Io { source, .. } => Error::io_op(
                                msg.clone(),
                                std::io::Error::new(source.kind(), "remote read failed"),
                            ),
                            _ => Error::Corrupt(msg.clone()),
                        }));
                    }
                }
            }
        }
        for ((slot, _, _), r) in locs.into_iter().zip(per) {
            out[slot] = Some(r.unwrap_or_else(|| Err(Error::Invalid("range left unread".into()))));
        }
        out.into_iter()
            .map(|o| o.unwrap_or_else(|| Err(Error::Invalid("fetch slot left empty".into()))))
            .collect()
    }

    /// A remote ref (`branches/NAME` or `labels/NAME`).
    ///
    /// # Errors
    /// Unreachable; altered (fails authentication).
    pub fn read_ref(&self, rel: &str) -> Result<Option<RefValue>> {
        let key = format!("refs/{rel}");
        let Some(d) = self.backend.get(&key)? else {
            return Ok(None);
        };
        let plain = self.keys.open(
            format!("ref:{rel}").as_bytes(),
            &d,
            &format!("remote {} {key}", self.name),
        )?;
        serde_json::from_slice(&plain)
            .map(Some)
            .map_err(|e| Error::Corrupt(format!("remote {} {key}: {e}", self.name)))
    }

    pub fn write_ref(&self, rel: &str, v: &RefValue) -> Result<()> {
        let sealed = self
            .keys
            .seal(format!("ref:{rel}").as_bytes(), &to_json(v)?)?;
        self.backend.put(&format!("refs/{rel}"), sealed)
    }

    /// Every remote ref under `refs/KIND/` (`branches` or `labels`).
    pub fn list_refs(&self, kind: &str) -> Result<BTreeMap<String, ObjectId>> {
        let mut out = BTreeMap::new();
        for (k, _) in self.backend.list(&format!("refs/{kind}/"))? {
            let Some(n) = k.strip_prefix(&format!("refs/{kind}/")) else {
                continue;
            };
            if crate::store::refs::check_name("ref", n).is_err() {
                continue;
            }
            if let Some(v) = self.read_ref(&format!("{kind}/{n}"))? {
                out.insert(n.to_string(), v.head);
            }
        }
        Ok(out)
    }

    pub fn record_key(&self, id: &ObjectId) -> String {
        format!("records/{}", self.keys.name_of(id))
    }

    /// Downloads a checkpoint record and checks it hashes to `id`.
    pub fn get_record(&self, id: &ObjectId) -> Result<Option<Vec<u8>>> {
        let key = self.record_key(id);
        let Some(d) = self.backend.get(&key)? else {
            return Ok(None);
        };
        let mut aad = b"record:".to_vec();
        aad.extend_from_slice(&id.0);
        let plain = self
            .keys
            .open(&aad, &d, &format!("remote record of {id}"))?;
        if ObjectId::of(&plain) != *id {
            return Err(Error::Corrupt(format!(
                "remote record of checkpoint {id} does not match its hash"
            )));
        }
        Ok(Some(plain))
    }

    pub fn seal_record(&self, id: &ObjectId, data: &[u8]) -> Result<Vec<u8>> {
        let mut aad = b"record:".to_vec();
        aad.extend_from_slice(&id.0);
        self.keys.seal(&aad, data)
    }
}

fn zstd_bound(len: u64) -> u64 {
    zstd::zstd_safe::compress_bound(usize::try_from(len).unwrap_or(usize::MAX)) as u64
}

/// Opens the store at `path` (see [`Store::open`]) reading the objects it lacks from its
/// remotes, lazily (see [`cache`]): what a clone needs to show its files. [`Store::open`]
/// alone reads only the objects the store holds.
///
/// # Errors
/// As [`Store::open`].
pub fn open_store(path: &Path) -> Result<Store> {
    let store = Store::open(path)?;
    crate::fs::userns::enter_if_held(&store.namespace_record_path())?;
    Ok(store.with_object_source(cache::source_for))
}

/// [`open_store`] for `doctor` and `recover` (see [`Store::open_to_repair`]).
///
/// # Errors
/// As [`Store::open_to_repair`].
pub fn open_store_to_repair(path: &Path) -> Result<Store> {
    let store = Store::open_to_repair(path)?;
    crate::fs::userns::enter_if_held(&store.namespace_record_path())?;
    Ok(store.with_object_source(cache::source_for))
}
