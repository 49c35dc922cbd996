//! `ckptfs agent` with the real agent CLIs (Codex, Claude Code) against the scripted model
//! server: turns bound to native sessions, native forks, failures that record nothing, the
//! login that never reaches the store, and a room continued from a clone.

mod clone;
mod conversation;
mod example;
mod failures;
mod secret;
mod versions;
