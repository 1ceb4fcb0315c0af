//! Interoperability: Character Cards V2/V3 (JSON and PNG), SillyTavern World Info and
//! `lorebook_v3` files, in and out without loss.
//!
//! Boundary: [`format`] knows the files and nothing else; [`library`] puts documents in
//! the store and takes them out; this module turns commands into that work on the
//! engine's blocking pool and reports with [`InteropEvent`]s. Invariant: a file that
//! cannot be read changes nothing, and every event is sent after its transaction.

pub mod entry_patch;
pub mod format;
pub mod library;
pub mod profile;


pub use entry_patch::{EntryKeys, EntryPatch};
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
    /// Delete a character (an id or name; an identity run is its character) and
    /// everything that goes with it. Without `confirmed`, a character with anything
    /// attached is not deleted: [`InteropEvent::DeleteImpact`] says what would go.
    DeleteCharacter { character: String, confirmed: bool },
    /// Report a character's sheet as [`InteropEvent::Sheet`].
    Sheet { character: String },
    /// Change a character's sheet; reported as [`InteropEvent::Sheet`].
    EditSheet { character: String, edit: Box<crate::character::SheetEdit> },
    /// Report a lorebook's entries as [`InteropEvent::Entries`].
    Entries { lorebook: String },
    /// Replace the entry at `ordinal`, or add one at the end (`None`).
    SaveEntry { lorebook: String, ordinal: Option<usize>, entry: Box<crate::lorebook::LoreEntry> },
    /// Change some settings of the entry at `ordinal`, or add an entry with them at the end
    /// (`None`); checked as `SaveEntry` is, read and written in one transaction.
    PatchEntry { lorebook: String, ordinal: Option<usize>, patch: Box<EntryPatch> },
    DeleteEntry { lorebook: String, ordinal: usize },
    DuplicateEntry { lorebook: String, ordinal: usize },
    MoveEntry { lorebook: String, from: usize, to: usize },
    /// Activate a lorebook on a text and say why each entry fired or not
    /// ([`InteropEvent::LoreTest`]).
    TestLore { lorebook: String, text: String },
    /// A character's (id) portrait, small, as [`InteropEvent::Portrait`].
    Portrait { character: String },
}

/// The side, in pixels, of the portraits [`InteropCommand::Portrait`] sends: twice the
/// size lists draw them at, for high-density screens.
pub const PORTRAIT_SIDE: u32 = 96;

/// PNG bytes shared by everyone who keeps them (each panel of the workbench gets the
/// same buffer). Shown and serialised as their length: a log line or a WebSocket client
/// has no use for the pixels.
#[derive(Clone, PartialEq, Eq)]
pub struct PngBytes(pub Arc<[u8]>);

impl std::fmt::Debug for PngBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PngBytes({} bytes)", self.0.len())
    }
}

impl Serialize for PngBytes {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.0.len() as u64)
    }
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
    /// A lorebook's entries in their order (sent for `Entries` and after every change;
    /// `changed`: what the change was, with the position it concerns).
    Entries { id: String, name: String, entries: Vec<crate::lorebook::LoreEntry>, changed: Option<(String, usize)> },
    /// A character's sheet (after `Sheet`, or as saved after `EditSheet`: `saved`).
    Sheet { sheet: Box<crate::character::Sheet>, saved: bool },
    /// What deleting a character would take with it (nothing was deleted).
    DeleteImpact { id: String, name: String, impact: Vec<String> },
    CharacterDeleted { id: String, name: String, impact: Vec<String> },
    /// What activation made of a test text, entry by entry.
    LoreTest { id: String, text: String, verdicts: Vec<crate::lorebook::activation::EntryVerdict> },
    /// A character's portrait (at most [`PORTRAIT_SIDE`] pixels square), or `None` when
    /// it has none or its picture cannot be read.
    Portrait {
        id: String,
        #[serde(rename = "png_bytes")]
        png: Option<PngBytes>,
    },
    /// A lorebook command was refused: the answer to a front door waiting for it (the
    /// HTTP server), with whose fault it is. Never on the event stream, which hears the
    /// refusal as the engine's `error` event, as it always has.
    Refused { context: String, message: String, fault: crate::context::Fault },
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
    handle_asked(ctx, command, None)
}

/// [`handle`], answering `reply` with an import's report (two uploads at once each get
/// their own), a lorebook's entries after a change to them, or a lore test — or with
/// [`InteropEvent::Refused`]; other commands leave it unanswered.
pub fn handle_asked(ctx: &Arc<Context>, command: InteropCommand, reply: Option<crate::context::Reply<InteropEvent>>) {
    let ctx = ctx.clone();
    // File and database work is blocking; keep it off the engine loop.
    drop(ctx.runtime.clone().spawn_blocking(move || run(&ctx, command, reply.as_ref())));
}

fn run(ctx: &Context, command: InteropCommand, reply: Option<&crate::context::Reply<InteropEvent>>) {
    match command {
        InteropCommand::Import { paths } => {
            let report = import_paths(&ctx.store, &paths);
            crate::context::answer(reply, &report);
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
        InteropCommand::Entries { lorebook } => entries(ctx, reply, &lorebook, |_, _| Ok(None)),
        InteropCommand::PatchEntry { lorebook, ordinal, patch } => entries(ctx, reply, &lorebook, |tx, id| {
            let mut entry = match ordinal {
                Some(n) => {
                    let entries = library::load_lorebook(tx, id)?.entries;
                    let count = entries.len();
                    entries.into_iter().nth(n).ok_or_else(|| InteropError::NoEntry { book: lorebook.clone(), index: n, count })?
                }
                None => crate::lorebook::LoreEntry::default(),
            };
            patch.apply(&mut entry).map_err(InteropError::InvalidEntry)?;
            crate::lorebook::activation::check_entry(&entry).map_err(InteropError::InvalidEntry)?;
            match ordinal {
                Some(n) => library::update_entry(tx, id, n, &entry).map(|_| Some(("saved".into(), n))),
                None => library::add_entry(tx, id, &entry).map(|n| Some(("added".into(), n))),
            }
        }),
        InteropCommand::SaveEntry { lorebook, ordinal, entry } => entries(ctx, reply, &lorebook, |tx, id| {
            crate::lorebook::activation::check_entry(&entry).map_err(InteropError::InvalidEntry)?;
            match ordinal {
                Some(n) => library::update_entry(tx, id, n, &entry).map(|_| Some(("saved".into(), n))),
                None => library::add_entry(tx, id, &entry).map(|n| Some(("added".into(), n))),
            }
        }),
        InteropCommand::DeleteEntry { lorebook, ordinal } => {
            entries(ctx, reply, &lorebook, |tx, id| library::delete_entry(tx, id, ordinal).map(|_| Some(("deleted".into(), ordinal))))
        }
        InteropCommand::DuplicateEntry { lorebook, ordinal } => {
            entries(ctx, reply, &lorebook, |tx, id| library::duplicate_entry(tx, id, ordinal).map(|n| Some(("duplicated".into(), n))))
        }
        InteropCommand::MoveEntry { lorebook, from, to } => {
            entries(ctx, reply, &lorebook, |tx, id| library::move_entry(tx, id, from, to).map(|at| Some((format!("moved from {from}"), at))))
        }
        InteropCommand::DeleteCharacter { character, confirmed } => match delete_character(ctx, &character, confirmed) {
            Ok(event) => {
                let deleted = matches!(event, InteropEvent::CharacterDeleted { .. });
                ctx.emit(event);
                if deleted {
                    emit_library(ctx);
                }
            }
            Err(e) => ctx.emit(CoreEvent::error(format!("delete character {character:?}"), e)),
        },
        InteropCommand::Sheet { character } => {
            let result = ctx.store.with(|c| library::sheet_with_books(c, &crate::character::resolve(c, &character)?));
            match result {
                Ok(sheet) => ctx.emit(InteropEvent::Sheet { sheet: Box::new(sheet), saved: false }),
                Err(e) => ctx.emit(CoreEvent::error(format!("sheet of {character:?}"), e)),
            }
        }
        InteropCommand::EditSheet { character, edit } => {
            let result = ctx.store.transaction(|tx| {
                let record = crate::character::resolve(tx, &character)?;
                let edited = crate::character::edit_sheet(tx, &record.id, &edit)?;
                // What it witnessed under its old name is its own under the new one.
                crate::memory::records::rename_witness(tx, None, &record.name, &edited.name)?;
                library::sheet_with_books(tx, &edited)
            });
            match result {
                Ok(sheet) => {
                    ctx.emit(InteropEvent::Sheet { sheet: Box::new(sheet), saved: true });
                    emit_library(ctx);
                }
                Err(e) => ctx.emit(CoreEvent::error(format!("sheet of {character:?}"), e)),
            }
        }
        InteropCommand::Portrait { character } => {
            let result = ctx.store.reader().map_err(InteropError::from).and_then(|conn| library::portrait(&conn, &character, PORTRAIT_SIDE));
            let png = result.unwrap_or_else(|e| {
                // A picture that cannot be read is drawn as the initial, not reported as a failure.
                tracing::warn!(character = %character, error = %e, "portrait unreadable");
                None
            });
            ctx.emit(InteropEvent::Portrait { id: character, png: png.map(|bytes| PngBytes(bytes.into())) });
        }
        InteropCommand::TestLore { lorebook, text } => {
            let result = ctx.store.reader().map_err(InteropError::from).and_then(|conn| {
                let (id, _) = library::resolve_lorebook(&conn, &lorebook)?;
                let book = library::load_lorebook(&conn, &id)?;
                // As a chat would: `vectorized` entries by their closeness to the text,
                // with the memory embedder (left out, and said, when it cannot run), and
                // `{{user}}` in keys as the configured user's name.
                let similar = vector_closeness(ctx, &book, &text);
                let user = ctx.config().companion.user_name;
                let macros = crate::prompting::MacroContext { user: &user, ..Default::default() };
                let expand = |key: &str| crate::prompting::expand(key, &macros).text;
                Ok((id, crate::lorebook::activation::explain_with(&book, &text, similar, Some(&expand))))
            });
            match result {
                Ok((id, verdicts)) => settle(ctx, reply, InteropEvent::LoreTest { id, text, verdicts }),
                Err(e) => refuse(ctx, reply, format!("test lorebook {lorebook:?}"), e),
            }
        }
    }
}

/// The `vectorized` entries of `book` close enough to `text` to fire, with their cosine
/// (none when the embedder cannot run: the test then says they have no keys).
fn vector_closeness(ctx: &Context, book: &crate::lorebook::Lorebook, text: &str) -> Vec<(usize, f32)> {
    // `explain_with` scans the book's entries in this order: positions match.
    let entries = crate::lorebook::activation::book_entries("test", book);
    if !entries.iter().any(|e| e.entry.vectorized && e.entry.enabled) {
        return Vec::new();
    }
    crate::memory::bank_for(ctx).and_then(|bank| bank.vector_activated(&entries, text)).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "vector-activated entries left out of the lore test");
        Vec::new()
    })
}

/// Words for the tables that refer to characters, as a deletion's impact says them.
fn impact_words(table: &str, count: u64) -> String {
    let (one, many) = match table {
        "companion_turns" => ("chat exchange", "chat exchanges"),
        "companion_chats" => ("chat state", "chat states"),
        "companion_saved_chats" => ("saved chat", "saved chats"),
        "companion_chat_lorebooks" | "character_lorebooks" => ("lorebook link", "lorebook links"),
        "lorebooks" => ("lorebook of its card", "lorebooks of its card"),
        "character_images" => ("portrait", "portraits"),
        "campaign_cast" => ("place in a campaign's cast", "places in campaign casts"),
        "scene_cast" => ("place in a scene's cast", "places in scene casts"),
        "scene_character_states" => ("scene state", "scene states"),
        "scene_messages" => ("scene message (kept, unlinked)", "scene messages (kept, unlinked)"),
        "character_overrides" => ("sheet override", "sheet overrides"),
        other => (other, other),
    };
    format!("{count} {}", if count == 1 { one } else { many })
}

/// Delete a character once confirmed (or when nothing refers to it), with its
/// memories, in one transaction.
///
/// `key` may also be an identity run that has not finished, so has no character yet:
/// deleting it deletes the run. Either way the run's agents are stopped first.
fn delete_character(ctx: &Context, key: &str, confirmed: bool) -> Result<InteropEvent, crate::store::StoreError> {
    let bank = crate::memory::bank_for(ctx).ok();
    let unfinished = || vec!["its unfinished identity run".to_string()];
    // A run's id is its character's: the agents to stop are those of the character named.
    let id = match ctx.store.with(|c| crate::character::resolve(c, key)) {
        Ok(record) => record.id,
        Err(crate::store::StoreError::NotFound(_)) if !confirmed => {
            // Asked before anything is stopped.
            if let Ok(run) = ctx.store.with(|c| crate::identity::records::load_run(c, key)) {
                return Ok(InteropEvent::DeleteImpact { id: run.id, name: run.name, impact: unfinished() });
            }
            key.to_string()
        }
        Err(_) => key.to_string(),
    };
    let outcome = crate::identity::pipeline::while_stopped(ctx, &id, || ctx.store.transaction(|tx| {
        let record = match crate::character::resolve(tx, key) {
            Ok(record) => record,
            Err(crate::store::StoreError::NotFound(missing)) => match crate::identity::records::delete_run(tx, key)? {
                Some(run) => return Ok((InteropEvent::CharacterDeleted { id: run.id, name: run.name, impact: unfinished() }, None)),
                None => return Err(crate::store::StoreError::NotFound(missing)),
            },
            Err(e) => return Err(e),
        };
        let impact: Vec<String> =
            crate::store::dependents(tx, "characters", &record.id)?.into_iter().map(|(table, n)| impact_words(&table, n)).collect();
        if !confirmed && !impact.is_empty() {
            return Ok((InteropEvent::DeleteImpact { id: record.id, name: record.name, impact }, None));
        }
        let write = crate::memory::remove_character(tx, &record.id)?;
        // What it witnessed in scenes is kept under its names; a character made later
        // with one of them must not remember it, so the names are marked as the deleted
        // one's (unless another character goes by one still: then it is that one's).
        for name in crate::character::names_of(tx, &record.id)? {
            if !crate::character::name_in_use(tx, &name, &record.id)? {
                crate::memory::records::rename_witness(tx, None, &name, &format!("{name} (deleted {})", record.id))?;
            }
        }
        crate::character::delete(tx, &record.id)?;
        Ok((InteropEvent::CharacterDeleted { id: record.id, name: record.name, impact }, Some(write)))
    }))?;
    let (event, write) = outcome;
    if let (Some(bank), Some(write)) = (bank, write) {
        bank.publish(write);
    }
    Ok(event)
}

/// Send `event`, answering `reply` with it first.
fn settle(ctx: &Context, reply: Option<&crate::context::Reply<InteropEvent>>, event: InteropEvent) {
    crate::context::answer(reply, &event);
    ctx.emit(event);
}

/// Whose fault a refused lorebook command is: a book or entry that is not there, a
/// change that cannot be made (or a name several books share, which names their ids), or
/// the library's.
fn fault_of(e: &InteropError) -> crate::context::Fault {
    use crate::context::Fault;
    use crate::store::StoreError;
    match e {
        InteropError::NotFound { .. } | InteropError::NoEntry { .. } | InteropError::Store(StoreError::NotFound(_)) => Fault::NotFound,
        // A name several share is the request's to make precise, as everywhere.
        InteropError::Ambiguous { .. } | InteropError::InvalidEntry(_) | InteropError::Format(_) | InteropError::Store(StoreError::Invalid(_)) => Fault::Request,
        _ => Fault::Library,
    }
}

/// Report a refused command: to `reply` with its fault, and on the stream as the error it
/// always was.
fn refuse(ctx: &Context, reply: Option<&crate::context::Reply<InteropEvent>>, context: String, e: InteropError) {
    let fault = fault_of(&e);
    crate::context::answer(reply, &InteropEvent::Refused { context: context.clone(), message: e.to_string(), fault });
    ctx.emit(CoreEvent::error(context, e));
}

/// Apply `change` to a lorebook's entries in one transaction, then report the entries.
fn entries(
    ctx: &Context,
    reply: Option<&crate::context::Reply<InteropEvent>>,
    lorebook: &str,
    change: impl FnOnce(&rusqlite::Connection, &str) -> Result<Option<(String, usize)>, InteropError>,
) {
    let mut failure = None;
    let result = ctx.store.transaction(|tx| {
        let (id, name) = match library::resolve_lorebook(tx, lorebook) {
            Ok(found) => found,
            Err(e) => {
                failure = Some(e);
                return Err(crate::store::StoreError::Invalid("no such lorebook".into()));
            }
        };
        let changed = match change(tx, &id) {
            Ok(changed) => changed,
            Err(e) => {
                failure = Some(e);
                return Err(crate::store::StoreError::Invalid("the change was refused".into()));
            }
        };
        let book = library::load_lorebook(tx, &id).map_err(|e| crate::store::StoreError::Corrupt(e.to_string()))?;
        Ok((id, name, book.entries, changed))
    });
    match (result, failure) {
        (Ok((id, name, entries, changed)), _) => settle(ctx, reply, InteropEvent::Entries { id, name, entries, changed }),
        (Err(_), Some(e)) => refuse(ctx, reply, format!("lorebook {lorebook:?}"), e),
        (Err(e), None) => refuse(ctx, reply, format!("lorebook {lorebook:?}"), e.into()),
    }
}

/// Held while the library is read and its list sent, so lists arrive in the order they
/// were read: each list asked for runs on a thread of its own, and one read before a
/// character was added must not arrive after one read since, leaving it unlisted.
struct Listing;

fn emit_library(ctx: &Context) {
    let slot = ctx.service::<Listing>();
    let _in_order = slot.lock().unwrap_or_else(|p| p.into_inner());
    match ctx.store.reader().and_then(|conn| library::list(&conn)) {
        Ok((characters, lorebooks)) => ctx.emit(InteropEvent::Library { characters, lorebooks }),
        Err(e) => ctx.emit(CoreEvent::error("list the library", e)),
    }
}
