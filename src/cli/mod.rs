//! The headless command line. Every verb drives the same engine the GUI uses, prints
//! events as JSON lines with `--json` (human text otherwise), and exits non-zero with a
//! one-line reason on stderr when it fails.

/// `println!` that returns a failed write (the reader went away: `| head`) as an error,
/// which `main` ends quietly on, where `println!` would panic.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*)?
    }};
}

mod author;
mod bench;
mod chat;
mod drive;
mod identity;
mod interop;
mod memory;
mod print;
mod providers;
mod scene;

use crate::config::Paths;
use drive::drive;
use crate::engine::{self, Command, EngineHandle, Event, LlmCommand, LlmEvent};
use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(name = "lorekeeper", version, about = "A workbench for LLM-driven roleplay campaigns")]
pub struct Cli {
    /// The library database file (default: the XDG data dir).
    #[arg(long, global = true, env = "LOREKEEPER_LIBRARY")]
    pub library: Option<PathBuf>,
    /// The config file (default: the XDG config dir).
    #[arg(long, global = true, env = "LOREKEEPER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print events and results as JSON lines on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub verb: Option<Verb>,
}

#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Open the workbench window (the default).
    Gui,
    /// The character identity pipeline.
    Identity {
        #[command(subcommand)]
        verb: identity::IdentityVerb,
    },
    /// Worlds: the top of a campaign's tree, with notes every scene of it carries.
    World {
        #[command(subcommand)]
        verb: author::WorldVerb,
    },
    /// Campaigns of a world: cast, persona, trackers, facts and time.
    Campaign {
        #[command(subcommand)]
        verb: author::CampaignVerb,
    },
    /// Arcs of a campaign.
    Arc {
        #[command(subcommand)]
        verb: author::ArcVerb,
    },
    /// Characters of the library.
    Character {
        #[command(subcommand)]
        verb: CharacterVerb,
    },
    /// Personas: who the user plays.
    Persona {
        #[command(subcommand)]
        verb: author::PersonaVerb,
    },
    /// Attach an imported lorebook to a world or campaign, so it fires in their scenes.
    Lorebook {
        #[command(subcommand)]
        verb: author::LorebookVerb,
    },
    /// Scenes: create, play rounds, inspect state.
    Scene {
        #[command(subcommand)]
        verb: scene::SceneVerb,
    },
    /// One-to-one chat with a character that remembers.
    Chat {
        #[command(subcommand)]
        verb: chat::ChatVerb,
    },
    /// Provider profiles: list, add, edit, select, delete and test them, or keep a
    /// profile's API key in the keyring.
    Providers {
        #[command(subcommand)]
        action: ProvidersAction,
    },
    /// Import character cards and lorebooks; prints what was created.
    Import(interop::ImportArgs),
    /// Export a character as a card, or a lorebook as World Info / lorebook_v3.
    Export {
        #[command(subcommand)]
        what: interop::ExportWhat,
    },
    /// Measure how fast something runs on this machine.
    Bench {
        #[command(subcommand)]
        target: BenchTarget,
    },
    /// Memories: import, search, evaluate, reindex, stats.
    Memory {
        #[command(subcommand)]
        action: memory::MemoryAction,
    },
    /// Open the workbench on a layout or a panel and save what its window shows as a PNG
    /// (needs a display; on a machine without one, run it under `xvfb-run -a`).
    Screenshot {
        /// The PNG to write.
        #[arg(long)]
        out: PathBuf,
        /// A named layout: "All panels", "Create a character", "Play a scene",
        /// "Chat with a character" or "Inspect memory" (a word of it will do: play, chat, memory).
        #[arg(long)]
        layout: Option<String>,
        /// A panel to bring into view: Campaigns, Waves, Checkpoints, Scene, Chat, Memory,
        /// Budgets, Prompt, Library, Providers, Packet, "Injected memories", "Event log".
        /// Without --layout and --panel: Scene.
        #[arg(long)]
        panel: Option<String>,
        /// Draw a new library holding the demo world after one round played by the shipped
        /// demo script, instead of your own library (for documentation; nothing of yours is read).
        #[arg(long)]
        demo_round: bool,
        #[arg(long, default_value_t = 1280.0)]
        width: f32,
        #[arg(long, default_value_t = 800.0)]
        height: f32,
        /// Frames drawn before the capture (the engine's first answers arrive over them).
        #[arg(long, default_value_t = 30)]
        frames: u32,
    },
    /// Serve the engine over HTTP and WebSocket: the identity predecessor's API, scenes,
    /// chat, memory search, imports; the OpenAPI document at /api/openapi.json.
    Serve {
        /// Where to listen; any address but loopback needs a token.
        #[arg(long, default_value = "127.0.0.1:8000")]
        addr: std::net::SocketAddr,
        /// Required as `Authorization: Bearer TOKEN` on every request.
        #[arg(long, env = "LOREKEEPER_API_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// The one origin browsers may call from (CORS is off otherwise).
        #[arg(long)]
        cors: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum CharacterVerb {
    /// Write a new character from scratch (a card of its own; the fields not given stay
    /// empty, to fill in with `character edit`).
    New {
        #[arg(value_name = "NAME")]
        character: String,
        #[command(flatten)]
        fields: SheetArgs,
    },
    /// Print a character's sheet (its card's text).
    Show { character: String },
    /// Change a character's sheet (only the fields given); an imported card keeps the
    /// rest of itself as it came.
    Edit {
        character: String,
        #[command(flatten)]
        fields: SheetArgs,
    },
    /// Delete a character (by id or name) with its chat, its card's book, its places in
    /// casts and its memories; with anything attached, only with --yes.
    Delete {
        character: String,
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, clap::Args)]
pub struct SheetArgs {
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long)]
    pub description: Option<String>,
    #[arg(long)]
    pub personality: Option<String>,
    #[arg(long)]
    pub scenario: Option<String>,
    /// The greeting (`first_mes`).
    #[arg(long, alias = "first-mes")]
    pub greeting: Option<String>,
    /// An alternate greeting (repeat for more; replaces the card's list; `""` alone clears it).
    #[arg(long = "alternate-greeting")]
    pub alternate_greetings: Vec<String>,
    #[arg(long)]
    pub example_dialogue: Option<String>,
    #[arg(long)]
    pub system_prompt: Option<String>,
    #[arg(long)]
    pub post_history_instructions: Option<String>,
    #[arg(long)]
    pub creator_notes: Option<String>,
    /// Comma-separated; replaces the card's tags.
    #[arg(long)]
    pub tags: Option<String>,
}

impl SheetArgs {
    fn edit(self) -> crate::character::SheetEdit {
        crate::character::SheetEdit {
            name: self.name,
            description: self.description,
            personality: self.personality,
            scenario: self.scenario,
            first_mes: self.greeting,
            mes_example: self.example_dialogue,
            system_prompt: self.system_prompt,
            post_history_instructions: self.post_history_instructions,
            creator_notes: self.creator_notes,
            alternate_greetings: (!self.alternate_greetings.is_empty())
                .then(|| self.alternate_greetings.into_iter().filter(|g| !g.trim().is_empty()).collect()),
            tags: self.tags.map(|t| t.split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_string).collect()),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum BenchTarget {
    /// The embedded local model: prompt and generation tokens/s, time to first token, peak memory.
    Local(bench::LocalBenchArgs),
}

#[derive(Debug, Subcommand)]
pub enum ProvidersAction {
    /// List the configured profiles, which one is selected (the default) and which roles use them.
    List,
    /// Every setting of one profile (never a key: only where the key is read from).
    Show {
        profile: String,
    },
    /// Add a profile: a server or API to reach a model through (`--select` to use it).
    Add(providers::AddArgs),
    /// Change a profile's settings (only the flags given) or rename it (--name).
    Edit(providers::EditArgs),
    /// Select the profile every agent role not mapped to another uses (the default).
    #[command(alias = "default")]
    Select {
        profile: String,
    },
    /// Delete a profile and its keyring key (not the selected one: select another first).
    Delete {
        profile: String,
    },
    /// Send a short request through a profile and report the reply, latency and tokens.
    Test(TestArgs),
    /// The newest LLM calls: every message exactly as sent, and the request's settings
    /// as Lorekeeper made them (each provider's wire format words them its own way:
    /// `response_format`, `max_tokens`), with what came back, the tokens and the time;
    /// the workbench's Prompt panel shows the same log.
    Calls {
        /// How many calls, newest first.
        #[arg(long, default_value_t = 5)]
        limit: u32,
        /// Only calls of agents whose name starts with this (`director`, `character`,
        /// `companion`, `identity.`).
        #[arg(long)]
        agent: Option<String>,
    },
    /// A profile's API key in the OS keyring (an environment variable that is set still wins).
    Key {
        #[command(subcommand)]
        action: KeyAction,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeyAction {
    /// Store the key read from standard input (one line; never from the command line,
    /// where other users and the shell history can read it).
    Set(KeyArgs),
    /// Remove the profile's key from the keyring.
    Clear(KeyArgs),
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The profile the key belongs to.
    #[arg(long)]
    pub profile: String,
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// The profile to test (default: the default profile).
    #[arg(long)]
    pub profile: Option<String>,
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        // The reader went away (`lorekeeper … | head`): nothing is wrong, and nothing to say.
        Err(e) if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the error and its causes, outermost first.
            let mut line = e.to_string();
            for cause in e.chain().skip(1) {
                line.push_str(": ");
                line.push_str(&cause.to_string());
            }
            eprintln!("lorekeeper: {line}");
            ExitCode::FAILURE
        }
    }
}

/// Verbs that only read the library: on a library named with `--library` (or
/// `LOREKEEPER_LIBRARY`) that is not there they say so instead of creating it (and its
/// folders) empty, which a typo in the path would do.
fn reads_only(verb: &Option<Verb>) -> bool {
    use author::{ArcVerb, CampaignVerb, PersonaVerb, WorldVerb};
    use scene::SceneVerb;
    matches!(
        verb,
        Some(
            Verb::World { verb: WorldVerb::List }
                | Verb::Campaign { verb: CampaignVerb::List }
                | Verb::Arc { verb: ArcVerb::List }
                | Verb::Persona { verb: PersonaVerb::List }
                | Verb::Character { verb: CharacterVerb::Show { .. } }
                | Verb::Scene { verb: SceneVerb::List | SceneVerb::State { .. } | SceneVerb::Lore { .. } | SceneVerb::Preview { .. } | SceneVerb::Alternatives { .. } | SceneVerb::Export { .. } }
                | Verb::Identity { verb: identity::IdentityVerb::List | identity::IdentityVerb::Status { .. } | identity::IdentityVerb::Diff { .. } | identity::IdentityVerb::Export(_) }
                | Verb::Chat { verb: chat::ChatVerb::List | chat::ChatVerb::History { .. } }
                | Verb::Memory { action: memory::MemoryAction::Search(_) | memory::MemoryAction::Stats | memory::MemoryAction::Injections { .. } }
                | Verb::Export { .. }
        )
    )
}

pub fn run(cli: Cli) -> Result<ExitCode> {
    let paths = Paths::resolve(cli.library.clone(), cli.config.clone())?;
    // Only a library the user named: the default one is made on first use, whatever the
    // verb, so a fresh install's first `world list` answers instead of failing.
    if cli.library.is_some() && reads_only(&cli.verb) && !paths.library_file.exists() {
        bail!(
            "no library at {}: this verb only reads one and does not create it (check --library; a verb that writes, such as `world new`, creates it)",
            paths.library_file.display()
        );
    }
    let _log = crate::logging::init(&paths.log_dir);
    // Keys stored from the workbench or `providers key set` live in the OS keyring;
    // nothing is contacted until a key is looked up.
    crate::llm::keyring::install_os_keyring();
    match cli.verb {
        None | Some(Verb::Gui) => {
            crate::ui::run_native(paths)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Verb::Identity { verb }) => {
            let engine = start(paths)?;
            identity::run(&engine, verb, cli.json)
        }
        Some(Verb::World { verb }) => author::world(&start(paths)?, verb, cli.json),
        Some(Verb::Campaign { verb }) => author::campaign(&start(paths)?, verb, cli.json),
        Some(Verb::Arc { verb }) => author::arc(&start(paths)?, verb, cli.json),
        Some(Verb::Persona { verb }) => author::persona(&start(paths)?, verb, cli.json),
        Some(Verb::Lorebook { verb }) => author::lorebook(&start(paths)?, verb, cli.json),
        Some(Verb::Character { verb: CharacterVerb::Delete { character, yes } }) => interop::delete_character(&start(paths)?, character, yes, cli.json),
        Some(Verb::Character { verb: CharacterVerb::New { character, fields } }) => {
            if fields.name.is_some() {
                anyhow::bail!("the new character's name is NAME; --name is for `character edit`");
            }
            let sheet = crate::character::SheetEdit { name: Some(character), ..fields.edit() };
            author::new_character(&start(paths)?, sheet, cli.json)
        }
        Some(Verb::Character { verb: CharacterVerb::Show { character } }) => {
            interop::sheet(&start(paths)?, crate::interop::InteropCommand::Sheet { character }, cli.json)
        }
        Some(Verb::Character { verb: CharacterVerb::Edit { character, fields } }) => {
            interop::sheet(&start(paths)?, crate::interop::InteropCommand::EditSheet { character, edit: Box::new(fields.edit()) }, cli.json)
        }
        Some(Verb::Scene { verb }) => {
            let engine = start(paths)?;
            scene::run(&engine, verb, cli.json)
        }
        Some(Verb::Chat { verb }) => {
            let engine = start(paths)?;
            chat::run(&engine, verb, cli.json)
        }
        Some(Verb::Providers { action }) => {
            let engine = start(paths)?;
            providers(&engine, action, cli.json)
        }
        Some(Verb::Import(args)) => {
            let engine = start(paths)?;
            interop::import(&engine, args, cli.json)
        }
        Some(Verb::Export { what }) => {
            let engine = start(paths)?;
            interop::export(&engine, what, cli.json)
        }
        Some(Verb::Bench { target: BenchTarget::Local(args) }) => bench::run(args, cli.json),
        Some(Verb::Memory { action }) => {
            let engine = start(paths)?;
            memory::run(&engine, action, cli.json)
        }
        Some(Verb::Screenshot { out, layout, panel, demo_round, width, height, frames }) => {
            let layout = match layout {
                Some(name) => Some(crate::ui::layout::NamedLayout::parse(&name).ok_or_else(|| {
                    anyhow::anyhow!(
                        "no layout named {name:?}; the layouts are {}",
                        crate::ui::layout::NamedLayout::ALL.map(|l| l.title()).join(", ")
                    )
                })?),
                None => None,
            };
            let panel = match panel {
                Some(name) => Some(crate::ui::PanelKind::parse(&name).ok_or_else(|| {
                    anyhow::anyhow!("no panel named {name:?}; the panels are {}", crate::ui::PanelKind::ALL.map(|k| k.title()).join(", "))
                })?),
                None if layout.is_none() => Some(crate::ui::PanelKind::Scene),
                None => None,
            };
            // The demo library lives in a directory that goes when the screenshot is taken.
            let demo = if demo_round { Some(tempfile::tempdir().context("cannot make a directory for the demo library")?) } else { None };
            let paths = match &demo {
                Some(dir) => scene::demo_round_library(dir.path()).context("cannot play the demo round")?,
                None => paths,
            };
            crate::ui::screenshot(paths, crate::ui::ScreenshotOptions { out: out.clone(), layout, panel, width, height, frames })?;
            outln!("{}", out.display());
            Ok(ExitCode::SUCCESS)
        }
        Some(Verb::Serve { addr, token, cors }) => {
            let engine = start(paths)?;
            let server = crate::serve::start(engine, crate::serve::ServeOptions { addr, token, cors })?;
            // One line a script can read the address from (the port may have been 0).
            outln!("listening on http://{}", server.addr);
            server.wait()?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Start the engine; a setting in the config file that nothing reads is named on
/// stderr (stdout stays the verb's output for scripts).
pub(super) fn start(paths: Paths) -> Result<EngineHandle> {
    let engine = engine::start(paths).context("cannot start the engine")?;
    for line in engine.config_warnings() {
        eprintln!("lorekeeper: warning: {line}");
    }
    Ok(engine)
}

fn providers(engine: &EngineHandle, action: ProvidersAction, json: bool) -> Result<ExitCode> {
    engine.send(Command::Llm(LlmCommand::Config))?;
    let config = drive::wait(engine, Duration::from_secs(60), |event| match event {
        Event::Llm(LlmEvent::Config { config, .. }) => Some(config.clone()),
        _ => None,
    })?;
    match action {
        ProvidersAction::Calls { limit, agent } => calls(engine, limit, agent.as_deref(), json),
        ProvidersAction::List => {
            // The listing `GET /api/providers` answers too, one profile a line.
            let list = crate::engine::ProfileList::of(&config);
            let mut out = std::io::stdout().lock();
            for p in &list.profiles {
                if json {
                    writeln!(out, "{}", serde_json::to_string(p)?)?;
                } else {
                    writeln!(
                        out,
                        "{}{}  {}  {}  {}{}",
                        p.name,
                        if p.default { " (default)" } else { "" },
                        p.kind,
                        p.model,
                        p.base_url.as_deref().unwrap_or("-"),
                        if p.roles.is_empty() { String::new() } else { format!("  roles: {}", p.roles.join(", ")) }
                    )?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ProvidersAction::Show { profile } => providers::show(&config, &profile, json),
        ProvidersAction::Add(args) => providers::add(engine, &config, args, json),
        ProvidersAction::Edit(args) => providers::edit(engine, &config, args, json),
        ProvidersAction::Select { profile } => providers::select(engine, &config, &profile, json),
        ProvidersAction::Delete { profile } => providers::delete(engine, &profile, json),
        ProvidersAction::Test(args) => {
            let name = args.profile.unwrap_or(config.default_profile.clone());
            if config.profile(&name).is_none() {
                bail!("no profile named {name:?} (see `lorekeeper providers list`)");
            }
            engine.send(Command::Llm(LlmCommand::TestProfile { profile: name.clone() }))?;
            let result = drive(engine, json, Duration::from_secs(3600), |event| match event {
                Event::Llm(LlmEvent::ProfileTested { ok, error, .. }) => Some(if *ok {
                    Ok(())
                } else {
                    Err(anyhow!("profile {name:?} failed: {}", error.clone().unwrap_or_default()))
                }),
                _ => None,
            })?;
            result.map(|_| ExitCode::SUCCESS)
        }
        ProvidersAction::Key { action } => {
            let (profile, command) = match action {
                KeyAction::Set(args) => {
                    // A typo would keep the key under a name no profile reads.
                    if config.profile(&args.profile).is_none() {
                        bail!("no profile named {:?} (see `lorekeeper providers list`); no key was stored", args.profile);
                    }
                    let key = read_key(&args.profile)?;
                    (args.profile.clone(), LlmCommand::SetKey { profile: args.profile, key })
                }
                KeyAction::Clear(args) => (args.profile.clone(), LlmCommand::ClearKey { profile: args.profile }),
            };
            engine.send(Command::Llm(command))?;
            let (source, problem) = drive::wait(engine, Duration::from_secs(120), |event| match event {
                Event::Llm(LlmEvent::KeyStatus { profile: p, source, problem, .. }) if *p == profile => Some((source.clone(), problem.clone())),
                _ => None,
            })?;
            if let Some(problem) = problem {
                bail!("profile {profile:?}: {problem}");
            }
            if json {
                outln!("{}", serde_json::json!({ "profile": profile, "source": source }));
            } else {
                outln!("{profile}: {}", source.line());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The key on standard input: its first line, trimmed. A terminal gets a prompt on
/// stderr (the key is typed in the clear there; pipe it from a password manager to
/// keep it off the screen).
fn read_key(profile: &str) -> Result<crate::llm::Secret> {
    use std::io::{BufRead, IsTerminal};
    if std::io::stdin().is_terminal() {
        eprint!("API key for {profile:?}: ");
    }
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).context("cannot read the key from standard input")?;
    let key = crate::llm::Secret::new(line.trim());
    line.clear();
    if key.expose().is_empty() {
        bail!("no key on standard input (pipe it in: `printf %s \"$KEY\" | lorekeeper providers key set --profile {profile}`)");
    }
    Ok(key)
}


/// `providers calls`: the logged calls, newest first, each as sent and as answered.
fn calls(engine: &EngineHandle, limit: u32, agent: Option<&str>, json: bool) -> Result<ExitCode> {
    // Enough rows to find `limit` of one agent among the others.
    let read = if agent.is_some() { limit.saturating_mul(20).min(2000) } else { limit };
    engine.send(Command::Llm(LlmCommand::Calls { limit: read }))?;
    let calls = drive::wait(engine, Duration::from_secs(60), |event| match event {
        Event::Llm(LlmEvent::Calls { calls }) => Some(calls.clone()),
        _ => None,
    })?;
    let chosen = calls.iter().filter(|c| agent.is_none_or(|a| c.agent.starts_with(a))).take(limit as usize);
    let mut out = std::io::stdout().lock();
    for call in chosen {
        if json {
            writeln!(out, "{}", serde_json::to_string(call)?)?;
            continue;
        }
        let agent = if call.agent.is_empty() { "-" } else { call.agent.as_str() };
        writeln!(
            out,
            "=== {} · {agent} · {} · profile {} · {}+{} tokens · {} ms{}",
            call.at,
            call.model,
            call.profile,
            call.prompt_tokens,
            call.completion_tokens,
            call.elapsed_ms,
            if call.from_cache { " · from the cache" } else { "" }
        )?;
        for message in &call.request.messages {
            writeln!(out, "--- {:?}\n{}", message.role, message.content)?;
        }
        match (&call.reply, &call.error) {
            (_, Some(error)) => writeln!(out, "--- error\n{error}")?,
            (Some(reply), None) => writeln!(out, "--- reply\n{reply}")?,
            (None, None) => {}
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    /// Every verb, at every depth, says in `--help` what it does: a bare name in the list
    /// (`scene unmute` had one, then 19 of `world`, `campaign`, `arc`, `persona` and
    /// `lorebook`) leaves the user guessing.
    #[test]
    fn every_verb_has_a_description() {
        use clap::CommandFactory;
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
                let path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none_or(|a| a.to_string().trim().is_empty()) {
                    missing.push(path.clone());
                }
                walk(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "lorekeeper", &mut missing);
        assert!(missing.is_empty(), "verbs without a description: {missing:?}");
    }
}
