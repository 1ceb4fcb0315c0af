//! Commands about providers and profiles.

use super::{EngineContext, Event};
use crate::llm::{CallContext, CancelToken, ChatMessage, ChatRequest, LlmClient, ProviderProfile, Usage};
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone)]
pub enum LlmCommand {
    /// Send a tiny request through the named profile and report what came back.
    TestProfile { profile: String },
    /// Insert or replace a profile (renaming when `previous_name` differs) and save.
    SaveProfile { profile: ProviderProfile, previous_name: Option<String> },
    DeleteProfile { name: String },
    SetDefaultProfile { name: String },
    /// Map an agent role to a profile, or back to the default with `None`.
    MapRole { role: String, profile: Option<String> },
    /// Report the newest logged calls as [`LlmEvent::Calls`].
    Calls { limit: u32 },
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum LlmEvent {
    ProfileTestStarted { profile: String },
    ProfileToken { profile: String, text: String },
    ProfileTested {
        profile: String,
        ok: bool,
        provider: String,
        model: String,
        reply: String,
        usage: Usage,
        latency_ms: u64,
        error: Option<String>,
    },
    /// The configuration changed and was saved.
    ConfigSaved,
    /// The newest LLM calls as sent, newest first.
    Calls { calls: Vec<crate::llm::calls::CallRecord> },
}

pub(super) fn handle(ctx: &Arc<EngineContext>, command: LlmCommand) {
    match command {
        LlmCommand::TestProfile { profile } => {
            let ctx = ctx.clone();
            ctx.runtime.clone().spawn_blocking(move || test_profile(&ctx, &profile));
        }
        LlmCommand::SaveProfile { profile, previous_name } => save(ctx, "save profile", |c| {
            if let Some(old) = previous_name.filter(|old| *old != profile.name) {
                c.profiles.retain(|p| p.name != old);
                if c.default_profile == old {
                    c.default_profile = profile.name.clone();
                }
                for mapped in c.roles.values_mut().filter(|m| **m == old) {
                    *mapped = profile.name.clone();
                }
            }
            c.upsert_profile(profile);
        }),
        LlmCommand::DeleteProfile { name } => save(ctx, "delete profile", |c| {
            c.profiles.retain(|p| p.name != name);
            c.roles.retain(|_, p| *p != name);
        }),
        LlmCommand::Calls { limit } => {
            let ctx = ctx.clone();
            ctx.runtime.clone().spawn_blocking(move || {
                match ctx.store.reader().and_then(|c| crate::llm::calls::recent(&c, limit)) {
                    Ok(calls) => ctx.emit(Event::Llm(LlmEvent::Calls { calls })),
                    Err(e) => ctx.emit(Event::error("llm calls", e)),
                }
            });
        }
        LlmCommand::SetDefaultProfile { name } => save(ctx, "set default profile", |c| c.default_profile = name),
        LlmCommand::MapRole { role, profile } => save(ctx, "map role", |c| match profile {
            Some(p) => {
                c.roles.insert(role, p);
            }
            None => {
                c.roles.remove(&role);
            }
        }),
    }
}

fn save(ctx: &EngineContext, what: &str, change: impl FnOnce(&mut crate::config::Config)) {
    match ctx.update_config(change) {
        Ok(_) => ctx.emit(Event::Llm(LlmEvent::ConfigSaved)),
        Err(e) => ctx.emit(Event::error(what, e)),
    }
}

fn test_profile(ctx: &EngineContext, name: &str) {
    ctx.emit(Event::Llm(LlmEvent::ProfileTestStarted { profile: name.to_string() }));
    let config = ctx.config();
    let Some(profile) = config.profile(name) else {
        ctx.emit(Event::error("test profile", format!("no profile named {name:?}")));
        return;
    };
    let started = Instant::now();
    let outcome = LlmClient::from_profile(profile, Some(&ctx.store)).and_then(|client| {
        let mut request = ChatRequest::new(
            profile.model.clone(),
            vec![
                ChatMessage::system("You are a connection test. Answer with one short sentence."),
                ChatMessage::user("Say hello to the game master."),
            ],
        );
        request.stream = true;
        request.sampler.max_tokens = Some(32);
        let cancel = CancelToken::new();
        let sink = |text: &str| {
            ctx.emit(Event::Llm(LlmEvent::ProfileToken { profile: name.to_string(), text: text.to_string() }))
        };
        let completion = client.complete(&request, CallContext::with_tokens(&cancel, &sink))?;
        Ok((client.describe(), completion))
    });
    let latency_ms = started.elapsed().as_millis() as u64;
    let event = match outcome {
        Ok((provider, c)) => LlmEvent::ProfileTested {
            profile: name.to_string(),
            ok: true,
            provider,
            model: c.model,
            reply: c.text,
            usage: c.usage,
            latency_ms,
            error: None,
        },
        Err(e) => LlmEvent::ProfileTested {
            profile: name.to_string(),
            ok: false,
            provider: profile.kind.label().to_string(),
            model: profile.model.clone(),
            reply: String::new(),
            usage: Usage::default(),
            latency_ms,
            error: Some(e.to_string()),
        },
    };
    ctx.emit(Event::Llm(event));
}
