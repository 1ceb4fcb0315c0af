//! `lorekeeper providers add|edit|show|select|delete`: provider profiles managed as the
//! Providers panel manages them. Each is the panel's own engine command
//! (`LlmCommand::SaveProfile`, `SetDefaultProfile`, `DeleteProfile`), which checks and
//! saves the config file; this file only turns flags into a profile. A key never comes
//! through here: a profile names the environment variable it is read from
//! (`--key-env`), and `providers key set` keeps one in the OS keyring.

use super::drive;
use crate::config::Config;
use crate::engine::{Command, EngineHandle, Event, LlmCommand, LlmEvent, ProfileList};
use crate::llm::{ProviderKind, ProviderProfile};
use anyhow::{Result, anyhow, bail};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

/// Saving the config file; a rename or delete also asks the keyring (bounded by its own timeout).
const LIMIT: Duration = Duration::from_secs(60);

/// A profile's settings as flags: what the Providers panel's editor shows. Only the flags
/// given change anything; `""` (or `default`) puts an optional setting back to the
/// kind's or the server's default.
#[derive(Debug, Default, Args)]
pub struct ProfileFields {
    /// openai (any OpenAI-compatible server: llama.cpp, Ollama, LM Studio, vLLM,
    /// OpenRouter), anthropic, gemini, scripted or local (the embedded model).
    #[arg(long)]
    pub kind: Option<String>,
    /// The server root, e.g. http://127.0.0.1:8080/v1 (`""`: the kind's default).
    #[arg(long)]
    pub base_url: Option<String>,
    #[arg(long)]
    pub model: Option<String>,
    /// The environment variable the API key is read from (`""`: the kind's default,
    /// OPENAI_API_KEY and so on). The key itself: `providers key set`.
    #[arg(long)]
    pub key_env: Option<String>,
    /// The model's context size in tokens, which prompt and reply share (at least 256).
    #[arg(long)]
    pub max_context_tokens: Option<u32>,
    /// Sampling temperature (`""`: the server's default).
    #[arg(long)]
    pub temperature: Option<String>,
    /// Nucleus sampling (`""`: the server's default).
    #[arg(long)]
    pub top_p: Option<String>,
    /// The longest reply in tokens (`""`: the server's default).
    #[arg(long)]
    pub max_tokens: Option<String>,
    /// Seconds to connect, to wait for the next byte, and for the whole request.
    #[arg(long)]
    pub connect_timeout: Option<f64>,
    #[arg(long)]
    pub read_timeout: Option<f64>,
    #[arg(long)]
    pub total_timeout: Option<f64>,
    /// Retries of a failed request (with backoff).
    #[arg(long)]
    pub retries: Option<u32>,
    /// A client-side limit on requests per minute (`""`: none).
    #[arg(long)]
    pub requests_per_minute: Option<String>,
    /// Requests in flight at once (`""`: one at a time for a server on this machine or
    /// network, no limit elsewhere).
    #[arg(long)]
    pub max_parallel: Option<String>,
    /// CPU threads of the embedded model (`""`: picked from the machine).
    #[arg(long)]
    pub threads: Option<String>,
    /// The script file (scripted) or the model file (local) (`""`: none).
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// Serve identical requests from the response cache.
    #[arg(long, value_name = "true|false")]
    pub cache: Option<bool>,
    /// Whether the server enforces `response_format: json_schema`.
    #[arg(long, value_name = "true|false")]
    pub json_schema: Option<bool>,
    /// Send the key over plain http:// to a host that is not this machine.
    #[arg(long, value_name = "true|false")]
    pub allow_key_over_http: Option<bool>,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// The new profile's name.
    pub name: String,
    #[command(flatten)]
    pub fields: ProfileFields,
    /// Select it as the default profile too.
    #[arg(long)]
    pub select: bool,
}

#[derive(Debug, Args)]
pub struct EditArgs {
    /// The profile to change.
    pub profile: String,
    /// A new name (its keyring key and role mappings follow it).
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub fields: ProfileFields,
}

/// An optional number typed as text: `""` or `default` is "not set".
fn optional<T: FromStr>(flag: &str, text: &str) -> Result<Option<T>> {
    match text.trim() {
        "" | "default" | "none" => Ok(None),
        t => t.parse().map(Some).map_err(|_| anyhow!("--{flag} {t:?} is not a number (\"\" for the default)")),
    }
}

impl ProfileFields {
    /// `profile` with the flags given applied.
    fn apply(self, mut p: ProviderProfile) -> Result<ProviderProfile> {
        if let Some(kind) = self.kind {
            p.kind = ProviderKind::ALL.into_iter().find(|k| k.label() == kind.trim().to_lowercase()).ok_or_else(|| {
                anyhow!("no provider kind {kind:?}; the kinds are {}", ProviderKind::ALL.map(|k| k.label()).join(", "))
            })?;
        }
        if let Some(url) = self.base_url {
            p.base_url = Some(url.trim().to_string()).filter(|u| !u.is_empty());
        }
        if let Some(model) = self.model {
            p.model = model.trim().to_string();
        }
        if let Some(var) = self.key_env {
            p.api_key_env = Some(var.trim().to_string()).filter(|v| !v.is_empty());
        }
        if let Some(n) = self.max_context_tokens {
            p.max_context_tokens = n;
        }
        if let Some(t) = self.temperature {
            p.sampler.temperature = optional("temperature", &t)?;
        }
        if let Some(t) = self.top_p {
            p.sampler.top_p = optional("top-p", &t)?;
        }
        if let Some(t) = self.max_tokens {
            p.sampler.max_tokens = optional("max-tokens", &t)?;
        }
        for (flag, value, slot) in [
            ("connect-timeout", self.connect_timeout, &mut p.timeouts.connect_secs),
            ("read-timeout", self.read_timeout, &mut p.timeouts.read_secs),
            ("total-timeout", self.total_timeout, &mut p.timeouts.total_secs),
        ] {
            if let Some(secs) = value {
                if !(secs.is_finite() && secs > 0.0) {
                    bail!("--{flag} must be a number of seconds above 0");
                }
                *slot = secs;
            }
        }
        if let Some(n) = self.retries {
            p.retry.max_retries = n;
        }
        if let Some(t) = self.requests_per_minute {
            p.requests_per_minute = optional("requests-per-minute", &t)?;
        }
        if let Some(t) = self.max_parallel {
            p.max_parallel = optional("max-parallel", &t)?;
        }
        if let Some(t) = self.threads {
            p.threads = optional("threads", &t)?;
        }
        if let Some(path) = self.path {
            p.path = Some(path).filter(|p| !p.as_os_str().is_empty());
        }
        if let Some(on) = self.cache {
            p.cache = on;
        }
        if let Some(on) = self.json_schema {
            p.supports_json_schema = on;
        }
        if let Some(on) = self.allow_key_over_http {
            p.allow_key_over_http = on;
        }
        Ok(p)
    }
}

/// Send `command` and wait for the configuration it saved (or the engine's refusal, which
/// ends the wait as an error); with `key_of`, also for the keyring's follow-up of that
/// profile name (a rename moves its key, a delete removes it), so the process does not
/// end before the keyring has been told.
fn save(engine: &EngineHandle, command: LlmCommand, key_of: Option<&str>) -> Result<Config> {
    engine.send(Command::Llm(command))?;
    let (mut saved, mut config, mut keyring) = (false, None, key_of.is_none());
    drive::wait(engine, LIMIT, |event| {
        match event {
            Event::Llm(LlmEvent::ConfigSaved) => saved = true,
            Event::Llm(LlmEvent::Config { config: c, .. }) if saved => config = Some((**c).clone()),
            Event::Llm(LlmEvent::KeyStatus { profile, problem, .. }) if Some(profile.as_str()) == key_of => {
                if let Some(problem) = problem {
                    eprintln!("lorekeeper: warning: the keyring: {problem}");
                }
                keyring = true;
            }
            _ => {}
        }
        (keyring && config.is_some()).then(|| config.clone())
    })?
    .ok_or_else(|| anyhow!("the engine did not report the saved configuration"))
}

/// Print one profile: as JSON (the listing's fields) or one line.
fn print_profile(config: &Config, name: &str, json: bool) -> Result<()> {
    let list = ProfileList::of(config);
    let Some(summary) = list.profiles.iter().find(|p| p.name == name) else { return Ok(()) };
    if json {
        outln!("{}", serde_json::to_string(summary)?);
    } else {
        outln!(
            "{}{}  {}  {}  {}",
            summary.name,
            if summary.default { " (default)" } else { "" },
            summary.kind,
            summary.model,
            summary.base_url.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}

pub fn add(engine: &EngineHandle, config: &Config, args: AddArgs, json: bool) -> Result<ExitCode> {
    let name = args.name.trim().to_string();
    if config.profile(&name).is_some() {
        bail!("a profile named {name:?} already exists (change it with `providers edit {name}`)");
    }
    let start = ProviderProfile { name: name.clone(), model: String::new(), ..Default::default() };
    let profile = args.fields.apply(start)?;
    let mut saved = save(engine, LlmCommand::SaveProfile { profile, previous_name: None }, None)?;
    if args.select {
        saved = save(engine, LlmCommand::SetDefaultProfile { name: name.clone() }, None)?;
    }
    print_profile(&saved, &name, json)?;
    Ok(ExitCode::SUCCESS)
}

pub fn edit(engine: &EngineHandle, config: &Config, args: EditArgs, json: bool) -> Result<ExitCode> {
    let Some(current) = config.profile(&args.profile).cloned() else {
        bail!("no profile named {:?} (see `lorekeeper providers list`)", args.profile);
    };
    let mut profile = args.fields.apply(current)?;
    if let Some(name) = args.name {
        profile.name = name.trim().to_string();
    }
    let name = profile.name.clone();
    let renamed = name != args.profile;
    let command = LlmCommand::SaveProfile { profile, previous_name: Some(args.profile) };
    let saved = save(engine, command, renamed.then_some(name.as_str()))?;
    print_profile(&saved, &name, json)?;
    Ok(ExitCode::SUCCESS)
}

/// Every setting of one profile (the config file's own words; the base URL shown as
/// scheme, host and port), as JSON or as TOML.
pub fn show(config: &Config, name: &str, json: bool) -> Result<ExitCode> {
    let Some(profile) = config.profile(name) else {
        bail!("no profile named {name:?} (see `lorekeeper providers list`)");
    };
    let mut shown = profile.clone();
    shown.base_url = profile.base_url.as_deref().map(crate::llm::shown_endpoint);
    if json {
        let mut value = serde_json::to_value(&shown)?;
        if let Some(object) = value.as_object_mut() {
            object.insert("default".into(), serde_json::json!(config.default_profile == name));
            object.insert("key_env".into(), serde_json::json!(profile.key_env()));
        }
        outln!("{value}");
    } else {
        outln!("{}", toml::to_string(&shown)?.trim_end());
        if config.default_profile == name {
            outln!("# the default profile");
        }
        if let Some(var) = profile.key_env() {
            outln!("# key: ${var}, else the keyring (`providers key set --profile {name}`)");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn select(engine: &EngineHandle, config: &Config, name: &str, json: bool) -> Result<ExitCode> {
    if config.profile(name).is_none() {
        bail!("no profile named {name:?} (see `lorekeeper providers list`)");
    }
    let saved = save(engine, LlmCommand::SetDefaultProfile { name: name.to_string() }, None)?;
    print_profile(&saved, name, json)?;
    Ok(ExitCode::SUCCESS)
}

pub fn delete(engine: &EngineHandle, name: &str, json: bool) -> Result<ExitCode> {
    // The engine refuses an unknown name and the default profile, as the panel does.
    save(engine, LlmCommand::DeleteProfile { name: name.to_string() }, Some(name))?;
    if json {
        outln!("{}", serde_json::json!({ "deleted": name }));
    } else {
        outln!("deleted profile {name}");
    }
    Ok(ExitCode::SUCCESS)
}
