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
//! - `reader` is the engine both walks share: it reads (or reuses, by stat key) each file
//!   found and returns its chunks, xattrs and stat.
//! - `chunker` cuts one file (FastCDC, or page-aligned blocks for SQLite), trying the
//!   previous version's chunks first.
//! - `snapshot` keeps reflink clones of a workspace's big changed files, so the next
//!   checkpoint reads only the ranges that changed.
//!
//! File metadata (timestamps, stat keys, xattrs) is read through [`crate::meta`]; exclude rules
//! come from [`crate::store::exclude`]. Nothing here imports `workspace`, `ops` or `cli`.

pub mod capture;
pub(crate) mod chunker;
pub(crate) mod reader;
pub(crate) mod snapshot;
pub mod upper;
