//! Lorekeeper: a desktop workbench for LLM-driven roleplay campaigns.
//!
//! See `ARCHITECTURE.md` for the map. In short: front doors ([`ui`], [`cli`]) drive the
//! [`engine`] with commands and observe events; capabilities ([`llm`], [`memory`],
//! [`interop`], ...) do the work; [`store`] keeps everything durable.

pub mod cli;
pub mod companion;
pub mod character;
pub mod config;
pub mod context;
pub mod engine;
pub mod identity;
pub mod interop;
pub mod llm;
pub mod logging;
pub mod lorebook;
pub mod memory;
pub mod names;
pub mod paths;
pub mod prompting;
pub mod scene;
pub mod serve;
pub mod store;
pub mod ui;
pub mod watch;
