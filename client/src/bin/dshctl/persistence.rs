//! `dshctl persistence ...`: the active backend, and swapping it while dshd runs.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use dsh_client::Client;
use dsh_proto::v1;
use serde_json::json;

use crate::output::Output;

#[derive(Debug, Subcommand)]
pub enum PersistenceCommand {
    /// The active backend.
    Show,
    /// Swap the active backend; live sessions write their full logs to it at their next checkpoint.
    Use {
        #[command(subcommand)]
        backend: Backend,
    },
}

#[derive(Debug, Subcommand)]
pub enum Backend {
    /// One JSONL file per session.
    Jsonl {
        /// Sessions root (default: the configured jsonl.root).
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
    },
    /// One SQLite database for every session.
    Sqlite {
        /// Database file (default: the configured sqlite.path).
        #[arg(long, value_name = "FILE")]
        path: Option<PathBuf>,
    },
    /// One PostgreSQL database, shared by the daemons of many machines.
    Postgres {
        /// Connection string, a URL (postgresql://user:password@host/db) or key=value pairs
        /// (default: the configured postgres.url or postgres.url_file). Read from the
        /// environment variable DSH_POSTGRES_URL when set, which keeps a password out of the
        /// shell history and `ps`.
        #[arg(
            long,
            value_name = "URL",
            env = "DSH_POSTGRES_URL",
            hide_env_values = true
        )]
        url: Option<String>,
    },
}

fn absolute(path: Option<PathBuf>) -> anyhow::Result<String> {
    Ok(match path {
        Some(p) => std::path::absolute(&p)
            .with_context(|| format!("cannot make {} absolute", p.display()))?
            .to_string_lossy()
            .into_owned(),
        None => String::new(),
    })
}

pub async fn run(client: &Client, out: Output, command: PersistenceCommand) -> anyhow::Result<()> {
    let mut persistence = client.persistence();
    let description = match command {
        PersistenceCommand::Show => persistence.describe(v1::DescribeBackendRequest {}).await?,
        PersistenceCommand::Use { backend } => {
            let backend = match backend {
                Backend::Jsonl { root } => {
                    v1::use_backend_request::Backend::Jsonl(v1::JsonlBackend {
                        root: absolute(root)?,
                    })
                }
                Backend::Sqlite { path } => {
                    v1::use_backend_request::Backend::Sqlite(v1::SqliteBackend {
                        path: absolute(path)?,
                    })
                }
                Backend::Postgres { url } => {
                    v1::use_backend_request::Backend::Postgres(v1::PostgresBackend {
                        url: url.unwrap_or_default(),
                    })
                }
            };
            persistence
                .r#use(v1::UseBackendRequest {
                    backend: Some(backend),
                })
                .await?
        }
    }
    .into_inner();
    out.emit(
        &json!({ "name": description.name, "path": description.path }),
        |w| writeln!(w, "{} {}", description.name, description.path),
    )
}
