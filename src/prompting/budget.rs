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
    Notes,
    DirectorGuidance,
    CharacterGuidance,
}

impl Section {
    pub const ALL: [Section; 7] = [
        Section::History,
        Section::Summaries,
        Section::Lore,
        Section::Memories,
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

/// Percentages per section. Defaults are SPEC §3's: 30/10/15/20/10/5/10.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BudgetPlan {
    pub percent: BTreeMap<Section, f64>,
}

impl Default for BudgetPlan {
    fn default() -> Self {
        let percent = [
            (Section::History, 30.0),
            (Section::Summaries, 10.0),
            (Section::Lore, 15.0),
            (Section::Memories, 20.0),
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

/// Fit every section's items into its allocation. Returns the kept items per section
/// (in their original order) and the ledger.
pub fn enforce(
    plan: &BudgetPlan,
    max_context_tokens: u32,
    candidates: &BTreeMap<Section, Vec<BudgetItem>>,
) -> (BTreeMap<Section, Vec<BudgetItem>>, BudgetLedger) {
    let present: Vec<Section> =
        Section::ALL.into_iter().filter(|s| candidates.get(s).is_some_and(|items| !items.is_empty())).collect();
    let allocation = allocate(plan, max_context_tokens, &present);
    let mut kept_out = BTreeMap::new();
    let mut ledger = BudgetLedger { max_context_tokens, sections: Vec::new(), ..Default::default() };
    for section in Section::ALL {
        let items = candidates.get(&section).map(Vec::as_slice).unwrap_or_default();
        let allocated = allocation.get(&section).copied().unwrap_or(0);
        let (keep, dropped) = fit(items, allocated, section.policy());
        let kept: Vec<BudgetItem> = items.iter().zip(&keep).filter(|(_, k)| **k).map(|(i, _)| i.clone()).collect();
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

/// Decide per item whether it stays; the reasons for the ones that go.
pub fn fit(items: &[BudgetItem], allocated: u32, policy: DropPolicy) -> (Vec<bool>, Vec<DroppedItem>) {
    let mut keep = vec![false; items.len()];
    let mut dropped = Vec::new();
    let mut left = allocated;
    match policy {
        DropPolicy::KeepNewestContiguous => {
            let mut cut = false;
            for (index, item) in items.iter().enumerate().rev() {
                if !cut && item.tokens <= left {
                    left -= item.tokens;
                    keep[index] = true;
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
            for index in order {
                let item = &items[index];
                if item.tokens <= left {
                    left -= item.tokens;
                    keep[index] = true;
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
                (History, 3000),
                (Summaries, 1000),
                (Lore, 1500),
                (Memories, 2000),
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
            &[History, Summaries, Notes, DirectorGuidance, CharacterGuidance],
            &[(History, 3000), (Summaries, 1000), (Notes, 1000), (DirectorGuidance, 500), (CharacterGuidance, 1000)],
        );
        // Only history: it gets everything.
        check_allocation(4096, &[History], &[(History, 4096)]);
        // Nothing present: nothing allocated.
        check_allocation(4096, &[], &[]);
    }

    #[test]
    fn counts_are_rounded_down() {
        // 1001 * 0.30 = 300.3 → 300; 1001 * 0.05 = 50.05 → 50; the sum never exceeds max.
        check_allocation(
            1001,
            &Section::ALL,
            &[
                (History, 300),
                (Summaries, 100),
                (Lore, 150),
                (Memories, 200),
                (Notes, 100),
                (DirectorGuidance, 50),
                (CharacterGuidance, 100),
            ],
        );
        // History + lore present: 30/45 and 15/45 of 1000 = 666.67 and 333.33.
        check_allocation(1000, &[History, Lore], &[(History, 666), (Lore, 333)]);
        for max in [257u32, 999, 4097, 131_071] {
            let total: u32 = allocate(&BudgetPlan::default(), max, &Section::ALL).values().sum();
            assert!(total <= max);
        }
    }

    #[test]
    fn a_plan_below_100_percent_keeps_its_unplanned_rest_when_reallocating() {
        let mut plan = BudgetPlan::default();
        plan.percent.insert(History, 10.0); // total now 80%
        let got = allocate(&plan, 1000, &[History, Memories]);
        // 10/30 and 20/30 of 800.
        assert_eq!(got[&History], 266);
        assert_eq!(got[&Memories], 533);
    }

    fn item(id: &str, tokens: u32, value: f64) -> BudgetItem {
        BudgetItem { id: id.into(), text: id.into(), tokens, value }
    }

    #[test]
    fn history_keeps_the_newest_contiguous_run() {
        let items = vec![item("m1", 10, 0.0), item("m2", 50, 0.0), item("m3", 10, 0.0), item("m4", 20, 0.0)];
        let (keep, dropped) = fit(&items, 40, DropPolicy::KeepNewestContiguous);
        assert_eq!(keep, vec![false, false, true, true]);
        // m1 would fit alone but is older than m2, which did not: no gap.
        assert_eq!(dropped.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), vec!["m1", "m2"]);
        assert!(dropped[1].reason.contains("needs 50 tokens, 10 left of 40"));
        assert!(dropped[0].reason.contains("older"));
    }

    #[test]
    fn memories_keep_the_most_valuable_that_fit_in_original_order() {
        let items = vec![item("a", 30, 0.2), item("b", 60, 0.9), item("c", 30, 0.5), item("d", 10, 0.1)];
        let (keep, dropped) = fit(&items, 100, DropPolicy::MostValuableFirst);
        // b (60) then c (30) then a (30) does not fit, d (10) does.
        assert_eq!(keep, vec![false, true, true, true]);
        assert_eq!(dropped.len(), 1);
        assert_eq!(dropped[0].id, "a");
    }

    #[test]
    fn enforce_builds_the_ledger_and_never_exceeds_a_section() {
        let mut candidates = BTreeMap::new();
        candidates.insert(History, (0..20).map(|i| item(&format!("h{i}"), 25, 0.0)).collect::<Vec<_>>());
        candidates.insert(Memories, (0..10).map(|i| item(&format!("mem{i}"), 40, i as f64)).collect::<Vec<_>>());
        candidates.insert(Lore, Vec::new());
        let (kept, ledger) = enforce(&BudgetPlan::default(), 1000, &candidates);
        // Present: history (30) and memories (20) → 600 and 400.
        let h = ledger.section(History).unwrap();
        assert_eq!((h.allocated, h.used), (600, 500));
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
        assert_eq!(ledger.section(Memories).unwrap().allocated, 200);
        assert_eq!(kept[&Memories].iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), vec!["mem5", "mem6", "mem7", "mem8", "mem9"]);
        assert_eq!(ledger.section(History).unwrap().kept.len(), 12);
        assert_eq!(ledger.section(History).unwrap().dropped.len(), 8);
    }
}
