//! Agents: the loop, the registry of live agents (parents and children), and model providers.

pub mod openai;
pub mod provider;
