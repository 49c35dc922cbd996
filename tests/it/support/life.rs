//! Where a store keeps its mounts (`/run/ckptfs/<id>/`, outside the store: see
//! docs/workspaces.md), and the processes the workspace lifecycle tests leave inside a tree.

use std::path::{Path, PathBuf};

use sha2::Digest;

/// `/run/ckptfs/<id>/` of the store at `store` (an absolute path, as the store records it).
pub fn store_mounts_dir(store: &Path) -> PathBuf {
    let hex = format!(
        "{:x}",
        sha2::Sha256::digest(store.as_os_str().as_encoded_bytes())
    );
    Path::new("/run/ckptfs").join(&hex[..16])
}

/// The directory the store's workspaces stack on (its lower view).
pub fn lower_view(store: &Path) -> PathBuf {
    store_mounts_dir(store).join("lower")
}

/// The old overlays a switch or a fold set aside.
pub fn detached_dir(store: &Path) -> PathBuf {
    store_mounts_dir(store).join("detached")
}

/// A shell with its cwd in `dir`, driven line by line: each line sent is run by `sh`, and
/// its stdout and stderr come back up to a `--done--` line. Killed on drop.
pub struct InsideShell {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl InsideShell {
    pub fn start(dir: &Path) -> InsideShell {
        InsideShell::spawn(std::process::Command::new("sh"), dir)
    }

    /// As [`InsideShell::start`], the shell running as `nobody` (an agent that is not root).
    pub fn start_as_nobody(dir: &Path) -> InsideShell {
        InsideShell::spawn(super::hostile::nobody_command(&["sh"]), dir)
    }

    fn spawn(mut c: std::process::Command, dir: &Path) -> InsideShell {
        let mut child = c
            .current_dir(dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("sh starts");
        let out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut sh = InsideShell { child, out };
        assert_eq!(sh.run("pwd -P >/dev/null; echo ready"), "ready\n");
        sh
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Runs `line` (stderr folded into stdout) and returns its output.
    pub fn run(&mut self, line: &str) -> String {
        use std::io::{BufRead, Write};
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{{ {line} ; }} 2>&1; echo --done--").expect("write to sh");
        stdin.flush().expect("flush");
        let mut all = String::new();
        loop {
            let mut l = String::new();
            if self.out.read_line(&mut l).expect("read sh") == 0 || l == "--done--\n" {
                return all;
            }
            all.push_str(&l);
        }
    }
}

impl Drop for InsideShell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
