//! Macros in card, lorebook, persona, note and template text, with SillyTavern's
//! meaning: `{{char}}`, `{{user}}`, `{{persona}}`, `{{description}}`, `{{personality}}`,
//! `{{scenario}}`, `{{mesExamples}}`, `{{original}}`, `{{time}}`, `{{date}}`,
//! `{{weekday}}`, `{{idle_duration}}`, `{{lastMessage}}`, `{{random:a,b}}` (or
//! `{{random::a::b}}`), `{{pick:a,b}}` (the same choice every time in one chat),
//! `{{roll:2d6+1}}`, `{{// comment}}`, `{{trim}}`, `{{newline}}`, the legacy
//! `<USER>` / `<BOT>`, and the chat variables: `{{setvar::name::value}}`,
//! `{{getvar::name}}`, `{{addvar::name::value}}`, `{{incvar::name}}`, `{{decvar::name}}`
//! and their `…globalvar` twins, which cards use to keep score across messages, and
//! `{{outlet::Name}}`: the content of the World Info entries that fired for this prompt
//! with the position "outlet" and that outlet name (empty when none did).
//!
//! A macro may hold macros (`{{random::{{user}}'s friend::{{user}}'s cousin}}`); the
//! inner ones are expanded first. Names are matched case-insensitively; a macro we do not know stays as written, so a
//! user's own `{{placeholders}}` reach the model untouched. Expansion is bounded: the
//! fields a macro inserts (a description that says `{{char}}`) are expanded again, at
//! most [`MAX_DEPTH`] levels deep, so a field that names itself cannot loop; a list or
//! a roll too large to be meant is cut down, and the output stops growing at
//! [`MAX_OUTPUT`] bytes. Each cut is said in `notes`, for the ledger.

use chrono::{DateTime, Local};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

/// Levels of macro-in-macro expansion (a card field inserted by a macro is expanded
/// again; its own insertions once more; no further).
pub const MAX_DEPTH: usize = 3;
/// The longest text an expansion produces.
pub const MAX_OUTPUT: usize = 1 << 20;
/// Items of a `{{random}}` or `{{pick}}` list that are considered.
pub const MAX_CHOICES: usize = 1000;
/// Dice of one `{{roll}}`, and sides of one die.
pub const MAX_DICE: u64 = 1000;
pub const MAX_SIDES: u64 = 1_000_000;
/// Variables one scope (a chat, or the library's globals) holds, and the longest value.
pub const MAX_VARIABLES: usize = 1000;
pub const MAX_VARIABLE_BYTES: usize = 64 * 1024;

/// The variables `{{setvar}}` and its kin read and write: the chat's own (`local`) and
/// the library's (`global`). Names are kept as written; values are text, numbers when
/// `addvar`/`incvar` can read them as numbers (as SillyTavern keeps them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Variables {
    pub local: BTreeMap<String, String>,
    pub global: BTreeMap<String, String>,
}

/// What the macros of one prompt are filled with.
#[derive(Debug, Clone, Default)]
pub struct MacroContext<'a> {
    /// The character's name (`{{char}}`, `<BOT>`).
    pub char: &'a str,
    /// The user's persona name (`{{user}}`, `<USER>`).
    pub user: &'a str,
    /// The persona's description (`{{persona}}`).
    pub persona: &'a str,
    pub description: &'a str,
    pub personality: &'a str,
    pub scenario: &'a str,
    /// Example dialogue (`{{mesExamples}}`).
    pub mes_examples: &'a str,
    /// What a card's system prompt or post-history instructions replace (`{{original}}`).
    pub original: &'a str,
    /// The card's own system prompt (`{{charPrompt}}`) and post-history instructions
    /// (`{{charInstruction}}`, also `{{charJailbreak}}`).
    pub char_prompt: &'a str,
    pub char_instruction: &'a str,
    pub last_message: &'a str,
    /// The user's new message (`{{input}}`; empty: the caller has none).
    pub input: &'a str,
    /// The last message the user and the character sent (`{{lastUserMessage}}`,
    /// `{{lastCharMessage}}`).
    pub last_user_message: &'a str,
    pub last_char_message: &'a str,
    /// SillyTavern's message ids (0: the greeting) of the chat's last message and of the
    /// oldest one the prompt carries (`{{lastMessageId}}`, `{{firstIncludedMessageId}}`;
    /// `None`: left as written).
    pub last_message_id: Option<u64>,
    pub first_included_message_id: Option<u64>,
    /// The context size in tokens (`{{maxPrompt}}`; `None`: left as written).
    pub max_prompt: Option<u32>,
    /// Time since the user's last message, when there was one.
    pub idle: Option<Duration>,
    /// When the prompt is built (`None`: now).
    pub now: Option<DateTime<Local>>,
    /// Keeps `{{pick}}` stable within one chat or scene: the chat's or scene's id.
    pub stable_seed: &'a str,
    /// Seeds `{{random}}` and `{{roll}}` (`None`: from the clock).
    pub random_seed: Option<u64>,
    /// The variables `{{setvar}}` and kin act on, shared by every text of one prompt so
    /// a value set in the card is read in the lore (`None`: each text has its own, thrown
    /// away after it).
    pub variables: Option<&'a RefCell<Variables>>,
    /// What `{{outlet::Name}}` puts in, by outlet name: the prompt's fired outlet entries,
    /// already expanded (`None`: not known yet, the macro stays as written for
    /// [`fill_outlets`] once the prompt's lore has fired).
    pub outlets: Option<&'a BTreeMap<String, String>>,
}

/// The fired outlet entries' content by outlet name, as SillyTavern collects it: entries
/// given in ascending insertion order (as activation reports them) go highest order first,
/// one per line; an entry with no outlet name, or with no content, goes nowhere.
pub fn collect_outlets<'t>(entries: impl IntoIterator<Item = (&'t str, &'t str)>) -> BTreeMap<String, String> {
    let mut by_name: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (name, text) in entries {
        if name.is_empty() || text.trim().is_empty() {
            continue;
        }
        by_name.entry(name.to_string()).or_default().push(text);
    }
    by_name
        .into_iter()
        .map(|(name, mut texts)| {
            texts.reverse();
            (name, texts.join("\n"))
        })
        .collect()
}

/// `{{outlet::Name}}` (or `{{outlet:Name}}`): the named outlet's text, empty when nothing
/// fired for it. The name is matched as written, outer spaces aside.
fn outlet(outlets: &BTreeMap<String, String>, args: &str) -> String {
    let name = args.strip_prefix(':').unwrap_or(args).trim();
    outlets.get(name).cloned().unwrap_or_default()
}

/// Only the `{{outlet::Name}}` macros of `text`, filled from `outlets`: for text whose
/// other macros were expanded before the prompt's lore fired (a scene's sheets, setting
/// and notes), which the expansion left them in.
pub fn fill_outlets(text: &str, outlets: &BTreeMap<String, String>) -> String {
    static OUTLET: std::sync::LazyLock<Option<regex::Regex>> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"(?i)\{\{\s*outlet\s*:(:?[^{}]*)\}\}").ok());
    match OUTLET.as_ref() {
        Some(re) if text.contains("{{") => re.replace_all(text, |c: &regex::Captures<'_>| outlet(outlets, &c[1])).into_owned(),
        _ => text.to_string(),
    }
}

/// The expanded text, and what was cut to keep it bounded.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Expanded {
    pub text: String,
    pub notes: Vec<String>,
}

/// Expand every macro of `text`.
pub fn expand(text: &str, ctx: &MacroContext<'_>) -> Expanded {
    let seed = ctx.random_seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
    });
    let mut run = Run { ctx, rng: fastrand::Rng::with_seed(seed), notes: Vec::new(), picks: 0, scratch: RefCell::default() };
    let legacy = text.replace("<USER>", "{{user}}").replace("<BOT>", "{{char}}").replace("<CHAR>", "{{char}}");
    let mut out = run.expand(&legacy, 0);
    if out.len() > MAX_OUTPUT {
        let mut cut = MAX_OUTPUT;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        run.notes.push(format!("macro output cut at {MAX_OUTPUT} bytes"));
    }
    Expanded { text: trim_marks(&out), notes: run.notes }
}

/// `{{trim}}` leaves this mark; whitespace around it goes once everything is expanded.
const TRIM_MARK: char = '\u{E000}';

fn trim_marks(text: &str) -> String {
    if !text.contains(TRIM_MARK) {
        return text.to_string();
    }
    let parts: Vec<&str> = text.split(TRIM_MARK).collect();
    let last = parts.len() - 1;
    let mut out = String::with_capacity(text.len());
    for (i, part) in parts.iter().enumerate() {
        // SillyTavern trims the line breaks around `{{trim}}`, not other whitespace.
        let part = if i > 0 { part.trim_start_matches(['\r', '\n']) } else { part };
        let part = if i < last { part.trim_end_matches(['\r', '\n']) } else { part };
        out.push_str(part);
    }
    out
}

struct Run<'c, 'a> {
    ctx: &'c MacroContext<'a>,
    rng: fastrand::Rng,
    notes: Vec<String>,
    /// `{{pick}}`s met so far: the n-th pick of a text chooses the same each time.
    picks: u64,
    /// The variables when the context lends none.
    scratch: RefCell<Variables>,
}

impl Run<'_, '_> {
    fn expand(&mut self, text: &str, depth: usize) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            // A macro may hold macros (`{{random::{{user}}'s friend::{{user}}'s cousin}}`):
            // the inner ones are expanded first, as SillyTavern does. Without a matching
            // close for every open, the first `}}` ends the macro.
            let (end, nested) = match matching_close(after) {
                Some(end) => (end, after[..end].contains("{{")),
                None => match after.find("}}") {
                    Some(end) => (end, false),
                    None => {
                        out.push_str(&rest[start..]);
                        return out;
                    }
                },
            };
            let written = &after[..end];
            let inner;
            let body = if nested {
                inner = self.expand(written, depth);
                inner.as_str()
            } else {
                written
            };
            match self.one(body, depth) {
                Some(value) => out.push_str(&value),
                None => {
                    out.push_str("{{");
                    out.push_str(body);
                    out.push_str("}}");
                }
            }
            rest = &after[end + 2..];
            if out.len() > MAX_OUTPUT {
                return out;
            }
        }
        out.push_str(rest);
        out
    }

    /// A field that may itself hold macros.
    fn field(&mut self, value: &str, name: &str, depth: usize) -> String {
        if depth + 1 >= MAX_DEPTH {
            if value.contains("{{") {
                self.notes.push(format!("macros inside {{{{{name}}}}} nested too deep; left as written"));
            }
            return value.to_string();
        }
        self.expand(value, depth + 1)
    }

    /// The value of one macro body, or `None` for a macro we do not know.
    fn one(&mut self, body: &str, depth: usize) -> Option<String> {
        let trimmed = body.trim();
        if trimmed.starts_with("//") {
            return Some(String::new());
        }
        // `{{banned "word"}}` bans a word on text-completion back ends; we have no such
        // list, and the macro itself is never text.
        if trimmed.len() > 7 && trimmed[..7].eq_ignore_ascii_case("banned ") {
            self.notes.push(format!("{{{{{trimmed}}}}}: banned words are not supported; removed"));
            return Some(String::new());
        }
        // `{{roll 1d20}}`: SillyTavern takes a space as well as a colon.
        if trimmed.len() > 5 && trimmed[..5].eq_ignore_ascii_case("roll ") {
            return self.roll(&trimmed[5..]);
        }
        let (name, arg) = match trimmed.split_once(':') {
            Some((name, arg)) => (name.trim().to_ascii_lowercase(), Some(arg)),
            None => (trimmed.to_ascii_lowercase(), None),
        };
        let ctx = self.ctx;
        let now = ctx.now.unwrap_or_else(Local::now);
        Some(match (name.as_str(), arg) {
            ("char", None) => ctx.char.to_string(),
            ("noop", None) => String::new(),
            ("reverse", Some(text)) => text.chars().rev().collect(),
            ("charprompt", None) => self.field(ctx.char_prompt, "charPrompt", depth),
            ("charinstruction" | "charjailbreak", None) => self.field(ctx.char_instruction, "charInstruction", depth),
            ("user", None) => ctx.user.to_string(),
            ("persona", None) => self.field(ctx.persona, "persona", depth),
            ("description", None) => self.field(ctx.description, "description", depth),
            ("personality", None) => self.field(ctx.personality, "personality", depth),
            ("scenario", None) => self.field(ctx.scenario, "scenario", depth),
            ("mesexamples", None) => self.field(ctx.mes_examples, "mesExamples", depth),
            ("original", None) => self.field(ctx.original, "original", depth),
            ("lastmessage", None) => ctx.last_message.to_string(),
            ("input", None) => ctx.input.to_string(),
            ("lastusermessage", None) => ctx.last_user_message.to_string(),
            ("lastcharmessage", None) => ctx.last_char_message.to_string(),
            ("lastmessageid", None) => ctx.last_message_id?.to_string(),
            ("firstincludedmessageid", None) => ctx.first_included_message_id?.to_string(),
            ("maxprompt", None) => ctx.max_prompt?.to_string(),
            // Outside a group chat both are the character's name, as in SillyTavern.
            ("charifnotgroup" | "group", None) => ctx.char.to_string(),
            ("isodate", None) => now.format("%Y-%m-%d").to_string(),
            ("isotime", None) => now.format("%H:%M").to_string(),
            (utc, None) if utc.starts_with("time_utc") => {
                let hours: i32 = utc["time_utc".len()..].parse().ok().filter(|h: &i32| (-14..=14).contains(h))?;
                let offset = chrono::FixedOffset::east_opt(hours * 3600)?;
                now.with_timezone(&offset).format("%-I:%M %p").to_string()
            }
            ("newline", None) => "\n".to_string(),
            ("trim", None) => TRIM_MARK.to_string(),
            ("time", None) => now.format("%-I:%M %p").to_string(),
            ("date", None) => now.format("%B %-d, %Y").to_string(),
            ("weekday", None) => now.format("%A").to_string(),
            ("idle_duration", None) => idle_words(ctx.idle),
            ("random", Some(list)) => {
                let items = self.choices(list, "random");
                if items.is_empty() { String::new() } else { items[self.rng.usize(..items.len())].to_string() }
            }
            ("pick", Some(list)) => {
                let items = self.choices(list, "pick");
                self.picks += 1;
                if items.is_empty() {
                    String::new()
                } else {
                    let mut stable = fastrand::Rng::with_seed(stable_hash(ctx.stable_seed, body, self.picks));
                    items[stable.usize(..items.len())].to_string()
                }
            }
            ("roll", Some(formula)) => self.roll(formula)?,
            // Inserted as it is: its text was expanded when its lore was.
            ("outlet", Some(args)) => outlet(ctx.outlets?, args),
            (var, Some(args)) if VARIABLE_MACROS.contains(&var) => self.variable(var, args)?,
            _ => return None,
        })
    }

    /// One variable macro (`setvar`, `getglobalvar`, …) with its `::`-separated
    /// arguments; `None` when its arguments are not the ones it takes.
    fn variable(&mut self, macro_name: &str, args: &str) -> Option<String> {
        let args = args.strip_prefix(':')?;
        let (global, op) = match macro_name.strip_suffix("globalvar") {
            Some(op) => (true, op),
            None => (false, macro_name.strip_suffix("var")?),
        };
        let (name, value) = match args.split_once("::") {
            Some((name, value)) => (name.trim(), Some(value)),
            None => (args.trim(), None),
        };
        if name.is_empty() {
            return None;
        }
        let cell = self.ctx.variables.unwrap_or(&self.scratch);
        let mut vars = cell.borrow_mut();
        let scope = if global { &mut vars.global } else { &mut vars.local };
        let current = scope.get(name).cloned().unwrap_or_default();
        let new = match (op, value) {
            ("get", None) => return Some(current),
            ("set", Some(value)) => value.to_string(),
            ("add", Some(value)) => add(&current, value),
            ("inc", None) => add(&current, "1"),
            ("dec", None) => add(&current, "-1"),
            _ => return None,
        };
        let (within, mut note) = bounded(new, MAX_VARIABLE_BYTES);
        if !scope.contains_key(name) && scope.len() >= MAX_VARIABLES {
            note = Some(format!("no room for variable {name:?}: {MAX_VARIABLES} are kept at most"));
        } else {
            scope.insert(name.to_string(), within.clone());
        }
        if let Some(note) = note {
            self.notes.push(note);
        }
        // `incvar` and `decvar` say the new value; `setvar` and `addvar` say nothing.
        Some(if matches!(op, "inc" | "dec") { within } else { String::new() })
    }

    /// The items of a `random`/`pick` list: `::`-separated when it has `::`, else
    /// comma-separated (a `\,` is a comma inside an item).
    fn choices<'t>(&mut self, list: &'t str, name: &str) -> Vec<std::borrow::Cow<'t, str>> {
        let list = list.strip_prefix(':').unwrap_or(list);
        let items: Vec<std::borrow::Cow<'t, str>> = if list.contains("::") {
            list.split("::").map(std::borrow::Cow::Borrowed).collect()
        } else {
            let marker = "\u{E001}";
            let protected = list.replace("\\,", marker);
            protected.split(',').map(|s| std::borrow::Cow::Owned(s.replace(marker, ",").trim().to_string())).collect()
        };
        if items.len() > MAX_CHOICES {
            self.notes.push(format!("{{{{{name}}}}} had {} items; only the first {MAX_CHOICES} were considered", items.len()));
            return items.into_iter().take(MAX_CHOICES).collect();
        }
        items
    }

    /// `NdM`, `dM` or `M`, with an optional `+K` / `-K`; `None` when it is not a roll.
    fn roll(&mut self, formula: &str) -> Option<String> {
        let formula: String = formula.chars().filter(|c| !c.is_whitespace()).collect::<String>().to_ascii_lowercase();
        let (dice, modifier) = match formula.find(['+', '-']) {
            Some(at) => (&formula[..at], formula[at..].parse::<i64>().ok()?),
            None => (formula.as_str(), 0),
        };
        let (count, sides) = match dice.split_once('d') {
            Some((count, sides)) => (if count.is_empty() { 1 } else { count.parse::<u64>().ok()? }, sides.parse::<u64>().ok()?),
            None => (1, dice.parse::<u64>().ok()?),
        };
        if sides == 0 {
            return None;
        }
        let (count_used, sides_used) = (count.min(MAX_DICE), sides.min(MAX_SIDES));
        if (count_used, sides_used) != (count, sides) {
            self.notes.push(format!("{{{{roll:{formula}}}}} was limited to {count_used}d{sides_used}"));
        }
        let mut total: i64 = modifier;
        for _ in 0..count_used {
            total = total.saturating_add(self.rng.u64(1..=sides_used) as i64);
        }
        Some(total.to_string())
    }
}

/// The chat-variable macros, local and global.
const VARIABLE_MACROS: &[&str] =
    &["setvar", "getvar", "addvar", "incvar", "decvar", "setglobalvar", "getglobalvar", "addglobalvar", "incglobalvar", "decglobalvar"];

/// `addvar`: a sum when both sides read as numbers (an unset variable is 0), else the
/// text appended, as SillyTavern adds.
fn add(current: &str, value: &str) -> String {
    let number = |s: &str| if s.trim().is_empty() { Some(0.0) } else { s.trim().parse::<f64>().ok().filter(|n| n.is_finite()) };
    match (number(current), value.trim().parse::<f64>().ok().filter(|n| n.is_finite())) {
        (Some(a), Some(b)) => {
            let sum = a + b;
            if sum.fract() == 0.0 && sum.abs() < 1e15 { format!("{}", sum as i64) } else { format!("{sum}") }
        }
        _ => format!("{current}{value}"),
    }
}

/// `text` cut to at most `max` bytes at a character boundary, and a note when it was.
fn bounded(mut text: String, max: usize) -> (String, Option<String>) {
    if text.len() <= max {
        return (text, None);
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    (text, Some(format!("a variable's value was cut at {max} bytes")))
}

/// Macros inside one macro, at most (deeper text is left to the first `}}` rule).
const MAX_NESTING: usize = 8;

/// Where the `}}` that closes a macro opened just before `text` is, counting the `{{`
/// and `}}` of macros inside it; `None` when it is never closed or nests too deep.
fn matching_close(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let (mut open, mut i) = (1usize, 0usize);
    while i + 1 < bytes.len() {
        match (bytes[i], bytes[i + 1]) {
            (b'{', b'{') => {
                open += 1;
                if open > MAX_NESTING {
                    return None;
                }
                i += 2;
            }
            (b'}', b'}') => {
                open -= 1;
                if open == 0 {
                    return Some(i);
                }
                i += 2;
            }
            _ => i += 1,
        }
    }
    None
}

/// The `{{random}}` seed of a chat's greeting: the same each time the greeting is read
/// (shown, sent, exported) before the chat keeps it, as SillyTavern fills a greeting
/// once when the chat opens; `stable` is the character's id.
pub fn greeting_seed(stable: &str) -> u64 {
    stable_hash(stable, "greeting", 0)
}

fn stable_hash(seed: &str, body: &str, n: u64) -> u64 {
    // FNV-1a: stable across runs and builds, unlike the standard library's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seed.bytes().chain([0]).chain(body.bytes()).chain(n.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

fn idle_words(idle: Option<Duration>) -> String {
    let Some(idle) = idle else { return "just now".into() };
    let minutes = idle.as_secs() / 60;
    let plural = |n: u64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    match minutes {
        0 => "just now".into(),
        1..=59 => plural(minutes, "minute"),
        60..=1439 => plural(minutes / 60, "hour"),
        1440..=43_199 => plural(minutes / 1440, "day"),
        43_200..=525_599 => plural(minutes / 43_200, "month"),
        _ => plural(minutes / 525_600, "year"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn ctx() -> MacroContext<'static> {
        MacroContext {
            char: "Seraphina",
            user: "Kit",
            persona: "a courier who asks {{char}} too many questions",
            description: "{{char}} is a forest guardian who watches over {{user}}.",
            personality: "gentle, protective",
            scenario: "{{user}} wakes in {{char}}'s glade.",
            mes_examples: "<START>\n{{user}}: Who are you?\n{{char}}: A friend.",
            original: "Write {{char}}'s next reply.",
            char_prompt: "{{char}} speaks softly.",
            char_instruction: "Stay in the glade.",
            last_message: "Where am I?",
            idle: Some(Duration::from_secs(3 * 3600 + 60)),
            now: Local.with_ymd_and_hms(2026, 11, 23, 15, 7, 0).single(),
            stable_seed: "chat-1",
            random_seed: Some(7),
            variables: None,
            outlets: None,
            input: "Where am I?",
            last_user_message: "Where am I?",
            last_char_message: "In my glade.",
            last_message_id: Some(4),
            first_included_message_id: Some(0),
            max_prompt: Some(8192),
        }
    }

    /// `{{outlet::Name}}` puts in what fired for that outlet, highest order first; an
    /// outlet nothing fired for, or a prompt with no lore, is empty.
    #[test]
    fn an_outlet_is_the_content_of_its_fired_entries() {
        let outlets = collect_outlets([("weather", "low"), ("", "nameless"), ("weather", "high"), ("Mood", "calm"), ("Mood", " ")]);
        assert_eq!(outlets.len(), 2);
        let with = MacroContext { outlets: Some(&outlets), ..ctx() };
        assert_eq!(expand("Sky: {{outlet::weather}}.", &with).text, "Sky: high\nlow.");
        assert_eq!(expand("{{outlet:: Mood }}/{{OUTLET::mood}}/{{outlet::none}}", &with).text, "calm//");
        // Before the lore fired the macro waits, as written, to be filled after.
        let early = expand("[{{outlet::weather}}] {{char}}", &ctx()).text;
        assert_eq!(early, "[{{outlet::weather}}] Seraphina");
        assert_eq!(fill_outlets(&early, &outlets), "[high\nlow] Seraphina");
        assert_eq!(fill_outlets("{{Outlet:Mood}}|{{outlet::gone}}|{{char}}", &outlets), "calm||{{char}}");
    }

    /// `{{time_UTC+2}}`: the time at that offset from UTC, as `{{time}}` writes it.
    #[test]
    fn time_at_a_utc_offset() {
        let c = ctx();
        let want = c.now.unwrap().with_timezone(&chrono::FixedOffset::east_opt(2 * 3600).unwrap()).format("%-I:%M %p").to_string();
        assert_eq!(expand("{{time_UTC+2}}", &c).text, want);
        let want = c.now.unwrap().with_timezone(&chrono::FixedOffset::west_opt(5 * 3600).unwrap()).format("%-I:%M %p").to_string();
        assert_eq!(expand("{{time_UTC-5}}", &c).text, want);
    }

    /// One case per macro: the text, and what it expands to.
    #[test]
    fn each_macro_expands_as_sillytavern_does() {
        let cases: &[(&str, &str)] = &[
            ("{{char}} and {{user}}", "Seraphina and Kit"),
            ("{{CHAR}} / {{User}}", "Seraphina / Kit"),
            ("<BOT> greets <USER>", "Seraphina greets Kit"),
            ("{{persona}}", "a courier who asks Seraphina too many questions"),
            ("{{description}}", "Seraphina is a forest guardian who watches over Kit."),
            ("{{personality}}", "gentle, protective"),
            ("{{scenario}}", "Kit wakes in Seraphina's glade."),
            ("{{mesExamples}}", "<START>\nKit: Who are you?\nSeraphina: A friend."),
            ("Rules. {{original}}", "Rules. Write Seraphina's next reply."),
            ("{{charPrompt}}", "Seraphina speaks softly."),
            ("{{charInstruction}} {{charJailbreak}}", "Stay in the glade. Stay in the glade."),
            ("a{{noop}}b", "ab"),
            ("{{reverse:glade}}", "edalg"),
            ("no {{banned \"forest\"}}words", "no words"),
            ("{{lastMessage}}", "Where am I?"),
            ("{{input}} / {{lastUserMessage}} / {{lastCharMessage}}", "Where am I? / Where am I? / In my glade."),
            ("{{lastMessageId}} {{firstIncludedMessageId}} {{maxPrompt}}", "4 0 8192"),
            ("{{charIfNotGroup}} of {{group}} greets <CHAR>", "Seraphina of Seraphina greets Seraphina"),
            ("{{isodate}} {{isotime}}", "2026-11-23 15:07"),
            ("{{roll 1d1+4}}", "5"),
            ("{{time_UTC+99}}", "{{time_UTC+99}}"),
            ("It is {{time}}", "It is 3:07 PM"),
            ("{{date}}", "November 23, 2026"),
            ("{{weekday}}", "Monday"),
            ("away {{idle_duration}}", "away 3 hours"),
            ("a{{newline}}b", "a\nb"),
            ("keep {{// a note to myself}}this", "keep this"),
            ("line one\n\n{{trim}}\n\nline two", "line oneline two"),
            ("{{unknown_macro}} and {{user}}", "{{unknown_macro}} and Kit"),
            ("{{roll:1d1+4}}", "5"),
            ("{{roll:d1}}", "1"),
            ("{{roll:3}}", "1"),
            ("{{roll:abc}}", "{{roll:abc}}"),
            ("{{random:red}}", "red"),
            ("{{random::only one}}", "only one"),
            ("{{pick:a\\, b}}", "a, b"),
            ("unclosed {{char", "unclosed {{char"),
            ("{{random::{{user}}'s oldest friend}}", "Kit's oldest friend"),
            ("{{random::Hello {{user}}!::Hello {{user}}!}}", "Hello Kit!"),
            ("{{roll:{{roll:d1}}d1+1}}", "2"),
            ("{{mine::{{char}}}} stays", "{{mine::Seraphina}} stays"),
            ("{{random::a {{b}}", "a {{b"),
        ];
        let mut failures = Vec::new();
        for (input, want) in cases {
            let got = expand(input, &ctx()).text;
            if got != *want && !(input.starts_with("{{roll:3}}") && (1..=3).contains(&got.parse::<u32>().unwrap_or(0))) {
                failures.push(format!("{input:?} -> {got:?}, want {want:?}"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn random_picks_from_the_list_and_pick_is_stable_per_chat() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..64 {
            let got = expand("{{random:red,green,blue}}", &MacroContext { random_seed: Some(seed), ..ctx() }).text;
            assert!(["red", "green", "blue"].contains(&got.as_str()), "{got}");
            seen.insert(got);
        }
        assert_eq!(seen.len(), 3, "every item comes up");
        let picks: Vec<String> =
            (0..8).map(|seed| expand("{{pick:oak,ash,elm,yew}}", &MacroContext { random_seed: Some(seed), ..ctx() }).text).collect();
        assert!(picks.windows(2).all(|w| w[0] == w[1]), "a pick is the same whatever the random seed: {picks:?}");
        let other = (0..16).any(|n| {
            let id = format!("chat-{n}");
            expand("{{pick:oak,ash,elm,yew}}", &MacroContext { stable_seed: &id, ..ctx() }).text != picks[0]
        });
        assert!(other, "another chat can pick otherwise");
    }

    #[test]
    fn variables_are_set_read_and_counted_as_sillytavern_does() {
        let vars = RefCell::new(Variables::default());
        let with = MacroContext { variables: Some(&vars), ..ctx() };
        let said = |text: &str| expand(text, &with).text;
        assert_eq!(said("{{setvar::mood::wary}}mood: {{getvar::mood}}"), "mood: wary");
        assert_eq!(said("unset: [{{getvar::nothing}}]"), "unset: []");
        assert_eq!(said("{{incvar::visits}} {{incvar::visits}} {{decvar::visits}}"), "1 2 1");
        assert_eq!(said("{{addvar::visits::2.5}}{{getvar::visits}}"), "3.5");
        assert_eq!(said("{{addvar::mood:: and tired}}{{getvar::mood}}"), "wary and tired");
        assert_eq!(said("{{setglobalvar::day::Tuesday}}{{getglobalvar::day}} / {{getvar::day}}"), "Tuesday / ");
        // Another text of the same prompt reads what the first one set.
        assert_eq!(said("{{char}} feels {{getvar::mood}}"), "Seraphina feels wary and tired");
        assert_eq!(vars.borrow().local.get("visits").map(String::as_str), Some("3.5"));
        assert_eq!(vars.borrow().global.get("day").map(String::as_str), Some("Tuesday"));
        // A value made of macros is stored expanded; a malformed one stays as written.
        assert_eq!(said("{{setvar::met::{{user}}}}{{getvar::met}}"), "Kit");
        assert_eq!(said("{{setvar:mood:calm}} {{getvar::mood}}"), "{{setvar:mood:calm}} wary and tired");
        assert_eq!(said("{{getvar::}}"), "{{getvar::}}");
        // Without a store lent by the caller, a text still has variables of its own.
        assert_eq!(expand("{{setvar::x::5}}{{incvar::x}}", &ctx()).text, "6");
        assert_eq!(expand("[{{getvar::x}}]", &ctx()).text, "[]");
        // A value too long is cut, and said.
        let out = expand(&format!("{{{{setvar::big::{}}}}}", "x".repeat(MAX_VARIABLE_BYTES + 10)), &with);
        assert_eq!(vars.borrow().local["big"].len(), MAX_VARIABLE_BYTES);
        assert!(out.notes.iter().any(|n| n.contains("cut at")), "{:?}", out.notes);
    }

    #[test]
    fn expansion_is_bounded() {
        // A field that names itself does not loop.
        let looping = MacroContext { description: "{{description}}!", ..ctx() };
        let out = expand("{{description}}", &looping);
        assert_eq!(out.text, "{{description}}!!!", "expanded {MAX_DEPTH} levels deep, then left as written");
        assert!(out.notes.iter().any(|n| n.contains("nested too deep")), "{:?}", out.notes);
        // A huge list and a huge roll are cut down, and say so.
        let list = format!("{{{{random:{}}}}}", (0..10_000).map(|i| i.to_string()).collect::<Vec<_>>().join(","));
        let out = expand(&list, &ctx());
        assert!(out.text.parse::<u32>().is_ok_and(|n| n < MAX_CHOICES as u32), "{}", out.text);
        assert!(out.notes[0].contains("10000 items"));
        let started = std::time::Instant::now();
        let out = expand("{{roll:999999d999999}}", &ctx());
        assert!(started.elapsed() < Duration::from_secs(1));
        let total: u64 = out.text.parse().unwrap();
        assert!((MAX_DICE..=MAX_DICE * MAX_SIDES).contains(&total));
        assert!(out.notes[0].contains("limited to 1000d999999"), "{:?}", out.notes);
        // Output cannot explode.
        let wide = MacroContext { description: &"x".repeat(100_000), ..ctx() };
        let out = expand(&"{{description}}".repeat(50), &wide);
        assert!(out.text.len() <= MAX_OUTPUT);
        assert!(out.notes.iter().any(|n| n.contains("cut at")));
    }
}
