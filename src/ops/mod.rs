//! Operations over stored history, and keeping a store healthy.
//!
//! - [`restore`], [`diff`], [`walk`], [`history`]: read and put back what was recorded
//!   (`history` renders `log` and `log --graph` as rows and lines a front end prints).
//! - [`verify`]: re-hash every reachable object.
//! - [`gc`] (plan, then apply), [`doctor`] (collect findings) and [`recover`] (repair after a
//!   crash) all look at the store's state through [`inventory`]: what exists, and which
//!   artifacts are left by processes that are gone. None of the three imports another.
//! - [`forget`] (plan, then apply): take checkpoints out of history, then sweep with gc's plan.
//! - [`archive`]: portable tar+zstd exports and imports.
//! - [`turn`] and [`fingerprint`]: the runner's contract (`ckptfs turn`: one agent turn as
//!   one checkpoint or none; runtime fingerprints, refused when they change).

pub mod archive;
pub mod diff;
pub mod doctor;
pub mod find;
pub mod fingerprint;
pub mod forget;
pub mod gc;
pub mod history;
pub mod inventory;
pub mod recover;
pub mod restore;
pub mod run_as;
pub mod stats;
pub mod turn;
pub mod verify;
pub mod walk;
