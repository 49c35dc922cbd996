//! Ingest: files on disk -> chunk and tree objects in the store.
//!
//! ```text
//!   capture (a root)          ingest::upper (an overlay upper)
//!        \  walk: lstat, exclude rules, stat cache    /
//!         `------------> FileJob list <--------------'
//!                            |
//!                  reader::read_files        every core, biggest file first
//!                     |            \
//!          chunker::chunk_file    snapshot (XFS/btrfs: reflink clone + extent maps)
//!                     |
//!          ObjectBatch (store::object): chunk objects, then the trees the walk builds,
//!          committed before the checkpoint record that names them
//! ```
//!
//! - [`capture`] walks whole roots and records one checkpoint over all of them.
//! - [`upper`] walks a workspace's upper layer and merges it with the base tree (the
//!   workspace's checkpoint): only what the upper holds is read.
//! - `reader` (private to ingest) is the engine both walks share: it reads (or reuses, by
//!   stat key) each file found and returns its chunks, xattrs and stat.
//! - `chunker` cuts one file (FastCDC, or page-aligned blocks for SQLite), trying the
//!   previous version's chunks first.
//! - `snapshot` keeps reflink clones of a workspace's big changed files, so the next
//!   checkpoint reads only the ranges that changed.
//!
//! File metadata (timestamps, stat keys, xattrs) is read through [`crate::meta`]; exclude rules
//! come from [`crate::store::exclude`]. Nothing here imports `workspace`, `history`, `upkeep`,
//! `transfer`, `runner` or `cli`.

pub mod capture;
pub(crate) mod chunker;
mod reader;
mod snapshot;
pub mod upper;

pub(crate) use chunker::chunk_file;
pub(crate) use reader::OnChange;
/// The reflink snapshots a workspace's checkpoints keep (see `snapshot`): which a stat cache
/// names, which none does, and sweeping the rest.
pub(crate) use snapshot::{
    named_by as snapshots_named_by, sweep as sweep_snapshots, unnamed as unnamed_snapshots,
};
