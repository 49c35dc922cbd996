use super::*;

/// Three versions of one database in a scratch directory: `base.db` made from a schema,
/// `ours.db` and `theirs.db` copies of it, then changed by each test.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new(schema: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let f = Fixture { dir };
        f.exec("base", schema);
        for side in ["ours", "theirs"] {
            fs::copy(f.path("base"), f.path(side)).unwrap();
        }
        f
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.db"))
    }

    fn exec(&self, name: &str, sql: &str) {
        let conn = Connection::open(self.path(name)).unwrap();
        conn.execute_batch(sql).unwrap();
    }

    fn merge_with(&self, limits: &Limits) -> Result<Merged> {
        merge_databases(
            self.dir.path(),
            &self.path("base"),
            &self.path("ours"),
            &self.path("theirs"),
            &self.path("out"),
            limits,
        )
    }

    fn merge(&self) -> Merged {
        self.merge_with(&Limits::default()).unwrap()
    }

    /// Every row of `sql` on `name`, values as SQL literals joined by `|`.
    fn rows(&self, name: &str, sql: &str) -> Vec<String> {
        let conn = Connection::open(self.path(name)).unwrap();
        let mut stmt = conn.prepare(sql).unwrap();
        let n = stmt.column_count();
        let mut rows = stmt.query([]).unwrap();
        let mut out = Vec::new();
        while let Some(r) = rows.next().unwrap() {
            let vals: Vec<String> = (0..n).map(|i| sql_literal(r.get_ref(i).unwrap())).collect();
            out.push(vals.join("|"));
        }
        out
    }

    fn integrity_ok(&self, name: &str) -> bool {
        self.rows(name, "PRAGMA integrity_check") == ["'ok'"]
    }
}

fn conflict(table: &str, key: Option<&str>, why: &str) -> RowConflict {
    RowConflict {
        table: table.into(),
        key: key.map(Into::into),
        why: why.into(),
    }
}

const AB: &str = "CREATE TABLE a(id INTEGER PRIMARY KEY, v TEXT, w INTEGER);
    CREATE TABLE b(k TEXT PRIMARY KEY, n INTEGER) WITHOUT ROWID;
    INSERT INTO a VALUES (1, 'one', 10), (2, 'two', 20), (3, 'three', 30);
    INSERT INTO b VALUES ('x', 1), ('y', 2);";

#[test]
fn changes_to_different_rows_and_tables_all_land() {
    let f = Fixture::new(AB);
    f.exec(
        "ours",
        "INSERT INTO a VALUES (4, 'four', 40); UPDATE a SET v = 'TWO' WHERE id = 2;
         UPDATE a SET v = 'ONE' WHERE id = 1;",
    );
    f.exec(
        "theirs",
        "INSERT INTO b VALUES ('z', 3); UPDATE a SET v = 'THREE' WHERE id = 3;
         UPDATE b SET n = 10 WHERE k = 'x'; UPDATE a SET w = 11 WHERE id = 1;
         DELETE FROM b WHERE k = 'y';",
    );
    let m = f.merge();
    assert_eq!(m.conflicts, []);
    assert_eq!(m.rows_applied, 5);
    // Row 1: ours changed v, theirs w: both columns land.
    assert_eq!(
        f.rows("out", "SELECT * FROM a ORDER BY id"),
        ["1|'ONE'|11", "2|'TWO'|20", "3|'THREE'|30", "4|'four'|40"]
    );
    assert_eq!(f.rows("out", "SELECT * FROM b"), ["'x'|10", "'z'|3"]);
    assert!(f.integrity_ok("out"));
}

#[test]
fn the_same_row_changed_both_ways_is_one_conflict_by_key() {
    let f = Fixture::new(AB);
    f.exec("ours", "UPDATE a SET v = 'ours' WHERE id = 2;");
    f.exec(
        "theirs",
        "UPDATE a SET v = 'theirs' WHERE id = 2; UPDATE b SET n = 5 WHERE k = 'y';",
    );
    let m = f.merge();
    assert_eq!(m.conflicts, [conflict("a", Some("id=2"), "both")]);
    assert_eq!(m.rows_applied, 1);
    assert_eq!(f.rows("out", "SELECT v FROM a WHERE id = 2"), ["'ours'"]);
    assert_eq!(f.rows("out", "SELECT n FROM b WHERE k = 'y'"), ["5"]);
    // Text keys are quoted.
    let f = Fixture::new(AB);
    f.exec("ours", "UPDATE b SET n = 7 WHERE k = 'x';");
    f.exec("theirs", "UPDATE b SET n = 8 WHERE k = 'x';");
    assert_eq!(f.merge().conflicts, [conflict("b", Some("k='x'"), "both")]);
}

#[test]
fn the_same_change_on_both_sides_is_no_conflict() {
    let f = Fixture::new(AB);
    let same = "UPDATE a SET v = 'same' WHERE id = 2; INSERT INTO a VALUES (9, 'nine', 90);
                DELETE FROM a WHERE id = 1;";
    f.exec("ours", same);
    f.exec("theirs", same);
    let m = f.merge();
    assert_eq!(m.conflicts, []);
    assert_eq!(m.rows_applied, 0);
    assert_eq!(
        f.rows("out", "SELECT id, v FROM a ORDER BY id"),
        ["2|'same'", "3|'three'", "9|'nine'"]
    );
    // Theirs changed v and w, ours the same v: theirs' w lands, no conflict.
    let f = Fixture::new(AB);
    f.exec("ours", "UPDATE a SET v = 'X' WHERE id = 3;");
    f.exec("theirs", "UPDATE a SET v = 'X', w = 99 WHERE id = 3;");
    let m = f.merge();
    assert_eq!(m.conflicts, []);
    assert_eq!(m.rows_applied, 1);
    assert_eq!(f.rows("out", "SELECT v, w FROM a WHERE id = 3"), ["'X'|99"]);
    // An insert of the same key with other values is a conflict.
    let f = Fixture::new(AB);
    f.exec("ours", "INSERT INTO a VALUES (9, 'nine', 90);");
    f.exec("theirs", "INSERT INTO a VALUES (9, 'NINE', 90);");
    assert_eq!(f.merge().conflicts, [conflict("a", Some("id=9"), "both")]);
}

#[test]
fn a_delete_against_an_update_is_deleted_changed() {
    let f = Fixture::new(AB);
    f.exec(
        "ours",
        "DELETE FROM a WHERE id = 1; UPDATE a SET v = 'ours' WHERE id = 2;",
    );
    f.exec(
        "theirs",
        "UPDATE a SET v = 'theirs' WHERE id = 1; DELETE FROM a WHERE id = 2;",
    );
    let mut m = f.merge();
    m.conflicts.sort_by(|x, y| x.key.cmp(&y.key));
    assert_eq!(
        m.conflicts,
        [
            conflict("a", Some("id=1"), "deleted-changed"),
            conflict("a", Some("id=2"), "deleted-changed"),
        ]
    );
    assert_eq!(
        f.rows("out", "SELECT id, v FROM a ORDER BY id"),
        ["2|'ours'", "3|'three'"]
    );
}

#[test]
fn a_unique_violation_is_a_constraint_conflict() {
    let f = Fixture::new(
        "CREATE TABLE u(id INTEGER PRIMARY KEY, email TEXT UNIQUE NOT NULL);
         INSERT INTO u VALUES (1, 'a@x');",
    );
    f.exec("ours", "INSERT INTO u VALUES (10, 'b@x');");
    f.exec("theirs", "INSERT INTO u VALUES (11, 'b@x'), (12, 'c@x');");
    let m = f.merge();
    assert_eq!(m.conflicts, [conflict("u", Some("id=11"), "constraint")]);
    assert_eq!(
        f.rows("out", "SELECT * FROM u ORDER BY id"),
        ["1|'a@x'", "10|'b@x'", "12|'c@x'"]
    );
    assert!(f.integrity_ok("out"));
}

#[test]
fn a_row_whose_parent_ours_deleted_is_a_constraint_conflict() {
    let f = Fixture::new(
        "CREATE TABLE parent(id INTEGER PRIMARY KEY);
         CREATE TABLE child(id INTEGER PRIMARY KEY, p INTEGER REFERENCES parent(id));
         INSERT INTO parent VALUES (1), (2);",
    );
    f.exec("ours", "DELETE FROM parent WHERE id = 1;");
    f.exec("theirs", "INSERT INTO child VALUES (7, 1), (8, 2);");
    let m = f.merge();
    assert_eq!(m.conflicts, [conflict("child", Some("id=7"), "constraint")]);
}

#[test]
fn a_table_created_on_theirs_arrives_with_its_rows_and_index() {
    let f = Fixture::new(AB);
    f.exec("ours", "INSERT INTO a VALUES (4, 'four', 40);");
    f.exec(
        "theirs",
        "CREATE TABLE n(id INTEGER PRIMARY KEY, s TEXT); CREATE INDEX n_s ON n(s);
         INSERT INTO n VALUES (1, 'p'), (2, 'q');
         CREATE TABLE log(line TEXT); INSERT INTO log VALUES ('l1'), ('l2');",
    );
    let m = f.merge();
    assert_eq!(m.conflicts, []);
    assert_eq!(m.rows_applied, 4);
    assert_eq!(
        f.rows("out", "SELECT * FROM n ORDER BY id"),
        ["1|'p'", "2|'q'"]
    );
    assert_eq!(
        f.rows("out", "SELECT rowid, * FROM log"),
        ["1|'l1'", "2|'l2'"]
    );
    assert_eq!(
        f.rows("out", "SELECT name FROM sqlite_schema WHERE type = 'index'"),
        ["'n_s'"]
    );
    assert_eq!(f.rows("out", "SELECT count(*) FROM a"), ["4"]);
    assert!(f.integrity_ok("out"));
}

#[test]
fn a_table_created_on_both_sides_is_merged_by_row() {
    let f = Fixture::new(AB);
    let create = "CREATE TABLE n(id INTEGER PRIMARY KEY, s TEXT);";
    f.exec(
        "ours",
        &format!("{create} INSERT INTO n VALUES (1, 'p'), (2, 'mine');"),
    );
    f.exec(
        "theirs",
        &format!("{create} INSERT INTO n VALUES (1, 'p'), (3, 'r'), (2, 'yours');"),
    );
    let m = f.merge();
    assert_eq!(m.conflicts, [conflict("n", Some("id=2"), "both")]);
    assert_eq!(
        f.rows("out", "SELECT * FROM n ORDER BY id"),
        ["1|'p'", "2|'mine'", "3|'r'"]
    );
}

#[test]
fn a_schema_change_is_a_conflict_unless_ours_left_the_table_alone() {
    let f = Fixture::new(AB);
    f.exec("ours", "ALTER TABLE a ADD COLUMN x;");
    f.exec(
        "theirs",
        "ALTER TABLE a ADD COLUMN y; UPDATE a SET v = 'new' WHERE id = 1;",
    );
    let m = f.merge();
    assert_eq!(m.conflicts, [conflict("a", None, "schema")]);
    assert_eq!(f.rows("out", "SELECT v FROM a WHERE id = 1"), ["'one'"]);
    // Ours changed rows of the table theirs altered: still a conflict.
    let f = Fixture::new(AB);
    f.exec("ours", "UPDATE a SET v = 'mine' WHERE id = 3;");
    f.exec("theirs", "ALTER TABLE a ADD COLUMN y;");
    assert_eq!(f.merge().conflicts, [conflict("a", None, "schema")]);
    // Ours left it alone: theirs' table (schema and rows) is taken.
    let f = Fixture::new(AB);
    f.exec("ours", "UPDATE b SET n = 9 WHERE k = 'x';");
    f.exec(
        "theirs",
        "ALTER TABLE a ADD COLUMN y DEFAULT 'd'; UPDATE a SET y = 'e' WHERE id = 3;",
    );
    let m = f.merge();
    assert_eq!(m.conflicts, []);
    assert_eq!(
        f.rows("out", "SELECT id, y FROM a ORDER BY id"),
        ["1|'d'", "2|'d'", "3|'e'"]
    );
    assert_eq!(f.rows("out", "SELECT n FROM b WHERE k = 'x'"), ["9"]);
}

#[test]
fn a_table_dropped_on_theirs_goes_unless_ours_changed_it() {
    let f = Fixture::new(AB);
    f.exec("theirs", "DROP TABLE b;");
    assert_eq!(f.merge().conflicts, []);
    assert!(f
        .rows("out", "SELECT name FROM sqlite_schema WHERE name = 'b'")
        .is_empty());
    let f = Fixture::new(AB);
    f.exec("ours", "INSERT INTO b VALUES ('w', 0);");
    f.exec("theirs", "DROP TABLE b;");
    assert_eq!(f.merge().conflicts, [conflict("b", None, "schema")]);
    assert_eq!(f.rows("out", "SELECT count(*) FROM b"), ["3"]);
}

#[test]
fn a_table_without_primary_key_changed_on_both_sides_is_named() {
    let schema = "CREATE TABLE log(line TEXT); INSERT INTO log VALUES ('a');";
    let f = Fixture::new(schema);
    f.exec("ours", "INSERT INTO log VALUES ('ours');");
    f.exec("theirs", "INSERT INTO log VALUES ('theirs');");
    let m = f.merge();
    assert_eq!(m.conflicts, [conflict("log", None, "no-primary-key")]);
    assert_eq!(f.rows("out", "SELECT line FROM log"), ["'a'", "'ours'"]);
    // Changed on theirs only: theirs' rows are taken.
    let f = Fixture::new(schema);
    f.exec(
        "theirs",
        "INSERT INTO log VALUES ('theirs'); UPDATE log SET line = 'A';",
    );
    assert_eq!(f.merge().conflicts, []);
    assert_eq!(f.rows("out", "SELECT line FROM log"), ["'A'", "'A'"]);
}

#[test]
fn indexes_and_views_theirs_added_are_taken() {
    let f = Fixture::new(AB);
    f.exec(
        "theirs",
        "CREATE INDEX a_v ON a(v); CREATE VIEW big AS SELECT * FROM a WHERE w > 15;",
    );
    assert_eq!(f.merge().conflicts, []);
    assert_eq!(
        f.rows(
            "out",
            "SELECT type, name FROM sqlite_schema WHERE type != 'table' ORDER BY name"
        ),
        ["'index'|'a_v'", "'view'|'big'"]
    );
    assert_eq!(f.rows("out", "SELECT count(*) FROM big"), ["2"]);
    // Changed differently on both sides: a conflict naming it.
    let f = Fixture::new(&format!("{AB} CREATE INDEX a_v ON a(v);"));
    f.exec("ours", "DROP INDEX a_v; CREATE INDEX a_v ON a(w);");
    f.exec("theirs", "DROP INDEX a_v; CREATE INDEX a_v ON a(v, w);");
    assert_eq!(f.merge().conflicts, [conflict("a_v", None, "schema")]);
}

#[test]
fn a_virtual_table_theirs_changed_is_named_not_merged() {
    let f = Fixture::new(&format!("{AB} CREATE VIRTUAL TABLE docs USING fts5(body);"));
    f.exec(
        "theirs",
        "INSERT INTO docs VALUES ('hello'); INSERT INTO a VALUES (4, 'f', 4);",
    );
    let m = f.merge();
    assert!(!m.conflicts.is_empty());
    for c in &m.conflicts {
        assert!(
            c.table.starts_with("docs_") && c.why == "virtual-table",
            "{c:?}"
        );
    }
    assert_eq!(f.rows("out", "SELECT count(*) FROM a"), ["4"]);
    assert!(f.integrity_ok("out"));
}

/// Leaves `name`'s last transaction in its `-wal` (not checkpointed into the file).
fn commit_to_wal(f: &Fixture, name: &str, sql: &str) {
    let conn = Connection::open(f.path(name)).unwrap();
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .unwrap();
    conn.execute_batch(sql).unwrap();
    drop(conn);
    let wal = fs::metadata(sidecar(&f.path(name), "-wal")).unwrap();
    assert!(wal.len() > 0);
}

#[test]
fn rows_in_a_wal_sidecar_are_merged_and_out_is_one_file() {
    let f = Fixture::new(&format!("PRAGMA journal_mode = WAL; {AB}"));
    commit_to_wal(&f, "ours", "INSERT INTO a VALUES (4, 'ours-wal', 0);");
    commit_to_wal(&f, "theirs", "INSERT INTO a VALUES (5, 'theirs-wal', 0);");
    let m = f.merge();
    assert_eq!(m.conflicts, []);
    assert_eq!(m.rows_applied, 1);
    for suffix in ["-wal", "-shm", "-journal"] {
        assert!(!sidecar(&f.path("out"), suffix).exists(), "{suffix}");
    }
    let header = fs::read(f.path("out")).unwrap();
    assert_eq!(header[18..20], [2, 2], "ours' WAL mode stays recorded");
    assert_eq!(
        f.rows("out", "SELECT v FROM a WHERE id > 3 ORDER BY id"),
        ["'ours-wal'", "'theirs-wal'"]
    );
}

#[test]
fn triggers_in_the_schema_do_not_fire() {
    let f = Fixture::new(&format!("{AB} CREATE TABLE audit(what TEXT);"));
    f.exec(
        "ours",
        "CREATE TRIGGER spy AFTER INSERT ON a BEGIN INSERT INTO audit VALUES ('fired'); END;",
    );
    f.exec("theirs", "INSERT INTO a VALUES (4, 'four', 40);");
    assert_eq!(f.merge().conflicts, []);
    assert_eq!(f.rows("out", "SELECT count(*) FROM a"), ["4"]);
    assert!(f.rows("out", "SELECT * FROM audit").is_empty());
}

#[test]
fn an_unreadable_version_is_an_error_naming_it() {
    let f = Fixture::new(AB);
    let mut bytes = fs::read(f.path("theirs")).unwrap();
    assert!(is_sqlite(&bytes));
    // Page 2 (the first table's b-tree) overwritten with garbage.
    let page = usize::from(u16::from_be_bytes([bytes[16], bytes[17]]));
    for b in &mut bytes[page..2 * page] {
        *b = 0xa5;
    }
    fs::write(f.path("theirs"), &bytes).unwrap();
    let e = f.merge_with(&Limits::default()).unwrap_err();
    assert!(e.to_string().contains("theirs"), "{e}");
    fs::write(f.path("ours"), b"not a database at all, only text").unwrap();
    let e = f.merge_with(&Limits::default()).unwrap_err();
    assert!(e.to_string().contains("ours"), "{e}");
    assert_eq!(e.kind(), crate::error::ErrorKind::Corrupt);
}

#[test]
fn an_expensive_schema_is_given_up_at_the_time_limit() {
    // Every read of `g` builds a 20 MB string: reading the table takes minutes. (The
    // column is added after the rows: inserting them would compute it.)
    let f = Fixture::new(
        "CREATE TABLE log(line INTEGER);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
         INSERT INTO log(line) SELECT i FROM n;
         ALTER TABLE log ADD COLUMN g AS (length(printf('%.*c', 20000000 + line * 0, 'x')));",
    );
    f.exec("theirs", "UPDATE log SET line = -line WHERE line = 1;");
    let limits = Limits {
        max_time: Duration::from_millis(500),
        ..Limits::default()
    };
    let started = Instant::now();
    let e = f.merge_with(&limits).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(e.to_string().contains("time limit"), "{e}");
}

#[test]
fn a_version_over_the_size_limit_is_a_conflict_and_not_read() {
    let f = Fixture::new(AB);
    let limits = Limits {
        max_bytes: 1024,
        ..Limits::default()
    };
    let m = f.merge_with(&limits).unwrap();
    assert_eq!(m.conflicts, [conflict("*", None, "too-large")]);
    assert!(!f.path("out").exists());
}

#[test]
fn paths_outside_scratch_are_refused() {
    let f = Fixture::new(AB);
    let elsewhere = tempfile::tempdir().unwrap();
    let outside = elsewhere.path().join("theirs.db");
    fs::copy(f.path("theirs"), &outside).unwrap();
    let run = |theirs: &Path, out: &Path| {
        merge_databases(
            f.dir.path(),
            &f.path("base"),
            &f.path("ours"),
            theirs,
            out,
            &Limits::default(),
        )
    };
    assert!(run(&outside, &f.path("out")).is_err());
    assert!(run(&f.path("theirs"), &elsewhere.path().join("out.db")).is_err());
    std::os::unix::fs::symlink(&outside, f.dir.path().join("link.db")).unwrap();
    assert!(run(&f.dir.path().join("link.db"), &f.path("out")).is_err());
    assert!(run(&f.path("theirs"), &f.path("out")).is_ok());
}

#[test]
fn keys_render_as_sql_literals() {
    assert_eq!(sql_literal(ValueRef::Text(b"it's")), "'it''s'");
    assert_eq!(sql_literal(ValueRef::Blob(&[0, 255])), "x'00ff'");
    assert_eq!(sql_literal(ValueRef::Null), "NULL");
    assert_eq!(sql_literal(ValueRef::Real(1.5)), "1.5");
    let long = "y".repeat(500);
    assert!(sql_literal(ValueRef::Text(long.as_bytes())).ends_with("...'"));
    assert!(is_sqlite(b"SQLite format 3\0rest"));
    assert!(!is_sqlite(b"SQLite format 3"));
}
