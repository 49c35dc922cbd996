//! Operations over stored history.

pub mod diff;
pub mod recover;
pub mod restore;
pub mod verify;
pub mod walk;
