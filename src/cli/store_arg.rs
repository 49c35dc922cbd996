//! Which store a command works on: the one rule, applied to the command line before clap
//! parses it (docs/cli.md, "Finding the store").
//!
//! Every command that works on a store takes it as its first positional argument, as it always
//! did. That argument may be left out; then the store is, in this order:
//!
//! 1. `--store PATH` (a global option, anywhere on the line),
//! 2. the `CKPTFS_STORE` environment variable (as restic's `RESTIC_REPOSITORY`),
//! 3. the store of the mounted ckptfs workspace or view the current directory is in.
//!
//! The first positional is the store only when it names a store directory (one holding
//! `STORE.json`, not at or under a ckptfs mount: there it is the agent's file, see
//! `ckptfs::store::trust`); anything else (a checkpoint, a label, a mountpoint) is the command's next
//! argument and the store comes from 1-3. When 1-3 find nothing, the line is left as it is, so
//! a mistyped store path still gets the error it always got (`store /x not found`), and a line
//! with no argument at all, or whose one argument is the command's own (taken as STORE, a
//! required argument would be missing: `find '*.db'`), gets [`no_store`]. `checkpoint`, `exec` and `status` (MOUNTPOINT|STORE)
//! work the same way, except that a first argument is always theirs (it may be a mountpoint)
//! and discovery in a workspace gives its mountpoint. `init` always needs
//! its STORE (it creates one), and `unarchive` decides between its two arguments itself
//! ([`unarchive_order`]).
//!
//! Doing this on the argument list keeps every command's clap definition, and every script
//! and test that passes STORE, exactly as before.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use ckptfs::{Error, Result};

/// The environment variable naming the store.
pub const ENV: &str = "CKPTFS_STORE";

/// Appended to the help of every command that takes STORE.
pub const STORE_HELP: &str = "STORE may be left out: it is then --store PATH, else $CKPTFS_STORE, \
else the store of the mounted ckptfs workspace or view the current directory is in. The first \
argument is taken as STORE only if it is a store directory (holds STORE.json). See docs/cli.md.";

/// Appended to the help of `checkpoint`, `exec` and `status`.
pub const PLACE_HELP: &str = "MOUNTPOINT|STORE may be left out: it is then --store PATH, else \
$CKPTFS_STORE, else the mounted workspace (or the store of the view) the current directory is \
in. See docs/cli.md.";

/// Appended to the help of `import`.
pub const IMPORT_HELP: &str = "STORE may be left out (import FILE): it is then --store PATH, \
else $CKPTFS_STORE, else the store of the mounted workspace or view the current directory is \
in. The older order `unarchive FILE STORE` still works: the archive is the argument that is a \
file. See docs/cli.md.";

/// How a command names its store, by the id of its first positional argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `STORE ...`
    Store,
    /// `MOUNTPOINT|STORE ...` (`checkpoint`, `exec`, `status`).
    Place,
}

fn kind_of(cmd: &clap::Command) -> Option<Kind> {
    if cmd.get_name() == "init" {
        return None;
    }
    match cmd.get_positionals().next().map(|a| a.get_id().as_str()) {
        Some("store") => Some(Kind::Store),
        Some("place") => Some(Kind::Place),
        _ => None,
    }
}

/// Adds [`STORE_HELP`] or [`PLACE_HELP`] to every (sub)command that takes one.
pub fn annotate(cmd: clap::Command) -> clap::Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let note = match kind_of(&cmd) {
        Some(Kind::Store) => Some(STORE_HELP),
        Some(Kind::Place) => Some(PLACE_HELP),
        None if cmd.get_name() == "import" => Some(IMPORT_HELP),
        None => None,
    };
    let mut cmd = match (note, cmd.get_after_help().map(ToString::to_string)) {
        (Some(n), Some(before)) => cmd.after_help(format!("{before}\n\n{n}")),
        (Some(n), None) => cmd.after_help(n),
        (None, _) => cmd,
    };
    for n in names {
        cmd = cmd.mut_subcommand(n, annotate);
    }
    cmd
}

/// The one-line error when no store is given or found.
pub fn no_store() -> Error {
    Error::Usage(format!(
        "no store given: pass STORE as the first argument, --store PATH or {ENV}=PATH, \
         or run it inside a mounted ckptfs workspace or view"
    ))
}

/// Where an implicit store came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Implicit {
    Flag(PathBuf),
    Env(PathBuf),
    /// Found from the current directory: the store and the mountpoint it is under, a
    /// workspace's or a read-only view's.
    Mount {
        store: PathBuf,
        mountpoint: PathBuf,
        workspace: bool,
    },
}

/// The store from `--store` (its value, if given), else `CKPTFS_STORE`, else the mount around
/// the current directory.
pub fn implicit(flag: Option<&OsStr>) -> Option<Implicit> {
    if let Some(f) = flag.filter(|f| !f.is_empty()) {
        return Some(Implicit::Flag(PathBuf::from(f)));
    }
    if let Some(e) = std::env::var_os(ENV).filter(|e| !e.is_empty()) {
        return Some(Implicit::Env(PathBuf::from(e)));
    }
    let cwd = std::env::current_dir().ok()?;
    ckptfs::workspace::place::discover(&cwd).map(|(store, mountpoint, workspace)| Implicit::Mount {
        store,
        mountpoint,
        workspace,
    })
}

/// What a scan of the command line found.
struct Scan {
    /// The `--store` value, if any.
    flag: Option<OsString>,
    /// -h/--help/-V/--version, the `help` subcommand or an option missing its value: left
    /// to clap.
    help: bool,
    /// The deepest subcommand named, and where its arguments start.
    leaf: Option<(clap::Command, usize)>,
    /// Index of the leaf's first positional argument (before any `--`).
    first_positional: Option<usize>,
}

/// Whether option `name` (long without `--`) or `short` takes a value at this level.
fn takes_value(cmds: &[&clap::Command], long: Option<&str>, short: Option<char>) -> bool {
    cmds.iter().any(|c| {
        c.get_arguments().any(|a| {
            let hit = match (long, short) {
                (Some(l), _) => {
                    a.get_long() == Some(l) || a.get_all_aliases().is_some_and(|v| v.contains(&l))
                }
                (_, Some(s)) => {
                    a.get_short() == Some(s)
                        || a.get_all_short_aliases().is_some_and(|v| v.contains(&s))
                }
                _ => false,
            };
            hit && a.get_action().takes_values()
        })
    })
}

fn scan(root: &clap::Command, args: &[OsString]) -> Scan {
    let mut out = Scan {
        flag: None,
        help: false,
        leaf: None,
        first_positional: None,
    };
    let mut path: Vec<clap::Command> = vec![root.clone()];
    let mut i = 1;
    while i < args.len() {
        let t = args[i].to_string_lossy();
        if t == "--" {
            break;
        }
        let levels: Vec<&clap::Command> = path.iter().collect();
        if let Some(long) = t.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            if matches!(name, "help" | "version") {
                out.help = true;
            }
            if takes_value(&levels, Some(name), None) && inline.is_none() {
                if i + 1 == args.len() {
                    // A missing value: clap says so better than "no store".
                    out.help = true;
                }
                if name == "store" {
                    out.flag = args.get(i + 1).cloned();
                }
                i += 2;
                continue;
            }
            if name == "store" {
                out.flag = inline.map(OsString::from);
            }
            i += 1;
            continue;
        }
        if let Some(shorts) = t.strip_prefix('-').filter(|s| !s.is_empty()) {
            let mut skip_next = false;
            for (k, c) in shorts.char_indices() {
                if matches!(c, 'h' | 'V') {
                    out.help = true;
                }
                if takes_value(&levels, None, Some(c)) {
                    skip_next = k + c.len_utf8() == shorts.len();
                    break;
                }
            }
            i += if skip_next { 2 } else { 1 };
            continue;
        }
        // A positional: a subcommand of the current level, or the leaf's first argument.
        let cur = &path[path.len() - 1];
        if out.first_positional.is_none() && cur.has_subcommands() {
            if t == "help" {
                out.help = true;
                break;
            }
            if let Some(sub) = cur.find_subcommand(t.as_ref()) {
                let sub = sub.clone();
                out.leaf = Some((sub.clone(), i + 1));
                path.push(sub);
                i += 1;
                continue;
            }
        }
        if out.first_positional.is_none() && path.len() > 1 {
            out.first_positional = Some(i);
        }
        i += 1;
    }
    out
}

/// The command line with the store filled in by the rule above.
///
/// # Errors
/// [`no_store`] for a command that takes STORE when none is given or found.
pub fn complete(root: &clap::Command, args: Vec<OsString>) -> Result<Vec<OsString>> {
    let s = scan(root, &args);
    let Some((leaf, at)) = s.leaf.as_ref().filter(|_| !s.help) else {
        return Ok(args);
    };
    let Some(kind) = kind_of(leaf) else {
        return Ok(args);
    };
    let given = s.first_positional.map(|i| PathBuf::from(&args[i]));
    if kind == Kind::Place && given.is_some() {
        return Ok(args);
    }
    if given
        .as_deref()
        .is_some_and(ckptfs::workspace::place::is_store)
    {
        return Ok(args);
    }
    let fill = match implicit(s.flag.as_deref()) {
        Some(Implicit::Flag(p) | Implicit::Env(p)) => p,
        Some(Implicit::Mount {
            store,
            mountpoint,
            workspace,
        }) => match kind {
            Kind::Place if workspace => mountpoint,
            _ => store,
        },
        // The one argument given is taken as STORE, as it always was, unless the command
        // would then lack a required argument (`find '*.db'`, `show C`): it is the command's
        // own, and the store is what is missing.
        None if given.is_some() && !lacks_required(root, &args) => return Ok(args),
        None => return Err(no_store()),
    };
    log::debug!("store: {}", fill.display());
    let mut args = args;
    args.insert(*at, fill.into_os_string());
    Ok(args)
}

/// Whether clap, given `args` as they are, finds a required argument missing.
fn lacks_required(root: &clap::Command, args: &[OsString]) -> bool {
    root.clone()
        .try_get_matches_from(args)
        .is_err_and(|e| e.kind() == clap::error::ErrorKind::MissingRequiredArgument)
}

/// Something is at `p` (not followed) and it is not a directory.
fn exists_not_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| !m.is_dir())
}

/// `unarchive`'s two positionals in either order: `STORE FILE` (the order of every other
/// command) or the older `FILE STORE`, or only `FILE` with the store from `--store`,
/// `CKPTFS_STORE` or discovery. The archive is the one that is a regular file (or names one
/// by its `.part000` or `.sha256` sidecar); the store is the other.
///
/// # Errors
/// [`no_store`] when only FILE is given and no store is found; `Usage` when neither argument
/// is an archive file.
pub fn unarchive_order(
    first: PathBuf,
    second: Option<PathBuf>,
    flag: Option<&Path>,
) -> Result<(PathBuf, PathBuf)> {
    let is_archive = |p: &Path| {
        let with = |suffix: &str| {
            let mut s = p.as_os_str().to_os_string();
            s.push(suffix);
            PathBuf::from(s)
        };
        p.is_file() || with(".part000").is_file() || with(".sha256").is_file()
    };
    match second {
        Some(second) => match (is_archive(&first), is_archive(&second)) {
            (true, true) => Err(Error::Usage(format!(
                "unarchive: {} and {} are both files; give STORE (a directory) and FILE",
                first.display(),
                second.display()
            ))),
            (false, true) => Ok((second, first)),
            (true, false) => Ok((first, second)),
            // Neither is there: the import names the missing archive; which one it is
            // follows the store, if one of them is, else the old FILE STORE order.
            (false, false) if ckptfs::workspace::place::is_store(&first) => Ok((second, first)),
            // Something that is there but is no directory (a device, a FIFO) is the archive
            // meant: the import then says what it is, rather than that the other is missing.
            (false, false) if exists_not_dir(&second) && !exists_not_dir(&first) => {
                Ok((second, first))
            }
            (false, false) => Ok((first, second)),
        },
        None => match implicit(flag.map(Path::as_os_str)) {
            Some(Implicit::Flag(p) | Implicit::Env(p) | Implicit::Mount { store: p, .. }) => {
                Ok((first, p))
            }
            None => Err(no_store()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn line(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn finds_leaf_first_positional_and_flag() {
        let root = super::super::command();
        let s = scan(
            &root,
            &line(&["ckptfs", "-v", "log", "-n", "5", "--store", "/s", "abc"]),
        );
        assert_eq!(s.flag.as_deref(), Some(OsStr::new("/s")));
        assert_eq!(s.leaf.as_ref().map(|l| l.1), Some(3));
        assert_eq!(s.first_positional, Some(7));
        let s = scan(&root, &line(&["ckptfs", "branch", "list", "--json"]));
        assert_eq!(s.leaf.as_ref().map(|l| l.0.get_name()), Some("list"));
        assert_eq!(s.first_positional, None);
        let s = scan(
            &root,
            &line(&["ckptfs", "--store=/x", "label", "delete", "n"]),
        );
        assert_eq!(s.flag.as_deref(), Some(OsStr::new("/x")));
        assert_eq!(s.leaf.as_ref().map(|l| l.0.get_name()), Some("delete"));
        assert_eq!(s.first_positional, Some(4));
        let s = scan(&root, &line(&["ckptfs", "exec", "--", "sh"]));
        assert_eq!(s.first_positional, None);
        assert!(scan(&root, &line(&["ckptfs", "log", "--help"])).help);
        assert!(scan(&root, &line(&["ckptfs", "help", "log"])).help);
        assert!(scan(&root, &line(&["ckptfs", "log", "--store"])).help);
        assert!(super::super::Cli::command().get_subcommands().count() > 10);
    }

    #[test]
    fn kinds() {
        let root = super::super::command();
        let k = |n: &str| kind_of(root.find_subcommand(n).unwrap());
        assert_eq!(k("log"), Some(Kind::Store));
        assert_eq!(k("checkpoint"), Some(Kind::Place));
        assert_eq!(k("init"), None);
        assert_eq!(k("umount"), None);
        assert_eq!(k("completions"), None);
    }
}
