//! Commands about providers and profiles.

use crate::config::Config;
use crate::context::{Context, CoreEvent};
use crate::llm::{CallContext, CancelToken, ChatMessage, ChatRequest, LlmClient, ProviderProfile, Usage};
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone)]
pub enum LlmCommand {
    /// Send a tiny request through the named profile and report what came back.
    TestProfile { profile: String },
    /// Save a profile: a new one (`previous_name` `None`; refused when the name is taken)
    /// or the one named `previous_name`, renamed when the name differs (refused onto
    /// another profile's name). A rename moves the keyring's key along and then reports
    /// [`LlmEvent::KeyStatus`] of the new name.
    SaveProfile { profile: ProviderProfile, previous_name: Option<String> },
    /// Delete a profile and its keyring key (refused for the default profile: select
    /// another first), then report [`LlmEvent::KeyStatus`] of the name, `cleared`.
    DeleteProfile { name: String },
    SetDefaultProfile { name: String },
    /// Map an agent role to a profile, or back to the default with `None`.
    MapRole { role: String, profile: Option<String> },
    /// Report the newest logged calls as [`LlmEvent::Calls`].
    Calls { limit: u32 },
    /// Report the configuration as [`LlmEvent::Config`].
    Config,
    /// Store `key` in the keyring as the key of `profile`, then report
    /// [`LlmEvent::KeyStatus`]. The key travels in a [`crate::llm::Secret`], whose
    /// `Debug` (the engine logs commands at debug level) never shows it.
    SetKey { profile: String, key: crate::llm::Secret },
    /// Remove the keyring's key of `profile`, then report [`LlmEvent::KeyStatus`].
    ClearKey { profile: String },
    /// Report where the key of `profile` comes from as [`LlmEvent::KeyStatus`].
    KeyStatus { profile: String },
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
    /// The configuration as it is now (never holds a key), with a plain line saying
    /// what the default profile runs on: sent on request and after every save, so a
    /// front door never reads the config or stats the model file itself.
    Config { config: Box<Config>, model: ModelLine },
    /// Where the key of `profile` comes from now, and what the keyring said when it
    /// was asked (`stored` / `cleared` on success, `problem` when it failed or there is
    /// no keyring). Never the key itself. `keyring`: whether this process has a keyring
    /// to keep keys in (false with none installed or none answering), so a front door
    /// can say so calmly and offer no Store button that cannot work.
    KeyStatus {
        profile: String,
        source: crate::llm::keyring::KeySource,
        action: KeyAction,
        problem: Option<String>,
        keyring: bool,
    },
}

/// What a [`LlmEvent::KeyStatus`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyAction {
    Stored,
    Cleared,
    Checked,
}

/// One provider profile as the front doors list it (`providers list`, `GET
/// /api/providers`): what it reaches and how, never a key — only where a key is read from.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ProfileSummary {
    pub name: String,
    /// openai, anthropic, gemini, scripted or local.
    pub kind: String,
    pub model: String,
    /// Scheme, host and port only (a path or query may carry a key).
    pub base_url: Option<String>,
    /// The environment variable a key is read from (the keyring is asked after it).
    pub key_env: Option<String>,
    pub max_context_tokens: u32,
    /// The script or model file (scripted and local profiles).
    pub path: Option<String>,
    /// Whether it is the selected (default) profile: every role not mapped uses it.
    pub default: bool,
    /// The agent roles mapped to it.
    pub roles: Vec<String>,
}

/// Every profile, the one selected and the role map: what the Providers panel shows.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ProfileList {
    /// The selected profile's name: every role not mapped uses it.
    pub default_profile: String,
    /// Role name → profile name.
    pub roles: std::collections::BTreeMap<String, String>,
    /// What the default profile runs on, in a plain line.
    pub model: String,
    pub profiles: Vec<ProfileSummary>,
}

impl ProfileList {
    pub fn of(config: &Config) -> Self {
        let profiles = config
            .profiles
            .iter()
            .map(|p| ProfileSummary {
                name: p.name.clone(),
                kind: p.kind.label().to_string(),
                model: p.model.clone(),
                base_url: p.base_url().map(crate::llm::shown_endpoint),
                key_env: p.key_env().map(str::to_string),
                max_context_tokens: p.max_context_tokens,
                path: p.path.as_ref().map(|p| p.display().to_string()),
                default: p.name == config.default_profile,
                roles: config.roles.iter().filter(|(_, v)| **v == p.name).map(|(k, _)| k.clone()).collect(),
            })
            .collect();
        Self {
            default_profile: config.default_profile.clone(),
            roles: config.roles.clone(),
            model: ModelLine::of(config).text,
            profiles,
        }
    }
}

/// What the default profile runs on, said plainly, with a hint for switching.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelLine {
    pub text: String,
    pub hint: String,
}

impl ModelLine {
    pub fn of(config: &Config) -> Self {
        use crate::llm::ProviderKind;
        let hint = "Click to choose another profile: a local server (llama.cpp, Ollama, LM Studio) or an API.".to_string();
        let Some(p) = config.profile(&config.default_profile) else {
            return Self { text: "No default profile".into(), hint };
        };
        let text = match p.kind {
            ProviderKind::Local => {
                let path = crate::llm::local::resolve_model_path(p.path.as_deref());
                match std::fs::metadata(&path) {
                    Ok(m) => format!(
                        "Model: embedded {} ({} MiB, in-process, offline; small and rough)",
                        p.model,
                        m.len() / (1024 * 1024)
                    ),
                    Err(_) => format!("Model: embedded {} — not installed (run .ci/setup.sh)", p.model),
                }
            }
            ProviderKind::Scripted => "Model: none — scripted demo replies".to_string(),
            kind => format!(
                "Model: {} via {} at {}",
                p.model,
                kind.label(),
                p.base_url().map(crate::llm::shown_endpoint).unwrap_or_else(|| "?".into())
            ),
        };
        Self { text, hint }
    }
}

pub(super) fn handle(ctx: &Arc<Context>, command: LlmCommand) {
    match command {
        LlmCommand::TestProfile { profile } => {
            let ctx = ctx.clone();
            ctx.runtime.clone().spawn_blocking(move || test_profile(&ctx, &profile));
        }
        LlmCommand::SaveProfile { profile, previous_name } => {
            // Checked here, for every front door: a new profile or a rename never writes
            // over another profile (the list would lose it, and it would take its key).
            let config = ctx.config();
            let refusal = match previous_name.as_deref() {
                None if config.profile(&profile.name).is_some() => {
                    Some(format!("a profile named {:?} already exists; edit it, or choose another name", profile.name))
                }
                Some(old) if config.profile(old).is_none() => Some(format!("no profile named {old:?}")),
                Some(old) if old != profile.name && config.profile(&profile.name).is_some() => {
                    Some(format!("cannot rename {old:?} to {:?}: a profile has that name", profile.name))
                }
                _ => None,
            };
            if let Some(refusal) = refusal {
                ctx.emit(CoreEvent::error("save profile", refusal));
                return;
            }
            let renamed = previous_name.clone().filter(|old| *old != profile.name).map(|old| (old, profile.name.clone()));
            save(ctx, "save profile", |c| {
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
            });
            // Keys are kept by profile name: a renamed profile takes its key along.
            if let Some((old, new)) = renamed {
                let ctx = ctx.clone();
                ctx.runtime.clone().spawn_blocking(move || {
                    let problem = follow_rename(&old, &new);
                    let source = ctx.config().profile(&new).map(crate::llm::client::key_source).unwrap_or(crate::llm::keyring::KeySource::None);
                    ctx.emit(LlmEvent::KeyStatus { profile: new, source, action: KeyAction::Checked, problem, keyring: crate::llm::keyring::installed().is_some() });
                });
            }
        }
        LlmCommand::DeleteProfile { name } => {
            let config = ctx.config();
            let refusal = if config.profile(&name).is_none() {
                Some(format!("no profile named {name:?}"))
            } else if config.default_profile == name {
                Some(format!("{name:?} is the default profile; select another before deleting it"))
            } else {
                None
            };
            if let Some(refusal) = refusal {
                ctx.emit(CoreEvent::error("delete profile", refusal));
                return;
            }
            save(ctx, "delete profile", |c| {
                c.profiles.retain(|p| p.name != name);
                c.roles.retain(|_, p| *p != name);
            });
            // A deleted profile leaves no key behind in the keyring.
            let ctx = ctx.clone();
            ctx.runtime.clone().spawn_blocking(move || {
                let problem = forget_key(&name);
                ctx.emit(LlmEvent::KeyStatus {
                    profile: name,
                    source: crate::llm::keyring::KeySource::None,
                    action: KeyAction::Cleared,
                    problem,
                    keyring: crate::llm::keyring::installed().is_some(),
                });
            });
        }
        LlmCommand::Calls { limit } => {
            let ctx = ctx.clone();
            ctx.runtime.clone().spawn_blocking(move || {
                match ctx.store.reader().and_then(|c| crate::llm::calls::recent(&c, limit)) {
                    Ok(calls) => ctx.emit(LlmEvent::Calls { calls }),
                    Err(e) => ctx.emit(CoreEvent::error("llm calls", e)),
                }
            });
        }
        LlmCommand::Config => emit_config(ctx, &ctx.config()),
        // The keyring is D-Bus on Linux: never on the engine's command thread.
        LlmCommand::SetKey { profile, key } => {
            let ctx = ctx.clone();
            ctx.runtime.clone().spawn_blocking(move || key_command(&ctx, profile, KeyAction::Stored, |store, name| store.set(name, &key)));
        }
        LlmCommand::ClearKey { profile } => {
            let ctx = ctx.clone();
            ctx.runtime.clone().spawn_blocking(move || key_command(&ctx, profile, KeyAction::Cleared, |store, name| store.delete(name).map(|_| ())));
        }
        LlmCommand::KeyStatus { profile } => {
            let ctx = ctx.clone();
            // Asking the keyring itself tells a machine without one as soon as a profile is shown.
            ctx.runtime.clone().spawn_blocking(move || key_command(&ctx, profile, KeyAction::Checked, |store, name| store.get(name).map(|_| ())));
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

fn save(ctx: &Context, what: &str, change: impl FnOnce(&mut crate::config::Config)) {
    match ctx.update_config(change) {
        Ok(config) => {
            ctx.emit(LlmEvent::ConfigSaved);
            emit_config(ctx, &config);
        }
        Err(e) => ctx.emit(CoreEvent::error(what, e)),
    }
}

/// Do `change` to the keyring's entry of `profile` and report where its key comes from
/// afterwards. Without a keyring the change fails with a plain reason and the report
/// still says what the environment gives.
fn key_command(
    ctx: &Context,
    profile: String,
    action: KeyAction,
    change: impl FnOnce(&dyn crate::llm::keyring::KeyStore, &str) -> Result<(), crate::llm::keyring::KeyringError>,
) {
    use crate::llm::keyring;
    let failure = match keyring::installed() {
        Some(store) => change(store.as_ref(), &profile).err(),
        None => Some(keyring::KeyringError::Unavailable("none installed in this process".into())),
    };
    let available = !matches!(failure, Some(keyring::KeyringError::Unavailable(_)));
    // A check on a process with no keyring at all is no problem to report: nobody asked
    // the keyring for anything.
    let quiet = action == KeyAction::Checked && keyring::installed().is_none();
    let problem = failure.filter(|_| !quiet).map(|e| e.to_string());
    let config = ctx.config();
    let source = match config.profile(&profile) {
        Some(p) => crate::llm::client::key_source(p),
        // A profile not saved yet can still have a keyring entry under its name.
        None if keyring::stored_key(&profile).is_some() => keyring::KeySource::Keyring,
        None => keyring::KeySource::None,
    };
    ctx.emit(LlmEvent::KeyStatus { profile, source, action, problem, keyring: available });
}

/// Move the keyring entry of profile `old` to `new` (when there is one and `new` has
/// none of its own). Failures are logged, never with the key, and returned to report.
fn follow_rename(old: &str, new: &str) -> Option<String> {
    let Some(store) = crate::llm::keyring::installed() else { return None };
    let moved = (|| {
        let Some(key) = store.get(old)? else { return Ok(false) };
        if store.get(new)?.is_none() {
            store.set(new, &key)?;
        }
        store.delete(old)
    })();
    match moved {
        Ok(true) => tracing::info!(from = old, to = new, "moved the profile's key in the keyring"),
        Ok(false) => {}
        // No keyring at all holds no key to move: nothing to report.
        Err(e @ crate::llm::keyring::KeyringError::Unavailable(_)) => tracing::debug!(from = old, to = new, error = %e, "no keyring to move a key in"),
        Err(e) => {
            tracing::warn!(from = old, to = new, error = %e, "could not move the profile's key in the keyring");
            return Some(e.to_string());
        }
    }
    None
}

/// Remove the keyring entry of a deleted profile, if it has one; the keyring's problem,
/// if it had one.
fn forget_key(name: &str) -> Option<String> {
    let Some(store) = crate::llm::keyring::installed() else { return None };
    match store.delete(name) {
        Ok(true) => tracing::info!(profile = name, "removed the deleted profile's key from the keyring"),
        Ok(false) => {}
        Err(e @ crate::llm::keyring::KeyringError::Unavailable(_)) => tracing::debug!(profile = name, error = %e, "no keyring to remove a key from"),
        Err(e) => {
            tracing::warn!(profile = name, error = %e, "could not remove the deleted profile's key from the keyring");
            return Some(e.to_string());
        }
    }
    None
}

fn emit_config(ctx: &Context, config: &Config) {
    ctx.emit(LlmEvent::Config { model: ModelLine::of(config), config: Box::new(config.clone()) });
}

fn test_profile(ctx: &Context, name: &str) {
    ctx.emit(LlmEvent::ProfileTestStarted { profile: name.to_string() });
    let config = ctx.config();
    let Some(profile) = config.profile(name) else {
        ctx.emit(CoreEvent::error("test profile", format!("no profile named {name:?}")));
        return;
    };
    let started = Instant::now();
    let outcome = LlmClient::from_profile(profile, Some(&ctx.store)).map(|c| c.for_agent("test")).and_then(|client| {
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
            ctx.emit(LlmEvent::ProfileToken { profile: name.to_string(), text: text.to_string() })
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
    ctx.emit(event);
}
