//! `lorekeeper memory ...`: import, search, eval, reindex, stats — each sent to the
//! engine as a [`MemoryCommand`] and answered by a [`MemoryEvent`].
//!
//! With `--json` stdout carries exactly one JSON document (the hits array, the summary,
//! the report), so scripts can pipe it; progress always goes to stderr.

use crate::memory::{MemoryCommand, MemoryEvent};
use crate::memory::records::Scope;
use crate::memory::retrieval::{SearchFilter, SearchMode, SearchRequest};
use crate::engine::{Command, CoreEvent, EngineHandle, Event};
use anyhow::{Result, anyhow, bail};
use clap::{Args, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum MemoryAction {
    /// Import turns from a JSON-lines file: {"id","speaker","text","time"?,"session"?,"scope"?,"witnesses"?}.
    Import { file: PathBuf },
    /// Hybrid search; prints the hits best first.
    Search(SearchArgs),
    /// Recall@k of a JSON-lines question file: {"question","evidence":[ids]}.
    Eval(EvalArgs),
    /// Embed memories missing a vector of the current model, then rebuild the vector graph.
    Reindex {
        /// Re-embed every memory, not only those without a vector.
        #[arg(long)]
        force: bool,
    },
    /// Counts of memories, vectors and index state.
    Stats,
    /// The embedding models set-up installs, the one in use marked; with a NAME, switch
    /// the library to that model (saved in the config) and embed every memory with it.
    Model { name: Option<String> },
    /// What the agents' prompts were given: each agent's last prompt, or with --agent
    /// that agent's prompts, newest first.
    Injections {
        #[arg(long)]
        agent: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Chunk, embed and index markdown lore files (only files whose content changed).
    Lore {
        /// The lore folder (default: `lore/`).
        dir: Option<PathBuf>,
    },
    /// Pin a memory: its character is given it in every prompt, within the memory budget.
    Pin {
        id: String,
        /// Take the pin off.
        #[arg(long)]
        unpin: bool,
    },
    /// Change a memory's text (re-embedded; the old text is found no more).
    Edit { id: String, text: String },
    /// Delete a memory.
    Delete { id: String },
    /// Delete every memory of a session.
    Forget {
        #[arg(long)]
        session: String,
    },
    /// Write the turns and summaries, as curated (edits, pins, deletions), to a JSON-lines
    /// file that `memory import` reads back.
    Export {
        #[arg(long)]
        out: PathBuf,
        /// world, campaign[:ID] or character[:NAME or ID] (default: every memory).
        #[arg(long)]
        scope: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct SearchArgs {
    pub query: String,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// hybrid, keyword or vector.
    #[arg(long, default_value = "hybrid", value_parser = parse_mode)]
    pub mode: SearchMode,
    /// world, campaign[:ID] or character[:NAME or ID].
    #[arg(long)]
    pub scope: Option<String>,
    #[arg(long)]
    pub speaker: Option<String>,
    /// Only what this character witnessed or was told.
    #[arg(long)]
    pub witness: Option<String>,
    #[arg(long)]
    pub session: Option<String>,
    /// Earliest time (RFC 3339 or YYYY-MM-DD).
    #[arg(long)]
    pub from: Option<String>,
    /// Latest time (RFC 3339 or YYYY-MM-DD, inclusive).
    #[arg(long)]
    pub to: Option<String>,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    pub file: PathBuf,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    #[arg(long, default_value = "hybrid", value_parser = parse_mode)]
    pub mode: SearchMode,
}

fn parse_mode(text: &str) -> Result<SearchMode, String> {
    SearchMode::parse(text).ok_or_else(|| format!("unknown mode {text:?} (hybrid, keyword, vector)"))
}

/// Wait for the event that answers a command; engine errors end the wait.
fn wait<T>(engine: &EngineHandle, mut answer: impl FnMut(&MemoryEvent) -> Option<T>) -> Result<T> {
    let timeout = Duration::from_secs(6 * 3600);
    loop {
        let event = engine.events().recv_timeout(timeout).map_err(|_| anyhow!("no answer from the engine within {timeout:?}"))?;
        match &event {
            Event::Memory(e) => {
                if let Some(done) = answer(e) {
                    return Ok(done);
                }
            }
            Event::Core(CoreEvent::Error { context, message }) => bail!("{context}: {message}"),
            Event::Core(CoreEvent::Stopped) => bail!("the engine stopped unexpectedly"),
            _ => {}
        }
    }
}

fn curate(engine: &EngineHandle, command: MemoryCommand, json: bool, out: &mut impl Write) -> Result<()> {
    engine.send(Command::Memory(command))?;
    let curated = wait(engine, |e| match e {
        MemoryEvent::Curated { curated } => Some(curated.clone()),
        _ => None,
    })?;
    if json {
        writeln!(out, "{}", serde_json::to_string(&curated)?)?;
    } else {
        match curated.ids.as_slice() {
            [one] => writeln!(out, "{} {one}", curated.action)?,
            many => writeln!(out, "{} {} memories", curated.action, many.len())?,
        }
    }
    Ok(())
}

/// Whether a progress line is on stderr, not yet ended.
static PROGRESS_OPEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn progress(label: &str, done: usize, total: usize) {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r{label}: {done}/{total}");
    PROGRESS_OPEN.store(done != total, std::sync::atomic::Ordering::Relaxed);
    if done == total {
        let _ = writeln!(err);
    }
    let _ = err.flush();
}

/// End a progress line that stopped short of its total (a graph build reports every
/// few thousand vectors, not the last one), so what is said next starts a line.
fn end_progress() {
    if PROGRESS_OPEN.swap(false, std::sync::atomic::Ordering::Relaxed) {
        eprintln!();
    }
}

/// Wait for a vector-graph rebuild that the command's writes started in the background:
/// the process would otherwise end in the middle of it, and the next open start over.
fn finish_graph(engine: &EngineHandle) -> Result<()> {
    let mut said = false;
    loop {
        if !fetch_stats(engine)?.rebuilding {
            if said {
                end_progress();
            }
            return Ok(());
        }
        if !said {
            eprintln!("building the vector graph in the background (searches work meanwhile)...");
            said = true;
        }
        // Progress until the build says it is done, or a moment: the graph is saved after
        // the build's last event, and a save alone ends with no event, so the stats are
        // asked again rather than waiting for an event that may not come.
        let deadline = std::time::Instant::now() + Duration::from_millis(500);
        loop {
            match engine.events().recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
                Ok(event) => match &event {
                    Event::Memory(MemoryEvent::IndexRebuildProgress { done, total }) => progress("graph", *done, *total),
                    Event::Memory(MemoryEvent::IndexRebuilt { .. }) => break,
                    Event::Core(CoreEvent::Error { context, message }) => bail!("{context}: {message}"),
                    Event::Core(CoreEvent::Stopped) => bail!("the engine stopped unexpectedly"),
                    _ => {}
                },
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => break,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => bail!("the engine stopped unexpectedly"),
            }
        }
    }
}

pub fn run(engine: &EngineHandle, action: MemoryAction, json: bool) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match action {
        MemoryAction::Import { file } => import(engine, file, json, &mut out)?,
        MemoryAction::Search(args) => search(engine, args, json, &mut out)?,
        MemoryAction::Eval(args) => eval(engine, args, json, &mut out)?,
        MemoryAction::Reindex { force } => reindex(engine, MemoryCommand::Reindex { force }, json, &mut out)?,
        MemoryAction::Model { name: Some(name) } => reindex(engine, MemoryCommand::UseModel { name }, json, &mut out)?,
        MemoryAction::Model { name: None } => models(engine, json, &mut out)?,
        MemoryAction::Lore { dir } => lore(engine, dir, json, &mut out)?,
        MemoryAction::Stats => stats(engine, json, &mut out)?,
        MemoryAction::Injections { agent, limit } => injections(engine, agent, limit, json, &mut out)?,
        MemoryAction::Pin { id, unpin } => curate(engine, MemoryCommand::Pin { id, pinned: !unpin }, json, &mut out)?,
        MemoryAction::Edit { id, text } => curate(engine, MemoryCommand::Edit { id, text }, json, &mut out)?,
        MemoryAction::Delete { id } => curate(engine, MemoryCommand::Delete { id }, json, &mut out)?,
        MemoryAction::Forget { session } => curate(engine, MemoryCommand::ForgetSession { session }, json, &mut out)?,
        MemoryAction::Export { out: file, scope } => {
            let scope = match scope {
                Some(s) => Some(Scope::parse(&s).ok_or_else(|| anyhow!("unknown scope {s:?} (world, campaign:ID, character:NAME or ID)"))?),
                None => None,
            };
            engine.send(Command::Memory(MemoryCommand::Export { path: Some(file.clone()), scope }))?;
            let (path, memories) = wait(engine, |e| match e {
                MemoryEvent::Exported { path, memories, .. } => Some((path.clone().unwrap_or_else(|| file.display().to_string()), *memories)),
                _ => None,
            })?;
            if json {
                writeln!(out, "{}", serde_json::json!({ "path": path, "memories": memories }))?;
            } else {
                writeln!(out, "wrote {memories} memories to {path}")?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn import(engine: &EngineHandle, file: PathBuf, json: bool, out: &mut impl Write) -> Result<()> {
    engine.send(Command::Memory(MemoryCommand::Import { path: file }))?;
    let summary = wait(engine, |e| match e {
        MemoryEvent::ImportProgress { done, total } => {
            progress("imported", *done, *total);
            None
        }
        MemoryEvent::Imported { summary } => Some(summary.clone()),
        _ => None,
    })?;
    end_progress();
    finish_graph(engine)?;
    if json {
        writeln!(out, "{}", serde_json::to_string(&summary)?)?;
    } else {
        writeln!(
            out,
            "imported {} turns from {} session(s) in {} ms ({:.0}/s)",
            summary.imported, summary.sessions, summary.elapsed_ms, summary.per_second
        )?;
        for key in &summary.unknown_characters {
            writeln!(out, "note: no character of this library is called or has the id {key:?}; its memories are kept under that id")?;
        }
        if summary.repeated_ids > 0 {
            writeln!(out, "note: {} line(s) repeated an id an earlier line gave; the last line of each id is the memory kept", summary.repeated_ids)?;
        }
    }
    Ok(())
}

fn search(engine: &EngineHandle, args: SearchArgs, json: bool, out: &mut impl Write) -> Result<()> {
    let scope = match &args.scope {
        Some(s) => Some(Scope::parse(s).ok_or_else(|| anyhow!("unknown scope {s:?} (world, campaign:ID, character:ID)"))?),
        None => None,
    };
    let request = SearchRequest {
        query: args.query,
        k: args.k,
        mode: args.mode,
        filter: SearchFilter {
            scope,
            speaker: args.speaker,
            witness: args.witness,
            witnessed_only: false,
            session: args.session,
            time_from: args.from,
            time_to: args.to,
            kinds: Vec::new(),
        },
    };
    engine.send(Command::Memory(MemoryCommand::Search { request }))?;
    let hits = wait(engine, |e| match e {
        MemoryEvent::SearchResults { hits, .. } => Some(hits.clone()),
        _ => None,
    })?;
    if json {
        let list: Vec<serde_json::Value> = hits
            .iter()
            .map(|h| {
                serde_json::json!({
                    "id": h.id, "text": h.text, "speaker": h.speaker, "score": h.score,
                    "keyword_score": h.keyword_score, "vector_score": h.vector_score, "rank": h.rank,
                    "kind": h.kind, "session": h.session, "time": h.time, "pinned": h.pinned, "edited": h.edited,
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string(&list)?)?;
    } else {
        for h in &hits {
            let score = |s: Option<f32>| s.map(|s| format!("{s:.3}")).unwrap_or_else(|| "-".into());
            writeln!(
                out,
                "{:>3}. [{:.4}] kw {} vec {}  {}{}{} ({}): {}",
                h.rank,
                h.score,
                score(h.keyword_score),
                score(h.vector_score),
                h.id,
                if h.pinned { " pinned" } else { "" },
                if h.edited { " edited" } else { "" },
                h.speaker.as_deref().unwrap_or("-"),
                h.text
            )?;
        }
    }
    Ok(())
}

fn eval(engine: &EngineHandle, args: EvalArgs, json: bool, out: &mut impl Write) -> Result<()> {
    engine.send(Command::Memory(MemoryCommand::Eval { path: args.file, k: args.k, mode: args.mode }))?;
    let report = wait(engine, |e| match e {
        MemoryEvent::Evaluated { report } => Some(report.clone()),
        _ => None,
    })?;
    if json {
        writeln!(out, "{}", serde_json::to_string(&report)?)?;
    } else {
        writeln!(
            out,
            "{} questions, mode {:?}: recall@{} {:.3}, recall@5 {:.3}, recall@10 {:.3}",
            report.questions, report.mode, report.k, report.recall_at_k, report.recall_at_5, report.recall_at_10
        )?;
        for (name, r) in report.by_type.iter().chain(report.by_split.iter()) {
            writeln!(out, "  {name:<12} {:>3} questions: @5 {:.3}  @10 {:.3}", r.questions, r.recall_at_5, r.recall_at_10)?;
        }
    }
    Ok(())
}

/// `command` is a reindex or a change of model, which ends in one.
fn reindex(engine: &EngineHandle, command: MemoryCommand, json: bool, out: &mut impl Write) -> Result<()> {
    let chosen = match &command {
        MemoryCommand::UseModel { name } => crate::memory::find_model(name).map(|m| m.name),
        _ => None,
    };
    engine.send(Command::Memory(command))?;
    let embedded = wait(engine, |e| match e {
        MemoryEvent::ReindexProgress { done, total } => {
            progress("embedded", *done, *total);
            None
        }
        MemoryEvent::IndexRebuilding { vectors } => {
            end_progress();
            eprintln!("building the vector graph over {vectors} vectors...");
            None
        }
        MemoryEvent::IndexRebuildProgress { done, total } => {
            progress("graph", *done, *total);
            None
        }
        MemoryEvent::Reindexed { embedded } => Some(*embedded),
        _ => None,
    })?;
    end_progress();
    if json {
        writeln!(out, "{}", serde_json::json!({ "embedded": embedded, "model": chosen }))?;
    } else {
        if let Some(model) = chosen {
            writeln!(out, "the library now uses {model} (saved in the config)")?;
        }
        // Below `[memory.graph] min_vectors` there is no graph: an exact scan answers.
        let stats = fetch_stats(engine)?;
        if stats.ann_indexed > 0 {
            writeln!(out, "embedded {embedded} memories; vector graph rebuilt over {} vectors", stats.ann_indexed)?;
        } else {
            writeln!(out, "embedded {embedded} memories; {} vectors searched exactly (no graph below [memory.graph] min_vectors)", stats.ann_pending)?;
        }
    }
    Ok(())
}

fn fetch_stats(engine: &EngineHandle) -> Result<crate::memory::MemoryStats> {
    engine.send(Command::Memory(MemoryCommand::Stats))?;
    wait(engine, |e| match e {
        MemoryEvent::Stats { stats } => Some(stats.clone()),
        _ => None,
    })
}

fn models(engine: &EngineHandle, json: bool, out: &mut impl Write) -> Result<()> {
    let stats = fetch_stats(engine)?;
    // The stats name the model as `<folder>/<file>`.
    let current = stats.model.split('/').next().unwrap_or_default().to_string();
    if json {
        let list: Vec<_> = crate::memory::MODELS
            .iter()
            .map(|m| serde_json::json!({ "name": m.name, "dimension": m.dimension, "about": m.about, "in_use": m.name == current }))
            .collect();
        writeln!(out, "{}", serde_json::json!({ "in_use": stats.model, "models": list }))?;
    } else {
        for m in crate::memory::MODELS.iter() {
            let mark = if m.name == current { "*" } else { " " };
            writeln!(out, "{mark} {:<20} {:>4} dimensions  {}", m.name, m.dimension, m.about)?;
        }
        if !crate::memory::MODELS.iter().any(|m| m.name == current) {
            writeln!(out, "* {} (set in the config)", stats.model)?;
        }
    }
    Ok(())
}

fn lore(engine: &EngineHandle, dir: Option<PathBuf>, json: bool, out: &mut impl Write) -> Result<()> {
    engine.send(Command::Memory(MemoryCommand::IndexLore { dir }))?;
    let report = wait(engine, |e| match e {
        MemoryEvent::LoreIndexed { report } => Some(report.clone()),
        _ => None,
    })?;
    if json {
        writeln!(out, "{}", serde_json::to_string(&report)?)?;
    } else {
        writeln!(
            out,
            "{} lore files: {} indexed ({} chunks), {} unchanged, {} removed",
            report.files, report.indexed, report.chunks, report.unchanged, report.removed
        )?;
    }
    Ok(())
}

fn injections(engine: &EngineHandle, agent: Option<String>, limit: u32, json: bool, out: &mut impl Write) -> Result<()> {
    let injections = match agent {
        Some(agent) => {
            engine.send(Command::Memory(MemoryCommand::InjectionHistory { agent, limit }))?;
            wait(engine, |e| match e {
                MemoryEvent::InjectionHistory { injections, .. } => Some(injections.clone()),
                _ => None,
            })?
        }
        None => {
            engine.send(Command::Memory(MemoryCommand::Injections))?;
            wait(engine, |e| match e {
                MemoryEvent::Injections { injections } => Some(injections.clone()),
                _ => None,
            })?
        }
    };
    if json {
        writeln!(out, "{}", serde_json::to_string(&injections)?)?;
        return Ok(());
    }
    for i in &injections {
        writeln!(out, "{}  {}  {} memories for {:?}", i.at, i.agent, i.hits.len(), i.query.chars().take(80).collect::<String>())?;
        for h in &i.hits {
            writeln!(out, "    {} ({:.3}): {}", h.id, h.score, h.text.chars().take(100).collect::<String>())?;
        }
    }
    Ok(())
}

fn stats(engine: &EngineHandle, json: bool, out: &mut impl Write) -> Result<()> {
    let stats = fetch_stats(engine)?;
    if json {
        writeln!(out, "{}", serde_json::to_string(&stats)?)?;
    } else {
        writeln!(
            out,
            "{} memories ({} turns, {} summaries, {} lore chunks) in {} sessions\n\
             vectors: {} of model {} ({} missing); graph: {} indexed, {} pending{}\n\
             unsummarised turns: {}",
            stats.memories,
            stats.turns,
            stats.summaries,
            stats.lore_chunks,
            stats.sessions,
            stats.with_vectors,
            stats.model,
            stats.without_vectors,
            stats.ann_indexed,
            stats.ann_pending,
            if stats.rebuilding { " (rebuilding)" } else { "" },
            stats.unsummarised_turns
        )?;
    }
    Ok(())
}
