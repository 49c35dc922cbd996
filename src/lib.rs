//! ckptfs: a checkpoint filesystem for directory trees that live at fixed absolute paths.
//!
//! Data flows from a directory through [`ingest`] into the content-addressed [`store`]:
//! [`ingest::capture`] walks the roots, and its reading engine turns files into chunk objects
//! (FastCDC + SHA-256); directories become [`store::tree::Tree`] objects, and one
//! [`store::checkpoint::Checkpoint`] record ties one tree per root together. Branches (movable)
//! and labels (immutable) name checkpoints.
//!
//! The rooms, from the ground up (each imports only rooms listed before it):
//! - [`text`] (quoting, times), [`error`], [`units`] (sizes, durations, modes), [`fs`] (the safe path module, the durable
//!   write path, mountinfo, the one `unsafe` module), [`id`].
//! - [`store`]: objects, trees, checkpoints, refs, locks, trust; [`meta`] reads and applies
//!   file metadata for capture, the workspace and restore; [`progress`].
//! - [`view`] (the read-only FUSE view of checkpoints) and [`daemon`] (the processes that
//!   serve it); [`remote`] (encrypted packs on object storage).
//! - [`ingest`]: capture of whole roots and of a workspace's upper layer, through one reader.
//! - [`history`]: read-only queries (diff, walk, log, find, stats).
//! - [`workspace`]: a branch mounted writable at its roots' paths (kernel overlayfs over the
//!   view), checkpointed by ingesting its upper layer.
//! - [`upkeep`] (gc, forget, verify, doctor, recover), [`transfer`] (restore, archive) and
//!   [`runner`] (turn, fingerprint, whom the agent runs as); [`merge`] (three-way merge of
//!   branches, with drivers for text, append-only logs and SQLite).
//!
//! The CLI (`src/cli`) is a thin layer over this library; the library never sees clap.

#![deny(unsafe_code)]

pub mod agent;
pub mod daemon;
pub mod error;
pub mod fs;
pub mod history;
pub mod id;
pub mod ingest;
pub mod merge;
pub mod meta;
pub mod progress;
pub mod remote;
pub mod runner;
pub mod store;
pub mod text;
pub mod transfer;
pub mod units;
pub mod upkeep;
pub mod view;
pub mod workspace;

pub use error::{Error, ErrorKind, Result};
pub use id::ObjectId;
pub use store::Store;
