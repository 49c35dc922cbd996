//! Exclude rules: which paths of a root are never captured (STORE.json's per-root `exclude`,
//! plus `capture --exclude`).
//!
//! A pattern without `/` matches a name at any depth (`*.pem`, `node_modules`); a pattern with
//! `/` matches the path from the root (`cache/tmp/**`; a leading `/` is dropped, and `**/`
//! matches any number of directories, none included: `**/.aws/credentials`). `*` never
//! crosses a `/`, and `\` escapes.
//!
//! A pattern starting with `!` is a keep rule: what it matches is not excluded, whatever other
//! rule matches it (`.env.*` with `!.env.example`). Order does not matter. A keep rule cannot
//! bring back an entry inside an excluded directory (the directory is never walked); to
//! exclude a file literally named `!x`, write `\!x`. This is also how one of the default
//! credential rules (`store::DEFAULT_EXCLUDES`) is switched off for a root without editing
//! them out.
//!
//! The same rules apply to a plain capture and to the merge of a workspace's upper layer;
//! `Store::init` compiles them to reject a bad pattern early.

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
    /// Keep rules (`!GLOB`), split the same way.
    keep_names: GlobSet,
    keep_paths: GlobSet,
}

impl Excluder {
    /// Compiles the exclude globs of root `root` (named in errors).
    ///
    /// # Errors
    /// `Usage` naming the root and the pattern for a glob that does not parse.
    pub fn compile(root: &str, patterns: &[String]) -> Result<Excluder> {
        let mut names = GlobSetBuilder::new();
        let mut paths = GlobSetBuilder::new();
        let mut keep_names = GlobSetBuilder::new();
        let mut keep_paths = GlobSetBuilder::new();
        for p in patterns {
            let (keep, rule) = match p.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, p.as_str()),
            };
            let anchored = rule.contains('/');
            let pat = rule.trim_start_matches('/');
            if pat.is_empty() {
                return Err(Error::Usage(format!(
                    "root {root}: empty exclude pattern {p:?}"
                )));
            }
            let glob = GlobBuilder::new(pat)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| {
                    Error::Usage(format!("root {root}: bad exclude pattern {p:?}: {e}"))
                })?;
            match (keep, anchored) {
                (false, true) => paths.add(glob),
                (false, false) => names.add(glob),
                (true, true) => keep_paths.add(glob),
                (true, false) => keep_names.add(glob),
            };
        }
        let build = |b: GlobSetBuilder| {
            b.build()
                .map_err(|e| Error::Usage(format!("root {root}: bad exclude patterns: {e}")))
        };
        Ok(Excluder {
            names: build(names)?,
            paths: build(paths)?,
            keep_names: build(keep_names)?,
            keep_paths: build(keep_paths)?,
        })
    }

    /// Whether the entry `name` at `rel` (its path from the root) is excluded: an exclude
    /// rule matches it and no keep rule does.
    pub fn excluded(&self, rel: &Path, name: &OsStr) -> bool {
        (self.names.is_match(name) || self.paths.is_match(rel))
            && !(self.keep_names.is_match(name) || self.keep_paths.is_match(rel))
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

    fn excluder(rules: &[&str]) -> impl Fn(&str) -> bool {
        let rules: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
        let x = Excluder::compile("r", &rules).unwrap();
        move |rel: &str| {
            let p = Path::new(rel);
            x.excluded(p, p.file_name().unwrap())
        }
    }

    #[test]
    fn keep_rules_win_over_exclude_rules_in_any_order() {
        let hit = excluder(&[
            "!.env.example",
            ".env.*",
            ".env",
            "!**/.ssh/*.pub",
            "**/.ssh/id_*",
        ]);
        assert!(hit(".env"));
        assert!(hit("app/.env.local"));
        assert!(!hit("app/.env.example"));
        assert!(hit(".ssh/id_ed25519"));
        assert!(hit("home/u/.ssh/id_ecdsa_sk"));
        assert!(!hit(".ssh/id_ed25519.pub"));
        assert!(!hit("home/u/.ssh/id_rsa-cert.pub"));
        assert!(!hit("src/id_map.rs"));
        // A literal `!` is escaped.
        let hit = excluder(&["\\!odd"]);
        assert!(hit("a/!odd"));
    }

    #[test]
    fn default_rules_match_what_tools_write_and_spare_look_alikes() {
        let rules: Vec<&str> = crate::store::DEFAULT_EXCLUDES
            .iter()
            .map(|d| d.glob)
            .collect();
        let hit = excluder(&rules);
        for secret in [
            ".aws/credentials",
            "u/.aws/sso/cache",
            ".config/gcloud/credentials.db",
            ".config/gcloud/legacy_credentials",
            "x/application_default_credentials.json",
            ".azure/msal_token_cache.json",
            ".netrc",
            "deep/er/.git-credentials",
            ".config/gh/hosts.yml",
            ".ssh/id_ed25519",
            "proj/.env",
            "proj/.env.production",
            ".npmrc",
            ".docker/config.json",
            ".kube/config",
            ".vault-token",
            ".terraform.d/credentials.tfrc.json",
            "tls/server.key",
            "certs/privkey.pem",
            "certs/localhost-key.pem",
            "auth.json",
            "home/.codex/auth.json",
            ".claude/.credentials.json",
        ] {
            assert!(hit(secret), "{secret} is not excluded");
        }
        for ordinary in [
            ".aws/config",
            ".ssh/id_ed25519.pub",
            ".ssh/known_hosts",
            "proj/.env.example",
            "venv/lib/certifi/cacert.pem",
            "certs/localhost.pem",
            "src/auth.json",
            "src/id_map.rs",
            ".config/gcloud/configurations/config_default",
            "kube/config",
        ] {
            assert!(!hit(ordinary), "{ordinary} is excluded");
        }
    }

    #[test]
    fn a_bad_pattern_names_the_root() {
        let e = Excluder::compile("home", &["a[".to_string()]).unwrap_err();
        assert!(e.to_string().contains("root home"), "{e}");
    }
}
