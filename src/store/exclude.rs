//! Exclude rules: which paths of a root are never captured (STORE.json's per-root `exclude`,
//! plus `capture --exclude`).
//!
//! A pattern without `/` matches a name at any depth (`*.pem`, `node_modules`); a pattern with
//! `/` matches the path from the root (`cache/tmp/**`; a leading `/` is dropped). `*` never
//! crosses a `/`, and `\` escapes. The same rules apply to a plain capture and to the merge of
//! a workspace's upper layer; `Store::init` compiles them to reject a bad pattern early.

use std::ffi::OsStr;
use std::path::Path;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::error::{Error, Result};

/// Compiled exclude rules of one root.
#[derive(Clone, Debug)]
pub struct Excluder {
    /// Patterns without `/`: matched against the entry's name.
    names: GlobSet,
    /// Patterns with `/`: matched against the path from the root.
    paths: GlobSet,
}

impl Excluder {
    /// Compiles the exclude globs of root `root` (named in errors).
    ///
    /// # Errors
    /// `Usage` naming the root and the pattern for a glob that does not parse.
    pub fn compile(root: &str, patterns: &[String]) -> Result<Excluder> {
        let mut names = GlobSetBuilder::new();
        let mut paths = GlobSetBuilder::new();
        for p in patterns {
            let anchored = p.contains('/');
            let pat = p.trim_start_matches('/');
            let glob = GlobBuilder::new(pat)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| {
                    Error::Usage(format!("root {root}: bad exclude pattern {p:?}: {e}"))
                })?;
            if anchored {
                paths.add(glob);
            } else {
                names.add(glob);
            }
        }
        let build = |b: GlobSetBuilder| {
            b.build()
                .map_err(|e| Error::Usage(format!("root {root}: bad exclude patterns: {e}")))
        };
        Ok(Excluder {
            names: build(names)?,
            paths: build(paths)?,
        })
    }

    /// Whether the entry `name` at `rel` (its path from the root) is excluded.
    pub fn excluded(&self, rel: &Path, name: &OsStr) -> bool {
        self.names.is_match(name) || self.paths.is_match(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_anywhere_paths_from_the_root() {
        let rules = ["*.pem".to_string(), "/cache/tmp/**".to_string()];
        let x = Excluder::compile("r", &rules).unwrap();
        let hit = |rel: &str| {
            let p = Path::new(rel);
            x.excluded(p, p.file_name().unwrap())
        };
        assert!(hit("a/b/key.pem"));
        assert!(hit("cache/tmp/x/y"));
        assert!(!hit("a/cache/tmp/x"));
        assert!(!hit("a/pem"));
    }

    #[test]
    fn a_bad_pattern_names_the_root() {
        let e = Excluder::compile("home", &["a[".to_string()]).unwrap_err();
        assert!(e.to_string().contains("root home"), "{e}");
    }
}
