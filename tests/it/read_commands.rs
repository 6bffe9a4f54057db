//! The read commands (`runs`, `report`, `costs`, `export`) need an existing
//! database and known runs or models; they open it read-only (an archived
//! or read-only copy is read and never written) and never migrate an older
//! one (`migrate` does).

use crate::support::child::connect;
use crate::support::mock::triage_server;
use crate::support::scored_run::setup;
use crate::support::{
    Bench, KEY, assert_no_panic, bench, db_path, read, read_at, run_with, runs_json, stderr, stdout,
};

#[test]
fn read_commands_need_a_database_and_known_runs() {
    let b = Bench::new();
    let db = b.dir.path().join("none.db");
    for args in [&["costs"][..], &["report"], &["export", "--format", "csv"]] {
        let out = b
            .cmd()
            .arg("--database-url")
            .arg(&db)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains("no database at") && stderr(&out).contains("none.db"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(!db.exists(), "a read command must not create the database");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_runs_and_models_are_usage_errors() {
    let s = setup().await;
    for args in [
        &["costs", "--run-id", "99"][..],
        &["report", "--run-id", "99"],
        &["export", "--run-id", "99"],
    ] {
        let out = read(&s.bench, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains("no run with id 99"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert_eq!(stdout(&out), "", "{args:?}");
    }
    for args in [
        &["costs", "--model", "nobody/x"][..],
        &["report", "--model", "nobody/x"],
    ] {
        let out = read(&s.bench, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains("no run of model nobody/x"),
            "{}",
            stderr(&out)
        );
    }
    let out = read(&s.bench, &["costs", "--run-id", "1", "--model", "nobody/x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("run 1 is not a run of model nobody/x"),
        "{}",
        stderr(&out)
    );
    // --run-id and --model name the target twice.
    let out = read(
        &s.bench,
        &["report", "--run-id", "1", "--model", "test/model"],
    );
    assert_eq!(out.status.code(), Some(2));
    // An --out folder that does not exist is refused, naming the file.
    let out = read(&s.bench, &["export", "--out", "/nonexistent-dir/x.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("/nonexistent-dir/x.jsonl"),
        "{}",
        stderr(&out)
    );
}

fn read_commands() -> Vec<Vec<&'static str>> {
    vec![
        vec!["runs", "--format", "json"],
        vec!["report", "--format", "json"],
        vec!["costs", "--format", "json"],
        vec!["export"],
    ]
}

fn listing(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[cfg(unix)]
fn chmod(p: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_commands_read_archived_and_read_only_copies_without_writing() {
    let m = triage_server().await;
    let b = bench();
    let out = run_with(&b, KEY, &m.server.uri(), &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A finished run leaves the database in one file: a copy of it alone is whole.
    assert_eq!(
        listing(b.dir.path())
            .iter()
            .filter(|f| f.starts_with("h.db"))
            .count(),
        1
    );
    let expected = stdout(&read(&b, &["export"]));
    assert_eq!(expected.lines().count(), 2);

    for read_only in [false, true] {
        let arch = b.dir.path().join(format!("archive-{read_only}"));
        std::fs::create_dir(&arch).unwrap();
        let copy = arch.join("h.db");
        std::fs::copy(db_path(&b), &copy).unwrap();
        #[cfg(unix)]
        if read_only {
            chmod(&copy, 0o444);
            chmod(&arch, 0o555);
        }
        let bytes = std::fs::read(&copy).unwrap();
        for args in read_commands() {
            let out = read_at(&b, &copy, &args);
            assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
            if args[0] == "export" {
                assert_eq!(stdout(&out), expected);
            }
            // SQLite in mode=ro may add empty -wal/-shm files where it can;
            // a read-only copy gets nothing.
            if read_only {
                assert_eq!(
                    listing(&arch),
                    vec!["h.db"],
                    "{args:?} left files beside the copy"
                );
            }
        }
        assert_eq!(std::fs::read(&copy).unwrap(), bytes, "the copy was written");
        #[cfg(unix)]
        chmod(&arch, 0o755);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_commands_never_migrate_an_older_database() {
    let m = triage_server().await;
    let b = bench();
    let out = run_with(&b, KEY, &m.server.uri(), &["run-batch", "--all-scenarios"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Make it a database from before the endpoint/unknown-cost migration.
    let p = connect(&b).await.unwrap();
    let last: i64 = 20261123000003;
    for sql in [
        "ALTER TABLE result DROP COLUMN endpoint",
        "ALTER TABLE judgement DROP COLUMN endpoint",
        "ALTER TABLE result DROP COLUMN cost_unknown",
        "ALTER TABLE judgement DROP COLUMN cost_unknown",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&p)
            .await
            .unwrap();
    }
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = ?")
        .bind(last)
        .execute(&p)
        .await
        .unwrap();
    p.close().await;
    let bytes = std::fs::read(db_path(&b)).unwrap();
    for args in read_commands() {
        let out = read(&b, &args);
        assert_no_panic(&out);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("older helmbench") && err.contains("helmbench migrate"),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty());
    }
    assert_eq!(
        std::fs::read(db_path(&b)).unwrap(),
        bytes,
        "a read-only command changed the file"
    );
    let p = connect(&b).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE version = ?")
        .bind(last)
        .fetch_one(&p)
        .await
        .unwrap();
    assert_eq!(n, 0, "migrated by a read-only command");
    p.close().await;

    // `migrate` upgrades it; the old results then report as before.
    let out = read(&b, &["migrate"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("1 migration applied"),
        "{}",
        stderr(&out)
    );
    for args in read_commands() {
        let out = read(&b, &args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(runs_json(&b)["runs"][0]["passed"], 2);
    let out = read(&b, &["migrate"]);
    assert!(stderr(&out).contains("up to date"), "{}", stderr(&out));
}

/// Issue 41, item 15: a folder given as the database is named, with what
/// is expected (`run-batch`'s words), never SQLite's "(code: 266) disk I/O
/// error".
#[test]
fn a_folder_given_as_the_database_is_named() {
    let b = Bench::new();
    let dir = b.dir.path().join("results");
    std::fs::create_dir(&dir).unwrap();
    for args in read_commands() {
        let out = read_at(&b, &dir, &args);
        assert_no_panic(&out);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "cannot open {}: it is a folder, not a database file (pass --database-url with a file name, e.g. {})",
                dir.display(),
                dir.join("helmbench.db").display()
            )),
            "{args:?}: {err}"
        );
        assert!(!err.contains("code: 266"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    assert_eq!(listing(&dir), Vec::<String>::new(), "nothing written in it");
}

/// Issue 41, item 15: a new database read while its first command creates
/// it (or after that command was killed -9) is not "written by an older
/// helmbench": with only the first migrations and no runs it is said to be
/// being created; migrated but with its (empty) totals not filled yet, it
/// reads as the empty database it is.
#[tokio::test(flavor = "multi_thread")]
async fn a_database_being_created_is_not_an_old_one() {
    let b = Bench::new();
    let url = db_path(&b).display().to_string();
    // The migrator's first step: its bookkeeping table, no migration yet.
    let empty = b.dir.path().join("no-migrations");
    std::fs::create_dir(&empty).unwrap();
    {
        let p = sqlx::SqlitePool::connect(&format!("sqlite://{url}?mode=rwc"))
            .await
            .unwrap();
        sqlx::migrate::Migrator::new(empty.as_path())
            .await
            .unwrap()
            .run(&p)
            .await
            .unwrap();
        p.close().await;
    }
    for args in read_commands() {
        let out = read(&b, &args);
        assert_no_panic(&out);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(!err.contains("older helmbench"), "{args:?}: {err}");
        assert!(
            err.contains("is still being created") && err.contains("helmbench migrate"),
            "{args:?}: {err}"
        );
    }
    std::fs::remove_file(db_path(&b)).unwrap();

    // Every migration applied; the process stopped before it filled the
    // totals (their marker still there).
    helmbench::store::Store::open(&url)
        .await
        .unwrap()
        .close()
        .await;
    let p = connect(&b).await.unwrap();
    sqlx::query("INSERT INTO totals_rebuild VALUES (1)")
        .execute(&p)
        .await
        .unwrap();
    p.close().await;
    let out = read(&b, &["runs", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(runs_json(&b)["runs"], serde_json::json!([]));
    for args in read_commands() {
        let out = read(&b, &args);
        assert!(
            !stderr(&out).contains("older helmbench"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}
