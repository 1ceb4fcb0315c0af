//! Schema migrations, applied in order and counted in `PRAGMA user_version`.
//!
//! Append only: a migration that has shipped is never edited. Each capability owns
//! its own files so the schema grows with the features that need it.

use super::StoreError;
use rusqlite::Connection;
use std::path::Path;

/// `(name, sql)` in application order.
pub const MIGRATIONS: &[(&str, &str)] = &[
    ("0001_core", include_str!("migrations/0001_core.sql")),
    ("0002_llm", include_str!("migrations/0002_llm.sql")),
    ("0003_memory", include_str!("migrations/0003_memory.sql")),
    ("0004_interop", include_str!("migrations/0004_interop.sql")),
    ("0005_identity", include_str!("migrations/0005_identity.sql")),
    ("0006_scene", include_str!("migrations/0006_scene.sql")),
    ("0007_memory_injections", include_str!("migrations/0007_memory_injections.sql")),
    ("0008_scene_lore", include_str!("migrations/0008_scene_lore.sql")),
    ("0009_companion", include_str!("migrations/0009_companion.sql")),
    ("0010_llm_calls", include_str!("migrations/0010_llm_calls.sql")),
    ("0011_memory_fts_text", include_str!("migrations/0011_memory_fts_text.sql")),
    ("0012_memory_seq", include_str!("migrations/0012_memory_seq.sql")),
    ("0013_campaign_authoring", include_str!("migrations/0013_campaign_authoring.sql")),
    ("0014_companion_swipes", include_str!("migrations/0014_companion_swipes.sql")),
    ("0015_scene_control", include_str!("migrations/0015_scene_control.sql")),
    ("0016_companion_chat_choices", include_str!("migrations/0016_companion_chat_choices.sql")),
    ("0017_companion_chat_files", include_str!("migrations/0017_companion_chat_files.sql")),
    ("0018_scene_round_alternatives", include_str!("migrations/0018_scene_round_alternatives.sql")),
    ("0019_character_and_chat_lorebooks", include_str!("migrations/0019_character_and_chat_lorebooks.sql")),
    ("0020_identity_runs_follow_characters", include_str!("migrations/0020_identity_runs_follow_characters.sql")),
    ("0021_campaign_budgets", include_str!("migrations/0021_campaign_budgets.sql")),
    ("0022_persona_images", include_str!("migrations/0022_persona_images.sql")),
    ("0023_memory_injection_log", include_str!("migrations/0023_memory_injection_log.sql")),
    ("0024_format_fallbacks", include_str!("migrations/0024_format_fallbacks.sql")),
    ("0025_job_leases", include_str!("migrations/0025_job_leases.sql")),
    ("0026_memory_curation", include_str!("migrations/0026_memory_curation.sql")),
    ("0027_llm_call_agents", include_str!("migrations/0027_llm_call_agents.sql")),
    ("0028_memory_vector_journal", include_str!("migrations/0028_memory_vector_journal.sql")),
    ("0029_companion_lore_timers", include_str!("migrations/0029_companion_lore_timers.sql")),
    ("0030_companion_turn_user_name", include_str!("migrations/0030_companion_turn_user_name.sql")),
    ("0031_companion_variables", include_str!("migrations/0031_companion_variables.sql")),
    ("0032_scene_redo_pending", include_str!("migrations/0032_scene_redo_pending.sql")),
    ("0033_identity_entry_input", include_str!("migrations/0033_identity_entry_input.sql")),
    ("0034_chat_author_note", include_str!("migrations/0034_chat_author_note.sql")),
    ("0035_companion_packet_spans", include_str!("migrations/0035_companion_packet_spans.sql")),
];

/// A file with no schema of ours but tables of its own is someone else's database:
/// giving it our tables would change another program's file.
pub(super) fn refuse_foreign(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let current: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let tables: u32 =
        conn.query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'", [], |r| r.get(0))?;
    if current == 0 && tables > 0 {
        return Err(StoreError::Foreign { path: path.to_path_buf(), tables });
    }
    // A schema version with none of our first migration's tables is not ours either
    // (another program's version number on an empty or unrelated file).
    let ours: bool = conn.query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('meta', 'characters')", [], |r| {
        r.get::<_, i64>(0).map(|n| n == 2)
    })?;
    if current > 0 && !ours {
        return Err(StoreError::Foreign { path: path.to_path_buf(), tables });
    }
    Ok(())
}

pub(super) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let current: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let known = MIGRATIONS.len() as u32;
    if current > known {
        return Err(StoreError::TooNew { path: path.to_path_buf(), found: current, known });
    }
    refuse_foreign(conn, path)?;
    for (index, (name, sql)) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql).map_err(|error| StoreError::Migration { name, error })?;
        tx.pragma_update(None, "user_version", index as u32 + 1)?;
        tx.commit()?;
        tracing::info!(migration = name, "applied schema migration");
    }
    Ok(())
}
