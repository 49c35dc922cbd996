//! Which opens of big files pass through to a backing file (a materialized copy) and which
//! are served from the page cache: plain bookkeeping that the FUSE adapter asks before it
//! replies to OPEN and updates on RELEASE. Nothing here knows fuser's types; the backing id
//! the kernel hands out is the type parameter `B`.
//!
//! The rules, and the kernel behaviour they follow from:
//! - files below [`crate::view::materialize::PASSTHROUGH_MIN_BYTES`] (one chunk is the whole file) and
//!   files bigger than the copy budget are opened with handle 0 and `KEEP_CACHE`, untracked;
//! - a mount without passthrough answers OPEN with ENOSYS: the kernel counts that as success
//!   and stops sending OPEN and RELEASE for the rest of the mount;
//! - every passthrough open of one inode must name the same backing id while any of them is
//!   open, so later opens share the first one's, and it is dropped with the last;
//! - one inode open both through the page cache and by passthrough is ETXTBSY, so while a
//!   page-cache open of an inode is tracked, its new opens stay in page-cache mode;
//! - a copy that fails on a corrupt or missing object fails the open (EIO, ENOENT) as a read
//!   of it would; any other failure (no room for the copy) only costs that open passthrough;
//! - the kernel refuses every backing file alike (EPERM: not root; ELOOP: the store sits on a
//!   stacked filesystem), so the first refusal turns passthrough off for the mount.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::{Ino, View};
use crate::error::Error;

/// How an OPEN of a checked regular file is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// ENOSYS: this mount has no passthrough, so the kernel opens every file itself.
    NoOpen,
    /// Handle 0 with `KEEP_CACHE`, not tracked: the page cache serves it again without a READ.
    Small,
    /// A big file: ask [`Opens::plan`].
    Big,
}

/// What to do with an OPEN of a big file. The handle `fh` is new and non-zero.
#[derive(Debug)]
pub enum OpenPlan<B> {
    /// Reply passthrough to the backing id the inode's other opens use; registered.
    Shared { fh: u64, backing: Arc<B> },
    /// Reply a page-cache open (`KEEP_CACHE`); registered.
    Cached { fh: u64 },
    /// Materialize the file and have the kernel register it as a backing file, then
    /// [`Opens::attach`] the id. On failure: the error, if [`fails_open`]; else
    /// [`Opens::open_cached`], or [`Opens::refused`] when the kernel refused the file.
    Materialize { fh: u64 },
}

/// Whether a failed copy fails the open (a corrupt or missing object, as a read would fail)
/// rather than leaving the file in the page cache (no room for the copy...).
pub fn fails_open(e: &Error) -> bool {
    matches!(e, Error::Corrupt(_) | Error::NotFound(_))
}

/// Open handles of big files, and whether this mount passes files through at all.
pub struct Opens<B> {
    /// The kernel accepted FUSE_PASSTHROUGH and has refused no backing file so far.
    enabled: AtomicBool,
    table: Mutex<Table<B>>,
    next_fh: AtomicU64,
}

/// The tracked handles; see the rules in the module doc.
struct Table<B> {
    /// The backing id of each inode with passthrough opens (live while any handle holds it).
    backing: HashMap<Ino, Weak<B>>,
    /// What each handle holds: its inode and backing id (None: a page-cache open).
    handles: HashMap<u64, (Ino, Option<Arc<B>>)>,
    /// Page-cache opens per inode.
    cached: HashMap<Ino, u32>,
}

impl<B> Table<B> {
    fn open_cached(&mut self, ino: Ino, fh: u64) {
        *self.cached.entry(ino).or_default() += 1;
        self.handles.insert(fh, (ino, None));
    }
}

impl<B> Default for Opens<B> {
    fn default() -> Self {
        Opens {
            enabled: AtomicBool::new(false),
            table: Mutex::new(Table {
                backing: HashMap::new(),
                handles: HashMap::new(),
                cached: HashMap::new(),
            }),
            next_fh: AtomicU64::new(1),
        }
    }
}

impl<B> Opens<B> {
    /// No handles, passthrough off until [`Opens::enable`].
    pub fn new() -> Opens<B> {
        Opens::default()
    }

    fn table(&self) -> MutexGuard<'_, Table<B>> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Passthrough was negotiated at INIT.
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// Whether big files go through passthrough: negotiated at INIT, dropped for good when
    /// the kernel refuses a backing file.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// How to answer an OPEN of a file of `size` bytes of `view`.
    pub fn mode(&self, view: &View, size: u64) -> OpenMode {
        if !self.enabled() {
            OpenMode::NoOpen
        } else if view.wants_copy(size) {
            OpenMode::Big
        } else {
            OpenMode::Small
        }
    }

    /// Plans an open of big file `ino` (see [`OpenPlan`]).
    pub fn plan(&self, ino: Ino) -> OpenPlan<B> {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let mut t = self.table();
        if let Some(backing) = t.backing.get(&ino).and_then(Weak::upgrade) {
            t.handles.insert(fh, (ino, Some(backing.clone())));
            return OpenPlan::Shared { fh, backing };
        }
        if t.cached.get(&ino).copied().unwrap_or(0) > 0 || !self.enabled() {
            t.open_cached(ino, fh);
            return OpenPlan::Cached { fh };
        }
        OpenPlan::Materialize { fh }
    }

    /// Registers a [`OpenPlan::Materialize`] open as a page-cache one (its copy could not be
    /// made).
    pub fn open_cached(&self, ino: Ino, fh: u64) {
        self.table().open_cached(ino, fh);
    }

    /// The kernel refused the backing file of a [`OpenPlan::Materialize`] open: it will refuse
    /// every one, so passthrough is off from now on, and this open is a page-cache one.
    pub fn refused(&self, ino: Ino, fh: u64) {
        self.enabled.store(false, Ordering::Relaxed);
        self.open_cached(ino, fh);
    }

    /// Registers a [`OpenPlan::Materialize`] open with the backing id the kernel gave, and
    /// returns the id to reply with: another open of `ino` may have registered one meanwhile,
    /// and all must share it (`backing` is then dropped).
    pub fn attach(&self, ino: Ino, fh: u64, backing: B) -> Arc<B> {
        let backing = Arc::new(backing);
        let mut t = self.table();
        let backing = match t.backing.get(&ino).and_then(Weak::upgrade) {
            Some(theirs) => theirs,
            None => {
                t.backing.insert(ino, Arc::downgrade(&backing));
                backing
            }
        };
        t.handles.insert(fh, (ino, Some(backing.clone())));
        backing
    }

    /// The kernel released handle `fh` (0 and unknown handles are not tracked: no-op).
    pub fn release(&self, fh: u64) {
        let mut t = self.table();
        match t.handles.remove(&fh) {
            Some((ino, None)) => {
                if let Some(n) = t.cached.get_mut(&ino) {
                    *n -= 1;
                    if *n == 0 {
                        t.cached.remove(&ino);
                    }
                }
            }
            Some((ino, Some(backing))) => {
                drop(backing);
                if t.backing.get(&ino).is_some_and(|w| w.strong_count() == 0) {
                    t.backing.remove(&ino);
                }
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{materialize, Namespace, ViewOptions};
    use std::sync::atomic::AtomicUsize;

    /// A backing id that counts its drops (the kernel closes a backing file when its id drops).
    #[derive(Debug)]
    struct Id(u32, Arc<AtomicUsize>);

    impl Drop for Id {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn enabled() -> Opens<Id> {
        let o = Opens::new();
        o.enable();
        o
    }

    fn fh_of<B>(p: &OpenPlan<B>) -> u64 {
        match p {
            OpenPlan::Shared { fh, .. }
            | OpenPlan::Cached { fh }
            | OpenPlan::Materialize { fh } => *fh,
        }
    }

    /// Opens `ino` by passthrough with a new id when it has to be materialized.
    fn open_passthrough(o: &Opens<Id>, ino: Ino, id: u32, drops: &Arc<AtomicUsize>) -> u64 {
        match o.plan(ino) {
            OpenPlan::Materialize { fh } => {
                o.attach(ino, fh, Id(id, drops.clone()));
                fh
            }
            OpenPlan::Shared { fh, .. } => fh,
            OpenPlan::Cached { .. } => panic!("cached open of {ino}"),
        }
    }

    fn is_empty(o: &Opens<Id>) -> bool {
        let t = o.table();
        t.backing.is_empty() && t.handles.is_empty() && t.cached.is_empty()
    }

    #[test]
    fn mode_follows_passthrough_and_the_big_file_threshold() {
        let dir = tempfile::tempdir().unwrap();
        let budget = 8 * materialize::PASSTHROUGH_MIN_BYTES;
        let view = View::new(
            crate::store::temp_store(dir.path()),
            Namespace::Browse,
            &ViewOptions {
                file_cache_bytes: budget,
                ..ViewOptions::default()
            },
        )
        .unwrap();
        let o: Opens<Id> = Opens::new();
        let min = materialize::PASSTHROUGH_MIN_BYTES;
        for size in [0, min, budget] {
            assert_eq!(o.mode(&view, size), OpenMode::NoOpen, "before INIT: {size}");
        }
        o.enable();
        let cases = [
            (0, OpenMode::Small),
            (min - 1, OpenMode::Small),
            (min, OpenMode::Big),
            (budget, OpenMode::Big),
            (budget + 1, OpenMode::Small),
        ];
        for (size, want) in cases {
            assert_eq!(o.mode(&view, size), want, "{size} bytes");
        }
        assert!(view.passthrough_wanted());
    }

    #[test]
    fn no_passthrough_without_a_budget_for_one_big_file() {
        for budget in [0, materialize::PASSTHROUGH_MIN_BYTES - 1] {
            let dir = tempfile::tempdir().unwrap();
            let view = View::new(
                crate::store::temp_store(dir.path()),
                Namespace::Browse,
                &ViewOptions {
                    file_cache_bytes: budget,
                    ..ViewOptions::default()
                },
            )
            .unwrap();
            assert!(!view.passthrough_wanted(), "budget {budget}");
            let o: Opens<Id> = enabled();
            let size = materialize::PASSTHROUGH_MIN_BYTES;
            assert_eq!(o.mode(&view, size), OpenMode::Small);
        }
    }

    #[test]
    fn opens_of_one_inode_share_one_backing_until_the_last_release() {
        let o = enabled();
        let drops = Arc::new(AtomicUsize::new(0));
        let OpenPlan::Materialize { fh: a } = o.plan(7) else {
            panic!("first open materializes");
        };
        let first = o.attach(7, a, Id(1, drops.clone()));
        let OpenPlan::Shared { fh: b, backing } = o.plan(7) else {
            panic!("second open shares");
        };
        assert!(Arc::ptr_eq(&first, &backing));
        assert_ne!(a, b);
        drop((first, backing));
        // Another inode gets its own.
        let c = open_passthrough(&o, 8, 2, &drops);
        o.release(a);
        assert_eq!(drops.load(Ordering::Relaxed), 0, "b still holds it");
        let OpenPlan::Shared { fh: d, .. } = o.plan(7) else {
            panic!("shared while b is open");
        };
        o.release(b);
        o.release(d);
        assert_eq!(
            drops.load(Ordering::Relaxed),
            1,
            "closed with its last open"
        );
        assert!(!o.table().backing.contains_key(&7));
        assert!(matches!(o.plan(7), OpenPlan::Materialize { .. }));
        o.release(c);
        assert_eq!(drops.load(Ordering::Relaxed), 2);
        assert!(is_empty(&o));
    }

    #[test]
    fn page_cache_open_keeps_later_opens_cached_until_closed() {
        let o = enabled();
        let OpenPlan::Materialize { fh: a } = o.plan(3) else {
            panic!("first open materializes");
        };
        // No room for the copy: this open reads through the page cache.
        o.open_cached(3, a);
        // Passthrough now would be ETXTBSY: the next opens stay cached, while one is open.
        let OpenPlan::Cached { fh: b } = o.plan(3) else {
            panic!("cached while a page-cache open is held");
        };
        o.release(a);
        let OpenPlan::Cached { fh: c } = o.plan(3) else {
            panic!("cached while b is open");
        };
        o.release(b);
        o.release(c);
        assert!(is_empty(&o));
        assert!(matches!(o.plan(3), OpenPlan::Materialize { .. }));
    }

    #[test]
    fn only_bad_objects_fail_the_open() {
        let enospc = || Error::io_op("copy", std::io::Error::from_raw_os_error(libc::ENOSPC));
        let cases = [
            (Error::Corrupt("object".into()), true, libc::EIO),
            (Error::NotFound("object".into()), true, libc::ENOENT),
            (enospc(), false, libc::ENOSPC),
            (Error::Invalid("x".into()), false, libc::EINVAL),
        ];
        for (e, fails, errno) in cases {
            assert_eq!(fails_open(&e), fails, "{e}");
            assert_eq!(e.errno(), errno, "{e}");
        }
    }

    #[test]
    fn a_refused_backing_file_turns_passthrough_off() {
        let o = enabled();
        let drops = Arc::new(AtomicUsize::new(0));
        let held = open_passthrough(&o, 1, 1, &drops);
        let OpenPlan::Materialize { fh } = o.plan(2) else {
            panic!("materializes");
        };
        o.refused(2, fh);
        assert!(!o.enabled());
        assert_eq!(o.table().cached.get(&2), Some(&1));
        assert!(matches!(o.plan(9), OpenPlan::Cached { .. }));
        // Opens already passed through keep their backing file.
        assert!(matches!(o.plan(1), OpenPlan::Shared { .. }));
        o.release(held);
        assert_eq!(drops.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn concurrent_copies_of_one_inode_share_the_first_backing() {
        let o = enabled();
        let drops = Arc::new(AtomicUsize::new(0));
        // Two opens both find nothing registered and materialize.
        let (OpenPlan::Materialize { fh: a }, OpenPlan::Materialize { fh: b }) =
            (o.plan(5), o.plan(5))
        else {
            panic!("both materialize");
        };
        let first = o.attach(5, a, Id(1, drops.clone()));
        let second = o.attach(5, b, Id(2, drops.clone()));
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(second.0, 1);
        assert_eq!(
            drops.load(Ordering::Relaxed),
            1,
            "the second id is closed at once"
        );
        drop((first, second));
        o.release(a);
        o.release(b);
        assert_eq!(drops.load(Ordering::Relaxed), 2);
        assert!(is_empty(&o));
    }

    #[test]
    fn untracked_handles_release_as_no_ops() {
        let o = enabled();
        let drops = Arc::new(AtomicUsize::new(0));
        let fh = open_passthrough(&o, 1, 1, &drops);
        assert_ne!(fh, 0, "handle 0 is the untracked small-file handle");
        o.release(0);
        o.release(fh + 100);
        o.release(fh);
        o.release(fh);
        assert!(is_empty(&o));
        assert_eq!(drops.load(Ordering::Relaxed), 1);
    }

    /// A seeded random sequence of opens (each plan resolved at once: attached, or cached as
    /// after a failed copy) and releases over a few inodes, against the rules: no inode is open
    /// both ways, its passthrough opens share one id, the counts match the handles, and
    /// nothing is left once all are released.
    #[test]
    fn random_opens_and_releases_keep_the_rules() {
        for seed in 1..=20u64 {
            let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let mut next = move |n: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % n
            };
            let o = enabled();
            let drops = Arc::new(AtomicUsize::new(0));
            let mut ids = 0;
            let mut open: Vec<u64> = Vec::new();
            for _ in 0..300 {
                if open.is_empty() || next(3) > 0 {
                    let ino = 1 + next(3);
                    let plan = o.plan(ino);
                    let fh = fh_of(&plan);
                    if let OpenPlan::Materialize { fh } = plan {
                        if next(4) == 0 {
                            o.open_cached(ino, fh);
                        } else {
                            ids += 1;
                            o.attach(ino, fh, Id(ids, drops.clone()));
                        }
                    }
                    open.push(fh);
                } else {
                    let i = next(open.len() as u64) as usize;
                    o.release(open.swap_remove(i));
                }
                let t = o.table();
                assert_eq!(t.handles.len(), open.len(), "seed {seed}");
                for ino in 1..=3 {
                    let mine = t.handles.values().filter(|(i, _)| *i == ino);
                    let cached = mine.clone().filter(|(_, b)| b.is_none()).count();
                    let backed: Vec<_> = mine.filter_map(|(_, b)| b.as_ref()).collect();
                    assert_eq!(t.cached.get(&ino).copied().unwrap_or(0) as usize, cached);
                    assert!(cached == 0 || backed.is_empty(), "seed {seed}: both modes");
                    assert!(backed.windows(2).all(|w| Arc::ptr_eq(w[0], w[1])));
                    if let Some(b) = backed.first() {
                        let registered = t.backing.get(&ino).and_then(Weak::upgrade);
                        assert!(registered.is_some_and(|r| Arc::ptr_eq(&r, b)));
                    }
                }
            }
            for fh in open.drain(..) {
                o.release(fh);
            }
            assert!(is_empty(&o), "seed {seed}");
            assert_eq!(drops.load(Ordering::Relaxed), ids as usize, "seed {seed}");
        }
    }
}
