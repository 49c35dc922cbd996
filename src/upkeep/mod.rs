//! Keeping a store healthy.
//!
//! [`gc`] (plan, then apply), [`doctor`] (collect findings) and [`recover`] (repair after a
//! crash) all look at the store's state through [`inventory`]: what exists, and which
//! artifacts are left by processes that are gone. None of the three imports another.
//! [`forget`] (plan, then apply) takes checkpoints out of history, then sweeps with gc's plan;
//! [`verify`] re-hashes every reachable object.

pub mod doctor;
pub mod forget;
pub mod gc;
pub mod inventory;
pub mod recover;
pub mod verify;
