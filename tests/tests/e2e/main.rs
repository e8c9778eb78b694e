//! dsh end to end: the real `dshd` and `dshctl`, built once for the whole suite (one test binary,
//! so one link and one escargot build), run on private temporary homes and sockets. Each module
//! is one area; `cargo test -p dsh-tests --test e2e <module>::` runs one of them.

mod acp;
mod agents;
mod cli;
mod client_env;
mod compaction;
mod contributors;
mod daemon;
mod escapes;
mod files;
mod full_loop;
mod hooks;
mod instructions;
mod launcher;
mod live;
mod managed_env;
mod mcp;
mod models;
mod observability;
mod openai;
mod persistence;
mod readme;
mod refusals;
mod sandbox;
mod shell;
mod slow_client;
mod socket;
mod terminal;
mod transfer;
mod turns;
