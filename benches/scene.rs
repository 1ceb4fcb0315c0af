//! How long one agent call's context envelope takes in a big campaign: 100,000 stored
//! messages in the scene and 5,000 lore entries linked to the campaign.
//!
//! `cargo bench --bench scene` (add `-- --quick` for a short run). Three numbers:
//! - `scene_context_load`: the store reads a round makes once (view, notes, the newest
//!   `history_window` messages, the campaign's lore: a revision check that finds the
//!   compiled key index in the process cache, as every round after the first does);
//! - `envelope_assemble`: one call's candidates, World Info activation over 5,000
//!   entries with the cached index, budgets and ledger, and the rendered prompt (what
//!   each agent call repeats);
//! - `envelope_full_call`: both together, the cost of a call with nothing cached.
//! Criterion's reported median is the p50.

use criterion::{Criterion, criterion_group, criterion_main};
use lorekeeper::lorebook::{LoreEntry, Lorebook};
use lorekeeper::prompting::{BudgetPlan, PromptTemplates};
use lorekeeper::scene::envelope::{self, AgentKind, EnvelopeInput};
use lorekeeper::lorebook::activation::ActivationState;
use lorekeeper::scene::{SceneConfig, demo, lore, records};
use std::sync::Arc;
use lorekeeper::store::{Store, new_id, now_rfc3339};
use rusqlite::params;
use std::hint::black_box;

const MESSAGES: u32 = 100_000;
const LORE_ENTRIES: usize = 5_000;

/// A library with the demo scene grown to `MESSAGES` messages and a lorebook of
/// `LORE_ENTRIES` entries linked to its campaign. Some keys occur in the recent
/// messages, so lore matching does real work and some entries fire.
fn big_library(dir: &std::path::Path) -> (Store, String) {
    let store = Store::open(dir.join("bench.sqlite")).expect("library opens");
    let scene = demo::ensure(&store).expect("demo added").expect("new library");
    let speakers = ["Wren Talloway", "Ossian Vale", "Juno"];
    store
        .transaction(|tx| {
            let now = now_rfc3339();
            let mut insert = tx.prepare(
                "INSERT INTO scene_messages(id, scene_id, number, round, kind, character_id, speaker, content, created_at)
                 VALUES (?1, ?2, ?3, ?4, 'narrator', NULL, ?5, ?6, ?7)",
            )?;
            for number in 1..=MESSAGES {
                let place = number as usize % LORE_ENTRIES;
                let content = format!(
                    "Message {number}: the fog thickens over the marsh while the lamp turns; someone mentions place{place} \
                     and the tide tables, and the talk drifts to the harbour council and the night's watch."
                );
                insert.execute(params![new_id(), scene, number, number / 4 + 1, speakers[number as usize % 3], content, now])?;
            }
            tx.execute("UPDATE scenes SET rounds = ?2 WHERE id = ?1", params![scene, MESSAGES / 4 + 1])?;
            let campaign: String = tx.query_row(
                "SELECT a.campaign_id FROM scenes s JOIN arcs a ON a.id = s.arc_id WHERE s.id = ?1",
                [&scene],
                |r| r.get(0),
            )?;
            let entries = (0..LORE_ENTRIES)
                .map(|i| LoreEntry {
                    keys: vec![format!("place{i}"), format!("landmark {i}")],
                    comment: format!("Place {i}"),
                    content: format!("Place {i} lies on the Saltmarsh coast; its people keep old customs about the fog. ").repeat(3),
                    enabled: true,
                    constant: i % 1000 == 0,
                    insertion_order: (i % 300) as i64,
                    ..Default::default()
                })
                .collect();
            let book = Lorebook { name: Some("Bench lore".into()), entries, ..Default::default() };
            let book_id = lorekeeper::interop::library::insert_lorebook(tx, "Bench lore", None, &book, None)
                .map_err(|e| lorekeeper::store::StoreError::Corrupt(e.to_string()))?;
            tx.execute("INSERT INTO campaign_lorebooks(campaign_id, lorebook_id) VALUES (?1, ?2)", params![campaign, book_id])?;
            Ok(())
        })
        .expect("synthetic campaign written");
    (store, scene)
}

struct Loaded {
    view: lorekeeper::scene::model::SceneView,
    notes: records::SceneNotes,
    history: Vec<lorekeeper::scene::model::SceneMessage>,
    lore: Arc<lore::PreparedLore>,
    lore_state: ActivationState,
}

fn load(conn: &rusqlite::Connection, scene: &str, config: &SceneConfig) -> Loaded {
    let view = records::load_view(conn, scene).expect("view");
    let notes = records::load_notes(conn, scene).expect("notes");
    let history = records::recent_messages(conn, scene, config.history_window).expect("history");
    let lore = lore::campaign_lore(conn, &view.campaign_id).expect("lore");
    let lore_state = lore::load_state(conn, scene).expect("lore timers");
    Loaded { view, notes, history, lore, lore_state }
}

fn assemble(loaded: &Loaded, config: &SceneConfig, plan: &BudgetPlan, templates: &PromptTemplates) -> usize {
    let member = loaded.view.active().next();
    let envelope = envelope::assemble(
        plan,
        8192,
        &EnvelopeInput {
            agent: AgentKind::Character,
            view: &loaded.view,
            notes: &loaded.notes,
            history: &loaded.history,
            lore: Some(&loaded.lore),
            memories: &[],
            character: member,
            director_guidance: vec!["Answer the knock.".into()],
            lore_scan_depth: config.lore_scan_depth,
            message_number: loaded.history.last().map_or(1, |m| u64::from(m.number) + 1),
            seed: lore::seed_for(&loaded.view.id),
            cancel: None,
            bank: None,
        },
        // Each call starts from the stored timers, as the first call of a round does.
        &mut loaded.lore_state.clone(),
    );
    let turn = envelope::character_turn(member.map(|m| m.name.as_str()).unwrap_or("someone"));
    let prompt = envelope::render(templates, AgentKind::Character, &envelope, member, &turn).expect("prompt renders");
    prompt.system.len() + envelope.ledger.used() as usize
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, scene) = big_library(dir.path());
    let config = SceneConfig::default();
    let templates = PromptTemplates::shipped().expect("shipped templates");
    let conn = store.reader().expect("reader");
    let loaded = load(&conn, &scene, &config);
    assert_eq!(loaded.lore.entries.len(), LORE_ENTRIES + 4, "bench lore plus the demo's");
    let builds = lore::builds();

    let mut group = c.benchmark_group("scene_100k_messages_5000_lore");
    group.sample_size(30);
    group.bench_function("scene_context_load", |b| b.iter(|| black_box(load(&conn, &scene, &config)).lore.entries.len()));
    group.bench_function("envelope_assemble", |b| b.iter(|| assemble(black_box(&loaded), &config, &config.budgets, &templates)));
    group.bench_function("envelope_full_call", |b| {
        b.iter(|| {
            let loaded = load(&conn, &scene, &config);
            assemble(&loaded, &config, &config.budgets, &templates)
        })
    });
    group.finish();
    assert_eq!(lore::builds(), builds, "the key index was compiled once, not per call");
}

criterion_group!(benches, bench);
criterion_main!(benches);
