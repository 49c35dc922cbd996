//! Operations over stored history.

pub mod archive;
pub mod diff;
pub mod doctor;
pub mod gc;
pub mod recover;
pub mod restore;
pub mod verify;
pub mod walk;
