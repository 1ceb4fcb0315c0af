//! A library of a test's own, played by the scripted provider.

use lorekeeper::config::{Config, Paths};
use lorekeeper::llm::{ProviderKind, ProviderProfile};
use std::path::Path;

/// Paths under `dir`, and a config whose default profile plays `script` (the scripted
/// provider's rules) and which has no embedding model, whatever `models/` holds:
/// memories are searched by keyword.
pub fn scripted(dir: &Path, script: serde_json::Value) -> Paths {
    let paths = Paths { config_file: dir.join("config.toml"), library_file: dir.join("library.sqlite"), log_dir: dir.join("logs") };
    let file = dir.join("script.json");
    std::fs::write(&file, script.to_string()).unwrap();
    let mut config = Config::default();
    config.upsert_profile(ProviderProfile { name: "script".into(), kind: ProviderKind::Scripted, model: "s".into(), path: Some(file), ..Default::default() });
    config.default_profile = "script".into();
    config.memory.embedding.model_dir = Some(dir.join("no-model"));
    config.save(&paths.config_file).unwrap();
    paths
}
