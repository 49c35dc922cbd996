//! ckptfs: a checkpoint filesystem for directory trees that live at fixed absolute paths.
//!
//! Data flows from a directory through [`ingest`] into the content-addressed [`store`]:
//! [`ingest::capture`] walks the roots, and its reading engine turns files into chunk objects
//! (FastCDC + SHA-256); directories become [`store::tree::Tree`] objects, and one
//! [`store::checkpoint::Checkpoint`] record ties one tree per root together. Branches (movable)
//! and labels (immutable) name checkpoints.
//!
//! - [`workspace`] mounts a branch writable at its roots' paths (kernel overlayfs over the
//!   store's read-only [`view`]) and checkpoints it by merging the upper layer with the base
//!   tree through the same reading engine; [`daemon`] runs the FUSE mount processes.
//! - [`ops`] holds the operations over stored history: restore, verify, diff, recover, and
//!   keeping a store healthy: `gc` (retention classes and policy, plan then apply),
//!   `archive`/`unarchive` (portable tar+zstd exports with SHA-256) and `doctor` (invariant
//!   checks with fixes), `history` (what `log` lists and draws). `gc`, `doctor` and `recover`
//!   see the store's state and its stale artifacts through one `ops::inventory`.
//! - [`meta`] reads and applies file metadata (timestamps, stat keys, xattrs) the same way for
//!   capture, the workspace merge and restore; [`util`], [`sys`] and [`mountinfo`] are leaf
//!   helpers.
//!
//! Layering: `store` imports none of `ingest`, `workspace`, `ops` or the CLI; `meta` only the
//! store's types; `ingest` builds on `store` and `meta`; `workspace` on all of those.
//! The CLI (`src/cli`) is a thin layer over this library; the library never sees clap.

pub mod daemon;
pub mod error;
pub mod id;
pub mod ingest;
pub mod meta;
pub mod mountinfo;
pub mod ops;
pub mod progress;
pub mod quote;
pub mod remote;
pub mod safe;
pub mod store;
pub mod sys;
pub mod util;
pub mod view;
pub mod workspace;

pub use error::{Error, Result};
pub use id::ObjectId;
pub use store::Store;
