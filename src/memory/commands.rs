//! The memory capability's commands and events, run by the engine on blocking workers.

use super::bank::{GraphProgress, MemoryBank, MemoryError, MemoryStats};
use super::eval::{self, EvalReport};
use super::records::{Memory, MemoryKind, NewMemory, Scope, ScopeKind};
use super::retrieval::{RetrievalHit, SearchMode, SearchRequest};
use crate::context::{Context, CoreEvent, Reply};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone)]
pub enum MemoryCommand {
    /// Import turns from a JSON-lines file.
    Import { path: PathBuf },
    Search { request: SearchRequest },
    /// Measure recall on a JSON-lines question file.
    Eval { path: PathBuf, k: usize, mode: SearchMode },
    /// Embed memories that lack a vector of the current model (all with `force`), then
    /// rebuild the vector graph.
    Reindex { force: bool },
    Stats,
    /// A memory with the turns around it.
    Context { id: String, before: usize, after: usize },
    /// Chunk, embed and index the markdown lore under `dir` (default: the lore folder).
    IndexLore { dir: Option<PathBuf> },
    /// Report what each agent's last prompt was given, as [`MemoryEvent::Injections`].
    Injections,
    /// Report what `agent`'s earlier prompts were given, newest first.
    InjectionHistory { agent: String, limit: u32 },
    /// Pin (or unpin) a memory: its character is given it every time, within budget.
    Pin { id: String, pinned: bool },
    /// Change a memory's text (re-embedded, keyword index updated, one transaction).
    Edit { id: String, text: String },
    Delete { id: String },
    /// Delete every memory of a session.
    ForgetSession { session: String },
    /// Switch the library to another installed embedding model (`embedder::MODELS`),
    /// save the choice in the config, and embed every memory with it.
    UseModel { name: String },
    /// Write the turns and summaries (of `scope`, if given) to `path` in the import
    /// format, as they now read: edited text, pins, and without what was deleted.
    /// Without a path the lines come back in the event (HTTP).
    Export { path: Option<PathBuf>, scope: Option<Scope> },
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum MemoryEvent {
    ImportProgress { done: usize, total: usize },
    Imported { summary: ImportSummary },
    SearchResults { query: String, mode: SearchMode, hits: Vec<RetrievalHit>, elapsed_ms: f64 },
    Evaluated { report: EvalReport },
    ReindexProgress { done: usize, total: usize },
    /// The vector graph is being rebuilt / was rebuilt.
    IndexRebuilding { vectors: usize },
    IndexRebuildProgress { done: usize, total: usize },
    IndexRebuilt { vectors: usize, elapsed_ms: u64 },
    Reindexed { embedded: usize },
    Stats { stats: MemoryStats },
    Context { id: String, memories: Vec<Memory> },
    LoreIndexed { report: super::lore::LoreReport },
    Injections { injections: Vec<super::injections::Injection> },
    InjectionHistory { agent: String, injections: Vec<super::injections::Injection> },
    /// A memory was pinned, unpinned, edited or deleted, or a session forgotten.
    Curated { curated: super::curate::Curated },
    Exported {
        path: Option<String>,
        memories: usize,
        /// The lines, when no file was asked for.
        #[serde(skip)]
        lines: Option<Arc<String>>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImportSummary {
    pub path: String,
    pub imported: usize,
    pub sessions: usize,
    pub elapsed_ms: u64,
    pub per_second: f64,
    /// `character:KEY` scopes that name no character of the library: kept as written
    /// (a character imported later with that id will have them), and said.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_characters: Vec<String>,
    /// Lines that gave an id an earlier line of the file already gave: the last of each
    /// is the one kept (`imported` counts memories, not lines).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repeated_ids: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One line of an import file.
#[derive(Debug, Clone, Deserialize)]
struct ImportLine {
    id: String,
    speaker: String,
    text: String,
    #[serde(default)]
    time: Option<String>,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    witnesses: Vec<String>,
    #[serde(default)]
    fiction_time: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    /// Pinned by the user (what `memory export` writes for a pinned memory).
    #[serde(default)]
    pinned: bool,
}

/// The largest memory import file read: about a million long turns.
const MAX_IMPORT_BYTES: u64 = 1 << 30;

/// Parse an import file fully before writing anything: a bad line changes nothing.
pub fn read_import(path: &Path) -> Result<Vec<NewMemory>, MemoryError> {
    read_import_resolving(path, &|id| Ok(Some(id.to_string()))).map(|(items, _, _)| items)
}

/// Turns a `character:KEY` scope's key into the character's id: `Ok(None)` when no
/// character has that name or id, `Err` when the key cannot be used (two of that name).
pub type CharacterKey<'a> = &'a dyn Fn(&str) -> Result<Option<String>, String>;

/// [`read_import`], with each `character:KEY` scope's key turned into the character's
/// id by `character` (a name is what a person writes; memories are kept by id, so a
/// name left as it is would belong to nobody). A key that names no character is kept as
/// written and returned; one that cannot be used (two characters of that name) fails
/// its line.
/// Returns the memories, the character keys that named nobody, and the ids of the lines
/// marked `pinned`.
pub fn read_import_resolving(path: &Path, character: CharacterKey<'_>) -> Result<(Vec<NewMemory>, Vec<String>, Vec<String>), MemoryError> {
    let shown = path.display().to_string();
    let text = crate::paths::read_text_bounded(path, MAX_IMPORT_BYTES).map_err(|e| MemoryError::Read { path: shown.clone(), message: e.to_string() })?;
    let mut out = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut pinned: Vec<String> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| MemoryError::BadLine { path: shown.clone(), line: i + 1, message };
        let l: ImportLine = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        if l.id.trim().is_empty() || l.text.trim().is_empty() {
            return Err(bad("`id` and `text` must not be empty".into()));
        }
        let mut scope = match &l.scope {
            Some(s) => Scope::parse(s).ok_or_else(|| bad(format!("unknown scope {s:?} (world, campaign:ID, character:ID)")))?,
            None => Scope::world(),
        };
        if scope.kind == ScopeKind::Character
            && let Some(key) = scope.id.take()
        {
            scope.id = match character(&key).map_err(|e| bad(format!("scope {:?}: {e}", format!("character:{key}"))))? {
                Some(id) => Some(id),
                None => {
                    if !unknown.contains(&key) {
                        unknown.push(key.clone());
                    }
                    Some(key)
                }
            };
        }
        let kind = match &l.kind {
            Some(k) => MemoryKind::parse(k).ok_or_else(|| bad(format!("unknown kind {k:?} (turn, summary, lore)")))?,
            None => MemoryKind::Turn,
        };
        if l.pinned {
            pinned.push(l.id.clone());
        }
        out.push(NewMemory {
            id: Some(l.id),
            kind,
            scope,
            speaker: Some(l.speaker),
            text: l.text,
            session: l.session,
            fiction_time: l.fiction_time,
            time: l.time,
            witnesses: l.witnesses,
            source: Some(shown.clone()),
            content_hash: None,
        });
    }
    Ok((out, unknown, pinned))
}

/// Import `path` into `bank` in batches, reporting progress after each.
pub fn import_file(
    bank: &MemoryBank,
    path: &Path,
    progress: impl FnMut(usize, usize),
) -> Result<ImportSummary, MemoryError> {
    import_file_resolving(bank, path, &|id| Ok(Some(id.to_string())), progress)
}

/// [`import_file`] with character scopes resolved (see [`read_import_resolving`]).
pub fn import_file_resolving(
    bank: &MemoryBank,
    path: &Path,
    character: CharacterKey<'_>,
    mut progress: impl FnMut(usize, usize),
) -> Result<ImportSummary, MemoryError> {
    let started = Instant::now();
    let (mut items, unknown_characters, pinned) = read_import_resolving(path, character)?;
    // A file that gives one id twice means its last line: the earlier ones are not
    // embedded and stored only to be replaced.
    let lines = items.len();
    let mut seen = std::collections::HashSet::new();
    items.reverse();
    items.retain(|m| m.id.as_ref().is_none_or(|id| seen.insert(id.clone())));
    items.reverse();
    let repeated_ids = lines - items.len();
    let total = items.len();
    let sessions = items.iter().filter_map(|m| m.session.as_deref()).collect::<std::collections::HashSet<_>>().len();
    progress(0, total);
    let mut done = 0;
    for chunk in items.chunks(256) {
        bank.add(chunk.to_vec())?;
        done += chunk.len();
        progress(done, total);
    }
    for id in &pinned {
        bank.pin(id, true)?;
    }
    let elapsed = started.elapsed();
    Ok(ImportSummary {
        path: path.display().to_string(),
        imported: total,
        sessions,
        elapsed_ms: elapsed.as_millis() as u64,
        per_second: total as f64 / elapsed.as_secs_f64().max(1e-9),
        unknown_characters,
        repeated_ids,
    })
}

/// The turns and summaries (of `scope`, if given) as import-format lines, oldest first:
/// a library's memories as the user curated them, to keep or to bring into another
/// library (`memory import` reads them back, pins included). Lore is left out: it is
/// indexed from its files.
pub fn export_lines(bank: &MemoryBank, scope: Option<&Scope>) -> Result<(String, usize), MemoryError> {
    let rowids: Vec<i64> = bank.store().with(|c| {
        let mut stmt = c.prepare(
            "SELECT rowid FROM memories WHERE kind IN ('turn', 'summary') AND (?1 IS NULL OR (scope = ?1 AND scope_id IS ?2)) ORDER BY seq",
        )?;
        let rows = stmt.query_map(rusqlite::params![scope.map(|s| s.kind.as_str()), scope.and_then(|s| s.id.clone())], |r| r.get(0))?;
        Ok(rows.collect::<Result<Vec<i64>, _>>()?)
    })?;
    // A character's memories name it as a person would ("character:Wren Calloway"): an
    // id means nothing to another library, where the import finds the character by name.
    // A name two characters share stays an id.
    let characters = bank.store().with(crate::character::list)?;
    let scope_text = |scope: &Scope| -> String {
        match (&scope.kind, &scope.id) {
            (ScopeKind::Character, Some(id)) => {
                let name = characters.iter().find(|c| &c.id == id).map(|c| c.name.trim());
                match name {
                    Some(name) if !name.is_empty() && characters.iter().filter(|c| c.name.trim().eq_ignore_ascii_case(name)).count() == 1 => {
                        format!("character:{name}")
                    }
                    _ => scope.to_string(),
                }
            }
            _ => scope.to_string(),
        }
    };
    let mut out = String::new();
    for chunk in rowids.chunks(1000) {
        let mut memories = bank.store().with(|c| super::records::load(c, chunk))?;
        memories.sort_by_key(|m| m.seq);
        for m in memories {
            let mut line = serde_json::json!({ "id": m.id, "speaker": m.speaker.unwrap_or_default(), "text": m.text, "scope": scope_text(&m.scope) });
            let fields = [("time", m.time), ("session", m.session), ("fiction_time", m.fiction_time)];
            for (key, value) in fields {
                if let Some(value) = value {
                    line[key] = value.into();
                }
            }
            if !m.witnesses.is_empty() {
                line["witnesses"] = m.witnesses.into();
            }
            if m.kind != MemoryKind::Turn {
                line["kind"] = m.kind.as_str().into();
            }
            if m.pinned {
                line["pinned"] = true.into();
            }
            out.push_str(&line.to_string());
            out.push('\n');
        }
    }
    Ok((out, rowids.len()))
}

/// The engine's bank for its library (one per engine, shared by every command and by
/// the agents that recall memories). A change of retrieval settings applies at once; a
/// change of embedding model opens a new bank, because stored vectors are per model.
pub fn bank_for(ctx: &Context) -> Result<Arc<MemoryBank>, MemoryError> {
    let config = ctx.config().memory;
    let slot = ctx.service::<MemoryBank>();
    let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(bank) = slot.as_ref() {
        if bank.config().embedding == config.embedding {
            bank.set_config(config);
            return Ok(bank.clone());
        }
    }
    // Emitters, not the context: the bank lives in the context, and an observer holding
    // the context would keep it alive for ever.
    let events = ctx.emitter::<MemoryEvent>();
    let log = ctx.emitter::<CoreEvent>();
    let observer = move |progress: GraphProgress| match progress {
        GraphProgress::Started { vectors } => events.send(MemoryEvent::IndexRebuilding { vectors }),
        GraphProgress::Building { done, total } => events.send(MemoryEvent::IndexRebuildProgress { done, total }),
        GraphProgress::Finished { vectors, elapsed_ms } => events.send(MemoryEvent::IndexRebuilt { vectors, elapsed_ms }),
        GraphProgress::Failed { message } => {
            log.send(CoreEvent::warn(format!("rebuilding the vector graph failed: {message}; searching exactly meanwhile")))
        }
    };
    let bank = MemoryBank::open_observed(ctx.store.clone(), config, Some(Arc::new(observer)))?;
    *slot = Some(bank.clone());
    Ok(bank)
}

/// What settles a memory command for the one waiting on it: its result, or the error
/// reported for it (memory reports errors as [`CoreEvent::Error`]).
pub type MemoryAnswer = Result<MemoryEvent, CoreEvent>;

pub fn handle(ctx: &Arc<Context>, command: MemoryCommand) {
    handle_asked(ctx, command, None)
}

/// [`handle`], answering `reply` with the command's result (search results, stats, a
/// curation, the reindex a model switch ends with) or its error; progress is not an
/// answer.
pub fn handle_asked(ctx: &Arc<Context>, command: MemoryCommand, reply: Option<Reply<MemoryAnswer>>) {
    let ctx = ctx.clone();
    ctx.runtime.clone().spawn_blocking(move || {
        let what = describe(&command);
        if let Err(e) = run(&ctx, command, reply.as_ref()) {
            let error = CoreEvent::error(what, e);
            crate::context::answer(reply.as_ref(), &Err(error.clone()));
            ctx.emit(error);
        }
    });
}

fn describe(command: &MemoryCommand) -> &'static str {
    match command {
        MemoryCommand::Import { .. } => "memory import",
        MemoryCommand::Search { .. } => "memory search",
        MemoryCommand::Eval { .. } => "memory eval",
        MemoryCommand::Reindex { .. } => "memory reindex",
        MemoryCommand::Stats => "memory stats",
        MemoryCommand::Context { .. } => "memory context",
        MemoryCommand::IndexLore { .. } => "memory lore",
        MemoryCommand::Injections => "memory injections",
        MemoryCommand::InjectionHistory { .. } => "memory injection history",
        MemoryCommand::Pin { .. } => "memory pin",
        MemoryCommand::Edit { .. } => "memory edit",
        MemoryCommand::Delete { .. } => "memory delete",
        MemoryCommand::ForgetSession { .. } => "memory forget",
        MemoryCommand::UseModel { .. } => "memory model",
        MemoryCommand::Export { .. } => "memory export",
    }
}

fn emit(ctx: &Context, event: MemoryEvent) {
    ctx.emit(event);
}

/// Emit the event that settles the command, answering `reply` with it too.
fn settle(ctx: &Context, reply: Option<&Reply<MemoryAnswer>>, event: MemoryEvent) {
    crate::context::answer(reply, &Ok(event.clone()));
    ctx.emit(event);
}

/// Embed the memories without a vector of the bank's model (all with `force`), then
/// rebuild the graph, reporting progress.
fn reindex(ctx: &Context, bank: &MemoryBank, force: bool, reply: Option<&Reply<MemoryAnswer>>) -> Result<(), MemoryError> {
    let embedded = bank.reindex(force, |done, total| emit(ctx, MemoryEvent::ReindexProgress { done, total }))?;
    // The bank's observer reports the rebuild (see `bank_for`).
    bank.rebuild_ann_waiting()?;
    settle(ctx, reply, MemoryEvent::Reindexed { embedded });
    Ok(())
}

/// The model is loaded before the choice is saved: one that is not installed fails with
/// set-up's hint, and the config keeps the model that works. Choosing the model in use
/// embeds only what lacks a vector.
fn use_model(ctx: &Context, name: &str, reply: Option<&Reply<MemoryAnswer>>) -> Result<(), MemoryError> {
    let model = super::embedder::find_model(name).ok_or_else(|| {
        let names: Vec<&str> = super::embedder::MODELS.iter().map(|m| m.name).collect();
        MemoryError::Invalid(format!("no embedding model is called {name:?}; the models are {}", names.join(", ")))
    })?;
    let next = ctx.config().memory.embedding.with_model(model);
    super::Embedder::shared(&next)?;
    ctx.update_config(|c| c.memory.embedding = next.clone())
        .map_err(|e| MemoryError::Invalid(format!("cannot save the model choice: {e}")))?;
    tracing::info!(model = model.name, "embedding model chosen");
    let bank = bank_for(ctx)?;
    reindex(ctx, &bank, false, reply)
}

fn run(ctx: &Context, command: MemoryCommand, reply: Option<&Reply<MemoryAnswer>>) -> Result<(), MemoryError> {
    // Before the bank opens: its model may be the one that is missing.
    if let MemoryCommand::UseModel { name } = &command {
        return use_model(ctx, name, reply);
    }
    let settle = |event: MemoryEvent| settle(ctx, reply, event);
    let bank = bank_for(ctx)?;
    match command {
        MemoryCommand::Import { path } => {
            let mut last = Instant::now();
            // By id, or by the whole name (a file's scope is written once and read for
            // good: no guessing from part of a name).
            let character = |key: &str| -> Result<Option<String>, String> {
                let key = key.trim();
                let all = ctx.store.with(crate::character::list).map_err(|e| e.to_string())?;
                if all.iter().any(|c| c.id == key) {
                    return Ok(Some(key.to_string()));
                }
                let named: Vec<&crate::character::CharacterRecord> = all.iter().filter(|c| c.name.trim().eq_ignore_ascii_case(key)).collect();
                match named.as_slice() {
                    [] => Ok(None),
                    [one] => Ok(Some(one.id.clone())),
                    many => Err(format!(
                        "{} characters are called {key:?}; use an id: {}",
                        many.len(),
                        many.iter().map(|c| c.id.as_str()).collect::<Vec<_>>().join(", ")
                    )),
                }
            };
            let summary = import_file_resolving(&bank, &path, &character, |done, total| {
                // At most ~10 progress events a second, plus the first and the last.
                if done == 0 || done == total || last.elapsed().as_millis() >= 100 {
                    last = Instant::now();
                    emit(ctx, MemoryEvent::ImportProgress { done, total });
                }
            })?;
            emit(ctx, MemoryEvent::Imported { summary });
        }
        MemoryCommand::Search { mut request } => {
            let started = Instant::now();
            // A character scope may name the character ("character:Odile"): memories are
            // stored under its id, so a name would silently find nothing.
            if let Some(scope) = request.filter.scope.as_mut()
                && scope.kind == ScopeKind::Character
                && let Some(key) = scope.id.clone()
            {
                scope.id = Some(ctx.store.with(|c| crate::character::resolve(c, &key))?.id);
            }
            // A bound that is no date would compare as text and quietly find nothing.
            for (flag, bound) in [("from", &request.filter.time_from), ("to", &request.filter.time_to)] {
                if let Some(t) = bound.as_deref().filter(|t| !super::records::is_time(t)) {
                    return Err(MemoryError::Invalid(format!("`{flag}` {t:?} is not a date: use YYYY-MM-DD, \"YYYY-MM-DD HH:MM\" or RFC 3339")));
                }
            }
            let hits = if request.query.trim().is_empty() { bank.newest(&request.filter, request.k)? } else { bank.search(&request)? };
            settle(MemoryEvent::SearchResults {
                query: request.query,
                mode: request.mode,
                hits,
                elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
            });
        }
        MemoryCommand::Eval { path, k, mode } => {
            let questions = eval::read_questions(&path)?;
            let report = eval::evaluate(&bank, &questions, k, mode)?;
            emit(ctx, MemoryEvent::Evaluated { report });
        }
        MemoryCommand::Reindex { force } => reindex(ctx, &bank, force, reply)?,
        MemoryCommand::UseModel { .. } => {} // answered before the bank opened
        MemoryCommand::Stats => settle(MemoryEvent::Stats { stats: bank.stats()? }),
        MemoryCommand::Export { path, scope } => {
            let mut scope = scope;
            // A character scope may name the character, as a search's may.
            if let Some(s) = scope.as_mut()
                && s.kind == ScopeKind::Character
                && let Some(key) = s.id.clone()
            {
                s.id = Some(ctx.store.with(|c| crate::character::resolve(c, &key))?.id);
            }
            let (text, memories) = export_lines(&bank, scope.as_ref())?;
            match path {
                Some(path) => {
                    let shown = path.display().to_string();
                    std::fs::write(&path, text).map_err(|e| MemoryError::Invalid(format!("cannot write {shown}: {e}")))?;
                    emit(ctx, MemoryEvent::Exported { path: Some(shown), memories, lines: None });
                }
                None => settle(MemoryEvent::Exported { path: None, memories, lines: Some(Arc::new(text)) }),
            }
        }
        MemoryCommand::Context { id, before, after } => {
            let memories = bank.context(&id, before, after)?;
            emit(ctx, MemoryEvent::Context { id, memories });
        }
        MemoryCommand::IndexLore { dir } => {
            let dir = dir.unwrap_or_else(crate::paths::lore_dir);
            let report = super::lore::index_lore(&bank, &dir)?;
            emit(ctx, MemoryEvent::LoreIndexed { report });
        }
        MemoryCommand::InjectionHistory { agent, limit } => {
            let injections = super::injections::history(&ctx.store.reader()?, &agent, limit)?;
            emit(ctx, MemoryEvent::InjectionHistory { agent, injections });
        }
        MemoryCommand::Injections => {
            let injections = super::injections::latest(&ctx.store.reader()?)?;
            settle(MemoryEvent::Injections { injections });
        }
        MemoryCommand::Pin { id, pinned } => settle(MemoryEvent::Curated { curated: bank.pin(&id, pinned)? }),
        MemoryCommand::Edit { id, text } => settle(MemoryEvent::Curated { curated: bank.edit(&id, &text)? }),
        MemoryCommand::Delete { id } => settle(MemoryEvent::Curated { curated: bank.delete(&id)? }),
        MemoryCommand::ForgetSession { session } => settle(MemoryEvent::Curated { curated: bank.forget_session(&session)? }),
    }
    Ok(())
}
