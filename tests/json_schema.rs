//! Every `--json` output validated against its documented schema (docs/schema/NAME.json, see
//! docs/json.md), on a real store, a mounted workspace and a read-only view: the document, the
//! schemas and the code cannot drift. Also: every command with a `--json` flag has a schema,
//! and every schema is exercised here.

mod support;
use support::*;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/schema")
}

/// Validates `v` against docs/schema/`name`.json; panics naming every violation.
fn validate(name: &str, v: &Value, what: &str) {
    let p = schema_dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let schema: Value = serde_json::from_str(&text).expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema)
        .unwrap_or_else(|e| panic!("{}: not a valid schema: {e}", p.display()));
    let errors: Vec<String> = validator
        .iter_errors(v)
        .map(|e| format!("  at {}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what}: output does not match docs/schema/{name}.json:\n{}\noutput: {}",
        errors.join("\n"),
        serde_json::to_string_pretty(v).unwrap_or_default()
    );
}

/// Runs `ckptfs ARGS --json` (which must exit `code`) and validates stdout against `name`.
fn check_code(code: i32, name: &str, args: &[&str]) -> Value {
    let mut args: Vec<&str> = args.to_vec();
    args.push("--json");
    let o = run(&args);
    let what = describe_output(&format!("ckptfs {}", args.join(" ")), &o);
    assert_eq!(o.status.code(), Some(code), "{what}");
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {what}"));
    validate(name, &v, &format!("ckptfs {}", args.join(" ")));
    v
}

fn check(name: &str, args: &[&str]) -> Value {
    check_code(0, name, args)
}

/// A store with two roots, a labelled first checkpoint, a second one with a changed file, a
/// symlink, a subdirectory and a root xattr.
fn two_root_store() -> (Env, String, String) {
    let env = Env::with_roots(&["ws", "home"], &[]);
    write(&env.root("ws").join("a.txt"), b"one\n");
    write(&env.root("ws").join("src/lib.rs"), b"fn main() {}\n");
    std::os::unix::fs::symlink("a.txt", env.root("ws").join("link")).expect("symlink");
    write(&env.root("home").join(".config/x.json"), b"{}\n");
    xattr::set(env.root("ws"), "user.note", b"root xattr").expect("xattr on the root");
    let c1 = env.capture_id(&["--label", "first", "-m", "one"]);
    write(&env.root("ws").join("a.txt"), b"two\n");
    write(&env.root("ws").join("new.bin"), &random_bytes(1, 10_000));
    let c2 = env.capture_id(&["-m", "two"]);
    (env, c1, c2)
}

#[test]
fn store_commands_match_their_schemas() {
    let (env, c1, c2) = two_root_store();
    let st = env.s();
    let v = check(
        "capture",
        &["capture", &st, "--label", "third", "-m", "three"],
    );
    assert_eq!(v["labels"][0], "third", "{v}");
    // A root's mode is an octal string, as everywhere.
    assert!(v["checkpoint"]["roots"]["ws"]["mode"].is_string(), "{v}");
    let c3 = v["id"].as_str().expect("id").to_string();
    ok(["fork", &st, &c1, "--name", "side"]);
    write(&env.root("ws").join("side.txt"), b"side\n");
    env.capture_id(&["--branch", "side"]);

    check("log", &["log", &st]);
    let g = check("log", &["log", &st, "--graph"]);
    assert!(
        g[0]["graph"]["lanes"].is_string(),
        "--graph --json keeps the graph: {g}"
    );
    check("log", &["log", &st, "--branch", "main", "-n", "1"]);
    let v = check("show", &["show", &st, &c1]);
    assert_eq!(v["checkpoint"]["roots"]["ws"]["mode"], "0755", "{v}");
    check("ls", &["ls", &st, &format!("{c2}:ws/src")]);
    let v = check("ls", &["ls", &st, &format!("{c2}:ws"), "-r"]);
    assert!(
        v.as_array()
            .expect("rows")
            .iter()
            .any(|r| r["type"] == "symlink" && r["target"] == "a.txt"),
        "{v}"
    );
    check("diff", &["diff", &st, &c1, &c2]);
    check("diff", &["diff", &st, &c1, &c2, "--stat"]);
    check("diff", &["diff", &st, &c1, &c2, "--name-status"]);
    check("diff", &["diff", &st, &c1, &c2, "-p"]);
    check("stats", &["stats", &st]);
    check("stats", &["stats", &st, &c2]);
    check("stats", &["stats", &st, "--branch", "side"]);
    let v = check("find", &["find", &st, "*.txt", "ws/src/**"]);
    assert!(!v["paths"].as_array().expect("paths").is_empty(), "{v}");
    let v = check("find-history", &["find", &st, "--history", "ws/a.txt"]);
    assert!(!v["changes"].as_array().expect("changes").is_empty(), "{v}");
    check("find-history", &["find", &st, "--history", "ws/new.bin"]);
    check("branch-list", &["branch", "list", &st, "--all"]);
    check("verify", &["verify", &st]);
    check("doctor", &["doctor", &st]);
    check("recover", &["recover", &st]);

    // Restores: one target, and every root in place ({"restored": [...]}).
    check(
        "restore",
        &[
            "restore",
            &st,
            &c1,
            "--root",
            "ws",
            "--to",
            s(&env.path("out")),
        ],
    );
    check(
        "restore",
        &[
            "restore",
            &st,
            &format!("{c1}:ws/a.txt"),
            "--to",
            s(&env.path("a.txt")),
        ],
    );
    let v = check("restore", &["restore", &st, &c2, "--in-place"]);
    assert_eq!(v["restored"].as_array().map(Vec::len), Some(2), "{v}");

    // Archive and unarchive.
    let file = env.path("all.tar.zst");
    check("archive", &["archive", &st, "--all", "--out", s(&file)]);
    check("unarchive", &["unarchive", s(&file), s(&env.path("copy"))]);

    // Labels, forget, gc (a plan, then done; with policy, pruned checkpoints and paths).
    ok(["label", &st, &c2, "tmp"]);
    let v = check("label-delete", &["label", "delete", &st, "tmp"]);
    assert_eq!(v["checkpoint"], c2.as_str(), "{v}");
    check("forget", &["forget", &st, &c2, "--dry-run"]);
    let v = check("gc", &["gc", &st, "--keep-last", "1", "--dry-run"]);
    assert!(
        v["kept"].get("branch_head").is_some(),
        "reasons are identifiers: {v}"
    );
    assert!(!v["pruned"].as_array().expect("pruned").is_empty(), "{v}");
    check("gc", &["gc", &st, "--keep-last", "1"]);
    // A later capture keeps c3's line going; forget c3 with --prune (it has a label: delete it).
    write(&env.root("ws").join("later.txt"), b"later\n");
    env.capture_id(&[]);
    ok(["label", "delete", &st, "third"]);
    let v = check("forget", &["forget", &st, &c3, "--prune"]);
    assert!(v["gc"].is_object(), "{v}");
}

#[test]
fn findings_match_their_schemas() {
    let (env, _c1, _c2) = two_root_store();
    // Truncate one chunk object: verify and doctor both find it (exit 1, JSON on stdout).
    let (hex, _) = env
        .objects()
        .into_iter()
        .max_by_key(|(_, size)| *size)
        .expect("objects");
    let p = env.object_file(&hex.replace('/', ""));
    let mut perm = std::fs::metadata(&p).expect("object").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o644);
    std::fs::set_permissions(&p, perm).expect("chmod");
    std::fs::write(&p, b"short").expect("truncate object");
    let v = check_code(1, "verify", &["verify", &env.s()]);
    assert!(
        !v["findings"].as_array().expect("findings").is_empty(),
        "{v}"
    );
    let v = check_code(1, "doctor", &["doctor", &env.s()]);
    assert!(
        !v["findings"].as_array().expect("findings").is_empty(),
        "{v}"
    );
}

#[test]
fn workspace_and_view_commands_match_their_schemas() {
    let ws = Workspace::new(|room| {
        write(&room.join("a.txt"), b"a\n");
        write(&room.join("d/b.txt"), b"b\n");
    });
    let st = ws.store().to_string();
    // mount --json (a second mount of a new branch at another place).
    ok(["fork", &st, "main", "--name", "other"]);
    let other = ws.tmp.path().join("other");
    let v = check(
        "mount",
        &[
            "mount",
            &st,
            "--branch",
            "other",
            "--at",
            s(&other),
            "--relocate",
        ],
    );
    assert_eq!(v["branch"], "other", "{v}");
    let _other_guard = MountGuard::new(&other);
    write(&ws.path("a.txt"), b"changed\n");
    write(&ws.path("new.txt"), b"new\n");
    // A read-only view too, so status lists both kinds.
    let view = ws.tmp.path().join("view");
    std::fs::create_dir(&view).expect("mkdir view");
    ok(["mount", &st, "main", s(&view)]);
    let _view_guard = MountGuard::new(&view);
    let v = check("status", &["status", &st]);
    let kinds: BTreeSet<&str> = v
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["kind"].as_str())
        .collect();
    assert!(kinds.contains("workspace") && kinds.contains("view"), "{v}");
    check("status", &["status", ws.room()]);
    let v = check(
        "checkpoint",
        &["checkpoint", ws.room(), "-m", "turn", "--label", "t1"],
    );
    assert_eq!(v["labels"][0], "t1", "{v}");
    assert!(v["checkpoint"]["roots"]["ws"]["mode"].is_string(), "{v}");
    write(&ws.path("dirty.txt"), b"dirty\n");
    ok(["fork", &st, "main", "--name", "third"]);
    check(
        "switch",
        &["switch", ws.room(), "--to", "third", "--checkpoint-first"],
    );
    check("branch-list", &["branch", "list", &st]);
    ok(["umount", s(&view)]);
    ok(["umount", s(&other)]);
}

/// The subcommands (as `a b` for nested ones) whose help lists a `--json` option.
fn commands_with_json() -> BTreeSet<String> {
    fn subcommands(help: &str) -> Vec<String> {
        help.lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|c| *c != "help")
            .map(str::to_string)
            .collect()
    }
    let mut out = BTreeSet::new();
    for c in subcommands(&ok(["--help"])) {
        let help = ok([c.as_str(), "--help"]);
        let nested = subcommands(&help);
        for sub in &nested {
            let h = ok([c.as_str(), sub.as_str(), "--help"]);
            if h.lines().any(|l| l.trim_start().starts_with("--json")) {
                out.insert(format!("{c} {sub}"));
            }
        }
        if help.lines().any(|l| l.trim_start().starts_with("--json")) {
            out.insert(c);
        }
    }
    out
}

#[test]
fn every_json_command_has_a_schema_and_every_schema_a_command() {
    let schemas: BTreeSet<String> = std::fs::read_dir(schema_dir())
        .expect("docs/schema")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".json").map(str::to_string)
        })
        .collect();
    let doc = std::fs::read_to_string(schema_dir().join("../json.md")).expect("docs/json.md");
    for c in commands_with_json() {
        let name = c.replace(' ', "-");
        assert!(
            schemas.contains(&name),
            "`ckptfs {c} --json` has no schema docs/schema/{name}.json (add it to docs/schema/gen.py)"
        );
        assert!(
            doc.contains(&format!("### `{c}")),
            "docs/json.md has no section for `{c}`"
        );
    }
    // Every schema file is valid JSON Schema and documented.
    for name in &schemas {
        let text =
            std::fs::read_to_string(schema_dir().join(format!("{name}.json"))).expect("schema");
        let schema: Value = serde_json::from_str(&text).expect("schema is JSON");
        jsonschema::validator_for(&schema)
            .unwrap_or_else(|e| panic!("docs/schema/{name}.json is not a valid schema: {e}"));
        assert!(
            doc.contains(&format!("(schema/{name}.json)")),
            "docs/json.md does not link docs/schema/{name}.json"
        );
    }
}

#[test]
fn every_schema_is_exercised() {
    // The schemas the tests above validate against (kept in step with them by hand): a new
    // schema file must be exercised there too.
    let used = [
        "archive",
        "branch-list",
        "capture",
        "checkpoint",
        "diff",
        "doctor",
        "find",
        "find-history",
        "forget",
        "gc",
        "label-delete",
        "log",
        "ls",
        "mount",
        "recover",
        "restore",
        "show",
        "stats",
        "status",
        "switch",
        "unarchive",
        "verify",
    ];
    let schemas: BTreeSet<String> = std::fs::read_dir(schema_dir())
        .expect("docs/schema")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".json").map(str::to_string)
        })
        .collect();
    let used: BTreeSet<String> = used.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        schemas, used,
        "a schema in docs/schema/ is not exercised by tests/json_schema.rs, or a listed one is missing"
    );
}
