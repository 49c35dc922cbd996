//! `log --graph` against real git: histories of forks, merges and octopus merges built twice,
//! as checkpoint records and as git commits of the same shape and times, must draw the same
//! lane characters line for line (`git log --graph --date-order --all`: our `log` lists
//! every checkpoint newest first). Also `fork --count` and `branch list --tree`.

use std::path::Path;
use std::process::Command;

use crate::support::*;
use ckptfs::id::ObjectId;

const SEC: i64 = 1_000_000_000;
const T0: i64 = 1_796_112_000;

/// A history: each commit's parents (indexes of earlier commits), in the order made.
type Shape = Vec<Vec<usize>>;

/// The lane characters of a graph line and what follows them: `*`-lines keep their last word
/// (the message, `cN`), the others nothing; right-trimmed.
fn normalized(line: &str) -> String {
    let lanes: String = line
        .chars()
        .take_while(|c| "*|/\\_-. ".contains(*c))
        .collect();
    if lanes.contains('*') {
        let msg = line.rsplit(' ').next().unwrap_or("");
        format!("{lanes}{msg}")
    } else {
        lanes.trim_end().to_string()
    }
}

/// `shape` as checkpoint records at times T0+1s, T0+2s, ... with messages c0, c1, ...
fn ckptfs_graph(shape: &Shape, extra: &[&str]) -> (Env, Vec<String>) {
    let env = Env::new();
    small_tree(env.ws());
    let first = env.capture_id(&[]);
    let store = ckptfs::Store::open(&env.store).expect("open");
    let base = store
        .read_checkpoint(&ObjectId::parse(&first).expect("id"))
        .expect("record");
    let mut ids: Vec<ObjectId> = Vec::new();
    for (i, parents) in shape.iter().enumerate() {
        let mut c = base.clone();
        c.parents = parents.iter().map(|p| ids[*p]).collect();
        c.time_ns = (T0 + 1 + i as i64) * SEC;
        c.message = format!("c{i}");
        ids.push(store.write_checkpoint(&c).expect("write record"));
    }
    std::fs::remove_file(env.store.join("checkpoints").join(&first)).expect("rm first");
    let mut args = vec!["log".to_string(), env.s(), "--graph".into()];
    args.extend(extra.iter().map(|a| a.to_string()));
    let lines = ok(&args).lines().map(normalized).collect();
    (env, lines)
}

/// `shape` as git commits (empty trees) at the same times, every one named by a tag.
fn git_graph(shape: &Shape) -> Vec<String> {
    let dir = tempdir();
    let d = dir.path();
    git(d, &["init", "-q"]);
    let empty = git(d, &["hash-object", "-t", "tree", "/dev/null"])
        .trim()
        .to_string();
    let mut ids: Vec<String> = Vec::new();
    for (i, parents) in shape.iter().enumerate() {
        let date = format!("@{} +0000", T0 + 1 + i as i64);
        let mut cmd = Command::new("git");
        cmd.arg("-C")
            .arg(d)
            .args(["commit-tree", &empty, "-m", &format!("c{i}")]);
        for p in parents {
            cmd.args(["-p", &ids[*p]]);
        }
        let o = cmd
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .env("GIT_AUTHOR_DATE", &date)
            .env("GIT_COMMITTER_DATE", &date)
            .output()
            .expect("git commit-tree");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let id = String::from_utf8_lossy(&o.stdout).trim().to_string();
        git(d, &["tag", &format!("c{i}"), &id]);
        ids.push(id);
    }
    git(
        d,
        &["log", "--graph", "--date-order", "--all", "--format=%s"],
    )
    .lines()
    .map(normalized)
    .collect()
}

fn assert_same_graph(shape: &Shape, what: &str) {
    let (_env, ours) = ckptfs_graph(shape, &[]);
    let theirs = git_graph(shape);
    assert_eq!(
        ours,
        theirs,
        "{what}: shape {shape:?}\nours:\n{}\ngit:\n{}",
        ours.join("\n"),
        theirs.join("\n")
    );
}

#[test]
fn forks_and_merges_draw_as_git_draws_them() {
    let cases: Vec<(&str, Shape)> = vec![
        ("a line", vec![vec![], vec![0], vec![1]]),
        ("a fork", vec![vec![], vec![0], vec![0]]),
        ("two forks of one", vec![vec![], vec![0], vec![0], vec![0]]),
        (
            "a merge of a side branch",
            vec![vec![], vec![0], vec![0], vec![1, 2]],
        ),
        (
            "a merge with a lane to its right",
            vec![vec![], vec![0], vec![0], vec![0], vec![1, 2], vec![4]],
        ),
        (
            "a merge whose second parent is left of it",
            vec![vec![], vec![0], vec![0], vec![2], vec![1, 3], vec![2]],
        ),
        (
            "an octopus merge",
            vec![vec![], vec![0], vec![0], vec![0], vec![1, 2, 3]],
        ),
        (
            "criss-cross merges",
            vec![vec![], vec![0], vec![0], vec![1, 2], vec![2, 1]],
        ),
        ("two roots", vec![vec![], vec![], vec![0], vec![1]]),
    ];
    for (what, shape) in &cases {
        assert_same_graph(shape, what);
    }
}

/// A small deterministic generator (no dependency): xorshift64.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A random history of `n` commits: extensions of branch tips, forks of any commit, merges
/// of two tips (sometimes three), now and then a new root.
fn random_shape(rng: &mut Rng, n: usize) -> Shape {
    let mut shape: Shape = vec![vec![]];
    let mut tips = vec![0];
    for i in 1..n {
        let r = rng.below(100);
        let parents = if r < 4 {
            tips.push(i);
            vec![]
        } else if r < 24 {
            let from = rng.below(i);
            tips.push(i);
            vec![from]
        } else if r < 44 && tips.len() >= 2 {
            let a = rng.below(tips.len());
            let mut b = rng.below(tips.len() - 1);
            if b >= a {
                b += 1;
            }
            let mut ps = vec![tips[a], tips[b]];
            if r < 28 && tips.len() >= 3 {
                let c = (0..tips.len()).find(|&c| c != a && c != b).unwrap_or(a);
                ps.push(tips[c]);
            }
            tips[a] = i;
            if rng.below(2) == 0 {
                tips.retain(|t| !ps[1..].contains(t));
            }
            ps
        } else {
            let t = rng.below(tips.len());
            let p = tips[t];
            tips[t] = i;
            vec![p]
        };
        shape.push(parents);
    }
    shape
}

#[test]
fn random_histories_draw_as_git_draws_them() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for seed in 0..25 {
        let n = 6 + rng.below(20);
        let shape = random_shape(&mut rng, n);
        assert_same_graph(&shape, &format!("random history {seed}"));
    }
}

#[test]
fn a_branch_graph_is_one_lane_of_first_parents() {
    // c3 merges c1 (first parent) and c2; on one branch's line the second parent is not
    // drawn and no lane is left open.
    let env = Env::new();
    small_tree(env.ws());
    env.capture_id(&["-m", "base"]);
    ok(["fork", &env.s(), "main", "side"]);
    write(&env.ws().join("a.txt"), b"main\n");
    env.capture_id(&["-m", "on-main"]);
    write(&env.ws().join("b.txt"), b"side\n");
    env.capture_id(&["-b", "side", "-m", "on-side"]);
    ok(["merge", &env.s(), "side", "--into", "main", "--no-ff"]);
    let all = ok(["log", &env.s(), "--graph"]);
    let lines: Vec<&str> = all.lines().collect();
    assert!(lines[0].starts_with("*   ") && lines[1] == "|\\", "{all}");
    assert!(all.lines().any(|l| l == "|/"), "{all}");
    let line = ok(["log", &env.s(), "--graph", "--branch", "main"]);
    assert_eq!(line.lines().count(), 3, "{line}");
    assert!(line.lines().all(|l| l.starts_with("* ")), "{line}");
    let v = ok_json(["log", &env.s(), "--graph", "--branch", "main", "--json"]);
    for r in v.as_array().expect("rows") {
        assert_eq!(r["graph"]["column"], 0, "{v}");
        assert_eq!(r["graph"]["below"], serde_json::json!([]), "{v}");
    }
}

fn branches(store: &Path) -> Vec<String> {
    ok_json(["branch", "list", s(store)])
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["name"].as_str().expect("name").to_string())
        .collect()
}

#[test]
fn fork_count_makes_every_branch_or_none() {
    let env = Env::new();
    small_tree(env.ws());
    let c = env.capture_id(&["-m", "base"]);
    let out = ok(["fork", &env.s(), "main", "try", "--count", "3"]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        (1..=3)
            .map(|i| format!("branch try-{i} forked from {}", &c[..12]))
            .collect::<Vec<_>>(),
        "{out}"
    );
    assert_eq!(branches(&env.store), ["main", "try-1", "try-2", "try-3"]);
    for b in ["try-1", "try-2", "try-3"] {
        assert_eq!(head(&env.store, b).as_deref(), Some(c.as_str()), "{b}");
    }
    // try-1 .. try-3 exist: nothing is made, and the error names the first.
    let err = fails(1, ["fork", &env.s(), "main", "try", "--count", "5"]);
    assert!(err.contains("try-1"), "{err}");
    ok(["branch", "delete", &env.s(), "try-1"]);
    let err = fails(1, ["fork", &env.s(), "main", "try", "--count", "5"]);
    assert!(err.contains("branch try-2 already exists"), "{err}");
    assert!(!branches(&env.store).contains(&"try-1".to_string()));
    ok(["fork", &env.s(), "main", "try-1"]);
    // A label in the way too.
    ok(["label", &env.s(), "main", "x-2"]);
    let err = fails(1, ["fork", &env.s(), "main", "x", "--count", "2"]);
    assert!(err.contains("x-2") && err.contains("label"), "{err}");
    assert_eq!(branches(&env.store), ["main", "try-1", "try-2", "try-3"]);
    for bad in ["0", "65"] {
        let err = fails(2, ["fork", &env.s(), "main", "y", "--count", bad]);
        assert!(err.contains("--count"), "{bad}: {err}");
    }
    ok(["fork", &env.s(), "main", "many", "--count", "64"]);
    assert_eq!(branches(&env.store).len(), 4 + 64);
    // Without --count, as before.
    let out = ok(["fork", &env.s(), "main", "plain"]);
    assert_eq!(out.trim(), format!("branch plain forked from {}", &c[..12]));
    // One audited mutation for the whole fork.
    let audit = std::fs::read_to_string(env.store.join("audit.jsonl")).expect("audit");
    let forks: Vec<&str> = audit
        .lines()
        .filter(|l| l.contains("\"op\":\"fork\"") && l.contains("many-1"))
        .collect();
    assert_eq!(forks.len(), 1, "{audit}");
}

#[test]
fn fork_count_interrupted_anywhere_leaves_all_or_none_after_recover() {
    let env = Env::new();
    small_tree(env.ws());
    env.capture_id(&["-m", "base"]);
    let args = ["fork", &env.s(), "main", "try", "--count", "4"];
    let steps = io_steps(args);
    assert!(steps >= 4, "{steps}");
    for i in 1..=4 {
        ok(["branch", "delete", &env.s(), &format!("try-{i}")]);
    }
    for n in 1..=steps {
        let o = run_fault(args, "abort", n);
        assert!(!o.status.success(), "step {n}: {}", stderr(&o));
        ok(["recover", &env.s()]);
        let made: Vec<String> = branches(&env.store)
            .into_iter()
            .filter(|b| b.starts_with("try-"))
            .collect();
        // The old state, or (killed once the fork was complete) the new one.
        assert!(made.is_empty() || made.len() == 4, "step {n}: {made:?}");
        ok(["verify", &env.s()]);
        for b in made {
            ok(["branch", "delete", &env.s(), &b]);
        }
    }
    ok(args);
    assert_eq!(branches(&env.store).len(), 5);
}

#[test]
fn branch_tree_shows_forks_and_merges() {
    let env = Env::new();
    small_tree(env.ws());
    let base = env.capture_id(&["-m", "base"]);
    ok(["fork", &env.s(), "main", "try", "--count", "2"]);
    write(&env.ws().join("b.txt"), b"try\n");
    let t1 = env.capture_id(&["-b", "try-1", "-m", "t1"]);
    ok(["fork", &env.s(), "try-1", "deeper"]);
    write(&env.ws().join("a.txt"), b"main\n");
    env.capture_id(&["-m", "m1"]);
    ok(["merge", &env.s(), "try-1", "--into", "main"]);
    let merge = head(&env.store, "main").expect("main head");
    let tree = ok(["branch", "list", &env.s(), "--tree"]);
    let lines: Vec<&str> = tree.lines().collect();
    assert_eq!(lines.len(), 4, "{tree}");
    assert!(lines[0].starts_with("main "), "{tree}");
    assert!(
        lines[1].starts_with("|-- try-1 ")
            && lines[1].contains(&format!("forked from main at {}", &base[..12]))
            && lines[1].contains(&format!("merged into main at {}", &merge[..12])),
        "{tree}"
    );
    assert!(
        lines[2].starts_with("|   `-- deeper ")
            && lines[2].contains(&format!("forked from try-1 at {}", &t1[..12]))
            && !lines[2].contains("merged"),
        "{tree}"
    );
    assert!(
        lines[3].starts_with("`-- try-2 ") && !lines[3].contains("merged"),
        "{tree}"
    );
    // An archived branch is left out unless --all; its children then hang from the root.
    ok(["branch", "archive", &env.s(), "try-1"]);
    let tree = ok(["branch", "list", &env.s(), "--tree"]);
    assert!(tree.lines().any(|l| l.starts_with("deeper ")), "{tree}");
    let tree = ok(["branch", "list", &env.s(), "--tree", "--all"]);
    assert!(
        tree.contains("try-1 ") && tree.contains("archived"),
        "{tree}"
    );
}
