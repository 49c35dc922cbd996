//! `completions` and `man`: shell completion scripts and manual pages, both generated from
//! the clap definition of the command line, so they never drift from `--help`.

use std::io::{self, Write};
use std::path::PathBuf;

use clap::Args;
use clap_complete::Shell;

use ckptfs::{Error, Result};

/// `completions` arguments.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to write a completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// `man` arguments.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write ckptfs.1 and one page per subcommand (ckptfs-SUB.1, e.g. ckptfs-branch-list.1)
    /// into this existing directory. Without it, print the top page (ckptfs.1) to stdout.
    pub dir: Option<PathBuf>,
}

/// `ckptfs completions SHELL`: the script on stdout.
pub fn run_completions(a: CompletionsArgs) -> Result<i32> {
    let mut cmd = visible_command();
    let mut buf = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "ckptfs", &mut buf);
    write_stdout(&buf)?;
    Ok(0)
}

/// The command line without its hidden (internal) subcommands. clap_complete offers hidden
/// subcommands too (clap-rs/clap#1335) and `Command` cannot remove one, so the root is put
/// together again from its own arguments and visible subcommands.
fn visible_command() -> clap::Command {
    let root = super::command();
    clap::Command::new("ckptfs")
        .version(env!("CARGO_PKG_VERSION"))
        .propagate_version(true)
        .args(root.get_arguments().cloned())
        .subcommands(root.get_subcommands().filter(|c| !c.is_hide_set()).cloned())
}

/// `ckptfs man [DIR]`.
pub fn run_man(a: ManArgs) -> Result<i32> {
    let cmd = super::command();
    match a.dir {
        Some(dir) => {
            if !dir.is_dir() {
                return Err(Error::Usage(format!(
                    "{} is not a directory (create it first)",
                    dir.display()
                )));
            }
            clap_mangen::generate_to(cmd, &dir)
                .map_err(|e| Error::io_op(format!("writing man pages to {}", dir.display()), e))?;
            println!("wrote man pages to {}", dir.display());
        }
        None => {
            let mut buf = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut buf)
                .map_err(|e| Error::io_op("rendering the man page", e))?;
            write_stdout(&buf)?;
        }
    }
    Ok(0)
}

/// Writes all of `bytes` to stdout; a reader that went away (`| head`) is not an error.
fn write_stdout(bytes: &[u8]) -> Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(Error::io_op("writing stdout", e)),
        _ => Ok(()),
    }
}
