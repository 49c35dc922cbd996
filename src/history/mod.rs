//! Read-only queries over recorded history, below `workspace` (which diffs trees to checkpoint).
//!
//! - [`diff`]: what changed between two trees, in time proportional to the change.
//! - [`walk`]: a checkpoint's paths, in order.
//! - [`timeline`]: what `log` lists and `log --graph` draws, as rows and lines a front end prints.
//! - [`graph`]: the lanes of `log --graph`, drawn as git draws them.
//! - [`lineage`]: branches as a tree by what they were forked from, and where they merged.
//! - [`find`]: paths by name or glob across checkpoints; [`stats`]: sizes and dedup figures.

pub mod diff;
pub mod find;
pub mod graph;
pub mod lineage;
pub mod stats;
pub mod timeline;
pub mod walk;
