//! Read-only queries over recorded history, below `workspace` (which diffs trees to checkpoint).
//!
//! - [`diff`]: what changed between two trees, in time proportional to the change.
//! - [`walk`]: a checkpoint's paths, in order.
//! - [`timeline`]: what `log` lists and `log --graph` draws, as rows and lines a front end prints.
//! - [`find`]: paths by name or glob across checkpoints; [`stats`]: sizes and dedup figures.

pub mod diff;
pub mod find;
pub mod stats;
pub mod timeline;
pub mod walk;
