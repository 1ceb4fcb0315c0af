//! `lorekeeper world|campaign|arc|persona|lorebook ...`: a game master's own campaign,
//! built from the command line. Every verb is one engine command; the result is one
//! line (or the event as JSON with `--json`).

use super::drive::wait;
use crate::engine::{Command, EngineHandle, Event};
use crate::scene::SceneCommand;
use crate::scene::author::{AuthorCommand, AuthorEvent, TranscriptFormat, authored_sentence};
use crate::scene::authoring::{Edit, Level, LoreLevel, StateEdit, Tree};
use crate::scene::model::CharacterState;
use crate::scene::SceneEvent;
use anyhow::{Result, anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

#[derive(Debug, Args)]
pub struct Described {
    /// What this world or campaign is (its setting or premise): every agent of its
    /// scenes is told it under "Setting".
    #[arg(long, default_value = "")]
    pub description: String,
    /// Scenario / author notes: every prompt of this level's scenes carries them.
    #[arg(long, default_value = "")]
    pub notes: String,
}

#[derive(Debug, Args)]
pub struct EditArgs {
    /// An id, or a name only one has.
    pub key: String,
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long)]
    pub description: Option<String>,
    #[arg(long)]
    pub notes: Option<String>,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    pub key: String,
    /// Delete even though campaigns, arcs, scenes or messages go with it.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, Subcommand)]
pub enum WorldVerb {
    /// Create a world: the top of a campaign's tree, with a setting and notes its scenes carry.
    New {
        name: String,
        #[command(flatten)]
        text: Described,
    },
    /// Rename a world or change its description or notes (only the fields given).
    Edit(EditArgs),
    /// Every world with its campaigns, arcs and scenes.
    List,
    /// Delete a world with its campaigns, arcs and scenes; with any of them, only with --yes.
    Delete(DeleteArgs),
    /// Who a character is in this world: sheet fields over its card's.
    Override(OverrideArgs),
}

/// `world|campaign override OWNER CHARACTER --field value ...` (an empty value removes
/// that field's override).
#[derive(Debug, Args)]
pub struct OverrideArgs {
    pub owner: String,
    pub character: String,
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long)]
    pub description: Option<String>,
    #[arg(long)]
    pub personality: Option<String>,
    #[arg(long)]
    pub scenario: Option<String>,
}

impl OverrideArgs {
    fn command(self, level: Level) -> Result<AuthorCommand> {
        let fields: std::collections::BTreeMap<String, String> =
            [("name", self.name), ("description", self.description), ("personality", self.personality), ("scenario", self.scenario)]
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
                .collect();
        if fields.is_empty() {
            bail!("give the fields to override (--description, --personality, --scenario, --name)");
        }
        Ok(AuthorCommand::Override { level, owner: self.owner, character: self.character, fields })
    }
}


#[derive(Debug, Subcommand)]
pub enum CampaignVerb {
    /// Create a campaign in a world, optionally naming the persona the user plays in it.
    New {
        name: String,
        #[arg(long)]
        world: String,
        #[command(flatten)]
        text: Described,
        /// Who the user plays (a persona's name or id).
        #[arg(long)]
        persona: Option<String>,
    },
    /// Rename a campaign or change its description or notes (only the fields given).
    Edit(EditArgs),
    /// Every world with its campaigns, arcs and scenes.
    List,
    /// Delete a campaign with its arcs and scenes; with any of them, only with --yes.
    Delete(DeleteArgs),
    /// Who a character is in this campaign: sheet fields over the world's and its card's.
    Override(OverrideArgs),
    /// The campaign's cast: library characters a new scene starts with.
    Cast {
        #[command(subcommand)]
        action: CastAction,
    },
    /// Set a tracker (VALUE is read as JSON if it parses, else as text), or remove it.
    Tracker {
        campaign: String,
        name: String,
        value: Option<String>,
        #[arg(long, conflicts_with = "value")]
        remove: bool,
    },
    /// Add or remove a fact the Director and characters are told.
    Fact {
        campaign: String,
        #[arg(value_enum)]
        action: FactAction,
        text: String,
    },
    /// Set the in-fiction minutes elapsed since the campaign began.
    Time { campaign: String, minutes: u64 },
    /// Save the campaign's own section shares (percent of what is left of the context
    /// once the instructions, the turn and the reply are kept); the sections not named keep
    /// theirs, and together they may not pass 100.
    /// `--reset`: the config file's `[scene.budgets]` again.
    Budgets {
        campaign: String,
        #[arg(long)]
        history: Option<f64>,
        #[arg(long)]
        summaries: Option<f64>,
        #[arg(long)]
        lore: Option<f64>,
        #[arg(long)]
        memories: Option<f64>,
        /// The world's, campaign's and scene's descriptions.
        #[arg(long)]
        setting: Option<f64>,
        #[arg(long)]
        notes: Option<f64>,
        #[arg(long)]
        director_guidance: Option<f64>,
        #[arg(long)]
        character_guidance: Option<f64>,
        #[arg(long, conflicts_with_all = ["history", "summaries", "lore", "memories", "setting", "notes", "director_guidance", "character_guidance"])]
        reset: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum CastAction {
    /// Put library characters (by id or name) in the campaign's cast.
    Add { campaign: String, characters: Vec<String> },
    /// Take characters out of the campaign's cast (scenes already made keep theirs).
    Remove { campaign: String, characters: Vec<String> },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FactAction {
    Add,
    Remove,
}

#[derive(Debug, Subcommand)]
pub enum ArcVerb {
    /// Create an arc in a campaign: a stretch of its story, with notes its scenes carry.
    New {
        name: String,
        #[arg(long)]
        campaign: String,
        #[arg(long, default_value = "")]
        notes: String,
    },
    /// Rename an arc or change its description or notes (only the fields given).
    Edit(EditArgs),
    /// Every world with its campaigns, arcs and scenes.
    List,
    /// Delete an arc with its scenes; with any of them, only with --yes.
    Delete(DeleteArgs),
}

#[derive(Debug, Subcommand)]
pub enum PersonaVerb {
    /// Create a persona: a name and a description the characters are told about the user.
    New {
        name: String,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Rename a persona or change its description (only the fields given).
    Edit {
        persona: String,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        description: Option<String>,
    },
    /// Every persona, with its description.
    List,
    /// Play this persona in a campaign's scenes or in the chat with one character
    /// (`--none`: nobody in particular).
    Use {
        persona: Option<String>,
        #[arg(long, required_unless_present = "chat", conflicts_with = "chat")]
        campaign: Option<String>,
        /// The character whose one-to-one chat this persona plays in.
        #[arg(long)]
        chat: Option<String>,
        #[arg(long, conflicts_with = "persona")]
        none: bool,
    },
    /// Delete a persona; campaigns and chats that played it play nobody in particular.
    Delete { persona: String },
    /// Give a persona a picture (a PNG file), or take it away with --none.
    Image {
        persona: String,
        #[arg(required_unless_present = "none")]
        file: Option<std::path::PathBuf>,
        #[arg(long, conflicts_with = "file")]
        none: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum LorebookVerb {
    /// Start an empty lorebook of your own; add its entries with `lorebook entry add`.
    New {
        name: String,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Give a lorebook another name (no other lorebook may have it).
    Rename { lorebook: String, name: String },
    /// Delete a lorebook with its entries, detached from every world, campaign, character
    /// and chat it is attached to; one that holds entries or is attached anywhere needs --yes.
    Delete {
        lorebook: String,
        #[arg(long)]
        yes: bool,
    },
    /// Make a lorebook fire in every scene of a world or a campaign, for a character (its
    /// chat and its campaigns' scenes), or in one character's chat only.
    Attach(AttachArgs),
    /// Stop a lorebook firing where `lorebook attach` made it fire (the book itself stays).
    Detach(AttachArgs),
    /// A lorebook's entries: list, add, edit, delete, duplicate, move.
    #[command(subcommand)]
    Entry(super::interop::EntryVerb),
    /// Activate a lorebook on a text and say why each entry fires or stays out.
    Test { lorebook: String, text: String },
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The lorebook, by id or name.
    pub lorebook: String,
    #[arg(long, group = "owner")]
    pub world: Option<String>,
    #[arg(long, group = "owner")]
    pub campaign: Option<String>,
    /// A character, by id or name: its chat and the scenes of campaigns it is cast in.
    #[arg(long, group = "owner")]
    pub character: Option<String>,
    /// A character whose one-to-one chat alone the book fires in.
    #[arg(long, group = "owner")]
    pub chat: Option<String>,
}

/// Scene verbs that edit by hand (the rest live in `cli::scene`).
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ExportFormat {
    Markdown,
    Json,
}

#[derive(Debug, Args)]
pub struct SetStateArgs {
    pub scene: String,
    pub character: String,
    #[arg(long)]
    pub location: Option<String>,
    #[arg(long)]
    pub mood: Option<String>,
    #[arg(long)]
    pub clothing: Option<String>,
    #[arg(long)]
    pub activity: Option<String>,
    #[arg(long)]
    pub intentions: Option<String>,
}

fn edit_of(args: &EditArgs) -> Edit {
    Edit { name: args.name.clone(), description: args.description.clone(), notes: args.notes.clone() }
}

/// Send `command` and wait for what it reports; print it; fail on the scene error.
fn author(engine: &EngineHandle, json: bool, command: AuthorCommand) -> Result<ExitCode> {
    let listing = matches!(command, AuthorCommand::Tree | AuthorCommand::Personas | AuthorCommand::Budgets { .. });
    engine.send(Command::Scene(SceneCommand::Author(command)))?;
    let event = wait(engine, LIMIT, |event| match event {
        Event::Author(AuthorEvent::Tree { .. }) if listing => Some(Ok(event.clone())),
        Event::Author(AuthorEvent::Personas { .. } | AuthorEvent::Budgets { .. }) if listing => Some(Ok(event.clone())),
        Event::Author(e @ (AuthorEvent::Authored { .. } | AuthorEvent::TranscriptExported { .. })) if !listing => {
            Some(Ok(Event::Author(e.clone())))
        }
        Event::Scene(SceneEvent::Error { message, .. }) => Some(Err(anyhow!("{message}"))),
        _ => None,
    })??;
    if json {
        outln!("{}", serde_json::to_string(&event)?);
        return Ok(ExitCode::SUCCESS);
    }
    match event {
        Event::Author(AuthorEvent::Authored { action, kind, id, name, impact }) => {
            let gone = impact.filter(|i| !i.is_empty()).map(|i| format!(" with {}", i.describe())).unwrap_or_default();
            outln!("{} ({id}){gone}", authored_sentence(&action, &kind, &name));
        }
        Event::Author(AuthorEvent::Tree { tree }) => print_tree(&tree)?,
        Event::Author(AuthorEvent::Budgets { name, shares, own, .. }) => {
            outln!("{name}: {}", if own { "the campaign's own shares" } else { "the config file's shares ([scene.budgets])" });
            for (section, percent) in shares {
                outln!("  {section:<28} {percent} %");
            }
        }
        Event::Author(AuthorEvent::Personas { personas }) => {
            for p in personas {
                outln!("{}  {}: {}", p.id, p.name, p.description);
            }
        }
        Event::Author(AuthorEvent::TranscriptExported { path, messages, .. }) => {
            outln!("wrote {messages} messages to {}", path.display());
        }
        _ => {}
    }
    Ok(ExitCode::SUCCESS)
}

fn print_tree(tree: &Tree) -> Result<()> {
    let books = |books: &[(String, String)]| {
        if books.is_empty() { String::new() } else { format!("  lore: {}", books.iter().map(|b| b.1.as_str()).collect::<Vec<_>>().join(", ")) }
    };
    for w in &tree.worlds {
        outln!("world {} ({}){}", w.name, w.id, books(&w.lorebooks));
        print_overrides("  ", &w.overrides)?;
        for c in &w.campaigns {
            let persona = c.persona.as_ref().map(|p| format!("  persona: {}", p.name)).unwrap_or_default();
            let cast = if c.cast.is_empty() { String::new() } else { format!("  cast: {}", c.cast.iter().map(|c| c.1.as_str()).collect::<Vec<_>>().join(", ")) };
            outln!("  campaign {} ({}){persona}{cast}{}", c.name, c.id, books(&c.lorebooks));
            print_overrides("    ", &c.overrides)?;
            for a in &c.arcs {
                outln!("    arc {} ({})", a.name, a.id);
                for s in &a.scenes {
                    outln!("      scene {} ({}), {} rounds", s.name, s.id, s.rounds);
                }
            }
        }
    }
    Ok(())
}

/// The overrides in effect at one level: a line per character, each field with the
/// start of its text (`--json` has them whole).
fn print_overrides(indent: &str, overrides: &[crate::character::SheetOverride]) -> Result<()> {
    for o in overrides {
        let fields: Vec<String> = o
            .fields
            .iter()
            .map(|(field, text)| {
                let short: String = text.chars().take(60).collect();
                format!("{field} {:?}", if short.len() < text.len() { format!("{short}…") } else { short })
            })
            .collect();
        outln!("{indent}override {}: {}", o.character, fields.join(", "));
    }
    Ok(())
}

pub fn world(engine: &EngineHandle, verb: WorldVerb, json: bool) -> Result<ExitCode> {
    let command = match verb {
        WorldVerb::New { name, text } => AuthorCommand::NewWorld { name, description: text.description, notes: text.notes },
        WorldVerb::Edit(args) => AuthorCommand::Edit { level: Level::World, edit: edit_of(&args), key: args.key },
        WorldVerb::List => AuthorCommand::Tree,
        WorldVerb::Delete(args) => AuthorCommand::Delete { level: Level::World, key: args.key, confirmed: args.yes },
        WorldVerb::Override(args) => args.command(Level::World)?,
    };
    author(engine, json, command)
}

pub fn campaign(engine: &EngineHandle, verb: CampaignVerb, json: bool) -> Result<ExitCode> {
    let command = match verb {
        CampaignVerb::New { name, world, text, persona } => {
            let created = author(engine, json, AuthorCommand::NewCampaign { world, name: name.clone(), description: text.description, notes: text.notes })?;
            if let Some(persona) = persona {
                return author(engine, json, AuthorCommand::UsePersona { campaign: name, persona: Some(persona) });
            }
            return Ok(created);
        }
        CampaignVerb::Edit(args) => AuthorCommand::Edit { level: Level::Campaign, edit: edit_of(&args), key: args.key },
        CampaignVerb::List => AuthorCommand::Tree,
        CampaignVerb::Delete(args) => AuthorCommand::Delete { level: Level::Campaign, key: args.key, confirmed: args.yes },
        CampaignVerb::Override(args) => args.command(Level::Campaign)?,
        CampaignVerb::Cast { action } => {
            let (campaign, characters, add) = match action {
                CastAction::Add { campaign, characters } => (campaign, characters, true),
                CastAction::Remove { campaign, characters } => (campaign, characters, false),
            };
            if characters.is_empty() {
                bail!("name at least one character");
            }
            for character in characters {
                let campaign = campaign.clone();
                let command =
                    if add { AuthorCommand::CastAdd { campaign, character } } else { AuthorCommand::CastRemove { campaign, character } };
                author(engine, json, command)?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        CampaignVerb::Tracker { campaign, name, value, remove } => {
            let value = match (value, remove) {
                (_, true) => None,
                (Some(text), false) => Some(serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))),
                (None, false) => bail!("give the tracker a value, or --remove it"),
            };
            AuthorCommand::EditState { campaign, edit: StateEdit::Tracker { name, value } }
        }
        CampaignVerb::Fact { campaign, action, text } => {
            let edit = match action {
                FactAction::Add => StateEdit::AddFact { fact: text },
                FactAction::Remove => StateEdit::RemoveFact { fact: text },
            };
            AuthorCommand::EditState { campaign, edit }
        }
        CampaignVerb::Time { campaign, minutes } => AuthorCommand::EditState { campaign, edit: StateEdit::Elapsed { minutes } },
        CampaignVerb::Budgets { campaign, reset: true, .. } => AuthorCommand::SetBudgets { campaign, plan: None },
        CampaignVerb::Budgets { campaign, history, summaries, lore, memories, setting, notes, director_guidance, character_guidance, reset: false } => {
            use crate::prompting::Section;
            let given = [
                (Section::History, history),
                (Section::Summaries, summaries),
                (Section::Lore, lore),
                (Section::Memories, memories),
                (Section::Setting, setting),
                (Section::Notes, notes),
                (Section::DirectorGuidance, director_guidance),
                (Section::CharacterGuidance, character_guidance),
            ];
            // Nothing to change: say what the shares are.
            if given.iter().all(|(_, v)| v.is_none()) {
                return author(engine, json, AuthorCommand::Budgets { campaign });
            }
            // The shares given change; the others keep theirs.
            let shares = given.into_iter().filter_map(|(s, v)| v.map(|v| (s, v))).collect();
            AuthorCommand::SetBudgetShares { campaign, shares }
        }
    };
    author(engine, json, command)
}

pub fn arc(engine: &EngineHandle, verb: ArcVerb, json: bool) -> Result<ExitCode> {
    let command = match verb {
        ArcVerb::New { name, campaign, notes } => AuthorCommand::NewArc { campaign, name, notes },
        ArcVerb::Edit(args) => AuthorCommand::Edit { level: Level::Arc, edit: edit_of(&args), key: args.key },
        ArcVerb::List => AuthorCommand::Tree,
        ArcVerb::Delete(args) => AuthorCommand::Delete { level: Level::Arc, key: args.key, confirmed: args.yes },
    };
    author(engine, json, command)
}

pub fn persona(engine: &EngineHandle, verb: PersonaVerb, json: bool) -> Result<ExitCode> {
    let command = match verb {
        PersonaVerb::New { name, description } => AuthorCommand::NewPersona { name, description },
        PersonaVerb::Edit { persona, name, description } => AuthorCommand::EditPersona { persona, name, description },
        PersonaVerb::List => AuthorCommand::Personas,
        PersonaVerb::Use { persona, campaign, chat, none } => {
            if persona.is_none() && !none {
                bail!("name the persona, or pass --none");
            }
            match (campaign, chat) {
                (Some(campaign), _) => AuthorCommand::UsePersona { campaign, persona },
                (None, Some(character)) => return super::chat::use_persona(engine, character, persona, json),
                (None, None) => bail!("say where: --campaign CAMPAIGN or --chat CHARACTER"),
            }
        }
        PersonaVerb::Delete { persona } => AuthorCommand::DeletePersona { persona },
        PersonaVerb::Image { persona, file, .. } => {
            AuthorCommand::PersonaImage { persona, path: file.map(|f| std::path::absolute(&f).unwrap_or(f)) }
        }
    };
    author(engine, json, command)
}

/// `character new`: a character written from scratch, through the authoring commands.
pub fn new_character(engine: &EngineHandle, sheet: crate::character::SheetEdit, json: bool) -> Result<ExitCode> {
    author(engine, json, AuthorCommand::NewCharacter { sheet: Box::new(sheet) })
}

pub fn lorebook(engine: &EngineHandle, verb: LorebookVerb, json: bool) -> Result<ExitCode> {
    let (args, attach) = match verb {
        LorebookVerb::Attach(args) => (args, true),
        LorebookVerb::Detach(args) => (args, false),
        LorebookVerb::New { name, description } => return author(engine, json, AuthorCommand::NewLorebook { name, description }),
        LorebookVerb::Rename { lorebook, name } => return author(engine, json, AuthorCommand::RenameLorebook { lorebook, name }),
        LorebookVerb::Delete { lorebook, yes } => return author(engine, json, AuthorCommand::DeleteLorebook { lorebook, confirmed: yes }),
        LorebookVerb::Entry(verb) => return super::interop::entry(engine, verb, json),
        LorebookVerb::Test { lorebook, text } => return super::interop::test(engine, lorebook, text, json),
    };
    let (level, owner) = match (args.world, args.campaign, args.character, args.chat) {
        (Some(world), None, None, None) => (LoreLevel::World, world),
        (None, Some(campaign), None, None) => (LoreLevel::Campaign, campaign),
        (None, None, Some(character), None) => (LoreLevel::Character, character),
        (None, None, None, Some(character)) => return super::chat::chat_lorebook(engine, character, args.lorebook, attach, json),
        _ => bail!("say where: one of --world, --campaign, --character or --chat"),
    };
    let command = if attach {
        AuthorCommand::Attach { lorebook: args.lorebook, level, owner }
    } else {
        AuthorCommand::Detach { lorebook: args.lorebook, level, owner }
    };
    author(engine, json, command)
}

/// `scene edit`, `scene delete`, `scene export`, `scene set-state`.
pub fn scene_edit(engine: &EngineHandle, args: EditArgs, json: bool) -> Result<ExitCode> {
    author(engine, json, AuthorCommand::Edit { level: Level::Scene, edit: edit_of(&args), key: args.key })
}

pub fn scene_delete(engine: &EngineHandle, args: DeleteArgs, json: bool) -> Result<ExitCode> {
    author(engine, json, AuthorCommand::Delete { level: Level::Scene, key: args.key, confirmed: args.yes })
}

pub fn scene_export(engine: &EngineHandle, scene: String, format: ExportFormat, out: PathBuf, json: bool) -> Result<ExitCode> {
    let format = match format {
        ExportFormat::Markdown => TranscriptFormat::Markdown,
        ExportFormat::Json => TranscriptFormat::Json,
    };
    let out = std::path::absolute(&out).unwrap_or(out);
    author(engine, json, AuthorCommand::ExportTranscript { scene, format, out })
}

pub fn scene_set_state(engine: &EngineHandle, args: SetStateArgs, json: bool) -> Result<ExitCode> {
    let state = CharacterState {
        location: args.location,
        mood: args.mood,
        clothing: args.clothing,
        activity: args.activity,
        intentions: args.intentions,
    };
    author(engine, json, AuthorCommand::EditCharacterState { scene: args.scene, character: args.character, state })
}
