//! `lorekeeper import` and `lorekeeper export`.

use super::{CardFormat, InteropCommand, InteropEvent, LorebookFormat};
use crate::engine::{Command, EngineHandle, Event};
use anyhow::{Result, anyhow};
use clap::{Args, Subcommand};
use std::io::Write;
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

#[derive(Debug, Subcommand)]
pub enum ExportWhat {
    /// A character as a Character Card (JSON, or PNG with --png).
    Character {
        /// The character's name or id.
        character: String,
        #[arg(long, value_enum)]
        format: CardFormat,
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
        format: LorebookFormat,
        #[arg(long)]
        out: PathBuf,
    },
}

/// Import the files and print what was created; fails when any file could not be read.
pub fn import(engine: &EngineHandle, args: ImportArgs, json: bool) -> Result<ExitCode> {
    let paths = args.files.iter().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())).collect();
    engine.send(Command::Interop(InteropCommand::Import { paths }))?;
    let failed = crate::cli::drive(engine, json, TIMEOUT, |event| match event {
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
            InteropCommand::ExportCharacter { character, format, png, out: std::path::absolute(&out).unwrap_or(out) }
        }
        ExportWhat::Lorebook { lorebook, format, out } => {
            InteropCommand::ExportLorebook { lorebook, format, out: std::path::absolute(&out).unwrap_or(out) }
        }
    };
    engine.send(Command::Interop(command))?;
    crate::cli::drive(engine, json, TIMEOUT, |event| match event {
        Event::Interop(InteropEvent::Exported { .. }) => Some(()),
        _ => None,
    })
    .map_err(|e| anyhow!(e))?;
    Ok(ExitCode::SUCCESS)
}

/// Human text for interop events.
pub fn print_human(out: &mut impl Write, event: &InteropEvent) -> std::io::Result<()> {
    match event {
        InteropEvent::ImportReport { created, skipped, warnings } => {
            for c in created {
                let kind = match c.item.kind {
                    super::ItemKind::Character => "character",
                    super::ItemKind::Lorebook => "lorebook",
                };
                writeln!(out, "created {kind} {:?} ({}) from {}: {}", c.item.name, c.item.id, c.path.display(), c.item.detail)?;
            }
            for w in warnings {
                writeln!(out, "note: {}: {}", w.path.display(), w.message)?;
            }
            for s in skipped {
                writeln!(out, "skipped {}: {}", s.path.display(), s.reason)?;
            }
            if created.is_empty() && skipped.is_empty() {
                writeln!(out, "nothing to import")?;
            }
            Ok(())
        }
        InteropEvent::Exported { name, format, path, bytes, .. } => {
            writeln!(out, "wrote {name:?} as {format} to {} ({bytes} bytes)", path.display())
        }
        InteropEvent::Library { characters, lorebooks } => {
            writeln!(out, "{} characters, {} lorebooks", characters.len(), lorebooks.len())
        }
    }
}
