//! ckptfs: a checkpoint filesystem for directory trees that live at fixed absolute paths.
//!
//! Data flows from a directory through [`capture`] into the content-addressed [`store`]:
//! files become chunk objects (FastCDC + SHA-256), directories become [`store::tree::Tree`]
//! objects, and one [`store::checkpoint::Checkpoint`] record ties one tree per root together.
//! Branches (movable) and labels (immutable) name checkpoints. [`ops`] holds the operations
//! over stored history: restore, verify, diff, `history` (what `log` lists and draws), recover,
//! and keeping a store healthy: `gc` (retention classes and policy, plan then apply),
//! `archive`/`unarchive` (portable tar+zstd exports with SHA-256) and `doctor` (invariant
//! checks with fixes). `gc`, `doctor` and `recover` see the store's state and its stale
//! artifacts through one `ops::inventory`; [`mountinfo`] is the one reader of the mount table.
//!
//! The CLI (`src/cli`) is a thin layer over this library; the library never sees clap.

pub mod capture;
mod chunker;
pub mod daemon;
pub mod error;
pub mod id;
pub mod mountinfo;
pub mod ops;
mod snapshot;
pub mod store;
pub mod sys;
pub mod util;
pub mod view;
pub mod workspace;

pub use error::{Error, Result};
pub use id::ObjectId;
pub use store::Store;
