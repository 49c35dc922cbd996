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
//! - its bytes are its content (equal to the stored chunk, compared byte for byte when the
//!   page cache holds that, else hashed to its id), and the byte after it is checked too: the
//!   next previous chunk must also match (or the chunk is `max` long, a cut that looked at
//!   nothing beyond itself).
//!
//! Where a previous chunk does not match, the chunker runs from the last position known to be
//! a cut and stops as soon as one of its cuts lands on a previous chunk's start again (resync),
//! so an in-place edit in a database file costs the chunks around the edit, and an append to a
//! log costs its tail plus a comparison (or a SHA-256 pass) over the prefix: no chunker, no
//! object writes.
//!
//! SQLite databases are the exception (`ChunkerConfig::sqlite_block`): they are cut into
//! fixed blocks aligned to their pages, since a transaction rewrites pages scattered over the
//! whole file; a previous block at the same offset and length is reused when its bytes still
//! hash to its id.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::snapshot::covered;
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

/// A read buffer that starts on a cache line. The kernel copies from the page cache much
/// faster into an aligned buffer: reading and hashing a 67 MB file took 85 ms into a `Vec`
/// from `malloc` (16 bytes past a page start) and 54 ms into this, on a 2-core VM.
#[derive(Default)]
pub(crate) struct ReadBuf {
    v: Vec<u8>,
    off: usize,
}

impl ReadBuf {
    const ALIGN: usize = 64;

    pub(crate) const fn new() -> ReadBuf {
        ReadBuf {
            v: Vec::new(),
            off: 0,
        }
    }

    /// An aligned slice of `len` bytes (contents unspecified).
    pub(crate) fn get(&mut self, len: usize) -> &mut [u8] {
        if self.v.len() < self.off + len {
            self.v = vec![0u8; len + Self::ALIGN];
            self.off = (Self::ALIGN - self.v.as_ptr() as usize % Self::ALIGN) % Self::ALIGN;
        }
        &mut self.v[self.off..self.off + len]
    }
}

thread_local! {
    /// Each reading thread's buffers, kept from file to file (see [`Buffers`]).
    static BUFFERS: Cell<(ReadBuf, ReadBuf)> = const { Cell::new((ReadBuf::new(), ReadBuf::new())) };
}

/// This thread's buffers for a file's bytes and a stored chunk's, taken for one file and put
/// back on drop: a fresh buffer costs a page fault and a zeroed page per 4 KiB on first
/// touch, which was 6% of a large room's checkpoint (measured with perf on a 2-core VM).
struct Buffers {
    data: ReadBuf,
    stored: ReadBuf,
}

impl Buffers {
    fn take() -> Buffers {
        let (data, stored) = BUFFERS.take();
        Buffers { data, stored }
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        BUFFERS.set((
            std::mem::take(&mut self.data),
            std::mem::take(&mut self.stored),
        ));
    }
}

/// Chunks the first `size` bytes of `f` (objects go to `batch`); returns the chunks and the
/// bytes actually read, which is less than `size` when the file shrank meanwhile. `previous`
/// is the chunk list the path had before (empty when none); `same` are byte ranges known to
/// hold the previous version's bytes still (sorted, from `snapshot::compare`): a
/// previous chunk inside them is taken without reading it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn chunk_file(
    batch: &ObjectBatch<'_>,
    chunker: &ChunkerConfig,
    f: &File,
    size: u64,
    path: &Path,
    previous: &[Chunk],
    same: &[(u64, u64)],
    progress: &AtomicU64,
) -> Result<(Vec<Chunk>, u64)> {
    let mut chunks = Vec::new();
    if size <= u64::from(chunker.min) {
        let mut data = Vec::with_capacity(size as usize);
        // By offset, as everything here: `ZeroRun` moves the file's offset (SEEK_DATA).
        ReadAt {
            f,
            pos: 0,
            end: size,
        }
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
    if let Some(block) = sqlite_block(chunker, f, path)? {
        let fixed = Fixed {
            batch,
            f,
            path,
            previous,
            same,
            block,
            progress,
        };
        return chunk_fixed(fixed, size);
    }
    let mut bufs = Buffers::take();
    let (buf, stored) = (&mut bufs.data, &mut bufs.stored);
    let max = u64::from(chunker.max);
    // Sized once for the biggest chunk (and the byte `holds` reads past a stored one).
    buf.get(max as usize + 1);
    stored.get(max as usize + 1);
    let mut starts = Vec::with_capacity(previous.len());
    let mut prev_size = 0u64;
    for c in previous {
        starts.push(prev_size);
        prev_size += u64::from(c.len);
    }
    // Whether previous chunk `i` was cut from a full window, as a chunk there would be now.
    let eligible = |i: usize| starts[i] + max <= prev_size && starts[i] + max <= size;
    let mut zeros = ZeroRun::new(chunker);
    let mut pos = 0u64;
    let mut i = 0usize;
    while pos < size {
        // A hole is not read: its chunks are the zero chunk, over and over (see `ZeroRun`).
        pos = zeros.skip(batch, f, pos, size, &mut chunks, progress)?;
        if pos >= size {
            break;
        }
        while i < previous.len() && starts[i] < pos {
            i += 1;
        }
        // Reuse a run of previous chunks whose bytes are still theirs (compared with the stored
        // chunk when the page cache holds it, else hashed).
        let run_start = chunks.len();
        while i < previous.len() && starts[i] == pos && eligible(i) {
            let c = previous[i];
            if covered(same, pos, u64::from(c.len)) {
                chunks.push(c);
                pos += u64::from(c.len);
                progress.fetch_add(u64::from(c.len), Ordering::Relaxed);
                i += 1;
                continue;
            }
            let buf = buf.get(c.len as usize);
            match f.read_exact_at(buf, pos) {
                Ok(()) => {}
                // Shrank meanwhile: the caller sees the short total and reads again.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok((chunks, pos)),
                Err(e) => return Err(Error::io(path, e)),
            }
            if !batch.holds(&c.id, buf, stored.get(buf.len() + 1)) {
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
            if i < previous.len() && starts[i] == pos && eligible(i) || zeros.at_hole(f, pos, size)
            {
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

/// The chunks of a file's holes, computed without reading them.
///
/// FastCDC's cut after a position depends only on the bytes in its window (`max` bytes), so
/// from any cut followed by at least `max + 1` zero bytes the next chunk is always the same:
/// `len` zeros (its gear hash settles on a constant after 64 zeros; `len` is computed once).
/// Where `SEEK_DATA` says a hole of that length starts at a cut, that chunk is emitted again
/// and again instead of reading and hashing the hole: the same chunks, hence the same ids, as
/// reading the zeros would give.
struct ZeroRun {
    min: u32,
    avg: u32,
    max: u32,
    /// The zero chunk, once a hole has needed it.
    chunk: Option<Chunk>,
}

impl ZeroRun {
    fn new(chunker: &ChunkerConfig) -> ZeroRun {
        ZeroRun {
            min: chunker.min,
            avg: chunker.avg,
            max: chunker.max,
            chunk: None,
        }
    }

    /// True when `[pos, pos + max + 1)` lies in a hole of the file (all zeros, not stored).
    fn at_hole(&self, f: &File, pos: u64, size: u64) -> bool {
        let need = pos + u64::from(self.max) + 1;
        need <= size && crate::fs::sys::next_data(f, pos, size) >= need
    }

    /// From the cut `pos`, appends the zero chunk for as long as the hole there allows;
    /// the new position (a cut).
    fn skip(
        &mut self,
        batch: &ObjectBatch<'_>,
        f: &File,
        mut pos: u64,
        size: u64,
        chunks: &mut Vec<Chunk>,
        progress: &AtomicU64,
    ) -> Result<u64> {
        if !self.at_hole(f, pos, size) {
            return Ok(pos);
        }
        let chunk = match self.chunk {
            Some(c) => c,
            None => {
                let zeros = vec![0u8; self.max as usize];
                let len = fastcdc::v2020::FastCDC::new(&zeros, self.min, self.avg, self.max)
                    .next()
                    .map_or(self.max as usize, |c| c.length);
                let c = Chunk {
                    id: batch.ensure(&zeros[..len])?,
                    len: len as u32,
                };
                self.chunk = Some(c);
                c
            }
        };
        let data = crate::fs::sys::next_data(f, pos, size);
        while pos + u64::from(self.max) < data {
            chunks.push(chunk);
            pos += u64::from(chunk.len);
            progress.fetch_add(u64::from(chunk.len), Ordering::Relaxed);
        }
        Ok(pos)
    }
}

/// The block size a SQLite database (over `min` bytes: the caller checks) is cut into, or
/// `None` for any other file (or when the store does not cut databases apart).
fn sqlite_block(chunker: &ChunkerConfig, f: &File, path: &Path) -> Result<Option<u64>> {
    let Some(block) = chunker.sqlite_block else {
        return Ok(None);
    };
    let mut header = [0u8; 18];
    match f.read_exact_at(&mut header, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    }
    if &header[..16] != b"SQLite format 3\0" {
        return Ok(None);
    }
    // Big-endian at offset 16; 1 means 65536 (the file format's own rule).
    let page = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65536,
        p if p >= 512 && p.is_power_of_two() => u64::from(p),
        _ => return Ok(None),
    };
    Ok(Some(page.max(u64::from(block))))
}

/// Files cut into fixed blocks from this size on are cut by several threads at once, each
/// from its own part of the file: a big database is otherwise the one job left when every
/// other changed file is done (a 67 MB one took a core 110-150 ms while the other sat idle
/// on a 2-core VM: SHA-256 of every block, and the objects for its rewritten pages).
const FIXED_SPLIT: u64 = 32 << 20;

/// Cuts the first `size` bytes of `fixed.f` into `block`-byte chunks (the last one shorter),
/// reusing a previous chunk at the same offset and length whose bytes hash to its id, or
/// that lies in `same` (not read at all).
fn chunk_fixed(fixed: Fixed<'_, '_>, size: u64) -> Result<(Vec<Chunk>, u64)> {
    let block = fixed.block;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let parts = (size / (FIXED_SPLIT / 2)).clamp(1, threads.clamp(1, 8));
    if size < FIXED_SPLIT || parts < 2 {
        return fixed.cut(0, size);
    }
    let step = (size / parts).div_ceil(block) * block;
    let bounds: Vec<(u64, u64)> = (0..parts)
        .map(|k| (k * step, ((k + 1) * step).min(size)))
        .filter(|(a, b)| a < b)
        .collect();
    let results: Vec<Result<(Vec<Chunk>, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = bounds
            .iter()
            .map(|&(a, b)| s.spawn(move || fixed.cut(a, b)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::Invalid(
                        "internal: a chunking thread panicked".into(),
                    ))
                })
            })
            .collect()
    });
    let mut chunks = Vec::with_capacity(size.div_ceil(block) as usize);
    for (r, &(_, end)) in results.into_iter().zip(&bounds) {
        let (part, reached) = r?;
        chunks.extend(part);
        // Shrank meanwhile: what comes before the short part stands, the caller reads again.
        if reached < end {
            return Ok((chunks, reached));
        }
    }
    Ok((chunks, size))
}

/// What cutting a file into fixed blocks needs, shared by the threads that cut its parts.
#[derive(Clone, Copy)]
struct Fixed<'a, 'b> {
    batch: &'a ObjectBatch<'b>,
    f: &'a File,
    path: &'a Path,
    previous: &'a [Chunk],
    same: &'a [(u64, u64)],
    block: u64,
    progress: &'a AtomicU64,
}

impl Fixed<'_, '_> {
    /// Cuts `[start, end)` (`start` on a block boundary); returns its chunks and the offset
    /// reached, short of `end` when the file shrank meanwhile.
    fn cut(self, start: u64, end: u64) -> Result<(Vec<Chunk>, u64)> {
        let (same, block, progress) = (self.same, self.block, self.progress);
        // Read a few blocks per system call.
        let per_read = (1u64 << 20).max(block) / block * block;
        let mut bufs = Buffers::take();
        let buf = bufs.data.get(per_read as usize);
        let mut chunks = Vec::with_capacity((end - start).div_ceil(block) as usize);
        let mut prev = self.previous.iter().scan(0u64, |off, c| {
            let at = *off;
            *off += u64::from(c.len);
            Some((at, c))
        });
        let mut next_prev = prev.next();
        let mut pos = start;
        while pos < end {
            // Blocks known unchanged: taken unread.
            loop {
                while next_prev.is_some_and(|(at, _)| at < pos) {
                    next_prev = prev.next();
                }
                let len = block.min(end - pos);
                match next_prev {
                    Some((at, c))
                        if at == pos && u64::from(c.len) == len && covered(same, pos, len) =>
                    {
                        chunks.push(*c);
                        pos += len;
                        progress.fetch_add(len, Ordering::Relaxed);
                        if pos >= end {
                            return Ok((chunks, pos));
                        }
                    }
                    _ => break,
                }
            }
            // Read up to the next range known unchanged (at least one block).
            let next_same = same
                .iter()
                .map(|&(s, _)| s.div_ceil(block) * block)
                .find(|&s| s > pos)
                .unwrap_or(u64::MAX);
            let n = per_read.min(end - pos).min(next_same - pos) as usize;
            match self.f.read_exact_at(&mut buf[..n], pos) {
                Ok(()) => {}
                // Shrank meanwhile: the caller sees the short total and reads again.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok((chunks, pos)),
                Err(e) => return Err(Error::io(self.path, e)),
            }
            for data in buf[..n].chunks(block as usize) {
                while next_prev.is_some_and(|(at, _)| at < pos) {
                    next_prev = prev.next();
                }
                // Hashed, not compared with the stored block: for blocks this small, opening
                // each stored one costs as much as SHA-256 (measured with perf on a 67 MB database).
                let id = ObjectId::of(data);
                let known = next_prev.is_some_and(|(at, c)| at == pos && c.id == id);
                if !known {
                    self.batch.ensure_with_id(id, data)?;
                }
                chunks.push(Chunk {
                    id,
                    len: data.len() as u32,
                });
                pos += data.len() as u64;
                progress.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
        }
        Ok((chunks, pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::temp_store;
    use std::io::Write;

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

    /// FastCDC with `min`, 4x `min` on average, 16x at most (real stores use 64K/256K/1M),
    /// so test files make many chunks.
    fn small_chunks(min: u32, sqlite_block: Option<u32>) -> ChunkerConfig {
        ChunkerConfig {
            algorithm: "fastcdc-v2020".into(),
            min,
            avg: 4 * min,
            max: 16 * min,
            sqlite_block,
        }
    }

    fn chunks_of(
        batch: &ObjectBatch<'_>,
        cfg: &ChunkerConfig,
        dir: &Path,
        data: &[u8],
        previous: &[Chunk],
    ) -> Vec<Chunk> {
        chunks_with(batch, cfg, dir, data, previous, &[])
    }

    /// As `chunks_of`, with byte ranges said to be unchanged since `previous`.
    fn chunks_with(
        batch: &ObjectBatch<'_>,
        cfg: &ChunkerConfig,
        dir: &Path,
        data: &[u8],
        previous: &[Chunk],
        same: &[(u64, u64)],
    ) -> Vec<Chunk> {
        let p = dir.join("f");
        let mut f = File::create(&p).unwrap();
        f.write_all(data).unwrap();
        drop(f);
        let f = File::open(&p).unwrap();
        let progress = AtomicU64::new(0);
        let (chunks, total) = chunk_file(
            batch,
            cfg,
            &f,
            data.len() as u64,
            &p,
            previous,
            same,
            &progress,
        )
        .unwrap();
        assert_eq!(total, data.len() as u64);
        assert_eq!(progress.load(Ordering::Relaxed), data.len() as u64);
        assert_eq!(
            chunks.iter().map(|c| u64::from(c.len)).sum::<u64>(),
            data.len() as u64
        );
        chunks
    }

    /// Holes are chunked without being read, into exactly the chunks their zeros give when
    /// written out: with small chunks and the store's real sizes, holes at the start, the
    /// middle and the end, shorter and longer than `max`, and data that is itself zeros.
    #[test]
    fn holes_chunk_like_the_same_zeros_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = temp_store(dir.path());
        let batch = ObjectBatch::dry_run(&store);
        let real = ChunkerConfig {
            algorithm: "fastcdc-v2020".into(),
            min: 64 << 10,
            avg: 256 << 10,
            max: 1 << 20,
            sqlite_block: None,
        };
        for (cfg, unit) in [(small_chunks(4096, None), 4096u64), (real, 64 << 10)] {
            // (offset, data) in units; the rest is holes, and the file ends in one.
            let parts: [(u64, Vec<u8>); 4] = [
                (300, noise(31, 5 * unit as usize + 17)),
                (310, vec![0; 40 * unit as usize]),
                (351, noise(32, 3 * unit as usize)),
                (700, noise(33, 100)),
            ];
            let size = 1000 * unit;
            let sparse = dir.path().join("sparse");
            let f = File::create(&sparse).unwrap();
            let mut dense = vec![0u8; size as usize];
            for (at, data) in &parts {
                f.write_all_at(data, at * unit).unwrap();
                let at = (at * unit) as usize;
                dense[at..at + data.len()].copy_from_slice(data);
            }
            f.set_len(size).unwrap();
            drop(f);
            let f = File::open(&sparse).unwrap();
            assert!(
                crate::fs::sys::next_data(&f, 0, size) > 0,
                "no holes on this filesystem"
            );
            let progress = AtomicU64::new(0);
            let (holey, total) =
                chunk_file(&batch, &cfg, &f, size, &sparse, &[], &[], &progress).unwrap();
            assert_eq!(total, size);
            assert_eq!(progress.load(Ordering::Relaxed), size);
            let written = chunks_of(&batch, &cfg, dir.path(), &dense, &[]);
            assert_eq!(holey, written, "max {}", cfg.max);
            // And again with the dense chunks as the previous version.
            let (again, _) =
                chunk_file(&batch, &cfg, &f, size, &sparse, &written, &[], &progress).unwrap();
            assert_eq!(again, written);
        }
    }

    /// Every kind of edit gives exactly the chunks of a pass without a previous version,
    /// whether previous chunks are hashed (not in the store) or compared with stored objects.
    #[test]
    fn reusing_previous_chunks_gives_the_same_cuts_as_a_full_pass() {
        edits_give_the_cuts_of_a_full_pass(false);
        edits_give_the_cuts_of_a_full_pass(true);
    }

    fn edits_give_the_cuts_of_a_full_pass(stored: bool) {
        let dir = tempfile::tempdir().unwrap();
        let store = temp_store(dir.path());
        let batch = ObjectBatch::dry_run(&store);
        // Small sizes make many chunks per file; real stores use 64K/256K/1M.
        let cfg = small_chunks(4096, None);
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
        if stored {
            // Every version's chunks in the store (and in the page cache).
            let writer = ObjectBatch::new(&store);
            for data in std::iter::once(&base).chain(edits.iter().map(|(_, d)| d)) {
                chunks_of(&writer, &cfg, dir.path(), data, &[]);
            }
            writer.commit().unwrap();
        }
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
        let compared = batch.compared_bytes();
        if stored && crate::store::nowait_reads_supported(dir.path()) {
            assert!(compared > 10 << 20, "only {compared} bytes compared");
        } else if !stored {
            assert_eq!(compared, 0);
        }
    }

    /// Ranges known unchanged (from snapshots) are taken unread: true ones give the chunks of
    /// a full pass; false ones show that the bytes there were not looked at.
    #[test]
    fn ranges_known_unchanged_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = temp_store(dir.path());
        let batch = ObjectBatch::dry_run(&store);
        for cfg in [small_chunks(4096, None), small_chunks(4096, Some(16384))] {
            let mut base = noise(21, 2 << 20);
            base[..16].copy_from_slice(b"SQLite format 3\0");
            base[16..18].copy_from_slice(&4096u16.to_be_bytes());
            let prev = chunks_of(&batch, &cfg, dir.path(), &base, &[]);
            // Appended, and one block rewritten: the ranges around it are unchanged.
            let mut data = base.clone();
            data[1 << 20..(1 << 20) + 4096].copy_from_slice(&noise(22, 4096));
            data.extend(noise(23, 100_000));
            let same = [(0, 1 << 20), ((1 << 20) + 4096, base.len() as u64 & !4095)];
            let full = chunks_of(&batch, &cfg, dir.path(), &data, &[]);
            let inc = chunks_with(&batch, &cfg, dir.path(), &data, &prev, &same);
            assert_eq!(inc, full, "sqlite blocks: {:?}", cfg.sqlite_block);
            // Every byte said unchanged although half of them are not: the previous chunks
            // there are taken as they are, so those bytes were never read.
            let mut other = base.clone();
            other[..1 << 20].copy_from_slice(&noise(24, 1 << 20));
            let lied = chunks_with(&batch, &cfg, dir.path(), &other, &prev, &[(0, 2 << 20)]);
            let truth = chunks_of(&batch, &cfg, dir.path(), &other, &prev);
            assert_eq!(lied[..prev.len() / 4], prev[..prev.len() / 4]);
            assert_ne!(lied, truth);
        }
    }

    /// A big database is cut by several threads, each from its part of the file: the same
    /// blocks as one pass, with the previous version's reused.
    #[test]
    fn a_big_database_is_cut_in_parts_like_one_pass() {
        let dir = tempfile::tempdir().unwrap();
        let store = temp_store(dir.path());
        let batch = ObjectBatch::dry_run(&store);
        let cfg = small_chunks(4096, Some(16384));
        let mut base = noise(31, (FIXED_SPLIT + (3 << 20) + 5000) as usize);
        base[..16].copy_from_slice(b"SQLite format 3\0");
        base[16..18].copy_from_slice(&4096u16.to_be_bytes());
        let blocks = |d: &[u8]| -> Vec<Chunk> {
            d.chunks(16384)
                .map(|b| Chunk {
                    id: ObjectId::of(b),
                    len: b.len() as u32,
                })
                .collect()
        };
        let prev = chunks_of(&batch, &cfg, dir.path(), &base, &[]);
        assert_eq!(prev, blocks(&base));
        let mut edited = base.clone();
        for page in [5usize, 4000, 4479, 4480, 8900] {
            edited[page * 4096..(page + 1) * 4096].copy_from_slice(&noise(page as u64, 4096));
        }
        assert_eq!(
            chunks_of(&batch, &cfg, dir.path(), &edited, &prev),
            blocks(&edited)
        );
    }

    /// A SQLite database is cut into page-aligned blocks; rewriting scattered pages changes
    /// only their blocks, and any other file (or a bad page size) is chunked as usual.
    #[test]
    fn sqlite_databases_are_cut_into_page_aligned_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let store = temp_store(dir.path());
        let batch = ObjectBatch::dry_run(&store);
        let cfg = small_chunks(4096, Some(16384));
        let db = |page: u16, len: usize, seed: u64| {
            let mut d = noise(seed, len);
            d[..16].copy_from_slice(b"SQLite format 3\0");
            d[16..18].copy_from_slice(&page.to_be_bytes());
            d
        };
        let base = db(4096, (1 << 20) + 5000, 3);
        let prev = chunks_of(&batch, &cfg, dir.path(), &base, &[]);
        assert_eq!(prev.len(), 65);
        assert!(prev[..64].iter().all(|c| c.len == 16384));
        assert_eq!(prev[64].len, 5000);
        // Three scattered pages rewritten: three blocks change, the rest are reused.
        let mut edited = base.clone();
        for page in [3usize, 100, 250] {
            edited[page * 4096..(page + 1) * 4096].copy_from_slice(&noise(page as u64, 4096));
        }
        let full = chunks_of(&batch, &cfg, dir.path(), &edited, &[]);
        let inc = chunks_of(&batch, &cfg, dir.path(), &edited, &prev);
        assert_eq!(inc, full);
        let changed: Vec<usize> = (0..prev.len()).filter(|&i| inc[i] != prev[i]).collect();
        assert_eq!(changed, [0, 25, 62]);
        // Grown by a page and shrunk back: blocks line up with the offsets.
        let mut grown = base.clone();
        grown.extend(noise(9, 4096));
        let g = chunks_of(&batch, &cfg, dir.path(), &grown, &prev);
        assert_eq!(g[..64], prev[..64]);
        assert_eq!(chunks_of(&batch, &cfg, dir.path(), &base, &g), prev);
        // 64 KiB pages (stored as 1) make 64 KiB blocks.
        let big_pages = chunks_of(&batch, &cfg, dir.path(), &db(1, 1 << 20, 4), &[]);
        assert!(big_pages.iter().all(|c| c.len == 65536), "{big_pages:?}");
        // No valid page size, or another file: content-defined chunks (of varied lengths).
        for other in [db(1000, 1 << 20, 5), noise(5, 1 << 20)] {
            let c = chunks_of(&batch, &cfg, dir.path(), &other, &[]);
            assert!(
                c.iter().any(|c| c.len != c.len.next_power_of_two()),
                "{c:?}"
            );
        }
        // Stores made before blocks existed keep chunking databases with FastCDC.
        let old = ChunkerConfig {
            sqlite_block: None,
            ..cfg
        };
        let c = chunks_of(&batch, &old, dir.path(), &base, &[]);
        assert_ne!(c, prev);
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
            let cfg = small_chunks(2048, None);
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
