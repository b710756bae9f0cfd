//! The `visibility` check: a visibility map that calls a page all-visible or
//! all-frozen when it is not (a stale map restored) makes index-only scans return
//! deleted or old rows, and no other check sees it. In every database that takes
//! connections pg_visibility is installed where missing (in the scratch copy only),
//! pg_check_visible and pg_check_frozen run over every table, and an index-only scan
//! of every table with a usable B-tree index must count what a sequential scan counts.

use super::server::Server;
use super::{check, Check};
use crate::ops::check::Outcome;
use crate::source::postgres::pg_err;

/// Findings listed at most; the rest counted.
const SHOWN: usize = 20;

/// Tables whose map calls tuples visible or frozen that are not: "db.schema.table:
/// counts", one row each.
const PAGES: &str =
    "SELECT format('%s.%I.%I: %s tuple(s) on all-visible pages not visible, %s not frozen', \
     current_database(), n.nspname, c.relname, x.v, x.f) \
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, \
     LATERAL (SELECT (SELECT count(*) FROM {S}.pg_check_visible(c.oid)) v, \
                     (SELECT count(*) FROM {S}.pg_check_frozen(c.oid)) f) x \
     WHERE c.relkind IN ('r', 'm', 't') AND c.relpersistence <> 't' AND (x.v > 0 OR x.f > 0) \
     ORDER BY 1";

/// Index-only then sequential counts of every populated table with a valid non-partial
/// B-tree index, each planned anew under transaction-local settings.
const COUNTS: &str = "CREATE FUNCTION pg_temp.pagevault_counts() RETURNS SETOF text LANGUAGE plpgsql AS $f$ \
     DECLARE r record; ios bigint; seq bigint; BEGIN \
       FOR r IN SELECT c.oid::regclass AS t, n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE c.relkind IN ('r', 'm') AND c.relpersistence <> 't' AND c.relispopulated \
         AND EXISTS (SELECT 1 FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam \
                     WHERE i.indrelid = c.oid AND am.amname = 'btree' AND i.indpred IS NULL AND i.indisvalid AND i.indisready) \
         ORDER BY n.nspname, c.relname LOOP \
         PERFORM set_config('enable_seqscan', 'off', true); PERFORM set_config('enable_bitmapscan', 'off', true); \
         PERFORM set_config('enable_indexscan', 'off', true); PERFORM set_config('enable_indexonlyscan', 'on', true); \
         EXECUTE format('SELECT count(*) FROM %s', r.t) INTO ios; \
         PERFORM set_config('enable_seqscan', 'on', true); PERFORM set_config('enable_indexonlyscan', 'off', true); \
         EXECUTE format('SELECT count(*) FROM %s', r.t) INTO seq; \
         IF ios <> seq THEN RETURN NEXT format('%s.%I.%I: an index-only scan counts %s rows, a sequential scan %s', \
           current_database(), r.nspname, r.relname, ios, seq); END IF; \
       END LOOP; END $f$";

/// What one database gave: tables checked, tables counted both ways, findings.
struct Db {
    tables: i64,
    counted: i64,
    findings: Vec<String>,
}

/// Why a database could not be checked; `missing` when the server lacks pg_visibility's
/// files.
struct DbError {
    missing: bool,
    message: String,
}

impl From<String> for DbError {
    fn from(message: String) -> DbError {
        DbError {
            missing: false,
            message,
        }
    }
}

fn one_db(srv: &Server, db: &str) -> Result<Db, DbError> {
    let mut c = srv.connect(db).map_err(|e| pg_err(&e))?;
    // The copy's own settings must not stop the checks midway nor refuse the install.
    c.batch_execute(
        "SET statement_timeout = 0; SET lock_timeout = 0; SET default_transaction_read_only = off; \
         SET search_path = pg_catalog, pg_temp; \
         CREATE EXTENSION IF NOT EXISTS pg_visibility WITH SCHEMA pg_catalog",
    )
    .map_err(|e| DbError {
        missing: e.code() == Some(&postgres::error::SqlState::UNDEFINED_FILE),
        message: format!("cannot install pg_visibility: {}", pg_err(&e)),
    })?;
    let row = c
        .query_one(
            "SELECT quote_ident(n.nspname) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace \
             WHERE e.extname = 'pg_visibility'",
            &[],
        )
        .map_err(|e| pg_err(&e))?;
    let schema: String = row.get(0);
    let mut findings: Vec<String> = (c.query(&PAGES.replace("{S}", &schema), &[]))
        .map_err(|e| pg_err(&e))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let row = c
        .query_one(
            "SELECT count(*) FILTER (WHERE relkind IN ('r', 'm', 't')), \
             count(*) FILTER (WHERE relkind IN ('r', 'm') AND relispopulated AND EXISTS (SELECT 1 FROM pg_index i \
               JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam \
               WHERE i.indrelid = c.oid AND am.amname = 'btree' AND i.indpred IS NULL AND i.indisvalid AND i.indisready)) \
             FROM pg_class c WHERE relpersistence <> 't'",
            &[],
        )
        .map_err(|e| pg_err(&e))?;
    let (tables, counted): (i64, i64) = (row.get(0), row.get(1));
    c.batch_execute(COUNTS).map_err(|e| pg_err(&e))?;
    let rows = c
        .query("SELECT pg_temp.pagevault_counts()", &[])
        .map_err(|e| pg_err(&e))?;
    findings.extend(rows.iter().map(|r| r.get::<_, String>(0)));
    Ok(Db {
        tables,
        counted,
        findings,
    })
}

/// The check over every database that takes connections; skipped where the server has
/// no pg_visibility to install.
pub(super) fn visibility(srv: &Server) -> Check {
    let fail = |m: String| check("visibility", Outcome::Fail, m);
    let mut c = match srv.connect("postgres") {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot connect: {}", pg_err(&e))),
    };
    let row = c.query_one(
        "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_visibility'), \
         coalesce((SELECT array_agg(datname::text ORDER BY datname) FROM pg_database WHERE datallowconn), '{}')",
        &[],
    );
    let row = match row {
        Ok(r) => r,
        Err(e) => return fail(pg_err(&e)),
    };
    let (available, dbs): (bool, Vec<String>) = (row.get(0), row.get(1));
    if !available {
        return check(
            "visibility",
            Outcome::Skip,
            format!(
                "pg_visibility cannot be installed: the server of '{}' has no pg_visibility extension (PostgreSQL's contrib modules)",
                srv.bin.display()
            ),
        );
    }
    drop(c);
    let (mut tables, mut counted, mut findings) = (0, 0, vec![]);
    for db in &dbs {
        match one_db(srv, db) {
            Ok(d) => {
                tables += d.tables;
                counted += d.counted;
                findings.extend(d.findings);
            }
            Err(e) if e.missing => {
                return check(
                    "visibility",
                    Outcome::Skip,
                    format!("database {db}: {}", e.message),
                )
            }
            Err(e) => findings.push(format!("database {db}: {}", e.message)),
        }
    }
    if findings.is_empty() {
        return check(
            "visibility",
            Outcome::Ok,
            format!(
                "{tables} table(s) in {} database(s): no page the visibility map calls all-visible or all-frozen holds a tuple that is not; index-only and sequential scans count alike in {counted}",
                dbs.len()
            ),
        );
    }
    let n = findings.len();
    let mut detail = findings[..n.min(SHOWN)].join("\n");
    if n > SHOWN {
        detail.push_str(&format!("\n... ({} more)", n - SHOWN));
    }
    fail(detail)
}
