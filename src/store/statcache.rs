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

const MAGIC: &[u8; 4] = b"CKS1";
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
}

/// Relative path (bytes, `/`-separated) -> cached file.
pub type StatCache = HashMap<Vec<u8>, Cached>;

impl Store {
    /// Loads the stat cache of a checkpoint's root; empty when missing or unreadable.
    pub fn load_statcache(&self, checkpoint: &ObjectId, root: &str) -> StatCache {
        let p = self.statcache_path(checkpoint, root);
        match fs::read(&p) {
            Ok(data) => decode(&data).unwrap_or_else(|e| {
                log::warn!("ignoring stat cache {}: {e}", p.display());
                StatCache::new()
            }),
            Err(_) => StatCache::new(),
        }
    }

    /// Saves a stat cache (best effort: it is only a cache).
    pub fn save_statcache(&self, checkpoint: &ObjectId, root: &str, cache: &StatCache) {
        let p = self.statcache_path(checkpoint, root);
        if let Err(e) = write(&p, &encode(cache)) {
            log::warn!("could not write stat cache {}: {e}", p.display());
        }
    }
}

fn write(path: &Path, data: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, data)?;
    fs::rename(&tmp, path)
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
    }
    out
}

fn decode(data: &[u8]) -> Result<StatCache> {
    let mut r = Reader { data, pos: 0 };
    if r.take(4)? != MAGIC {
        return Err(Error::Corrupt("stat cache has a bad magic".into()));
    }
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
        out.insert(
            path,
            Cached {
                key,
                chunks,
                xattrs,
            },
        );
    }
    Ok(out)
}
