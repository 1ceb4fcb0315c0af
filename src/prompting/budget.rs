//! Token budgets for the sections of a context envelope.
//!
//! Each section gets a percentage of the agent profile's `max_context_tokens`. Sections
//! with nothing to say give their share to the others in proportion to their own
//! percentages, counts are rounded down, and each section is then filled with its most
//! valuable items that fit. The [`BudgetLedger`] records allocations, use and every
//! dropped item with the reason, so the workbench can show how each budget was spent.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The budgeted sections of a context envelope (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    History,
    Summaries,
    Lore,
    Memories,
    /// What the game master wrote the world, campaign and scene to be (their
    /// descriptions): what every agent plays inside.
    Setting,
    Notes,
    DirectorGuidance,
    CharacterGuidance,
}

impl Section {
    pub const ALL: [Section; 8] = [
        Section::History,
        Section::Summaries,
        Section::Lore,
        Section::Memories,
        Section::Setting,
        Section::Notes,
        Section::DirectorGuidance,
        Section::CharacterGuidance,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Section::History => "history",
            Section::Summaries => "summaries",
            Section::Lore => "lore",
            Section::Memories => "memories",
            Section::Setting => "setting",
            Section::Notes => "scenario / author notes",
            Section::DirectorGuidance => "director guidance",
            Section::CharacterGuidance => "character guidance",
        }
    }

    /// How a section sheds items when over budget.
    pub fn policy(self) -> DropPolicy {
        match self {
            // A gap in the middle of a conversation misleads more than a shorter one.
            Section::History | Section::Summaries => DropPolicy::KeepNewestContiguous,
            _ => DropPolicy::MostValuableFirst,
        }
    }
}

/// Percentages per section. Defaults are SPEC §3's, 30/10/15/20/10/5/10, with 5 of
/// history's 30 given to the setting (which SPEC §3 counted among the notes).
///
/// A plan read from a file names only the sections it changes: the ones left out keep
/// their default share (`[scene.budgets.percent]` with only `history = 40` changes only
/// history, and so does a campaign's `campaign budgets --history`). Shares that then add
/// up to more than 100 are scaled down in proportion when allocated ([`allocate`]): 40
/// with the other defaults is 110, so history gets 40/110 of the context; under 100, the
/// rest stays unplanned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BudgetPlan {
    #[serde(deserialize_with = "over_the_defaults")]
    pub percent: BTreeMap<Section, f64>,
}

/// The given shares laid over the default ones, so a section left out keeps its share
/// rather than silently getting 0%. Read as named fields, so a misspelt section is a
/// setting nothing reads (named at start with the one it likely meant), not a file that
/// fails to load.
fn over_the_defaults<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<BTreeMap<Section, f64>, D::Error> {
    #[derive(Deserialize)]
    struct Given {
        history: Option<f64>,
        summaries: Option<f64>,
        lore: Option<f64>,
        memories: Option<f64>,
        setting: Option<f64>,
        notes: Option<f64>,
        director_guidance: Option<f64>,
        character_guidance: Option<f64>,
    }
    let g = Given::deserialize(deserializer)?;
    let given = [
        (Section::History, g.history),
        (Section::Summaries, g.summaries),
        (Section::Lore, g.lore),
        (Section::Memories, g.memories),
        (Section::Setting, g.setting),
        (Section::Notes, g.notes),
        (Section::DirectorGuidance, g.director_guidance),
        (Section::CharacterGuidance, g.character_guidance),
    ];
    let mut percent = BudgetPlan::default().percent;
    percent.extend(given.into_iter().filter_map(|(section, share)| share.map(|share| (section, share))));
    Ok(percent)
}

impl Default for BudgetPlan {
    fn default() -> Self {
        let percent = [
            (Section::History, 25.0),
            (Section::Summaries, 10.0),
            (Section::Lore, 15.0),
            (Section::Memories, 20.0),
            (Section::Setting, 5.0),
            (Section::Notes, 10.0),
            (Section::DirectorGuidance, 5.0),
            (Section::CharacterGuidance, 10.0),
        ]
        .into_iter()
        .collect();
        Self { percent }
    }
}

impl BudgetPlan {
    pub fn percent(&self, section: Section) -> f64 {
        self.percent.get(&section).copied().filter(|p| p.is_finite() && *p > 0.0).unwrap_or(0.0)
    }
}

/// Token counts per section for `max_context_tokens`, with the shares of the sections
/// not in `present` handed to the present ones in proportion to their percentages.
///
/// If the plan's percentages add up to less than 100, the unplanned rest stays unplanned
/// (room for fixed blocks and the reply) and reallocation keeps that rest intact; a plan
/// over 100 is scaled down to 100.
pub fn allocate(plan: &BudgetPlan, max_context_tokens: u32, present: &[Section]) -> BTreeMap<Section, u32> {
    let planned: f64 = Section::ALL.iter().map(|s| plan.percent(*s)).sum();
    let present_sum: f64 = present.iter().map(|s| plan.percent(*s)).sum();
    let mut out = BTreeMap::new();
    for section in Section::ALL {
        let tokens = if present.contains(&section) && present_sum > 0.0 {
            // Share of the planned total this section gets once the absent ones are gone.
            let share = plan.percent(section) / present_sum * planned.min(100.0) / 100.0;
            (max_context_tokens as f64 * share + 1e-9).floor() as u32
        } else {
            0
        };
        out.insert(section, tokens);
    }
    out
}

/// How a section chooses what to drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropPolicy {
    /// Items are in time order; keep the newest run that fits, drop everything older.
    KeepNewestContiguous,
    /// Keep the highest-valued items that fit (skipping ones too large), in their
    /// original order.
    MostValuableFirst,
}

/// One candidate for a section: a history message, a memory hit, a lore entry...
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetItem {
    /// Stable id for the ledger (message number, memory id, lore entry uid).
    pub id: String,
    pub text: String,
    pub tokens: u32,
    /// Higher is more worth keeping (retrieval score, lore priority). Unused by
    /// [`DropPolicy::KeepNewestContiguous`].
    pub value: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DroppedItem {
    pub id: String,
    pub tokens: u32,
    pub reason: String,
}

/// What one section was given, used and dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SectionLedger {
    pub section: Section,
    pub percent: f64,
    pub allocated: u32,
    pub used: u32,
    pub kept: Vec<String>,
    pub dropped: Vec<DroppedItem>,
}

/// The budget ledger of one agent call.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BudgetLedger {
    /// The tokens the sections shared: the context less what the call kept off the top.
    pub max_context_tokens: u32,
    pub sections: Vec<SectionLedger>,
    /// The whole prompt as sent, estimated: the instructions, the turn, the sections'
    /// items with their markup, and what a structured call appends (its JSON Schema).
    /// 0 where the caller did not count it (and in ledgers stored before it was).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prompt_tokens: u32,
    /// The reply's `max_tokens` the call was planned with.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reply_tokens: u32,
    /// The model's whole context, which prompt and reply share.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub context_tokens: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl BudgetLedger {
    pub fn section(&self, section: Section) -> Option<&SectionLedger> {
        self.sections.iter().find(|s| s.section == section)
    }

    pub fn used(&self) -> u32 {
        self.sections.iter().map(|s| s.used).sum()
    }
}

/// Items worth at least this much are a call's own subject (a character's own sheet and
/// state, the scene's running summary, a chat card's description): when too large for
/// what is left they are cut to fit, never dropped whole.
pub const ESSENTIAL: f64 = 1e6;

/// Fit every section's items into its allocation. Returns the kept items per section
/// (in their original order) and the ledger.
///
/// A section that needs less than its share gives the rest to the sections that need
/// more (in proportion to their shares, up to what they need, see [`share_out`]), so what
/// the context has room for is used; the sections together never take more than their
/// shares did. The ledger's `allocated` is what a section had after that.
pub fn enforce(
    plan: &BudgetPlan,
    max_context_tokens: u32,
    candidates: &BTreeMap<Section, Vec<BudgetItem>>,
) -> (BTreeMap<Section, Vec<BudgetItem>>, BudgetLedger) {
    let present: Vec<Section> =
        Section::ALL.into_iter().filter(|s| candidates.get(s).is_some_and(|items| !items.is_empty())).collect();
    let shares: Vec<u32> = {
        let allocation = allocate(plan, max_context_tokens, &present);
        Section::ALL.iter().map(|s| allocation.get(s).copied().unwrap_or(0)).collect()
    };
    let items_of = |section: Section| candidates.get(&section).map(Vec::as_slice).unwrap_or_default();
    let needs: Vec<u32> = Section::ALL.iter().map(|s| items_of(*s).iter().map(|i| i.tokens).fold(0, u32::saturating_add)).collect();
    let allocation = share_out(&shares, &needs);
    let mut kept_out = BTreeMap::new();
    let mut ledger = BudgetLedger { max_context_tokens, sections: Vec::new(), ..Default::default() };
    for (index, section) in Section::ALL.into_iter().enumerate() {
        let mut items = items_of(section).to_vec();
        let allocated = allocation[index];
        let (keep, dropped) = fit(&mut items, allocated, section.policy());
        let kept: Vec<BudgetItem> = items.into_iter().zip(&keep).filter(|(_, k)| **k).map(|(i, _)| i).collect();
        ledger.sections.push(SectionLedger {
            section,
            percent: plan.percent(section),
            allocated,
            used: kept.iter().map(|i| i.tokens).sum(),
            kept: kept.iter().map(|i| i.id.clone()).collect(),
            dropped,
        });
        kept_out.insert(section, kept);
    }
    (kept_out, ledger)
}

/// Water-filling: the sum of `shares` handed out so each section gets its share up to
/// what it `needs`, and what those needing less leave goes to those needing more in
/// proportion to their shares, never past a need. A section whose share is 0 was turned
/// off and gets nothing; what nobody needs stays unhanded.
pub fn share_out(shares: &[u32], needs: &[u32]) -> Vec<u32> {
    let total: u64 = shares.iter().map(|s| u64::from(*s)).sum();
    let mut given: Vec<u32> = shares.iter().zip(needs).map(|(s, n)| (*s).min(*n)).collect();
    loop {
        let handed: u64 = given.iter().map(|g| u64::from(*g)).sum();
        let left = total.saturating_sub(handed);
        let open: Vec<usize> = (0..given.len()).filter(|i| given[*i] < needs[*i] && shares[*i] > 0).collect();
        if left == 0 || open.is_empty() {
            break;
        }
        let weights: Vec<u64> = open.iter().map(|i| u64::from(shares[*i])).collect();
        let weight_sum: u64 = weights.iter().sum();
        let mut gave = 0u64;
        for (k, i) in open.iter().enumerate() {
            let part = left * weights[k] / weight_sum.max(1);
            let add = part.min(u64::from(needs[*i] - given[*i]));
            given[*i] += add as u32;
            gave += add;
        }
        if gave == 0 {
            // Rounding left a few tokens over: one each, in order, while they last.
            let mut left = left;
            for i in open {
                if left == 0 {
                    break;
                }
                given[i] += 1;
                left -= 1;
            }
            break;
        }
    }
    given
}

/// `text` cut to at most `max_tokens` at a sentence or line boundary, marked with " …".
/// A text of three lines or more keeps its first line (a heading: whose sheet it is) and
/// its last (a closing state line) and loses the middle; when those alone do not fit, it
/// is cut from the start. `None` when not even a first sentence fits.
pub fn cut_to(text: &str, max_tokens: u32) -> Option<String> {
    use crate::llm::tokens::estimate;
    let text = text.trim_end();
    if estimate(text) <= max_tokens {
        return Some(text.to_string());
    }
    let attempt = |body: &str, tail: Option<&str>| -> Option<String> {
        let heading_end = if tail.is_some() { body.find('\n').unwrap_or(body.len()) } else { 0 };
        let mut best = None;
        for (i, c) in body.char_indices() {
            let after = i + c.len_utf8();
            let end = match c {
                '\n' => i,
                '.' | '!' | '?' | '…' if body[after..].starts_with(char::is_whitespace) => after,
                _ => continue,
            };
            if end < heading_end || body[..end].trim().is_empty() {
                continue;
            }
            let candidate = match tail {
                Some(tail) => format!("{} …\n{tail}", body[..end].trim_end()),
                None => format!("{} …", body[..end].trim_end()),
            };
            if estimate(&candidate) > max_tokens {
                break;
            }
            best = Some(candidate);
        }
        best
    };
    match text.rsplit_once('\n') {
        Some((body, tail)) if body.contains('\n') => attempt(body, Some(tail)).or_else(|| attempt(text, None)),
        _ => attempt(text, None),
    }
}

/// Cut an [`ESSENTIAL`] item that does not fit in `left` tokens; the ledger's line for it.
fn cut_essential(item: &mut BudgetItem, left: u32, allocated: u32) -> Option<DroppedItem> {
    if item.value < ESSENTIAL {
        return None;
    }
    let text = cut_to(&item.text, left)?;
    let tokens = crate::llm::tokens::estimate(&text).min(left);
    let dropped = DroppedItem {
        id: item.id.clone(),
        tokens: item.tokens.saturating_sub(tokens),
        reason: format!("cut from {} to {tokens} tokens at a sentence or line boundary: {left} left of {allocated}", item.tokens),
    };
    item.text = text;
    item.tokens = tokens;
    Some(dropped)
}

/// Decide per item whether it stays; the reasons for the ones that go. An
/// [`ESSENTIAL`] item too large for what is left is cut in place (its text and tokens
/// change, it is kept) and the cut is listed with the dropped ones.
pub fn fit(items: &mut [BudgetItem], allocated: u32, policy: DropPolicy) -> (Vec<bool>, Vec<DroppedItem>) {
    let mut keep = vec![false; items.len()];
    let mut dropped = Vec::new();
    let mut left = allocated;
    match policy {
        DropPolicy::KeepNewestContiguous => {
            let mut cut = false;
            for index in (0..items.len()).rev() {
                let item = &mut items[index];
                if !cut && item.tokens <= left {
                    left -= item.tokens;
                    keep[index] = true;
                } else if let Some(note) = (!cut).then(|| cut_essential(item, left, allocated)).flatten() {
                    left -= item.tokens;
                    keep[index] = true;
                    cut = true;
                    dropped.push(note);
                } else {
                    let reason = if cut {
                        "older than an item that did not fit".to_string()
                    } else {
                        format!("needs {} tokens, {left} left of {allocated}", item.tokens)
                    };
                    cut = true;
                    dropped.push(DroppedItem { id: item.id.clone(), tokens: item.tokens, reason });
                }
            }
            dropped.reverse();
        }
        DropPolicy::MostValuableFirst => {
            let mut order: Vec<usize> = (0..items.len()).collect();
            // Stable: equal values keep their given order.
            order.sort_by(|a, b| items[*b].value.total_cmp(&items[*a].value));
            for (position, &index) in order.iter().enumerate() {
                // A cut leaves room for the essential items after it (a card's short
                // personality after its long description) when there is any.
                let after: u32 = order[position + 1..]
                    .iter()
                    .filter(|i| items[**i].value >= ESSENTIAL)
                    .map(|i| items[*i].tokens)
                    .fold(0, u32::saturating_add);
                let item = &mut items[index];
                if item.tokens <= left {
                    left -= item.tokens;
                    keep[index] = true;
                } else if let Some(note) =
                    cut_essential(item, Some(left.saturating_sub(after)).filter(|room| *room > 0).unwrap_or(left), allocated)
                {
                    left -= item.tokens;
                    keep[index] = true;
                    dropped.push(note);
                } else {
                    dropped.push(DroppedItem {
                        id: item.id.clone(),
                        tokens: item.tokens,
                        reason: format!("value {:.3}: needs {} tokens, {left} left of {allocated}", item.value, item.tokens),
                    });
                }
            }
        }
    }
    (keep, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Section::*;

    fn check_allocation(max: u32, present: &[Section], expected: &[(Section, u32)]) {
        let got = allocate(&BudgetPlan::default(), max, present);
        for section in Section::ALL {
            let want = expected.iter().find(|(s, _)| *s == section).map(|(_, t)| *t).unwrap_or(0);
            assert_eq!(got[&section], want, "{section:?} with max {max} and present {present:?}");
        }
    }

    #[test]
    fn all_present_gets_the_default_percentages() {
        check_allocation(
            10_000,
            &Section::ALL,
            &[
                (History, 2500),
                (Summaries, 1000),
                (Lore, 1500),
                (Memories, 2000),
                (Setting, 500),
                (Notes, 1000),
                (DirectorGuidance, 500),
                (CharacterGuidance, 1000),
            ],
        );
    }

    #[test]
    fn empty_sections_share_is_reallocated_proportionally() {
        // Lore (15) and memories (20) absent: the remaining 65 scale up to 100.
        check_allocation(
            6500,
            &[History, Summaries, Setting, Notes, DirectorGuidance, CharacterGuidance],
            &[(History, 2500), (Summaries, 1000), (Setting, 500), (Notes, 1000), (DirectorGuidance, 500), (CharacterGuidance, 1000)],
        );
        // Only history: it gets everything.
        check_allocation(4096, &[History], &[(History, 4096)]);
        // Nothing present: nothing allocated.
        check_allocation(4096, &[], &[]);
    }

    #[test]
    fn counts_are_rounded_down() {
        // 1001 * 0.25 = 250.25 → 250; 1001 * 0.05 = 50.05 → 50; the sum never exceeds max.
        check_allocation(
            1001,
            &Section::ALL,
            &[
                (History, 250),
                (Summaries, 100),
                (Lore, 150),
                (Memories, 200),
                (Setting, 50),
                (Notes, 100),
                (DirectorGuidance, 50),
                (CharacterGuidance, 100),
            ],
        );
        // History + lore present: 25/40 and 15/40 of 1000 = 625 and 375.
        check_allocation(1000, &[History, Lore], &[(History, 625), (Lore, 375)]);
        for max in [257u32, 999, 4097, 131_071] {
            let total: u32 = allocate(&BudgetPlan::default(), max, &Section::ALL).values().sum();
            assert!(total <= max);
        }
    }

    #[test]
    fn a_plan_naming_some_sections_keeps_the_defaults_of_the_others() {
        let plan: BudgetPlan = toml::from_str("[percent]\nhistory = 35\n").unwrap();
        assert_eq!(plan.percent(History), 35.0);
        for section in Section::ALL.into_iter().filter(|s| *s != History) {
            assert_eq!(plan.percent(section), BudgetPlan::default().percent(section), "{section:?}");
        }
        // 110 in all: scaled to 100 in proportion, so nothing gets 0.
        let got = allocate(&plan, 1100, &Section::ALL);
        assert_eq!((got[&History], got[&Lore], got[&CharacterGuidance]), (350, 150, 100));
        // A stored campaign plan is JSON; an empty plan is the defaults.
        let stored: BudgetPlan = serde_json::from_str(r#"{"percent":{"lore":5.0}}"#).unwrap();
        assert_eq!((stored.percent(Lore), stored.percent(History)), (5.0, 25.0));
        assert_eq!(serde_json::from_str::<BudgetPlan>("{}").unwrap(), BudgetPlan::default());
        // Through the whole config file, as `[scene.budgets.percent]`.
        let config: crate::config::Config = toml::from_str("[scene.budgets.percent]\nhistory = 35\n").unwrap();
        assert_eq!(config.scene.budgets, plan);
    }

    #[test]
    fn a_plan_below_100_percent_keeps_its_unplanned_rest_when_reallocating() {
        let mut plan = BudgetPlan::default();
        plan.percent.insert(History, 10.0); // total now 85%
        let got = allocate(&plan, 1000, &[History, Memories]);
        // 10/30 and 20/30 of 850.
        assert_eq!(got[&History], 283);
        assert_eq!(got[&Memories], 566);
    }

    fn item(id: &str, tokens: u32, value: f64) -> BudgetItem {
        BudgetItem { id: id.into(), text: id.into(), tokens, value }
    }

    #[test]
    fn history_keeps_the_newest_contiguous_run() {
        let items = vec![item("m1", 10, 0.0), item("m2", 50, 0.0), item("m3", 10, 0.0), item("m4", 20, 0.0)];
        let (keep, dropped) = fit(&mut items.clone(), 40, DropPolicy::KeepNewestContiguous);
        assert_eq!(keep, vec![false, false, true, true]);
        // m1 would fit alone but is older than m2, which did not: no gap.
        assert_eq!(dropped.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), vec!["m1", "m2"]);
        assert!(dropped[1].reason.contains("needs 50 tokens, 10 left of 40"));
        assert!(dropped[0].reason.contains("older"));
    }

    #[test]
    fn memories_keep_the_most_valuable_that_fit_in_original_order() {
        let items = vec![item("a", 30, 0.2), item("b", 60, 0.9), item("c", 30, 0.5), item("d", 10, 0.1)];
        let (keep, dropped) = fit(&mut items.clone(), 100, DropPolicy::MostValuableFirst);
        // b (60) then c (30) then a (30) does not fit, d (10) does.
        assert_eq!(keep, vec![false, true, true, true]);
        assert_eq!(dropped.len(), 1);
        assert_eq!(dropped[0].id, "a");
    }

    #[test]
    fn unused_shares_flow_to_the_sections_that_need_them() {
        assert_eq!(share_out(&[100, 100, 100], &[10, 500, 0]), vec![10, 290, 0]);
        // In proportion to the shares, never past a need.
        assert_eq!(share_out(&[100, 300, 100], &[1000, 1000, 0]), vec![125, 375, 0]);
        assert_eq!(share_out(&[100, 300, 100], &[1000, 310, 0]), vec![190, 310, 0]);
        // A share of 0 is a section turned off: it is handed nothing.
        assert_eq!(share_out(&[0, 300, 100], &[1000, 10, 0]), vec![0, 10, 0]);
        let mut candidates = BTreeMap::new();
        candidates.insert(History, vec![item("h1", 50, 0.0)]);
        candidates.insert(CharacterGuidance, vec![item("own sheet", 900, ESSENTIAL)]);
        let (kept, ledger) = enforce(&BudgetPlan::default(), 2000, &candidates);
        // Character guidance's share is 10/40 of 2000 = 500, history's 1500: history
        // needs 50 and hands the rest on.
        assert_eq!(kept[&CharacterGuidance].len(), 1);
        assert_eq!(ledger.section(CharacterGuidance).unwrap().allocated, 900);
        assert!(ledger.section(CharacterGuidance).unwrap().dropped.is_empty());
    }

    #[test]
    fn an_essential_item_too_large_is_cut_at_a_boundary_keeping_its_heading_and_state() {
        let body: String = (1..=80).map(|n| format!("Sentence number {n} of the card. ")).collect();
        let text = format!("Vex (in the scene)\ndescription: {body}\nState: intentions: steal the ledger");
        let tokens = crate::llm::tokens::estimate(&text);
        let mut items = vec![BudgetItem { id: "character Vex".into(), text: text.clone(), tokens, value: ESSENTIAL }, item("other", 300, 1.0)];
        let (keep, dropped) = fit(&mut items, 200, DropPolicy::MostValuableFirst);
        assert_eq!(keep, vec![true, false]);
        let cut = &items[0];
        assert!(cut.tokens <= 200 && cut.tokens > 100, "{}", cut.tokens);
        assert!(cut.text.starts_with("Vex (in the scene)\ndescription: Sentence number 1 of the card."), "{}", cut.text);
        assert!(cut.text.ends_with(". …\nState: intentions: steal the ledger"), "{}", cut.text);
        assert_eq!(dropped[0].id, "character Vex");
        assert!(dropped[0].reason.starts_with(&format!("cut from {tokens} to {}", cut.tokens)), "{}", dropped[0].reason);
        assert_eq!(dropped[1].id, "other");
        // An item not essential is still dropped whole.
        let mut plain = vec![BudgetItem { value: 1.0, ..items[0].clone() }];
        plain[0].text = text;
        plain[0].tokens = tokens;
        assert_eq!(fit(&mut plain, 200, DropPolicy::MostValuableFirst).0, vec![false]);
        // Nothing fits, not even one sentence: dropped.
        assert_eq!(cut_to("One long sentence without any end at all here", 3), None);
    }

    #[test]
    fn enforce_builds_the_ledger_and_never_exceeds_a_section() {
        let mut candidates = BTreeMap::new();
        candidates.insert(History, (0..20).map(|i| item(&format!("h{i}"), 25, 0.0)).collect::<Vec<_>>());
        candidates.insert(Memories, (0..10).map(|i| item(&format!("mem{i}"), 40, i as f64)).collect::<Vec<_>>());
        candidates.insert(Lore, Vec::new());
        let (kept, ledger) = enforce(&BudgetPlan::default(), 1000, &candidates);
        // Present: history (25) and memories (20) → 555 and 444; history needs only 500,
        // and memories 400, so 99 stay unhanded.
        let h = ledger.section(History).unwrap();
        assert_eq!((h.allocated, h.used), (500, 500));
        assert_eq!(kept[&History].len(), 20);
        let m = ledger.section(Memories).unwrap();
        assert_eq!((m.allocated, m.used), (400, 400));
        assert_eq!(m.kept, (0..10).map(|i| format!("mem{i}")).collect::<Vec<_>>());
        assert_eq!(ledger.section(Lore).unwrap().allocated, 0);
        for s in &ledger.sections {
            assert!(s.used <= s.allocated);
        }
        // Tighter: memories keep the five most valuable.
        let (kept, ledger) = enforce(&BudgetPlan::default(), 500, &candidates);
        assert_eq!(ledger.section(Memories).unwrap().allocated, 222);
        assert_eq!(kept[&Memories].iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), vec!["mem5", "mem6", "mem7", "mem8", "mem9"]);
        assert_eq!(ledger.section(History).unwrap().kept.len(), 11);
        assert_eq!(ledger.section(History).unwrap().dropped.len(), 9);
    }
}
