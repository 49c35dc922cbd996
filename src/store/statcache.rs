//! The stat cache: for each file of a captured root, the (size, mtime, ctime, inode) it had
//! when it was read, with its chunk list and xattrs. The next capture on top of that checkpoint
//! reuses the content of files whose stat is unchanged instead of reading them again.
//!
//! It lives in `cache/` (rebuildable: without it a capture just reads every file). Files
//! modified within `RACY_WINDOW_NS` of the capture start are left out, as git does with
//! "racily clean" entries: file timestamps advance in clock ticks (a jiffy, at most 10 ms),
//! so a same-size rewrite in the tick the file was read in would otherwise go unseen.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::tree::{Chunk, Reader};
use crate::store::Store;

const MAGIC: &[u8; 4] = b"CKS3";
/// The format before entries named their reflink snapshot (read, never written).
const MAGIC_V2: &[u8; 4] = b"CKS2";
/// Entries whose mtime or ctime is this close to the capture start are not cached.
pub const RACY_WINDOW_NS: i64 = 20_000_000;

/// What a file looked like when it was captured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatKey {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
}

/// One cached file.
#[derive(Clone, Debug)]
pub struct Cached {
    pub key: StatKey,
    pub chunks: Vec<Chunk>,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// The inode number and ctime its tree entry records: the key's, except for a file a
    /// workspace copied up (see `ingest::upper`).
    pub ino: u64,
    pub ctime_ns: i64,
    /// The reflink snapshot holding exactly these chunks' bytes, in the workspace's snapshot
    /// directory (see `ingest::snapshot`), if one was kept.
    pub snapshot: Option<String>,
}

/// Relative path (bytes, `/`-separated) -> cached file.
pub type StatCache = HashMap<Vec<u8>, Cached>;

impl Store {
    /// Loads the stat cache of a checkpoint's root; empty when missing or unreadable.
    pub fn load_statcache(&self, checkpoint: &ObjectId, root: &str) -> StatCache {
        load_cache(&self.statcache_path(checkpoint, root), decode, "stat cache")
    }

    /// Saves a stat cache (best effort: it is only a cache).
    pub fn save_statcache(&self, checkpoint: &ObjectId, root: &str, cache: &StatCache) {
        let p = self.statcache_path(checkpoint, root);
        save_cache(&p, &encode(cache), "stat cache");
    }
}

/// Reads and decodes a cache file; a missing one is empty, an unreadable one is empty and
/// logged (caches are rebuildable).
fn load_cache<T: Default>(p: &Path, decode: fn(&[u8]) -> Result<T>, what: &str) -> T {
    match fs::read(p) {
        Ok(data) => decode(&data).unwrap_or_else(|e| {
            log::warn!("ignoring {what} {}: {e}", p.display());
            T::default()
        }),
        Err(_) => T::default(),
    }
}

/// Writes a cache file, logging a failure (best effort).
fn save_cache(p: &Path, data: &[u8], what: &str) {
    if let Err(e) = write(p, data) {
        log::warn!("could not write {what} {}: {e}", p.display());
    }
}

fn write(path: &Path, data: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let result = fs::write(&tmp, data).and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ignored_cleanup = fs::remove_file(&tmp); // a full disk leaves no half cache
    }
    result
}

fn encode(cache: &StatCache) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + cache.len() * 128);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(cache.len() as u64).to_le_bytes());
    for (path, c) in cache {
        out.extend_from_slice(&(path.len() as u32).to_le_bytes());
        out.extend_from_slice(path);
        out.extend_from_slice(&c.key.size.to_le_bytes());
        out.extend_from_slice(&c.key.mtime_ns.to_le_bytes());
        out.extend_from_slice(&c.key.ctime_ns.to_le_bytes());
        out.extend_from_slice(&c.key.ino.to_le_bytes());
        out.extend_from_slice(&c.ino.to_le_bytes());
        out.extend_from_slice(&c.ctime_ns.to_le_bytes());
        out.extend_from_slice(&(c.chunks.len() as u32).to_le_bytes());
        for ch in &c.chunks {
            out.extend_from_slice(&ch.id.0);
            out.extend_from_slice(&ch.len.to_le_bytes());
        }
        out.extend_from_slice(&(c.xattrs.len() as u32).to_le_bytes());
        for (k, v) in &c.xattrs {
            out.extend_from_slice(&(k.len() as u32).to_le_bytes());
            out.extend_from_slice(k);
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
        }
        let snapshot = c.snapshot.as_deref().unwrap_or("").as_bytes();
        out.extend_from_slice(&(snapshot.len() as u32).to_le_bytes());
        out.extend_from_slice(snapshot);
    }
    out
}

fn decode(data: &[u8]) -> Result<StatCache> {
    let mut r = Reader { data, pos: 0 };
    let with_snapshots =
        match r.take(4)? {
            m if m == MAGIC => true,
            m if m == MAGIC_V2 => false,
            b"CKS1" => return Err(Error::Corrupt(
                "written by an older ckptfs (without recorded inode numbers); files are read once \
                 more and the cache is written anew"
                    .into(),
            )),
            _ => return Err(Error::Corrupt("stat cache has a bad magic".into())),
        };
    let n = r.u64()? as usize;
    let mut out = StatCache::with_capacity(n.min(data.len() / 40));
    for _ in 0..n {
        let pl = r.u32()? as usize;
        let path = r.take(pl)?.to_vec();
        let key = StatKey {
            size: r.u64()?,
            mtime_ns: r.i64()?,
            ctime_ns: r.i64()?,
            ino: r.u64()?,
        };
        let (ino, ctime_ns) = (r.u64()?, r.i64()?);
        let nc = r.u32()? as usize;
        let mut chunks = Vec::with_capacity(nc.min(data.len() / 36));
        for _ in 0..nc {
            let id = r.id()?;
            let len = r.u32()?;
            chunks.push(Chunk { id, len });
        }
        let nx = r.u32()? as usize;
        let mut xattrs = Vec::with_capacity(nx.min(64));
        for _ in 0..nx {
            let kl = r.u32()? as usize;
            let k = r.take(kl)?.to_vec();
            let vl = r.u32()? as usize;
            let v = r.take(vl)?.to_vec();
            xattrs.push((k, v));
        }
        let snapshot = if with_snapshots {
            let sl = r.u32()? as usize;
            let name = String::from_utf8(r.take(sl)?.to_vec())
                .map_err(|_| Error::Corrupt("stat cache names a snapshot in bad UTF-8".into()))?;
            Some(name).filter(|n| !n.is_empty())
        } else {
            None
        };
        out.insert(
            path,
            Cached {
                key,
                chunks,
                xattrs,
                ino,
                ctime_ns,
                snapshot,
            },
        );
    }
    Ok(out)
}

/// CKU3 added `CachedDir::ino`; a cache of another version is not read (the next checkpoint
/// merges every upper directory again).
const UPPER_MAGIC: &[u8; 4] = b"CKU3";

/// One upper directory of a workspace as the last checkpoint merged it: when the directory
/// and everything under it still have the recorded stat keys, the merge reuses `tree` and
/// `delta` without reading the directory's xattrs, its lower tree, or writing a tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedDir {
    pub key: StatKey,
    pub tree: ObjectId,
    pub subdirs: u32,
    /// The directory entry's size (its number of entries).
    pub entries: u64,
    /// What this directory adds to its root's (files, bytes, dirs, symlinks) relative to the
    /// base checkpoint, its own entry in its parent included.
    pub delta: [i64; 4],
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// The names in the upper directory (unchanged while its key is: no readdir needed).
    pub names: Vec<Vec<u8>>,
    /// The inode number its entry records: the lower directory's it continues (the one the
    /// workspace shows), 0 for none (an opaque or new directory records its own).
    pub ino: u64,
}

/// The workspace part of a stat cache: upper directories, and the keys of upper symlinks and
/// whiteouts (files are in the `StatCache`). `rules` is the root's exclude rules it was made
/// under; a cache made under other rules is not used.
#[derive(Clone, Debug, Default)]
pub struct UpperCache {
    pub rules: Vec<u8>,
    pub dirs: HashMap<Vec<u8>, CachedDir>,
    pub others: HashMap<Vec<u8>, StatKey>,
}

impl Store {
    /// Loads the upper cache saved with a workspace checkpoint; empty when missing or unreadable.
    pub fn load_upper_cache(&self, checkpoint: &ObjectId, root: &str) -> UpperCache {
        let p = upper_cache_path(&self.statcache_path(checkpoint, root));
        load_cache(&p, decode_upper, "upper cache")
    }

    /// Loads the stat cache of the files a fold kept in a workspace's upper layer over
    /// `checkpoint`, its new base (see `workspace::hot`); empty when missing or unreadable.
    pub fn load_kept_statcache(&self, checkpoint: &ObjectId, root: &str) -> StatCache {
        load_cache(
            &kept_cache_path(&self.statcache_path(checkpoint, root)),
            decode,
            "stat cache",
        )
    }

    /// Removes the stat cache of the files a fold kept over `checkpoint` (best effort): once
    /// the upper layer stands on another base, nothing reads it.
    pub fn drop_kept_statcache(&self, checkpoint: &ObjectId, root: &str) {
        let p = kept_cache_path(&self.statcache_path(checkpoint, root));
        if let Err(e) = fs::remove_file(&p) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("{}: {e}", p.display());
            }
        }
    }

    /// Saves the stat cache of the files a fold kept (best effort: it is only a cache).
    pub fn save_kept_statcache(&self, checkpoint: &ObjectId, root: &str, cache: &StatCache) {
        let p = kept_cache_path(&self.statcache_path(checkpoint, root));
        save_cache(&p, &encode(cache), "stat cache");
    }

    /// Saves an upper cache (best effort: it is only a cache).
    pub fn save_upper_cache(&self, checkpoint: &ObjectId, root: &str, cache: &UpperCache) {
        let p = upper_cache_path(&self.statcache_path(checkpoint, root));
        save_cache(&p, &encode_upper(cache), "upper cache");
    }
}

/// `cache/stat/<id>-<root>.kept`: named after its checkpoint, as every stat cache (gc and
/// forget remove it with the checkpoint's own).
fn kept_cache_path(statcache: &Path) -> std::path::PathBuf {
    let mut s = statcache.as_os_str().to_owned();
    s.push(".kept");
    s.into()
}

fn upper_cache_path(statcache: &Path) -> std::path::PathBuf {
    let mut s = statcache.as_os_str().to_owned();
    s.push(".upper");
    s.into()
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn put_key(out: &mut Vec<u8>, k: &StatKey) {
    out.extend_from_slice(&k.size.to_le_bytes());
    out.extend_from_slice(&k.mtime_ns.to_le_bytes());
    out.extend_from_slice(&k.ctime_ns.to_le_bytes());
    out.extend_from_slice(&k.ino.to_le_bytes());
}

fn get_key(r: &mut Reader<'_>) -> Result<StatKey> {
    Ok(StatKey {
        size: r.u64()?,
        mtime_ns: r.i64()?,
        ctime_ns: r.i64()?,
        ino: r.u64()?,
    })
}

fn get_bytes(r: &mut Reader<'_>) -> Result<Vec<u8>> {
    let n = r.u32()? as usize;
    Ok(r.take(n)?.to_vec())
}

fn encode_upper(c: &UpperCache) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + c.dirs.len() * 160 + c.others.len() * 64);
    out.extend_from_slice(UPPER_MAGIC);
    put_bytes(&mut out, &c.rules);
    out.extend_from_slice(&(c.dirs.len() as u64).to_le_bytes());
    for (path, d) in &c.dirs {
        put_bytes(&mut out, path);
        put_key(&mut out, &d.key);
        out.extend_from_slice(&d.tree.0);
        out.extend_from_slice(&d.subdirs.to_le_bytes());
        out.extend_from_slice(&d.entries.to_le_bytes());
        for v in d.delta {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(d.xattrs.len() as u32).to_le_bytes());
        for (k, v) in &d.xattrs {
            put_bytes(&mut out, k);
            put_bytes(&mut out, v);
        }
        out.extend_from_slice(&(d.names.len() as u32).to_le_bytes());
        for n in &d.names {
            put_bytes(&mut out, n);
        }
        out.extend_from_slice(&d.ino.to_le_bytes());
    }
    out.extend_from_slice(&(c.others.len() as u64).to_le_bytes());
    for (path, k) in &c.others {
        put_bytes(&mut out, path);
        put_key(&mut out, k);
    }
    out
}

fn decode_upper(data: &[u8]) -> Result<UpperCache> {
    let mut r = Reader { data, pos: 0 };
    if r.take(4)? != UPPER_MAGIC {
        return Err(Error::Corrupt("upper cache has a bad magic".into()));
    }
    let mut c = UpperCache {
        rules: get_bytes(&mut r)?,
        ..UpperCache::default()
    };
    let n = r.u64()? as usize;
    for _ in 0..n {
        let path = get_bytes(&mut r)?;
        let key = get_key(&mut r)?;
        let tree = r.id()?;
        let subdirs = r.u32()?;
        let entries = r.u64()?;
        let mut delta = [0i64; 4];
        for v in &mut delta {
            *v = r.i64()?;
        }
        let nx = r.u32()? as usize;
        let mut xattrs = Vec::with_capacity(nx.min(64));
        for _ in 0..nx {
            let k = get_bytes(&mut r)?;
            xattrs.push((k, get_bytes(&mut r)?));
        }
        let nn = r.u32()? as usize;
        let mut names = Vec::with_capacity(nn.min(data.len() / 4));
        for _ in 0..nn {
            names.push(get_bytes(&mut r)?);
        }
        let d = CachedDir {
            key,
            tree,
            subdirs,
            entries,
            delta,
            xattrs,
            names,
            ino: r.u64()?,
        };
        c.dirs.insert(path, d);
    }
    let n = r.u64()? as usize;
    for _ in 0..n {
        let path = get_bytes(&mut r)?;
        c.others.insert(path, get_key(&mut r)?);
    }
    if r.pos != data.len() {
        return Err(Error::Corrupt("upper cache has trailing bytes".into()));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_cache_round_trips_with_snapshot_names() {
        let key = StatKey {
            size: 3,
            mtime_ns: -4,
            ctime_ns: 5,
            ino: 6,
        };
        let mut c = StatCache::new();
        for (p, snapshot) in [(&b"a/log"[..], Some("18f-7-0")), (b"b", None)] {
            c.insert(
                p.to_vec(),
                Cached {
                    key: key.clone(),
                    chunks: vec![Chunk {
                        id: ObjectId::of(p),
                        len: 3,
                    }],
                    xattrs: vec![(b"user.k".to_vec(), b"v".to_vec())],
                    ino: 9,
                    ctime_ns: 10,
                    snapshot: snapshot.map(str::to_string),
                },
            );
        }
        let back = decode(&encode(&c)).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[&b"a/log"[..]].snapshot.as_deref(), Some("18f-7-0"));
        assert_eq!(back[&b"b"[..]].snapshot, None);
        assert_eq!(back[&b"b"[..]].chunks, c[&b"b"[..]].chunks);
    }

    #[test]
    fn upper_cache_round_trips() {
        let key = StatKey {
            size: 3,
            mtime_ns: -4,
            ctime_ns: 5,
            ino: 6,
        };
        let mut c = UpperCache {
            rules: b"*.pem\nsecrets/**".to_vec(),
            ..UpperCache::default()
        };
        c.dirs.insert(
            b"a/b".to_vec(),
            CachedDir {
                key: key.clone(),
                tree: ObjectId::of(b"t"),
                subdirs: 2,
                entries: 7,
                delta: [1, -2, 3, -4],
                xattrs: vec![(b"user.k".to_vec(), b"v".to_vec())],
                names: vec![b"x".to_vec(), b"link".to_vec()],
                ino: 0x1_0000_0007,
            },
        );
        c.others.insert(b"a/link".to_vec(), key);
        let mut bad = encode_upper(&c);
        let d = decode_upper(&bad).unwrap();
        assert_eq!((d.rules, d.dirs, d.others), (c.rules, c.dirs, c.others));
        bad.push(0);
        assert!(decode_upper(&bad).is_err());
    }
}
