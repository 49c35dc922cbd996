//! The few libc calls that have no safe wrapper. Every unsafe block in the crate lives here.
#![allow(unsafe_code)]

/// Restores the default action of SIGPIPE (Rust ignores it), so `ckptfs log | head` ends
/// quietly when the reader goes away, as other command-line tools do, instead of failing a
/// write to stdout with a panic.
pub fn default_sigpipe() {
    // SAFETY: installs the default disposition, no handler code runs; called once at start,
    // before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
