//! One-to-one chat with a user's own card: everything a turn does between the message
//! and the request to the model, except memory retrieval and the message's embedding
//! (both measured by `benches/companion.rs`). Issue goal: p50 under 10 ms with a
//! 200-entry card book, macros, and a 10,000-message chat.
//!
//!     cargo bench --bench card_chat
//!
//! The card is imported as a user's would be (V2 JSON with `character_book`); its
//! description, greeting, example dialogue, system prompt, post-history instructions
//! and every book entry use macros. The chat holds 5,000 exchanges (10,000 messages).
//! Measured per turn: chat state, persona and the history window from the library, the
//! character's lorebooks loaded and activated on the conversation, and the packet
//! assembled (macros, budgets, templates). The library is built once into cargo's
//! target `tmp/card-chat-bench/` and reused.

mod support;

use lorekeeper::companion::packet::{self, PacketInput};
use lorekeeper::companion::records::{self, ChatTurn};
use lorekeeper::companion::CompanionConfig;
use lorekeeper::memory::detect::Proximity;
use lorekeeper::prompting::PromptTemplates;
use lorekeeper::store::Store;
use serde_json::json;
use std::path::Path;
use std::time::Instant;
use support::{corpus, percentiles};

const EXCHANGES: u32 = 5_000;
const ENTRIES: usize = 200;

fn card(corpus: &[String]) -> serde_json::Value {
    let entries: Vec<serde_json::Value> = (0..ENTRIES)
        .map(|i| {
            let words: Vec<&str> = corpus[i * 13 % corpus.len()].split_whitespace().filter(|w| w.len() > 5).take(2).collect();
            let key = words.first().map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase()).unwrap_or_else(|| format!("key{i}"));
            json!({
                "keys": [key, format!("topic{i}")],
                "secondary_keys": if i % 5 == 0 { json!([words.get(1).copied().unwrap_or("river")]) } else { json!([]) },
                "selective": i % 5 == 0,
                "constant": i % 50 == 0,
                "content": format!("{{{{char}}}} knows this about {}: {} {{{{user}}}} may ask.", key, corpus[(i * 7 + 3) % corpus.len()]),
                "enabled": true,
                "insertion_order": 100 + i,
                "id": i,
                "comment": format!("Entry {i}"),
                "extensions": {}
            })
        })
        .collect();
    json!({ "spec": "chara_card_v2", "spec_version": "2.0", "data": {
        "name": "Maren Vosk",
        "description": "{{char}} keeps the lamp of a river lock and distrusts {{user}} at first. {{random:rain,fog,frost}} is her weather.",
        "personality": "terse, patient, dry",
        "scenario": "{{user}} arrives at {{char}}'s lock after dark.",
        "first_mes": "*{{char}} looks up from the capstan.* Lock's closed, {{user}}.",
        "alternate_greetings": ["Who goes there, {{user}}?"],
        "mes_example": "<START>\n{{user}}: Busy?\n{{char}}: Always. {{pick:Always.,Never.}}",
        "system_prompt": "Write as {{char}} in short sentences. {{original}}",
        "post_history_instructions": "Keep {{char}}'s reply under eighty words.",
        "creator_notes": "", "tags": ["river"], "creator": "", "character_version": "1", "extensions": {},
        "character_book": { "name": "River lock", "scan_depth": 4, "entries": entries }
    } })
}

fn main() {
    let corpus = corpus();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("card-chat-bench");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let path = dir.join("library.sqlite");
    let store = Store::open(&path).expect("store");
    let character = match store.with(|c| records::resolve_character(c, "Maren Vosk")) {
        Ok(c) => c,
        Err(_) => {
            let started = Instant::now();
            let bytes = card(&corpus).to_string().into_bytes();
            lorekeeper::interop::library::import_bytes(&store, &bytes, "maren").expect("import");
            let character = store.with(|c| records::resolve_character(c, "Maren Vosk")).expect("character");
            store
                .transaction(|tx| {
                    for seq in 1..=EXCHANGES {
                        let at = format!("2026-05-{:02}T{:02}:{:02}:00Z", 1 + seq / 200, (seq / 10) % 24, seq % 60);
                        let reply = corpus[(seq as usize * 3 + 1) % corpus.len()].clone();
                        records::insert_turn(
                            tx,
                            &ChatTurn {
                                id: format!("t{seq}"),
                                character_id: character.id.clone(),
                                seq,
                                session: format!("s{}", seq / 20),
                                user_text: corpus[(seq as usize * 3) % corpus.len()].clone(),
                                reply: reply.clone(),
                                at,
                                user_memory_id: None,
                                reply_memory_id: None,
                                proximity: Proximity::Remote,
                                packet: Default::default(),
                                hits: Vec::new(),
                                attempts: 1,
                                prompt_tokens: 0,
                                completion_tokens: 0,
                                from_cache: false,
                                elapsed_ms: 0,
                                swipes: vec![reply],
                                swipe: 0,
                                file: None,
                                user_name: None,
                            },
                        )?;
                    }
                    Ok(())
                })
                .expect("turns");
            println!("card-chat-bench: built a {ENTRIES}-entry card and {EXCHANGES} exchanges in {:.1} s", started.elapsed().as_secs_f64());
            character
        }
    };
    let config = CompanionConfig::default();
    let templates = PromptTemplates::shipped().expect("templates");
    let mut rng = fastrand::Rng::with_seed(11);
    let messages: Vec<String> = (0..300).map(|_| corpus[rng.usize(..corpus.len())].clone()).collect();

    let turn = |text: &str| {
        let (state, user, history, books) = store
            .with(|c| {
                let state = records::load_state(c, &character.id)?;
                let user = records::chat_user(c, &state, &config.user_name)?;
                let history = records::recent_turns(c, &character.id, config.history_turns, false)?;
                let books = lorekeeper::companion::lore::books(c, &character.id)?;
                Ok((state, user, history, books))
            })
            .expect("state");
        let number = lorekeeper::companion::lore::message_number(history.last().map_or(1, |t| t.seq + 1));
        let (opening, chosen) = records::chat_greetings(&state, &character.card);
        let turn_text = lorekeeper::companion::lore::TurnText {
            user: &user.name,
            history: &history,
            greeting: opening.get(chosen as usize).map(String::as_str),
            input: text,
            persona: Some(user.description.as_str()),
            message_number: number,
            generation: lorekeeper::companion::lore::Generation::Normal,
            variables: None,
        };
        let mut timers = lorekeeper::lorebook::activation::ActivationState::default();
        let fired = lorekeeper::companion::lore::activate_for_turn(&books, &character, &turn_text, &mut timers, 4096, None, None);
        let packet = packet::assemble(
            &templates,
            &config,
            PacketInput {
                character: &character,
                user_name: &user.name,
                persona: &user.description,
                greeting: opening.get(chosen as usize).map(String::as_str),
                input: text,
                now: chrono::Utc::now(),
                last_chat_at: state.last_chat_at.as_deref(),
                distance: None,
                history: &history,
                lore: &fired.hits,
                lore_places: &fired.places,
                memories: &[],
                max_context_tokens: 8192,
                reply_tokens: 512,
                retry_note: None,
                notes: fired.notes,
                variables: None,
                author_note: None,
                user_messages: 1,
            },
        )
        .expect("packet");
        (packet, fired.hits.len())
    };

    // Warm the page cache and the prepared statements.
    for m in messages.iter().take(20) {
        turn(m);
    }
    let mut times = Vec::new();
    let mut fired = 0;
    let mut tokens = 0;
    for m in &messages {
        let started = Instant::now();
        let (packet, hits) = turn(m);
        times.push(started.elapsed());
        fired += hits;
        tokens += packet.tokens as usize;
    }
    let (p50, p99) = percentiles(times);
    println!(
        "card-chat-bench: turn preparation with a {ENTRIES}-entry card book and {} messages: p50 {p50:.2} ms, p99 {p99:.2} ms \
         ({:.1} entries fired and {} packet tokens per turn on average, {} turns)",
        EXCHANGES * 2,
        fired as f64 / messages.len() as f64,
        tokens / messages.len(),
        messages.len()
    );
}
