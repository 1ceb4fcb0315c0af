//! The packet: the XML-tagged prompt of one chat turn (the seed's format), fitted into
//! token budgets per block and kept exactly as it is sent.
//!
//! Assembly is pure: everything it needs (retrieved hits, the proximity change, the
//! clock) is decided by the caller, so the same inputs always give the same packet —
//! which is also what lets the response cache recognise a repeated request.

pub use crate::config::PacketBudgets;
use crate::config::CompanionConfig;
pub use super::model::{Packet, PacketBlock};
use super::model::{AuthorNote, CharacterInfo, ChatTurn, NotePosition, NoteRole};
use crate::llm::{ChatMessage, tokens};
use crate::memory::RetrievalHit;
use crate::memory::detect::Proximity;
use crate::prompting::budget::{ESSENTIAL, fit, share_out};
use crate::prompting::macros::{MacroContext, expand};
use crate::prompting::{BudgetItem, DropPolicy, DroppedItem, PromptTemplates, TemplateError};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// Everything one packet is built from.
pub struct PacketInput<'a> {
    pub character: &'a CharacterInfo,
    pub user_name: &'a str,
    /// The user's persona description (empty: no persona block).
    pub persona: &'a str,
    /// The chosen greeting, as written on the card (`None`: the card has none).
    pub greeting: Option<&'a str>,
    pub input: &'a str,
    pub now: DateTime<Utc>,
    pub last_chat_at: Option<&'a str>,
    /// `Some(state)` when proximity changed with this message: the distance block.
    pub distance: Option<Proximity>,
    pub history: &'a [ChatTurn],
    pub lore: &'a [RetrievalHit],
    /// Where each World Info hit goes (by id): before the character, after it (the
    /// default, and for every position a chat has no place for), or among the chat's
    /// messages at its depth.
    pub lore_places: &'a std::collections::BTreeMap<String, crate::lorebook::LorePlace>,
    /// Memories for the memory bank; empty when memory is not relevant to this turn.
    pub memories: &'a [RetrievalHit],
    pub max_context_tokens: u32,
    /// The reply's cap, kept off the top: the blocks' percentages apply to the rest, so
    /// the packet plus the reply fit the context.
    pub reply_tokens: u32,
    /// Said in the trigger: why a previous draw was discarded, or that the last reply
    /// is being continued.
    pub retry_note: Option<&'a str>,
    pub notes: Vec<String>,
    /// The chat variables the card's and lore's macros read and change (`None`: each
    /// text has its own).
    pub variables: Option<&'a std::cell::RefCell<crate::prompting::macros::Variables>>,
    /// The chat's Author's Note (`None`: none written; World Info placed with the note
    /// then goes where SillyTavern's default note would be).
    pub author_note: Option<&'a AuthorNote>,
    /// Which user message this is (the new one counted): the note's `every` counts them.
    pub user_messages: u32,
}

#[derive(Serialize)]
struct Context<'a> {
    name: &'a str,
    user: &'a str,
    directive: String,
    examples: Vec<String>,
    post_history: String,
    persona: Vec<String>,
    user_persona: String,
    lore_before: Vec<String>,
    lore: Vec<String>,
    lore_examples_top: Vec<String>,
    lore_examples_bottom: Vec<String>,
    now: String,
    since: String,
    distance: Option<String>,
    memories: Vec<String>,
    history: Vec<String>,
    input: String,
    retry_note: Option<&'a str>,
    /// What goes in at depth 0: after the user's new message, the chat's last.
    after_input: Vec<String>,
    /// The Author's Note (with the World Info placed around it) when it goes before or
    /// after the character rather than into the chat.
    note_before: Option<String>,
    note_after: Option<String>,
}


fn budget(percent: f64, max: u32) -> u32 {
    if !percent.is_finite() || percent <= 0.0 {
        return 0;
    }
    (f64::from(max) * percent / 100.0 + 1e-9).floor() as u32
}

fn item(id: String, text: String, value: f64) -> BudgetItem {
    BudgetItem { tokens: tokens::estimate(&text), id, text, value }
}

/// Keep what fits; the kept texts in their order and the dropped items.
fn fitted(mut items: Vec<BudgetItem>, allocated: u32, policy: DropPolicy) -> (Vec<String>, Vec<DroppedItem>) {
    let (keep, dropped) = fit(&mut items, allocated, policy);
    let kept = items.into_iter().zip(keep).filter(|(_, k)| *k).map(|(i, _)| i.text).collect();
    (kept, dropped)
}

/// A card's example dialogue cut into its `<START>` blocks, each starting with its
/// marker (text before the first marker is a block of its own).
fn example_blocks(text: &str) -> Vec<String> {
    let mut blocks: Vec<String> = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if line.trim().eq_ignore_ascii_case("<START>") && !current.trim().is_empty() {
            blocks.push(std::mem::take(&mut current).trim_end().to_string());
        }
        if !current.is_empty() {
            current.push('\n');
        }
        current.push_str(line);
    }
    if !current.trim().is_empty() {
        blocks.push(current.trim_end().to_string());
    }
    blocks
}

/// The time since the last chat, in words ("3 hours", "2 days").
pub fn since_in_words(last: Option<&str>, now: DateTime<Utc>) -> String {
    let Some(last) = last.and_then(|t| DateTime::parse_from_rfc3339(t).ok()) else {
        return "this is your first conversation".into();
    };
    let seconds = (now - last.with_timezone(&Utc)).num_seconds().max(0);
    let plural = |n: i64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    match seconds {
        s if s < 60 => "moments ago".into(),
        s if s < 3600 => plural(s / 60, "minute"),
        s if s < 86_400 => {
            let hours = s as f64 / 3600.0;
            if hours < 10.0 { format!("{hours:.1} hours") } else { plural(s / 3600, "hour") }
        }
        s if s < 14 * 86_400 => plural(s / 86_400, "day"),
        s if s < 60 * 86_400 => plural(s / (7 * 86_400), "week"),
        s if s < 730 * 86_400 => plural(s / (30 * 86_400), "month"),
        s => plural(s / (365 * 86_400), "year"),
    }
}

fn distance_text(state: Proximity, name: &str, user: &str) -> String {
    match state {
        Proximity::Physical => format!("{user} is physically here with {name}, in the same place."),
        Proximity::Remote => format!("{user} is not with {name}: they are talking from a distance (messages or a call)."),
    }
}

/// The memories `packet` actually carried of those retrieved: none when it has no
/// memory bank, else every hit its budget did not drop.
pub fn carried(packet: &Packet, hits: &[RetrievalHit]) -> Vec<RetrievalHit> {
    let Some(bank) = packet.block("memory_bank") else { return Vec::new() };
    hits.iter().filter(|h| !bank.dropped.iter().any(|d| d.id == h.id)).cloned().collect()
}

/// The XML blocks the templates produce, in order.
pub(crate) const TAGS: [&str; 15] = [
    "system_directive",
    "authors_note",
    "lore_before",
    "lore",
    "user_persona",
    "lore_examples_top",
    "example_dialogue",
    "lore_examples_bottom",
    "temporal_data",
    "distance_context",
    "memory_bank",
    "chat_history",
    "user_input",
    "after_input",
    "trigger",
];

/// What `{{outlet::Name}}` puts in before World Info has fired: nothing.
static NO_OUTLETS: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();

/// Build the packet for one turn.
pub fn assemble(templates: &PromptTemplates, config: &CompanionConfig, input: PacketInput<'_>) -> Result<Packet, TemplateError> {
    // The blocks share what the reply leaves; the packet still reports the whole context.
    let max = input.max_context_tokens.saturating_sub(input.reply_tokens);
    let b = &config.budgets;
    let name = input.character.name.as_str();
    let user = input.user_name;

    // The card's own text speaks of `{{char}}` and `{{user}}`: resolved before it is sent.
    let field = |key: &str| input.character.sheet.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).unwrap_or("");
    let macros = MacroContext {
        char: name,
        user,
        persona: input.persona,
        description: field("description"),
        personality: field("personality"),
        scenario: field("scenario"),
        mes_examples: &input.character.card.mes_example,
        char_prompt: &input.character.card.system_prompt,
        char_instruction: &input.character.card.post_history_instructions,
        last_message: input.input,
        input: input.input,
        last_user_message: input.input,
        last_char_message: input.history.last().map(|t| t.reply.as_str()).or(input.greeting).unwrap_or(""),
        // SillyTavern's ids: the greeting is 0, exchange n's messages are 2n-1 and 2n, so
        // the new user message (exchange `seq`) is 2·seq − 1.
        last_message_id: Some(2 * u64::from(input.history.last().map_or(0, |t| t.seq)) + 1),
        first_included_message_id: Some(match input.history.first() {
            Some(t) if t.seq > 1 => 2 * u64::from(t.seq) - 1,
            _ => 0,
        }),
        max_prompt: Some(input.max_context_tokens),
        stable_seed: &input.character.id,
        random_seed: Some(input.now.timestamp() as u64),
        now: Some(input.now.with_timezone(&chrono::Local)),
        // `{{idle_duration}}`: since the user last wrote, as the temporal block says.
        idle: input
            .last_chat_at
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .and_then(|last| (input.now - last.with_timezone(&Utc)).to_std().ok()),
        variables: input.variables,
        // Until World Info has fired (the greeting, the lore itself) every outlet is empty.
        outlets: Some(&NO_OUTLETS),
        ..Default::default()
    };
    let mut notes = input.notes;
    // The card's greeting opens the conversation: it is the oldest message while the
    // history reaches back to the first exchange (and the first to go when it is cut).
    // Its macros are filled first, as the chat met it first (see below).
    let from_the_start = input.history.first().is_none_or(|t| t.seq <= 1);
    let greeting = input.greeting.map(str::trim).filter(|g| from_the_start && !g.is_empty()).map(|g| {
        let out = expand(g, &MacroContext { random_seed: Some(crate::prompting::greeting_seed(&input.character.id)), ..macros.clone() });
        notes.extend(out.notes);
        out.text
    });
    let mut resolve = |text: &str| {
        let out = expand(text, &macros);
        notes.extend(out.notes);
        out.text
    };
    // Macros are filled in the order the chat met them: the greeting (the chat's first
    // message, which SillyTavern fills when it is shown), then World Info (built before
    // the prompt), then the card's fields as SillyTavern reads them (description,
    // personality, scenario, examples, the system prompt) and last its post-history
    // instructions; a `{{setvar}}` in one is read by every later one.
    let lore_texts: Vec<String> = input.lore.iter().map(|h| resolve(&h.text)).collect();
    // Outlet entries go nowhere of their own: their text is what `{{outlet::Name}}` puts
    // in the card, the note or the persona filled after them (SillyTavern fills World Info
    // first, so an outlet in lore itself is empty).
    let outlet_of = |h: &RetrievalHit| input.lore_places.get(&h.id).filter(|p| p.is_outlet());
    let outlets = crate::prompting::macros::collect_outlets(
        input.lore.iter().zip(&lore_texts).filter_map(|(h, text)| outlet_of(h).map(|p| (p.outlet.as_str(), text.as_str()))),
    );
    let macros = MacroContext { outlets: Some(&outlets), ..macros.clone() };
    let mut resolve = |text: &str| {
        let out = expand(text, &macros);
        notes.extend(out.notes);
        out.text
    };
    let card = &input.character.card;
    let mut persona_items = vec![item("name".into(), format!("Name: {name}"), f64::MAX)];
    let fields = input.character.sheet.len();
    for (i, (key, value)) in input.character.sheet.iter().enumerate() {
        // Earlier fields (description, personality) are worth more than later ones.
        // The card is the character's own: a field too large for what is left is cut, not dropped.
        let worth = ESSENTIAL + (fields - i) as f64;
        persona_items.push(item(key.clone(), format!("{}: {}", capitalise(key), resolve(value.trim())), worth));
    }

    let mut lore_items: Vec<BudgetItem> = input
        .lore
        .iter()
        .zip(lore_texts)
        .filter(|(h, _)| outlet_of(h).is_none())
        .map(|(h, text)| item(h.id.clone(), one_line(&text), f64::from(h.score)))
        .collect();

    let memory_items: Vec<BudgetItem> = input
        .memories
        .iter()
        .map(|h| {
            let when = h.time.as_deref().and_then(|t| t.get(..10)).map(|d| format!("({d}) ")).unwrap_or_default();
            // Who said it: "my sister moved to Porto" is the user's sister or the
            // character's, and the model cannot tell which from the words alone.
            let who = h.speaker.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(|s| format!("{s}: ")).unwrap_or_default();
            item(h.id.clone(), format!("{when}{who}{}", one_line(&h.text)), f64::from(h.score))
        })
        .collect();
    let examples_text = resolve(card.mes_example.trim());
    // The card's own system prompt replaces ours; `{{original}}` in it is ours.
    let default_directive = format!(
        "Roleplay as {name} in a one-to-one conversation with {user}. Stay in character,\nspeak only as {name}, and never write {user}'s words or actions."
    );
    let (directive, directive_notes) = if card.system_prompt.trim().is_empty() {
        (default_directive, Vec::new())
    } else {
        let out = expand(card.system_prompt.trim(), &MacroContext { original: &default_directive, ..macros.clone() });
        (out.text, out.notes)
    };
    let post_history = resolve(card.post_history_instructions.trim());
    // Each `<START>` block is one item, the earlier worth more: a budget too small for
    // them all keeps the first ones that fit, as SillyTavern pushes examples out from
    // the end, instead of losing the card's whole voice.
    let example_blocks = example_blocks(&examples_text);
    let blocks = example_blocks.len();
    let example_items: Vec<BudgetItem> =
        example_blocks.into_iter().enumerate().map(|(i, b)| item(format!("example dialogue {}", i + 1), b, (blocks - i) as f64)).collect();
    // Each item is one exchange (or the greeting), cut or kept whole; its messages one line each.
    let history_messages: Vec<(String, Vec<String>)> = greeting
        .map(|g| ("greeting".to_string(), vec![format!("[{name}]: {g}")]))
        .into_iter()
        .chain(input.history.iter().map(|t| {
            // An imported chat's messages that came in a row go around their exchange, as said.
            let said = |m: &super::model::CarriedMessage| format!("[{}]: {}", m.speaker(t, user, name), m.text);
            let mut lines: Vec<String> = t.carried_before().iter().map(said).collect();
            lines.push(format!("[{}]: {}", t.user_or(user), t.user_text.trim()));
            lines.push(format!("[{name}]: {}", t.reply.trim()));
            lines.extend(t.carried().iter().map(said));
            (t.id.clone(), lines)
        }))
        .collect();
    let mut history_items: Vec<BudgetItem> =
        history_messages.iter().map(|(id, lines)| item(id.clone(), lines.join("\n"), 0.0)).collect();

    // Each block's share of what the reply leaves; a block needing less than its share
    // (a short card, no lore, a new chat) gives the rest to those needing more, so what
    // the context holds is used. The user's words are never cut: an over-long message is
    // sent whole and the block shows it over budget.
    let need = |items: &[BudgetItem]| items.iter().map(|i| i.tokens).fold(0u32, u32::saturating_add);
    let input_tokens = tokens::estimate(input.input.trim());
    let shares = [b.persona, b.lore, b.memory, b.examples, b.history, b.input].map(|p| budget(p, max));
    // Entries marked `ignore_budget` are sent whatever the lore budget says, and are not
    // counted against it (SillyTavern always sends them).
    let unbudgeted: Vec<bool> = lore_items.iter().map(|i| input.lore_places.get(&i.id).is_some_and(|p| p.ignore_budget)).collect();
    let budgeted_need = lore_items.iter().zip(&unbudgeted).filter(|(_, u)| !**u).map(|(i, _)| i.tokens).fold(0u32, u32::saturating_add);
    let needs = [need(&persona_items), budgeted_need, need(&memory_items), need(&example_items), need(&history_items), input_tokens];
    let [persona_budget, lore_budget, memory_budget, examples_budget, history_budget, input_budget] =
        <[u32; 6]>::try_from(share_out(&shares, &needs)).unwrap_or(shares);
    let (persona, persona_dropped) = fitted(persona_items, persona_budget, DropPolicy::MostValuableFirst);
    let (memories, memory_dropped) = fitted(memory_items, memory_budget, DropPolicy::MostValuableFirst);
    let (examples, examples_dropped) = fitted(example_items, examples_budget, DropPolicy::MostValuableFirst);
    let examples_note = (!examples_dropped.is_empty()).then(|| {
        let tokens = examples_dropped.iter().map(|d| d.tokens).fold(0u32, u32::saturating_add);
        format!(
            "example dialogue left out: {} of {blocks} example{} ({tokens} tokens), its budget is {examples_budget}",
            examples_dropped.len(),
            if blocks == 1 { "" } else { "s" }
        )
    });
    let mut budgeted: Vec<BudgetItem> = lore_items.iter().zip(&unbudgeted).filter(|(_, u)| !**u).map(|(i, _)| i.clone()).collect();
    let (fitted_keep, lore_dropped) = fit(&mut budgeted, lore_budget, DropPolicy::MostValuableFirst);
    let (mut fitted_keep, mut budgeted) = (fitted_keep.into_iter(), budgeted.into_iter());
    let keep: Vec<bool> = unbudgeted
        .iter()
        .zip(lore_items.iter_mut())
        .map(|(unbudgeted, item)| {
            if *unbudgeted {
                return true;
            }
            if let Some(fitted) = budgeted.next() {
                *item = fitted;
            }
            fitted_keep.next().unwrap_or(false)
        })
        .collect();
    // The notes said which lore fired: say which of it the lore budget then left out.
    let lore_note = (!lore_dropped.is_empty()).then(|| {
        let tokens = lore_dropped.iter().map(|d| d.tokens).fold(0u32, u32::saturating_add);
        let names: Vec<&str> = lore_dropped.iter().map(|d| d.id.strip_prefix("lore ").unwrap_or(&d.id)).collect();
        format!("lore left out by the packet's lore budget ({lore_budget} tokens): {} ({tokens} tokens)", names.join("; "))
    });
    // Each kept entry where its position puts it, as SillyTavern places World Info:
    // before or after the character, around the example dialogue, in the chat at a depth;
    // the author's note's places (a chat here has no author's note) at its usual depth.
    // (place, order among one depth, text): at one depth the author's note's top entries
    // come before its bottom ones, as around SillyTavern's note.
    let (mut lore_before, mut lore, mut lore_at_depth) = (Vec::new(), Vec::new(), Vec::<(crate::lorebook::LorePlace, u8, String)>::new());
    let (mut lore_examples_top, mut lore_examples_bottom) = (Vec::new(), Vec::new());
    let (mut note_top, mut note_bottom) = (Vec::new(), Vec::new());
    use crate::lorebook::{InsertionPosition as At, LorePlace, PromptRole};
    for (item, kept) in lore_items.into_iter().zip(keep) {
        if !kept {
            continue;
        }
        match input.lore_places.get(&item.id) {
            Some(place) if place.position == At::BeforeCharacter => lore_before.push(item.text),
            Some(place) if place.position == At::AtDepth => lore_at_depth.push((place.clone(), 1, item.text)),
            Some(place) if place.position == At::ExamplesTop => lore_examples_top.push(item.text),
            Some(place) if place.position == At::ExamplesBottom => lore_examples_bottom.push(item.text),
            Some(place) if place.position == At::AuthorNoteTop => note_top.push(item.text),
            Some(place) if place.position == At::AuthorNoteBottom => note_bottom.push(item.text),
            _ => lore.push(item.text),
        }
    }

    let (keep, history_dropped) = fit(&mut history_items, history_budget, DropPolicy::KeepNewestContiguous);
    let history_content: u32 = history_items.iter().zip(&keep).filter(|(_, k)| **k).map(|(i, _)| i.tokens).sum();
    let mut history: Vec<String> =
        history_messages.into_iter().zip(keep).filter(|(_, k)| *k).flat_map(|((_, lines), _)| lines).collect();
    // The card's Character's Note goes in at its depth like a lore entry.
    if let Some(note) = &card.depth_prompt {
        let role = match note.role.as_str() {
            "user" => crate::lorebook::PromptRole::User,
            "assistant" => crate::lorebook::PromptRole::Assistant,
            _ => crate::lorebook::PromptRole::System,
        };
        let place = crate::lorebook::LorePlace { position: crate::lorebook::InsertionPosition::AtDepth, depth: note.depth, role, ..Default::default() };
        lore_at_depth.push((place, 1, resolve(&note.prompt)));
    }
    // The Author's Note, with the World Info placed above and below it, goes where the
    // note says when it is due this message (SillyTavern's default note when the chat
    // has none: in the chat at depth 4, as the system); when it is not, neither does
    // that World Info, as SillyTavern holds it back with the note.
    let default_note = AuthorNote::default();
    let note = input.author_note.unwrap_or(&default_note);
    let (mut note_before, mut note_after, mut note_held) = (None, None, None);
    if note.due(input.user_messages) {
        let text = resolve(note.text.trim());
        let parts: Vec<String> = note_top.into_iter().chain((!text.trim().is_empty()).then_some(text)).chain(note_bottom).collect();
        if !parts.is_empty() {
            let joined = parts.join("\n");
            match note.position {
                NotePosition::InChat => {
                    let role = match note.role {
                        NoteRole::System => PromptRole::System,
                        NoteRole::User => PromptRole::User,
                        NoteRole::Assistant => PromptRole::Assistant,
                    };
                    lore_at_depth.push((LorePlace { position: At::AtDepth, depth: note.depth, role, ..Default::default() }, 1, joined));
                }
                NotePosition::BeforeCharacter => note_before = Some(joined),
                NotePosition::AfterCharacter => note_after = Some(joined),
            }
        }
    } else {
        let held = note_top.len() + note_bottom.len();
        let next = note.next_in(input.user_messages).map(|n| format!("next in {n} message{}", if n == 1 { "" } else { "s" }));
        note_held = Some(match (held, next) {
            (0, Some(next)) => format!("author's note not sent with this message (every {} user messages; {next})", note.every),
            (0, None) => "author's note paused (every 0): not sent".into(),
            (n, next) => format!(
                "author's note not sent with this message ({}), nor the {n} World Info entr{} placed with it",
                next.unwrap_or_else(|| "paused".into()),
                if n == 1 { "y" } else { "ies" }
            ),
        });
    }
    // Depth N puts an entry N messages from the end of the chat as sent, the user's new
    // message (its own block, after the history) being the last: so N - 1 history
    // messages follow it, and depth 0 goes after the new message itself (its own block,
    // as SillyTavern puts depth 0 after the last message). Said as its role; at one depth
    // by role as SillyTavern orders them (assistant, then user, then system closest to the
    // end), each role's in the order they came.
    let role_rank = |role: PromptRole| match role {
        PromptRole::Assistant => 0,
        PromptRole::User => 1,
        _ => 2,
    };
    lore_at_depth.sort_by(|a, b| b.0.depth.cmp(&a.0.depth).then(role_rank(a.0.role).cmp(&role_rank(b.0.role))).then(a.1.cmp(&b.1)));
    let mut after_input = Vec::new();
    let mut placed: Vec<(usize, String)> = Vec::new();
    for (place, _, text) in lore_at_depth {
        // Said as its role, never as a line of the user's or the character's: a note
        // written `[Tamsin]: ...` reads as something Tamsin said (as scenes write it).
        let who = match place.role {
            crate::lorebook::PromptRole::User => "user note",
            crate::lorebook::PromptRole::Assistant => "assistant note",
            _ => "system note",
        };
        let line = format!("[{who}] {text}");
        if place.depth == 0 {
            after_input.push(line);
        } else {
            placed.push((history.len().saturating_sub(place.depth.saturating_sub(1) as usize), line));
        }
    }
    // Inserted from the last place back, each group in its order, so no insertion moves another.
    placed.sort_by(|a, b| b.0.cmp(&a.0));
    let mut i = 0;
    while i < placed.len() {
        let at = placed[i].0;
        let group: Vec<String> = placed[i..].iter().take_while(|p| p.0 == at).map(|p| p.1.clone()).collect();
        i += group.len();
        history.splice(at..at, group);
    }

    // Who the user plays: the persona's own words, macros resolved.
    let persona_text = input.persona.trim();
    let user_persona = if persona_text.is_empty() { String::new() } else { format!("Name: {user}\n{}", resolve(persona_text)) };
    let context = Context {
        name,
        user,
        directive,
        examples,
        post_history,
        persona,
        user_persona,
        lore_before,
        lore,
        lore_examples_top,
        lore_examples_bottom,
        now: input.now.format("%A %Y-%m-%d %H:%M UTC").to_string(),
        since: since_in_words(input.last_chat_at, input.now),
        distance: input.distance.map(|p| distance_text(p, name, user)),
        memories,
        history,
        input: input.input.trim().to_string(),
        retry_note: input.retry_note,
        after_input,
        note_before,
        note_after,
    };
    let system = templates.render("companion/system.j2", &context)?;
    let user_part = templates.render("companion/packet.j2", &context)?;
    let messages = vec![ChatMessage::system(system), ChatMessage::user(user_part)];

    // What each budget governs, as kept (the blocks' tags and fixed words are not theirs).
    let sum = |texts: &[String]| texts.iter().map(|t| tokens::estimate(t)).fold(0u32, u32::saturating_add);
    let lore_content = sum(&context.lore);
    let examples_content = sum(&context.examples);
    let directive_content = sum(&context.persona)
        + sum(&context.lore_before)
        + lore_content
        + sum(&context.lore_examples_top)
        + sum(&context.lore_examples_bottom)
        + examples_content;
    let memory_content = sum(&context.memories);
    let mut blocks = Vec::new();
    let all = format!("{}\n{}", messages[0].content, messages[1].content);
    for tag in TAGS {
        let Some(text) = extract(&all, tag) else { continue };
        let (budget, content_tokens, dropped) = match tag {
            "system_directive" => (
                Some(persona_budget + lore_budget + examples_budget),
                Some(directive_content),
                [persona_dropped.clone(), lore_dropped.clone()].concat(),
            ),
            "lore" => (Some(lore_budget), Some(lore_content), lore_dropped.clone()),
            "example_dialogue" => (Some(examples_budget), Some(examples_content), examples_dropped.clone()),
            "memory_bank" => (Some(memory_budget), Some(memory_content), memory_dropped.clone()),
            "chat_history" => (Some(history_budget), Some(history_content), history_dropped.clone()),
            "user_input" => (Some(input_budget), Some(input_tokens), Vec::new()),
            _ => (None, None, Vec::new()),
        };
        blocks.push(PacketBlock { tag: tag.to_string(), tokens: tokens::estimate(text), text: text.to_string(), budget, content_tokens, dropped });
    }
    notes.extend(directive_notes);
    notes.extend(examples_note);
    notes.extend(lore_note);
    notes.extend(note_held);
    Ok(Packet { tokens: tokens::estimate_messages(&messages), messages, blocks, notes, max_context_tokens: input.max_context_tokens, reply_tokens: input.reply_tokens })
}

/// `<tag>...</tag>` in `text`, tags included.
fn extract<'a>(text: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = text.find(&open)?;
    let end = text[start..].find(&close)? + start + close.len();
    Some(&text[start..end])
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn capitalise(key: &str) -> String {
    let mut chars = key.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryKind, Scope};

    fn character() -> CharacterInfo {
        CharacterInfo {
            id: "c1".into(),
            name: "Ilse Marrow".into(),
            sheet: vec![
                ("description".into(), "A bookbinder in a harbour town.".into()),
                ("personality".into(), "Dry humour, patient hands.".into()),
            ],
            card: Default::default(),
        }
    }

    fn hit(id: &str, text: &str, score: f32) -> RetrievalHit {
        RetrievalHit {
            id: id.into(),
            text: text.into(),
            speaker: None,
            score,
            keyword_score: None,
            vector_score: Some(score),
            rank: 1,
            keyword_rank: None,
            vector_rank: Some(1),
            kind: MemoryKind::Summary,
            scope: Scope::character("c1"),
            session: None,
            time: Some("2026-11-01T10:00:00Z".into()),
            pinned: false,
            edited: false,
        }
    }

    /// A committed exchange of `c`'s chat, number `seq`, for a packet's history.
    fn exchange(c: &CharacterInfo, seq: u32, user_text: &str, reply: &str) -> ChatTurn {
        ChatTurn {
            id: format!("t{seq}"),
            character_id: c.id.clone(),
            seq,
            session: "s".into(),
            user_text: user_text.into(),
            reply: reply.into(),
            at: "2026-11-21T08:00:00Z".into(),
            user_memory_id: None,
            reply_memory_id: None,
            proximity: Proximity::Remote,
            packet: Packet::default(),
            hits: Vec::new(),
            attempts: 1,
            prompt_tokens: 0,
            completion_tokens: 0,
            from_cache: false,
            elapsed_ms: 0,
            swipes: Vec::new(),
            swipe: 0,
            file: None,
            user_name: None,
        }
    }

    static NO_PLACES: std::collections::BTreeMap<String, crate::lorebook::LorePlace> = std::collections::BTreeMap::new();

    fn input<'a>(c: &'a CharacterInfo, memories: &'a [RetrievalHit], distance: Option<Proximity>) -> PacketInput<'a> {
        PacketInput {
            character: c,
            user_name: "User",
            persona: "",
            greeting: None,
            input: "Do you remember the lighthouse?",
            now: DateTime::parse_from_rfc3339("2026-11-21T12:00:00Z").unwrap().with_timezone(&Utc),
            last_chat_at: Some("2026-11-21T08:48:00Z"),
            distance,
            history: &[],
            lore: &[],
            lore_places: &NO_PLACES,
            memories,
            max_context_tokens: 4096,
            reply_tokens: 0,
            retry_note: None,
            notes: Vec::new(),
            variables: None,
            author_note: None,
            user_messages: 1,
        }
    }

    /// The Author's Note goes where it says, said as its role, only with the user
    /// messages it is due on; World Info placed with the note goes with it.
    #[test]
    fn the_authors_note_goes_where_and_when_it_says() {
        use crate::lorebook::{InsertionPosition, LorePlace};
        let templates = PromptTemplates::shipped().unwrap();
        let config = CompanionConfig::default();
        let c = character();
        let history = [exchange(&c, 1, "First question.", "First answer."), exchange(&c, 2, "Second question.", "Second answer.")];
        let lore = [hit("w1", "NOTE-TOP-LORE", 0.9)];
        let places: std::collections::BTreeMap<String, LorePlace> =
            [("w1".to_string(), LorePlace { position: InsertionPosition::AuthorNoteTop, depth: 0, role: Default::default(), ..Default::default() })].into();
        let build = |note: &AuthorNote, user_messages: u32| {
            let mut i = input(&c, &[], None);
            i.history = &history;
            i.lore = &lore;
            i.lore_places = &places;
            i.author_note = Some(note);
            i.user_messages = user_messages;
            assemble(&templates, &config, i).unwrap()
        };
        let note = AuthorNote { text: "Keep {{char}} wary.".into(), depth: 2, every: 2, role: NoteRole::User, position: NotePosition::InChat };
        // Due on the second user message: two messages from the end, between the last
        // exchange's question and answer, the lore above the note.
        let packet = build(&note, 2);
        let chat = &packet.block("chat_history").unwrap().text;
        let expected = "[User]: Second question.\n[user note] NOTE-TOP-LORE\nKeep Ilse Marrow wary.\n[Ilse Marrow]: Second answer.";
        assert!(chat.contains(expected), "{chat}");
        // Not due on the third: neither the note nor its lore, and the packet says so.
        let packet = build(&note, 3);
        assert!(!packet.text().contains("wary") && !packet.text().contains("NOTE-TOP-LORE"), "{}", packet.text());
        assert!(packet.notes.iter().any(|n| n.contains("author's note not sent") && n.contains("next in 1 message")), "{:?}", packet.notes);
        // Before or after the character, in the system prompt, in a block of its own.
        let before = build(&AuthorNote { position: NotePosition::BeforeCharacter, every: 1, ..note.clone() }, 3);
        let system = &before.messages[0].content;
        assert!(system.contains("<authors_note>\nNOTE-TOP-LORE\nKeep Ilse Marrow wary.\n</authors_note>\n<assistant_persona>"), "{system}");
        assert!(before.block("authors_note").is_some() && !before.block("chat_history").unwrap().text.contains("wary"));
        let after = build(&AuthorNote { position: NotePosition::AfterCharacter, every: 1, ..note.clone() }, 3);
        let system = &after.messages[0].content;
        assert!(system.find("</assistant_persona>").unwrap() < system.find("<authors_note>").unwrap(), "{system}");
    }

    #[test]
    fn conditional_blocks_appear_only_when_given() {
        let templates = PromptTemplates::shipped().unwrap();
        let config = CompanionConfig::default();
        let c = character();
        let bare = assemble(&templates, &config, input(&c, &[], None)).unwrap();
        assert!(bare.block("memory_bank").is_none());
        assert!(bare.block("distance_context").is_none());
        assert!(bare.block("temporal_data").unwrap().text.contains("3.2 hours"));
        assert!(bare.block("user_input").unwrap().text.contains("lighthouse"));
        assert!(bare.messages[0].content.contains("Ilse Marrow"));

        let hits = [hit("m1", "Ilse and the user climbed the old lighthouse.", 0.8)];
        let full = assemble(&templates, &config, input(&c, &hits, Some(Proximity::Physical))).unwrap();
        assert!(full.block("memory_bank").unwrap().text.contains("climbed the old lighthouse"));
        assert!(full.block("distance_context").unwrap().text.contains("physically here"));
        // Every block's count is of its text as sent.
        for block in &full.blocks {
            assert_eq!(block.tokens, tokens::estimate(&block.text), "{}", block.tag);
            assert!(full.text().contains(&block.text));
        }
    }

    #[test]
    fn a_cards_macros_are_resolved_in_the_packet_as_sent() {
        let templates = PromptTemplates::shipped().unwrap();
        let config = CompanionConfig::default();
        let mut c = character();
        c.sheet[0].1 = "{{char}} binds books for {{user}} in <BOT>'s harbour town.{{// not sent}}".into();
        c.sheet.push(("scenario".into(), "{{user}} brings {{char}} a torn atlas after {{idle_duration}} away.".into()));
        let lore = [hit("l1", "{{char}}'s workshop smells of glue.", 0.9)];
        let mut with_lore = input(&c, &[], None);
        with_lore.lore = &lore;
        let packet = assemble(&templates, &config, with_lore).unwrap();
        let text = packet.text();
        assert!(text.contains("Ilse Marrow binds books for User in Ilse Marrow's harbour town."), "{text}");
        assert!(text.contains("User brings Ilse Marrow a torn atlas after 3 hours away."), "the idle time since the last chat: {text}");
        assert!(text.contains("Ilse Marrow's workshop smells of glue."), "{text}");
        assert!(!text.contains("{{") && !text.contains("not sent"), "{text}");
    }

    /// A block's budget is measured against what it governs: on a near-empty context no
    /// block's content is over its budget (the tags and the directive's own words made
    /// every block look over it), and a block that lost items is full.
    #[test]
    fn no_block_reads_over_its_budget_when_nothing_was_cut() {
        let templates = PromptTemplates::shipped().unwrap();
        let config = CompanionConfig::default();
        let c = character();
        let packet = assemble(&templates, &config, input(&c, &[], None)).unwrap();
        for block in &packet.blocks {
            if let (Some(content), Some(budget)) = (block.content_tokens, block.budget) {
                assert!(content <= budget, "<{}> content {content} of {budget}", block.tag);
                assert!(content < block.tokens || block.tag == "chat_history", "<{}>: the tags are not content", block.tag);
            }
        }
        let input_block = packet.block("user_input").unwrap();
        assert!(input_block.content_tokens.unwrap() > 0);
    }

    /// A card whose examples outgrow their budget keeps the first ones that fit, each
    /// whole, as SillyTavern pushes examples out from the end (they all went before).
    #[test]
    fn examples_over_their_budget_keep_the_first_blocks_that_fit() {
        let templates = PromptTemplates::shipped().unwrap();
        let config = CompanionConfig::default();
        let mut c = character();
        c.card.mes_example = (1..=12)
            .map(|i| format!("<START>\n{{{{user}}}}: Tell me story {i}.\n{{{{char}}}}: Story {i}: {}", "the tide turned and the gulls cried ".repeat(60)))
            .collect::<Vec<_>>()
            .join("\n");
        let packet = assemble(&templates, &config, input(&c, &[], None)).unwrap();
        let examples = packet.block("example_dialogue").expect("some examples fit");
        assert!(examples.text.contains("Story 1:") && examples.text.contains("Story 2:"), "{}", examples.text);
        assert!(!examples.text.contains("Story 12:"), "the last ones go first");
        let kept = (1..=12).filter(|i| examples.text.contains(&format!("Story {i}:"))).count();
        assert!((2..12).contains(&kept), "{kept}");
        assert_eq!(examples.text.matches("<START>").count(), kept, "each kept block whole, with its marker");
        assert!(
            packet.notes.iter().any(|n| n.starts_with(&format!("example dialogue left out: {} of 12 examples", 12 - kept))),
            "{:?}",
            packet.notes
        );
        assert_eq!(example_blocks("Before any marker.\n<START>\nA: one\n<start>\nB: two"), vec!["Before any marker.", "<START>\nA: one", "<start>\nB: two"]);
    }

    #[test]
    fn a_cards_greeting_examples_system_prompt_and_post_history_instructions_are_honoured() {
        let templates = PromptTemplates::shipped().unwrap();
        let config = CompanionConfig::default();
        let mut c = character();
        c.card = crate::character::CardText {
            first_mes: "*{{char}} looks up from the press.* Mind the glue.".into(),
            mes_example: "<START>\n{{user}}: Busy?\n{{char}}: Always.".into(),
            system_prompt: "Write in short sentences. {{original}}".into(),
            post_history_instructions: "Keep {{char}}'s reply under sixty words.".into(),
            creator_notes: "Tested with small models.".into(),
            ..Default::default()
        };
        let greeting = c.card.first_mes.clone();
        let mut with_greeting = input(&c, &[], None);
        with_greeting.greeting = Some(&greeting);
        let packet = assemble(&templates, &config, with_greeting).unwrap();
        let system = &packet.messages[0].content;
        assert!(system.starts_with("<system_directive>\nWrite in short sentences. Roleplay as Ilse Marrow"), "{system}");
        let examples = packet.block("example_dialogue").expect("examples fit");
        assert!(examples.text.contains("User: Busy?\nIlse Marrow: Always."), "{}", examples.text);
        let history = packet.block("chat_history").unwrap();
        assert!(history.text.contains("[Ilse Marrow]: *Ilse Marrow looks up from the press.* Mind the glue."), "{}", history.text);
        assert!(packet.block("trigger").unwrap().text.contains("Keep Ilse Marrow's reply under sixty words."));
        assert!(!packet.text().contains("Tested with small models"), "creator notes are never sent");

        // Example dialogue goes whole when its budget, with what the other blocks leave,
        // cannot hold it, and says so.
        c.card.mes_example = "<START>\n{{char}}: ".to_string() + &"word ".repeat(4000);
        let packet = assemble(&templates, &config, input(&c, &[], None)).unwrap();
        assert!(packet.block("example_dialogue").is_none());
        assert!(packet.notes.iter().any(|n| n.starts_with("example dialogue left out")), "{:?}", packet.notes);
        let system = packet.block("system_directive").unwrap();
        assert!(system.dropped.is_empty(), "persona and lore are not what was cut");
        assert!(packet.blocks.iter().all(|b| !b.text.contains("word word")));
    }

    /// An entry marked `ignore_budget` goes in even when the lore budget is spent, and the
    /// notes say which fired lore the budget left out.
    #[test]
    fn ignore_budget_lore_is_always_sent_and_cut_lore_is_named() {
        use crate::lorebook::LorePlace;
        let templates = PromptTemplates::shipped().unwrap();
        let config = CompanionConfig::default();
        let c = character();
        let long = |tag: &str, n: usize| format!("{tag} {}", "lorem ipsum dolor sit amet ".repeat(n));
        let lore = [hit("lore HIGH", &long("HIGH-ORDER", 80), 2.0), hit("lore KEEP", &long("IGNORES-BUDGET", 60), 1.5)];
        let places: std::collections::BTreeMap<String, LorePlace> = [
            ("lore HIGH".to_string(), LorePlace::default()),
            ("lore KEEP".to_string(), LorePlace { ignore_budget: true, ..Default::default() }),
        ]
        .into();
        let mut given = input(&c, &[], None);
        given.lore = &lore;
        given.lore_places = &places;
        given.max_context_tokens = 400;
        let packet = assemble(&templates, &config, given).unwrap();
        let text = packet.text();
        assert!(text.contains("IGNORES-BUDGET"), "{text}");
        let dropped: Vec<&str> = packet.blocks.iter().flat_map(|b| &b.dropped).map(|d| d.id.as_str()).collect();
        assert!(!dropped.contains(&"lore KEEP"), "{dropped:?}");
        // The budgeted entry, worth more but too long for what is left, is cut and named.
        assert!(dropped.contains(&"lore HIGH") && !text.contains("HIGH-ORDER"), "{dropped:?}");
        assert!(packet.notes.iter().any(|n| n.starts_with("lore left out by the packet's lore budget") && n.contains("HIGH")), "{:?}", packet.notes);
    }

    /// At one depth, SillyTavern puts the assistant's injections first, then the user's,
    /// then the system's (closest to the end), each role's in their order.
    #[test]
    fn at_one_depth_world_info_is_ordered_by_role_as_sillytavern_does() {
        use crate::lorebook::{InsertionPosition, LorePlace, PromptRole};
        let templates = PromptTemplates::shipped().unwrap();
        let config = CompanionConfig::default();
        let c = character();
        let history = [exchange(&c, 1, "question one", "answer one"), exchange(&c, 2, "question two", "answer two")];
        let lore = [hit("s1", "SYS-ONE", 2.0), hit("s2", "SYS-TWO", 2.0), hit("u", "USER-ONE", 2.0), hit("a", "ASSISTANT-ONE", 2.0)];
        let at = |role| LorePlace { position: InsertionPosition::AtDepth, depth: 2, role, ..Default::default() };
        let places = [("s1".to_string(), at(PromptRole::System)), ("s2".to_string(), at(PromptRole::System)), ("u".to_string(), at(PromptRole::User)), ("a".to_string(), at(PromptRole::Assistant))]
            .into_iter()
            .collect();
        let mut given = input(&c, &[], None);
        given.history = &history;
        given.lore = &lore;
        given.lore_places = &places;
        let text = assemble(&templates, &config, given).unwrap().text();
        let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle} missing:\n{text}"));
        assert!(at("ASSISTANT-ONE") < at("USER-ONE") && at("USER-ONE") < at("SYS-ONE") && at("SYS-ONE") < at("SYS-TWO"), "{text}");
        assert!(at("question two") < at("ASSISTANT-ONE") && at("SYS-TWO") < at("answer two"), "{text}");
    }

    #[test]
    fn world_info_goes_where_each_entrys_position_says() {
        use crate::lorebook::{InsertionPosition, LorePlace, PromptRole};
        let templates = PromptTemplates::shipped().unwrap();
        let config = CompanionConfig::default();
        let c = character();
        let turn = |seq: u32, text: &str| exchange(&c, seq, &format!("question {text}"), &format!("answer {text}"));
        let history = [turn(1, "one"), turn(2, "two"), turn(3, "three")];
        let lore = [
            hit("before", "LORE-BEFORE", 2.0),
            hit("after", "LORE-AFTER", 2.0),
            hit("deep", "LORE-DEEP", 2.0),
            hit("em-top", "LORE-EM-TOP", 2.0),
            hit("em-bottom", "LORE-EM-BOTTOM", 2.0),
            hit("an-bottom", "LORE-AN-BOTTOM", 2.0),
            hit("an-top", "LORE-AN", 2.0),
            hit("last", "LORE-DEPTH-ZERO", 2.0),
        ];
        let places = [
            ("before".to_string(), LorePlace { position: InsertionPosition::BeforeCharacter, ..Default::default() }),
            ("after".to_string(), LorePlace { position: InsertionPosition::AfterCharacter, ..Default::default() }),
            ("deep".to_string(), LorePlace { position: InsertionPosition::AtDepth, depth: 2, role: PromptRole::System, ..Default::default() }),
            ("em-top".to_string(), LorePlace { position: InsertionPosition::ExamplesTop, ..Default::default() }),
            ("em-bottom".to_string(), LorePlace { position: InsertionPosition::ExamplesBottom, ..Default::default() }),
            ("an-top".to_string(), LorePlace { position: InsertionPosition::AuthorNoteTop, ..Default::default() }),
            ("an-bottom".to_string(), LorePlace { position: InsertionPosition::AuthorNoteBottom, ..Default::default() }),
            ("last".to_string(), LorePlace { position: InsertionPosition::AtDepth, depth: 0, role: PromptRole::User, ..Default::default() }),
        ]
        .into_iter()
        .collect();
        let mut c = c;
        c.card.mes_example = "<START>\n{{char}}: The lock opens at dawn.".into();
        c.card.depth_prompt =
            Some(crate::character::DepthPrompt { prompt: "{{char}} NOTE-AT-ONE".into(), depth: 1, role: "assistant".into() });
        let mut given = input(&c, &[], None);
        given.history = &history;
        given.lore = &lore;
        given.lore_places = &places;
        let packet = assemble(&templates, &config, given).unwrap();
        let text = packet.text();
        let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle} missing:\n{text}"));
        assert!(at("LORE-BEFORE") < at("<assistant_persona>") && at("</assistant_persona>") < at("LORE-AFTER"), "{text}");
        // Depth 2: two messages follow it in the chat as sent, the last reply and the new message.
        assert!(at("question three") < at("[system note] LORE-DEEP") && at("[system note] LORE-DEEP") < at("answer three"), "{text}");
        // The card's Character's Note at its depth (1: before the new message), as its role, never as her line.
        assert!(at("answer three") < at("[assistant note] Ilse Marrow NOTE-AT-ONE") && at("NOTE-AT-ONE") < at("</chat_history>"), "{text}");
        // After the character comes before the user's persona and the examples, as in
        // SillyTavern's story string; the examples' own places go around them.
        assert!(at("LORE-AFTER") < at("LORE-EM-TOP") && at("LORE-EM-TOP") < at("<example_dialogue>"), "{text}");
        assert!(at("</example_dialogue>") < at("LORE-EM-BOTTOM"), "{text}");
        // The author's note's places, with no note written: where SillyTavern's default
        // note goes, four messages from the end, its top entries before its bottom ones.
        assert!(at("question two") < at("[system note] LORE-AN\nLORE-AN-BOTTOM") && at("LORE-AN-BOTTOM") < at("answer two"), "{text}");
        // Depth 0: after the user's new message, the last thing in the chat (SillyTavern).
        assert!(at("</user_input>") < at("[user note] LORE-DEPTH-ZERO") && at("LORE-DEPTH-ZERO") < at("<trigger>"), "{text}");
        assert!(packet.block("after_input").is_some_and(|b| b.text.contains("LORE-DEPTH-ZERO")), "{:?}", packet.blocks);
    }

    /// Outlet entries go only where `{{outlet::Name}}` is written — the card's fields,
    /// its system prompt, the Author's Note — highest order first; never in the lore block.
    #[test]
    fn outlet_lore_goes_only_where_its_macro_is_written() {
        use crate::companion::model::{AuthorNote, NotePosition};
        use crate::lorebook::{InsertionPosition, LorePlace};
        let templates = PromptTemplates::shipped().unwrap();
        let config = CompanionConfig::default();
        let mut c = character();
        c.sheet = vec![("description".into(), "A ferrywoman. Weather: {{outlet::sky}}".into())];
        c.card.system_prompt = "{{original}} Mood: {{outlet::mood}}.".into();
        // Hits come in insertion order, ascending: the outlet keeps the highest first.
        let lore = [hit("low", "OUTLET-LOW", 2.0), hit("high", "OUTLET-HIGH", 2.0), hit("mood", "calm", 2.0), hit("plain", "LORE-PLAIN", 2.0)];
        let outlet = |name: &str| LorePlace { position: InsertionPosition::Outlet, outlet: name.into(), ..Default::default() };
        let places = [("low".to_string(), outlet("sky")), ("high".to_string(), outlet("sky")), ("mood".to_string(), outlet("mood"))].into_iter().collect();
        let note = AuthorNote { text: "Sky again: {{outlet::sky}}; none: [{{outlet::nowhere}}]".into(), depth: 1, every: 1, position: NotePosition::InChat, ..Default::default() };
        let mut given = input(&c, &[], None);
        given.lore = &lore;
        given.lore_places = &places;
        given.author_note = Some(&note);
        let packet = assemble(&templates, &config, given).unwrap();
        let text = packet.text();
        assert!(text.contains("Weather: OUTLET-HIGH\nOUTLET-LOW"), "{text}");
        assert!(text.contains("Mood: calm."), "{text}");
        assert!(text.contains("Sky again: OUTLET-HIGH\nOUTLET-LOW; none: []"), "{text}");
        assert_eq!(text.matches("OUTLET-LOW").count(), 2, "nowhere else: {text}");
        assert!(packet.block("lore").is_some_and(|b| b.text.contains("LORE-PLAIN") && !b.text.contains("calm")), "{:?}", packet.blocks);
    }

    #[test]
    fn the_users_persona_is_named_and_described() {
        let templates = PromptTemplates::shipped().unwrap();
        let config = CompanionConfig::default();
        let mut c = character();
        c.card.first_mes = "Evening, {{user}}.".into();
        let mut given = input(&c, &[], None);
        given.user_name = "Tamsin";
        given.persona = "{{user}} is a courier who talks to {{char}} every evening.";
        given.greeting = Some("Evening, {{user}}.");
        let packet = assemble(&templates, &config, given).unwrap();
        let persona = packet.block("user_persona").expect("a persona block");
        assert!(persona.text.contains("Name: Tamsin\nTamsin is a courier who talks to Ilse Marrow every evening."), "{}", persona.text);
        assert!(packet.block("chat_history").unwrap().text.contains("[Ilse Marrow]: Evening, Tamsin."));
        assert!(packet.text().contains("conversation with Tamsin"), "the directive names the persona");
        // Without a persona there is no block, and no greeting was chosen: none is sent.
        let bare = assemble(&templates, &config, input(&c, &[], None)).unwrap();
        assert!(bare.block("user_persona").is_none());
        assert!(!bare.text().contains("Evening,"));
    }

    #[test]
    fn a_long_card_description_is_sent_whole_or_cut_never_left_out() {
        let templates = PromptTemplates::shipped().unwrap();
        let config = CompanionConfig::default();
        let mut c = character();
        let description: String = (1..=120).map(|n| format!("Ilse bound book number {n} by lamplight. ")).collect();
        c.sheet[0].1 = description;
        for (max, whole) in [(8192u32, true), (1024, false)] {
            let mut call = input(&c, &[], None);
            call.max_context_tokens = max;
            call.reply_tokens = 256;
            let packet = assemble(&templates, &config, call).unwrap();
            let system = &packet.messages[0].content;
            assert!(system.contains("Description: Ilse bound book number 1 by lamplight."), "at {max}: {system}");
            assert!(system.contains("Personality: Dry humour, patient hands."), "at {max}: {system}");
            assert_eq!(system.contains("book number 120 by lamplight."), whole, "at {max}: {system}");
            let dropped = &packet.block("system_directive").unwrap().dropped;
            assert_eq!(dropped.iter().any(|d| d.id == "description" && d.reason.starts_with("cut from")), !whole, "{dropped:?}");
        }
    }

    #[test]
    fn memories_over_budget_drop_the_lowest_scored() {
        let templates = PromptTemplates::shipped().unwrap();
        let config = CompanionConfig::default();
        let c = character();
        let long = "word ".repeat(120);
        let hits = [hit("low", &format!("low {long}"), 0.1), hit("high", &format!("high {long}"), 0.9), hit("mid", &format!("mid {long}"), 0.5)];
        let mut small = input(&c, &hits, None);
        // The blocks share 82% of 300 tokens: what the name, the card and the message
        // leave (their shares flow to the memories) is room for one memory.
        small.max_context_tokens = 300;
        let packet = assemble(&templates, &config, small).unwrap();
        let bank = packet.block("memory_bank").unwrap();
        assert!(bank.text.contains("high word"));
        assert_eq!(bank.dropped.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["mid", "low"]);
        // What is recorded as injected is what the packet carried, not what was retrieved.
        assert_eq!(carried(&packet, &hits).iter().map(|h| h.id.as_str()).collect::<Vec<_>>(), ["high"]);
        let without = assemble(&templates, &config, input(&c, &[], None)).unwrap();
        assert!(carried(&without, &hits).is_empty(), "no memory bank, no memory injected");
    }

    /// The reply's cap is kept off the top before the blocks take their shares: a full
    /// packet plus the cap the call sends fit the context, even a cap the profile sets.
    #[test]
    fn a_full_packet_leaves_room_for_the_reply() {
        let templates = PromptTemplates::shipped().unwrap();
        let config = CompanionConfig::default();
        let mut c = character();
        c.sheet.push(("scenario".into(), "The lighthouse keeps its own counsel. ".repeat(200)));
        let line = "The fog rolled in over the harbour while the bell rang twice for the drowned. ";
        let history: Vec<ChatTurn> = (0..200u32)
            .map(|i| ChatTurn {
                id: format!("t{i}"),
                character_id: "c1".into(),
                seq: i + 1,
                session: "s".into(),
                user_text: line.repeat(3),
                reply: line.repeat(4),
                at: String::new(),
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
                swipes: Vec::new(),
                swipe: 0,
                file: None,
                user_name: None,
            })
            .collect();
        let long = line.repeat(8);
        let hits: Vec<RetrievalHit> = (0..30).map(|i| hit(&format!("m{i}"), &long, 0.9 - i as f32 / 100.0)).collect();
        for (max, reply) in [(1500u32, 375u32), (4096, 1024), (4096, 2000), (8192, 600)] {
            let mut given = input(&c, &hits, None);
            given.history = &history;
            given.max_context_tokens = max;
            given.reply_tokens = reply;
            let packet = assemble(&templates, &config, given).unwrap();
            assert!(packet.tokens + reply <= max, "at {max}: {} packet + {reply} reply", packet.tokens);
            assert!(packet.tokens > (max - reply) / 3, "at {max}: the room is used ({})", packet.tokens);
            assert_eq!((packet.max_context_tokens, packet.reply_tokens), (max, reply));
        }
    }

    /// The whole packet exactly as sent, block by block: a change to a template or to
    /// the assembly shows here as a reviewable diff (`UPDATE_EXPECT=1` rewrites it).
    #[test]
    fn the_packet_as_sent() {
        let templates = PromptTemplates::shipped().unwrap();
        let config = CompanionConfig::default();
        let c = character();
        let hits = [hit("m1", "Ilse and the user climbed the old lighthouse.", 0.8)];
        let packet = assemble(&templates, &config, input(&c, &hits, Some(Proximity::Physical))).unwrap();
        let mut shown = String::new();
        for message in &packet.messages {
            shown.push_str(&format!("--- {:?}\n{}\n", message.role, message.content));
        }
        shown.push_str(&format!("--- {} tokens of {}; blocks:", packet.tokens, packet.max_context_tokens));
        for block in &packet.blocks {
            shown.push_str(&format!(" {}={}", block.tag, block.tokens));
        }
        expect_test::expect_file!["snapshots/packet_as_sent.txt"].assert_eq(&shown);
    }

    #[test]
    fn time_since_reads_as_words() {
        let now = DateTime::parse_from_rfc3339("2026-11-21T12:00:00Z").unwrap().with_timezone(&Utc);
        assert_eq!(since_in_words(None, now), "this is your first conversation");
        assert_eq!(since_in_words(Some("2026-11-21T11:59:30Z"), now), "moments ago");
        assert_eq!(since_in_words(Some("2026-11-21T11:15:00Z"), now), "45 minutes");
        assert_eq!(since_in_words(Some("2026-11-20T12:00:00Z"), now), "1 day");
        assert_eq!(since_in_words(Some("2026-10-01T12:00:00Z"), now), "7 weeks");
        assert_eq!(since_in_words(Some("garbage"), now), "this is your first conversation");
    }
}
