//! Migrations expand, then contract: the checker of `migration_rules` on
//! good and bad SQL, and on `migrations/` itself.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::migration_rules::{Rule, check, contract_reason, uncontracted, unique_names, version};

/// The newest migration when the rules came in: every one after it is held
/// to them. (Those before were written for releases that never ran side by
/// side; they stay as they are, like every landed migration.)
const CUTOFF: &str = "20261207000001_scale_out.sql";

fn migrations_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations")
}

/// Unique indexes the bad cases drop.
fn unique() -> BTreeSet<String> {
    unique_names(
        "create unique index work_items_one_pending_per_key on work_items (key) where state = 'pending';
         create table t (id bigint, constraint t_id_unique unique (id))",
    )
}

#[test]
fn the_checker_finds_the_unique_indexes_and_constraints_migrations_create() {
    assert_eq!(
        unique(),
        BTreeSet::from([
            "t_id_unique".to_owned(),
            "work_items_one_pending_per_key".to_owned()
        ])
    );
    assert_eq!(
        unique_names(
            "create unique index concurrently if not exists x on t (a); create index y on t (b)"
        ),
        BTreeSet::from(["x".to_owned()])
    );
}

#[test]
fn the_checker_passes_what_only_expands() {
    let good = [
        "create table t (id bigint primary key, x text not null)",
        "alter table t add column c text",
        "alter table t add column c int not null default 0",
        "alter table t add column c jsonb not null default '{}'::jsonb",
        "alter table t add column c bigint generated always as identity",
        "alter table t add column c int not null generated always as (a + 1) stored",
        "alter table t alter column c drop not null",
        "alter table t alter column c set default 0",
        "alter table t alter column c set default 0, alter column c set not null",
        "alter table t alter column c set default 0; alter table t alter column c set not null",
        "alter table t add constraint t_x_positive check (x > 0)",
        "alter table t drop constraint t_x_fkey",
        "alter table functions set (fillfactor = 50)",
        "alter table t add column ratio real default 0.5",
        "create index concurrently i on t (c)",
        "drop index work_items_due",
        "update functions set instances = 1 where endpoint is not null and phase <> 'Deleted'",
        "insert into t (x) values ('drop table t; alter table t rename to u')",
        "insert into t (x) values (E'it\\'s; drop table t')",
        "-- drop table t\nselect 1",
        "/* alter table t drop column c; /* nested */ */ select 1",
        "create or replace function f() returns int language sql as $$ select 1 $$",
        // A function's body runs when it is called, by whichever binary calls it.
        "create function f() returns void language plpgsql as $body$
         begin drop table functions_replay; alter table x rename to y; end $body$",
        "do $$ begin perform 1; end $$",
        "alter type phase add value 'Paused'",
    ];
    for sql in good {
        let found = check(sql, &unique());
        assert!(found.is_empty(), "{sql:?} only expands, yet: {found:?}");
    }
}

#[test]
fn the_checker_refuses_what_breaks_the_release_before() {
    let bad = [
        ("drop table t", Rule::DropTable),
        ("drop table if exists t cascade", Rule::DropTable),
        ("DROP TABLE T", Rule::DropTable),
        ("alter table t drop column c", Rule::DropColumn),
        ("alter table t drop c", Rule::DropColumn),
        (
            "alter table if exists only t drop column if exists c",
            Rule::DropColumn,
        ),
        ("alter table public.t drop column c", Rule::DropColumn),
        ("alter table \"T\" drop column \"C\"", Rule::DropColumn),
        (
            "alter table t add column a int default 0, drop column b",
            Rule::DropColumn,
        ),
        ("alter table t rename column a to b", Rule::Rename),
        ("alter table t rename to u", Rule::Rename),
        ("alter index i rename to j", Rule::Rename),
        ("alter function f(int) rename to g", Rule::Rename),
        (
            "alter type phase rename value 'Ready' to 'Serving'",
            Rule::Rename,
        ),
        ("alter table t alter column c type bigint", Rule::ColumnType),
        (
            "alter table t alter c set data type bigint using c::bigint",
            Rule::ColumnType,
        ),
        (
            "alter table t alter column c set not null",
            Rule::SetNotNull,
        ),
        (
            "alter table t alter column d set default 0, alter column c set not null",
            Rule::SetNotNull,
        ),
        ("alter table t add column c int not null", Rule::AddNotNull),
        ("alter table t add c text not null", Rule::AddNotNull),
        (
            "alter table t add column if not exists c text not null references u (id)",
            Rule::AddNotNull,
        ),
        (
            "alter table t alter column c drop default",
            Rule::DropDefault,
        ),
        (
            "drop function enqueue_work(text, text, jsonb, text, jsonpath)",
            Rule::DropObject("function"),
        ),
        ("drop view v", Rule::DropObject("view")),
        (
            "drop materialized view v",
            Rule::DropObject("materialized view"),
        ),
        ("drop type phase", Rule::DropObject("type")),
        (
            "drop trigger events_counted_in_namespace on events",
            Rule::DropObject("trigger"),
        ),
        (
            "drop index work_items_one_pending_per_key",
            Rule::DropUnique,
        ),
        (
            "drop index concurrently if exists work_items_one_pending_per_key",
            Rule::DropUnique,
        ),
        (
            "alter table t drop constraint t_id_unique",
            Rule::DropUnique,
        ),
        ("alter table t drop constraint t_pkey", Rule::DropUnique),
        (
            "do $$ begin alter table t drop column c; end $$",
            Rule::DropColumn,
        ),
        (
            "select 1; alter table t drop column c; select 2",
            Rule::DropColumn,
        ),
    ];
    for (sql, rule) in bad {
        let found: Vec<Rule> = check(sql, &unique()).into_iter().map(|v| v.rule).collect();
        assert_eq!(found, vec![rule], "{sql:?}");
    }
}

#[test]
fn a_contract_names_its_reason_on_a_line_of_its_own() {
    let cases = [
        (
            "-- contract: 0.7 no longer reads functions.node\nalter table functions drop column node",
            Some("0.7 no longer reads functions.node"),
        ),
        (
            "  --Contract:  the release before stopped calling f\n",
            Some("the release before stopped calling f"),
        ),
        ("-- contract:\ndrop table t", None),
        ("-- contract:   \ndrop table t", None),
        ("-- a contract: of sorts\ndrop table t", None),
        (
            "drop table t -- contract: trailing, not a line of its own",
            None,
        ),
        ("drop table t", None),
    ];
    for (sql, reason) in cases {
        assert_eq!(contract_reason(sql), reason, "{sql:?}");
    }
}

/// Writes `files` into a fresh folder.
fn folder(files: &[(&str, &str)]) -> PathBuf {
    let dir = sless_testkit::scratch_dir("migrations");
    for (name, sql) in files {
        std::fs::write(dir.join(name), sql).unwrap();
    }
    dir
}

#[test]
fn only_migrations_after_the_cutoff_without_a_contract_are_refused() {
    let dir = folder(&[
        (
            "20260101000001_old.sql",
            "create table t (id bigint); alter table t drop column id",
        ),
        (
            "20260101000002_cutoff.sql",
            "create unique index t_one on t (id)",
        ),
        (
            "20260101000003_expands.sql",
            "alter table t add column c text",
        ),
        (
            "20260101000004_drops.sql",
            "alter table t drop column c; drop index t_one",
        ),
        (
            "20260101000005_contracts.sql",
            "-- contract: the release before stopped writing d\nalter table t drop column d",
        ),
        ("notes.txt", "drop table t"),
    ]);
    let refused = uncontracted(&dir, "20260101000002_cutoff.sql");
    let names: Vec<(&str, Vec<Rule>)> = refused
        .iter()
        .map(|(name, v)| (name.as_str(), v.iter().map(|v| v.rule).collect()))
        .collect();
    assert_eq!(
        names,
        vec![(
            "20260101000004_drops.sql",
            vec![Rule::DropColumn, Rule::DropUnique]
        )]
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn migrations_after_the_cutoff_only_expand_or_say_why_they_contract() {
    let dir = migrations_dir();
    assert!(
        dir.join(CUTOFF).is_file(),
        "the cutoff {CUTOFF} names no migration in {}",
        dir.display()
    );
    let refused = uncontracted(&dir, CUTOFF);
    let report: Vec<String> = refused
        .iter()
        .flat_map(|(name, violations)| {
            violations
                .iter()
                .map(move |v| format!("{name}: {}: {}", v.rule, v.statement))
        })
        .collect();
    assert!(
        report.is_empty(),
        "these migrations break the release before, which runs beside the new one during an \
         upgrade (docs/operations.md, \"Upgrading\"): expand now, and contract a release later \
         in a migration that says why with `-- contract: <reason>`:\n{}",
        report.join("\n")
    );
    assert!(version(CUTOFF) > 0);
}

/// During a rolling upgrade, or after one rolled back, this release starts
/// on a database that a newer release migrated further: it runs as it is
/// (the newer migrations only expanded), and still applies its own.
#[tokio::test]
async fn a_database_a_newer_release_migrated_is_accepted() {
    let db = sless_testkit::TestDb::new().await;
    sqlx::query(
        "insert into _sqlx_migrations (version, description, success, checksum, execution_time)
         values (29991231000000, 'a newer release', true, '\\x00', 0)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sless_store::migrate(&db.pool)
        .await
        .expect("the release before migrates a database a newer one migrated");
    assert!(sless_store::migrations_current(&db.pool).await.unwrap());
}
