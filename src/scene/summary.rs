//! The scene's running summary: every `summarise_every` rounds the `summariser` role
//! folds the rounds older than the last one into `scenes.summary`, and the envelope's
//! history then starts after the rounds the summary covers.
//!
//! It runs after the round has committed, in its own transaction, so a failed or slow
//! summary never costs the round. A scene's last rounds, which no periodic summary
//! covers, are folded in when a later scene of the campaign plays its next round
//! ([`catch_up_earlier`]). The write is a compare-and-set on the round the
//! summary covered before, so running it twice (or in two processes) changes nothing
//! the second time.

use super::SceneError;
use super::records;
use crate::context::Context;
use crate::llm::{CallContext, CancelToken, ChatMessage, ChatRequest, LlmClient};
use crate::prompting::PromptTemplates;
use rusqlite::{OptionalExtension, params};

/// Whether the round that just closed triggers a summary: `every` rounds have closed
/// since the round that wrote the last one. A summary written as round R closes covers
/// through R - 1 (the last round is always told verbatim), so the round that wrote it is
/// `summary_round + 1`; with no summary yet, rounds count from the scene's start. With
/// `every` 3, rounds 3, 6, 9… summarise. Never after round 1, which has nothing older
/// than itself; a summary that failed is tried again next round.
pub fn due(round: u32, summary_round: u32, every: u32) -> bool {
    let written_at = if summary_round == 0 { 0 } else { summary_round + 1 };
    every > 0 && round >= 2 && round.saturating_sub(written_at) >= every
}

/// The event saying `scene_id`'s summary now covers rounds 1 to `through_round`, with
/// the scene's name (a round can catch up an earlier scene's summary: the front doors
/// say which scene's it is).
pub fn updated(ctx: &Context, scene_id: &str, through_round: u32) -> super::SceneEvent {
    let scene = ctx
        .store
        .with(|c| Ok(c.query_row("SELECT name FROM scenes WHERE id = ?1", [scene_id], |r| r.get::<_, String>(0)).optional()?))
        .ok()
        .flatten()
        .unwrap_or_else(|| scene_id.to_string());
    super::SceneEvent::SummaryUpdated { scene_id: scene_id.to_string(), scene, through_round }
}

/// Fold rounds up to `through_round` into the scene's summary. `Ok(None)` when there is
/// nothing new to cover or another run already covered it.
///
/// The rounds are folded in chunks that fit the summariser's context with its reply's
/// cap: the oldest rounds first, each chunk's summary carried into the next, and each
/// written as it comes (so a backlog of any length is summarised, and a failure keeps the
/// chunks already folded). A round too long alone for the context has its lines clipped.
pub fn summarise(ctx: &Context, scene_id: &str, through_round: u32, cancel: &CancelToken) -> Result<Option<u32>, SceneError> {
    let config = ctx.config();
    let (previous, previous_round): (String, u32) = ctx.store.with(|c| {
        c.query_row("SELECT summary, summary_round FROM scenes WHERE id = ?1", [scene_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?
            .ok_or_else(|| crate::store::StoreError::NotFound(format!("scene {scene_id}")))
    })?;
    if previous_round >= through_round {
        return Ok(None);
    }
    let lines: Vec<(u32, String)> = ctx.store.with(|c| {
        let mut stmt = c.prepare(
            "SELECT round, speaker, content FROM scene_messages WHERE scene_id = ?1 AND round > ?2 AND round <= ?3 ORDER BY number",
        )?;
        let rows = stmt.query_map(params![scene_id, previous_round, through_round], |r| {
            let round = r.get::<_, u32>(0)?;
            Ok((round, format!("[round {round}] {}: {}", r.get::<_, String>(1)?, r.get::<_, String>(2)?)))
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    })?;
    if lines.is_empty() {
        return Ok(None);
    }
    // Whole rounds, oldest first.
    let mut rounds: Vec<(u32, Vec<String>)> = Vec::new();
    for (round, line) in lines {
        match rounds.last_mut() {
            Some((r, group)) if *r == round => group.push(line),
            _ => rounds.push((round, vec![line])),
        }
    }
    let templates = PromptTemplates::shipped()?;
    let profile = config.profile_for_role("summariser").map_err(|e| SceneError::Invalid(e.to_string()))?.clone();
    let client = LlmClient::from_profile(&profile, Some(&ctx.store))?.for_agent("summariser");
    let reply = crate::llm::client::planned_reply_cap(&profile, &crate::llm::ResponseFormat::Text);
    let room = profile.max_context_tokens.saturating_sub(reply);
    let max_words = config.scene.summary_max_words;
    let messages = |summary: &str, covered: u32, to_round: u32, transcript: &[String]| -> Result<Vec<ChatMessage>, SceneError> {
        let system = templates.render(
            "scene/summariser.j2",
            serde_json::json!({
                "previous": summary.trim(),
                "previous_round": covered,
                "from_round": covered + 1,
                "to_round": to_round,
                "transcript": transcript,
                "max_words": max_words,
            }),
        )?;
        Ok(vec![ChatMessage::system(system), ChatMessage::user(format!("Write the summary through round {to_round}."))])
    };
    let fits = |m: &[ChatMessage]| crate::llm::tokens::estimate_messages(m) <= room;

    let (mut summary, mut covered) = (previous, previous_round);
    let mut next = 0;
    while next < rounds.len() {
        if cancel.is_cancelled() {
            return Err(crate::llm::LlmError::Cancelled.into());
        }
        // As many whole rounds as fit, each line costed once; the chunk as rendered is
        // checked and shortened by a round should the estimate have been short.
        let base = crate::llm::tokens::estimate_messages(&messages(&summary, covered, through_round, &[])?);
        let mut end = next;
        let mut cost = base;
        while end < rounds.len() {
            let round_cost: u32 = rounds[end].1.iter().map(|l| crate::llm::tokens::estimate(l) + 1).sum();
            if cost + round_cost > room && end > next {
                break;
            }
            cost += round_cost;
            end += 1;
            if cost > room {
                break;
            }
        }
        let chunk = loop {
            let last = end == rounds.len();
            let to_round = if last { through_round } else { rounds[end - 1].0 };
            let transcript: Vec<String> = rounds[next..end].iter().flat_map(|(_, group)| group.iter().cloned()).collect();
            let candidate = messages(&summary, covered, to_round, &transcript)?;
            if fits(&candidate) {
                break Some((to_round, candidate));
            }
            if end - next == 1 {
                break None;
            }
            end -= 1;
        };
        let (to_round, request_messages) = match chunk {
            Some(chunk) => chunk,
            None => {
                // One round longer than the context allows: its lines clipped, each to
                // a shorter length until they fit.
                let to_round = if end == rounds.len() { through_round } else { rounds[next].0 };
                let group = &rounds[next].1;
                let mut limit = group.iter().map(|l| l.chars().count()).max().unwrap_or(0);
                loop {
                    limit /= 2;
                    let clipped: Vec<String> = group.iter().map(|l| crate::llm::structured::clip(l, limit)).collect();
                    let candidate = messages(&summary, covered, to_round, &clipped)?;
                    if fits(&candidate) {
                        break (to_round, candidate);
                    }
                    if limit < 40 {
                        let need = crate::llm::tokens::estimate_messages(&candidate) + reply;
                        return Err(SceneError::Agent {
                            agent: "summariser".into(),
                            message: format!(
                                "profile \"{}\" has {} tokens of context; summarising round {} needs at least {need} (the instructions, the summary so far and the round's lines clipped, with the reply's {reply})",
                                profile.name, profile.max_context_tokens, rounds[next].0
                            ),
                        });
                    }
                }
            }
        };
        let mut request = ChatRequest::new(profile.model.clone(), request_messages);
        request.sampler = profile.sampler.clone();
        let completion = client.complete(&request, CallContext::new(cancel))?;
        let text = completion.text.trim().to_string();
        if text.is_empty() {
            return Err(SceneError::Agent { agent: "summariser".into(), message: "the summary came back empty".into() });
        }
        // Written only if the rounds it tells are still there as read: a round taken back
        // (or a message deleted) while the summariser wrote must not be told.
        let told = rounds.iter().filter(|(r, _)| *r > covered && *r <= to_round).map(|(_, group)| group.len()).sum::<usize>() as i64;
        let changed = ctx.store.transaction(|tx| {
            Ok(tx.execute(
                "UPDATE scenes SET summary = ?2, summary_round = ?3 WHERE id = ?1 AND summary_round = ?4 \
                 AND (SELECT count(*) FROM scene_messages WHERE scene_id = ?1 AND round > ?4 AND round <= ?3) = ?5",
                params![scene_id, text, to_round, covered, told],
            )?)
        })?;
        if changed != 1 {
            // Another run folded these rounds meanwhile.
            return Ok(None);
        }
        (summary, covered) = (text, to_round);
        next = end.max(next + 1);
    }
    Ok(Some(covered))
}

/// Fold the last rounds of the campaign's earlier scenes, those their running summary
/// stops short of, into their summaries, so a later scene is told how each one ended
/// (a scene is summarised every few rounds, never at its end). Called as a later
/// scene's round starts, on the round's own thread (never the UI's); each scene is
/// caught up once, and a failure leaves that scene's summary as it was and says so.
pub fn catch_up_earlier(ctx: &Context, scene_id: &str, cancel: &CancelToken) {
    // Summaries turned off (`summarise_every = 0`): none is written, at the end either.
    if ctx.config().scene.summarise_every == 0 {
        return;
    }
    let stale = match ctx.store.with(|c| records::earlier_unsummarised(c, scene_id)) {
        Ok(stale) => stale,
        Err(e) => {
            tracing::warn!(scene = %scene_id, error = %e, "could not read the earlier scenes' summaries");
            return;
        }
    };
    for (earlier, rounds) in stale {
        if cancel.is_cancelled() {
            return;
        }
        match summarise(ctx, &earlier, rounds, cancel) {
            Ok(Some(through_round)) => ctx.emit(updated(ctx, &earlier, through_round)),
            Ok(None) => {}
            Err(e) => {
                // The summariser is failing: the rest wait for the next round rather
                // than each delay this one.
                tracing::warn!(scene = %earlier, error = %e, "earlier scene summary failed");
                ctx.emit(super::SceneEvent::SummaryFailed { scene_id: earlier, message: e.to_string() });
                return;
            }
        }
    }
}

/// The summary and the round it covers, for tests and the CLI.
pub fn current(conn: &rusqlite::Connection, scene_id: &str) -> Result<(String, u32), SceneError> {
    let notes = records::load_notes(conn, scene_id)?;
    Ok((notes.scene_summary, notes.summary_round))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_summary_is_due_every_n_rounds_but_never_after_the_first() {
        // (round, rounds covered, every) -> due
        let cases = [
            ((5, 0, 5), true),
            ((4, 0, 5), false),
            ((9, 4, 5), false), // round 5 wrote it: four rounds since
            ((10, 4, 5), true),
            ((6, 0, 5), true), // round 5's summary failed: try again
            ((1, 0, 1), false),
            ((2, 1, 1), false), // round 2 itself wrote it
            ((3, 1, 1), true),
            ((2, 0, 2), true),
            ((3, 1, 2), false),
            ((4, 1, 2), true),
            ((7, 0, 0), false),
        ];
        for ((round, covered, every), want) in cases {
            assert_eq!(super::due(round, covered, every), want, "round {round}, covered {covered}, every {every}");
        }
        // Played out: every 3 summarises at rounds 3 and 6 of 1–7, every 2 at 2, 4, 6.
        for (every, want) in [(3u32, vec![3u32, 6]), (2, vec![2, 4, 6]), (1, vec![2, 3, 4, 5, 6, 7])] {
            let mut covered = 0;
            let mut at = Vec::new();
            for round in 1..=7 {
                if super::due(round, covered, every) {
                    at.push(round);
                    covered = round - 1;
                }
            }
            assert_eq!(at, want, "every {every}");
        }
    }
}
