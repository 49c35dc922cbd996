//! Content changed on both sides of a merge: the driver (chosen by what the bytes are, or by a
//! glob in STORE.json's `merge_drivers`) and the stored result.
//!
//! - `sqlite`: every present version starts with SQLite's header: row by row, see
//!   [`super::sqlite`].
//! - `append`: both sides only appended to the base's bytes (transcripts, logs): the base, then
//!   our tail, then theirs. Compared chunk by chunk, so a 500 MB transcript costs its last
//!   chunks, not its size.
//! - `text`: no NUL byte in the first 8000 bytes of any version (git's test): line-based
//!   three-way merge with `git merge-file`'s semantics; a version over [`TEXT_MAX`] is a
//!   conflict, not read.
//! - anything else changed on both sides is a conflict, never a silent pick.
//!
//! Every version is read from the store; merged bytes go to a private scratch directory under
//! the store's `tmp/` and are cut into chunks by the same chunker as a capture.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;

use globset::{GlobBuilder, GlobMatcher};
use serde::Serialize;

use super::sqlite::{self, RowConflict};
use super::Take;
use crate::error::{Error, Result};
use crate::store::object::ObjectBatch;
use crate::store::tree::{Chunk, Entry, EntryKind};
use crate::store::Store;

/// The largest version of a file the text driver reads (each of the three).
pub const TEXT_MAX: u64 = 64 << 20;
/// How far git looks for a NUL byte to call a file binary.
const BINARY_PROBE: u64 = 8000;

/// How content changed on both sides is merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Driver {
    Text,
    Append,
    Sqlite,
    Binary,
}

impl Driver {
    pub fn parse(s: &str) -> Option<Driver> {
        match s {
            "text" => Some(Driver::Text),
            "append" => Some(Driver::Append),
            "sqlite" => Some(Driver::Sqlite),
            "binary" => Some(Driver::Binary),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Driver::Text => "text",
            Driver::Append => "append",
            Driver::Sqlite => "sqlite",
            Driver::Binary => "binary",
        }
    }
}

/// The `merge_drivers` of STORE.json, compiled: a glob without `/` matches a file's name at
/// any depth (as in `.gitattributes`), one with `/` the whole `ROOT/PATH`.
pub struct DriverRules {
    rules: Vec<(GlobMatcher, bool, Driver)>,
}

impl DriverRules {
    /// # Errors
    /// `Invalid` naming a bad glob or driver.
    pub fn new(config: &BTreeMap<String, String>) -> Result<DriverRules> {
        let mut rules = Vec::new();
        for (glob, driver) in config {
            let d = Driver::parse(driver).ok_or_else(|| {
                Error::Invalid(format!(
                    "STORE.json merge_drivers: {driver:?} for {glob:?} is not a driver (text, \
                     append, sqlite, binary)"
                ))
            })?;
            let g = GlobBuilder::new(glob)
                .literal_separator(true)
                .build()
                .map_err(|e| Error::Invalid(format!("STORE.json merge_drivers: {glob:?}: {e}")))?;
            rules.push((g.compile_matcher(), glob.contains('/'), d));
        }
        Ok(DriverRules { rules })
    }

    fn for_path(&self, path: &str) -> Option<Driver> {
        let name = path.rsplit('/').next().unwrap_or(path);
        self.rules
            .iter()
            .find(|(g, full, _)| g.is_match(if *full { path } else { name }))
            .map(|(_, _, d)| *d)
    }
}

/// What the driver made of one file.
pub struct FileMerge {
    pub driver: Driver,
    /// The merged content (with `--take`, the taken side in the conflicting parts); `None`
    /// when the file could not be merged at all.
    pub content: Option<(Vec<Chunk>, u64)>,
    /// Why parts of it (or all of it) conflict.
    pub conflict: Option<String>,
    /// SQLite rows in conflict.
    pub rows: Vec<RowConflict>,
}

impl FileMerge {
    fn conflict(driver: Driver, why: String) -> FileMerge {
        FileMerge {
            driver,
            content: None,
            conflict: Some(why),
            rows: Vec::new(),
        }
    }
}

/// A private directory under the store's `tmp/`, made when first needed, removed on drop.
pub struct Scratch {
    parent: PathBuf,
    dir: Option<PathBuf>,
    next: u64,
}

impl Scratch {
    pub fn new(store: &Store) -> Scratch {
        Scratch {
            parent: store.tmp_dir(),
            dir: None,
            next: 0,
        }
    }

    /// A new file name in the directory.
    fn file(&mut self, stem: &str) -> Result<PathBuf> {
        if self.dir.is_none() {
            let d = crate::fs::atomic::temp_path(&self.parent, "merge");
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&d)
                .map_err(|e| Error::io(&d, e))?;
            self.dir = Some(d);
        }
        self.next += 1;
        let dir = self.dir.as_ref().map_or(&self.parent, |d| d);
        Ok(dir.join(format!("{}-{stem}", self.next)))
    }

    fn dir(&self) -> &Path {
        self.dir.as_deref().unwrap_or(&self.parent)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(d) = &self.dir {
            if let Err(e) = fs::remove_dir_all(d) {
                log::warn!("could not remove {} ({e})", d.display());
            }
        }
    }
}

/// The three versions of one file (base absent for add/add), with what `--take` says.
pub struct Versions<'e> {
    pub path: &'e str,
    pub base: Option<&'e Entry>,
    pub ours: &'e Entry,
    pub theirs: &'e Entry,
    /// SQLite sidecars (`-wal`) of each version, when the directory has them.
    pub wal: [Option<&'e Entry>; 3],
    pub take: Option<Take>,
}

/// Merges file content with a driver.
pub struct ContentMerger<'a> {
    pub store: &'a Store,
    pub batch: &'a ObjectBatch<'a>,
    pub rules: DriverRules,
    pub scratch: Scratch,
    pub sqlite_limits: sqlite::Limits,
}

fn chunks_of(e: &Entry) -> &[Chunk] {
    match &e.kind {
        EntryKind::File { chunks } => chunks,
        _ => &[],
    }
}

impl ContentMerger<'_> {
    /// Merges `v` (all files, content changed on both sides).
    ///
    /// # Errors
    /// A chunk that does not read; a scratch file that cannot be written.
    pub fn merge(&mut self, v: &Versions<'_>) -> Result<FileMerge> {
        let forced = self.rules.for_path(v.path);
        let driver = match forced {
            Some(d) => d,
            None => self.detect(v)?,
        };
        match driver {
            Driver::Sqlite => self.sqlite(v),
            Driver::Append => self.append(v),
            Driver::Text => self.text(v),
            Driver::Binary => Ok(FileMerge::conflict(
                Driver::Binary,
                "binary content changed on both sides".into(),
            )),
        }
    }

    fn head(&self, e: &Entry, n: u64) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for c in chunks_of(e) {
            if out.len() as u64 >= n {
                break;
            }
            out.extend_from_slice(&self.store.read_chunk(c)?);
        }
        out.truncate(n as usize);
        Ok(out)
    }

    /// Whether a file starts with SQLite's header.
    pub fn is_sqlite(&self, e: &Entry) -> Result<bool> {
        Ok(sqlite::is_sqlite(&self.head(e, 100)?))
    }

    fn detect(&self, v: &Versions<'_>) -> Result<Driver> {
        let all = [v.base, Some(v.ours), Some(v.theirs)];
        let mut sqlite = true;
        let mut text = true;
        for e in all.into_iter().flatten() {
            let head = self.head(e, BINARY_PROBE)?;
            sqlite &= sqlite::is_sqlite(&head);
            text &= !head.contains(&0);
        }
        if sqlite {
            return Ok(Driver::Sqlite);
        }
        if let Some(b) = v.base {
            if b.size > 0
                && self.is_prefix(chunks_of(b), v.ours)?
                && self.is_prefix(chunks_of(b), v.theirs)?
            {
                return Ok(Driver::Append);
            }
        }
        Ok(if text { Driver::Text } else { Driver::Binary })
    }

    /// Whether the bytes of `prefix` begin `e`: equal leading chunks are taken as equal bytes,
    /// and only the rest (usually the prefix's last chunk) is read and compared.
    fn is_prefix(&self, prefix: &[Chunk], e: &Entry) -> Result<bool> {
        let total: u64 = prefix.iter().map(|c| u64::from(c.len)).sum();
        if total > e.size {
            return Ok(false);
        }
        let other = chunks_of(e);
        let same = prefix.iter().zip(other).take_while(|(a, b)| a == b).count();
        let start: u64 = prefix[..same].iter().map(|c| u64::from(c.len)).sum();
        let mut want = Vec::new();
        for c in &prefix[same..] {
            want.extend_from_slice(&self.store.read_chunk(c)?);
        }
        Ok(self.range(other, start, want.len() as u64)? == want)
    }

    /// `len` bytes of a file from `start`.
    fn range(&self, chunks: &[Chunk], start: u64, len: u64) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(len as usize);
        let mut pos = 0u64;
        for c in chunks {
            let end = pos + u64::from(c.len);
            if end > start && pos < start + len {
                let data = self.store.read_chunk(c)?;
                let from = start.saturating_sub(pos) as usize;
                let to = ((start + len).min(end) - pos) as usize;
                out.extend_from_slice(&data[from..to]);
            }
            pos = end;
            if pos >= start + len {
                break;
            }
        }
        Ok(out)
    }

    /// Writes the bytes of `chunks` from `start` to `w`.
    fn copy_from(&self, chunks: &[Chunk], start: u64, w: &mut impl Write, p: &Path) -> Result<()> {
        let mut pos = 0u64;
        for c in chunks {
            let end = pos + u64::from(c.len);
            if end > start {
                let data = self.store.read_chunk(c)?;
                let from = start.saturating_sub(pos) as usize;
                w.write_all(&data[from..]).map_err(|e| Error::io(p, e))?;
            }
            pos = end;
        }
        Ok(())
    }

    /// Stores the file at `p` (in the scratch directory) as chunks, trying `previous` first.
    fn store_file(&self, p: &Path, previous: &[Chunk]) -> Result<(Vec<Chunk>, u64)> {
        let f = File::open(p).map_err(|e| Error::io(p, e))?;
        let size = f.metadata().map_err(|e| Error::io(p, e))?.len();
        let progress = AtomicU64::new(0);
        crate::ingest::chunk_file(
            self.batch,
            &self.store.config().chunker,
            &f,
            size,
            p,
            previous,
            &[],
            &progress,
        )
    }

    fn store_bytes(&mut self, data: &[u8], previous: &[Chunk]) -> Result<(Vec<Chunk>, u64)> {
        let p = self.scratch.file("merged")?;
        fs::write(&p, data).map_err(|e| Error::io(&p, e))?;
        let out = self.store_file(&p, previous);
        let _ = fs::remove_file(&p);
        out
    }

    /// Base, then our tail, then theirs: ours' chunks stay, and the chunker runs again from
    /// the start of ours' last chunk (FastCDC starts afresh at a cut), so the result is cut
    /// as a capture of the same bytes would be.
    fn append(&mut self, v: &Versions<'_>) -> Result<FileMerge> {
        let Some(b) = v.base else {
            return Ok(FileMerge::conflict(
                Driver::Append,
                "added on both sides (append needs a common start)".into(),
            ));
        };
        let base = chunks_of(b);
        if !self.is_prefix(base, v.ours)? || !self.is_prefix(base, v.theirs)? {
            return Ok(FileMerge::conflict(
                Driver::Append,
                "not only appended to on both sides".into(),
            ));
        }
        let ours = chunks_of(v.ours);
        let keep = ours.len().saturating_sub(1);
        let kept_len: u64 = ours[..keep].iter().map(|c| u64::from(c.len)).sum();
        let p = self.scratch.file("tail")?;
        {
            let f = File::create(&p).map_err(|e| Error::io(&p, e))?;
            let mut w = BufWriter::new(f);
            self.copy_from(ours, kept_len, &mut w, &p)?;
            self.copy_from(chunks_of(v.theirs), b.size, &mut w, &p)?;
            w.flush().map_err(|e| Error::io(&p, e))?;
        }
        let stored = self.store_file(&p, &ours[keep..]);
        let _ = fs::remove_file(&p);
        let (tail, tail_len) = stored?;
        let mut chunks = ours[..keep].to_vec();
        chunks.extend(tail);
        Ok(FileMerge {
            driver: Driver::Append,
            content: Some((chunks, kept_len + tail_len)),
            conflict: None,
            rows: Vec::new(),
        })
    }

    fn read_all(&self, e: Option<&Entry>) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        if let Some(e) = e {
            self.copy_from(chunks_of(e), 0, &mut out, Path::new(""))?;
        }
        Ok(out)
    }

    fn text(&mut self, v: &Versions<'_>) -> Result<FileMerge> {
        let all = [v.base, Some(v.ours), Some(v.theirs)];
        if all.iter().flatten().any(|e| e.size > TEXT_MAX) {
            return Ok(FileMerge::conflict(
                Driver::Text,
                format!(
                    "a version is over {} MiB, too large to merge as text",
                    TEXT_MAX >> 20
                ),
            ));
        }
        let base = self.read_all(v.base)?;
        let ours = self.read_all(Some(v.ours))?;
        let theirs = self.read_all(Some(v.theirs))?;
        let m = super::text::merge_text(&base, &ours, &theirs, v.take);
        let content = Some(self.store_bytes(&m.bytes, chunks_of(v.ours))?);
        Ok(FileMerge {
            driver: Driver::Text,
            content,
            conflict: (m.conflicts > 0).then(|| format!("{} conflicting hunks", m.conflicts)),
            rows: Vec::new(),
        })
    }

    /// Writes a version (and its `-wal`) into the scratch directory for SQLite. With `like`
    /// (a version placed before, and its entry), the file starts as a copy of that one and
    /// only the chunks it lacks are read from the store: the versions of a database share
    /// most of their blocks.
    fn place(
        &mut self,
        e: &Entry,
        wal: Option<&Entry>,
        stem: &str,
        like: Option<(&Path, &Entry)>,
    ) -> Result<PathBuf> {
        let p = self.scratch.file(stem)?;
        match like {
            Some((from, l)) => self.place_like(e, &p, from, chunks_of(l))?,
            None => self.write_file(e, &p)?,
        }
        if let Some(w) = wal {
            self.write_file(w, &sidecar(&p))?;
        }
        Ok(p)
    }

    fn write_file(&self, e: &Entry, path: &Path) -> Result<()> {
        let f = File::create(path).map_err(|err| Error::io(path, err))?;
        let mut w = BufWriter::new(f);
        self.copy_from(chunks_of(e), 0, &mut w, path)?;
        w.flush().map_err(|err| Error::io(path, err))
    }

    /// Writes `e` at `to` from `from`, a file already placed that holds the bytes of `like`:
    /// `from` is copied (a reflink where the filesystem has them), then every chunk of `e`
    /// that is not at the same offset in `like` is copied from where `like` has it, or else
    /// read from the store.
    fn place_like(&self, e: &Entry, to: &Path, from: &Path, like: &[Chunk]) -> Result<()> {
        fs::copy(from, to).map_err(|err| Error::io(to, err))?;
        let src = File::open(from).map_err(|err| Error::io(from, err))?;
        let dst = fs::OpenOptions::new()
            .write(true)
            .open(to)
            .map_err(|err| Error::io(to, err))?;
        let mut at: HashMap<&Chunk, u64> = HashMap::with_capacity(like.len());
        let mut pos = 0u64;
        for c in like {
            at.entry(c).or_insert(pos);
            pos += u64::from(c.len);
        }
        let mut pos = 0u64;
        let mut buf = Vec::new();
        for c in chunks_of(e) {
            match at.get(c) {
                Some(&p) if p == pos => {}
                Some(&p) => {
                    buf.resize(c.len as usize, 0);
                    src.read_exact_at(&mut buf, p)
                        .map_err(|err| Error::io(from, err))?;
                    dst.write_all_at(&buf, pos)
                        .map_err(|err| Error::io(to, err))?;
                }
                None => {
                    let data = self.store.read_chunk(c)?;
                    dst.write_all_at(&data, pos)
                        .map_err(|err| Error::io(to, err))?;
                }
            }
            pos += u64::from(c.len);
        }
        dst.set_len(pos).map_err(|err| Error::io(to, err))
    }

    fn sqlite(&mut self, v: &Versions<'_>) -> Result<FileMerge> {
        let max = self.sqlite_limits.max_bytes;
        let all = [v.base, Some(v.ours), Some(v.theirs)];
        if all.iter().flatten().any(|e| e.size > max) {
            return Ok(FileMerge::conflict(
                Driver::Sqlite,
                format!(
                    "a version is over {} MiB, too large to merge by rows",
                    max >> 20
                ),
            ));
        }
        let Some(b) = v.base else {
            return Ok(FileMerge::conflict(
                Driver::Sqlite,
                "database added on both sides".into(),
            ));
        };
        let started = std::time::Instant::now();
        let base = self.place(b, v.wal[0], "base.db", None)?;
        let ours = self.place(v.ours, v.wal[1], "ours.db", Some((&base, b)))?;
        let theirs = self.place(v.theirs, v.wal[2], "theirs.db", Some((&base, b)))?;
        let out = self.scratch.file("merged.db")?;
        let placed = started.elapsed();
        let mut limits = self.sqlite_limits.clone();
        limits.prefer_theirs = v.take == Some(Take::Theirs);
        let merged =
            match sqlite::merge_databases(self.scratch.dir(), &base, &ours, &theirs, &out, &limits)
            {
                Ok(m) => m,
                Err(e) => {
                    return Ok(FileMerge::conflict(
                        Driver::Sqlite,
                        format!("the databases could not be merged by rows ({e})"),
                    ))
                }
            };
        // A version too large (with its -wal) is a conflict and leaves no `out`.
        let content = if out.exists() {
            Some(self.store_file(&out, chunks_of(v.ours))?)
        } else {
            None
        };
        for p in [base, ours, theirs, out] {
            let _ = fs::remove_file(sidecar(&p));
            let _ = fs::remove_file(&p);
        }
        log::debug!(
            "merge: {} merged by rows in {:?} (versions placed in {placed:?})",
            v.path,
            started.elapsed()
        );
        let n = merged.conflicts.len() as u64 + merged.conflicts_unlisted;
        let conflict = (n > 0).then(|| format!("{n} rows or tables in conflict"));
        Ok(FileMerge {
            driver: Driver::Sqlite,
            content,
            conflict,
            rows: merged.conflicts,
        })
    }
}

/// `P-wal` beside `P`.
fn sidecar(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push("-wal");
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::object::ObjectBatch;

    fn file(chunks: Vec<Chunk>) -> Entry {
        Entry {
            name: b"db".to_vec(),
            size: chunks.iter().map(|c| u64::from(c.len)).sum(),
            kind: EntryKind::File { chunks },
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime_ns: 0,
            xattrs: Vec::new(),
            ctime_ns: 0,
            ino: 0,
            nlink: 0,
        }
    }

    #[test]
    fn a_version_placed_like_another_has_its_own_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::temp_store(dir.path());
        let batch = ObjectBatch::new(&store);
        let blocks: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 100 + usize::from(i)]).collect();
        let c: Vec<Chunk> = blocks
            .iter()
            .map(|b| Chunk {
                id: batch.ensure(b).unwrap(),
                len: b.len() as u32,
            })
            .collect();
        batch.commit().unwrap();
        let batch = ObjectBatch::dry_run(&store);
        let mut m = ContentMerger {
            store: &store,
            batch: &batch,
            rules: DriverRules::new(&BTreeMap::new()).unwrap(),
            scratch: Scratch::new(&store),
            sqlite_limits: sqlite::Limits::default(),
        };
        let base = file(vec![c[0], c[1], c[2], c[3]]);
        let at = m.place(&base, None, "base.db", None).unwrap();
        let bytes = |e: &[usize]| {
            e.iter()
                .flat_map(|i| blocks[*i].clone())
                .collect::<Vec<u8>>()
        };
        assert_eq!(fs::read(&at).unwrap(), bytes(&[0, 1, 2, 3]));
        // Same offsets, moved blocks, a new block, shorter and longer than the base.
        for order in [
            vec![0, 1, 4, 3],
            vec![1, 0, 3],
            vec![0, 1, 2, 3, 4, 2],
            vec![4],
            vec![],
        ] {
            let e = file(order.iter().map(|i| c[*i]).collect());
            let p = m.place(&e, None, "v.db", Some((&at, &base))).unwrap();
            assert_eq!(fs::read(&p).unwrap(), bytes(&order), "{order:?}");
        }
    }
}
