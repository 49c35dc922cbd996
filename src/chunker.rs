//! Content-defined chunking of one file, reusing the previous version's chunks where they hold.
//!
//! A file is cut with FastCDC (v2020, the store's min/avg/max). Where the path had content in
//! the previous checkpoint, its chunks are tried first: a previous chunk whose byte range hashes
//! to the same id now stands for the same bytes, and is kept without running the chunker. The
//! result is exactly the chunk list a full pass would give, because FastCDC's cut after a
//! position depends only on the bytes from there to the cut, plus one byte after it when the cut
//! is shorter than `max`, and on the window it sees (`min(max, bytes left)`). So a previous
//! chunk is reused only when
//! - both versions had at least `max` bytes from its start (same window), and
//! - its bytes hash to its id, and the byte after it is checked too: the next previous chunk
//!   must also match (or the chunk is `max` long, a cut that looked at nothing beyond itself).
//!
//! Where a previous chunk does not match, the chunker runs from the last position known to be
//! a cut and stops as soon as one of its cuts lands on a previous chunk's start again (resync),
//! so an in-place edit in a database file costs the chunks around the edit, and an append to a
//! log costs its tail plus a SHA-256 pass (no chunker, no object writes) over the prefix.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::object::ObjectBatch;
use crate::store::tree::Chunk;
use crate::store::ChunkerConfig;

/// Reads `[pos, end)` of a file with `pread` (an early end of file simply ends the stream).
struct ReadAt<'a> {
    f: &'a File,
    pos: u64,
    end: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = usize::try_from(self.end - self.pos).unwrap_or(usize::MAX);
        let n = buf.len().min(left);
        if n == 0 {
            return Ok(0);
        }
        let r = self.f.read_at(&mut buf[..n], self.pos)?;
        self.pos += r as u64;
        Ok(r)
    }
}

/// Chunks the first `size` bytes of `f` (objects go to `batch`); returns the chunks and the
/// bytes actually read, which is less than `size` when the file shrank meanwhile. `previous`
/// is the chunk list the path had before (empty when none).
pub(crate) fn chunk_file(
    batch: &ObjectBatch<'_>,
    chunker: &ChunkerConfig,
    f: &File,
    size: u64,
    path: &Path,
    previous: &[Chunk],
    progress: &AtomicU64,
) -> Result<(Vec<Chunk>, u64)> {
    let mut chunks = Vec::new();
    if size <= u64::from(chunker.min) {
        let mut data = Vec::with_capacity(size as usize);
        f.take(size)
            .read_to_end(&mut data)
            .map_err(|e| Error::io(path, e))?;
        if !data.is_empty() {
            let id = batch.ensure(&data)?;
            chunks.push(Chunk {
                id,
                len: data.len() as u32,
            });
        }
        progress.fetch_add(data.len() as u64, Ordering::Relaxed);
        return Ok((chunks, data.len() as u64));
    }
    let max = u64::from(chunker.max);
    let mut starts = Vec::with_capacity(previous.len());
    let mut prev_size = 0u64;
    for c in previous {
        starts.push(prev_size);
        prev_size += u64::from(c.len);
    }
    // Whether previous chunk `i` was cut from a full window, as a chunk there would be now.
    let eligible = |i: usize| starts[i] + max <= prev_size && starts[i] + max <= size;
    let mut pos = 0u64;
    let mut i = 0usize;
    let mut buf = Vec::new();
    while pos < size {
        while i < previous.len() && starts[i] < pos {
            i += 1;
        }
        // Reuse a run of previous chunks whose bytes still hash to their ids.
        let run_start = chunks.len();
        while i < previous.len() && starts[i] == pos && eligible(i) {
            let c = previous[i];
            buf.resize(c.len as usize, 0);
            match f.read_exact_at(&mut buf, pos) {
                Ok(()) => {}
                // Shrank meanwhile: the caller sees the short total and reads again.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok((chunks, pos)),
                Err(e) => return Err(Error::io(path, e)),
            }
            if ObjectId::of(&buf) != c.id {
                break;
            }
            chunks.push(c);
            pos += u64::from(c.len);
            progress.fetch_add(u64::from(c.len), Ordering::Relaxed);
            i += 1;
        }
        // The run's last chunk was checked without the byte after it, which its cut may have
        // looked at: chunk it again unless it is `max` long.
        if let Some(&last) = chunks[run_start..].last() {
            if u64::from(last.len) < max {
                chunks.pop();
                pos -= u64::from(last.len);
                progress.fetch_sub(u64::from(last.len), Ordering::Relaxed);
            }
        }
        if pos >= size {
            break;
        }
        // Chunk from `pos` (a cut of the file) until a cut lands on a previous chunk's start.
        let reader = ReadAt { f, pos, end: size };
        let mut resynced = false;
        let cdc = fastcdc::v2020::StreamCDC::new(reader, chunker.min, chunker.avg, chunker.max);
        for c in cdc {
            let c = c.map_err(|e| match e {
                fastcdc::v2020::Error::IoError(io) => Error::io(path, io),
                other => Error::io(path, io::Error::other(other.to_string())),
            })?;
            let id = batch.ensure(&c.data)?;
            chunks.push(Chunk {
                id,
                len: c.length as u32,
            });
            pos += c.length as u64;
            progress.fetch_add(c.length as u64, Ordering::Relaxed);
            while i < previous.len() && starts[i] < pos {
                i += 1;
            }
            if i < previous.len() && starts[i] == pos && eligible(i) {
                resynced = true;
                break;
            }
        }
        if !resynced {
            break;
        }
    }
    Ok((chunks, pos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{InitOptions, RootConfig, Store};
    use std::io::Write;

    fn temp_store(dir: &Path) -> Store {
        let mut opts = InitOptions::default();
        let root = RootConfig {
            path: dir.join("root"),
            exclude: Vec::new(),
        };
        opts.roots.insert("r".into(), root);
        Store::init(&dir.join("store"), &opts).unwrap()
    }

    /// Deterministic pseudo-random bytes (xorshift), so chunk cuts fall where they would in
    /// real data.
    fn noise(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    fn chunks_of(
        batch: &ObjectBatch<'_>,
        cfg: &ChunkerConfig,
        dir: &Path,
        data: &[u8],
        previous: &[Chunk],
    ) -> Vec<Chunk> {
        let p = dir.join("f");
        let mut f = File::create(&p).unwrap();
        f.write_all(data).unwrap();
        drop(f);
        let f = File::open(&p).unwrap();
        let progress = AtomicU64::new(0);
        let (chunks, total) =
            chunk_file(batch, cfg, &f, data.len() as u64, &p, previous, &progress).unwrap();
        assert_eq!(total, data.len() as u64);
        assert_eq!(progress.load(Ordering::Relaxed), data.len() as u64);
        assert_eq!(
            chunks.iter().map(|c| u64::from(c.len)).sum::<u64>(),
            data.len() as u64
        );
        chunks
    }

    /// Every kind of edit gives exactly the chunks of a pass without a previous version.
    #[test]
    fn reusing_previous_chunks_gives_the_same_cuts_as_a_full_pass() {
        let dir = tempfile::tempdir().unwrap();
        let store = temp_store(dir.path());
        let batch = ObjectBatch::dry_run(&store);
        // Small sizes make many chunks per file; real stores use 64K/256K/1M.
        let cfg = ChunkerConfig {
            algorithm: "fastcdc-v2020".into(),
            min: 4096,
            avg: 16384,
            max: 65536,
        };
        let base = noise(7, 3 << 20);
        let prev = chunks_of(&batch, &cfg, dir.path(), &base, &[]);
        assert!(prev.len() > 50, "{} chunks", prev.len());
        let mut edits: Vec<(&str, Vec<u8>)> = Vec::new();
        let mut appended = base.clone();
        appended.extend(noise(8, 300_000));
        edits.push(("append", appended));
        let mut overwritten = base.clone();
        overwritten[1_000_000..1_004_096].copy_from_slice(&noise(9, 4096));
        overwritten[2_500_000..2_500_010].copy_from_slice(&[0; 10]);
        edits.push(("overwrite", overwritten));
        let mut inserted = base[..1_500_000].to_vec();
        inserted.extend(noise(10, 777));
        inserted.extend(&base[1_500_000..]);
        edits.push(("insert", inserted));
        edits.push(("truncate", base[..2_000_123].to_vec()));
        edits.push(("cut-head", base[100..].to_vec()));
        edits.push(("same", base.clone()));
        let mut zeros = base.clone();
        zeros[500_000..900_000].fill(0);
        edits.push(("zero-run", zeros));
        // The first byte after a cut: the chunker looked at it to cut there, so a change to it
        // moves the cut although the chunk before it is unchanged.
        let mut at = 0usize;
        for c in &prev[..prev.len() / 2] {
            at += c.len as usize;
        }
        let mut after_cut = base.clone();
        after_cut[at] ^= 0x5a;
        edits.push(("byte-after-cut", after_cut));
        for (what, data) in &edits {
            let full = chunks_of(&batch, &cfg, dir.path(), data, &[]);
            let inc = chunks_of(&batch, &cfg, dir.path(), data, &prev);
            assert_eq!(inc, full, "{what}");
            // And again from the edited version back to the base.
            let back = chunks_of(&batch, &cfg, dir.path(), &base, &full);
            assert_eq!(back, prev, "{what}, back");
        }
        // A previous list that does not belong to this file at all changes nothing.
        let other = chunks_of(&batch, &cfg, dir.path(), &noise(11, 1 << 20), &[]);
        let inc = chunks_of(&batch, &cfg, dir.path(), &base, &other);
        assert_eq!(inc, prev);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// Random splices of random data: incremental chunking equals a full pass.
        #[test]
        fn random_edits_chunk_like_a_full_pass(
            seed in 1u64..u64::MAX,
            len in 70_000usize..600_000,
            edits in proptest::collection::vec((0.0f64..1.0, 0usize..5000, 0usize..5000), 1..4),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let store = temp_store(dir.path());
            let batch = ObjectBatch::dry_run(&store);
            let cfg = ChunkerConfig { algorithm: "fastcdc-v2020".into(), min: 2048, avg: 8192, max: 16384 };
            let base = noise(seed, len);
            let mut data = base.clone();
            for (k, (at, del, ins)) in edits.iter().enumerate() {
                let at = (at * data.len() as f64) as usize;
                let end = (at + del).min(data.len());
                let new = noise(seed ^ (k as u64 + 1), *ins);
                data.splice(at..end, new);
            }
            let prev = chunks_of(&batch, &cfg, dir.path(), &base, &[]);
            let full = chunks_of(&batch, &cfg, dir.path(), &data, &[]);
            let inc = chunks_of(&batch, &cfg, dir.path(), &data, &prev);
            proptest::prop_assert_eq!(inc, full);
        }
    }
}
