//! Reflink snapshots of a workspace's changed files, so a checkpoint reads only the parts of
//! them that changed, on filesystems that share blocks between files (XFS, btrfs).
//!
//! Kernel overlayfs tells which upper files changed, not which bytes. Without more, an
//! agent's 70 MB transcript that grew by a few lines is read whole at every checkpoint (the
//! previous version's chunks are reused, but only after their bytes are compared). Where the
//! upper layer is on XFS or btrfs, a checkpoint instead clones each big changed file
//! (`FICLONE`: no data copied, the clone shares the file's blocks) and reads the clone:
//! - the clone is an instant of the file, even while a writer goes on (the filesystem takes
//!   the file's locks for the clone), so no byte of it is torn or half-written;
//! - the clone of the last checkpoint is kept (`upper/B/.snapshots-ROOT/`, named in the stat
//!   cache beside the chunks it holds). Both clones are immutable, and a shared block is never
//!   written in place (a write to it gets a new block), so a block that both clones map at the
//!   same offset holds the same bytes in both. Those ranges are known unchanged without being
//!   read (`FS_IOC_FIEMAP` of both clones), and the previous chunks that lie in them are
//!   reused as they are;
//! - whatever else the file holds (appended lines, rewritten database pages) is read from the
//!   new clone and chunked as usual.
//!
//! A clone costs no data, only the blocks the live file rewrites afterwards (kept until the
//! next checkpoint replaces the clone), and it flushes the file's dirty pages first. Each
//! rewritten block moves (that is what keeps the clone intact), so a file rewritten in many
//! scattered places fragments, and clones and extent maps cost per extent: such files are
//! read whole after one comparison ([`decline`]). Files under `SNAPSHOT_MIN` are read whole
//! as before.
//!
//! A clone is a new inode, so none of its pages are in the page cache: reading it reads the
//! disk (a 1 GiB log read whole through its first clone: 2.3-2.6 s from an XFS image on a
//! 2-core VM, against 0.17 s from the page cache). So where it can, a checkpoint reads the live
//! file instead, under a read lease ([`Lease`]) taken before the clone and held until the read
//! is done: the kernel grants it only while no process has the file open for writing (or
//! mapped writable), and makes an open for writing (or a truncation) wait until it is
//! released, so the live file holds the clone's bytes all along. A file a writer holds open
//! is read through its clone. `status`, which keeps no clone, clones no file that has no
//! previous clone to compare with.
//!
//! Other filesystems (ext4, tmpfs) have no shared blocks: nothing changes there. Everything
//! here is a cache: a missing or unreadable clone only means reading the file.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::fs::safe::Dir;
use crate::fs::sys::{Extent, FIEMAP_EXTENT_SHARED};

/// Files smaller than this are read whole (a clone and two extent maps cost more).
pub(crate) const SNAPSHOT_MIN: u64 = 1 << 20;

/// Filesystems whose clones share blocks and whose extent maps show it (statfs `f_type`).
const XFS_SUPER_MAGIC: i64 = 0x5846_5342;
const BTRFS_SUPER_MAGIC: i64 = 0x9123_683e;

/// The snapshots of one root's upper layer.
pub(crate) struct Snapshots {
    dir: PathBuf,
    /// Whether new clones are kept (a checkpoint) or removed once read (`status`).
    keep: bool,
    /// Cleared at the first clone the filesystem refuses (no reflink support).
    enabled: AtomicBool,
    /// Bytes of changed files known unchanged from the extent maps, not read.
    skipped: AtomicU64,
}

/// A clone just made: the file to read, and its name in the snapshot directory. Removed on
/// drop unless kept by [`Snapshot::keep`].
pub(crate) struct Snapshot {
    pub(crate) file: File,
    name: String,
    path: PathBuf,
    kept: bool,
}

impl Snapshot {
    /// Keeps the clone for the next checkpoint; returns its name.
    pub(crate) fn keep(mut self) -> String {
        self.kept = true;
        std::mem::take(&mut self.name)
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if !self.kept {
            match fs::remove_file(&self.path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => log::warn!("could not remove snapshot {}: {e}", self.path.display()),
            }
        }
    }
}

impl Snapshots {
    /// The snapshots of the upper layer held as `upper` (`upper/B/ROOT`), kept in `dir`
    /// (`Store::snapshot_dir`: `upper/B/.snapshots-ROOT/`, the store's, beside the agent's
    /// tree, not in it); `None` unless that filesystem is XFS or btrfs. Clones are made from
    /// files the reading engine opened beneath `upper` (see `safe`), never by path.
    pub(crate) fn for_upper(upper: &Dir, dir: PathBuf, keep: bool) -> Option<Snapshots> {
        // The field's type differs between architectures; the cast only widens it.
        #[allow(clippy::unnecessary_cast)]
        let fs_type = rustix::fs::fstatfs(upper).ok()?.f_type as i64;
        if fs_type != XFS_SUPER_MAGIC && fs_type != BTRFS_SUPER_MAGIC {
            return None;
        }
        Some(Snapshots {
            dir,
            keep,
            enabled: AtomicBool::new(true),
            skipped: AtomicU64::new(0),
        })
    }

    /// Bytes the extent maps showed unchanged, so far.
    pub(crate) fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    pub(crate) fn add_skipped(&self, n: u64) {
        self.skipped.fetch_add(n, Ordering::Relaxed);
    }

    /// Clones the open file `live` into a new snapshot; `None` when that fails (the file is
    /// then read as on any filesystem). A filesystem that cannot clone at all (no reflink
    /// support) turns snapshots off for the rest of the merge.
    pub(crate) fn take(&self, live: &File) -> Option<Snapshot> {
        if !self.enabled.load(Ordering::Relaxed) {
            return None;
        }
        let name = unique_name();
        let path = self.dir.join(&name);
        let opened = fs::create_dir_all(&self.dir).and_then(|()| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
        });
        let file = match opened {
            Ok(f) => f,
            Err(e) => {
                log::debug!("no snapshot {}: {e}", path.display());
                return None;
            }
        };
        let snap = Snapshot {
            file,
            name,
            path,
            kept: false,
        };
        match rustix::fs::ioctl_ficlone(&snap.file, live) {
            Ok(()) => Some(snap),
            Err(e) => {
                let e = io::Error::from(e);
                log::debug!("no snapshot {}: {e}", snap.path.display());
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EXDEV | libc::EINVAL | libc::ENOTTY)
                ) {
                    self.enabled.store(false, Ordering::Relaxed);
                }
                None
            }
        }
    }

    /// Whether new snapshots outlive the merge.
    pub(crate) fn keeps(&self) -> bool {
        self.keep
    }

    /// The snapshot `name` (a stat cache entry's), if it is still there.
    pub(crate) fn open(&self, name: &str) -> Option<File> {
        if name.is_empty() || name.contains('/') {
            return None;
        }
        File::open(self.dir.join(name)).ok()
    }
}

fn unique_name() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    format!(
        "{:x}-{}-{}",
        crate::text::time::now_ns(),
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// The snapshots a stat cache names: those its checkpoint keeps for the next one.
pub(crate) fn named_by(cache: &crate::store::statcache::StatCache) -> HashSet<&str> {
    cache
        .values()
        .filter_map(|c| c.snapshot.as_deref())
        .filter(|n| *n != DECLINED)
        .collect()
}

/// The snapshots in the snapshot directory `dir` (`Store::snapshot_dir`) that `keep` does not
/// name.
pub(crate) fn unnamed(dir: &Path, keep: &HashSet<&str>) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| !e.file_name().to_str().is_some_and(|n| keep.contains(n)))
        .map(|e| e.path())
        .collect()
}

/// Removes the snapshots in the snapshot directory `dir` that `keep` does not name (those of files
/// that changed again or went away, and those of a checkpoint that failed). Best effort: a
/// snapshot left behind only takes room until the next checkpoint (or `gc`).
pub(crate) fn sweep(dir: &Path, keep: &HashSet<&str>) {
    for p in unnamed(dir, keep) {
        if let Err(err) = fs::remove_file(&p) {
            log::warn!("could not remove snapshot {}: {err}", p.display());
        }
    }
}

/// A read lease on a changed file (see the module doc), released on drop.
pub(crate) struct Lease<'a> {
    file: &'a File,
    since: std::time::Instant,
}

impl Lease<'_> {
    /// Takes a read lease on `f` (open read-only); `None` while a process has it open for
    /// writing or mapped writable (or leases are not supported).
    pub(crate) fn take(f: &File) -> Option<Lease<'_>> {
        crate::fs::sys::read_lease(f).ok()?;
        Some(Lease {
            file: f,
            since: std::time::Instant::now(),
        })
    }

    /// Whether the lease surely stood until now: an opener waiting on it is let through after
    /// `/proc/sys/fs/lease-break-time` (45 s by default) anyway.
    pub(crate) fn held_throughout(&self) -> bool {
        let limit = std::fs::read_to_string("/proc/sys/fs/lease-break-time")
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .unwrap_or(45);
        self.since.elapsed() < std::time::Duration::from_secs(limit) / 2
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Err(e) = crate::fs::sys::release_lease(self.file) {
            log::warn!("could not release a read lease: {e}");
        }
    }
}

/// What comparing a new snapshot with the previous one found.
pub(crate) struct Comparison {
    /// The byte ranges `[start, end)` where both map the same blocks at the same offsets, so
    /// hold the same bytes; sorted, within both files' sizes. Empty without a previous
    /// snapshot, or when an extent map cannot be read.
    pub(crate) same: Vec<(u64, u64)>,
    /// Extents of the new snapshot (`None` when its map cannot be read).
    pub(crate) extents: Option<usize>,
}

/// Compares the new snapshot `new` with the previous one, `old` (if any).
pub(crate) fn compare(old: Option<&File>, new: &File) -> Comparison {
    let b = match crate::fs::sys::fiemap(new) {
        Ok(b) => b,
        Err(e) => {
            log::debug!("no extent map: {e}");
            return Comparison {
                same: Vec::new(),
                extents: None,
            };
        }
    };
    let same = old.map_or_else(Vec::new, |old| {
        let maps = (|| -> io::Result<_> {
            let limit = old.metadata()?.len().min(new.metadata()?.len());
            Ok((crate::fs::sys::fiemap(old)?, limit))
        })();
        match maps {
            Ok((a, limit)) => same_blocks(&a, &b, limit),
            Err(e) => {
                log::debug!("no extent map: {e}");
                Vec::new()
            }
        }
    });
    Comparison {
        same,
        extents: Some(b.len()),
    }
}

/// Whether a file is better read whole than through snapshots from now on. A clone and an
/// extent map cost about 30 us per extent (XFS on a 2-core VM: 70 ms for a 67 MB SQLite
/// file in 3,117 extents), against about 0.4 ns per byte for reading and comparing, so they
/// cost as much as reading once extents average about 75 KB. A file whose blocks are rewritten
/// in many scattered places (a database: each rewritten block moves, so every snapshot leaves
/// it in more pieces) stops being snapshotted after one comparison, and so does one in extents
/// averaging under 64 KiB. An appended log gains one or two extents per checkpoint (its
/// rewritten last block and the new run) while it grows by the turn's lines, so it stays
/// well above that.
pub(crate) fn decline(c: &Comparison, size: u64) -> bool {
    let scattered = c.same.len() as u64 > (size >> 20).max(16);
    let fragmented = c.extents.is_none_or(|n| n as u64 > (size >> 16).max(64));
    scattered || fragmented
}

/// The stat cache's mark for a file that [`decline`] ruled out (never a snapshot's name).
pub(crate) const DECLINED: &str = "-";

/// Flags under which an extent's offset says nothing about its bytes: unknown or delayed
/// location, encoded (compressed, encrypted) or inline data, unwritten (reads as zeros).
const UNRELIABLE: u32 = 0x2 | 0x4 | 0x8 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800;

/// The overlap of two extent maps where both map the same physical bytes at the same logical
/// offsets and both say the blocks are shared; clipped to `limit`.
fn same_blocks(a: &[Extent], b: &[Extent], limit: u64) -> Vec<(u64, u64)> {
    let usable = |e: &&Extent| e.flags & UNRELIABLE == 0 && e.flags & FIEMAP_EXTENT_SHARED != 0;
    let a: Vec<&Extent> = a.iter().filter(usable).collect();
    let b: Vec<&Extent> = b.iter().filter(usable).collect();
    let mut out: Vec<(u64, u64)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        let start = x.logical.max(y.logical);
        let end = (x.logical + x.length).min(y.logical + y.length).min(limit);
        // Same physical offset for the same logical one: x.physical - x.logical equals
        // y.physical - y.logical (compared without underflow).
        if start < end && x.physical.wrapping_sub(x.logical) == y.physical.wrapping_sub(y.logical) {
            match out.last_mut() {
                Some(last) if last.1 == start => last.1 = end,
                _ => out.push((start, end)),
            }
        }
        if x.logical + x.length <= y.logical + y.length {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// Whether `[start, start + len)` lies inside one of `ranges` (sorted, disjoint, merged).
pub(crate) fn covered(ranges: &[(u64, u64)], start: u64, len: u64) -> bool {
    let i = ranges.partition_point(|r| r.1 <= start);
    ranges
        .get(i)
        .is_some_and(|&(s, e)| s <= start && start + len <= e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::sys::FIEMAP_EXTENT_LAST;

    fn ext(logical: u64, physical: u64, length: u64, flags: u32) -> Extent {
        Extent {
            logical,
            physical,
            length,
            flags,
        }
    }

    #[test]
    fn only_shared_blocks_at_the_same_offsets_count() {
        let s = FIEMAP_EXTENT_SHARED;
        // The old clone: one extent. The new one: a block rewritten at 4096 (new place), an
        // append at the end, and the rest still shared.
        let old = [ext(0, 1 << 20, 64 << 10, s)];
        let new = [
            ext(0, 1 << 20, 4096, s),
            ext(4096, 9 << 20, 4096, s),
            ext(8192, (1 << 20) + 8192, (64 << 10) - 8192, s),
            ext(64 << 10, 10 << 20, 4096, s | FIEMAP_EXTENT_LAST),
        ];
        let r = same_blocks(&old, &new, (64 << 10) + 100);
        assert_eq!(r, [(0, 4096), (8192, 64 << 10)]);
        assert!(covered(&r, 0, 4096));
        assert!(!covered(&r, 0, 4097));
        assert!(covered(&r, 8192, 1000));
        assert!(!covered(&r, 4096, 1));
        assert!(!covered(&r, (64 << 10) - 1, 2));
        // Not shared, unwritten or delayed: nothing is known.
        for flags in [0, s | 0x800, s | 0x4] {
            let old = [ext(0, 1 << 20, 8192, flags)];
            assert!(same_blocks(&old, &old, 8192).is_empty(), "{flags:#x}");
        }
        // The same blocks at another offset (a range shifted by collapse or insert) are not
        // the same bytes at the same place.
        let moved = [ext(4096, 1 << 20, 8192, s)];
        assert!(same_blocks(&old, &moved, 1 << 20).is_empty());
        // Clipped to the shorter file.
        assert_eq!(same_blocks(&old, &old, 100), [(0, 100)]);
    }

    #[test]
    fn files_rewritten_in_many_places_or_in_many_pieces_are_declined() {
        let c = |ranges: usize, extents: Option<usize>| Comparison {
            same: (0..ranges as u64)
                .map(|i| (i * 8192, i * 8192 + 4096))
                .collect(),
            extents,
        };
        let mib = 1 << 20;
        // An appended log: one unchanged range, a few extents.
        assert!(!decline(&c(1, Some(3)), 70 * mib));
        // A database with 200 pages rewritten here and there.
        assert!(decline(&c(200, Some(400)), 67 * mib));
        // In 3,000 pieces (a database that was snapshotted through many rewrites); a log
        // appended over many turns, in pieces of 128 KiB on average, is not.
        assert!(decline(&c(1, Some(3000)), 67 * mib));
        assert!(!decline(&c(1, Some(536)), 67 * mib));
        // Small files get some slack; no extent map at all is declined.
        assert!(!decline(&c(16, Some(64)), 2 * mib));
        assert!(decline(&c(17, Some(3)), 2 * mib));
        assert!(decline(&c(1, None), 2 * mib));
    }
}
