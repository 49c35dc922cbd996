//! The integration tests, one binary (so `support/` and the crate's test build happen once):
//! a module per area, a file per capability. Each runs the real binary, real FUSE and overlay
//! mounts, real unprivileged users for attacks (see `support/` and docs/testing.md).
//!
//! Tests that need the machine's mount table to themselves (they make mount namespaces,
//! which copy every mount, other tests' workspaces too) are the `machine` binary's
//! (`tests/machine/`): cargo runs test binaries one after another, so they never overlap these.

mod support;

mod agent;
mod cli;
mod health;
mod hostile;
mod merge;
mod remote;
mod runner;
mod store;
mod view;
mod workspace;
