//! `ckptfs merge`: three-way merges of branches recorded by `capture`, checked through the
//! binary (`cat`, `show`, `verify`) and against `git merge-file` for text.

mod branches;
mod crash;
mod hostile;
mod oracle;
mod sqlite;
mod workspace;
