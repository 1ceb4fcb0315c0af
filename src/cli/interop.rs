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
    /// Delete the entry at an index; the entries after it move up one.
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
    /// before-char, after-char, an-top, an-bottom, at-depth, examples-top, examples-bottom,
    /// outlet (only where a card, a note or a prompt writes {{outlet::Name}}).
    #[arg(long)]
    pub position: Option<String>,
    /// For outlet: the outlet's name, as {{outlet::Name}} writes it.
    #[arg(long)]
    pub outlet_name: Option<String>,
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

impl EntryFields {
    /// The settings given, as the engine takes them (the HTTP entry routes take the same).
    fn patch(self) -> crate::interop::EntryPatch {
        use crate::interop::EntryKeys as Keys;
        crate::interop::EntryPatch {
            comment: self.comment,
            keys: self.keys.map(Keys::Line),
            secondary_keys: self.secondary_keys.map(Keys::Line),
            logic: self.logic,
            content: self.content,
            constant: self.constant,
            enabled: self.enabled,
            order: self.order,
            position: self.position,
            outlet_name: self.outlet_name,
            depth: self.depth,
            role: self.role,
            probability: self.probability,
            group: self.group,
            sticky: self.sticky,
            cooldown: self.cooldown,
            delay: self.delay,
            scan_depth: self.scan_depth,
            case_sensitive: self.case_sensitive,
            whole_words: self.whole_words,
            use_probability: self.use_probability,
            exclude_recursion: self.exclude_recursion,
            prevent_recursion: self.prevent_recursion,
            delay_until_recursion: self.delay_until_recursion,
            group_weight: self.group_weight,
            group_override: self.group_override,
            group_scoring: self.group_scoring,
            vectorized: self.vectorized,
            ignore_budget: self.ignore_budget,
            characters: self.characters.map(Keys::Line),
            character_tags: self.character_tags.map(Keys::Line),
            exclude_characters: self.exclude_characters,
            triggers: self.triggers.map(Keys::Line),
            match_sources: self.match_sources.map(Keys::Line),
        }
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
            let patch = Box::new(fields.patch());
            entries_after(engine, json, InteropCommand::PatchEntry { lorebook, ordinal: None, patch })?;
        }
        EntryVerb::Edit { lorebook, index, fields } => {
            let patch = Box::new(fields.patch());
            entries_after(engine, json, InteropCommand::PatchEntry { lorebook, ordinal: Some(index), patch })?;
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
