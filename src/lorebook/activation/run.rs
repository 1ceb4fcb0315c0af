//! One activation: the checks before scanning, the scan passes (first scan, then
//! recursion), inclusion groups, probability, the budget and the timers.

use super::matcher::{self, Found, Key, KeyIndex};
use super::{
    ActivatedEntry, ActivationOptions, ActivationReport, ActivationState, EntryTimer, GroupPick, Outcome, ScanEntry,
    ScanInput, SelectiveLogic, SkipReason, Source, TimedEffect, Trigger,
};
use crate::lorebook::{LoreEntry, MatchSources};
use std::collections::{HashMap, HashSet};

/// An extra text (persona, character description, ...) and its key hits.
struct Extra<'r> {
    source: Source,
    text: &'r str,
    found: Found,
}

/// What the checks before scanning decided.
enum Pre {
    Skip(SkipReason),
    Fire(Trigger),
    /// Check the keys; when they match, the entry is held back for this reason (a
    /// delay), so only an entry that would have fired is said to be delayed.
    Keys(Option<SkipReason>),
}

enum Eval {
    Matched { key: usize, source: Source, score: usize },
    Miss(SkipReason),
}

/// A matched entry waiting for groups, probability and budget.
struct Candidate {
    index: usize,
    trigger: Trigger,
    score: usize,
}

pub(super) struct Run<'r> {
    entries: &'r [ScanEntry<'r>],
    index: &'r KeyIndex,
    input: &'r ScanInput<'r>,
    options: &'r ActivationOptions<'r>,
    /// Key hits in the chat, by message age.
    chat: Found,
    /// Chat text per scan depth, joined for regex keys (built on demand).
    joined: HashMap<u32, String>,
    extras: Vec<Extra<'r>>,
    /// Key hits in activated entries' content; a hit's "age" is the number of the
    /// recursion source, so the lowest is the first entry whose content has the key.
    recursion: Found,
    recursion_from: Vec<usize>,
    recursion_texts: Vec<&'r str>,
    /// The index's macro keys resolved for this call, by slot.
    resolved: Vec<Key>,
    outcomes: Vec<Option<Outcome>>,
    /// Per entry, the sticky and the cooldown effect in force for this message.
    effects: Vec<(Option<TimedEffect>, Option<TimedEffect>)>,
}

impl<'r> Run<'r> {
    pub(super) fn new(
        entries: &'r [ScanEntry<'r>],
        index: &'r KeyIndex,
        input: &'r ScanInput<'r>,
        options: &'r ActivationOptions<'r>,
    ) -> Self {
        let mut chat = index.empty_found();
        let deepest = entries.iter().map(|e| e.entry.scan_depth.unwrap_or(options.scan_depth)).max().unwrap_or(0);
        let deepest = usize::try_from(deepest).unwrap_or(usize::MAX);
        for (age, message) in input.messages.iter().rev().take(deepest).enumerate() {
            index.scan(message, age as u32, &mut chat);
        }
        let mut wanted = MatchSources::default();
        for e in entries {
            let m = &e.entry.match_sources;
            wanted.persona_description |= m.persona_description;
            wanted.character_description |= m.character_description;
            wanted.character_personality |= m.character_personality;
            wanted.character_depth_prompt |= m.character_depth_prompt;
            wanted.scenario |= m.scenario;
            wanted.creator_notes |= m.creator_notes;
        }
        let mut extras = Vec::new();
        for (source, text) in [
            (Source::PersonaDescription, input.persona_description),
            (Source::CharacterDescription, input.character_description),
            (Source::CharacterPersonality, input.character_personality),
            (Source::CharacterDepthPrompt, input.character_depth_prompt),
            (Source::Scenario, input.scenario),
            (Source::CreatorNotes, input.creator_notes),
        ] {
            if let Some(text) = text.filter(|_| source_enabled(source, &wanted)) {
                let mut found = index.empty_found();
                index.scan(text, 0, &mut found);
                extras.push(Extra { source, text, found });
            }
        }
        Self {
            entries,
            index,
            input,
            options,
            chat,
            joined: HashMap::new(),
            extras,
            recursion: index.empty_found(),
            recursion_from: Vec::new(),
            recursion_texts: Vec::new(),
            resolved: index.macro_keys.iter().map(|k| k.resolve(options.macros)).collect(),
            outcomes: vec![None; entries.len()],
            effects: vec![(None, None); entries.len()],
        }
    }

    pub(super) fn run(mut self, state: &mut ActivationState) -> ActivationReport {
        let now = self.input.message_number;
        self.check_timers(state);
        let forced: HashSet<usize> = self.input.forced.iter().copied().collect();

        let mut fire: Vec<Option<Trigger>> = vec![None; self.entries.len()];
        let mut held: Vec<Option<SkipReason>> = vec![None; self.entries.len()];
        let mut pending = Vec::new();
        for i in 0..self.entries.len() {
            match self.precheck(i, forced.contains(&i)) {
                Pre::Skip(reason) => self.outcomes[i] = Some(Outcome::Skipped { skip: reason }),
                Pre::Fire(trigger) => {
                    fire[i] = Some(trigger);
                    pending.push(i);
                }
                Pre::Keys(hold) => {
                    held[i] = hold;
                    pending.push(i);
                }
            }
        }

        let mut tentative: Vec<Option<SkipReason>> = vec![None; self.entries.len()];
        let mut winners: HashMap<String, usize> = HashMap::new();
        let budget = self.options.token_budget;
        let (mut used, mut overflowed) = (0u32, false);
        // Delay-until-recursion levels, as SillyTavern opens them: the lowest is open from
        // the first recursion pass on; each further one only when a pass adds nothing new.
        // A lone level therefore needs real recursion (an entry fired by the scan).
        let mut levels: Vec<u32> =
            pending.iter().map(|&i| self.entries[i].entry.delay_until_recursion).filter(|&l| l > 0).collect();
        levels.sort_unstable();
        levels.dedup();
        levels.reverse();
        let (mut pass, mut level) = (0u32, levels.pop().unwrap_or(0));
        let started = std::time::Instant::now();
        loop {
            let mut matched = Vec::new();
            let mut still = Vec::new();
            for &i in &pending {
                let e = self.entries[i].entry;
                let unstoppable = matches!(fire[i], Some(Trigger::Sticky { .. } | Trigger::Forced));
                if e.delay_until_recursion > 0 && !unstoppable && (pass == 0 || level < e.delay_until_recursion) {
                    tentative[i] = Some(SkipReason::DelayUntilRecursion { level: e.delay_until_recursion });
                    still.push(i);
                    continue;
                }
                if let Some(trigger) = fire[i].take() {
                    matched.push(Candidate { index: i, trigger, score: 0 });
                    continue;
                }
                // Cancelled or out of time: the rest are not checked, and say so.
                if self.options.cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed)) {
                    self.outcomes[i] = Some(Outcome::Skipped { skip: SkipReason::Cancelled });
                    continue;
                }
                if let Some(limit) = self.options.time_budget
                    && started.elapsed() > limit
                {
                    let after_ms = started.elapsed().as_millis().min(u128::from(u64::MAX)) as u64;
                    self.outcomes[i] = Some(Outcome::Skipped { skip: SkipReason::TimeBudget { after_ms } });
                    continue;
                }
                // A vectorized entry close to the recent text matches on the first scan.
                if pass == 0
                    && e.vectorized
                    && let Some((_, similarity)) = self.input.similar.iter().find(|(p, _)| *p == i)
                {
                    let similarity = (similarity.clamp(0.0, 1.0) * 1000.0).round() as u16;
                    match held[i].take() {
                        Some(skip) => self.outcomes[i] = Some(Outcome::Skipped { skip }),
                        None => matched.push(Candidate { index: i, trigger: Trigger::Vector { similarity }, score: 1 }),
                    }
                    continue;
                }
                match self.evaluate(i, pass) {
                    Eval::Matched { .. } if held[i].is_some() => {
                        self.outcomes[i] = held[i].take().map(|skip| Outcome::Skipped { skip });
                    }
                    Eval::Matched { key, source, score } => {
                        let trigger = Trigger::Key { key: e.keys[key].clone(), source };
                        matched.push(Candidate { index: i, trigger, score });
                    }
                    Eval::Miss(reason) => {
                        tentative[i] = Some(reason);
                        still.push(i);
                    }
                }
            }
            pending = still;
            matched.sort_by_key(|c| priority_key(c, self.entries[c.index].entry));
            let matched = self.inclusion_groups(matched, &winners);

            let mut new_sources = false;
            for Candidate { index: i, trigger, .. } in matched {
                let e = self.entries[i].entry;
                let exempt = matches!(trigger, Trigger::Sticky { .. } | Trigger::Forced);
                if !exempt && e.is_probabilistic() {
                    let roll = (roll(self.options.seed, now, &self.entries[i].timer_key()) % 100) as u32;
                    if roll >= e.probability {
                        let skip = SkipReason::Probability { roll, probability: e.probability };
                        self.outcomes[i] = Some(Outcome::Skipped { skip });
                        continue;
                    }
                }
                let content = e.decorators().1;
                let tokens = (self.options.count_tokens)(content);
                if let (Some(limit), false) = (budget, e.ignore_budget) {
                    if overflowed || used.saturating_add(tokens) > limit {
                        overflowed = true;
                        let skip = SkipReason::Budget { needed: tokens, used, budget: limit };
                        self.outcomes[i] = Some(Outcome::Skipped { skip });
                        continue;
                    }
                    used += tokens;
                }
                for group in e.groups() {
                    winners.entry(group.to_string()).or_insert(i);
                }
                start_timers(state, &self.entries[i], now);
                self.outcomes[i] = Some(Outcome::Activated { trigger, pass, tokens });
                if self.options.recursive && !e.prevent_recursion {
                    let number = self.recursion_from.len() as u32;
                    self.index.scan(content, number, &mut self.recursion);
                    self.recursion_from.push(i);
                    self.recursion_texts.push(content);
                    new_sources = true;
                }
            }

            if !self.options.recursive || overflowed || pass >= self.options.max_recursion_steps {
                break;
            }
            if !new_sources {
                // Nothing new to scan: the next delay level (if any) gets a pass.
                match levels.pop() {
                    Some(next) => level = next,
                    None => break,
                }
            }
            pass += 1;
        }

        for i in pending {
            let skip = tentative[i].take().unwrap_or(SkipReason::NoKeyMatched);
            self.outcomes[i] = Some(Outcome::Skipped { skip });
        }
        self.report(used, pass)
    }

    /// SillyTavern's check of the timed effects before a scan (`checkTimedEffects`): an
    /// unprotected effect whose chat did not grow past its start is dropped (the message
    /// is being drawn again, or the chat was rewound); an effect of an entry not offered
    /// here is kept until its end passes (it may be another character's lore); one whose
    /// entry no longer has that setting is dropped; one that reached its end is dropped,
    /// and a sticky effect's end starts the entry's cooldown, protected and in force now.
    /// What is left is in force for this message.
    fn check_timers(&mut self, state: &mut ActivationState) {
        let now = self.input.message_number;
        let mut by_key: HashMap<String, Vec<usize>> = HashMap::new();
        if !state.timers.is_empty() {
            for (i, se) in self.entries.iter().enumerate() {
                by_key.entry(se.timer_key()).or_default().push(i);
            }
        }
        state.timers.retain(|key, timer| {
            let found = by_key.get(key).map(Vec::as_slice).unwrap_or_default();
            let entry = found.first().map(|&i| self.entries[i].entry);
            let length = |e: &LoreEntry, sticky: bool| if sticky { e.sticky.unwrap_or(0) } else { e.cooldown.unwrap_or(0) };
            for sticky in [true, false] {
                let slot = if sticky { &mut timer.sticky } else { &mut timer.cooldown };
                let Some(effect) = *slot else { continue };
                if now <= effect.start && !effect.protected {
                    *slot = None;
                    continue;
                }
                let Some(e) = entry else {
                    if now >= effect.end {
                        *slot = None;
                    }
                    continue;
                };
                if length(e, sticky) == 0 {
                    *slot = None;
                } else if now >= effect.end {
                    *slot = None;
                    let cooldown = length(e, false);
                    if sticky && cooldown > 0 {
                        timer.cooldown = Some(TimedEffect::new(now, cooldown, true));
                    }
                }
            }
            for &i in found {
                self.effects[i] = (timer.sticky, timer.cooldown);
            }
            timer.sticky.is_some() || timer.cooldown.is_some()
        });
    }

    /// The checks that do not depend on scanned text.
    fn precheck(&self, i: usize, forced: bool) -> Pre {
        let se = &self.entries[i];
        let e = se.entry;
        if !e.enabled {
            return Pre::Skip(SkipReason::Disabled);
        }
        if forced {
            return Pre::Fire(Trigger::Forced);
        }
        let generation: &[&str] = if self.input.generation.is_empty() { &["normal"] } else { self.input.generation };
        if !e.triggers.is_empty() && !e.triggers.iter().any(|t| generation.iter().any(|g| t.trim().eq_ignore_ascii_case(g))) {
            return Pre::Skip(SkipReason::Trigger { generation: generation.join("/") });
        }
        if let Some(character) = &self.input.character
            && !passes_filter(e, character)
        {
            return Pre::Skip(SkipReason::CharacterFilter { character: character.name.to_string() });
        }
        // Delayed, or cooling down and not sticky: held back (SillyTavern checks the delay
        // first), but said so only if it would otherwise fire (an entry whose key is not
        // in the text is "no key found", whatever its timers).
        let now = self.input.message_number;
        let (sticky, cooling) = self.effects[i];
        let delayed = e
            .delay
            .filter(|&d| u64::from(d) > now)
            .map(|from| SkipReason::Delay { from: u64::from(from) })
            .or_else(|| cooling.filter(|_| sticky.is_none()).map(|c| SkipReason::Cooldown { until: c.last() }));
        let fire = |trigger: Trigger| match &delayed {
            Some(reason) => Pre::Skip(reason.clone()),
            None => Pre::Fire(trigger),
        };
        // A sticky entry fires as sticky whatever else would fire it: SillyTavern gives
        // it the budget's first place and no new probability roll by its effect alone.
        let sticky = sticky.map(|s| Trigger::Sticky { fired_at: s.start, until: s.last() });
        if e.content.starts_with("@@") {
            let (decorators, _) = e.decorators();
            if decorators.iter().any(|d| d.name == "dont_activate") {
                return Pre::Skip(SkipReason::DecoratorDontActivate);
            }
            if let Some(trigger) = sticky {
                return fire(trigger);
            }
            if decorators.iter().any(|d| d.name == "activate") {
                return fire(Trigger::Decorator);
            }
        }
        if let Some(trigger) = sticky {
            return fire(trigger);
        }
        if e.constant {
            return fire(Trigger::Constant);
        }
        if e.vectorized && self.input.similar.iter().any(|(p, _)| *p == i) {
            return Pre::Keys(delayed);
        }
        if self.index.entries[i].primary.iter().all(|k| matches!(k, Key::Empty)) {
            return Pre::Skip(SkipReason::NoKeys);
        }
        Pre::Keys(delayed)
    }

    /// Primary keys, then secondary keys with the entry's selective logic.
    fn evaluate(&mut self, i: usize, pass: u32) -> Eval {
        let index = self.index;
        let e = self.entries[i].entry;
        let keys = &index.entries[i];
        let depth = e.scan_depth.unwrap_or(self.options.scan_depth);
        let recursion = pass > 0 && !e.exclude_recursion;
        // Every key of a group member counts: group scoring compares members by them (an
        // unscored member's count still sets the best score, as in SillyTavern).
        let scoring = !e.group.trim().is_empty();

        let (mut first, mut bad, mut score) = (None, None, 0usize);
        for (k, key) in keys.primary.iter().enumerate() {
            match self.locate(key, e, depth, recursion) {
                Ok(Some(source)) => {
                    score += 1;
                    first.get_or_insert((k, source));
                    if !scoring {
                        break;
                    }
                }
                Ok(None) => {}
                Err(error) => {
                    bad.get_or_insert((k, error));
                }
            }
        }
        let Some((key, source)) = first else {
            if pass > 0 && e.exclude_recursion {
                for (k, compiled) in keys.primary.iter().enumerate() {
                    if let Ok(Some(Source::Recursion { from })) = self.locate(compiled, e, depth, true) {
                        return Eval::Miss(SkipReason::ExcludeRecursion { key: e.keys[k].clone(), from });
                    }
                }
            }
            return Eval::Miss(match bad {
                Some((k, error)) => SkipReason::BadRegex { key: e.keys[k].clone(), error },
                None => SkipReason::NoKeyMatched,
            });
        };

        if e.selective && keys.secondary.iter().any(|k| !matches!(k, Key::Empty)) {
            let (mut found, mut missing) = (Vec::new(), Vec::new());
            for (k, compiled) in keys.secondary.iter().enumerate() {
                if matches!(compiled, Key::Empty) {
                    continue;
                }
                match self.locate(compiled, e, depth, recursion) {
                    Ok(Some(_)) => found.push(e.secondary_keys[k].clone()),
                    Ok(None) => missing.push(e.secondary_keys[k].clone()),
                    Err(error) => {
                        return Eval::Miss(SkipReason::BadRegex { key: e.secondary_keys[k].clone(), error });
                    }
                }
            }
            let logic = e.selective_logic;
            let satisfied = match logic {
                SelectiveLogic::AndAny | SelectiveLogic::Other(_) => !found.is_empty(),
                SelectiveLogic::NotAll => !missing.is_empty(),
                SelectiveLogic::NotAny => found.is_empty(),
                SelectiveLogic::AndAll => missing.is_empty(),
            };
            if !satisfied {
                return Eval::Miss(SkipReason::SecondaryLogic { primary: e.keys[key].clone(), logic, found, missing });
            }
            if matches!(logic, SelectiveLogic::AndAny | SelectiveLogic::AndAll) {
                score += found.len();
            }
        }
        Eval::Matched { key, source, score }
    }

    /// Where a key occurs: the chat within `depth`, the extra texts the entry opted into,
    /// then (when allowed) activated entries' content. `Err` for a broken regex.
    fn locate(&mut self, key: &Key, e: &LoreEntry, depth: u32, recursion: bool) -> Result<Option<Source>, String> {
        match key {
            Key::Empty => Ok(None),
            Key::Macro { slot } => {
                let resolved = std::mem::take(&mut self.resolved);
                let found = match resolved.get(*slot as usize) {
                    Some(key) => self.locate(key, e, depth, recursion),
                    None => Ok(None),
                };
                self.resolved = resolved;
                found
            }
            Key::Text { needle, case_sensitive, whole_word } => {
                let has = |text: &str| matcher::text_has(text, needle, *case_sensitive, *whole_word);
                if self.input.messages.iter().rev().take(depth as usize).any(|m| has(m)) {
                    return Ok(Some(Source::Chat));
                }
                for extra in &self.extras {
                    if source_enabled(extra.source, &e.match_sources) && has(extra.text) {
                        return Ok(Some(extra.source));
                    }
                }
                if recursion && let Some(n) = self.recursion_texts.iter().position(|t| has(t)) {
                    return Ok(Some(Source::Recursion { from: self.recursion_from[n] }));
                }
                Ok(None)
            }
            Key::Invalid(error) => Err(error.clone()),
            Key::Plain { case, pattern, whole_word } => {
                let (case, pattern, whole_word) = (*case, *pattern, *whole_word);
                if self.chat.has(case, pattern, whole_word, depth) {
                    return Ok(Some(Source::Chat));
                }
                for extra in &self.extras {
                    if source_enabled(extra.source, &e.match_sources) && extra.found.has(case, pattern, whole_word, 1) {
                        return Ok(Some(extra.source));
                    }
                }
                if recursion {
                    let hit = self.recursion.hits[case as usize][pattern as usize];
                    let number = if whole_word { hit.word } else { hit.any };
                    if let Some(&from) = self.recursion_from.get(number as usize) {
                        return Ok(Some(Source::Recursion { from }));
                    }
                }
                Ok(None)
            }
            Key::Regex(regex) => {
                let is_match = |text: &str| regex.is_match(text);
                if depth > 0 && !self.input.messages.is_empty() {
                    let messages = &self.input.messages;
                    let text = self.joined.entry(depth).or_insert_with(|| {
                        let start = messages.len().saturating_sub(depth as usize);
                        messages[start..].join("\n")
                    });
                    if is_match(text)? {
                        return Ok(Some(Source::Chat));
                    }
                }
                for extra in &self.extras {
                    if source_enabled(extra.source, &e.match_sources) && is_match(extra.text)? {
                        return Ok(Some(extra.source));
                    }
                }
                if recursion {
                    for (n, text) in self.recursion_texts.iter().enumerate() {
                        if is_match(text)? {
                            return Ok(Some(Source::Recursion { from: self.recursion_from[n] }));
                        }
                    }
                }
                Ok(None)
            }
        }
    }

    /// One winner per inclusion group among `matched` (sorted by priority); the losers
    /// get their outcome here.
    fn inclusion_groups(&mut self, matched: Vec<Candidate>, winners: &HashMap<String, usize>) -> Vec<Candidate> {
        let mut names: Vec<&'r str> = Vec::new();
        for c in &matched {
            for g in self.entries[c.index].entry.groups() {
                if !names.contains(&g) {
                    names.push(g);
                }
            }
        }
        let mut lost: HashSet<usize> = HashSet::new();
        for name in names {
            let mut members: Vec<&Candidate> = matched
                .iter()
                .filter(|c| !lost.contains(&c.index) && self.entries[c.index].entry.groups().contains(&name))
                .collect();
            let mut lose = |members: &[&Candidate], winner: usize, pick: GroupPick, outcomes: &mut Vec<Option<Outcome>>| {
                for m in members.iter().filter(|m| m.index != winner) {
                    lost.insert(m.index);
                    let skip = SkipReason::InclusionGroup { group: name.to_string(), winner, pick };
                    outcomes[m.index] = Some(Outcome::Skipped { skip });
                }
            };
            if let Some(&winner) = winners.get(name) {
                lose(&members, winner, GroupPick::EarlierPass, &mut self.outcomes);
                continue;
            }
            if members.len() < 2 {
                continue;
            }
            if let Some(sticky) = members.iter().find(|m| matches!(m.trigger, Trigger::Sticky { .. })) {
                lose(&members, sticky.index, GroupPick::Sticky, &mut self.outcomes);
                continue;
            }
            // Scoring removes only the members that use it and matched fewer keys than the
            // best member; members without it stay in the pick, as in SillyTavern.
            let scored = |m: &Candidate| self.entries[m.index].entry.use_group_scoring.unwrap_or(self.options.group_scoring);
            if members.iter().any(|m| scored(m)) {
                let best = members.iter().map(|m| m.score).max().unwrap_or(0);
                if let Some(top) = members.iter().find(|m| m.score == best).map(|m| m.index) {
                    let low: Vec<&Candidate> = members.iter().copied().filter(|m| scored(m) && m.score < best).collect();
                    lose(&low, top, GroupPick::Score, &mut self.outcomes);
                    members.retain(|m| !(scored(m) && m.score < best));
                }
                if members.len() < 2 {
                    continue;
                }
            }
            // Members are in priority order, so the first override has the highest order.
            if let Some(first) = members.iter().find(|m| self.entries[m.index].entry.group_override) {
                lose(&members, first.index, GroupPick::Override, &mut self.outcomes);
                continue;
            }
            let weights: Vec<u64> = members.iter().map(|m| u64::from(self.entries[m.index].entry.group_weight)).collect();
            let total: u64 = weights.iter().sum();
            let draw = roll(self.options.seed, self.input.message_number, &format!("group:{name}"));
            let winner = if total == 0 {
                members[(draw % members.len() as u64) as usize].index
            } else {
                let mut point = draw % total;
                let mut chosen = members[0].index;
                for (m, w) in members.iter().zip(&weights) {
                    if point < *w {
                        chosen = m.index;
                        break;
                    }
                    point -= w;
                }
                chosen
            };
            lose(&members, winner, GroupPick::Weighted, &mut self.outcomes);
        }
        matched.into_iter().filter(|c| !lost.contains(&c.index)).collect()
    }

    fn report(self, tokens_used: u32, recursion_passes: u32) -> ActivationReport {
        let outcomes: Vec<Outcome> =
            self.outcomes.into_iter().map(|o| o.unwrap_or(Outcome::Skipped { skip: SkipReason::NoKeyMatched })).collect();
        let mut activated: Vec<ActivatedEntry> = outcomes
            .iter()
            .enumerate()
            .filter_map(|(index, outcome)| match outcome {
                Outcome::Activated { tokens, .. } => {
                    let se = &self.entries[index];
                    let e = se.entry;
                    Some(ActivatedEntry {
                        index,
                        book: se.book.to_string(),
                        position: e.position,
                        depth: e.depth,
                        role: e.role,
                        outlet_name: e.outlet_name.clone(),
                        insertion_order: e.insertion_order,
                        tokens: *tokens,
                    })
                }
                Outcome::Skipped { .. } => None,
            })
            .collect();
        activated.sort_by_key(|a| (i64::from(a.position), a.insertion_order, a.index));
        ActivationReport { outcomes, activated, tokens_used, token_budget: self.options.token_budget, recursion_passes }
    }
}

/// Budget priority, as SillyTavern spends its budget: sticky entries first, then higher
/// insertion order, then higher card priority, then the order given. Constant entries
/// get no precedence: a low-order constant is the first to go when lore overflows.
fn priority_key(c: &Candidate, e: &LoreEntry) -> (bool, i64, i64, usize) {
    (!matches!(c.trigger, Trigger::Sticky { .. }), -e.insertion_order, -e.priority.unwrap_or(0), c.index)
}

fn source_enabled(source: Source, sources: &MatchSources) -> bool {
    match source {
        Source::PersonaDescription => sources.persona_description,
        Source::CharacterDescription => sources.character_description,
        Source::CharacterPersonality => sources.character_personality,
        Source::CharacterDepthPrompt => sources.character_depth_prompt,
        Source::Scenario => sources.scenario,
        Source::CreatorNotes => sources.creator_notes,
        Source::Chat | Source::Recursion { .. } => true,
    }
}

/// SillyTavern's character filter: names, then tags, each either required or excluded,
/// matched exactly as SillyTavern wrote them or by name as written here
/// ([`crate::lorebook::CharacterFilter`]).
fn passes_filter(e: &LoreEntry, character: &super::CharacterRef<'_>) -> bool {
    let filter = &e.character_filter;
    if filter.names.is_empty() && filter.tags.is_empty() {
        return true;
    }
    filter.admits(e.filter_as_read(), character.name, &character.tags)
}

/// The entry's sticky and cooldown effects that are not running already start now, as
/// SillyTavern's `setTimedEffects` starts them for every entry that fired (a sticky one
/// keeps its effect; its cooldown starts again if it ran out while it stuck).
fn start_timers(state: &mut ActivationState, se: &ScanEntry<'_>, now: u64) {
    let sticky = se.entry.sticky.unwrap_or(0);
    let cooldown = se.entry.cooldown.unwrap_or(0);
    if sticky == 0 && cooldown == 0 {
        return;
    }
    let timer = state.timers.entry(se.timer_key()).or_insert_with(EntryTimer::default);
    if sticky > 0 && timer.sticky.is_none() {
        timer.sticky = Some(TimedEffect::new(now, sticky, false));
    }
    if cooldown > 0 && timer.cooldown.is_none() {
        timer.cooldown = Some(TimedEffect::new(now, cooldown, false));
    }
}

/// A deterministic draw from (seed, message, name): each entry and group rolls
/// independently, so adding an entry does not change the others' luck.
fn roll(seed: u64, message: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut z = h ^ seed.rotate_left(17) ^ message.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
