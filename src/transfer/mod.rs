//! Moving recorded data out of the store and in: [`restore`] (a checkpoint back onto disk)
//! and [`archive`] (portable tar+zstd exports and imports).

pub mod archive;
pub mod restore;
