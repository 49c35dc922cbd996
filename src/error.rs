//! The crate's one error type. Every variant renders as one line that names the thing at fault;
//! `exit_code` maps it for the CLI (2 = usage, 1 = everything else) and `errno` for FUSE.
//!
//! Callers that must tell errors apart match [`Error::kind`] (or the variant), never the
//! message text: a refusal that a caller treats specially gets a kind of its own
//! ([`ErrorKind::Untrusted`]). [`Error::within`] prefixes a message with where it happened and
//! keeps the kind.

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
    /// A store that fails the ownership and placement checks (`store::trust`): someone other
    /// than its owner or root could have planted or changed it.
    Untrusted(String),
}

/// What kind of failure an [`Error`] is, for callers that act on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// [`Error::Usage`].
    Usage,
    /// [`Error::Io`].
    Io,
    /// [`Error::Corrupt`].
    Corrupt,
    /// [`Error::NotFound`].
    NotFound,
    /// [`Error::Conflict`].
    Conflict,
    /// [`Error::Invalid`].
    Invalid,
    /// [`Error::Untrusted`].
    Untrusted,
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

    /// The kind of failure, for callers that act on it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Usage(_) => ErrorKind::Usage,
            Error::Io { .. } => ErrorKind::Io,
            Error::Corrupt(_) => ErrorKind::Corrupt,
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::Conflict(_) => ErrorKind::Conflict,
            Error::Invalid(_) => ErrorKind::Invalid,
            Error::Untrusted(_) => ErrorKind::Untrusted,
        }
    }

    /// The same error with `where_: ` before its message (an I/O error's description), kind
    /// and source kept: `e.within(format!("tree {id}"))`.
    #[must_use]
    pub fn within(self, where_: impl fmt::Display) -> Error {
        match self {
            Error::Usage(m) => Error::Usage(format!("{where_}: {m}")),
            Error::Io { what, source } => Error::Io {
                what: format!("{where_}: {what}"),
                source,
            },
            Error::Corrupt(m) => Error::Corrupt(format!("{where_}: {m}")),
            Error::NotFound(m) => Error::NotFound(format!("{where_}: {m}")),
            Error::Conflict(m) => Error::Conflict(format!("{where_}: {m}")),
            Error::Invalid(m) => Error::Invalid(format!("{where_}: {m}")),
            Error::Untrusted(m) => Error::Untrusted(format!("{where_}: {m}")),
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
            Error::Untrusted(_) => libc::EACCES,
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
            Error::Conflict(m) | Error::Invalid(m) | Error::Untrusted(m) => {
                write!(f, "{}", text(m))
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_keeps_the_kind_and_the_source() {
        let e = Error::Corrupt("bad bytes".into()).within("tree 1234");
        assert_eq!(e.kind(), ErrorKind::Corrupt);
        assert_eq!(e.to_string(), "corrupt: tree 1234: bad bytes");
        let e =
            Error::io_op("reading x", io::Error::from_raw_os_error(libc::ENOENT)).within("root a");
        assert_eq!(e.kind(), ErrorKind::Io);
        assert_eq!(e.errno(), libc::ENOENT);
        assert!(e.to_string().starts_with("root a: reading x: "), "{e}");
        let e = Error::Untrusted("store /s is not trusted: x".into());
        assert_eq!(e.kind(), ErrorKind::Untrusted);
        assert_eq!(e.exit_code(), 1);
        assert_eq!(e.to_string(), "store /s is not trusted: x");
    }
}
