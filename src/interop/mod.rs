//! Interoperability: Character Cards V2/V3 (JSON and PNG), World Info and lorebooks,
//! in and out without loss.

pub mod format;

use crate::engine::EngineContext;
use serde::Serialize;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub enum InteropCommand {}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum InteropEvent {}

pub fn handle(_ctx: &Arc<EngineContext>, command: InteropCommand) {
    match command {}
}
