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

