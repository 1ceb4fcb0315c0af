//! Interoperability: Character Cards V2/V3 (JSON and PNG), SillyTavern World Info and
//! `lorebook_v3` files, in and out without loss.
//!
//! Boundary: [`format`] knows the files and nothing else; [`library`] puts documents in
//! the store and takes them out; this module turns commands into that work on the
//! engine's blocking pool and reports with [`InteropEvent`]s. Invariant: a file that
//! cannot be read changes nothing, and every event is sent after its transaction.

pub mod format;
pub mod library;


pub use library::{CardFormat, CharacterSummary, CreatedItem, ImportOutcome, InteropError, ItemKind, LorebookFormat, LorebookSummary};

use crate::context::{Context, CoreEvent};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub enum InteropCommand {
    /// Import every file; each is detected from its content and is all-or-nothing.
    Import { paths: Vec<PathBuf> },
    /// Write a character (id or name) as a card.
    ExportCharacter { character: String, format: CardFormat, png: bool, out: PathBuf },
    /// Write a lorebook (id or name).
    ExportLorebook { lorebook: String, format: LorebookFormat, out: PathBuf },
    /// Report the library's characters and lorebooks.
    List,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum InteropEvent {
    /// What an `Import` created, and which files it skipped and why.
    ImportReport { created: Vec<ImportedItem>, skipped: Vec<SkippedFile>, warnings: Vec<ImportWarning> },
    /// A file was written.
    Exported { kind: ItemKind, id: String, name: String, format: String, path: PathBuf, bytes: u64 },
    /// The library's contents (sent for `List`, and after every import).
    Library { characters: Vec<CharacterSummary>, lorebooks: Vec<LorebookSummary> },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportedItem {
    pub path: PathBuf,
    #[serde(flatten)]
    pub item: CreatedItem,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedFile {
    pub path: PathBuf,
    pub reason: String,
    /// `false` for a file already in the library, `true` for one that could not be read.
    pub error: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportWarning {
    pub path: PathBuf,
    pub message: String,
}

/// Import `paths` one by one and build the report.
pub fn import_paths(store: &crate::store::Store, paths: &[PathBuf]) -> InteropEvent {
    let mut created = Vec::new();
    let mut skipped = Vec::new();
    let mut warnings = Vec::new();
    for path in paths {
        match library::import_file(store, path) {
            Ok(ImportOutcome::Created { items, warnings: notes }) => {
                created.extend(items.into_iter().map(|item| ImportedItem { path: path.clone(), item }));
                warnings.extend(notes.into_iter().map(|message| ImportWarning { path: path.clone(), message }));
            }
            Ok(ImportOutcome::Duplicate { kind, id, name }) => {
                let what = match kind {
                    ItemKind::Character => "character",
                    ItemKind::Lorebook => "lorebook",
                };
                skipped.push(SkippedFile { path: path.clone(), reason: format!("already in the library as {what} {name:?} ({id})"), error: false });
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "import skipped a file");
                skipped.push(SkippedFile { path: path.clone(), reason: e.to_string(), error: true });
            }
        }
    }
    InteropEvent::ImportReport { created, skipped, warnings }
}

pub fn handle(ctx: &Arc<Context>, command: InteropCommand) {
    let ctx = ctx.clone();
    // File and database work is blocking; keep it off the engine loop.
    drop(ctx.runtime.clone().spawn_blocking(move || run(&ctx, command)));
}

fn run(ctx: &Context, command: InteropCommand) {
    match command {
        InteropCommand::Import { paths } => {
            let report = import_paths(&ctx.store, &paths);
            ctx.emit(report);
            emit_library(ctx);
        }
        InteropCommand::ExportCharacter { character, format, png, out } => {
            let context = format!("export character {character:?}");
            let result = ctx.store.reader().map_err(InteropError::from).and_then(|conn| {
                let export = library::export_character(&conn, &character, format, png)?;
                library::write_atomically(&out, &export.bytes)?;
                Ok(export)
            });
            match result {
                Ok(export) => ctx.emit(InteropEvent::Exported {
                    kind: ItemKind::Character,
                    id: export.id,
                    name: export.name,
                    format: format!("{}{}", format.label(), if png { " (png)" } else { "" }),
                    path: out,
                    bytes: export.bytes.len() as u64,
                }),
                Err(e) => ctx.emit(CoreEvent::error(context, e)),
            }
        }
        InteropCommand::ExportLorebook { lorebook, format, out } => {
            let context = format!("export lorebook {lorebook:?}");
            let result = ctx.store.reader().map_err(InteropError::from).and_then(|conn| {
                let export = library::export_lorebook(&conn, &lorebook, format)?;
                library::write_atomically(&out, &export.bytes)?;
                Ok(export)
            });
            match result {
                Ok(export) => ctx.emit(InteropEvent::Exported {
                    kind: ItemKind::Lorebook,
                    id: export.id,
                    name: export.name,
                    format: format.label().to_string(),
                    path: out,
                    bytes: export.bytes.len() as u64,
                }),
                Err(e) => ctx.emit(CoreEvent::error(context, e)),
            }
        }
        InteropCommand::List => emit_library(ctx),
    }
}

fn emit_library(ctx: &Context) {
    match ctx.store.reader().and_then(|conn| library::list(&conn)) {
        Ok((characters, lorebooks)) => ctx.emit(InteropEvent::Library { characters, lorebooks }),
        Err(e) => ctx.emit(CoreEvent::error("list the library", e)),
    }
}
