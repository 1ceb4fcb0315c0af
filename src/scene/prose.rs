//! One turn of prose in a round (a character's or the Narrator's): streamed, judged, and
//! drawn again when it says nothing of its own. An empty reply, or one that copies eight
//! words of its own prompt in a row (the character's card, its example dialogue, the
//! Narrator's instruction), is thrown away, the front doors are told
//! ([`SceneEvent::Redrawn`]) so they clear what streamed, and the model is asked again
//! with the reason, up to [`MAX_DRAWS`] times in all; the last draw stands if every one
//! failed, so a weak model still moves the scene rather than stopping it.

use super::{SceneError, SceneEvent};
use crate::context::Context;
use crate::llm::{CallContext, CancelToken, ChatMessage, ChatRequest, Completion, LlmClient, LlmError, Role, Usage};
use crate::prompting::echo::CopyGuard;
use crate::prompting::salvage::{self, StreamCut};

/// Draws per turn, the first included.
pub const MAX_DRAWS: u32 = 3;

/// Why `text` is not a turn of the scene, or `None` when it is. `others` are the names
/// whose lines this speaker must not write (the rest of the cast and the user's persona;
/// for the Narrator, all of them): a draw with a line `Name:` or `[Name]:` of one of them
/// speaks for them.
pub fn fault(text: &str, copies: &CopyGuard, others: &[String]) -> Option<String> {
    if text.trim().is_empty() {
        return Some("it was empty".into());
    }
    for line in text.lines() {
        let line = line.trim_start().trim_start_matches(['*', '"', '\'']).to_lowercase();
        for other in others.iter().map(|o| o.trim()).filter(|o| !o.is_empty()) {
            let other_lower = other.to_lowercase();
            if line.starts_with(&format!("{other_lower}:")) || line.starts_with(&format!("[{other_lower}]:")) {
                return Some(format!("it wrote {other}'s lines"));
            }
        }
    }
    copies.reason(text)
}

/// Who a prose draw speaks for: the scene and round, and the character (or `narrator`).
pub(crate) struct Speaker<'a> {
    pub scene_id: &'a str,
    pub round: u32,
    pub character_id: &'a str,
    pub name: &'a str,
    /// Whose lines it must not write (see [`fault`]).
    pub others: Vec<String>,
}

/// The names a speaker of `view` must not write lines for: every cast member but
/// `speaker` (a character's id; `None` for the Narrator, who speaks for no one), and the
/// user, by persona name and as "User".
pub(crate) fn others(view: &super::model::SceneView, speaker: Option<&str>) -> Vec<String> {
    view.cast
        .iter()
        .filter(|c| Some(c.id.as_str()) != speaker)
        .map(|c| c.name.clone())
        .chain([super::envelope::persona_name(view), "User".to_string()])
        .collect()
}

/// Stream `request` (its tokens to `on_token`) until a draw passes [`fault`]. Returns the
/// accepted completion with the usage of every draw added up.
pub(crate) fn draw(
    ctx: &Context,
    client: &LlmClient,
    mut request: ChatRequest,
    who: Speaker<'_>,
    cancel: &CancelToken,
    on_token: &(dyn Fn(&str) + Send + Sync),
) -> Result<Completion, SceneError> {
    let Speaker { scene_id, round, character_id, name, others } = who;
    // A failure names who failed (a cancel stays a cancel, which the round reports as such).
    let failed = |e: LlmError| match e {
        LlmError::Cancelled => SceneError::Llm(e),
        e if character_id == "narrator" => SceneError::Agent { agent: "narrator".into(), message: e.to_string() },
        e => SceneError::Agent { agent: format!("character {name}"), message: e.to_string() },
    };
    let copies = CopyGuard::new(request.messages.iter().map(|m| m.content.as_str()));
    let mut spent = Usage { prompt_tokens: 0, completion_tokens: 0, reported: true };
    let mut number = 1;
    let names: Vec<&str> = others.iter().map(String::as_str).collect();
    loop {
        // The stream shows what is kept: nothing from where the draw drifts into the
        // prompt's markup or another's line (see `salvage`).
        let stream = std::sync::Mutex::new(StreamCut::new(name, &names));
        let relay = |fragment: &str| {
            let shown = stream.lock().unwrap_or_else(|p| p.into_inner()).push(fragment);
            if let Some(shown) = shown {
                on_token(&shown);
            }
        };
        let on_wait = |holder: Option<&str>| {
            ctx.emit(SceneEvent::Waiting { scene_id: scene_id.to_string(), round, agent: name.to_string(), holder: holder.map(str::to_string) })
        };
        let result = client.complete(&request, CallContext::with_tokens(cancel, &relay).with_wait(&on_wait));
        if let Some(rest) = stream.lock().unwrap_or_else(|p| p.into_inner()).finish() {
            on_token(&rest);
        }
        let mut completion = result.map_err(failed)?;
        // A good line and then the prompt's markup or someone else's line: the line is
        // the turn; a draw with nothing before its drift is drawn again.
        let drifted = match salvage::cut(&completion.text, name, &names) {
            Ok((kept, Some(_))) => {
                completion.text = kept;
                None
            }
            Ok((_, None)) => None,
            Err(why) => Some(why.reason()),
        };
        spent = Usage {
            prompt_tokens: spent.prompt_tokens.saturating_add(completion.usage.prompt_tokens),
            completion_tokens: spent.completion_tokens.saturating_add(completion.usage.completion_tokens),
            reported: spent.reported && completion.usage.reported,
        };
        let Some(reason) = drifted.or_else(|| fault(&completion.text, &copies, &others)).filter(|_| number < MAX_DRAWS) else {
            completion.usage = spent;
            return Ok(completion);
        };
        tracing::info!(scene = scene_id, round, character = character_id, draw = number, %reason, "prose draw discarded");
        ctx.emit(SceneEvent::Redrawn {
            scene_id: scene_id.to_string(),
            round,
            character_id: character_id.to_string(),
            name: name.to_string(),
            reason: reason.clone(),
        });
        let note = format!("\n\nYour previous reply was discarded because {reason}. Write it again in your own words.");
        match request.messages.iter_mut().rev().find(|m| m.role == Role::User) {
            Some(user) if number == 1 => user.content.push_str(&note),
            Some(user) => {
                // One note at a time: replace the previous one.
                if let Some(at) = user.content.rfind("\n\nYour previous reply was discarded because") {
                    user.content.truncate(at);
                }
                user.content.push_str(&note);
            }
            None => request.messages.push(ChatMessage::user(note.trim().to_string())),
        }
        number += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_that_writes_others_lines_is_drawn_again() {
        let copies = CopyGuard::new([""]);
        let others = vec!["Wren".to_string(), "Corin".to_string()];
        let narrated = "The lamp gutters.\nWren: Now, tell us how it sounds.\nCorin: Now, tell us if it feels.";
        assert_eq!(fault(narrated, &copies, &others), Some("it wrote Wren's lines".into()));
        assert_eq!(fault("[corin]: I'll go.", &copies, &others), Some("it wrote Corin's lines".into()));
        assert_eq!(fault("Wren looks at Corin: a long, level look.", &copies, &others), None, "a name in the prose is no line of theirs");
        assert_eq!(fault("The tide turns.", &copies, &others), None);
    }
}
