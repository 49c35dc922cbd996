//! Tests that need the machine to themselves, in a binary of their own: a mount namespace
//! copies every mount of the machine (the workspaces of tests running beside it too) and holds
//! them against their switches and folds; a process-wide environment variable is set. Cargo
//! runs test binaries one after another, so these never overlap the `it` binary's tests;
//! inside this binary they take [`serial`] one at a time.

// The one set of helpers lives with the main test binary; this one shares it.
#[path = "../it/support/mod.rs"]
mod support;

mod hostile_namespace;
mod rootless;
mod view_browse;
mod workspace_fold_ns;

use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

/// One test of this binary at a time.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
