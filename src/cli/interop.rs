//! `lorekeeper import` and `lorekeeper export`.

use crate::interop::{CardFormat, InteropCommand, InteropEvent, LorebookFormat};
use crate::engine::{Command, EngineHandle, Event};
use anyhow::{Result, anyhow};
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Imports of a few hundred files finish well within this; it only guards a hang.
const TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Card (PNG or JSON), World Info, lorebook_v3 or character book files; the kind
    /// is read from each file's content, not its extension.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// `--format` of `export character`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CardFormatArg {
    CardV2,
    CardV3,
}

impl From<CardFormatArg> for CardFormat {
    fn from(f: CardFormatArg) -> Self {
        match f {
            CardFormatArg::CardV2 => CardFormat::CardV2,
            CardFormatArg::CardV3 => CardFormat::CardV3,
        }
    }
}

/// `--format` of `export lorebook`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LorebookFormatArg {
    WorldInfo,
    LorebookV3,
}

impl From<LorebookFormatArg> for LorebookFormat {
    fn from(f: LorebookFormatArg) -> Self {
        match f {
            LorebookFormatArg::WorldInfo => LorebookFormat::WorldInfo,
            LorebookFormatArg::LorebookV3 => LorebookFormat::LorebookV3,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum ExportWhat {
    /// A character as a Character Card (JSON, or PNG with --png).
    Character {
        /// The character's name or id.
        character: String,
        #[arg(long, value_enum)]
        format: CardFormatArg,
        /// Write a PNG card (the imported portrait, or a generated placeholder).
        #[arg(long)]
        png: bool,
        #[arg(long)]
        out: PathBuf,
    },
    /// A lorebook as SillyTavern World Info or lorebook_v3.
    Lorebook {
        /// The lorebook's name or id.
        lorebook: String,
        #[arg(long, value_enum)]
        format: LorebookFormatArg,
        #[arg(long)]
        out: PathBuf,
    },
}

/// Import the files and print what was created; fails when any file could not be read.
pub fn import(engine: &EngineHandle, args: ImportArgs, json: bool) -> Result<ExitCode> {
    let paths = args.files.iter().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())).collect();
    engine.send(Command::Interop(InteropCommand::Import { paths }))?;
    let failed = super::drive::drive(engine, json, TIMEOUT, |event| match event {
        Event::Interop(InteropEvent::ImportReport { skipped, .. }) => Some(skipped.iter().filter(|s| s.error).count()),
        _ => None,
    })?;
    if failed > 0 {
        eprintln!("lorekeeper: {failed} file(s) could not be imported");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

pub fn export(engine: &EngineHandle, what: ExportWhat, json: bool) -> Result<ExitCode> {
    let command = match what {
        ExportWhat::Character { character, format, png, out } => {
            InteropCommand::ExportCharacter { character, format: format.into(), png, out: std::path::absolute(&out).unwrap_or(out) }
        }
        ExportWhat::Lorebook { lorebook, format, out } => {
            InteropCommand::ExportLorebook { lorebook, format: format.into(), out: std::path::absolute(&out).unwrap_or(out) }
        }
    };
    engine.send(Command::Interop(command))?;
    super::drive::drive(engine, json, TIMEOUT, |event| match event {
        Event::Interop(InteropEvent::Exported { .. }) => Some(()),
        _ => None,
    })
    .map_err(|e| anyhow!(e))?;
    Ok(ExitCode::SUCCESS)
}


/// `lorebook entry ...`: a lorebook's entries by hand.
#[derive(Debug, Subcommand)]
pub enum EntryVerb {
    /// List the entries in their order (their indexes are what the other verbs take).
    List { lorebook: String },
    /// Add an entry at the end.
    Add {
        lorebook: String,
        #[command(flatten)]
        fields: EntryFields,
    },
    /// Change the entry at an index (only the settings given).
    Edit {
        lorebook: String,
        index: usize,
        #[command(flatten)]
        fields: EntryFields,
    },
    Delete { lorebook: String, index: usize },
    /// Copy an entry to the end of its book.
    Duplicate { lorebook: String, index: usize },
    /// Move an entry to another index.
    Move {
        lorebook: String,
        index: usize,
        #[arg(long)]
        to: usize,
    },
}

/// An entry's settings, as `lorebook entry add|edit` take them.
#[derive(Debug, Args)]
pub struct EntryFields {
    /// Title / memo (not sent).
    #[arg(long)]
    pub comment: Option<String>,
    /// Primary keys, comma-separated (`/pattern/flags` for a regular expression).
    #[arg(long)]
    pub keys: Option<String>,
    #[arg(long)]
    pub secondary_keys: Option<String>,
    /// How secondary keys combine: and-any, and-all, not-any, not-all.
    #[arg(long)]
    pub logic: Option<String>,
    #[arg(long)]
    pub content: Option<String>,
    #[arg(long)]
    pub constant: Option<bool>,
    #[arg(long)]
    pub enabled: Option<bool>,
    #[arg(long)]
    pub order: Option<i64>,
    /// before-char, after-char, an-top, an-bottom, at-depth, examples-top, examples-bottom.
    #[arg(long)]
    pub position: Option<String>,
    #[arg(long)]
    pub depth: Option<u32>,
    /// For at-depth: system, user or assistant.
    #[arg(long)]
    pub role: Option<String>,
    #[arg(long)]
    pub probability: Option<u32>,
    #[arg(long)]
    pub group: Option<String>,
    #[arg(long)]
    pub sticky: Option<u32>,
    #[arg(long)]
    pub cooldown: Option<u32>,
    #[arg(long)]
    pub delay: Option<u32>,
    #[arg(long)]
    pub scan_depth: Option<u32>,
    /// true, false, or default (the engine's setting).
    #[arg(long)]
    pub case_sensitive: Option<String>,
    /// true, false, or default (the engine's setting).
    #[arg(long)]
    pub whole_words: Option<String>,
    /// Whether `--probability` is rolled at all.
    #[arg(long)]
    pub use_probability: Option<bool>,
    /// Not fired by other entries' content.
    #[arg(long)]
    pub exclude_recursion: Option<bool>,
    /// Its content fires no other entry.
    #[arg(long)]
    pub prevent_recursion: Option<bool>,
    /// Fires only from this recursion level on (0: not delayed).
    #[arg(long)]
    pub delay_until_recursion: Option<u32>,
    /// Weight in its inclusion group's random pick.
    #[arg(long)]
    pub group_weight: Option<u32>,
    /// Wins its inclusion group outright (SillyTavern's "prioritize").
    #[arg(long)]
    pub group_override: Option<bool>,
    /// true, false, or default: pick group members by how many keys matched.
    #[arg(long)]
    pub group_scoring: Option<String>,
    /// Fired by meaning (embedding similarity) as well as keys.
    #[arg(long)]
    pub vectorized: Option<bool>,
    /// Sent even when the lore budget is spent.
    #[arg(long)]
    pub ignore_budget: Option<bool>,
    /// Only for these characters, comma-separated ("" clears).
    #[arg(long)]
    pub characters: Option<String>,
    /// Only for characters with these tags, comma-separated ("" clears).
    #[arg(long)]
    pub character_tags: Option<String>,
    /// The character filter excludes instead.
    #[arg(long)]
    pub exclude_characters: Option<bool>,
    /// Generation types that may fire it, comma-separated: normal, continue, impersonate,
    /// swipe, regenerate, quiet ("" : all).
    #[arg(long)]
    pub triggers: Option<String>,
    /// Extra texts its keys are matched against, comma-separated: persona, description,
    /// personality, depth-prompt, scenario, creator-notes ("" : the chat only).
    #[arg(long = "match")]
    pub match_sources: Option<String>,
}

/// Words for a setting that may be left to the engine: `true`, `false` or `default`.
fn tri_state(flag: &str, value: &str) -> Result<Option<bool>> {
    match value.trim() {
        "true" | "yes" => Ok(Some(true)),
        "false" | "no" => Ok(Some(false)),
        "default" | "" => Ok(None),
        other => anyhow::bail!("--{flag} {other:?}: say true, false or default"),
    }
}

/// A comma-separated list, blanks dropped.
fn list(value: &str) -> Vec<String> {
    value.split(',').map(str::trim).filter(|v| !v.is_empty()).map(str::to_string).collect()
}

impl EntryFields {
    /// Apply the settings given to `entry`; a word that is not a setting is refused.
    fn apply(&self, entry: &mut crate::lorebook::LoreEntry) -> Result<()> {
        use crate::lorebook::{InsertionPosition, PromptRole, SelectiveLogic};
        if let Some(v) = &self.comment {
            entry.comment = v.clone();
        }
        if let Some(v) = &self.keys {
            entry.keys = crate::lorebook::split_keys(v);
        }
        if let Some(v) = &self.secondary_keys {
            entry.secondary_keys = crate::lorebook::split_keys(v);
            entry.selective = !entry.secondary_keys.is_empty() || entry.selective;
        }
        if let Some(v) = &self.logic {
            entry.selective_logic = match v.as_str() {
                "and-any" => SelectiveLogic::AndAny,
                "and-all" => SelectiveLogic::AndAll,
                "not-any" => SelectiveLogic::NotAny,
                "not-all" => SelectiveLogic::NotAll,
                other => anyhow::bail!("--logic {other:?}: say and-any, and-all, not-any or not-all"),
            };
        }
        if let Some(v) = &self.content {
            entry.content = v.clone();
        }
        if let Some(v) = self.constant {
            entry.constant = v;
        }
        if let Some(v) = self.enabled {
            entry.enabled = v;
        }
        if let Some(v) = self.order {
            entry.insertion_order = v;
        }
        if let Some(v) = &self.position {
            entry.position = match v.as_str() {
                "before-char" => InsertionPosition::BeforeCharacter,
                "after-char" => InsertionPosition::AfterCharacter,
                "an-top" => InsertionPosition::AuthorNoteTop,
                "an-bottom" => InsertionPosition::AuthorNoteBottom,
                "at-depth" => InsertionPosition::AtDepth,
                "examples-top" => InsertionPosition::ExamplesTop,
                "examples-bottom" => InsertionPosition::ExamplesBottom,
                other => anyhow::bail!("--position {other:?}: say before-char, after-char, an-top, an-bottom, at-depth, examples-top or examples-bottom"),
            };
        }
        if let Some(v) = self.depth {
            entry.depth = v;
        }
        if let Some(v) = &self.role {
            entry.role = match v.as_str() {
                "system" => PromptRole::System,
                "user" => PromptRole::User,
                "assistant" => PromptRole::Assistant,
                other => anyhow::bail!("--role {other:?}: say system, user or assistant"),
            };
        }
        if let Some(v) = self.probability {
            entry.probability = v;
        }
        if let Some(v) = &self.group {
            entry.group = v.clone();
        }
        for (given, slot) in [(self.sticky, &mut entry.sticky), (self.cooldown, &mut entry.cooldown), (self.delay, &mut entry.delay)] {
            if let Some(v) = given {
                *slot = (v > 0).then_some(v);
            }
        }
        if let Some(v) = self.scan_depth {
            entry.scan_depth = Some(v);
        }
        if let Some(v) = &self.case_sensitive {
            entry.case_sensitive = tri_state("case-sensitive", v)?;
        }
        if let Some(v) = &self.whole_words {
            entry.match_whole_words = tri_state("whole-words", v)?;
        }
        if let Some(v) = &self.group_scoring {
            entry.use_group_scoring = tri_state("group-scoring", v)?;
        }
        for (given, slot) in [
            (self.use_probability, &mut entry.use_probability),
            (self.exclude_recursion, &mut entry.exclude_recursion),
            (self.prevent_recursion, &mut entry.prevent_recursion),
            (self.group_override, &mut entry.group_override),
            (self.vectorized, &mut entry.vectorized),
            (self.ignore_budget, &mut entry.ignore_budget),
            (self.exclude_characters, &mut entry.character_filter.is_exclude),
        ] {
            if let Some(v) = given {
                *slot = v;
            }
        }
        if let Some(v) = self.delay_until_recursion {
            entry.delay_until_recursion = v;
        }
        if let Some(v) = self.group_weight {
            entry.group_weight = v;
        }
        if let Some(v) = &self.characters {
            entry.character_filter.names = list(v);
        }
        if let Some(v) = &self.character_tags {
            entry.character_filter.tags = list(v);
        }
        if let Some(v) = &self.triggers {
            let triggers = list(v);
            if let Some(bad) = triggers.iter().find(|t| !crate::lorebook::GENERATION_TRIGGERS.contains(&t.as_str())) {
                anyhow::bail!("--triggers {bad:?}: say {}", crate::lorebook::GENERATION_TRIGGERS.join(", "));
            }
            entry.triggers = triggers;
        }
        if let Some(v) = &self.match_sources {
            let mut sources = crate::lorebook::MatchSources::default();
            for source in list(v) {
                let slot = match source.as_str() {
                    "persona" => &mut sources.persona_description,
                    "description" => &mut sources.character_description,
                    "personality" => &mut sources.character_personality,
                    "depth-prompt" => &mut sources.character_depth_prompt,
                    "scenario" => &mut sources.scenario,
                    "creator-notes" => &mut sources.creator_notes,
                    other => anyhow::bail!("--match {other:?}: say persona, description, personality, depth-prompt, scenario or creator-notes"),
                };
                *slot = true;
            }
            entry.match_sources = sources;
        }
        Ok(())
    }
}

/// Send `command` and wait for the entries it reports (printed as they come).
fn entries_after(engine: &EngineHandle, json: bool, command: InteropCommand) -> Result<Vec<crate::lorebook::LoreEntry>> {
    engine.send(Command::Interop(command))?;
    super::drive::drive(engine, json, TIMEOUT, |event| match event {
        Event::Interop(InteropEvent::Entries { entries, .. }) => Some(entries.clone()),
        _ => None,
    })
    .map_err(|e| anyhow!(e))
}

pub fn entry(engine: &EngineHandle, verb: EntryVerb, json: bool) -> Result<ExitCode> {
    match verb {
        EntryVerb::List { lorebook } => {
            entries_after(engine, json, InteropCommand::Entries { lorebook })?;
        }
        EntryVerb::Add { lorebook, fields } => {
            let mut entry = crate::lorebook::LoreEntry::default();
            fields.apply(&mut entry)?;
            entries_after(engine, json, InteropCommand::SaveEntry { lorebook, ordinal: None, entry: Box::new(entry) })?;
        }
        EntryVerb::Edit { lorebook, index, fields } => {
            // Read quietly, change only what was given, save (and print what was saved).
            engine.send(Command::Interop(InteropCommand::Entries { lorebook: lorebook.clone() }))?;
            let current = super::drive::wait(engine, TIMEOUT, |event| match event {
                Event::Interop(InteropEvent::Entries { entries, .. }) => Some(entries.get(index).cloned()),
                _ => None,
            });
            let Some(mut entry) = current? else { anyhow::bail!("{lorebook:?} has no entry at index {index} (see `lorebook entry list`)") };
            fields.apply(&mut entry)?;
            entries_after(engine, json, InteropCommand::SaveEntry { lorebook, ordinal: Some(index), entry: Box::new(entry) })?;
        }
        EntryVerb::Delete { lorebook, index } => {
            entries_after(engine, json, InteropCommand::DeleteEntry { lorebook, ordinal: index })?;
        }
        EntryVerb::Duplicate { lorebook, index } => {
            entries_after(engine, json, InteropCommand::DuplicateEntry { lorebook, ordinal: index })?;
        }
        EntryVerb::Move { lorebook, index, to } => {
            entries_after(engine, json, InteropCommand::MoveEntry { lorebook, from: index, to })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `lorebook test BOOK TEXT`: why each entry fires or not on a text.
pub fn test(engine: &EngineHandle, lorebook: String, text: String, json: bool) -> Result<ExitCode> {
    engine.send(Command::Interop(InteropCommand::TestLore { lorebook, text }))?;
    super::drive::drive(engine, json, TIMEOUT, |event| match event {
        Event::Interop(InteropEvent::LoreTest { .. }) => Some(()),
        _ => None,
    })
    .map_err(|e| anyhow!(e))?;
    Ok(ExitCode::SUCCESS)
}

/// `character delete` and `identity delete`: a character (or a run, which is its
/// character) out of the library, with everything that goes with it once confirmed.
pub fn delete_character(engine: &EngineHandle, character: String, yes: bool, json: bool) -> Result<ExitCode> {
    engine.send(Command::Interop(InteropCommand::DeleteCharacter { character, confirmed: yes }))?;
    super::drive::drive(engine, json, TIMEOUT, |event| match event {
        Event::Interop(InteropEvent::CharacterDeleted { .. }) => Some(Ok(())),
        Event::Interop(InteropEvent::DeleteImpact { name, impact, .. }) => {
            Some(Err(anyhow!("deleting {name:?} would also delete {}; nothing was deleted: pass --yes to delete it all", impact.join(", "))))
        }
        _ => None,
    })
    .map_err(|e| anyhow!(e))??;
    Ok(ExitCode::SUCCESS)
}

/// `character show|edit`: send `command` and print the sheet it reports.
pub fn sheet(engine: &EngineHandle, command: InteropCommand, json: bool) -> Result<ExitCode> {
    engine.send(Command::Interop(command))?;
    super::drive::drive(engine, json, TIMEOUT, |event| match event {
        Event::Interop(InteropEvent::Sheet { .. }) => Some(()),
        _ => None,
    })
    .map_err(|e| anyhow!(e))?;
    Ok(ExitCode::SUCCESS)
}
