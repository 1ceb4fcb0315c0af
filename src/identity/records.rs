//! The identity pipeline's rows: runs, checkpoints and their versions.

use super::schema::{Agent, CharacterSeed, Mode};
use crate::llm::Usage;
use crate::store::{StoreError, now_rfc3339};
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    InProgress,
    Completed,
    Failed,
}

impl RunStatus {
    fn as_str(self) -> &'static str {
        match self {
            RunStatus::InProgress => "in_progress",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
        }
    }
    fn parse(s: &str) -> Result<Self, StoreError> {
        match s {
            "in_progress" => Ok(RunStatus::InProgress),
            "completed" => Ok(RunStatus::Completed),
            "failed" => Ok(RunStatus::Failed),
            other => Err(StoreError::Corrupt(format!("unknown run status {other:?}"))),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointStatus {
    /// Waiting for its wave.
    Queued,
    Running,
    AwaitingApproval,
    Approved,
    /// Rejected with feedback; the agent is running again.
    Regenerating,
    /// An earlier checkpoint it read was re-opened: re-run it or keep it.
    Stale,
    /// The agent failed after its retries; retry it.
    Failed,
}

impl CheckpointStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointStatus::Queued => "queued",
            CheckpointStatus::Running => "running",
            CheckpointStatus::AwaitingApproval => "awaiting_approval",
            CheckpointStatus::Approved => "approved",
            CheckpointStatus::Regenerating => "regenerating",
            CheckpointStatus::Stale => "stale",
            CheckpointStatus::Failed => "failed",
        }
    }
    fn parse(s: &str) -> Result<Self, StoreError> {
        Ok(match s {
            "queued" => CheckpointStatus::Queued,
            "running" => CheckpointStatus::Running,
            "awaiting_approval" => CheckpointStatus::AwaitingApproval,
            "approved" => CheckpointStatus::Approved,
            "regenerating" => CheckpointStatus::Regenerating,
            "stale" => CheckpointStatus::Stale,
            "failed" => CheckpointStatus::Failed,
            other => return Err(StoreError::Corrupt(format!("unknown checkpoint status {other:?}"))),
        })
    }
    pub fn is_working(self) -> bool {
        matches!(self, CheckpointStatus::Running | CheckpointStatus::Regenerating)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRecord {
    pub id: String,
    pub name: String,
    pub mode: Mode,
    pub seed: CharacterSeed,
    /// What the entry agent sent to start the run, as it sent it (`POST
    /// /api/character/start`); `None` when the seed is the input (a seed file, the GUI).
    pub entry_input: Option<serde_json::Value>,
    pub profile: Option<String>,
    pub auto_approve: bool,
    pub status: RunStatus,
    pub regenerations: u32,
    pub created_at: String,
    pub completed_at: Option<String>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointRecord {
    pub number: u8,
    pub agent: Agent,
    pub wave: u8,
    pub status: CheckpointStatus,
    pub current_version: u32,
    pub pending_feedback: Option<String>,
    pub error: Option<String>,
    pub updated_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VersionRecord {
    pub number: u8,
    pub version: u32,
    pub narrative: String,
    pub structured: serde_json::Value,
    pub attempts: serde_json::Value,
    pub prompt: serde_json::Value,
    pub feedback: Option<String>,
    pub based_on: BTreeMap<u8, u32>,
    pub usage: Usage,
    pub wall_ms: u64,
    pub started_at: String,
    pub created_at: String,
}

impl VersionRecord {
    /// A draw whose attempts were all refused: kept for its attempts and tokens, with no
    /// output (`structured` is null), never put up for approval.
    pub fn is_failed(&self) -> bool {
        self.structured.is_null()
    }

    /// The version as one text to read or compare (the inspector's diff, `identity
    /// diff`): its narrative and its fields as JSON, or, for a failed draw, why each
    /// attempt was refused.
    pub fn as_text(&self) -> String {
        if self.is_failed() {
            let outcomes: Vec<String> = self.attempts.as_array().map_or_else(Vec::new, |list| {
                list.iter().map(|a| format!("attempt {}: {}", a["number"].as_u64().unwrap_or(0), attempt_outcome(a))).collect()
            });
            return format!("(a failed draw: no output)\n{}", outcomes.join("\n"));
        }
        format!("{}\n\n{}", self.narrative, serde_json::to_string_pretty(&self.structured).unwrap_or_default())
    }
}

/// One attempt's outcome in words: accepted, or refused and why.
pub fn attempt_outcome(attempt: &serde_json::Value) -> String {
    let Some(failure) = attempt.get("failure").filter(|f| !f.is_null()) else { return "accepted".into() };
    let errors = attempt["errors"].as_array().map_or(0, Vec::len);
    let why = serde_json::from_value::<crate::llm::structured::AttemptFailure>(failure.clone())
        .map(|f| f.to_string())
        .unwrap_or_else(|_| failure["kind"].as_str().unwrap_or("not accepted").replace('_', " "));
    match errors {
        0 => format!("refused: {why}"),
        1 => format!("refused: {why} (1 problem below)"),
        n => format!("refused: {why} ({n} problems below)"),
    }
}

fn json_col<T: serde::de::DeserializeOwned>(row: &Row<'_>, index: usize) -> rusqlite::Result<T> {
    let text: String = row.get(index)?;
    serde_json::from_str(&text)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(e)))
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

/// Insert a new run with its seven checkpoints, all queued.
pub fn insert_run(conn: &Connection, run: &RunRecord) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO identity_runs (id, name, mode, input_json, profile, auto_approve, status, regenerations, created_at, entry_input_json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8, ?9)",
        params![
            run.id,
            run.name,
            run.mode.label(),
            serde_json::to_string(&run.seed).map_err(corrupt)?,
            run.profile,
            run.auto_approve,
            run.status.as_str(),
            run.created_at,
            run.entry_input.as_ref().map(serde_json::to_string).transpose().map_err(corrupt)?
        ],
    )?;
    for agent in Agent::ALL {
        conn.execute(
            "INSERT INTO identity_checkpoints (run_id, number, agent, wave, status, updated_at) VALUES (?1, ?2, ?3, ?4, 'queued', ?5)",
            params![run.id, agent.number(), agent.name(), agent.wave(), run.created_at],
        )?;
    }
    Ok(())
}

/// Give a run the name its character was saved under.
pub fn rename_run(conn: &Connection, run_id: &str, name: &str) -> Result<(), StoreError> {
    conn.execute("UPDATE identity_runs SET name = ?2 WHERE id = ?1", params![run_id, name])?;
    Ok(())
}

pub fn load_run(conn: &Connection, id: &str) -> Result<RunRecord, StoreError> {
    conn.query_row(
        "SELECT id, name, mode, input_json, profile, auto_approve, status, regenerations, created_at, completed_at, error, entry_input_json
         FROM identity_runs WHERE id = ?1",
        [id],
        run_from_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::NotFound(format!("identity run {id}")))?
}

fn run_from_row(row: &Row<'_>) -> rusqlite::Result<Result<RunRecord, StoreError>> {
    let mode: String = row.get(2)?;
    let status: String = row.get(6)?;
    let seed: CharacterSeed = json_col(row, 3)?;
    let entry_input: Option<String> = row.get(11)?;
    let entry_input = match entry_input {
        Some(text) => Some(serde_json::from_str(&text).map_err(|e| rusqlite::Error::FromSqlConversionFailure(11, rusqlite::types::Type::Text, Box::new(e)))?),
        None => None,
    };
    Ok((|| {
        Ok(RunRecord {
            id: row.get(0)?,
            name: row.get(1)?,
            mode: Mode::parse(&mode).ok_or_else(|| corrupt(format!("unknown mode {mode:?}")))?,
            seed,
            entry_input,
            profile: row.get(4)?,
            auto_approve: row.get(5)?,
            status: RunStatus::parse(&status)?,
            regenerations: row.get(7)?,
            created_at: row.get(8)?,
            completed_at: row.get(9)?,
            error: row.get(10)?,
        })
    })())
}

pub fn list_runs(conn: &Connection) -> Result<Vec<RunRecord>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT id, name, mode, input_json, profile, auto_approve, status, regenerations, created_at, completed_at, error, entry_input_json
         FROM identity_runs ORDER BY created_at, id",
    )?;
    let rows = stmt.query_map([], run_from_row)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row??);
    }
    Ok(out)
}

/// Whether the library holds any identity run, finished or not: a library with one is
/// the user's (see `scene::demo::ensure`).
pub fn any_run(conn: &Connection) -> Result<bool, StoreError> {
    Ok(conn.query_row("SELECT EXISTS(SELECT 1 FROM identity_runs)", [], |r| r.get(0))?)
}

pub fn checkpoints(conn: &Connection, run_id: &str) -> Result<Vec<CheckpointRecord>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT number, status, current_version, pending_feedback, error, updated_at
         FROM identity_checkpoints WHERE run_id = ?1 ORDER BY number",
    )?;
    let rows = stmt.query_map([run_id], |row| {
        let number: u8 = row.get(0)?;
        let status: String = row.get(1)?;
        Ok((number, status, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (number, status, current_version, pending_feedback, error, updated_at) = row?;
        let agent = Agent::from_number(number).ok_or_else(|| corrupt(format!("checkpoint number {number}")))?;
        out.push(CheckpointRecord {
            number,
            agent,
            wave: agent.wave(),
            status: CheckpointStatus::parse(&status)?,
            current_version,
            pending_feedback,
            error,
            updated_at,
        });
    }
    Ok(out)
}

pub fn set_status(
    conn: &Connection,
    run_id: &str,
    number: u8,
    status: CheckpointStatus,
    error: Option<&str>,
) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE identity_checkpoints SET status = ?3, error = ?4, updated_at = ?5 WHERE run_id = ?1 AND number = ?2",
        params![run_id, number, status.as_str(), error, now_rfc3339()],
    )?;
    Ok(())
}

pub fn set_pending_feedback(conn: &Connection, run_id: &str, number: u8, feedback: Option<&str>) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE identity_checkpoints SET pending_feedback = ?3 WHERE run_id = ?1 AND number = ?2",
        params![run_id, number, feedback],
    )?;
    Ok(())
}

/// Store a new version and put it up for approval (the caller's transaction makes the
/// two one step).
pub fn insert_version(conn: &Connection, run_id: &str, v: &VersionRecord) -> Result<(), StoreError> {
    insert_row(conn, run_id, v)?;
    conn.execute(
        "UPDATE identity_checkpoints SET current_version = ?3, status = 'awaiting_approval', pending_feedback = NULL,
             error = NULL, updated_at = ?4 WHERE run_id = ?1 AND number = ?2",
        params![run_id, v.number, v.version, v.created_at],
    )?;
    Ok(())
}

/// Keep a failed draw (its refused attempts and the tokens they cost) as a version that
/// is never current: the checkpoint keeps whatever version it showed before.
pub fn insert_failed_version(conn: &Connection, run_id: &str, v: &VersionRecord) -> Result<(), StoreError> {
    insert_row(conn, run_id, v)
}

fn insert_row(conn: &Connection, run_id: &str, v: &VersionRecord) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO identity_versions (run_id, number, version, narrative, structured_json, attempts_json, prompt_json,
            feedback, based_on_json, prompt_tokens, completion_tokens, usage_reported, wall_ms, started_at, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        params![
            run_id,
            v.number,
            v.version,
            v.narrative,
            v.structured.to_string(),
            v.attempts.to_string(),
            v.prompt.to_string(),
            v.feedback,
            serde_json::to_string(&v.based_on).map_err(corrupt)?,
            v.usage.prompt_tokens,
            v.usage.completion_tokens,
            v.usage.reported,
            v.wall_ms as i64,
            v.started_at,
            v.created_at
        ],
    )?;
    Ok(())
}

const VERSION_COLUMNS: &str = "number, version, narrative, structured_json, attempts_json, prompt_json, feedback,
    based_on_json, prompt_tokens, completion_tokens, usage_reported, wall_ms, started_at, created_at";

fn version_from_row(row: &Row<'_>) -> rusqlite::Result<VersionRecord> {
    let based_on: BTreeMap<String, u32> = json_col(row, 7)?;
    Ok(VersionRecord {
        number: row.get(0)?,
        version: row.get(1)?,
        narrative: row.get(2)?,
        structured: json_col(row, 3)?,
        attempts: json_col(row, 4)?,
        prompt: json_col(row, 5)?,
        feedback: row.get(6)?,
        based_on: based_on.into_iter().filter_map(|(k, v)| k.parse().ok().map(|k| (k, v))).collect(),
        usage: Usage { prompt_tokens: row.get(8)?, completion_tokens: row.get(9)?, reported: row.get(10)? },
        wall_ms: row.get::<_, i64>(11)?.max(0) as u64,
        started_at: row.get(12)?,
        created_at: row.get(13)?,
    })
}

/// Every token a run's agents were billed for: all versions of every checkpoint,
/// regenerated and rejected ones too (a version written by hand cost none).
pub fn run_tokens(conn: &Connection, run_id: &str) -> Result<u64, StoreError> {
    let total: i64 =
        conn.query_row("SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0) FROM identity_versions WHERE run_id = ?1", [run_id], |r| r.get(0))?;
    Ok(total.max(0) as u64)
}

pub fn versions(conn: &Connection, run_id: &str, number: u8) -> Result<Vec<VersionRecord>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {VERSION_COLUMNS} FROM identity_versions WHERE run_id = ?1 AND number = ?2 ORDER BY version"
    ))?;
    let rows = stmt.query_map(params![run_id, number], version_from_row)?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

pub fn version(conn: &Connection, run_id: &str, number: u8, version: u32) -> Result<Option<VersionRecord>, StoreError> {
    Ok(conn
        .query_row(
            &format!("SELECT {VERSION_COLUMNS} FROM identity_versions WHERE run_id = ?1 AND number = ?2 AND version = ?3"),
            params![run_id, number, version],
            version_from_row,
        )
        .optional()?)
}

/// The current version of every checkpoint that has one.
pub fn current_versions(conn: &Connection, run_id: &str) -> Result<BTreeMap<u8, VersionRecord>, StoreError> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {} FROM identity_versions v JOIN identity_checkpoints c
           ON c.run_id = v.run_id AND c.number = v.number AND c.current_version = v.version
         WHERE v.run_id = ?1 ORDER BY v.number",
        VERSION_COLUMNS.split(',').map(|c| format!("v.{}", c.trim())).collect::<Vec<_>>().join(", ")
    ))?;
    let rows = stmt.query_map([run_id], version_from_row)?;
    let mut out = BTreeMap::new();
    for row in rows {
        let v = row?;
        out.insert(v.number, v);
    }
    Ok(out)
}

pub fn bump_regenerations(conn: &Connection, run_id: &str) -> Result<(), StoreError> {
    conn.execute("UPDATE identity_runs SET regenerations = regenerations + 1 WHERE id = ?1", [run_id])?;
    Ok(())
}

/// Mark a run finished; `NotFound` when it is gone (deleted while its last agent ran),
/// so a transaction that would also make its character is rolled back.
pub fn finish_run(conn: &Connection, run_id: &str, status: RunStatus, error: Option<&str>) -> Result<(), StoreError> {
    let completed_at = (status == RunStatus::Completed).then(now_rfc3339);
    let changed = conn.execute(
        "UPDATE identity_runs SET status = ?2, error = ?3, completed_at = ?4 WHERE id = ?1",
        params![run_id, status.as_str(), error, completed_at],
    )?;
    if changed == 0 {
        return Err(StoreError::NotFound(format!("identity run {run_id}")));
    }
    Ok(())
}

/// Delete a run with its checkpoints and versions (they cascade); the run as it was, or
/// `None` when there is no such run. A run that has become a character goes with it
/// (`identity_runs_follow_characters`); this is for one that has not yet.
pub fn delete_run(conn: &Connection, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
    let run = match load_run(conn, run_id) {
        Ok(run) => run,
        Err(StoreError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    conn.execute("DELETE FROM identity_runs WHERE id = ?1", [run_id])?;
    Ok(Some(run))
}

pub fn reopen_run(conn: &Connection, run_id: &str) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE identity_runs SET status = 'in_progress', completed_at = NULL, error = NULL WHERE id = ?1",
        [run_id],
    )?;
    Ok(())
}
