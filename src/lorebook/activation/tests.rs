//! Data-driven tests: each case is entries, messages and, per entry, the expected outcome
//! in a short text form (see [`describe`]).

use super::*;
use crate::lorebook::{EntryId, InsertionPosition, LoreEntry, SelectiveLogic};

/// An entry with id `id`, primary keys separated by `|`, and content.
fn e(id: i64, keys: &str, content: &str) -> LoreEntry {
    LoreEntry {
        id: Some(EntryId::Number(id)),
        keys: keys.split('|').filter(|k| !k.is_empty()).map(str::to_string).collect(),
        content: content.to_string(),
        ..Default::default()
    }
}

fn with(mut entry: LoreEntry, change: impl FnOnce(&mut LoreEntry)) -> LoreEntry {
    change(&mut entry);
    entry
}

fn id_of(entries: &[LoreEntry], i: usize) -> String {
    entries[i].id.as_ref().map(ToString::to_string).unwrap_or_default()
}

/// The outcome in a compact form that tests compare against.
fn describe(outcome: &Outcome, entries: &[LoreEntry]) -> String {
    match outcome {
        Outcome::Activated { trigger, pass, .. } => {
            let text = match trigger {
                Trigger::Constant => "constant".to_string(),
                Trigger::Forced => "forced".to_string(),
                Trigger::Decorator => "decorator".to_string(),
                Trigger::Sticky { .. } => "sticky".to_string(),
                Trigger::Key { key, source: Source::Chat } => format!("key {key}"),
                Trigger::Key { key, source: Source::Recursion { from } } => {
                    format!("key {key} from {}", id_of(entries, *from))
                }
                Trigger::Key { key, source } => format!("key {key} in {source:?}"),
                Trigger::Vector { similarity } => format!("vector {similarity}"),
            };
            if *pass > 0 { format!("{text} (pass {pass})") } else { text }
        }
        Outcome::Skipped { skip } => match skip {
            SkipReason::Disabled => "disabled".into(),
            SkipReason::DecoratorDontActivate => "dont_activate".into(),
            SkipReason::Trigger { generation } => format!("trigger {generation}"),
            SkipReason::CharacterFilter { character } => format!("filtered for {character}"),
            SkipReason::NoKeys => "no keys".into(),
            SkipReason::NoKeyMatched => "no match".into(),
            SkipReason::BadRegex { key, .. } => format!("bad regex {key}"),
            SkipReason::SecondaryLogic { primary, found, missing, .. } => {
                format!("secondary after {primary} found [{}] missing [{}]", found.join(","), missing.join(","))
            }
            SkipReason::ExcludeRecursion { key, from } => format!("exclude recursion {key} from {}", id_of(entries, *from)),
            SkipReason::DelayUntilRecursion { level } => format!("recursion level {level}"),
            SkipReason::Probability { .. } => "probability".into(),
            SkipReason::InclusionGroup { group, winner, pick } => {
                format!("group {group} to {} by {pick:?}", id_of(entries, *winner))
            }
            SkipReason::Cooldown { until } => format!("cooldown until {until}"),
            SkipReason::Delay { from } => format!("delay until {from}"),
            SkipReason::Budget { needed, used, budget } => format!("budget {needed}+{used}>{budget}"),
            SkipReason::TimeBudget { .. } => "time budget".into(),
            SkipReason::Cancelled => "cancelled".into(),
        },
    }
}

fn run_with(
    entries: &[LoreEntry],
    input: &ScanInput<'_>,
    state: &mut ActivationState,
    options: &ActivationOptions<'_>,
) -> (ActivationReport, Vec<String>) {
    let scan: Vec<ScanEntry<'_>> = entries.iter().enumerate().map(|(index, entry)| ScanEntry { book: "b", index, entry }).collect();
    let report = activate(&scan, input, state, options);
    let got = report.outcomes.iter().map(|o| describe(o, entries)).collect();
    (report, got)
}

/// Runs one message and compares every entry's outcome with `expected`.
fn check(entries: &[LoreEntry], messages: &[&str], options: &ActivationOptions<'_>, expected: &[&str]) {
    let input = ScanInput { messages: messages.to_vec(), message_number: 1, ..Default::default() };
    let (_, got) = run_with(entries, &input, &mut ActivationState::default(), options);
    assert_eq!(got, expected, "messages: {messages:?}");
}

fn words(text: &str) -> u32 {
    text.split_whitespace().count() as u32
}

#[test]
fn plain_keys_case_and_whole_words() {
    let entries = [
        e(1, "dragon", "x"),
        with(e(2, "dragon", "x"), |x| x.case_sensitive = Some(true)),
        with(e(3, "dragon", "x"), |x| x.match_whole_words = Some(true)),
        with(e(4, "red dragon", "x"), |x| x.match_whole_words = Some(true)),
        with(e(5, "Dragon", "x"), |x| x.case_sensitive = Some(true)),
        e(6, "wyvern|", "x"),
    ];
    // SillyTavern's shipped default is whole words: "dragon" is not in "DRAGONS".
    check(&entries[..1], &["The red DRAGONS sleep."], &ActivationOptions::default(), &["no match"]);
    let o = ActivationOptions { match_whole_words: false, ..Default::default() };
    check(&entries, &["The red DRAGONS sleep."], &o, &[
        "key dragon", "no match", "no match", "key red dragon", "no match", "no match",
    ]);
    check(&entries, &["A Dragon, at last."], &o, &[
        "key dragon", "no match", "key dragon", "no match", "key Dragon", "no match",
    ]);
    // Book-wide defaults apply where the entry says nothing.
    let strict = ActivationOptions { case_sensitive: true, match_whole_words: true, ..Default::default() };
    check(&entries, &["dragonfly over the Dragon"], &strict, &[
        "no match", "no match", "no match", "no match", "key Dragon", "no match",
    ]);
    // Unicode letters are word characters: "café" is not a whole word inside "cafés".
    let cafe = [with(e(1, "café", "x"), |x| x.match_whole_words = Some(true))];
    check(&cafe, &["les cafés"], &o, &["no match"]);
    check(&cafe, &["au café!"], &o, &["key café"]);
}

#[test]
fn regex_keys_and_bad_regexes() {
    let entries = [
        e(1, "/dra+gon/i", "x"),
        e(2, "/dra+gon/", "x"),
        e(3, "/([/|knight", "x"),
        with(e(4, "^the", "x"), |x| x.use_regex = true),
        e(5, "/([/", "x"),
        with(e(6, "castle", "x"), |x| x.secondary_keys = vec!["/(unclosed/".into()]),
        // Look-ahead is JavaScript but not `regex` crate syntax: the backtracking engine runs it.
        e(7, "/knight(?!ly)/", "x"),
    ];
    let o = ActivationOptions::default();
    check(&entries, &["The DRAAGON and the knight"], &o, &[
        "key /dra+gon/i", "no match", "key knight", "key ^the", "bad regex /([/", "no match", "key /knight(?!ly)/",
    ]);
    check(&entries, &["castle"], &o, &[
        "no match", "no match", "bad regex /([/", "no match", "bad regex /([/", "bad regex /(unclosed/", "no match",
    ]);
    check(&entries[6..], &["knightly manners"], &ActivationOptions::default(), &["no match"]);
}

#[test]
fn secondary_keys_follow_selective_logic() {
    let logic = |id, l: SelectiveLogic| {
        with(e(id, "castle", "x"), |x| {
            x.secondary_keys = vec!["king".into(), "queen".into()];
            x.selective_logic = l;
        })
    };
    let entries = [
        logic(1, SelectiveLogic::AndAny),
        logic(2, SelectiveLogic::NotAll),
        logic(3, SelectiveLogic::NotAny),
        logic(4, SelectiveLogic::AndAll),
        with(logic(5, SelectiveLogic::NotAny), |x| x.selective = false),
    ];
    let o = ActivationOptions::default();
    check(&entries, &["the castle of the king"], &o, &[
        "key castle",
        "key castle",
        "secondary after castle found [king] missing [queen]",
        "secondary after castle found [king] missing [queen]",
        "key castle",
    ]);
    check(&entries, &["castle, king and queen"], &o, &[
        "key castle",
        "secondary after castle found [king,queen] missing []",
        "secondary after castle found [king,queen] missing []",
        "key castle",
        "key castle",
    ]);
    check(&entries, &["an empty castle"], &o, &[
        "secondary after castle found [] missing [king,queen]",
        "key castle",
        "key castle",
        "secondary after castle found [] missing [king,queen]",
        "key castle",
    ]);
    check(&entries, &["the king alone"], &o, &["no match"; 5]);
}

/// SillyTavern's filter holds tag ids and avatar file names and matches them exactly; a
/// filter written here holds names and matches them case aside (`CharacterFilter`).
#[test]
fn a_character_filter_from_sillytavern_matches_ids_exactly_and_one_written_here_by_name() {
    let doc = serde_json::json!({"entries": {
        "0": {"uid": 0, "key": ["gate"], "content": "only tagged", "characterFilter": {"isExclude": false, "names": [], "tags": ["villain"]}},
        "1": {"uid": 1, "key": ["gate"], "content": "never tagged", "characterFilter": {"isExclude": true, "names": [], "tags": ["5b1c2a9e-0d7e-4c1f-9a44-1f0e2f3a4b5c"]}},
        "2": {"uid": 2, "key": ["gate"], "content": "only tagged by id", "characterFilter": {"isExclude": false, "names": [], "tags": [1712345678901_u64]}},
        "3": {"uid": 3, "key": ["gate"], "content": "only for her file", "characterFilter": {"isExclude": false, "names": ["tomas"], "tags": []}},
    }});
    let book = crate::interop::format::world_info::decode_world_info(doc).unwrap();
    let mut entries = book.entries.clone();
    assert!(entries[0].filter_as_read().tags_as_read && entries[3].filter_as_read().names_as_read);
    // The same lists written here (the editor changed them) are names.
    let mut here = entries.clone();
    for x in &mut here {
        x.source = None;
    }
    entries.extend(here);
    let input = ScanInput {
        messages: vec!["at the gate"],
        message_number: 1,
        character: Some(CharacterRef { name: "Tomas", tags: vec!["Villain"] }),
        ..Default::default()
    };
    let (_, got) = run_with(&entries, &input, &mut ActivationState::default(), &ActivationOptions::default());
    assert_eq!(got, [
        // As read from SillyTavern: exact, so "villain" is not "Villain", an id is no name.
        "filtered for Tomas",
        "key gate",
        "filtered for Tomas",
        "filtered for Tomas",
        // Written here: names, case aside.
        "key gate",
        "key gate",
        "filtered for Tomas",
        "key gate",
    ]);
    // An edited list is the editor's: the same entry with its tags chosen again by name.
    let mut edited = book.entries[2].clone();
    edited.character_filter.tags = vec!["villain".into()];
    assert!(!edited.filter_as_read().tags_as_read);
    let (_, got) = run_with(&[edited], &input, &mut ActivationState::default(), &ActivationOptions::default());
    assert_eq!(got, ["key gate"]);
}

#[test]
fn constant_disabled_keyless_decorators_triggers_filters_and_forced() {
    let entries = [
        e(1, "", "always"),
        with(e(2, "", "always"), |x| x.constant = true),
        with(e(3, "gate", "x"), |x| x.enabled = false),
        with(e(4, "gate", "x"), |x| x.constant = true),
        e(5, "", "@@activate\nforced by decorator"),
        e(6, "gate", "@@dont_activate\nnever"),
        with(e(7, "gate", "x"), |x| x.triggers = vec!["continue".into()]),
        with(e(8, "gate", "x"), |x| x.character_filter.names = vec!["Mira".into()]),
        with(e(9, "gate", "x"), |x| {
            x.character_filter.is_exclude = true;
            x.character_filter.tags = vec!["villain".into()];
        }),
        e(10, "nowhere", "x"),
        with(e(11, "gate", "x"), |x| {
            x.constant = true;
            x.enabled = false;
        }),
    ];
    let input = ScanInput {
        messages: vec!["at the gate"],
        message_number: 1,
        character: Some(CharacterRef { name: "Tomas", tags: vec!["Villain"] }),
        forced: vec![9],
        ..Default::default()
    };
    let (_, got) = run_with(&entries, &input, &mut ActivationState::default(), &ActivationOptions::default());
    assert_eq!(got, [
        "no keys",
        "constant",
        "disabled",
        "constant",
        "decorator",
        "dont_activate",
        "trigger normal",
        "filtered for Tomas",
        "filtered for Tomas",
        "forced",
        "disabled",
    ]);
    let input = ScanInput { generation: &["continue"], character: Some(CharacterRef { name: "mira", tags: vec![] }), ..input };
    let (_, got) = run_with(&entries[6..9], &input, &mut ActivationState::default(), &ActivationOptions::default());
    assert_eq!(got, ["key gate", "key gate", "key gate"]);
}

#[test]
fn scan_depth_per_entry_and_default() {
    let entries = [
        e(1, "relic", "x"),
        with(e(2, "relic", "x"), |x| x.scan_depth = Some(3)),
        with(e(3, "relic", "x"), |x| x.scan_depth = Some(0)),
        with(e(4, "/rel+ic/", "x"), |x| x.scan_depth = Some(3)),
        e(5, "/rel+ic/", "x"),
    ];
    let messages = ["an old relic", "second", "newest"];
    check(&entries, &messages, &ActivationOptions::default(), &["no match", "key relic", "no match", "key /rel+ic/", "no match"]);
    let deep = ActivationOptions { scan_depth: 5, ..Default::default() };
    check(&entries, &messages, &deep, &["key relic", "key relic", "no match", "key /rel+ic/", "key /rel+ic/"]);
}

#[test]
fn recursion_exclude_prevent_and_delay() {
    let entries = [
        e(1, "castle", "The king lives here."),
        e(2, "king", "He fears the queen."),
        with(e(3, "king", "x"), |x| x.exclude_recursion = true),
        with(e(4, "castle", "The jester juggles."), |x| x.prevent_recursion = true),
        e(5, "jester", "x"),
        with(e(6, "castle", "x"), |x| x.delay_until_recursion = 1),
        e(7, "queen", "x"),
        with(e(8, "castle", "x"), |x| x.delay_until_recursion = 3),
    ];
    check(&entries, &["We reach the castle."], &ActivationOptions::default(), &[
        "key castle",
        "key king from 1 (pass 1)",
        "exclude recursion king from 1",
        "key castle",
        "no match",
        "key castle (pass 1)",
        "key queen from 2 (pass 2)",
        // Level 3 opens only after a pass (3) that found nothing new.
        "key castle (pass 4)",
    ]);
    let flat = ActivationOptions { recursive: false, ..Default::default() };
    check(&entries, &["We reach the castle."], &flat, &[
        "key castle",
        "no match",
        "no match",
        "key castle",
        "no match",
        "recursion level 1",
        "no match",
        "recursion level 3",
    ]);
    let one = ActivationOptions { max_recursion_steps: 1, ..Default::default() };
    check(&entries, &["We reach the castle."], &one, &[
        "key castle",
        "key king from 1 (pass 1)",
        "exclude recursion king from 1",
        "key castle",
        "no match",
        "key castle (pass 1)",
        "no match",
        "recursion level 3",
    ]);
}

/// SillyTavern opens the lowest delay level with the first recursion pass and stops when
/// a pass adds nothing: a delayed entry never fires without real recursion.
#[test]
fn delay_until_recursion_waits_for_real_recursion() {
    let lone = [with(e(1, "moon", "x"), |x| x.delay_until_recursion = 1), e(2, "star", "x")];
    check(&lone, &["the moon rises"], &ActivationOptions::default(), &["recursion level 1", "no match"]);
    // With recursion, the lowest level (here 2) is open from the first recursion pass.
    let deep = [with(e(1, "moon", "x"), |x| x.delay_until_recursion = 2), e(2, "star", "the moon")];
    check(&deep, &["a star"], &ActivationOptions::default(), &["key moon from 2 (pass 1)", "key star"]);
    // Two levels: the second opens once a pass adds nothing, even without recursion, and
    // then every entry delayed up to it may fire (as in SillyTavern).
    let two = [
        with(e(1, "moon", "x"), |x| x.delay_until_recursion = 1),
        with(e(2, "moon", "x"), |x| x.delay_until_recursion = 2),
    ];
    check(&two, &["the moon"], &ActivationOptions::default(), &["key moon (pass 1)", "key moon (pass 1)"]);
}

/// SillyTavern substitutes macros in every key before matching: `{{char}}` and
/// `{{user}}` find the names of this call, in the chat and in recursion.
#[test]
fn macros_in_keys_stand_for_the_call_s_names() {
    let entries = [
        e(1, "{{char}}", "x"),
        e(2, "{{user}}", "x"),
        with(e(3, "<BOT>'s ship", "x"), |x| x.match_whole_words = Some(true)),
        e(4, "/{{user}}\\s+waves/", "x"),
        with(e(5, "gate", "x"), |x| {
            x.selective = true;
            x.secondary_keys = vec!["{{char}}".into()];
        }),
        with(e(6, "gate", "x"), |x| {
            x.selective = true;
            x.secondary_keys = vec!["{{user}}'s ship".into()];
        }),
    ];
    let macros = crate::prompting::MacroContext { char: "Wren", user: "Ada", ..Default::default() };
    let expand = |key: &str| crate::prompting::expand(key, &macros).text;
    let o = ActivationOptions { macros: Some(&expand), ..Default::default() };
    check(&entries, &["Ada waves at wren's ship by the gate"], &o, &[
        "key {{char}}",
        "key {{user}}",
        "key <BOT>'s ship",
        "key /{{user}}\\s+waves/",
        "key gate",
        "secondary after gate found [] missing [{{user}}'s ship]",
    ]);
    // Recursion: the name in another entry's content.
    let chain = [e(1, "gate", "Wren opens it."), e(2, "{{char}}", "x")];
    check(&chain, &["the gate"], &o, &["key gate", "key {{char}} from 1 (pass 1)"]);
    // Without names the macro stays as written and does not match the text.
    check(&chain, &["the gate"], &ActivationOptions::default(), &["key gate", "no match"]);
}

#[test]
fn probability_rolls_are_seeded_and_respect_use_probability() {
    let entries = [
        with(e(1, "dice", "x"), |x| x.probability = 0),
        with(e(2, "dice", "x"), |x| {
            x.probability = 0;
            x.use_probability = false;
        }),
        with(e(3, "dice", "x"), |x| x.probability = 100),
    ];
    check(&entries, &["roll the dice"], &ActivationOptions::default(), &["probability", "key dice", "key dice"]);

    let many: Vec<LoreEntry> = (0..400).map(|i| with(e(i, "dice", "x"), |x| x.probability = 25)).collect();
    let input = ScanInput { messages: vec!["dice"], message_number: 7, ..Default::default() };
    let fired = |seed| {
        let options = ActivationOptions { seed, ..Default::default() };
        let (report, _) = run_with(&many, &input, &mut ActivationState::default(), &options);
        report.activated.iter().map(|a| a.index).collect::<Vec<_>>()
    };
    assert_eq!(fired(42), fired(42), "same seed, same rolls");
    assert_ne!(fired(42), fired(43), "another seed, other rolls");
    let count = fired(42).len();
    assert!((60..=140).contains(&count), "about a quarter of 400 should fire, got {count}");
}

#[test]
fn inclusion_groups_override_weight_score_and_earlier_pass() {
    let member = |id, order, change: fn(&mut LoreEntry)| {
        with(e(id, "gate", "x"), |x| {
            x.group = "guards".into();
            x.insertion_order = order;
            change(x);
        })
    };
    let overrides = [
        member(1, 10, |_| {}),
        member(2, 5, |x| x.group_override = true),
        member(3, 8, |x| x.group_override = true),
        e(4, "gate", "x"),
    ];
    check(&overrides, &["the gate"], &ActivationOptions::default(), &[
        "group guards to 3 by Override",
        "group guards to 3 by Override",
        "key gate",
        "key gate",
    ]);

    let weighted = [member(1, 10, |x| x.group_weight = 0), member(2, 5, |_| {}), member(3, 1, |x| x.group_weight = 0)];
    for seed in 0..20 {
        let o = ActivationOptions { seed, ..Default::default() };
        check(&weighted, &["the gate"], &o, &["group guards to 2 by Weighted", "key gate", "group guards to 2 by Weighted"]);
    }

    let scored = [
        member(1, 50, |_| {}),
        member(2, 1, |x| x.keys.push("tower".into())),
        member(3, 1, |x| x.keys.push("moat".into())),
    ];
    let o = ActivationOptions { group_scoring: true, ..Default::default() };
    check(&scored, &["the gate and the tower"], &o, &["group guards to 2 by Score", "key gate", "group guards to 2 by Score"]);

    // Mixed flags: only scored members below the best score drop out; a member without
    // scoring stays in the weighted pick (here the only one with weight).
    let mixed = [
        member(1, 1, |x| x.use_group_scoring = Some(false)),
        member(2, 1, |x| {
            x.keys.push("tower".into());
            x.use_group_scoring = Some(true);
            x.group_weight = 0;
        }),
        member(3, 1, |x| x.use_group_scoring = Some(true)),
    ];
    check(&mixed, &["the gate and the tower"], &ActivationOptions::default(), &[
        "key gate",
        "group guards to 1 by Weighted",
        "group guards to 2 by Score",
    ]);

    // A member fired by recursion loses to the member that fired in the first pass.
    let passes = [member(1, 1, |x| x.content = "a tower".into()), with(member(2, 100, |_| {}), |x| x.keys = vec!["tower".into()])];
    check(&passes, &["the gate"], &ActivationOptions::default(), &["key gate", "group guards to 1 by EarlierPass"]);
}

/// Runs consecutive messages through one state, returning entry 0's outcome for each.
fn timeline(entry: LoreEntry, messages: &[(u64, &str)]) -> Vec<String> {
    let entries = [entry];
    let mut state = ActivationState::default();
    messages
        .iter()
        .map(|(number, text)| {
            let input = ScanInput { messages: vec![text], message_number: *number, ..Default::default() };
            let (_, got) = run_with(&entries, &input, &mut state, &ActivationOptions::default());
            // The state survives a trip through JSON, as the scene engine stores it.
            let json = serde_json::to_string(&state).unwrap_or_default();
            state = serde_json::from_str(&json).unwrap_or_default();
            got[0].clone()
        })
        .collect()
}

#[test]
fn sticky_cooldown_and_delay_count_messages() {
    // An effect set at message 10 with value 2 ends at 12: in force for 11 only.
    let sticky = with(e(1, "storm", "x"), |x| x.sticky = Some(2));
    assert_eq!(timeline(sticky, &[(10, "storm"), (11, "calm"), (12, "calm"), (13, "storm")]), [
        "key storm", "sticky", "no match", "key storm",
    ]);
    let cooldown = with(e(1, "storm", "x"), |x| x.cooldown = Some(2));
    assert_eq!(timeline(cooldown, &[(10, "storm"), (11, "storm"), (12, "storm"), (13, "storm")]), [
        "key storm",
        "cooldown until 11",
        "key storm",
        "cooldown until 13",
    ]);
    // Only an entry that would have fired is said to be cooling down.
    let cooling = with(e(1, "storm", "x"), |x| x.cooldown = Some(2));
    assert_eq!(timeline(cooling, &[(10, "storm"), (11, "calm")]), ["key storm", "no match"]);
    // A sticky end starts the cooldown where it was seen, in force at once.
    let both = with(e(1, "storm", "x"), |x| {
        x.sticky = Some(2);
        x.cooldown = Some(1);
    });
    assert_eq!(timeline(both, &[(10, "storm"), (11, "calm"), (12, "storm"), (13, "storm")]), [
        "key storm",
        "sticky",
        "cooldown until 12",
        "key storm",
    ]);
    let delayed = with(e(1, "storm", "x"), |x| x.delay = Some(5));
    assert_eq!(timeline(delayed.clone(), &[(3, "storm"), (4, "storm"), (5, "storm")]), ["delay until 5", "delay until 5", "key storm"]);
    // Only an entry that would have fired is said to be delayed.
    assert_eq!(timeline(delayed, &[(3, "calm")]), ["no match"]);
    let constant = with(e(1, "", "x"), |x| {
        x.constant = true;
        x.delay = Some(2);
    });
    assert_eq!(timeline(constant, &[(1, "calm"), (2, "calm")]), ["delay until 2", "constant"]);
    // Rewinding the chat (a message number not past an effect's start) forgets it.
    let rewound = with(e(1, "storm", "x"), |x| x.cooldown = Some(5));
    assert_eq!(timeline(rewound, &[(10, "storm"), (11, "storm"), (9, "storm"), (10, "storm")]), [
        "key storm",
        "cooldown until 14",
        "key storm",
        "cooldown until 13",
    ]);
    // A sticky entry ignores probability while it sticks.
    let lucky = with(e(1, "storm", "x"), |x| {
        x.sticky = Some(3);
        x.probability = 0;
    });
    assert_eq!(timeline(lucky, &[(1, "storm")]), ["probability"]);
    let mut state = ActivationState::default();
    let effect = TimedEffect { start: 1, end: 4, protected: false };
    state.timers.insert("b/1".into(), EntryTimer { sticky: Some(effect), cooldown: None });
    let entries = [with(e(1, "storm", "x"), |x| {
        x.probability = 0;
        x.sticky = Some(3);
    })];
    let input = ScanInput { messages: vec!["calm"], message_number: 2, ..Default::default() };
    let (_, got) = run_with(&entries, &input, &mut state, &ActivationOptions::default());
    assert_eq!(got, ["sticky"]);
}

/// A chat as SillyTavern counts it: the greeting is message 1 and every exchange adds two
/// (its user message and the reply), so the lore of exchange `n` is activated at length
/// `2n`. Each row is what entry 0 did on the exchanges 1–6, the key present in every
/// message unless the row says otherwise; the expectations were worked out step by step
/// from SillyTavern's `WorldInfoTimedEffects` (an effect set at length `L` ends at
/// `L + N`, a sticky end starts a protected cooldown, the checks run before the scan).
#[test]
fn timed_effects_over_exchanges_match_sillytavern_for_values_one_to_four() {
    let exchanges = |entry: LoreEntry, keyed: &[bool]| {
        let turns: Vec<(u64, &str)> = keyed.iter().enumerate().map(|(n, k)| (2 * (n as u64 + 1), if *k { "storm" } else { "calm" })).collect();
        timeline(entry, &turns)
            .into_iter()
            .map(|o| match o.as_str() {
                "key storm" => "key",
                "sticky" => "sticky",
                "no match" => "-",
                o if o.starts_with("cooldown") => "cool",
                o if o.starts_with("delay") => "delay",
                _ => "?",
            })
            .collect::<Vec<_>>()
    };
    let once = [true, false, false, false, false, false];
    let always = [true; 6];
    let sticky = |n: u32| with(e(1, "storm", "x"), |x| x.sticky = Some(n));
    // Sticky 1 and 2 end before the next exchange; 3 and 4 hold one more; 5 two.
    assert_eq!(exchanges(sticky(1), &once), ["key", "-", "-", "-", "-", "-"]);
    assert_eq!(exchanges(sticky(2), &once), ["key", "-", "-", "-", "-", "-"]);
    assert_eq!(exchanges(sticky(3), &once), ["key", "sticky", "-", "-", "-", "-"]);
    assert_eq!(exchanges(sticky(4), &once), ["key", "sticky", "-", "-", "-", "-"]);
    assert_eq!(exchanges(sticky(5), &once), ["key", "sticky", "sticky", "-", "-", "-"]);
    // A sticky entry whose key stays keeps its first effect: it ends, then fires afresh.
    assert_eq!(exchanges(sticky(3), &always), ["key", "sticky", "key", "sticky", "key", "sticky"]);
    // Cooldown 1 and 2 are over by the next exchange; 3 and 4 hold one exchange off.
    let cooldown = |n: u32| with(e(1, "storm", "x"), |x| x.cooldown = Some(n));
    assert_eq!(exchanges(cooldown(1), &always), ["key"; 6]);
    assert_eq!(exchanges(cooldown(2), &always), ["key"; 6]);
    assert_eq!(exchanges(cooldown(3), &always), ["key", "cool", "key", "cool", "key", "cool"]);
    assert_eq!(exchanges(cooldown(4), &always), ["key", "cool", "key", "cool", "key", "cool"]);
    // Both: the cooldown starts where the sticky end is seen and holds at least that exchange.
    let both = |s: u32, c: u32| {
        with(e(1, "storm", "x"), |x| {
            x.sticky = Some(s);
            x.cooldown = Some(c);
        })
    };
    assert_eq!(exchanges(both(1, 1), &always), ["key", "cool", "key", "cool", "key", "cool"]);
    assert_eq!(exchanges(both(2, 2), &always), ["key", "cool", "key", "cool", "key", "cool"]);
    assert_eq!(exchanges(both(3, 1), &always), ["key", "sticky", "cool", "key", "sticky", "cool"]);
    assert_eq!(exchanges(both(3, 3), &always), ["key", "sticky", "cool", "cool", "key", "sticky"]);
    assert_eq!(exchanges(both(4, 4), &always), ["key", "sticky", "cool", "cool", "key", "sticky"]);
    assert_eq!(exchanges(both(2, 4), &once), ["key", "-", "-", "-", "-", "-"]);
    // Delay counts the chat's length: 4 holds the first exchange (length 2) only.
    let delay = |n: u32| with(e(1, "storm", "x"), |x| x.delay = Some(n));
    assert_eq!(exchanges(delay(1), &always)[0], "key");
    assert_eq!(exchanges(delay(2), &always)[0], "key");
    assert_eq!(exchanges(delay(3), &always)[..2], ["delay", "key"]);
    assert_eq!(exchanges(delay(4), &always)[..2], ["delay", "key"]);
    // Delay and cooldown together: the delay is said first, then the cooldown counts.
    let late = with(e(1, "storm", "x"), |x| {
        x.delay = Some(4);
        x.cooldown = Some(3);
        x.sticky = Some(3);
    });
    assert_eq!(exchanges(late, &always), ["delay", "key", "sticky", "cool", "cool", "key"]);
}

/// A redraw of the same message (a swipe) drops what the first draw set, as SillyTavern
/// drops an unprotected effect whose chat did not advance; a cooldown a sticky end started
/// is protected and holds the redraw too.
#[test]
fn a_redraw_of_the_same_message_starts_from_the_effects_before_it() {
    let entry = with(e(1, "storm", "x"), |x| {
        x.sticky = Some(3);
        x.cooldown = Some(3);
    });
    assert_eq!(timeline(entry.clone(), &[(2, "storm"), (2, "calm"), (2, "storm")]), ["key storm", "no match", "key storm"]);
    assert_eq!(timeline(entry, &[(2, "storm"), (4, "calm"), (6, "storm"), (6, "storm"), (8, "storm"), (10, "storm")]), [
        "key storm",
        "sticky",
        "cooldown until 8",
        "cooldown until 8",
        "cooldown until 8",
        "key storm",
    ]);
}

/// Timers stored before the effects were kept as SillyTavern keeps them still load.
#[test]
fn timers_in_the_old_window_shape_still_load() {
    let old = r#"{"timers":{"b/1":{"fired_at":10,"sticky_until":12,"cooldown_until":14},"b/2":{"fired_at":3,"sticky_until":3,"cooldown_until":5}}}"#;
    let state: ActivationState = serde_json::from_str(old).unwrap();
    assert_eq!(state.timers["b/1"].sticky, Some(TimedEffect { start: 10, end: 13, protected: false }));
    assert_eq!(state.timers["b/1"].cooldown, Some(TimedEffect { start: 12, end: 15, protected: true }));
    assert_eq!(state.timers["b/2"], EntryTimer { sticky: None, cooldown: Some(TimedEffect { start: 3, end: 6, protected: false }) });
    let again: ActivationState = serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
    assert_eq!(again, state);
}

#[test]
fn budget_keeps_sticky_then_highest_order_constants_included() {
    let entries = [
        with(e(1, "", "one two three"), |x| {
            x.constant = true;
            x.insertion_order = 1;
        }),
        with(e(2, "gate", "one two three four"), |x| x.insertion_order = 100),
        with(e(3, "gate", "one two three"), |x| x.insertion_order = 50),
        with(e(4, "gate", "one two three four five six"), |x| {
            x.insertion_order = 10;
            x.ignore_budget = true;
        }),
        with(e(5, "gate", "one"), |x| x.insertion_order = 0),
    ];
    let o = ActivationOptions { token_budget: Some(8), count_tokens: &words, ..Default::default() };
    let input = ScanInput { messages: vec!["gate"], message_number: 1, ..Default::default() };
    let (report, got) = run_with(&entries, &input, &mut ActivationState::default(), &o);
    // Order 100 (4 tokens), then 50 (3): the order-1 constant no longer fits. Entry 5 would
    // fit, but SillyTavern stops budgeted entries once the budget overflows.
    assert_eq!(got, ["budget 3+7>8", "key gate", "key gate", "key gate", "budget 1+7>8"]);
    assert_eq!(report.tokens_used, 7);

    // A sticky entry is budgeted before any other, whatever its order.
    let entries = [
        with(e(1, "gate", "one two three four five"), |x| {
            x.insertion_order = 1;
            x.sticky = Some(3);
        }),
        with(e(2, "gate", "one two three four"), |x| x.insertion_order = 100),
    ];
    let mut state = ActivationState::default();
    let first = ScanInput { messages: vec!["gate"], message_number: 1, ..Default::default() };
    let big = ActivationOptions { token_budget: Some(100), count_tokens: &words, ..Default::default() };
    assert_eq!(run_with(&entries, &first, &mut state, &big).1, ["key gate", "key gate"]);
    let later = ScanInput { messages: vec!["gate"], message_number: 2, ..Default::default() };
    assert_eq!(run_with(&entries, &later, &mut state, &o).1, ["sticky", "budget 4+5>8"]);
}

#[test]
fn report_orders_insertion_and_names_sources() {
    let entries = [
        with(e(1, "gate", "late"), |x| x.insertion_order = 300),
        with(e(2, "gate", "early"), |x| x.insertion_order = 100),
        with(e(3, "gate", "after"), |x| x.position = InsertionPosition::AfterCharacter),
        with(e(4, "elf", "@@depth 2\npersona lore"), |x| {
            x.match_sources.persona_description = true;
            x.position = InsertionPosition::AtDepth;
        }),
        e(5, "elf", "x"),
    ];
    let input = ScanInput {
        messages: vec!["the gate"],
        message_number: 1,
        persona_description: Some("An elf ranger."),
        ..Default::default()
    };
    let scan = book_entries_of(&entries);
    let report = activate(&scan, &input, &mut ActivationState::default(), &ActivationOptions::default());
    let got: Vec<String> = report.outcomes.iter().map(|o| describe(o, &entries)).collect();
    assert_eq!(got, ["key gate", "key gate", "key gate", "key elf in PersonaDescription", "no match"]);
    assert_eq!(report.activated.iter().map(|a| a.index).collect::<Vec<_>>(), [1, 0, 2, 3]);
    assert_eq!(report.contents(&scan), ["early", "late", "after", "persona lore"]);
}

fn book_entries_of(entries: &[LoreEntry]) -> Vec<ScanEntry<'_>> {
    entries.iter().enumerate().map(|(index, entry)| ScanEntry { book: "b", index, entry }).collect()
}

#[test]
fn a_prepared_index_gives_the_same_report() {
    let book = Lorebook {
        entries: vec![e(1, "castle", "The king."), e(2, "king", "x"), with(e(3, "/qu+een/", "x"), |x| x.constant = true)],
        scan_depth: Some(1),
        ..Default::default()
    };
    let options = ActivationOptions::default().with_book(&book);
    let scan = book_entries("world", &book);
    let index = KeyIndex::build(scan.iter().map(|s| s.entry), &options);
    let input = ScanInput { messages: vec!["castle", "nothing"], message_number: 1, ..Default::default() };
    let fresh = activate(&scan, &input, &mut ActivationState::default(), &options);
    let reused = activate_with_index(&scan, &index, &input, &mut ActivationState::default(), &options);
    assert_eq!(fresh, reused);
    assert!(fresh.activated.iter().all(|a| a.index == 2), "depth 1 scans only the newest message");
    // An index built with other defaults is not trusted.
    let strict = ActivationOptions { case_sensitive: true, ..options };
    let upper = ScanInput { messages: vec!["CASTLE"], message_number: 1, ..Default::default() };
    let report = activate_with_index(&scan, &index, &upper, &mut ActivationState::default(), &strict);
    assert!(!report.is_activated(0));
}


/// A book of pathological regular expressions does not stall a round: the key checks
/// stop at the time budget, and the entries left unchecked say so.
#[test]
fn a_book_of_hostile_regex_keys_is_cut_off_by_the_time_budget() {
    let entries: Vec<LoreEntry> = (0..5000)
        .map(|i| LoreEntry { id: None, keys: vec!["/(?=a)(a|aa)+b/".into()], content: format!("entry {i}"), ..Default::default() })
        .collect();
    let text = "a".repeat(3000);
    let input = ScanInput { messages: vec![&text], message_number: 1, ..Default::default() };
    let options = ActivationOptions { time_budget: Some(std::time::Duration::from_millis(100)), ..Default::default() };
    let started = std::time::Instant::now();
    let (report, got) = run_with(&entries, &input, &mut ActivationState::default(), &options);
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(5), "activation took {took:?}");
    assert!(report.activated.is_empty());
    let unchecked = got.iter().filter(|g| *g == "time budget").count();
    assert!(unchecked > 0, "some entries were left unchecked: {:?}", &got[..5]);
    let reason = report.outcomes.iter().find_map(|o| match o {
        Outcome::Skipped { skip: skip @ SkipReason::TimeBudget { .. } } => Some(skip.describe(&|_| String::new())),
        _ => None,
    });
    assert!(reason.is_some_and(|r| r.starts_with("not checked: the activation's time budget ran out")));
}

/// A `vectorized` entry the caller found close to the recent text fires without any
/// key matching, says how close it was, and still obeys its character filter; an entry
/// not flagged `vectorized` is not fired by similarity.
#[test]
fn a_vectorized_entry_fires_on_similarity() {
    let entries = vec![
        LoreEntry { id: Some(EntryId::Number(1)), keys: vec![], content: "The drowned bells ring under the bay at low tide.".into(), vectorized: true, ..Default::default() },
        LoreEntry { id: Some(EntryId::Number(2)), keys: vec!["zeppelin".into()], content: "Airships.".into(), ..Default::default() },
        LoreEntry { id: Some(EntryId::Number(3)), keys: vec!["zeppelin".into()], content: "Not vectorized.".into(), ..Default::default() },
    ];
    let input = ScanInput { messages: vec!["Do you hear something ringing out on the water?"], message_number: 1, similar: vec![(0, 0.61), (2, 0.9)], ..Default::default() };
    let (report, got) = run_with(&entries, &input, &mut ActivationState::default(), &ActivationOptions::default());
    assert_eq!(got[0], "vector 610");
    assert_eq!(got[1], "no match");
    assert_eq!(got[2], "no match", "similarity fires only vectorized entries");
    let reason = match &report.outcomes[0] {
        Outcome::Activated { trigger, .. } => trigger.reason(&|_| String::new()),
        other => panic!("{other:?}"),
    };
    assert_eq!(reason, "vector similarity 0.61");
}

/// Cancelling the call stops its activation at the next entry, even with no time
/// budget: a cancel never waits out a slow book.
#[test]
fn a_cancel_stops_activation_between_entries() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let entries: Vec<LoreEntry> = (0..5000)
        .map(|i| LoreEntry { id: None, keys: vec!["/(?=a)(a|aa)+b/".into()], content: format!("entry {i}"), ..Default::default() })
        .collect();
    let text = "a".repeat(3000);
    let input = ScanInput { messages: vec![&text], message_number: 1, ..Default::default() };
    let cancel = AtomicBool::new(false);
    let options = ActivationOptions { time_budget: None, cancel: Some(&cancel), ..Default::default() };
    let started = std::time::Instant::now();
    let (report, got) = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            cancel.store(true, Ordering::Relaxed);
        });
        run_with(&entries, &input, &mut ActivationState::default(), &options)
    });
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(5), "activation took {took:?}");
    assert!(report.activated.is_empty());
    assert!(got.iter().any(|g| g == "cancelled"), "the entries left when the cancel came were skipped");
    let reason = report.outcomes.iter().find_map(|o| match o {
        Outcome::Skipped { skip: skip @ SkipReason::Cancelled } => Some(skip.describe(&|_| String::new())),
        _ => None,
    });
    assert_eq!(reason.as_deref(), Some("not checked: the call was cancelled"));

    // Cancelled before it starts: nothing is checked, and every entry says so.
    let (report, got) = run_with(&entries[..500], &input, &mut ActivationState::default(), &options);
    assert!(report.activated.is_empty());
    assert!(got.iter().all(|g| g == "cancelled"), "{:?}", &got[..3]);
}

/// A key whose compiled program would be huge is refused, and past the book's cap of
/// regular-expression keys the rest are not compiled; both say why.
#[test]
fn regex_keys_are_capped_in_size_and_in_number() {
    let huge = vec![LoreEntry { keys: vec!["/(a{1000}){1000}/".into()], content: "huge".into(), ..Default::default() }];
    let text = "aaa";
    let input = ScanInput { messages: vec![text], message_number: 1, ..Default::default() };
    let (report, _) = run_with(&huge, &input, &mut ActivationState::default(), &ActivationOptions::default());
    assert!(
        matches!(&report.outcomes[0], Outcome::Skipped { skip: SkipReason::BadRegex { error, .. } } if error.contains("larger than")),
        "{:?}",
        report.outcomes[0]
    );
    let many: Vec<LoreEntry> = (0..=super::matcher::MAX_REGEX_KEYS)
        .map(|i| LoreEntry { keys: vec![format!("/key{i}x/")], content: format!("e{i}"), ..Default::default() })
        .collect();
    let (report, _) = run_with(&many, &input, &mut ActivationState::default(), &ActivationOptions::default());
    let last = report.outcomes.last().unwrap();
    assert!(
        matches!(last, Outcome::Skipped { skip: SkipReason::BadRegex { error, .. } } if error.contains("regular-expression keys in these books")),
        "{last:?}"
    );
    assert!(matches!(&report.outcomes[0], Outcome::Skipped { skip: SkipReason::NoKeyMatched }), "{:?}", report.outcomes[0]);
}
