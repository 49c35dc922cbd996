//! The crate's one error type. Every variant renders as one line that names the thing at fault;
//! `exit_code` maps it for the CLI (2 = usage, 1 = everything else) and `errno` for FUSE.

use std::fmt;
use std::io;
use std::path::Path;

/// Errors of every ckptfs operation.
#[derive(Debug)]
pub enum Error {
    /// The command line or an argument is wrong (exit 2).
    Usage(String),
    /// An I/O call failed; `what` names the path or operation.
    Io { what: String, source: io::Error },
    /// Stored data does not match its id, or cannot be decoded.
    Corrupt(String),
    /// A named thing (checkpoint, label, branch, path, object) does not exist.
    NotFound(String),
    /// A request conflicts with the state of the store (label exists, lock held, marker present...).
    Conflict(String),
    /// Input data that ckptfs refuses (special files, changing files, bad names, bad config...).
    Invalid(String),
}

/// Result alias used across the crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Wraps an `io::Error` with the path it concerns (quoted as `quote::path` shows names
    /// from trees: control characters and invalid UTF-8 escaped).
    pub fn io(path: impl AsRef<Path>, source: io::Error) -> Error {
        Error::Io {
            what: crate::text::quote::path(path.as_ref()).into_owned(),
            source,
        }
    }

    /// Wraps an `io::Error` with a free-form description of the operation.
    pub fn io_op(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    /// Process exit code for this error: 2 for usage errors, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => 2,
            _ => 1,
        }
    }

    /// The errno a FUSE handler should reply with. An I/O failure keeps its OS error; corrupt
    /// data is EIO (never wrong bytes); a missing name is ENOENT.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::Corrupt(_) => libc::EIO,
            Error::NotFound(_) => libc::ENOENT,
            Error::Conflict(_) => libc::EBUSY,
            Error::Invalid(_) | Error::Usage(_) => libc::EINVAL,
        }
    }
}

/// Every message prints as one line: names from trees in it may hold control characters,
/// escaped here (`quote::text`) whatever built the message.
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::text::quote::text;
        match self {
            Error::Usage(m) => write!(f, "usage: {}", text(m)),
            Error::Io { what, source } => write!(f, "{}: {source}", text(what)),
            Error::Corrupt(m) => write!(f, "corrupt: {}", text(m)),
            Error::NotFound(m) => write!(f, "not found: {}", text(m)),
            Error::Conflict(m) | Error::Invalid(m) => write!(f, "{}", text(m)),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
