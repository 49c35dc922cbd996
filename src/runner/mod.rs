//! The runner's contract: [`turn`] (one agent turn as one checkpoint or none), runtime
//! [`fingerprint`]s (refused when they change) and [`run_as`] (whom the agent runs as).

pub mod driver;
pub mod fingerprint;
pub mod procs;
pub mod run_as;
pub mod turn;
