//! The versioned schema: the migrations in `migrations/`, applied in order, each once, recorded
//! in `dsh_migrations`. Every dshd that connects runs [`migrate`]; an advisory lock taken inside
//! the migrating transaction makes concurrent daemons wait for each other, so each migration runs
//! exactly once whoever starts first.

use tokio_postgres::Client;

/// The migrations, by version (1, 2, ...): file name and SQL.
pub(crate) const MIGRATIONS: &[(&str, &str)] = &[(
    "0001_initial.sql",
    include_str!("migrations/0001_initial.sql"),
)];

/// The schema version this build writes and reads: the number of migrations.
pub(crate) const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// The advisory lock key of migrations: "DSH1", as the SQLite `application_id`.
const MIGRATION_LOCK: i64 = 0x4453_4831;

/// What [`migrate`] found.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The schema is this build's (after applying what was missing).
    Current,
    /// A newer dsh migrated the database: this one must not write to it.
    Newer(i32),
}

/// Brings the database to [`SCHEMA_VERSION`], in one transaction.
pub(crate) async fn migrate(client: &mut Client) -> Result<Outcome, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS dsh_migrations (
             version    integer PRIMARY KEY,
             name       text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await?;
    let current: i32 = tx
        .query_one("SELECT COALESCE(MAX(version), 0) FROM dsh_migrations", &[])
        .await?
        .get(0);
    if current > SCHEMA_VERSION {
        tx.rollback().await?;
        return Ok(Outcome::Newer(current));
    }
    for (version, (name, sql)) in (1..).zip(MIGRATIONS) {
        if version <= current {
            continue;
        }
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO dsh_migrations (version, name) VALUES ($1, $2)",
            &[&version, name],
        )
        .await?;
        tracing::info!(version, name, "applied a PostgreSQL schema migration");
    }
    tx.commit().await?;
    Ok(Outcome::Current)
}
