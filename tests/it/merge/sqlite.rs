//! SQLite databases merged row by row through the binary, built and read with the real
//! `sqlite3`: different rows and tables both land; the same row changed both ways is one
//! conflict naming table and key; `--take` picks a side per row; a WAL database's `-wal` is
//! replayed and leaves the merged tree.

use std::path::Path;
use std::process::Command;

use crate::support::*;

fn sql(db: &Path, script: &str) -> String {
    let o = Command::new("sqlite3")
        .arg(db)
        .arg(script)
        .output()
        .expect("sqlite3");
    assert!(
        o.status.success(),
        "sqlite3 {script}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A store whose `main` and `feat` changed the room's database: `ours` and `theirs` are SQL
/// run on each side from the same base.
fn diverged(ours: &str, theirs: &str, wal: bool) -> Env {
    let env = Env::new();
    let db = env.ws().join("state.db");
    let mode = if wal { "PRAGMA journal_mode=WAL;" } else { "" };
    sql(
        &db,
        &format!(
            "{mode} CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, n INT);
             CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT);
             INSERT INTO items VALUES (1,'one',1),(2,'two',2),(3,'three',3);"
        ),
    );
    env.capture_id(&[]);
    ok(["fork", &env.s(), "main", "feat"]);
    let base = env.path("base.db");
    std::fs::copy(&db, &base).expect("keep the base");
    sql(&db, ours);
    env.capture_id(&[]);
    std::fs::copy(&base, &db).expect("back to the base");
    let _ = std::fs::remove_file(env.ws().join("state.db-wal"));
    sql(&db, theirs);
    env.capture_id(&["-b", "feat"]);
    env
}

fn merged_rows(env: &Env, query: &str) -> String {
    let out = env.path("merged.db");
    let o = run(["cat", &env.s(), "main:ws/state.db"]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(&out, &o.stdout).expect("write merged db");
    assert_eq!(sql(&out, "PRAGMA integrity_check;").trim(), "ok");
    sql(&out, query)
}

#[test]
fn rows_and_tables_changed_on_each_side_all_land() {
    let env = diverged(
        "UPDATE items SET n=10 WHERE id=1; INSERT INTO items VALUES (4,'ours',4);",
        "UPDATE items SET name='TWO' WHERE id=2; INSERT INTO notes VALUES (1,'theirs'); DELETE FROM items WHERE id=3;",
        false,
    );
    let o = run(["merge", &env.s(), "feat", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("\"driver\": \"sqlite\""),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        merged_rows(
            &env,
            "SELECT id,name,n FROM items ORDER BY id; SELECT * FROM notes;"
        ),
        "1|one|10\n2|TWO|2\n4|ours|4\n1|theirs\n"
    );
    ok(["verify", &env.s()]);
}

#[test]
fn the_same_row_changed_both_ways_is_one_conflict_naming_table_and_key() {
    let env = diverged(
        "UPDATE items SET name='ours' WHERE id=2; UPDATE items SET n=7 WHERE id=1;",
        "UPDATE items SET name='theirs' WHERE id=2; INSERT INTO notes VALUES (5,'t');",
        false,
    );
    let before = head(&env.store, "main");
    let o = run(["merge", &env.s(), "feat", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let rows = &r["conflicts"][0]["rows"];
    assert_eq!(r["conflicts"][0]["path"], "ws/state.db", "{r:#}");
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{r:#}");
    assert_eq!(rows[0]["table"], "items");
    assert_eq!(rows[0]["key"], "id=2");
    assert_eq!(rows[0]["why"], "both");
    assert_eq!(head(&env.store, "main"), before, "nothing recorded");
    // Their side of the conflicting row, every other change of both sides kept.
    ok(["merge", &env.s(), "feat", "--take", "theirs"]);
    assert_eq!(
        merged_rows(
            &env,
            "SELECT id,name,n FROM items ORDER BY id; SELECT * FROM notes;"
        ),
        "1|one|7\n2|theirs|2\n3|three|3\n5|t\n"
    );
}

/// Writes `insert` into a copy of `base` with a connection that stays open while the database
/// and its `-wal` are copied into `room` (as an agent's live database is captured): the rows
/// are only in the `-wal`.
fn live_wal(base: &Path, scratch: &Path, room: &Path, insert: &str) {
    let py = "import sqlite3, shutil, sys\n\
              src, dst, sql = sys.argv[1:4]\n\
              c = sqlite3.connect(src)\n\
              c.execute('PRAGMA wal_autocheckpoint=0')\n\
              c.execute(sql)\n\
              c.commit()\n\
              shutil.copy(src, dst)\n\
              shutil.copy(src + '-wal', dst + '-wal')\n";
    std::fs::copy(base, scratch).expect("copy base");
    let o = Command::new("python3")
        .args(["-c", py])
        .arg(scratch)
        .arg(room.join("state.db"))
        .arg(insert)
        .output()
        .expect("python3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_wal_database_is_merged_with_its_wal_replayed() {
    let env = Env::new();
    let base = env.path("base.db");
    sql(
        &base,
        "PRAGMA journal_mode=WAL; CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT);
         INSERT INTO items VALUES (1,'base');",
    );
    std::fs::copy(&base, env.ws().join("state.db")).expect("copy");
    env.capture_id(&[]);
    ok(["fork", &env.s(), "main", "feat"]);
    live_wal(
        &base,
        &env.path("o.db"),
        env.ws(),
        "INSERT INTO items VALUES (10,'ours')",
    );
    env.capture_id(&[]);
    let ls = ok(["ls", &env.s(), "main:ws"]);
    assert!(
        ls.contains("state.db-wal"),
        "ours' rows are in a -wal: {ls}"
    );
    live_wal(
        &base,
        &env.path("t.db"),
        env.ws(),
        "INSERT INTO items VALUES (20,'theirs')",
    );
    env.capture_id(&["-b", "feat"]);
    let o = run(["merge", &env.s(), "feat"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(
        merged_rows(&env, "SELECT id FROM items ORDER BY id;"),
        "1\n10\n20\n"
    );
    let ls = ok(["ls", &env.s(), "main:ws"]);
    assert!(
        !ls.contains("state.db-wal"),
        "the -wal left the merged tree: {ls}"
    );
}
