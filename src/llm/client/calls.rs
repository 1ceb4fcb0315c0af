//! The call log: every LLM call as it was sent and what came back, kept in the library
//! so any agent's prompt can be read exactly as sent (the Prompt panel).
//!
//! Best effort by design: logging never fails or slows a call. It writes on its own
//! connection with a short busy timeout, and a write that cannot happen is dropped with
//! a warning. Only the newest [`KEEP`] calls are kept.

use crate::llm::{ChatRequest, Completion, LlmError};
use crate::store::{Store, StoreError, now_rfc3339};
use rusqlite::{Connection, params};
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Calls kept; older ones are deleted as new ones arrive.
pub const KEEP: i64 = 1000;

/// One logged call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallRecord {
    pub id: i64,
    pub at: String,
    pub profile: String,
    /// The agent that made the call (`director`, `character`, `companion`,
    /// `identity.personality`, …); empty for a client nobody named.
    pub agent: String,
    pub provider: String,
    pub model: String,
    /// The request as the client made it (profile defaults applied): its messages are
    /// exactly what was sent; the provider's wire body words the same settings its own
    /// way (an OpenAI `response_format.json_schema`, `max_tokens` at the top level).
    pub request: ChatRequest,
    pub reply: Option<String>,
    pub error: Option<String>,
    pub finish_reason: Option<String>,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub from_cache: bool,
    pub elapsed_ms: u64,
}

/// Who made a call and through what, as the log records it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub profile: &'a str,
    pub provider: &'a str,
    pub agent: &'a str,
}

#[derive(Clone)]
pub struct CallLog {
    store: Store,
    conn: Arc<Mutex<Option<Connection>>>,
}

impl CallLog {
    pub fn new(store: Store) -> Self {
        Self { store, conn: Arc::new(Mutex::new(None)) }
    }

    pub fn record(&self, call: Call<'_>, request: &ChatRequest, result: &Result<Completion, LlmError>, elapsed_ms: u64) {
        if let Err(e) = self.write(call, request, result, elapsed_ms) {
            tracing::warn!(error = %e, "could not log an LLM call");
        }
    }

    fn write(&self, call: Call<'_>, request: &ChatRequest, result: &Result<Completion, LlmError>, elapsed_ms: u64) -> Result<(), StoreError> {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(self.store.side_connection(Duration::from_millis(250))?);
        }
        let Some(conn) = slot.as_ref() else { return Ok(()) };
        let request_json = serde_json::to_string(request).map_err(|e| StoreError::Corrupt(format!("request: {e}")))?;
        let (reply, error, finish, usage, cached) = match result {
            Ok(c) => (Some(c.text.as_str()), None, c.finish_reason.as_deref(), c.usage, c.from_cache),
            Err(e) => (None, Some(e.to_string()), None, Default::default(), false),
        };
        conn.execute(
            "INSERT INTO llm_calls(at, profile, provider, model, request_json, reply, error, finish_reason, prompt_tokens, \
             completion_tokens, from_cache, elapsed_ms, agent) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                now_rfc3339(),
                call.profile,
                call.provider,
                request.model,
                request_json,
                reply,
                error,
                finish,
                usage.prompt_tokens,
                usage.completion_tokens,
                cached,
                elapsed_ms as i64,
                call.agent
            ],
        )?;
        conn.execute("DELETE FROM llm_calls WHERE rowid <= (SELECT max(rowid) FROM llm_calls) - ?1", [KEEP])?;
        Ok(())
    }
}

/// The newest `limit` calls, newest first.
pub fn recent(conn: &Connection, limit: u32) -> Result<Vec<CallRecord>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT rowid, at, profile, provider, model, request_json, reply, error, finish_reason, prompt_tokens, \
         completion_tokens, from_cache, elapsed_ms, agent FROM llm_calls ORDER BY rowid DESC LIMIT ?1",
    )?;
    let rows = stmt.query_map([limit], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, String>(4)?,
            r.get::<_, String>(5)?,
            r.get::<_, Option<String>>(6)?,
            r.get::<_, Option<String>>(7)?,
            r.get::<_, Option<String>>(8)?,
            r.get::<_, u32>(9)?,
            r.get::<_, u32>(10)?,
            r.get::<_, bool>(11)?,
            r.get::<_, i64>(12)?,
            r.get::<_, String>(13)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, at, profile, provider, model, request, reply, error, finish_reason, prompt_tokens, completion_tokens, from_cache, ms, agent) =
            row?;
        // A row this version cannot read is skipped, not fatal to the whole log.
        let Ok(request) = serde_json::from_str::<ChatRequest>(&request) else { continue };
        out.push(CallRecord {
            id,
            at,
            profile,
            agent,
            provider,
            model,
            request,
            reply,
            error,
            finish_reason,
            prompt_tokens,
            completion_tokens,
            from_cache,
            elapsed_ms: ms.max(0) as u64,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ChatMessage, Usage};

    #[test]
    fn calls_are_logged_newest_first_and_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("lib.sqlite")).unwrap();
        let log = CallLog::new(store.clone());
        let request = ChatRequest::new("m", vec![ChatMessage::system("You are a test."), ChatMessage::user("hi")]);
        for i in 0..(KEEP + 5) {
            let result = if i % 2 == 0 {
                Ok(Completion {
                    text: format!("reply {i}"),
                    usage: Usage { prompt_tokens: 3, completion_tokens: 2, reported: true },
                    finish_reason: Some("stop".into()),
                    model: "m".into(),
                    from_cache: false,
                    elapsed_ms: 1,
                })
            } else {
                Err(LlmError::Http { status: 500, message: "boom".into() })
            };
            let agent = if i % 3 == 0 { "director" } else { "narrator" };
            log.record(Call { profile: "p", provider: "scripted", agent }, &request, &result, 1);
        }
        let calls = store.with(|c| recent(c, 5000)).unwrap();
        assert_eq!(calls.len() as i64, KEEP);
        assert_eq!(calls[0].reply.as_deref(), Some(format!("reply {}", KEEP + 4).as_str()));
        assert!(calls[1].error.as_deref().unwrap().contains("500"));
        assert_eq!(calls[0].request, request);
        let agent = |i: i64| if i % 3 == 0 { "director" } else { "narrator" };
        assert_eq!(calls[0].agent, agent(KEEP + 4), "each call keeps the agent that made it");
        assert_eq!(calls[1].agent, agent(KEEP + 3));
    }
}
