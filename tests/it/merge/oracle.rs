//! git as the oracle for text: the same three versions of each file through
//! `git merge-file -p` give the same merged bytes for clean merges, the same set of conflicted
//! files, and with `--take ours|theirs` what `git merge-file --ours|--theirs` gives.

use crate::support::*;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// A deterministic generator (xorshift), so a failure names a reproducible case.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A text of `n` lines, a few of them repeated (blank lines, braces), as in code.
fn text(rng: &mut Rng, n: u64) -> Vec<String> {
    (0..n)
        .map(|_| match rng.below(8) {
            0 => "}".to_string(),
            _ => format!("line {}", rng.below(100_000)),
        })
        .collect()
}

/// A few edits: lines replaced, inserted or deleted.
fn edit(rng: &mut Rng, lines: &[String], tag: &str) -> Vec<String> {
    let mut out = lines.to_vec();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(out.len() as u64 + 1) as usize;
        match rng.below(3) {
            0 if at < out.len() => out[at] = format!("{tag} {}", rng.below(1000)),
            1 => out.insert(at, format!("{tag} new {}", rng.below(1000))),
            _ if at < out.len() => {
                out.remove(at);
            }
            _ => out.push(format!("{tag} end")),
        }
    }
    out
}

fn joined(lines: &[String]) -> Vec<u8> {
    lines
        .iter()
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .into_bytes()
}

/// `git merge-file -p [FLAG]` of three versions; (merged bytes, clean).
fn git_merge(dir: &Path, b: &[u8], o: &[u8], t: &[u8], flag: Option<&str>) -> (Vec<u8>, bool) {
    for (n, d) in [("b", b), ("o", o), ("t", t)] {
        fs::write(dir.join(n), d).expect("write version");
    }
    let mut c = Command::new("git");
    c.arg("merge-file").arg("-p");
    if let Some(f) = flag {
        c.arg(f);
    }
    let out = c
        .args(["-L", "ours", "-L", "base", "-L", "theirs", "o", "b", "t"])
        .current_dir(dir)
        .output()
        .expect("git merge-file");
    let code = out.status.code().expect("exit code");
    assert!((0..127).contains(&code), "git merge-file failed: {out:?}");
    (out.stdout, code == 0)
}

#[test]
fn text_merges_match_git_merge_file() {
    let env = Env::new();
    let scratch = env.path("git");
    fs::create_dir(&scratch).expect("mkdir");
    let mut rng = Rng(0x5eed_cafe);
    let n = 60;
    let mut versions = Vec::new();
    for i in 0..n {
        let len = 4 + rng.below(20);
        let base = text(&mut rng, len);
        let ours = edit(&mut rng, &base, "ours");
        let theirs = edit(&mut rng, &base, "theirs");
        versions.push((
            format!("f{i:02}.txt"),
            joined(&base),
            joined(&ours),
            joined(&theirs),
        ));
    }
    let put = |which: usize| {
        for v in &versions {
            let data = match which {
                0 => &v.1,
                1 => &v.2,
                _ => &v.3,
            };
            write(&env.ws().join(&v.0), data);
        }
    };
    put(0);
    env.capture_id(&[]);
    ok(["fork", &env.s(), "main", "feat"]);
    put(1);
    env.capture_id(&[]);
    put(2);
    env.capture_id(&["-b", "feat"]);

    let plan = run(["merge", &env.s(), "feat", "--dry-run", "--json"]);
    let plan: Value = serde_json::from_slice(&plan.stdout).expect("plan json");
    let ours_conflicts: BTreeSet<String> = plan["conflicts"]
        .as_array()
        .expect("conflicts")
        .iter()
        .map(|c| {
            c["path"]
                .as_str()
                .expect("path")
                .trim_start_matches("ws/")
                .to_string()
        })
        .collect();
    let mut git_conflicts = BTreeSet::new();
    for (name, b, o, t) in &versions {
        if o == t || b == o || b == t || (o.starts_with(b) && t.starts_with(b)) {
            continue;
        }
        if !git_merge(&scratch, b, o, t, None).1 {
            git_conflicts.insert(name.clone());
        }
    }
    assert_eq!(ours_conflicts, git_conflicts, "the same files conflict");
    assert!(
        !git_conflicts.is_empty() && git_conflicts.len() < n,
        "a mix of both"
    );

    // Keep their side of each conflicting hunk: compare every file with git's --theirs.
    ok(["merge", &env.s(), "feat", "--take", "theirs"]);
    for (name, b, o, t) in &versions {
        let want = if o == t || b == t {
            o.clone()
        } else if b == o {
            t.clone()
        } else if o.starts_with(b) && t.starts_with(b) {
            // Appended to on both sides: the append driver, not a text merge (git would
            // report a conflict at the end of the file).
            [&o[..], &t[b.len()..]].concat()
        } else {
            git_merge(&scratch, b, o, t, Some("--theirs")).0
        };
        let got = run(["cat", &env.s(), &format!("main:ws/{name}")]).stdout;
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "{name} differs from git merge-file"
        );
    }
}
